/* SPDX-License-Identifier: Apache-2.0 */
/* The run audit: lists everything under a run and re-checks records, chain, objects, orphans and heads. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "base/fail.h"
#include "base/names.h"
#include "crypto/sha256.h"
#include "manifest/layout.h"
#include "manifest/patch_objects.h"
#include "pulseweights/audit.h"
#include "pulseweights/checkpoint.h"

#define HEAD_MAX_BYTES PULSE_LAYOUT_HEAD_MAX   /* a key line, a time line and a record (manifest/layout.h) */
#define RECORD_BATCH 256u              /* records or heads fetched per batch */
#define OBJECT_BATCH 256u              /* objects per batch (and at most memory_bytes of them) */
#define SIGNATURE_FIELD (1u + 4u + PULSE_SIGNATURE_BYTES)  /* tag, length, signature: the tail of every record */

/* An object key seen in the listing. */
struct listed_object {
    uint8_t digest[PULSE_DIGEST_BYTES];
    uint64_t size;
    int named;
    int family;    /* listed under the parent run's objects/ (a part run's audit): another part's, maybe */
};

/* One (record, object) pair: a record naming an object. */
struct naming {
    const uint8_t *digest;
    size_t entry;                      /* index into the entries */
    uint32_t object;                   /* index into that record's objects */
};

struct head {
    char key[PULSE_AUDIT_MAX_KEY];     /* relative to the run */
    uint64_t size;
    char *content;                     /* as read (NUL added), or NULL when it could not be read */
    size_t content_len;
};

struct audit {
    pulse_store *st;
    const char *run;
    pulse_audit_opts o;
    pulse_audit_report *rep;
    pulse_store_settings settings;
    int oom;
    /* From the listing. */
    pulse_audit_entry *entries;
    size_t n_entries, cap_entries;
    struct listed_object *objects;
    size_t n_objects, cap_objects;
    struct head *heads;
    size_t n_heads, cap_heads;
    uint64_t keyframe_keys, patch_keys;
    /* Parsed records, parallel to entries (zeroed when the record did not parse). */
    pulse_record *recs;
};

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory");
    memset((char *)q + *cap * elem, 0, (nc - *cap) * elem);
    *p = q;
    *cap = nc;
    return 0;
}

static void abbrev(const uint8_t *id, size_t n, char out[17])
{
    char full[2 * PULSE_DIGEST_BYTES + 1];
    pulse_hex_encode(id, n < PULSE_DIGEST_BYTES ? n : PULSE_DIGEST_BYTES, full);
    memcpy(out, full, 16);
    out[16] = 0;
}

