/* SPDX-License-Identifier: Apache-2.0 */
/* The follower: list a run's records, pick the cheapest verified path, then apply each step in place, journalled. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/durable.h"
#include "base/env_bytes.h"
#include "base/fail.h"
#include "base/names.h"
#include "manifest/index_internal.h"
#include "manifest/layout.h"
#include "crypto/sha256.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/sync/events.h"
#include "node/sync/fetch_stage.h"
#include "node/sync/phases.h"
#include "node/patch/patch_take.h"
#include "node/sync/follow_internal.h"
#include "node/sync/journal.h"
#include "node/sync/late_check.h"
#include "manifest/patch_objects.h"
#include "node/sync/slices.h"
#include "node/sync/sync_internal.h"
#include "node/sync/unsynced.h"
#include "pulseweights/manifest.h"
#include "pulseweights/sync.h"

struct pulse_follower {
    pulse_follow_opts o;
    char *run;
    /* Copies of the caller's strings, which f->o points at: the follower uses them for as long
     * as it is open, and a caller may free or reuse its own after pulse_follower_open. */
    char *store_url, *state_dir, *weights_path;
    pulse_store *st;
    pulse_index *ix;
    /* The state the weights hold, tracked once known: only this handle writes them. */
    int known, have;
    uint64_t step;
    uint8_t state[32];
    int recovered;             /* the journal was looked at */
    int engine;                /* weights held by an engine: on_patch / on_keyframe */
    sync_slices slices;        /* the engine's parts of tensors; none: all of every tensor */
    int stopped;               /* the on_step callback asked to stop */
    unsigned max_behind;
    int log;
    int report;                /* pulse pull: each pull says what it skipped, and a store behind */
    uint64_t behind_newest;    /* while the store is behind: its newest verified step (UINT64_MAX: none) */
    int cadence_seeded;        /* a node read the newest records for the run's cadence (once) */
    sync_event_fn on_event;    /* where events go (NULL: a text line on stderr) */
    void *event_ctx;
    follow_counters c;
    double step_t0;            /* when the step being applied started (monotonic s); 0: none */
    unsynced_note note;        /* the weights file's (node/sync/unsynced.h) */
    state_dir dir;             /* locked while open: one process applies to these weights */
    int keep_untrusted;        /* a held state no trusted record produces is kept (warned), not replaced */
    int suspect;               /* a journal was refused: weights no record produces are lost, not an error */
    uint8_t trust_id[32];      /* SHA-256 of the sorted trusted keys: a refusal holds for this set only */
    /* Refusals found in this pull, stored in one transaction at its end. */
    pulse_index_refusal *pend;
    size_t npend, cappend;
    size_t nlogged, nquiet;    /* refusals logged in this pull, and those past the cap */
    char last_step_refusal[SYNC_KEY_MAX + 512];   /* the last step refusal logged (once, not every poll) */
    apply_phases ph;           /* of the step being applied (its "applied" event) */
    double seen_ms;            /* how long the head poll that brought the record took to see it (0: none) */
    /* The weights file mapped writable, kept from step to step while the file is as this
     * handle left it (its identity, size and times): its pages stay mapped (and, until written
     * back, writable), so a step does not fault every page in again. */
    pulse_ckpt *w;
    struct stat w_stat;
    /* A node's steps on its own last write: the result hashed after the write (late_check.h). */
    int late_checks;
    late_check late;
    char late_rel[SYNC_KEY_MAX];   /* the record of the step being checked late */
};

/* At most this many refused records are logged one by one per pull; the rest in one line. */
#define FOLLOW_LOG_REFUSALS 16

/* One event of this handle: to the sink its owner installed, else as a text line on stderr. */
__attribute__((sentinel)) static void follow_log(const pulse_follower *f, const char *event, ...)
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

/* One listed record of a trusted node; its key says kind, step and node (checked again
 * against the record's own fields once fetched). */
typedef struct listed {
    int kind;
    uint64_t step;
    uint8_t node[32];
    char rel[SYNC_KEY_MAX];   /* relative to the run */
    uint64_t size;            /* as listed */
    char etag[132];
    /* Filled when fetched (or known refused from the index: fetched, not ok, err set): */
    int fetched, ok, err;
    char why[256];
    pulse_record rec;
    uint8_t *bytes;
    size_t len;
} listed;

typedef struct listing {
    pulse_follower *f;
    const pulse_trust *trust;
    size_t run_len;
    listed *v;
    size_t n, cap;
    /* For saying why there is nothing to start from: every key listed under records/, and the
     * first nodes named by record keys of keys not trusted (names only: nothing verified). */
    size_t keys;
    uint8_t others[8][32];
    size_t nothers;
    /* Keys under records/ that are no record key at all (junk after the node id, a bad step):
     * how many, and the first few, for pulse pull to name. */
    size_t junk;
    char *junk_keys[FOLLOW_LOG_REFUSALS];
} listing;

/* Whether each step ends with a sync of the weights. */
static int sync_each_step(const pulse_follower *f)
{
    return unsynced_sync_each(&f->note, f->o.durable);
}

