/* SPDX-License-Identifier: Apache-2.0 */
/* One verified step applied under the journal: a patch staged and written in one pass, an engine's, or a keyframe. */
#include <fcntl.h>
#include <unistd.h>
#include "base/durable.h"
#include "base/fail.h"
#include "manifest/layout.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/sync/fetch_stage.h"
#include "node/patch/patch_take.h"
#include "manifest/patch_objects.h"
#include "node/sync/follower.h"

/* A journal protects a file against a crash in the middle of a write; memory does not
 * outlive the crash, so in memory nothing is journalled. */
static int step_journal_write(pulse_follower *f, const node_journal *j)
{
    return in_memory(f) ? 0 : journal_write(f->o.state_dir, j, sync_each_step(f));
}

static int step_journal_clear(pulse_follower *f)
{
    return in_memory(f) ? 0 : journal_clear(f->o.state_dir, sync_each_step(f));
}

static void sync_step_of(const pulse_record *rec, const char *rel, uint64_t moved, pulse_sync_step *s)
{
    memset(s, 0, sizeof *s);
    sync_step_from_record(s, rec, rel);
    s->moved_bytes = moved;
}

/* The journal entry of a step about to write the weights: a sync-patch step names its base,
 * a keyframe none. */
static node_journal journal_applying(const pulse_record *rec, const char *rel)
{
    node_journal j = { .phase = JOURNAL_APPLYING, .kind = rec->kind, .step = rec->step };
    if (rec->kind == PULSE_RECORD_SYNC_PATCH)
        memcpy(j.base, rec->base, 32);
    memcpy(j.result, rec->result, 32);
    snprintf(j.rel, sizeof j.rel, "%s", rel);
    return j;
}

/* After the weights reached the step's result: the applied row (once: a recovery may find
 * it already there), the journal's APPLIED phase, the caller's callback (hook, receipt), and
 * the journal removed. */
int finish_step(pulse_follower *f, const node_journal *j, const pulse_sync_step *s)
{
    pulse_index_applied a;
    int r = 0;
    double t0 = pulse_monotonic_s();
    if (pulse_index_last_applied(f->ix, f->run, &a) != 0 || a.step != j->step || memcmp(a.state, j->result, 32))
        r = pulse_index_mark_applied(f->ix, f->run, j->step, j->result, (uint64_t)time(NULL), weights_name(f));
    f->ph.index += 1e3 * (pulse_monotonic_s() - t0);
    f->known = f->have = 1;
    f->step = j->step;
    memcpy(f->state, j->result, 32);
    f->c.untrusted_state = 0;
    node_journal done = *j;
    done.phase = JOURNAL_APPLIED;
    if (!r && j->phase != JOURNAL_APPLIED)
        r = step_journal_write(f, &done);
    double took = -1;
    if (!r) {
        f->c.steps_applied++;
        took = f->step_t0 > 0 ? pulse_monotonic_s() - f->step_t0 : -1;
        if (took >= 0)
            f->c.last_step_seconds = took;
    }
    /* The callback runs before the journal goes: a crash during it runs it again on restart. */
    f->ph.hook = 0;
    int stop = !r && f->o.on_step && f->o.on_step(f->o.ctx, s) != 0;
    if (!r && f->log) {
        /* after the callback, so the event carries what its hook took */
        char st[24], by[24], ms[24], hex[65], pm[8][24];
        u64s(st, sizeof st, s->step);
        u64s(by, sizeof by, s->moved_bytes);
        const char *kind = pulse_record_kind_name(s->kind);
        pulse_id_hex(s->result, hex);
        snprintf(ms, sizeof ms, "%.1f", 1e3 * took);
        const double pv[8] = { f->ph.seen, f->ph.fetch, f->ph.verify, f->ph.journal, f->ph.apply, f->ph.check,
                               f->ph.hook, f->ph.index };
        for (int i = 0; i < 8; i++)
            snprintf(pm[i], sizeof pm[i], "%.1f", pv[i]);
        if (took >= 0)
            follow_log(f, "applied", "step", st, "kind", kind, "bytes", by, "ms", ms, "seen_ms", pm[0], "fetch_ms",
                       pm[1], "verify_ms", pm[2], "journal_ms", pm[3], "apply_ms", pm[4], "check_ms", pm[5],
                       "hook_ms", pm[6], "index_ms", pm[7], "state", hex, NULL);
        else   /* finished from the journal: when it started is not known */
            follow_log(f, "applied", "step", st, "kind", kind, "bytes", by, "state", hex, NULL);
    }
    if (!r)
        r = step_journal_clear(f);
    if (!r && stop) {
        f->stopped = 1;
        r = pulse_fail(PULSE_ERR_INVALID, "stopped by the caller after step %" PRIu64, s->step);
    }
    return r;
}

