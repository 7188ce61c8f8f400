/* SPDX-License-Identifier: Apache-2.0 */
/* A run's records as a follower sees them: listed, fetched, verified, and refused for good or for now. */
#include <stdlib.h>
#include "base/fail.h"
#include "manifest/layout.h"
#include "crypto/sha256.h"
#include "node/sync/follower.h"

static void saw_record(pulse_follower *f, const pulse_record *rec)
{
    cadence_note(&f->c.cadence, rec->step, rec->time);
    if (!f->c.have_newest || rec->step > f->c.newest_step || (rec->step == f->c.newest_step && !f->c.newest_time)) {
        f->c.newest_step = rec->step;
        f->c.newest_time = rec->time;
        f->c.have_newest = 1;
    }
}

/* "PREFIX: <the current detail>" (the detail is copied first: it is the buffer written). */
int fail_prefixed(int r, const char *prefix)
{
    char d[512];
    snprintf(d, sizeof d, "%s", pulse_last_error());
    return pulse_fail(r, "%s: %s", prefix, d);
}

/* "step N: REL: <the current detail>", the line a refused or failed step is named by. */
int fail_step(int r, uint64_t step, const char *rel)
{
    char p[SYNC_KEY_MAX + 32];
    snprintf(p, sizeof p, "step %" PRIu64 ": %s", step, rel);
    return fail_prefixed(r, p);
}

/* Parses records/<kind>/<step:012>/<node-hex>; 0 when it is a sync-patch or keyframe record
 * of a trusted node, -2 when it is one of a node not trusted (e->node set), else -1. */
int parse_rel(const pulse_trust *trust, const char *rel, listed *e)
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

/* Lists the run's records of trusted nodes into L, by step (junk and untrusted keys counted). */
int list_records(pulse_follower *f, listing *l)
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

/* Frees what L holds (records, their bytes, the junk keys kept). */
void listing_free(listing *l)
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
int fetch_record(pulse_follower *f, const char *rel, const uint8_t *have, size_t have_len, pulse_record *rec,
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
int is_verdict(int r)
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
void flush_refusals(pulse_follower *f)
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
void refuse_record(pulse_follower *f, const char *rel, const uint8_t *bytes, size_t len, const char *etag,
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
void refuse_step(pulse_follower *f, int r, const char *rel)
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
int get_listed(pulse_follower *f, listed *e)
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