/* The weights are on disk as they are now (synced, or read back whole after a restart). */
static int note_settled(pulse_follower *f)
{
    return unsynced_settle(&f->note, f->o.state_dir, NULL);
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

static void weights_unmap(pulse_follower *f);

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

static void saw_record(pulse_follower *f, const pulse_record *rec)
{
    cadence_note(&f->c.cadence, rec->step, rec->time);
    if (!f->c.have_newest || rec->step > f->c.newest_step || (rec->step == f->c.newest_step && !f->c.newest_time)) {
        f->c.newest_step = rec->step;
        f->c.newest_time = rec->time;
        f->c.have_newest = 1;
    }
}

static void u64s(char *buf, size_t cap, uint64_t v)
{
    snprintf(buf, cap, "%" PRIu64, v);
}

/* "PREFIX: <the current detail>" (the detail is copied first: it is the buffer written). */
static int fail_prefixed(int r, const char *prefix)
{
    char d[512];
    snprintf(d, sizeof d, "%s", pulse_last_error());
    return pulse_fail(r, "%s: %s", prefix, d);
}

static int fail_step(int r, uint64_t step, const char *rel)
{
    char p[SYNC_KEY_MAX + 32];
    snprintf(p, sizeof p, "step %" PRIu64 ": %s", step, rel);
    return fail_prefixed(r, p);
}

/* Parses records/<kind>/<step:012>/<node-hex>; 0 when it is a sync-patch or keyframe record
 * of a trusted node, -2 when it is one of a node not trusted (e->node set), else -1. */
static int parse_rel(const pulse_trust *trust, const char *rel, listed *e)
{
    /* Exact (manifest/layout.c): a key with anything after the node, or a shorter or longer
     * field, is not a record's key. */
    int k;
    uint64_t step;
    uint8_t node[32];
    if (strlen(rel) >= SYNC_KEY_MAX || pulse_layout_parse_record(rel, &k, &step, node))
        return -1;
    if (k != PULSE_RECORD_SYNC_PATCH && k != PULSE_RECORD_KEYFRAME)
        return -1;
    memset(e, 0, sizeof *e);
    e->kind = k;
    e->step = step;
    memcpy(e->node, node, 32);
    if (!pulse_trust_find(trust, e->node))
        return -2;
    snprintf(e->rel, sizeof e->rel, "%s", rel);
    return 0;
}

/* A key whose bytes, as listed (size and ETag), were refused before by this trust set is
 * not fetched again: it counts as refused with the stored reason. */
static void known_refusal(pulse_follower *f, const char *key, listed *e)
{
    pulse_index_refusal rf;
    if (!e->etag[0])
        return;
    if (pulse_index_get_refusal(f->ix, key, &rf) != 0) {
        pulse_clear_error();
        return;
    }
    if (rf.size != e->size || strcmp(rf.etag, e->etag) != 0 || memcmp(rf.trust, f->trust_id, 32) != 0)
        return;
    e->fetched = 1;
    e->err = PULSE_ERR_AUTH;
    if (snprintf(e->why, sizeof e->why, "step %" PRIu64 ": %s: %s", e->step, e->rel, rf.reason) >= (int)sizeof e->why)
        e->why[sizeof e->why - 1] = '\0';   /* a shortened reason still names the record first */
}

/* A key under records/ that is no record key of any kind or node (a record of another kind, or
 * of a node not trusted, is not junk). */
static void note_junk(listing *l, const char *rel)
{
    int kind;
    uint64_t step;
    uint8_t node[32];
    if (pulse_layout_parse_record(rel, &kind, &step, node) == 0)
        return;
    if (l->junk < FOLLOW_LOG_REFUSALS)
        l->junk_keys[l->junk] = strdup(rel);
    l->junk++;
}

/* Anything that is not a trusted node's record is not ours to use (pulse manifest audit reports it). */
static int on_key(void *ctx, const char *key, const pulse_object_info *info)
{
    listing *l = ctx;
    listed e;
    l->keys++;
    int pr = parse_rel(l->trust, key + l->run_len + 1, &e);
    if (pr == -2 && l->nothers < sizeof l->others / sizeof l->others[0]) {
        size_t i = 0;
        while (i < l->nothers && memcmp(l->others[i], e.node, 32))
            i++;
        if (i == l->nothers)
            memcpy(l->others[l->nothers++], e.node, 32);
    }
    if (pr == -1)
        note_junk(l, key + l->run_len + 1);
    if (pr != 0)
        return 0;
    if (info) {
        e.size = info->size;
        snprintf(e.etag, sizeof e.etag, "%s", info->etag);
    }
    known_refusal(l->f, key, &e);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        listed *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return pulse_fail(PULSE_ERR_NOMEM, "record listing");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = e;
    return 0;
}

static int by_step(const void *a, const void *b)
{
    const listed *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind - y->kind;
    return strcmp(x->rel, y->rel);
}

static int list_records(pulse_follower *f, listing *l)
{
    char prefix[SYNC_KEY_MAX];
    char rel[16];
    int r = pulse_layout_records_prefix(rel, sizeof rel, 0, 0);
    if (!r)
        r = sync_run_key(f->run, rel, prefix);
    l->f = f;
    l->trust = f->o.trust;
    l->run_len = strlen(f->run);
    if (!r)
        r = pulse_store_list(f->st, prefix, NULL, on_key, l);
    if (!r && l->n)
        qsort(l->v, l->n, sizeof *l->v, by_step);
    return r;
}

static void listing_free(listing *l)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].ok)
            pulse_record_clear(&l->v[i].rec);
        pulse_store_free(l->v[i].bytes);
    }
    free(l->v);
    for (size_t i = 0; i < l->junk && i < FOLLOW_LOG_REFUSALS; i++)
        free(l->junk_keys[i]);
    memset(l, 0, sizeof *l);
}

