/* SPDX-License-Identifier: Apache-2.0 */
/* The follower handle: opened on a run and a state directory (locked), configured, closed. */
#include <stdlib.h>
#include "base/fail.h"
#include "base/names.h"
#include "manifest/index_internal.h"
#include "manifest/layout.h"
#include "crypto/sha256.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/sync/follower.h"

/* One event of this handle: to the sink its owner installed, else as a text line on stderr. */
__attribute__((sentinel)) void follow_log(const pulse_follower *f, const char *event, ...)
{
    const char *kv[SYNC_EVENT_KV_MAX + 1];
    va_list ap;
    va_start(ap, event);
    sync_event_kv(kv, ap);
    va_end(ap);
    if (f->on_event)
        f->on_event(f->event_ctx, event, kv);
    else
        sync_event_line(0, event, kv);
}

PULSE_API int pulse_follower_sync(pulse_follower *f)
{
    if (!f->note.marked || f->o.weights)
        return 0;
    return unsynced_settle(&f->note, f->o.state_dir, f->o.weights_path);
}

PULSE_API void pulse_follow_opts_default(pulse_follow_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
}

PULSE_API void pulse_follower_close(pulse_follower **pf)
{
    if (!pf || !*pf)
        return;
    pulse_follower *f = *pf;
    weights_unmap(f);
    pulse_follower_sync(f);
    pulse_index_close(&f->ix);
    pulse_store_close(&f->st);
    state_dir_close(&f->dir);
    free(f->pend);
    free(f->run);
    free(f->store_url);
    free(f->state_dir);
    free(f->weights_path);
    sync_slices_free(&f->slices);
    free(f);
    *pf = NULL;
}

static int by_key(const void *a, const void *b)
{
    return memcmp(a, b, PULSE_PUBLIC_KEY_BYTES);
}

/* What a refusal is bound to: the set of keys that refused it, in any order given. */
static int trust_digest(const pulse_trust *t, uint8_t out[32])
{
    size_t n = pulse_trust_count(t);
    uint8_t (*k)[PULSE_PUBLIC_KEY_BYTES] = calloc(n ? n : 1, sizeof *k);
    if (!k)
        return pulse_fail(PULSE_ERR_NOMEM, "trust set");
    for (size_t i = 0; i < n; i++)
        memcpy(k[i], pulse_trust_get(t, i)->key, PULSE_PUBLIC_KEY_BYTES);
    qsort(k, n, sizeof *k, by_key);
    pulse_sha256(k, n * sizeof *k, out);
    free(k);
    return 0;
}