/* A step for weights an engine holds: the patch (or the chunks of the engine's slices) fetched
 * and checked whole, then handed to the engine, which applies it where its tensors live. */
static int apply_patch_engine(pulse_follower *f, const pulse_record *rec, const char *rel, uint64_t *moved)
{
    pulse_patch *p = NULL;
    int r;
    void *map = NULL;
    uint64_t len = 0;
    if (f->slices.n)
        r = sync_fetch_patch_slices(f->st, f->run, rec, &f->slices, &p, moved);
    else if ((r = sync_fetch_patch_file(f->st, f->run, rec, f->o.state_dir, &map, &len, moved)) == 0)
        r = patch_open_map_take(&p, map, (size_t)len);
    if (!r && (memcmp(pulse_patch_base_id(p), rec->base, 32) || memcmp(pulse_patch_result_id(p), rec->result, 32)))
        r = pulse_fail(PULSE_ERR_MISMATCH, "the patch's own state ids differ from the record's");
    /* The whole patch is checked before the engine sees any of it: a step is all or nothing. */
    pulse_sync_step s;
    sync_step_of(rec, rel, *moved, &s);
    if (!r)
        r = pulse_patch_verify(p, NULL, f->o.threads);
    if (!r && f->o.on_patch(f->o.engine_ctx, &s, p) != 0)
        r = pulse_fail(PULSE_ERR_INVALID, "the engine refused step %" PRIu64, rec->step);
    pulse_patch_close(&p);
    if (r) {
        f->known = 0;
        return r;
    }
    node_journal j = journal_applying(rec, rel);
    return finish_step(f, &j, &s);
}

/* follow_internal.h: a failed check refuses the step for good and leaves the weights unknown. */
int follower_settle_check(pulse_follower *f, int wait)
{
    if (!wait && !late_check_ended(&f->late))
        return 0;
    uint64_t step = 0;
    int r = late_check_wait(&f->late, &step);
    if (!r)
        return 0;
    /* The weights are not what the step's record says: no state this follower knows (a local
     * fault, or a publisher whose patch does not give its result). The step is refused for good,
     * as it is when the check comes before the write; the weights are hashed again and, as no
     * record produces them, replaced from the newest keyframe. */
    char st[24], why[400];
    u64s(st, sizeof st, step);
    snprintf(why, sizeof why, "%s", pulse_last_error());
    follow_log(f, "result-mismatch", "step", st, "reason", why, NULL);
    pulse_fail(PULSE_ERR_CORRUPT, "its patch did not give its result (checked after the write): %s", why);
    refuse_step(f, PULSE_ERR_CORRUPT, f->late_rel);
    f->known = 0;
    f->suspect = 1;
    pulse_ckpt_close(&f->w);
    return pulse_fail(PULSE_ERR_IO, "the weights failed the result check of step %s: %s", st, why);
}

