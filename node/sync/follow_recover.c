/* SPDX-License-Identifier: Apache-2.0 */
/* A step a crash interrupted, finished from the journal when a trusted record still vouches for it. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include "base/fail.h"
#include "manifest/layout.h"
#include "node/sync/fetch_stage.h"
#include "manifest/patch_objects.h"
#include "node/sync/follower.h"

/* Whether the journal J speaks of a record trusted now: the one it names, from the index
 * (where it was stored as verified before the journal was written) or else from the store,
 * signed by a trusted key, under its own key, of this run, with J's kind, step, base and result.
 * A journal nobody's record stands behind (planted in the state directory) is not redone. */
static int journal_vouched(pulse_follower *f, const node_journal *j)
{
    listed e;
    pulse_record rec;
    char want[SYNC_KEY_MAX];
    int have = 0, r = 0;
    if (parse_rel(f->o.trust, j->rel, &e) != 0)
        return pulse_fail(PULSE_ERR_AUTH, "it names %s, not the record of a trusted key", j->rel);
    uint8_t *bytes = NULL;
    size_t len = 0;
    int verdict = 0;
    if (pulse_index_get_record(f->ix, j->rel, &bytes, &len, &verdict) == 0 && verdict == PULSE_VERDICT_OK &&
        pulse_record_verify(bytes, len, f->o.trust, NULL, &rec) == 0)
        have = 1;
    free(bytes);
    if (!have) {
        uint8_t *b = NULL;
        uint64_t moved = 0;
        r = fetch_record(f, j->rel, NULL, 0, &rec, &b, &len, &moved);
        f->c.bytes_fetched += moved;
        pulse_store_free(b);
        if (r)
            return r;
    }
    if (pulse_record_key(&rec, want, sizeof want) != 0 || strcmp(want, j->rel) != 0 || strcmp(rec.run, f->run) != 0 ||
        rec.kind != j->kind || rec.step != j->step || memcmp(rec.result, j->result, 32) != 0 ||
        (j->kind == PULSE_RECORD_SYNC_PATCH && memcmp(rec.base, j->base, 32) != 0))
        r = pulse_fail(PULSE_ERR_MISMATCH, "the record %s is not the step the journal says (kind, step, base or result)",
                       j->rel);
    /* a staged step's patch head is the one the record names, where it names one */
    else if (j->staged && rec.n_objects >= 2 && !strcmp(rec.objects[1].role, PULSE_ROLE_PATCH_INDEX) &&
             memcmp(rec.objects[1].digest, j->head, 32) != 0)
        r = pulse_fail(PULSE_ERR_MISMATCH, "the journal's patch head is not the one the record %s names", j->rel);
    pulse_record_clear(&rec);
    return r;
}