/* Fetches and verifies one record: strict parse, trusted signature, and the key it was
 * found under must be what the record says it is (a record copied under another step's
 * key is a replay). */
static int fetch_record(pulse_follower *f, const char *rel, const uint8_t *have, size_t have_len, pulse_record *rec,
                        uint8_t **bytes, size_t *len, uint64_t *moved)
{
    char key[SYNC_KEY_MAX], want[SYNC_KEY_MAX];
    void *data = NULL;
    size_t n = 0;
    *bytes = NULL;
    int r = sync_run_key(f->run, rel, key);
    if (!r && have) {   /* the record a head carried: verified exactly as one fetched */
        if (have_len > PULSE_RECORD_MAX_BYTES)
            r = pulse_fail(PULSE_ERR_LIMIT, "a record of %zu bytes", have_len);
        else if (!(data = malloc(have_len ? have_len : 1)))
            r = pulse_fail(PULSE_ERR_NOMEM, "record");
        else
            memcpy(data, have, n = have_len);
    } else if (!r) {
        r = pulse_store_get(f->st, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &n, NULL);
        if (!r)
            *moved += n;
    }
    if (!r)
        r = pulse_record_verify(data, n, f->o.trust, NULL, rec);
    if (!r && ((r = pulse_record_key(rec, want, sizeof want)) != 0 || strcmp(want, rel) != 0 ||
               strcmp(rec->run, f->run) != 0)) {
        r = pulse_fail(PULSE_ERR_FORMAT, "record found under %s says it is %s of run %s (replayed or moved)",
                       rel, want, rec->run);
        pulse_record_clear(rec);
    }
    if (!r)
        saw_record(f, rec);
    /* The bytes are kept even on refusal, so the verdict can be journalled. */
    *bytes = data;
    *len = n;
    return r;
}

/* Errors that say something about the record or its objects. Anything else (network, server,
 * local I/O, an interrupted transfer, memory) is not a verdict: the record is tried again later. */
static int is_verdict(int r)
{
    return r == PULSE_ERR_FORMAT || r == PULSE_ERR_AUTH || r == PULSE_ERR_CORRUPT || r == PULSE_ERR_MISMATCH ||
           r == PULSE_ERR_LIMIT || r == PULSE_ERR_UNSUPPORTED;
}

/* Refused records are logged one by one up to a cap per pull, then counted in one line. */
static void log_refused(pulse_follower *f, const char *rel, const char *why)
{
    if (!f->log)
        return;
    if (f->nlogged++ < FOLLOW_LOG_REFUSALS)
        follow_log(f, "refused", "record", rel, "reason", why, NULL);
    else
        f->nquiet++;
}

/* Stores the refusals found (one transaction) and logs how many went unlogged. The caller's
 * error, if any, is kept. */
static void flush_refusals(pulse_follower *f)
{
    char saved[512];
    snprintf(saved, sizeof saved, "%s", pulse_last_error());
    if (f->npend && pulse_index_put_refusals(f->ix, f->pend, f->npend) != 0 && f->log)
        follow_log(f, "index-failed", "reason", pulse_last_error(), NULL);
    if (f->nquiet && f->log) {
        char n[24];
        u64s(n, sizeof n, f->nquiet);
        follow_log(f, "refused-more", "count", n, NULL);
    }
    f->npend = f->nlogged = f->nquiet = 0;
    pulse_fail(0, "%s", saved);
}

/* A record refused before it was indexed (it does not verify under this trust set, or its key
 * is not what it says): the index keeps the verdict (key, size, SHA-256 of the bytes, reason),
 * never the bytes, so junk costs a row; the same bytes refused again are neither logged nor
 * counted again. LEN: the bytes fetched (the listed size when the fetch refused them). */