/* A step of a weights file or of tensors in memory, in one pass over the weights: the patch
 * fetched as ranges and each chunk staged against the weights as it arrives (digest, decode,
 * the result's span beside the weights, its changes into the journal, the state chunks hashed),
 * so the result's state id is known, and checked against the record's, before a byte of the
 * weights is written; this checks the base too (weights that are not the base give another
 * result). Then the journal entry, and one scatter of the changes into the weights. A crash
 * during it is mended by replaying the journal (follower_recover). */
static int apply_patch_staged(pulse_follower *f, const pulse_record *rec, const char *rel, uint64_t *moved)
{
    const int file = !in_memory(f);
    pulse_ckpt *w = NULL;
    char jpath[4096], stem[4096], name[4096];
    int jfd = -1, r = 0, late = 0;
    if (file) {
        r = journal_data_path(f->o.state_dir, jpath, sizeof jpath);
        if (!r && (jfd = open(jpath, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
            r = pulse_fail_errno(PULSE_ERR_IO, "open %s", jpath);
        if (!r && (r = weights_mapped(f)) >= 0) {
            /* a node's step on its own last write (the mapping it left, the file as it left it,
             * that write checked or being checked): the result is hashed after this write, on
             * idle cycles; any other step hashes it before (docs/trust.md) */
            late = f->late_checks && r == 1;
            r = 0;
            w = f->w;
        }
    } else {
        /* memory does not outlive a crash: the changes are kept only until they are written */
        snprintf(stem, sizeof stem, "%s/staged", f->o.state_dir);
        if ((jfd = pulse_create_temp(stem, ".tmp.", 0600, name, sizeof name)) < 0)
            r = jfd;
        else
            unlink(name);
    }
    pulse_ckpt *target = file ? w : f->o.weights;
    sync_staged sg;
    memset(&sg, 0, sizeof sg);
    if (!r)
        r = sync_fetch_stage(f->st, f->run, rec, f->o.state_dir, target, jfd, f->o.threads, !late, &sg, moved);
    f->ph.fetch = sg.fetch_ms;
    f->ph.verify = sg.verify_ms;
    char h1[65], h2[65];
    /* the check of the last step's write, before this one writes on it (a wait counted as
     * this step's check) */
    if (!r && late) {
        double tc = pulse_monotonic_s();
        r = follower_settle_check(f, 1);
        f->ph.check += 1e3 * (pulse_monotonic_s() - tc);
    }
    if (!r && !late && memcmp(sg.result, rec->result, 32) != 0)
        r = pulse_fail(PULSE_ERR_MISMATCH, "these weights with the patch would be state %.16s.., the record's result is "
                       "%.16s..: they are not its base, or the patch does not give its result (nothing was written)",
                       pulse_id_hex(sg.result, h1), pulse_id_hex(rec->result, h2));
    node_journal j = journal_applying(rec, rel);
    double t0 = pulse_monotonic_s();
    if (!r && file) {
        j.staged = 1;
        memcpy(j.head, sg.head_digest, 32);
        r = unsynced_before_write(&f->note, f->o.state_dir, f->o.durable);
        if (!r && sync_each_step(f) && fdatasync(jfd) != 0)
            r = pulse_fail_errno(PULSE_ERR_IO, "fdatasync %s", jpath);
        if (!r)
            r = journal_write(f->o.state_dir, &j, sync_each_step(f));
    }
    f->ph.journal = ms_since(t0);
    t0 = pulse_monotonic_s();
    int written = !r;   /* from here the journal names the data file */
    if (!r)
        r = patch_stage_write(sg.stage, target, f->o.threads);
    if (!r && file && sync_each_step(f))
        r = pulse_ckpt_sync(w);
    f->ph.apply = ms_since(t0);
    if (!r && late)
        snprintf(f->late_rel, sizeof f->late_rel, "%s", rel);
    if (!r && late && (r = late_check_start(&f->late, w, rec->result, rec->step, f->o.threads)) != 0)
        r = pulse_fail(PULSE_ERR_IO, "%s (the weights were written)", pulse_last_error());
    sync_staged_close(&sg);
    if (file && !r)
        weights_written(f);
    else if (file)
        weights_unmap(f);   /* a step that failed maps them afresh */
    if (jfd >= 0)
        close(jfd);
    if (r && file && !written)
        unlink(jpath);   /* scratch until the journal names it: its room goes back */
    if (r) {
        /* Not written: the weights are as they were, but maybe not the base after all (changed
         * behind this node's back), so the next pull hashes them. Written in part: the journal
         * stays and the next start (or pull) replays it. */
        f->known = 0;
        return r;
    }
    pulse_sync_step s;
    sync_step_of(rec, rel, *moved, &s);
    return finish_step(f, &j, &s);
}

static int apply_patch_step(pulse_follower *f, const pulse_record *rec, const char *rel, uint64_t *moved)
{
    patch_objects po;   /* the objects checked against the roles a patch has */
    int r = patch_objects_of(rec, &po);
    patch_objects_free(&po);
    if (r)
        return r;
    if (memcmp(rec->base, f->state, 32) != 0)
        return pulse_fail(PULSE_ERR_MISMATCH, "its base is not the state these weights hold");
    return f->engine ? apply_patch_engine(f, rec, rel, moved) : apply_patch_staged(f, rec, rel, moved);
}

/* Whether the keyframe's checkpoint K has exactly the tensors of the weights in memory W. */
static int same_layout(const pulse_ckpt *k, const pulse_ckpt *w)
{
    size_t n = pulse_ckpt_count(k);
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *a = pulse_ckpt_tensor(k, i);
        const pulse_tensor *b = pulse_ckpt_find(w, a->name);
        if (!b)
            return pulse_fail(PULSE_ERR_MISMATCH, "the run's tensor %s is not in the weights in memory", a->name);
        int same = !strcmp(a->dtype_name, b->dtype_name) && a->ndim == b->ndim;
        for (int d = 0; same && d < a->ndim; d++)
            same = a->shape[d] == b->shape[d];
        if (!same)
            return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s: the run has %s with %d dimensions (first %llu), "
                              "the weights in memory %s with %d (first %llu)", a->name, a->dtype_name, a->ndim,
                              (unsigned long long)(a->ndim ? a->shape[0] : 1), b->dtype_name, b->ndim,
                              (unsigned long long)(b->ndim ? b->shape[0] : 1));
    }
    if (pulse_ckpt_count(w) != n) {
        for (size_t i = 0; i < pulse_ckpt_count(w); i++)
            if (!pulse_ckpt_find(k, pulse_ckpt_tensor(w, i)->name))
                return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s of the weights in memory is not in the run",
                                  pulse_ckpt_tensor(w, i)->name);
    }
    return 0;
}

