/* SPDX-License-Identifier: Apache-2.0 */
/* What the weights hold: their state id, known, hashed or lost, and the mapping kept from step to step. */
#include <stdlib.h>
#include <unistd.h>
#include "base/fail.h"
#include "manifest/layout.h"
#include "node/sync/follower.h"

/* The weights as events name them: their path, or "(engine)" / "(memory)". */
const char *weights_name(const pulse_follower *f)
{
    return f->engine ? "(engine)" : in_memory(f) ? "(memory)" : f->o.weights_path;
}

/* The weights' state id, hashed on the handle's threads (the file, or the tensors in memory). */
int hash_weights(pulse_follower *f, uint8_t state[32])
{
    if (in_memory(f)) {
        int r = pulse_ckpt_state_id(f->o.weights, f->o.threads, state);
        return r ? fail_prefixed(r, "weights in memory") : 0;
    }
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_open(&c, f->o.weights_path, PULSE_CKPT_READ);
    if (!r)
        r = pulse_ckpt_state_id(c, f->o.threads, state);
    pulse_ckpt_close(&c);
    if (r) {
        char p[4200];
        snprintf(p, sizeof p, "weights %s", f->o.weights_path);
        return fail_prefixed(r, p);
    }
    return 0;
}

/* Weights written without a sync before the machine restarted, and not whole now: the disk
 * kept only some of the writes. They are no one's state, so the newest keyframe replaces them
 * (temporary file and rename), as if they were missing; the note stays until it has. */
void weights_lost(pulse_follower *f, const char *why)
{
    if (f->log)
        follow_log(f, "weights-lost", "weights", f->o.weights_path, "reason", why, NULL);
    f->known = 1;
    f->have = 0;
}

/* Whether a record trusted now produces STATE at STEP: the verified record the index kept for
 * it, verified again against today's trust set (a store that lost it, or went back to an older
 * snapshot, does not make it untrusted), else one in the listing. */
static int state_trusted(pulse_follower *f, listing *l, uint64_t step, const uint8_t state[32])
{
    pulse_index_link *links = NULL;
    size_t n = 0;
    int ok = 0;
    if (pulse_index_chain(f->ix, f->run, step, &links, &n) == 0) {
        for (size_t i = 0; i < n && !ok && links[i].step == step; i++) {
            uint8_t *bytes = NULL;
            size_t len = 0;
            int verdict = 0;
            pulse_record rec;
            if (memcmp(links[i].result, state, 32) != 0 ||
                pulse_index_get_record(f->ix, links[i].key, &bytes, &len, &verdict) != 0)
                continue;
            if (verdict == PULSE_VERDICT_OK && pulse_record_verify(bytes, len, f->o.trust, NULL, &rec) == 0) {
                ok = rec.step == step && !memcmp(rec.result, state, 32) && !strcmp(rec.run, f->run);
                pulse_record_clear(&rec);
            }
            free(bytes);
        }
    }
    free(links);
    for (size_t i = 0; i < l->n && !ok; i++)
        if (l->v[i].step == step && get_listed(f, &l->v[i]) == 0 && !memcmp(l->v[i].rec.result, state, 32))
            ok = 1;
    pulse_clear_error();
    return ok;
}

/* The index says the weights hold STEP/STATE, but no trusted record produces that state (its
 * signer's key was taken out of the trust set): said loudly; by default the state is treated
 * as none, so the newest trusted keyframe replaces it, unless the caller keeps it. */
void untrusted_state(pulse_follower *f, uint64_t step, const uint8_t state[32])
{
    char st[24], hex[65];
    u64s(st, sizeof st, step);
    pulse_id_hex(state, hex);
    f->c.untrusted_state = 1;
    follow_log(f, "untrusted-state", "step", st, "state", hex, "action", f->keep_untrusted ? "kept" : "keyframe", NULL);
    if (!f->keep_untrusted)
        f->have = 0;
}

/* The state the weights hold: hashed once, then its step from the index (or, for weights
 * this index did not write, from the newest trusted record that produces exactly it). */
int held_state(pulse_follower *f, listing *l)
{
    f->have = 0;
    if (f->engine) {
        /* Nothing to hash: the engine holds what this state directory last delivered to it,
         * which a callback that refused a step never changed. */
        pulse_index_applied a;
        f->known = 1;
        if (pulse_index_last_applied(f->ix, f->run, &a) == 0) {
            f->have = 1;
            f->step = a.step;
            memcpy(f->state, a.state, 32);
            if (!state_trusted(f, l, a.step, a.state))
                untrusted_state(f, a.step, a.state);
        }
        return 0;
    }
    if (in_memory(f)) {
        /* Only the state this index last applied is recognised: anything else in memory (a
         * fresh model) is replaced from a keyframe, without fetching every record to look. */
        uint8_t state[32];
        pulse_index_applied a;
        int r = hash_weights(f, state);
        if (r)
            return r;
        f->known = 1;
        if (pulse_index_last_applied(f->ix, f->run, &a) == 0 && !memcmp(a.state, state, 32)) {
            f->have = 1;
            f->step = a.step;
            memcpy(f->state, state, 32);
            if (!state_trusted(f, l, a.step, state))
                untrusted_state(f, a.step, state);
        }
        return 0;
    }
    if (access(f->o.weights_path, F_OK) != 0) {
        f->known = 1;
        return 0;
    }
    uint8_t state[32];
    int r = hash_weights(f, state);
    if (r)
        return r;
    pulse_index_applied a;
    if (pulse_index_last_applied(f->ix, f->run, &a) == 0 && !memcmp(a.state, state, 32)) {
        f->known = f->have = 1;
        f->step = a.step;
        memcpy(f->state, state, 32);
        if (!state_trusted(f, l, a.step, state))
            untrusted_state(f, a.step, state);
        return f->note.stale ? note_settled(f) : 0;   /* read back whole from the disk */
    }
    for (size_t i = l->n; i-- > 0;) {
        if (get_listed(f, &l->v[i]) == 0 && !memcmp(l->v[i].rec.result, state, 32)) {
            f->known = f->have = 1;
            f->step = l->v[i].rec.step;
            memcpy(f->state, state, 32);
            return f->note.stale ? note_settled(f) : 0;
        }
    }
    char hex[65];
    if (f->note.stale || f->suspect) {
        weights_lost(f, f->suspect ? "journal-refused" : "no-state");
        return 0;
    }
    return pulse_fail(PULSE_ERR_MISMATCH, "weights %s hold state %.16s..., which no trusted record of run %s produces",
                      f->o.weights_path, pulse_id_hex(state, hex), f->run);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* The weights file open writable: the mapping of the last step when the file is still as this
 * handle left it (1), else opened afresh (0). */
int weights_mapped(pulse_follower *f)
{
    struct stat now;
    if (f->w && (stat(f->o.weights_path, &now) != 0 || !same_file(&now, &f->w_stat)))
        weights_unmap(f);
    return f->w ? 1 : pulse_ckpt_open(&f->w, f->o.weights_path, PULSE_CKPT_WRITE);
}

/* The mapping let go of, once no check reads it. */
void weights_unmap(pulse_follower *f)
{
    follower_settle_check(f, 1);
    pulse_ckpt_close(&f->w);
}

/* After this handle wrote the weights: what they look like now, for the next step's mapping. */
void weights_written(pulse_follower *f)
{
    if (f->w && stat(f->o.weights_path, &f->w_stat) != 0)
        weights_unmap(f);
}
