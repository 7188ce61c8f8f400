/* SPDX-License-Identifier: Apache-2.0 */
/* The follower: list a run's records, verify each step completely, then apply it in place and check the result. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/manifest.h"
#include "pulseweights/sync.h"

struct pulse_follower {
    pulse_follow_opts o;
    char *run;
    pulse_store *st;
    pulse_index *ix;
};

/* One listed record of a trusted node; its key says kind, step and node (checked again
 * against the record's own fields once fetched). */
typedef struct listed {
    int kind;
    uint64_t step;
    uint8_t node[32];
    char rel[SYNC_KEY_MAX];   /* relative to the run */
} listed;

typedef struct listing {
    const pulse_trust *trust;
    size_t run_len;
    listed *v;
    size_t n, cap;
} listing;

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
    pulse_index_close(&f->ix);
    pulse_store_close(&f->st);
    free(f->run);
    free(f);
    *pf = NULL;
}

PULSE_API int pulse_follower_open(pulse_follower **out, const pulse_follow_opts *opts)
{
    *out = NULL;
    if (!opts || opts->size < sizeof *opts || !opts->store_url || !opts->run || !opts->trust ||
        !opts->state_dir || !opts->weights_path)
        return pulse_fail(PULSE_ERR_INVALID, "follower needs a store, a run, trusted keys, a state directory and a weights path");
    if (pulse_trust_count(opts->trust) == 0)
        return pulse_fail(PULSE_ERR_INVALID, "follower trusts no key");
    pulse_follower *f = calloc(1, sizeof *f);
    if (!f || !(f->run = strdup(opts->run))) {
        free(f);
        return pulse_fail(PULSE_ERR_NOMEM, "follower");
    }
    f->o = *opts;
    int r = sync_mkdir(opts->state_dir);
    if (!r)
        r = pulse_store_open(&f->st, opts->store_url, NULL);
    if (!r) {
        char path[4096];
        snprintf(path, sizeof path, "%s/index.db", opts->state_dir);
        r = pulse_index_open(&f->ix, path);
    }
    for (size_t i = 0; !r && i < pulse_trust_count(opts->trust); i++)
        r = pulse_index_trust_key(f->ix, pulse_trust_get(opts->trust, i), (uint64_t)time(NULL));
    if (r) {
        pulse_follower_close(&f);
        return r;
    }
    *out = f;
    return 0;
}

/* records/<kind>/<step:012>/<node-hex> of a trusted node; anything else is not ours to use
 * (pulse manifest audit reports it). */
static int on_key(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)info;
    listing *l = ctx;
    const char *rel = key + l->run_len + 1;
    char kind[32], steps[16], node[80];
    if (sscanf(rel, "records/%31[a-z-]/%15[0-9]/%79[0-9a-f]", kind, steps, node) != 3 ||
        strlen(steps) != 12 || strlen(node) != 64 || strlen(rel) >= SYNC_KEY_MAX)
        return 0;
    int k = pulse_record_kind_from_name(kind);
    if (k != PULSE_RECORD_SYNC_PATCH && k != PULSE_RECORD_KEYFRAME)
        return 0;
    listed e = { .kind = k, .step = strtoull(steps, NULL, 10) };
    if (pulse_hex_decode(node, 64, e.node, 32) != 0 || !pulse_trust_find(l->trust, e.node))
        return 0;
    snprintf(e.rel, sizeof e.rel, "%s", rel);
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
    return x->kind - y->kind;
}

static int list_records(pulse_follower *f, listing *l)
{
    char prefix[SYNC_KEY_MAX];
    int r = sync_run_key(f->run, "records/", prefix);
    l->trust = f->o.trust;
    l->run_len = strlen(f->run);
    if (!r)
        r = pulse_store_list(f->st, prefix, NULL, on_key, l);
    if (!r && l->n)
        qsort(l->v, l->n, sizeof *l->v, by_step);
    return r;
}

/* Fetches and verifies one record: strict parse, trusted signature, and the key it was
 * found under must be what the record says it is (a record copied under another step's
 * key is a replay). */