PULSE_API int pulse_follower_open(pulse_follower **out, const pulse_follow_opts *opts)
{
    *out = NULL;
    /* A caller built before `weights` was appended passes the shorter size: no weights then. */
    if (!opts || opts->size < offsetof(pulse_follow_opts, weights) || !opts->store_url || !opts->run ||
        !opts->trust || !opts->state_dir)
        return pulse_fail(PULSE_ERR_INVALID, "follower needs a store, a run, trusted keys and a state directory");
    int bad = pulse_check_run(opts->run);   /* before the state directory is made */
    if (bad)
        return bad;
    pulse_ckpt *weights = opts->size >= offsetof(pulse_follow_opts, weights) + sizeof opts->weights ? opts->weights
                                                                                     : NULL;
    int engine = opts->size >= offsetof(pulse_follow_opts, engine_ctx) + sizeof opts->engine_ctx &&
                 (opts->on_patch || opts->on_keyframe);
    if (engine && (!opts->on_patch || !opts->on_keyframe))
        return pulse_fail(PULSE_ERR_INVALID, "follower of engine-held weights needs both on_patch and on_keyframe");
    if (!weights + !opts->weights_path + !engine != 2)
        return pulse_fail(PULSE_ERR_INVALID, "follower needs a weights path, tensors in memory or engine callbacks "
                                             "(exactly one)");
    if (weights && (weights->nfiles || !(weights->flags & PULSE_CKPT_WRITE)))
        return pulse_fail(PULSE_ERR_INVALID, "follower weights in memory must be a writable pulse_ckpt_wrap");
    if (opts->size >= offsetof(pulse_follow_opts, deadline_s) + sizeof opts->deadline_s &&
        !(opts->deadline_s >= 0 && opts->deadline_s <= 1e9))
        return pulse_fail(PULSE_ERR_INVALID, "follower deadline must be 0 (none) or a number of seconds");
    if (pulse_trust_count(opts->trust) == 0)
        return pulse_fail(PULSE_ERR_INVALID, "follower trusts no key");
    pulse_follower *f = calloc(1, sizeof *f);
    if (!f || !(f->run = strdup(opts->run))) {
        free(f);
        return pulse_fail(PULSE_ERR_NOMEM, "follower");
    }
    memcpy(&f->o, opts, opts->size < sizeof f->o ? opts->size : sizeof f->o);
    f->o.size = sizeof f->o;
    f->o.weights = weights;
    f->engine = engine;
    f->o.store_url = f->store_url = strdup(opts->store_url);
    f->o.state_dir = f->state_dir = strdup(opts->state_dir);
    f->o.weights_path = f->weights_path = opts->weights_path ? strdup(opts->weights_path) : NULL;
    int has_slices = opts->size >= offsetof(pulse_follow_opts, n_slices) + sizeof opts->n_slices && opts->n_slices;
    int r = 0;
    if (!f->store_url || !f->state_dir || (opts->weights_path && !f->weights_path))
        r = pulse_fail(PULSE_ERR_NOMEM, "follower");
    else if (has_slices && !engine)
        r = pulse_fail(PULSE_ERR_INVALID, "slices are for a follower of engine-held weights (on_patch): weights pulse "
                       "holds are whole");
    else if (has_slices)
        r = sync_slices_copy(&f->slices, opts->slices, opts->n_slices);
    f->o.slices = NULL;   /* the copy in f->slices is the one used */
    f->o.n_slices = 0;
    if (r) {
        free(f->run);
        free(f->store_url);
        free(f->state_dir);
        free(f->weights_path);
        free(f);
        return r;
    }
    f->max_behind = FOLLOW_DEFAULT_MAX_BEHIND;
    f->dir.fd = -1;
    r = state_dir_open(opts->state_dir, &f->dir);
    if (!r && opts->weights_path)
        r = unsynced_open(&f->note, opts->state_dir);
    if (!r && opts->weights_path)
        sync_keyframe_sweep(opts->weights_path);   /* a restore killed midway, under this lock */
    if (!r)
        r = pulse_store_open(&f->st, opts->store_url, NULL);
    if (!r) {
        char path[4096];
        snprintf(path, sizeof path, "%s/index.db", opts->state_dir);
        r = pulse_index_open(&f->ix, path);
    }
    /* Weights that are not synced each step are checked whole after a restart of the machine
     * (node/sync/unsynced.h), so the index need not wait for the disk at each commit either; an
     * engine's index is what says which state it holds, and keeps syncing. */
    if (!r && !f->engine && !(f->o.weights_path ? sync_each_step(f) : 0))
        r = index_sync_each_commit(f->ix, 0);
    for (size_t i = 0; !r && i < pulse_trust_count(opts->trust); i++)
        r = pulse_index_trust_key(f->ix, pulse_trust_get(opts->trust, i), (uint64_t)time(NULL));
    if (!r)
        r = trust_digest(opts->trust, f->trust_id);
    if (r) {
        pulse_follower_close(&f);
        return r;
    }
    *out = f;
    return 0;
}

void follower_configure(pulse_follower *f, unsigned max_behind, int log_events, int keep_untrusted)
{
    /* a node outlives its steps: their results can be checked after their writes (a one-shot
     * pull exits with its last step, so it checks each before) */
    f->late_checks = log_events;
    f->max_behind = max_behind;
    f->log = log_events;
    f->keep_untrusted = keep_untrusted;
}

void follower_report_pulls(pulse_follower *f)
{
    f->report = 1;
}

const apply_phases *follower_phases(const pulse_follower *f)
{
    return &f->ph;
}

void follower_set_hook_ms(pulse_follower *f, double ms)
{
    f->ph.hook = ms;
}

void follower_on_event(pulse_follower *f, sync_event_fn fn, void *ctx)
{
    f->on_event = fn;
    f->event_ctx = ctx;
}

const follow_counters *follower_counters(pulse_follower *f)
{
    f->c.store_retries = pulse_store_retries(f->st);
    return &f->c;
}

int follower_held(const pulse_follower *f, uint64_t *step, uint8_t state[32])
{
    if (!f->known || !f->have)
        return PULSE_ERR_NOTFOUND;
    *step = f->step;
    memcpy(state, f->state, 32);
    return 0;
}