static void refuse_record(pulse_follower *f, const char *rel, const uint8_t *bytes, size_t len, const char *etag,
                          const char *why)
{
    pulse_index_refusal rf, old;
    memset(&rf, 0, sizeof rf);
    if (sync_run_key(f->run, rel, rf.key) != 0)
        return;
    rf.size = len;
    snprintf(rf.etag, sizeof rf.etag, "%s", etag ? etag : "");
    pulse_sha256(bytes ? (const void *)bytes : "", bytes ? len : 0, rf.digest);
    memcpy(rf.trust, f->trust_id, 32);
    snprintf(rf.reason, sizeof rf.reason, "%s", why);
    rf.time = (uint64_t)time(NULL);
    int seen = pulse_index_get_refusal(f->ix, rf.key, &old) == 0 && old.size == rf.size &&
               !memcmp(old.digest, rf.digest, 32) && !memcmp(old.trust, rf.trust, 32);
    if (!seen || strcmp(old.etag, rf.etag) != 0) {
        if (f->npend == f->cappend) {
            size_t cap = f->cappend ? 2 * f->cappend : 16;
            pulse_index_refusal *v = realloc(f->pend, cap * sizeof *v);
            if (!v)
                return;
            f->pend = v;
            f->cappend = cap;
        }
        f->pend[f->npend++] = rf;
    }
    if (seen)
        return;
    f->c.verify_failures++;
    log_refused(f, rel, why);
}

/* A verified record whose step failed (its objects, its base): the index's row says refused
 * (it leaves the chain of states); logged and counted once while the reason stays the same. */
static void refuse_step(pulse_follower *f, int r, const char *rel)
{
    char why[512];
    snprintf(why, sizeof why, "%s", pulse_last_error());
    if (!is_verdict(r)) {
        if (f->log)
            follow_log(f, "fetch-failed", "record", rel, "reason", why, NULL);
        return;
    }
    if (pulse_index_mark_verified(f->ix, rel, PULSE_VERDICT_REFUSED, why) != 0)
        pulse_fail(0, "%s", why);   /* not indexed (a chain that does not fit): nothing to mark */
    char once[sizeof f->last_step_refusal];
    snprintf(once, sizeof once, "%s %s", rel, why);
    if (!strcmp(once, f->last_step_refusal))
        return;
    snprintf(f->last_step_refusal, sizeof f->last_step_refusal, "%s", once);
    f->c.verify_failures++;
    log_refused(f, rel, why);
}

/* Fetches a listed record once and verifies it. A refusal is stored, counted and kept (e->err):
 * the record is skipped; a pull that cannot get past it names it. */
static int get_listed(pulse_follower *f, listed *e)
{
    if (e->fetched)
        return e->ok ? 0 : pulse_fail(e->err, "%s", e->why);
    e->fetched = 1;
    uint64_t moved = 0;
    int r = fetch_record(f, e->rel, NULL, 0, &e->rec, &e->bytes, &e->len, &moved);
    f->c.bytes_fetched += moved;
    if (r) {
        char reason[256];
        snprintf(reason, sizeof reason, "%s", pulse_last_error());
        r = fail_step(r, e->step, e->rel);
        e->err = r;
        snprintf(e->why, sizeof e->why, "%s", pulse_last_error());
        if (is_verdict(r))
            refuse_record(f, e->rel, e->bytes, e->bytes ? e->len : e->size, e->etag, reason);
        else if (r != PULSE_ERR_NOTFOUND && f->log)
            follow_log(f, "fetch-failed", "record", e->rel, "reason", e->why, NULL);
        pulse_store_free(e->bytes);   /* a refused record's bytes are of no further use */
        e->bytes = NULL;
        pulse_fail(r, "%s", e->why);
        return r;
    }
    /* A record whose step failed here before (an object that did not match its digest, a
     * patch that did not decode) stays out of the chain: the planner would otherwise take the
     * same cheap path through it at every pull, and never reach a keyframe past it. */
    uint8_t *kept = NULL;
    size_t kept_len = 0;
    int verdict = 0;
    if (pulse_index_get_record(f->ix, e->rel, &kept, &kept_len, &verdict) == 0) {
        int refused = verdict == PULSE_VERDICT_REFUSED && kept_len == e->len && !memcmp(kept, e->bytes, kept_len);
        free(kept);
        if (refused) {
            char st[24];
            u64s(st, sizeof st, e->step);
            e->err = PULSE_ERR_CORRUPT;
            snprintf(e->why, sizeof e->why, "step %s: %.160s: refused before (its objects or its patch failed)", st,
                     e->rel);
            pulse_record_clear(&e->rec);
            pulse_store_free(e->bytes);
            e->bytes = NULL;
            return pulse_fail(e->err, "%s", e->why);
        }
    }
    e->ok = 1;
    return 0;
}

/* Tensors in memory (pulse_follow_opts.weights) rather than a file. */
/* Weights in caller memory, or held by an engine: no file, so no journal and no unsynced note. */
static int in_memory(const pulse_follower *f)
{
    return f->o.weights != NULL || f->engine;
}

static const char *weights_name(const pulse_follower *f)
{
    return f->engine ? "(engine)" : in_memory(f) ? "(memory)" : f->o.weights_path;
}

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

static int hash_weights(pulse_follower *f, uint8_t state[32])
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
    if (r)
    {
        char p[4200];
        snprintf(p, sizeof p, "weights %s", f->o.weights_path);
        return fail_prefixed(r, p);
    }
    return 0;
}