static int fetch_record(pulse_follower *f, const listed *e, pulse_record *rec, uint8_t **bytes,
                        size_t *len, uint64_t *moved)
{
    char key[SYNC_KEY_MAX], want[SYNC_KEY_MAX];
    void *data = NULL;
    size_t n = 0;
    int r = sync_run_key(f->run, e->rel, key);
    if (!r)
        r = pulse_store_get(f->st, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &n, NULL);
    if (!r) {
        *moved += n;
        r = pulse_record_verify(data, n, f->o.trust, NULL, rec);
    }
    if (!r && ((r = pulse_record_key(rec, want, sizeof want)) != 0 || strcmp(want, e->rel) != 0 ||
               strcmp(rec->run, f->run) != 0)) {
        r = pulse_fail(PULSE_ERR_FORMAT, "record found under %s says it is %s of run %s (replayed or moved)",
                       e->rel, want, rec->run);
        pulse_record_clear(rec);
    }
    if (!r) {
        *bytes = data;
        *len = n;
    } else {
        pulse_store_free(data);
    }
    return r;
}

/* The index keeps every record seen with its verdict. A record that does not even parse is
 * not stored (its key may say anything); the refusal is still reported to the caller. */
static void journal_verdict(pulse_follower *f, const char *rel, const uint8_t *bytes, size_t len,
                            int verdict, const char *reason)
{
    char saved[512];
    snprintf(saved, sizeof saved, "%s", pulse_last_error());
    if (bytes && pulse_index_put_record(f->ix, rel, bytes, len, (uint64_t)time(NULL), NULL, NULL) == 0)
        pulse_index_mark_verified(f->ix, rel, verdict, reason);
    pulse_fail(0, "%s", saved);
}

static int held_state(pulse_follower *f, listing *l, int *have, uint64_t *step, uint8_t state[32])
{
    *have = 0;
    if (access(f->o.weights_path, F_OK) != 0)
        return 0;
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_open(&c, f->o.weights_path, PULSE_CKPT_READ);
    if (!r)
        r = pulse_ckpt_state_id(c, f->o.threads, state);
    pulse_ckpt_close(&c);
    if (r)
        return pulse_fail(r, "weights %s: %s", f->o.weights_path, pulse_last_error());
    pulse_index_applied a;
    if (pulse_index_last_applied(f->ix, f->run, &a) == 0 && !memcmp(a.state, state, 32)) {
        *have = 1;
        *step = a.step;
        return 0;
    }
    /* Weights this index did not write (copied in, or an older index): find the newest
     * trusted record that produces exactly this state. */
    for (size_t i = l->n; i-- > 0;) {
        pulse_record rec;
        uint8_t *bytes = NULL;
        size_t len;
        uint64_t moved = 0;
        if (fetch_record(f, &l->v[i], &rec, &bytes, &len, &moved) != 0)
            continue;
        int match = !memcmp(rec.result, state, 32);
        uint64_t s = rec.step;
        pulse_record_clear(&rec);
        pulse_store_free(bytes);
        if (match) {
            *have = 1;
            *step = s;
            return 0;
        }
    }
    char hex[65];
    return pulse_fail(PULSE_ERR_MISMATCH, "weights %s hold state %.16s..., which no trusted record of run %s produces",
                      f->o.weights_path, pulse_id_hex(state, hex), f->run);
}

static int apply_patch_step(pulse_follower *f, const pulse_record *rec, const uint8_t held[32],
                            uint64_t *moved)
{
    if (rec->n_objects != 1 || strcmp(rec->objects[0].role, "patch") != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "sync-patch record names %u objects, wanted one 'patch'", rec->n_objects);
    if (memcmp(rec->base, held, 32) != 0)
        return pulse_fail(PULSE_ERR_MISMATCH, "its base is not the state these weights hold");
    void *data = NULL;
    int r = sync_fetch_objects(f->st, f->run, rec->objects, 1, &data, moved);
    pulse_patch *p = NULL;
    if (!r)
        r = pulse_patch_open_mem(&p, data, rec->objects[0].size);
    pulse_store_free(data);
    if (!r && (memcmp(pulse_patch_base_id(p), rec->base, 32) || memcmp(pulse_patch_result_id(p), rec->result, 32)))
        r = pulse_fail(PULSE_ERR_MISMATCH, "the patch's own state ids differ from the record's");
    pulse_ckpt *w = NULL;
    if (!r)
        r = pulse_ckpt_open(&w, f->o.weights_path, PULSE_CKPT_WRITE);
    if (!r)
        r = pulse_patch_apply(p, w, f->o.threads);
    if (!r)
        r = pulse_ckpt_sync(w);
    pulse_ckpt_close(&w);
    pulse_patch_close(&p);
    return r;
}