/* Appends one problem line, prefixed with the step and key of E when E is not NULL. */
static void problem(struct audit *a, pulse_audit_entry *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem(struct audit *a, pulse_audit_entry *e, const char *fmt, ...)
{
    char line[PULSE_AUDIT_MAX_PROBLEM];
    int n = 0;
    if (e) {
        e->problems++;
        n = snprintf(line, sizeof line, "step %llu: %s: ", (unsigned long long)e->key_step, e->key);
        if (n < 0 || (size_t)n >= sizeof line)
            n = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* Keys and heads come from the bucket: never let their bytes steer a terminal. */
    for (char *c = line; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    pulse_audit_report *r = a->rep;
    char **np = realloc(r->problems, (r->n_problems + 1) * sizeof *np);
    char *dup = strdup(line);
    if (!np || !dup) {
        free(dup);
        if (np)
            r->problems = np;
        a->oom = 1;
        return;
    }
    r->problems = np;
    r->problems[r->n_problems++] = dup;
}

/* A record key "records/<kind>/<step>/<node>" or "receipts/<node>/<step>" (manifest/layout.c):
 * its kind and step; -1 when it is not one. */
static int classify_record_key(const char *rel, int *kind, uint64_t *step)
{
    uint8_t node[PULSE_PUBLIC_KEY_BYTES];
    return pulse_layout_parse_record(rel, kind, step, node);
}

static int add_listed(struct audit *a, const uint8_t d[PULSE_DIGEST_BYTES], uint64_t size, int family)
{
    int rc = grow((void **)&a->objects, &a->cap_objects, a->n_objects, sizeof *a->objects);
    if (rc)
        return rc;
    struct listed_object *o = &a->objects[a->n_objects++];
    memset(o, 0, sizeof *o);
    memcpy(o->digest, d, PULSE_DIGEST_BYTES);
    o->size = size;
    o->family = family;
    return 0;
}

/* A part run's objects lie in its parent's objects/ (manifest/layout.h), beside its siblings':
 * listed so that what its records name is found, never reported as orphans. */
static int list_family_cb(void *ctx, const char *key, const pulse_object_info *info)
{
    struct audit *a = ctx;
    const char *slash = strchr(key, '/');
    uint8_t d[PULSE_DIGEST_BYTES];
    if (!slash || pulse_layout_parse_object(slash + 1, d))
        return 0;
    return add_listed(a, d, info->size, 1);
}

static int list_cb(void *ctx, const char *key, const pulse_object_info *info)
{
    struct audit *a = ctx;
    size_t rl = strlen(a->run);
    if (strncmp(key, a->run, rl) || key[rl] != '/')
        return 0;  /* a prefix of another run name ("r" listing "r2/...") is not ours */
    const char *rel = key + rl + 1;
    pulse_audit_report *r = a->rep;
    r->keys++;
    r->key_bytes += info->size;
    int kind;
    uint64_t step;
    if (PULSE_LAYOUT_IN(rel, PULSE_LAYOUT_OBJECTS)) {
        r->objects++;
        r->object_bytes += info->size;
        uint8_t d[PULSE_DIGEST_BYTES];
        if (pulse_layout_parse_object(rel, d)) {
            problem(a, NULL, "%s: not a content address (objects/<64 lower-case hex digits>)", rel);
            return 0;
        }
        int rc = add_listed(a, d, info->size, 0);
        if (rc)
            return rc;
    } else if (!classify_record_key(rel, &kind, &step)) {
        r->records++;
        r->record_bytes += info->size;
        if (strlen(rel) >= PULSE_AUDIT_MAX_KEY)
            return pulse_fail(PULSE_ERR_LIMIT, "audit: key %s too long", key);
        int rc = grow((void **)&a->entries, &a->cap_entries, a->n_entries, sizeof *a->entries);
        if (rc)
            return rc;
        pulse_audit_entry *e = &a->entries[a->n_entries++];
        memset(e, 0, sizeof *e);
        snprintf(e->key, sizeof e->key, "%s", rel);
        e->key_step = step;
        e->kind = kind;
        e->listed_bytes = info->size;
        if (kind == PULSE_RECORD_KEYFRAME)
            a->keyframe_keys++;
        else if (kind == PULSE_RECORD_SYNC_PATCH)
            a->patch_keys++;
    } else if (PULSE_LAYOUT_IN(rel, PULSE_LAYOUT_HEADS) && strlen(rel) < PULSE_AUDIT_MAX_KEY) {
        r->heads++;
        int rc = grow((void **)&a->heads, &a->cap_heads, a->n_heads, sizeof *a->heads);
        if (rc)
            return rc;
        struct head *h = &a->heads[a->n_heads++];
        snprintf(h->key, sizeof h->key, "%s", rel);
        h->size = info->size;
        h->content = NULL;
    } else {
        problem(a, NULL, "%s: unexpected key in the run (not an object, record, receipt or head)", rel);
    }
    return 0;
}

static void full_key(const struct audit *a, const char *rel, char *out, size_t cap)
{
    if (pulse_layout_join(out, cap, a->run, rel))
        pulse_clear_error();   /* the run was checked on entry; a key too long is not found */
}

/* Checks one fetched record: strict parse, run and key, trust and signature. */
static void check_record(struct audit *a, size_t i, const uint8_t *bytes, size_t len)
{
    pulse_audit_entry *e = &a->entries[i];
    pulse_record *r = &a->recs[i];
    int rc = pulse_record_parse(bytes, len, r);
    if (rc) {
        problem(a, e, "does not parse: %s", pulse_last_error());
        return;
    }
    e->parsed = 1;
    e->kind = r->kind;
    e->step = r->step;
    e->time = r->time;
    e->changes = r->changes;
    e->dense_bytes = r->dense_bytes;
    e->patch_bytes = r->patch_bytes;
    e->n_objects = r->n_objects;
    memcpy(e->node, r->node, sizeof e->node);
    memcpy(e->base, r->base, sizeof e->base);
    memcpy(e->result, r->result, sizeof e->result);
    for (uint32_t k = 0; k < r->n_objects; k++)
        e->object_bytes += r->objects[k].size;

    int ok = 1;
    char want[PULSE_AUDIT_MAX_KEY];
    if (strcmp(r->run, a->run)) {
        problem(a, e, "record is for run '%s', found under run '%s'", r->run, a->run);
        ok = 0;
    }
    char node[17];
    abbrev(r->node, sizeof r->node, node);
    if (pulse_record_key(r, want, sizeof want) || strcmp(want, e->key)) {
        problem(a, e, "the record inside is %s step %llu by node %s: filed under another key "
                "(a record copied or moved)", pulse_record_kind_name(r->kind), (unsigned long long)r->step, node);
        ok = 0;
    }
    if (r->kind == PULSE_RECORD_RECEIPT) {
        /* Receipts are signed by followers, which need not be in the trainers' trust set: check
         * that the receipt's own key signed it (it was not altered), and trust when known. */
        if (len < SIGNATURE_FIELD || pulse_verify(r->node, bytes, len - SIGNATURE_FIELD, r->signature)) {
            problem(a, e, "signature does not verify (node %s)", node);
            ok = 0;
        }
        e->signer = a->o.trust ? pulse_trust_find(a->o.trust, r->node) : NULL;
        e->trusted = e->signer != NULL && ok;
        e->valid = ok;
        return;
    }
    const pulse_public_key *k = a->o.trust ? pulse_trust_find(a->o.trust, r->node) : NULL;
    if (!k) {
        problem(a, e, "not signed by a trusted key (node %s)", node);
        return;
    }
    const pulse_public_key *signer = NULL;
    rc = pulse_record_verify(bytes, len, a->o.trust, &signer, NULL);
    if (rc) {
        problem(a, e, "signature does not verify (node %s, %s)", node, k->comment);
        return;
    }
    e->signer = signer;
    e->trusted = 1;
    e->valid = ok;
}

/* Fetches every record and head in batches of at most RECORD_BATCH keys. */
static int fetch_records_and_heads(struct audit *a)
{
    size_t total = a->n_entries + a->n_heads;
    pulse_transfer *x = calloc(RECORD_BATCH, sizeof *x);
    char (*keys)[PULSE_AUDIT_MAX_KEY + 160] = calloc(RECORD_BATCH, sizeof *keys);
    if (!x || !keys) {
        free(x);
        free(keys);
        return pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory");
    }
    for (size_t at = 0; at < total; at += RECORD_BATCH) {
        size_t n = total - at < RECORD_BATCH ? total - at : RECORD_BATCH, m = 0;
        size_t idx[RECORD_BATCH];
        for (size_t j = 0; j < n; j++) {
            size_t g = at + j;
            int is_head = g >= a->n_entries;
            const char *rel = is_head ? a->heads[g - a->n_entries].key : a->entries[g].key;
            uint64_t listed = is_head ? a->heads[g - a->n_entries].size : a->entries[g].listed_bytes;
            size_t cap = is_head ? HEAD_MAX_BYTES : PULSE_RECORD_MAX_BYTES;
            if (listed > cap) {
                if (is_head)
                    problem(a, NULL, "%s: %llu bytes, a head is at most %u", rel, (unsigned long long)listed,
                            (unsigned)HEAD_MAX_BYTES);
                else
                    problem(a, &a->entries[g], "%llu bytes, more than a record may have (%u)",
                            (unsigned long long)listed, PULSE_RECORD_MAX_BYTES);
                continue;
            }
            memset(&x[m], 0, sizeof x[m]);
            full_key(a, rel, keys[m], sizeof keys[m]);
            x[m].op = PULSE_XFER_GET;
            x[m].key = keys[m];
            x[m].length = PULSE_TO_END;
            x[m].max_size = cap;
            idx[m++] = g;
        }
        (void)pulse_store_batch(a->st, x, m);  /* per-transfer results below */
        a->rep->requests.audit_gets += m;
        for (size_t j = 0; j < m; j++) {
            size_t g = idx[j];
            if (g >= a->n_entries) {
                struct head *h = &a->heads[g - a->n_entries];
                if (x[j].result) {
                    problem(a, NULL, "%s: cannot be read: %s", h->key, x[j].detail);
                } else if ((h->content = malloc(x[j].len + 1)) != NULL) {
                    memcpy(h->content, x[j].out, x[j].len);
                    h->content[x[j].len] = 0;
                    h->content_len = x[j].len;
                } else {
                    a->oom = 1;
                }
            } else if (x[j].result) {
                problem(a, &a->entries[g], "cannot be read: %s", x[j].detail);
            } else {
                check_record(a, g, x[j].out, x[j].len);
            }
            pulse_store_free(x[j].out);
            x[j].out = NULL;
        }
    }
    free(x);
    free(keys);
    return a->oom ? pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory") : 0;
}

static int entry_cmp(const void *pa, const void *pb)
{
    const pulse_audit_entry *x = pa, *y = pb;
    if (x->key_step != y->key_step)
        return x->key_step < y->key_step ? -1 : 1;
    return strcmp(x->key, y->key);
}

static int is_chain_kind(int kind)
{
    return kind == PULSE_RECORD_SYNC_PATCH || kind == PULSE_RECORD_KEYFRAME;
}

/* What the layout of docs/sync.md requires of a valid sync record's objects and figures. */
static void check_shape(struct audit *a, size_t i)
{
    pulse_audit_entry *e = &a->entries[i];
    const pulse_record *r = &a->recs[i];
    if (e->patch_bytes != e->object_bytes)
        problem(a, e, "summary says %llu patch bytes, its objects have %llu", (unsigned long long)e->patch_bytes,
                (unsigned long long)e->object_bytes);
    if (r->kind == PULSE_RECORD_SYNC_PATCH) {
        patch_objects po;
        if (patch_objects_of(r, &po) != 0)
            problem(a, e, "%s", pulse_last_error());
        patch_objects_free(&po);
    } else if (r->kind == PULSE_RECORD_KEYFRAME) {
        /* keyframe-chunk objects, all with tensor "" (one file) or all naming a shard file (a
         * sharded keyframe: each shard's chunks consecutive, tiling that shard's file), then only
         * tensor-hashes objects (not part of the content). */
        uint64_t at = 0;
        uint32_t *starts = NULL, nstarts = 0;   /* each shard's first chunk */
        int hashes = 0;
        uint32_t k = 0;
        for (; k < r->n_objects; k++) {
            const pulse_record_object *o = &r->objects[k];
            if (!strcmp(o->role, "tensor-hashes")) {
                hashes = 1;
                continue;
            }
            if (strcmp(o->role, "keyframe-chunk")) {
                problem(a, e, "keyframe object %u has role '%s', not 'keyframe-chunk' or 'tensor-hashes'", k, o->role);
                break;
            }
            if (hashes) {
                problem(a, e, "keyframe object %u is a keyframe-chunk after a tensor-hashes object", k);
                break;
            }
            const char *name = o->tensor ? o->tensor : "";
            const char *first = r->objects[0].tensor ? r->objects[0].tensor : "";
            if (!*first != !*name) {
                problem(a, e, "keyframe object %u: chunks with and without a shard name in one record", k);
                break;
            }
            if (*name && !pulse_layout_shard_name_ok(name)) {
                problem(a, e, "keyframe object %u: shard name '%.80s' is not a plain *.safetensors file name", k, name);
                break;
            }
            const char *cur = nstarts ? r->objects[starts[nstarts - 1]].tensor : NULL;
            if (!cur || strcmp(cur, name)) {
                uint32_t q = 0;
                while (q < nstarts && strcmp(r->objects[starts[q]].tensor, name))
                    q++;
                if (q < nstarts) {
                    problem(a, e, "keyframe object %u: shard %s again after shard %s "
                            "(a shard's chunks must be consecutive)", k, name, cur);
                    break;
                }
                if (nstarts == PULSE_ST_MAX_SHARDS) {
                    problem(a, e, "keyframe of more than %u shards", PULSE_ST_MAX_SHARDS);
                    break;
                }
                if (!starts && !(starts = malloc(PULSE_ST_MAX_SHARDS * sizeof *starts))) {
                    a->oom = 1;
                    break;
                }
                starts[nstarts++] = k;
                at = 0;
            }
            if (o->range_offset != at || o->range_length == 0) {
                problem(a, e, "keyframe chunk %u covers [%llu+%llu]%s%s, expected to start at %llu "
                        "(chunks must cover the %s in order without gaps or overlaps)", k,
                        (unsigned long long)o->range_offset, (unsigned long long)o->range_length,
                        *name ? " of shard " : "", name, (unsigned long long)at, *name ? "shard's file" : "file");
                break;
            }
            at += o->range_length;
        }
        if (k == r->n_objects && !nstarts)
            problem(a, e, "keyframe record names no chunk");
        free(starts);
    }
}

/* Chain continuity over keyframes and sync patches: gaps, links, disagreeing results. */
static void check_chain(struct audit *a)
{
    size_t n = a->n_entries;
    int have_prev = 0, started = 0;
    uint64_t prev_step = 0;
    size_t prev_lo = 0, prev_hi = 0;        /* entries of the previous step with records */
    uint64_t elements = 0;
    for (size_t lo = 0; lo < n;) {
        if (!is_chain_kind(a->entries[lo].kind)) {
            lo++;
            continue;
        }
        uint64_t s = a->entries[lo].key_step;
        size_t hi = lo;
        while (hi < n && a->entries[hi].key_step == s)
            hi++;
        /* The keyframe element count for densities (any readable keyframe: `ls` runs without
         * trust too), and the results of this step. */
        for (size_t i = lo; i < hi; i++)
            if (a->entries[i].parsed && a->entries[i].kind == PULSE_RECORD_KEYFRAME)
                elements = a->entries[i].changes;
        const pulse_audit_entry *first_valid = NULL;
        for (size_t i = lo; i < hi; i++) {
            pulse_audit_entry *e = &a->entries[i];
            if (!is_chain_kind(e->kind) || !e->valid)
                continue;
            if (first_valid && memcmp(first_valid->result, e->result, PULSE_DIGEST_BYTES)) {
                char x[17], y[17];
                abbrev(e->result, PULSE_DIGEST_BYTES, x);
                abbrev(first_valid->result, PULSE_DIGEST_BYTES, y);
                problem(a, e, "result %s disagrees with %s's result %s at the same step", x, first_valid->key, y);
            }
            if (!first_valid)
                first_valid = e;
        }
        for (size_t i = lo; i < hi; i++)
            if (is_chain_kind(a->entries[i].kind))
                a->entries[i].elements = elements;
        if (have_prev && s > prev_step + 1) {
            if (s == prev_step + 2)
                problem(a, NULL, "step %llu: no record (gap in the chain)", (unsigned long long)(prev_step + 1));
            else
                problem(a, NULL, "steps %llu..%llu: no record (gap in the chain)",
                        (unsigned long long)(prev_step + 1), (unsigned long long)(s - 1));
        }
        for (size_t i = lo; i < hi; i++) {
            pulse_audit_entry *e = &a->entries[i];
            if (e->kind != PULSE_RECORD_SYNC_PATCH || !e->valid)
                continue;
            if (!started) {
                /* With earlier (invalid, already reported) records the start was lost, not absent. */
                if (!have_prev)
                    problem(a, e, "sync-patch before any keyframe: the chain has no start");
                continue;
            }
            int prev_valid = 0, linked = 0;
            for (size_t j = prev_lo; j < prev_hi; j++) {
                const pulse_audit_entry *p = &a->entries[j];
                if (!is_chain_kind(p->kind) || !p->valid)
                    continue;
                prev_valid = 1;
                if (!memcmp(p->result, e->base, PULSE_DIGEST_BYTES))
                    linked = 1;
            }
            if (linked || (!prev_valid && have_prev && prev_step + 1 == s))
                continue;  /* linked, or the previous step's record is bad (already reported) */
            char b[17];
            abbrev(e->base, PULSE_DIGEST_BYTES, b);
            const pulse_audit_entry *older = NULL;
            for (size_t j = 0; j < prev_lo; j++)
                if (is_chain_kind(a->entries[j].kind) && a->entries[j].valid
                    && !memcmp(a->entries[j].result, e->base, PULSE_DIGEST_BYTES))
                    older = &a->entries[j];
            if (older)
                problem(a, e, "base %s is the result of step %llu, not of step %llu (broken link)", b,
                        (unsigned long long)older->key_step, (unsigned long long)prev_step);
            else if (prev_valid || !have_prev)
                problem(a, e, "base %s is the result of no earlier record (broken link)", b);
            else
                problem(a, e, "base %s is the result of no earlier record (after a gap)", b);
        }
        for (size_t i = lo; i < hi; i++)
            if (a->entries[i].valid && a->entries[i].kind == PULSE_RECORD_KEYFRAME)
                started = 1;
        if (!started) {
            /* No valid keyframe yet: the start of the chain is a later keyframe. */
            for (size_t i = lo; i < hi; i++)
                if (a->entries[i].kind == PULSE_RECORD_SYNC_PATCH && a->entries[i].valid)
                    started = 1;  /* reported once above; link what follows to it */
        }
        have_prev = 1;
        prev_step = s;
        prev_lo = lo;
        prev_hi = hi;
        lo = hi;
    }
}

static int naming_cmp(const void *pa, const void *pb)
{
    const struct naming *x = pa, *y = pb;
    int c = memcmp(x->digest, y->digest, PULSE_DIGEST_BYTES);
    if (c)
        return c;
    return x->entry < y->entry ? -1 : x->entry > y->entry;
}

static int digest_only_cmp(const void *pa, const void *pb)
{
    return memcmp(((const struct naming *)pa)->digest, ((const struct naming *)pb)->digest, PULSE_DIGEST_BYTES);
}

/* A record whose objects the audit checks: it verified under the trust set (for a receipt, its
 * signer is trusted too) and its content matches its key and run. */
static int verified_naming(const pulse_audit_entry *e)
{
    return e->parsed && e->valid && e->trusted;
}

static int object_cmp(const void *pa, const void *pb)
{
    return memcmp(((const struct listed_object *)pa)->digest, ((const struct listed_object *)pb)->digest,
                  PULSE_DIGEST_BYTES);
}

/* One object to download: its namings are nm[first .. first+count). */
struct job {
    size_t first, count;
    uint64_t size;
    int to_file;
    char *path;                        /* the temporary copy of a large object */
};

/* zstd frame of a keyframe chunk: decompresses to exactly range_length bytes. */
static int check_keyframe_chunk(const pulse_record_object *o, const void *bytes, size_t len)
{
    unsigned long long want = ZSTD_getFrameContentSize(bytes, len);
    if (want == ZSTD_CONTENTSIZE_ERROR)
        return pulse_fail(PULSE_ERR_FORMAT, "keyframe chunk is not a zstd frame");
    if (want != ZSTD_CONTENTSIZE_UNKNOWN && want != o->range_length)
        return pulse_fail(PULSE_ERR_FORMAT, "keyframe chunk decompresses to %llu bytes, its range is %llu",
                          want, (unsigned long long)o->range_length);
    if (o->range_length > (64u << 20))
        return 0;  /* beyond what a chunk is ever cut to; the frame header check above suffices */
    void *out = malloc(o->range_length ? (size_t)o->range_length : 1);
    if (!out)
        return pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory");
    size_t got = ZSTD_decompress(out, (size_t)o->range_length, bytes, len);
    free(out);
    if (ZSTD_isError(got))
        return pulse_fail(PULSE_ERR_FORMAT, "keyframe chunk does not decompress: %s", ZSTD_getErrorName(got));
    if (got != o->range_length)
        return pulse_fail(PULSE_ERR_FORMAT, "keyframe chunk decompresses to %zu bytes, its range is %llu", got,
                          (unsigned long long)o->range_length);
    return 0;
}

/* Hash and content checks of one downloaded object. */
static void check_object_bytes(struct audit *a, const struct naming *nm, const struct job *j, const void *bytes,
                               size_t len)
{
    pulse_audit_entry *e0 = &a->entries[nm[j->first].entry];
    char hex[2 * PULSE_DIGEST_BYTES + 1];
    pulse_hex_encode(nm[j->first].digest, PULSE_DIGEST_BYTES, hex);
    if (len != j->size) {
        problem(a, e0, "objects/%s: %s than declared: %s%zu bytes, record says %llu", hex,
                len > j->size ? "longer" : "shorter", len > j->size ? "at least " : "", len,
                (unsigned long long)j->size);
        return;
    }
    uint8_t d[PULSE_DIGEST_BYTES];
    pulse_sha256(bytes, len, d);
    a->rep->objects_checked++;
    a->rep->bytes_hashed += len;
    if (memcmp(d, nm[j->first].digest, PULSE_DIGEST_BYTES)) {
        char got[17];
        abbrev(d, sizeof d, got);
        problem(a, e0, "objects/%s: SHA-256 of its bytes is %s..., not its name (the object was altered)", hex, got);
        return;
    }
    for (size_t k = j->first; k < j->first + j->count; k++) {
        pulse_audit_entry *e = &a->entries[nm[k].entry];
        const pulse_record *r = &a->recs[nm[k].entry];
        const pulse_record_object *o = &r->objects[nm[k].object];
        int rc = 0;
        if (!strcmp(o->role, "keyframe-chunk"))
            rc = check_keyframe_chunk(o, bytes, len);
        if (!rc && a->o.check_content) {
            pulse_clear_error();
            rc = a->o.check_content(a->o.content_ctx, r, o, bytes, len);
        }
        if (rc)
            problem(a, e, "objects/%s: %s", hex, pulse_last_error()[0] ? pulse_last_error() : pulse_strerror(rc));
    }
}

/* The result of one job's transfer. */
static void finish_job(struct audit *a, const struct naming *nm, const struct job *j, pulse_transfer *x)
{
    pulse_audit_entry *e0 = &a->entries[nm[j->first].entry];
    char hex[2 * PULSE_DIGEST_BYTES + 1];
    pulse_hex_encode(nm[j->first].digest, PULSE_DIGEST_BYTES, hex);
    if (x->result) {
        problem(a, e0, "objects/%s: cannot be read: %s", hex, x->detail);
        if (j->to_file)
            unlink(j->path);
        return;
    }
    if (!j->to_file) {
        check_object_bytes(a, nm, j, x->out, x->len);
        return;
    }
    int fd = open(j->path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        problem(a, e0, "objects/%s: downloaded copy %s cannot be opened", hex, j->path);
    } else if (sb.st_size == 0) {
        check_object_bytes(a, nm, j, "", 0);
    } else {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            problem(a, e0, "objects/%s: downloaded copy %s cannot be mapped", hex, j->path);
        } else {
            check_object_bytes(a, nm, j, m, (size_t)sb.st_size);
            munmap(m, (size_t)sb.st_size);
        }
    }
    if (fd >= 0)
        close(fd);
    unlink(j->path);
}

/* Downloads the jobs in batches bounded by count and by memory_bytes of in-memory objects. */
static int download(struct audit *a, const struct naming *nm, struct job *jobs, size_t n_jobs)
{
    pulse_transfer *x = calloc(OBJECT_BATCH, sizeof *x);
    char (*keys)[PULSE_RECORD_MAX_RUN + 80] = calloc(OBJECT_BATCH, sizeof *keys);
    if (!x || !keys) {
        free(x);
        free(keys);
        return pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory");
    }
    const char *tmp = a->o.tmp_dir ? a->o.tmp_dir : getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    for (size_t at = 0; at < n_jobs && !a->oom;) {
        size_t m = 0;
        uint64_t mem = 0;
        while (at + m < n_jobs && m < OBJECT_BATCH) {
            struct job *j = &jobs[at + m];
            j->to_file = j->size > a->o.memory_bytes;
            if (!j->to_file && m && mem + j->size > a->o.memory_bytes)
                break;
            if (pulse_layout_object_key(keys[m], sizeof keys[m], a->run, nm[j->first].digest))
                pulse_clear_error();   /* the run was checked on entry; a key too long is not found */
            pulse_transfer *t = &x[m];
            memset(t, 0, sizeof *t);
            t->op = PULSE_XFER_GET;
            t->key = keys[m];
            /* One byte beyond the declared size: enough to see that an object is longer than its
             * record says, never more (no endless data). */
            t->offset = 0;
            t->length = j->size + 1;
            if (j->to_file) {
                size_t cap = strlen(tmp) + 64;
                if (!(j->path = malloc(cap))) {
                    a->oom = 1;
                    break;
                }
                snprintf(j->path, cap, "%s/pulse-audit-%ld-%zu", tmp, (long)getpid(), at + m);
                t->path = j->path;
            } else {
                t->max_size = (size_t)j->size + 1;
                mem += j->size;
            }
            m++;
        }
        (void)pulse_store_batch(a->st, x, m);  /* per-transfer results below */
        a->rep->requests.audit_gets += m;
        for (size_t k = 0; k < m; k++) {
            finish_job(a, nm, &jobs[at + k], &x[k]);
            pulse_store_free(x[k].out);
            x[k].out = NULL;
            free(jobs[at + k].path);
            jobs[at + k].path = NULL;
        }
        at += m;
    }
    free(x);
    free(keys);
    return a->oom ? pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory") : 0;
}

/* Every named object: present, listed with its declared size, and (full audit) its exact bytes;
 * every listed object named by some record. */
static int check_objects(struct audit *a)
{
    /* Only records that verified (trusted signature, filed under the key their content gives,
     * this run) lead to an object being checked or downloaded: anyone can write a record that
     * names a huge object, and the audit must not fetch it on that record's word. Objects the
     * refused records name are kept apart, to say so when no verified record names them. */
    size_t n_nm = 0, n_rf = 0;
    for (size_t i = 0; i < a->n_entries; i++)
        if (a->entries[i].parsed)
            *(verified_naming(&a->entries[i]) ? &n_nm : &n_rf) += a->recs[i].n_objects;
    struct naming *nm = calloc(n_nm ? n_nm : 1, sizeof *nm);
    struct naming *rf = calloc(n_rf ? n_rf : 1, sizeof *rf);
    struct job *jobs = calloc(n_nm ? n_nm : 1, sizeof *jobs);
    if (!nm || !rf || !jobs) {
        free(nm);
        free(rf);
        free(jobs);
        return pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory");
    }
    size_t k = 0, kr = 0;
    for (size_t i = 0; i < a->n_entries; i++)
        if (a->entries[i].parsed)
            for (uint32_t o = 0; o < a->recs[i].n_objects; o++) {
                struct naming one = { a->recs[i].objects[o].digest, i, o };
                if (verified_naming(&a->entries[i]))
                    nm[k++] = one;
                else
                    rf[kr++] = one;
            }
    qsort(nm, n_nm, sizeof *nm, naming_cmp);
    if (n_rf)
        qsort(rf, n_rf, sizeof *rf, naming_cmp);
    if (a->n_objects)  /* qsort(NULL, 0, ...) is undefined behaviour */
        qsort(a->objects, a->n_objects, sizeof *a->objects, object_cmp);

    size_t n_jobs = 0, lo = 0;
    for (size_t first = 0; first < n_nm;) {
        size_t end = first + 1;
        while (end < n_nm && !memcmp(nm[end].digest, nm[first].digest, PULSE_DIGEST_BYTES))
            end++;
        pulse_audit_entry *e0 = &a->entries[nm[first].entry];
        uint64_t declared = a->recs[nm[first].entry].objects[nm[first].object].size;
        char hex[2 * PULSE_DIGEST_BYTES + 1];
        pulse_hex_encode(nm[first].digest, PULSE_DIGEST_BYTES, hex);
        int sizes_agree = 1;
        for (size_t q = first + 1; q < end; q++) {
            uint64_t s = a->recs[nm[q].entry].objects[nm[q].object].size;
            if (s != declared) {
                problem(a, &a->entries[nm[q].entry], "objects/%s: declared %llu bytes here, %llu by %s", hex,
                        (unsigned long long)s, (unsigned long long)declared, e0->key);
                sizes_agree = 0;
            }
        }
        while (lo < a->n_objects && memcmp(a->objects[lo].digest, nm[first].digest, PULSE_DIGEST_BYTES) < 0)
            lo++;
        if (lo == a->n_objects || memcmp(a->objects[lo].digest, nm[first].digest, PULSE_DIGEST_BYTES)) {
            problem(a, e0, "objects/%s: missing (named by %zu record%s)", hex, end - first, end - first > 1 ? "s" : "");
        } else {
            a->objects[lo].named = 1;
            if (a->objects[lo].size != declared)
                problem(a, e0, "objects/%s: size %llu, record says %llu", hex, (unsigned long long)a->objects[lo].size,
                        (unsigned long long)declared);
            else if (sizes_agree && a->o.level == PULSE_AUDIT_FULL) {
                struct job *j = &jobs[n_jobs++];
                j->first = first;
                j->count = end - first;
                j->size = declared;
            }
        }
        first = end;
    }
    for (size_t i = 0; i < a->n_objects; i++) {
        if (a->objects[i].named || a->objects[i].family)
            continue;
        char hex[2 * PULSE_DIGEST_BYTES + 1];
        pulse_hex_encode(a->objects[i].digest, PULSE_DIGEST_BYTES, hex);
        a->rep->orphans++;
        a->rep->orphan_bytes += a->objects[i].size;
        struct naming probe = { a->objects[i].digest, 0, 0 };
        const struct naming *by = n_rf ? bsearch(&probe, rf, n_rf, sizeof *rf, digest_only_cmp) : NULL;
        if (by)
            problem(a, NULL, "objects/%s: orphan: named only by a refused record (%s), not downloaded (%llu bytes)",
                    hex, a->entries[by->entry].key, (unsigned long long)a->objects[i].size);
        else
            problem(a, NULL, "objects/%s: orphan: no record names it (%llu bytes)", hex,
                    (unsigned long long)a->objects[i].size);
    }
    int rc = n_jobs ? download(a, nm, jobs, n_jobs) : 0;
    free(nm);
    free(rf);
    free(jobs);
    return rc;
}

/* Each head names the newest valid sync record of its node; each node with records has a head. */
static void check_heads(struct audit *a)
{
    for (size_t h = 0; h < a->n_heads; h++) {
        struct head *hd = &a->heads[h];
        uint8_t node[PULSE_PUBLIC_KEY_BYTES];
        const char *node_hex = hd->key + strlen(PULSE_LAYOUT_HEADS_SYNC);   /* when it parses */
        if (pulse_layout_parse_head(hd->key, node)) {
            problem(a, NULL, "%s: unexpected head (heads/sync/<node-hex> only)", hd->key);
            continue;
        }
        if (!hd->content)
            continue;  /* unreadable: reported */
        char rel[PULSE_AUDIT_MAX_KEY];
        uint64_t ms;
        const uint8_t *carried;
        size_t carried_len;
        int kind;
        uint64_t step;
        size_t len = 0;
        if (pulse_layout_parse_head_content(hd->content, hd->content_len, rel, sizeof rel, &ms, &carried,
                                            &carried_len) || classify_record_key(rel, &kind, &step)
            || !is_chain_kind(kind) || (len = strlen(rel)) < 64 || strcmp(rel + len - 64, node_hex)) {
            problem(a, NULL, "%s: does not name a sync record of its node ('%.*s')", hd->key,
                    (int)(strcspn(hd->content, "\r\n") < 80 ? strcspn(hd->content, "\r\n") : 80), hd->content);
            continue;
        }
        if (carried_len) {
            /* the record a head carries is the one it names, signed as any other */
            pulse_record cr;
            char want[PULSE_AUDIT_MAX_KEY];
            int same = pulse_record_parse(carried, carried_len, &cr) == 0;
            if (same) {
                same = !pulse_record_key(&cr, want, sizeof want) && !strcmp(want, rel) && !strcmp(cr.run, a->run)
                       && (carried_len < SIGNATURE_FIELD
                           ? 0 : !pulse_verify(cr.node, carried, carried_len - SIGNATURE_FIELD, cr.signature));
                pulse_record_clear(&cr);
            }
            pulse_clear_error();
            if (!same)
                problem(a, NULL, "%s: carries a record that is not %s, signed (%zu bytes)", hd->key, rel,
                        carried_len);
        }
        hd->content[strlen(rel)] = 0;   /* the key, for the lines below */
        const pulse_audit_entry *target = NULL, *newest = NULL;
        for (size_t i = 0; i < a->n_entries; i++) {
            const pulse_audit_entry *e = &a->entries[i];
            if (!strcmp(e->key, hd->content))
                target = e;
            if (e->valid && is_chain_kind(e->kind) && !strcmp(e->key + strlen(e->key) - 64, node_hex)
                && (!newest || e->key_step >= newest->key_step))
                newest = e;
        }
        if (!target)
            problem(a, NULL, "%s: points to %s, which does not exist", hd->key, hd->content);
        else if (!target->valid)
            problem(a, NULL, "%s: points to %s, which is not a valid record", hd->key, hd->content);
        else if (newest && newest->key_step != target->key_step)
            problem(a, NULL, "%s: points to step %llu, but step %llu is the node's newest record", hd->key,
                    (unsigned long long)target->key_step, (unsigned long long)newest->key_step);
    }
    /* Nodes with valid sync records but no head: followers polling heads would never see them. */
    for (size_t i = 0; i < a->n_entries; i++) {
        const pulse_audit_entry *e = &a->entries[i];
        if (!e->valid || !is_chain_kind(e->kind))
            continue;
        const char *node_hex = e->key + strlen(e->key) - 64;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = a->entries[j].valid && is_chain_kind(a->entries[j].kind)
                   && !strcmp(a->entries[j].key + strlen(a->entries[j].key) - 64, node_hex);
        if (seen)
            continue;
        int has_head = 0;
        for (size_t h = 0; h < a->n_heads; h++) {
            size_t hl = strlen(a->heads[h].key);
            has_head |= hl >= 64 && !strcmp(a->heads[h].key + hl - 64, node_hex);
        }
        if (!has_head)
            problem(a, NULL, "heads/sync/%s: missing (the node has valid records)", node_hex);
    }
}

static uint64_t div_up(uint64_t a, uint64_t b)
{
    return b ? (a + b - 1) / b : a;
}

/* GETs of one object on a follower: one, or one per range when the backend splits large gets. */
static uint64_t object_gets(const struct audit *a, uint64_t size)
{
    return size > a->settings.part_size ? div_up(size, a->settings.part_size) : 1;
}

static uint64_t object_puts(const struct audit *a, uint64_t size)
{
    return size >= a->settings.multipart_threshold ? div_up(size, a->settings.part_size) + 2 : 1;
}

/* Incomplete multipart uploads under the run: a publisher killed mid-upload leaves one, whose
 * parts are billed and which no listing of objects shows. Each is a problem, as an orphan is. */
static int on_upload(void *ctx, const char *key, const char *upload_id, int64_t initiated)
{
    struct audit *a = ctx;
    size_t rl = strlen(a->run) + 1;
    char when[32] = "at an unknown time";
    if (initiated) {
        time_t t = (time_t)initiated;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    a->rep->uploads++;
    problem(a, NULL, "%s: incomplete multipart upload %.16s... begun %s: its parts are stored and billed, and no "
            "listing of objects shows them (a writer stopped mid-upload; docs/deploy.md)",
            strlen(key) > rl ? key + rl : key, upload_id, when);
    return 0;
}

static void check_uploads(struct audit *a, const char *prefix)
{
    int rc = pulse_store_list_uploads(a->st, prefix, on_upload, a);
    if (rc == PULSE_ERR_UNSUPPORTED) {
        a->rep->uploads = -1;   /* file:// has no multipart uploads */
        pulse_clear_error();
    } else if (rc) {
        problem(a, NULL, "%s: incomplete uploads could not be listed: %s", prefix, pulse_last_error());
    }
}

/* The request-count estimate and the totals of docs/trust.md. */
static void estimate(struct audit *a)
{
    pulse_audit_requests *q = &a->rep->requests;
    uint64_t page = a->settings.list_page ? a->settings.list_page : 1000;
    q->follower_lists = (a->keyframe_keys ? div_up(a->keyframe_keys, page) : 1)
                        + (a->patch_keys ? div_up(a->patch_keys, page) : 1);
    q->audit_lists = a->rep->keys ? div_up(a->rep->keys, page) : 1;
    size_t newest_kf = SIZE_MAX;
    uint64_t patch_steps = 0, patch_gets = 0, last_step = UINT64_MAX;
    for (size_t i = 0; i < a->n_entries; i++) {
        const pulse_audit_entry *e = &a->entries[i];
        if (!e->valid || !is_chain_kind(e->kind))
            continue;
        a->rep->dense_total += e->dense_bytes;
        a->rep->patch_total += e->object_bytes;
        q->trainer_puts += 1;                              /* the record */
        if (e->key_step != last_step)
            q->trainer_puts += 1;                          /* the head move of that publish */
        last_step = e->key_step;
        for (uint32_t k = 0; k < a->recs[i].n_objects; k++)
            q->trainer_puts += object_puts(a, a->recs[i].objects[k].size);
        if (e->kind == PULSE_RECORD_KEYFRAME)
            newest_kf = i;
        else {
            patch_steps++;
            /* the head poll, which carries the record, then the objects that hold the patch (not
             * the head again that older publishers named after it, for followers of slices) */
            patch_gets += 1;
            patch_objects po;
            if (patch_objects_of(&a->recs[i], &po) == 0)
                for (size_t k = 0; k < po.n; k++)
                    patch_gets += object_gets(a, po.ext[k].obj->size);
            pulse_clear_error();
            patch_objects_free(&po);
        }
    }
    if (newest_kf != SIZE_MAX) {
        for (size_t i = newest_kf; i < a->n_entries; i++) {
            const pulse_audit_entry *e = &a->entries[i];
            if (!e->valid || !is_chain_kind(e->kind) || (i != newest_kf && e->kind != PULSE_RECORD_SYNC_PATCH)
                || (i != newest_kf && e->key_step == a->entries[newest_kf].key_step))
                continue;
            q->follower_gets += 1;
            for (uint32_t k = 0; k < a->recs[i].n_objects; k++)
                q->follower_gets += object_gets(a, a->recs[i].objects[k].size);
        }
    }
    q->follower_step_gets = patch_steps ? div_up(patch_gets, patch_steps) : 0;
}

PULSE_API void pulse_audit_opts_default(pulse_audit_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->level = PULSE_AUDIT_FULL;
    o->memory_bytes = UINT64_C(256) << 20;
}

PULSE_API void pulse_audit_report_clear(pulse_audit_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_problems; i++)
        free(r->problems[i]);
    free(r->problems);
    free(r->entries);
    memset(r, 0, sizeof *r);
}

PULSE_API int pulse_audit_run(pulse_store *st, const char *run, const pulse_audit_opts *opts,
                              pulse_audit_report *report)
{
    pulse_clear_error();
    if (!report)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_audit_run: no report");
    memset(report, 0, sizeof *report);
    if (!st || !run || !*run || strchr(run, '/'))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_audit_run: a store and a run name are required");
    int bad = pulse_check_run(run);
    if (bad)
        return bad;
    struct audit a = { .st = st, .run = run, .rep = report };
    pulse_audit_opts_default(&a.o);
    if (opts)
        memcpy(&a.o, opts, opts->size < sizeof a.o ? opts->size : sizeof a.o);
    if (!a.o.memory_bytes)
        a.o.memory_bytes = UINT64_C(256) << 20;
    pulse_store_default_settings(&a.settings);

    char prefix[PULSE_RECORD_MAX_RUN + 2];
    int rc = 0;
    if (snprintf(prefix, sizeof prefix, "%s/", run) >= (int)sizeof prefix)
        rc = pulse_fail(PULSE_ERR_LIMIT, "run name longer than %u bytes", PULSE_RECORD_MAX_RUN);
    if (!rc)
        rc = pulse_store_list(st, prefix, NULL, list_cb, &a);
    size_t parent_len;
    unsigned part, parts;
    if (!rc && pulse_layout_parse_part_run(run, &parent_len, &part, &parts) == 0) {
        char family[PULSE_RECORD_MAX_RUN + 16];
        snprintf(family, sizeof family, "%.*s/" PULSE_LAYOUT_OBJECTS, (int)parent_len, run);
        rc = pulse_store_list(st, family, NULL, list_family_cb, &a);
    }
    if (!rc && !a.n_entries)
        problem(&a, NULL, "%s: no records in the run", prefix);
    if (!rc && a.n_entries) {
        qsort(a.entries, a.n_entries, sizeof *a.entries, entry_cmp);
        a.recs = calloc(a.n_entries, sizeof *a.recs);
        if (!a.recs)
            rc = pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory");
    }
    if (!rc)
        rc = fetch_records_and_heads(&a);
    if (!rc) {
        for (size_t i = 0; i < a.n_entries; i++)
            if (a.entries[i].valid && is_chain_kind(a.entries[i].kind))
                check_shape(&a, i);
        check_chain(&a);
        rc = check_objects(&a);
    }
    if (!rc) {
        check_heads(&a);
        check_uploads(&a, prefix);
        estimate(&a);
    }
    if (!rc && a.oom)
        rc = pulse_fail(PULSE_ERR_NOMEM, "audit: out of memory");
    for (size_t i = 0; a.recs && i < a.n_entries; i++)
        pulse_record_clear(&a.recs[i]);
    free(a.recs);
    for (size_t h = 0; h < a.n_heads; h++)
        free(a.heads[h].content);
    free(a.heads);
    free(a.objects);
    report->entries = a.entries;
    report->n_entries = a.n_entries;
    return rc;
}