int follower_recover(pulse_follower *f, int *did)
{
    node_journal j;
    int found = 0;
    if (did)
        *did = 0;
    f->recovered = 1;
    if (in_memory(f))
        return 0;   /* a journal in the directory speaks of a file, not of these buffers */
    weights_unmap(f);
    journal_sweep(f->o.state_dir);
    int r = journal_read(f->o.state_dir, &j, &found);
    if (r || !found)
        return r;
    if (did)
        *did = 1;
    char st[24];
    u64s(st, sizeof st, j.step);
    if ((r = journal_vouched(f, &j)) != 0) {
        if (!is_verdict(r) && r != PULSE_ERR_NOTFOUND) {
            /* The store is down and the index does not have it: decided on a later pull. */
            f->recovered = 0;
            return fail_prefixed(r, "checking the journal's record");
        }
        /* Not redone, and the weights are not taken for its result: hashed as they are, and
         * replaced from a keyframe if no trusted record produces them. */
        follow_log(f, "journal-refused", "step", st, "record", j.rel, "reason", pulse_last_error(), NULL);
        pulse_clear_error();
        f->known = 0;
        f->suspect = 1;
        return journal_clear(f->o.state_dir, sync_each_step(f));
    }
    if (j.phase == JOURNAL_APPLYING && j.kind == PULSE_RECORD_SYNC_PATCH) {
        /* The weights may be torn: every position the absolute patch names gets its final
         * value again; the rest was never written. So the base check is skipped (the patch's
         * own base is given as the target's) and the result check decides. */
        char jpath[4096];
        pulse_patch *p = NULL;
        pulse_ckpt *w = NULL;
        r = j.staged ? journal_data_path(f->o.state_dir, jpath, sizeof jpath)
                     : journal_patch_path(f->o.state_dir, jpath, sizeof jpath);
        if (!r && j.staged) {
            /* the staged step's changes written again, then the result hashed whole */
            int jfd = open(jpath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            uint8_t id[32];
            char h1[65], h2[65];
            if (jfd < 0)
                r = pulse_fail_errno(PULSE_ERR_IO, "open %s", jpath);
            if (!r)
                r = pulse_ckpt_open(&w, f->o.weights_path, PULSE_CKPT_WRITE);
            if (!r)
                r = patch_stage_replay(jfd, j.head, w, f->o.threads);
            if (jfd >= 0)
                close(jfd);
            if (!r)
                r = pulse_ckpt_state_id(w, f->o.threads, id);
            if (!r && memcmp(id, j.result, 32) != 0)
                r = pulse_fail(PULSE_ERR_CORRUPT, "the weights replayed from %s are state %.16s.., not the step's "
                               "result %.16s..", jpath, pulse_id_hex(id, h1), pulse_id_hex(j.result, h2));
        } else if (!r) {
            r = pulse_patch_open(&p, jpath);
        }
        if (!r && !j.staged && (pulse_patch_values(p) != PULSE_VALUES_ABS || memcmp(pulse_patch_base_id(p), j.base, 32) ||
                   memcmp(pulse_patch_result_id(p), j.result, 32)))
            r = pulse_fail(PULSE_ERR_FORMAT, "journal patch %s is not the absolute patch of step %s", jpath, st);
        if (!r && !j.staged)
            r = pulse_ckpt_open(&w, f->o.weights_path, PULSE_CKPT_WRITE);
        if (!r && !j.staged) {
            pulse_patch_apply_opts ao;
            pulse_patch_apply_opts_default(&ao);
            ao.threads = f->o.threads;
            ao.trust_base_id = pulse_patch_base_id(p);
            r = pulse_patch_apply_ex(p, w, &ao);
        }
        if (!r)
            r = pulse_ckpt_sync(w);
        pulse_ckpt_close(&w);
        pulse_patch_close(&p);
        if (r && f->note.stale) {
            /* Torn by a restart of the machine, beyond this one step: a keyframe mends it. */
            pulse_clear_error();
            weights_lost(f, "journal-recovery-failed");
            return journal_clear(f->o.state_dir, sync_each_step(f));
        }
        if (r)
        {
            char pre[4200];
            snprintf(pre, sizeof pre, "recovery of step %s from the journal in %s", st, f->o.state_dir);
            return fail_prefixed(r, pre);
        }
        if (f->note.stale && (r = note_settled(f)) != 0)   /* the recovery synced them, whole */
            return r;
    } else if (j.phase == JOURNAL_APPLIED && f->note.stale) {
        /* "Applied" before a restart of the machine says nothing of what the disk kept: the
         * hook and receipt are redone only for weights that hash to the result. */
        uint8_t state[32];
        if (access(f->o.weights_path, F_OK) != 0 || hash_weights(f, state) != 0 || memcmp(state, j.result, 32)) {
            pulse_clear_error();
            weights_lost(f, "no-state");
            return journal_clear(f->o.state_dir, sync_each_step(f));
        }
        if ((r = note_settled(f)) != 0)
            return r;
    } else if (j.phase == JOURNAL_APPLYING) {
        /* Keyframe restore renames into place: the weights are the old state or the result. */
        uint8_t state[32];
        if (access(f->o.weights_path, F_OK) != 0 || hash_weights(f, state) != 0 || memcmp(state, j.result, 32)) {
            if (f->log)
                follow_log(f, "recovered", "step", st, "action", "keyframe-not-reached", NULL);
            return journal_clear(f->o.state_dir, sync_each_step(f));
        }
    }
    if (f->log)
        follow_log(f, "recovered", "step", st, "phase", j.phase == JOURNAL_APPLIED ? "applied" : "applying", NULL);
    pulse_sync_step s;
    memset(&s, 0, sizeof s);
    memset(&f->ph, 0, sizeof f->ph);   /* a step finished from the journal: no phases of its own */
    s.step = j.step;
    s.kind = j.kind;
    memcpy(s.base, j.base, 32);
    memcpy(s.result, j.result, 32);
    snprintf(s.record_key, sizeof s.record_key, "%s", j.rel);
    return finish_step(f, &j, &s);
}