static int step_done(pulse_follower *f, const char *rel, const pulse_record *rec, const uint8_t *bytes,
                     size_t len, uint64_t moved, pulse_sync_step *s)
{
    int r = pulse_index_put_record(f->ix, rel, bytes, len, (uint64_t)time(NULL), NULL, NULL);
    if (!r)
        r = pulse_index_mark_verified(f->ix, rel, PULSE_VERDICT_OK, "applied");
    if (!r)
        r = pulse_index_mark_applied(f->ix, f->run, rec->step, rec->result, (uint64_t)time(NULL),
                                     f->o.weights_path);
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
    if (!r && f->o.on_step && f->o.on_step(f->o.ctx, s) != 0)
        r = pulse_fail(PULSE_ERR_INVALID, "stopped by the caller after step %llu", (unsigned long long)rec->step);
    return r;
}

/* Starts the weights from the newest trusted keyframe that verifies. */
static int start_from_keyframe(pulse_follower *f, listing *l, uint64_t *step, uint8_t state[32],
                               pulse_sync_step *s)
{
    for (size_t i = l->n; i-- > 0;) {
        if (l->v[i].kind != PULSE_RECORD_KEYFRAME)
            continue;
        pulse_record rec;
        uint8_t *bytes = NULL;
        size_t len;
        uint64_t moved = 0;
        int r = fetch_record(f, &l->v[i], &rec, &bytes, &len, &moved);
        if (!r)
            r = sync_keyframe_restore(f->st, f->run, &rec, f->o.threads, f->o.weights_path, &moved);
        if (r) {
            r = pulse_fail(r, "step %llu: %s: %s", (unsigned long long)l->v[i].step, l->v[i].rel,
                           pulse_last_error());
            journal_verdict(f, l->v[i].rel, bytes, len, PULSE_VERDICT_REFUSED, pulse_last_error());
            pulse_store_free(bytes);
            return r;
        }
        r = step_done(f, l->v[i].rel, &rec, bytes, len, moved, s);
        *step = rec.step;
        memcpy(state, rec.result, 32);
        pulse_record_clear(&rec);
        pulse_store_free(bytes);
        return r;
    }
    return pulse_fail(PULSE_ERR_NOTFOUND, "run %s has no keyframe from a trusted key to start from", f->run);
}

PULSE_API int pulse_follower_pull(pulse_follower *f, size_t *applied, pulse_sync_step *held_out)
{
    pulse_clear_error();
    listing l = { 0 };
    size_t count = 0;
    int have = 0;
    uint64_t step = 0;
    uint8_t state[32];
    pulse_sync_step s = { 0 };

    int r = list_records(f, &l);
    if (!r)
        r = held_state(f, &l, &have, &step, state);
    if (!r && !have) {
        r = start_from_keyframe(f, &l, &step, state, &s);
        if (!r)
            count++, have = 1;
    }
    for (size_t i = 0; !r && i < l.n; i++) {
        const listed *e = &l.v[i];
        if (e->kind != PULSE_RECORD_SYNC_PATCH || e->step <= step)
            continue;
        pulse_record rec;
        uint8_t *bytes = NULL;
        size_t len = 0;
        uint64_t moved = 0;
        r = fetch_record(f, e, &rec, &bytes, &len, &moved);
        if (!r && rec.step <= step)
            r = pulse_fail(PULSE_ERR_MISMATCH, "step %llu is not newer than the held step %llu (rollback)",
                           (unsigned long long)rec.step, (unsigned long long)step);
        if (!r)
            r = apply_patch_step(f, &rec, state, &moved);
        if (r) {
            r = pulse_fail(r, "step %llu: %s: %s", (unsigned long long)e->step, e->rel, pulse_last_error());
            journal_verdict(f, e->rel, bytes, len, PULSE_VERDICT_REFUSED, pulse_last_error());
        } else {
            r = step_done(f, e->rel, &rec, bytes, len, moved, &s);
            step = rec.step;
            memcpy(state, rec.result, 32);
            count++;
        }
        if (bytes)
            pulse_record_clear(&rec);
        pulse_store_free(bytes);
    }
    free(l.v);
    if (applied)
        *applied = count;
    if (held_out) {
        memset(held_out, 0, sizeof *held_out);
        held_out->step = step;
        if (have)
            memcpy(held_out->result, state, 32);
    }
    return r;
}