/* A keyframe into memory: restored and verified as a file in the state directory (its state
 * id is the record's result), checked against the tensors' layout, then copied in. */
static int apply_keyframe_memory(pulse_follower *f, const pulse_record *rec, const char *rel, uint64_t *moved)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/keyframe.safetensors", f->o.state_dir);
    int r = sync_keyframe_restore(f->st, f->run, rec, f->o.threads, path, moved);
    pulse_ckpt *k = NULL;
    if (!r)
        r = pulse_ckpt_open(&k, path, PULSE_CKPT_READ);
    if (!r && f->engine) {
        pulse_sync_step s;
        sync_step_of(rec, rel, *moved, &s);
        if (f->o.on_keyframe(f->o.engine_ctx, &s, k) != 0)
            r = pulse_fail(PULSE_ERR_INVALID, "the engine refused keyframe step %" PRIu64, rec->step);
    } else if (!r) {
        r = same_layout(k, f->o.weights);
    }
    for (size_t i = 0; !r && !f->engine && i < pulse_ckpt_count(k); i++) {
        const pulse_tensor *src = pulse_ckpt_tensor(k, i);
        const pulse_tensor *dst = pulse_ckpt_find(f->o.weights, src->name);
        if (src->nbytes)
            memcpy(dst->data, src->data, src->nbytes);
    }
    pulse_ckpt_close(&k);
    unlink(path);
    f->known = 0;
    if (r)
        return r;
    node_journal j = journal_applying(rec, rel);
    pulse_sync_step s;
    sync_step_of(rec, rel, *moved, &s);
    return finish_step(f, &j, &s);
}