/* Weights written without a sync before the machine restarted, and not whole now: the disk
 * kept only some of the writes. They are no one's state, so the newest keyframe replaces them
 * (temporary file and rename), as if they were missing; the note stays until it has. */
static void weights_lost(pulse_follower *f, const char *why)
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
static void untrusted_state(pulse_follower *f, uint64_t step, const uint8_t state[32])
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
static int held_state(pulse_follower *f, listing *l)
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

static void sync_step_of(const pulse_record *rec, const char *rel, uint64_t moved, pulse_sync_step *s)
{
    memset(s, 0, sizeof *s);
    s->step = rec->step;
    s->kind = rec->kind;
    memcpy(s->base, rec->base, 32);
    memcpy(s->result, rec->result, 32);
    s->changes = rec->changes;
    s->dense_bytes = rec->dense_bytes;
    s->object_bytes = rec->patch_bytes;
    s->moved_bytes = moved;
    snprintf(s->record_key, sizeof s->record_key, "%s", rel);
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
static int finish_step(pulse_follower *f, const node_journal *j, const pulse_sync_step *s)
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

static double ms_since(double t0)
{
    return 1e3 * (pulse_monotonic_s() - t0);
}

/* A step of a weights file or of tensors in memory, in one pass over the weights: the patch
 * fetched as ranges and each chunk staged against the weights as it arrives (digest, decode,
 * the result's span beside the weights, its changes into the journal, the state chunks hashed),
 * so the result's state id is known, and checked against the record's, before a byte of the
 * weights is written; this checks the base too (weights that are not the base give another
 * result). Then the journal entry, and one scatter of the changes into the weights. A crash
 * during it is mended by replaying the journal (follower_recover). */
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

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* The weights file open writable: the mapping of the last step when the file is still as this
 * handle left it (1), else opened afresh (0). */
static int weights_mapped(pulse_follower *f)
{
    struct stat now;
    if (f->w && (stat(f->o.weights_path, &now) != 0 || !same_file(&now, &f->w_stat)))
        weights_unmap(f);
    return f->w ? 1 : pulse_ckpt_open(&f->w, f->o.weights_path, PULSE_CKPT_WRITE);
}

/* The mapping let go of, once no check reads it. */
static void weights_unmap(pulse_follower *f)
{
    follower_settle_check(f, 1);
    pulse_ckpt_close(&f->w);
}

/* After this handle wrote the weights: what they look like now, for the next step's mapping. */
static void weights_written(pulse_follower *f)
{
    if (f->w && stat(f->o.weights_path, &f->w_stat) != 0)
        weights_unmap(f);
}

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
    /* the check of the last step's write, before this one writes on it */
    if (!r && late)
        r = follower_settle_check(f, 1);
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
static int apply_listed(pulse_follower *f, const char *rel, const pulse_record *rec, const uint8_t *bytes,
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

/* Bounds the requests of one pull or poll (a trickling or stalling store cannot hold the
 * follower past it); cleared when it ends, so the node's idle time is not counted. */
static void deadline_begin(pulse_follower *f)
{
    if (f->o.deadline_s > 0)
        pulse_store_set_deadline(f->st, pulse_monotonic_s() + f->o.deadline_s);
}

static void deadline_end(pulse_follower *f)
{
    if (f->o.deadline_s <= 0)
        return;
    char saved[1024];   /* the pull's own error detail outlives the reset */
    snprintf(saved, sizeof saved, "%s", pulse_last_error());
    pulse_store_set_deadline(f->st, 0);
    pulse_fail(0, "%s", saved);
}

static int try_next(pulse_follower *f, const char *rel, const uint8_t *have, size_t have_len, int *applied);

int follower_try_next(pulse_follower *f, const char *rel, const uint8_t *record, size_t record_len, double seen_ms,
                      int *applied)
{
    deadline_begin(f);
    f->seen_ms = seen_ms;
    int r = try_next(f, rel, record, record_len, applied);
    f->seen_ms = 0;
    deadline_end(f);
    return r;
}

static int try_next(pulse_follower *f, const char *rel, const uint8_t *have, size_t have_len, int *applied)
{
    *applied = 0;
    listed e;
    if (!f->known || !f->have || parse_rel(f->o.trust, rel, &e) != 0 || e.kind != PULSE_RECORD_SYNC_PATCH ||
        e.step <= f->step)
        return 0;
    pulse_record rec;
    uint8_t *bytes = NULL;
    size_t len = 0;
    uint64_t moved = 0;
    int r = fetch_record(f, rel, have, have_len, &rec, &bytes, &len, &moved);
    f->c.bytes_fetched += moved;
    if (r == PULSE_ERR_NOTFOUND) {
        pulse_store_free(bytes);
        return 0;
    }
    if (r) {
        char why[256];
        snprintf(why, sizeof why, "%s", pulse_last_error());
        r = fail_step(r, e.step, rel);
        if (is_verdict(r)) {
            refuse_record(f, rel, bytes, len, NULL, why);
            flush_refusals(f);
        } else if (f->log) {
            follow_log(f, "fetch-failed", "record", rel, "reason", pulse_last_error(), NULL);
        }
        pulse_store_free(bytes);
        return r;
    }
    if (rec.step > f->step && !memcmp(rec.base, f->state, 32)) {
        r = apply_listed(f, rel, &rec, bytes, len, moved);
        *applied = !r;
    }
    pulse_record_clear(&rec);
    pulse_store_free(bytes);
    return r;
}

/* Follows patches chained from (step, state) through the listing: indices into l->v in
 * *path (capacity l->n), their count *n, the bytes of their objects and the step reached.
 * A refused record is skipped (another record may still chain on); a record that could not be
 * fetched (store, network) ends the walk there, its index in *stuck. */
static void walk_chain(pulse_follower *f, listing *l, uint64_t step, const uint8_t state[32], size_t *path,
                       size_t *n, uint64_t *bytes, uint64_t *end, size_t *stuck)
{
    uint8_t cur[32];
    memcpy(cur, state, 32);
    *n = 0;
    *end = step;
    for (size_t i = 0; i < l->n; i++) {
        listed *e = &l->v[i];
        if (e->kind != PULSE_RECORD_SYNC_PATCH || e->step <= *end)
            continue;
        int r = get_listed(f, e);
        if (r && (is_verdict(r) || r == PULSE_ERR_NOTFOUND))
            continue;
        if (r) {
            if (*stuck == SIZE_MAX)
                *stuck = i;
            return;
        }
        if (memcmp(e->rec.base, cur, 32) != 0)
            continue;   /* a gap or another branch; the chain may go on at a later step */
        path[(*n)++] = i;
        for (uint32_t k = 0; k < e->rec.n_objects; k++)
            *bytes += e->rec.objects[k].size;
        memcpy(cur, e->rec.result, 32);
        *end = e->step;
    }
}

/* The newest listed record that verifies (fetched from the newest down; those fetched already
 * are not fetched again): 1 and its index, 0 when none does, -1 when a fetch failed first. */
static int newest_verified(pulse_follower *f, listing *l, size_t *at)
{
    for (size_t i = l->n; i-- > 0;) {
        int r = get_listed(f, &l->v[i]);
        if (!r) {
            *at = i;
            return 1;
        }
        if (!is_verdict(r) && r != PULSE_ERR_NOTFOUND) {
            *at = i;
            return -1;
        }
    }
    pulse_clear_error();
    return 0;
}

/* A follower node derives its staleness bound from the publication times of the run's newest
 * records (node/sync/cadence.h); one that starts at the head has seen too few of them, so a few
 * more of the newest listed records are read, once (best effort: a failure only ends it). */
static void seed_cadence(pulse_follower *f, listing *l)
{
    for (size_t i = l->n, tries = 0; i-- > 0 && f->c.cadence.n < CADENCE_MIN_RECORDS && tries < 2 * CADENCE_MIN_RECORDS;) {
        if (l->v[i].kind != PULSE_RECORD_SYNC_PATCH)
            continue;
        tries++;
        int r = get_listed(f, &l->v[i]);
        if (r && !is_verdict(r) && r != PULSE_ERR_NOTFOUND)
            break;
    }
    pulse_clear_error();
}

/* A store whose newest verified record is older than the state held (an old snapshot, a
 * restored bucket, a replica behind): nothing of it is applied; said once when it starts. */
static void store_behind(pulse_follower *f, int behind, uint64_t newest, int have_newest)
{
    if (behind == f->c.store_behind)
        return;
    f->c.store_behind = behind;
    f->behind_newest = have_newest ? newest : UINT64_MAX;
    if (!f->log)
        return;
    char h[24], nw[24];
    u64s(h, sizeof h, f->step);
    u64s(nw, sizeof nw, newest);
    if (behind)
        follow_log(f, "store-behind", "held", h, "newest", have_newest ? nw : "none", NULL);
    else
        follow_log(f, "store-caught-up", "held", h, "newest", nw, NULL);
}

/* The pull could not reach NEWEST from REACHED: the first record after REACHED that was refused
 * or does not follow from the state reached is named, with its reason. */
static int chain_stuck(pulse_follower *f, listing *l, uint64_t reached, uint64_t newest)
{
    for (size_t i = 0; i < l->n; i++) {
        listed *e = &l->v[i];
        if (e->kind != PULSE_RECORD_SYNC_PATCH || e->step <= reached || e->step > newest || !e->fetched)
            continue;
        if (!e->ok)
            return pulse_fail(e->err, "%s", e->why);
        pulse_fail(PULSE_ERR_MISMATCH, "its base is not the state these weights hold (step %" PRIu64 ")", reached);
        int r = fail_step(PULSE_ERR_MISMATCH, e->step, e->rel);
        refuse_step(f, r, e->rel);
        return r;
    }
    char nw[24];
    u64s(nw, sizeof nw, newest);
    return pulse_fail(PULSE_ERR_MISMATCH, "run %s: no verified path from step %" PRIu64 " to step %s", f->run,
                      reached, nw);
}

static int pull_listed(pulse_follower *f, size_t *applied, pulse_sync_step *held_out);

PULSE_API int pulse_follower_pull(pulse_follower *f, size_t *applied, pulse_sync_step *held_out)
{
    deadline_begin(f);
    int r = pull_listed(f, applied, held_out);
    deadline_end(f);
    return r;
}

/* Weights to start and no trusted keyframe: says which of the usual mistakes it looks like
 * (a wrong store URL, prefix or run; the wrong --trust; a run with no keyframe yet). */
static int nothing_to_start(pulse_follower *f, const listing *l)
{
    const char *url = f->o.store_url;
    size_t ul = strlen(url);
    const char *sep = ul && url[ul - 1] == '/' ? "" : "/";
    if (l->n)
        return pulse_fail(PULSE_ERR_NOTFOUND, "run %s has no keyframe from a trusted key to start from "
                          "(%zu records of trusted keys listed, none a keyframe that verifies)", f->run, l->n);
    if (l->nothers) {
        char found[8 * 18 + 8] = "";
        size_t used = 0;
        for (size_t i = 0; i < l->nothers; i++) {
            char hex[65];
            pulse_id_hex(l->others[i], hex);
            used += (size_t)snprintf(found + used, sizeof found - used, "%s%.16s", i ? ", " : "", hex);
        }
        return pulse_fail(PULSE_ERR_NOTFOUND, "records exist under %s%s%s/ but none signed by a trusted key (found: %s%s)",
                          url, sep, f->run, found, l->nothers == sizeof l->others / sizeof l->others[0] ? ", ..." : "");
    }
    if (l->keys)
        return pulse_fail(PULSE_ERR_NOTFOUND, "no records under %s%s%s/: %zu keys under records/, none a record key",
                          url, sep, f->run, l->keys);
    return pulse_fail(PULSE_ERR_NOTFOUND, "no records under %s%s%s/ (check the store URL, its prefix and the run name)",
                      url, sep, f->run);
}

/* The reason of a refused listed record, without the "step N: KEY: " its detail starts with. */
static const char *listed_reason(const listed *e)
{
    char pre[SYNC_KEY_MAX + 48];
    int n = snprintf(pre, sizeof pre, "step %" PRIu64 ": %s: ", e->step, e->rel);
    return n > 0 && !strncmp(e->why, pre, (size_t)n) ? e->why + n : e->why;
}

/* pulse pull, once it succeeded (a failure is its one error line): what this pull skipped,
 * whether judged now or in an earlier pull (the node logs a refusal once; a one-shot pull says it
 * every time), one line per key, the first 16 of each kind, then a count; and a store behind. */
static void say_skipped(pulse_follower *f, const listing *l)
{
    char n[24];
    if (f->c.store_behind && f->have) {
        char h[24];
        u64s(h, sizeof h, f->step);
        u64s(n, sizeof n, f->behind_newest);
        follow_log(f, "store-behind", "held", h, "newest", f->behind_newest == UINT64_MAX ? "none" : n, NULL);
    }
    size_t refused = 0;
    for (size_t i = 0; i < l->n; i++) {
        const listed *e = &l->v[i];
        if (!e->fetched || e->ok || !is_verdict(e->err))
            continue;
        if (refused++ < FOLLOW_LOG_REFUSALS)
            follow_log(f, "refused", "record", e->rel, "reason", listed_reason(e), NULL);
    }
    if (refused > FOLLOW_LOG_REFUSALS) {
        u64s(n, sizeof n, refused - FOLLOW_LOG_REFUSALS);
        follow_log(f, "refused-more", "count", n, NULL);
    }
    for (size_t i = 0; i < l->junk && i < FOLLOW_LOG_REFUSALS; i++)
        follow_log(f, "ignored", "key", l->junk_keys[i] ? l->junk_keys[i] : "?", "reason", "not a record key", NULL);
    if (l->junk > FOLLOW_LOG_REFUSALS) {
        u64s(n, sizeof n, l->junk - FOLLOW_LOG_REFUSALS);
        follow_log(f, "ignored-more", "count", n, NULL);
    }
}

static int pull_listed(pulse_follower *f, size_t *applied, pulse_sync_step *held_out)
{
    pulse_clear_error();
    /* a check that failed makes the weights unknown: this pull then hashes them */
    if (follower_settle_check(f, 0) != 0)
        pulse_clear_error();
    listing l = { 0 };
    uint64_t before = f->c.steps_applied;
    f->stopped = 0;
    int r = f->recovered ? 0 : follower_recover(f, NULL);
    if (!r)
        r = list_records(f, &l);
    if (!r && !f->known)
        r = held_state(f, &l);
    size_t *chain = NULL, *kpath = NULL;
    if (!r && l.n && (!(chain = calloc(l.n, sizeof *chain)) || !(kpath = calloc(l.n, sizeof *kpath))))
        r = pulse_fail(PULSE_ERR_NOMEM, "record listing");
    size_t stuck = SIZE_MAX;
    if (!r && l.n) {
        /* The patch chain from the held state (it fetches every newer sync-patch record). */
        uint64_t chain_bytes = 0, chain_end = 0;
        size_t nchain = 0;
        if (f->have)
            walk_chain(f, &l, f->step, f->state, chain, &nchain, &chain_bytes, &chain_end, &stuck);
        /* Lag, catch-up and freshness go by the newest record that verifies, never by a key
         * name: junk at step 10^12 moves nothing. */
        size_t nv = 0;
        int have_newest = stuck == SIZE_MAX ? newest_verified(f, &l, &nv) : -1;
        if (have_newest < 0 && stuck == SIZE_MAX)
            stuck = nv;
        uint64_t newest = have_newest > 0 ? l.v[nv].step : 0;
        if (have_newest > 0 && f->log && !f->cadence_seeded) {
            seed_cadence(f, &l);
            f->cadence_seeded = 1;
        }
        if (f->have && have_newest >= 0)
            store_behind(f, have_newest == 0 || newest < f->step, newest, have_newest > 0);
        int ahead = have_newest > 0 && (!f->have || newest > f->step);
        int behind_far = !f->have || (ahead && (newest - f->step > f->max_behind || chain_end < newest));
        /* The newest keyframe that verifies and the chain after it. */
        size_t nk = 0, kf = 0;
        int have_kf = 0;
        uint64_t kf_bytes = 0, kf_end = 0;
        for (size_t i = l.n; stuck == SIZE_MAX && behind_far && i-- > 0;) {
            listed *e = &l.v[i];
            if (e->kind != PULSE_RECORD_KEYFRAME || (f->have && e->step <= f->step))
                continue;
            int g = get_listed(f, e);
            if (g && (is_verdict(g) || g == PULSE_ERR_NOTFOUND))
                continue;   /* refused: an older keyframe may do */
            if (g) {
                stuck = i;
                break;
            }
            kf = i;
            have_kf = 1;
            for (uint32_t k = 0; k < e->rec.n_objects; k++)
                kf_bytes += e->rec.objects[k].size;
            walk_chain(f, &l, e->step, e->rec.result, kpath, &nk, &kf_bytes, &kf_end, &stuck);
            break;
        }
        int use_kf = have_kf && (!f->have || kf_end > chain_end || (kf_end == chain_end && kf_bytes < chain_bytes));
        if (f->log && behind_far && (ahead || !f->have) && stuck == SIZE_MAX) {
            char b1[24], b2[24], b3[24], b4[24];
            u64s(b1, sizeof b1, f->have ? newest - f->step : newest + 1);
            u64s(b2, sizeof b2, chain_bytes);
            u64s(b3, sizeof b3, have_kf ? kf_bytes : 0);
            u64s(b4, sizeof b4, use_kf ? kf_end : chain_end);
            follow_log(f, "catch-up", "path", use_kf ? "keyframe" : "chain",
                     "reason", !f->have ? "no-weights" : chain_end < newest ? "chain-broken" : "behind",
                     "behind", b1, "chain_bytes", f->have ? b2 : "none", "keyframe_bytes", have_kf ? b3 : "none",
                     "to_step", b4, NULL);
        }
        if (!f->have && !have_kf && stuck == SIZE_MAX)
            r = nothing_to_start(f, &l);
        if (!r && use_kf) {
            listed *e = &l.v[kf];
            r = apply_listed(f, e->rel, &e->rec, e->bytes, e->len, e->len);
        }
        size_t *path = use_kf ? kpath : chain;
        size_t np = use_kf ? nk : nchain;
        for (size_t i = 0; !r && i < np; i++) {
            listed *e = &l.v[path[i]];
            r = apply_listed(f, e->rel, &e->rec, e->bytes, e->len, e->len);
        }
        /* Every verified step that could be applied was. A record that could not be fetched
         * ends the pull with its error (tried again next time); a chain that cannot reach the
         * newest verified record names the first record in the way. */
        if (!r && stuck != SIZE_MAX)
            r = pulse_fail(l.v[stuck].err ? l.v[stuck].err : PULSE_ERR_IO, "%s", l.v[stuck].why);
        else if (!r && ahead && f->have && f->step < newest)
            r = chain_stuck(f, &l, f->step, newest);
    } else if (!r && !f->have) {
        r = nothing_to_start(f, &l);
    } else if (!r && f->have) {
        store_behind(f, 1, 0, 0);   /* the store lists no record of the run at all */
    }
    flush_refusals(f);
    if (f->report && !r)
        say_skipped(f, &l);
    free(chain);
    free(kpath);
    listing_free(&l);
    if (applied)
        *applied = (size_t)(f->c.steps_applied - before);
    if (held_out) {
        memset(held_out, 0, sizeof *held_out);
        if (f->known && f->have) {
            held_out->step = f->step;
            memcpy(held_out->result, f->state, 32);
        }
    }
    return r;
}