static int apply_keyframe_step(pulse_follower *f, const pulse_record *rec, const char *rel, uint64_t *moved)
{
    weights_unmap(f);   /* the file is replaced: no check may still read the old one */
    if (in_memory(f))
        return apply_keyframe_memory(f, rec, rel, moved);
    node_journal j = journal_applying(rec, rel);
    int r = journal_write(f->o.state_dir, &j, sync_each_step(f));
    double t0 = pulse_monotonic_s();
    if (!r)
        r = sync_keyframe_restore(f->st, f->run, rec, f->o.threads, f->o.weights_path, moved);
    f->ph.fetch = 1e3 * (pulse_monotonic_s() - t0);   /* fetch, decompress, state id, rename */
    if (r) {
        f->known = 0;
        journal_clear(f->o.state_dir, sync_each_step(f));   /* restore is temp + rename: the weights are unchanged */
        return r;
    }
    /* The restored file is on disk (synced, renamed, its directory synced): whatever the note
     * said about the old one no longer applies. */
    r = note_settled(f);
    if (r)
        return r;
    /* A node maps it now, its pages in the mapping, off the next step's path: this handle's own
     * last write, whose result the restore checked, which the next step then writes on as on
     * any step's (a failure here only leaves that step to map it) */
    if (f->late_checks) {
        if (pulse_ckpt_open(&f->w, f->o.weights_path, PULSE_CKPT_WRITE) == 0) {
            weights_written(f);
            if (f->w)
                ckpt_prefault(f->w);
        }
        pulse_clear_error();
    }
    pulse_sync_step s;
    sync_step_of(rec, rel, *moved, &s);
    return finish_step(f, &j, &s);
}

/* Applies one verified record: indexed first, refused with its reason on failure. */
int apply_listed(pulse_follower *f, const char *rel, const pulse_record *rec, const uint8_t *bytes,
                 size_t len, uint64_t moved)
{
    int r = 0;
    if (f->have && rec->step <= f->step)
        r = pulse_fail(PULSE_ERR_MISMATCH, "step %" PRIu64 " is not newer than the held step %" PRIu64 " (rollback)",
                       rec->step, f->step);
    memset(&f->ph, 0, sizeof f->ph);
    f->ph.seen = f->seen_ms;
    f->step_t0 = pulse_monotonic_s();
    if (!r)
        r = pulse_index_put_record(f->ix, rel, bytes, len, (uint64_t)time(NULL), NULL, NULL);
    if (!r)
        r = pulse_index_mark_verified(f->ix, rel, PULSE_VERDICT_OK, "verified");
    f->ph.index = 1e3 * (pulse_monotonic_s() - f->step_t0);
    /* MOVED: the record's bytes, already counted; the objects are counted here. */
    uint64_t total = moved;
    sync_progress_begin(f->o.on_progress, f->o.progress_ctx, rec->patch_bytes);
    if (!r)
        r = rec->kind == PULSE_RECORD_KEYFRAME ? apply_keyframe_step(f, rec, rel, &total)
                                               : apply_patch_step(f, rec, rel, &total);
    sync_progress_end();
    f->step_t0 = 0;
    f->c.bytes_fetched += total - moved;
    if (r && !f->stopped) {
        r = fail_step(r, rec->step, rel);
        refuse_step(f, r, rel);
    }
    return r;
}
