/* SPDX-License-Identifier: Apache-2.0 */
/* Chain-aware retention: drop this node's records older than its oldest kept keyframe, then unneeded objects. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fail.h"
#include "manifest/layout.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "node/daemon/log.h"
#include "node/daemon/retention.h"

#define RET_KEY_MAX 1100

typedef struct rec_entry {
    char key[RET_KEY_MAX];   /* full store key: <run>/records/<kind>/<step>/<node> */
    int kind;
    uint64_t step;
    int mine;
    int fetched;             /* fetch_own has read it */
    int own;                 /* fetched and verified as this node's record (fetch_own) */
    uint8_t (*digests)[32];  /* the objects it names, when own */
    uint32_t n_digests;
} rec_entry;

typedef struct rec_list {
    rec_entry *e;
    size_t n, cap;
    const char *run;
    char node_hex[PULSE_NODE_ID_HEX];
} rec_list;

typedef struct digest_set {
    uint8_t (*d)[32];
    size_t n, cap;
} digest_set;

static int digest_add(digest_set *s, const uint8_t d[32])
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        void *p = realloc(s->d, cap * 32);
        if (!p)
            return pulse_fail(PULSE_ERR_NOMEM, "retention: digest set");
        s->d = p;
        s->cap = cap;
    }
    memcpy(s->d[s->n++], d, 32);
    return 0;
}

static int digest_cmp(const void *a, const void *b)
{
    return memcmp(a, b, 32);
}

static int digest_has(const digest_set *s, const uint8_t d[32])
{
    return s->n && bsearch(d, s->d, s->n, 32, digest_cmp) != NULL;
}

/* "<step:digits>/<node-hex>" after "records/<kind>/": kind, step and whose. */
static int list_record_cb(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)info;
    rec_list *l = ctx;
    size_t rl = strlen(l->run);
    char kname[32];
    uint64_t step;
    const char *whose;
    if (strncmp(key, l->run, rl) || key[rl] != '/' || strlen(key) >= RET_KEY_MAX ||
        pulse_layout_split_record(key + rl + 1, kname, &step, &whose))
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        void *p = realloc(l->e, cap * sizeof *l->e);
        if (!p)
            return pulse_fail(PULSE_ERR_NOMEM, "retention: record list");
        l->e = p;
        l->cap = cap;
    }
    rec_entry *e = &l->e[l->n++];
    memset(e, 0, sizeof *e);
    strcpy(e->key, key);
    e->kind = pulse_record_kind_from_name(kname);
    e->step = step;
    e->mine = !strcmp(whose, l->node_hex);
    return 0;
}

static int list_records(pulse_store *st, const char *run, rec_list *l)
{
    char prefix[RET_KEY_MAX];
    l->n = 0;
    char rel[16];
    int r = pulse_layout_records_prefix(rel, sizeof rel, 0, 0);
    if (!r)
        r = pulse_layout_join(prefix, sizeof prefix, run, rel);
    return r ? r : pulse_store_list(st, prefix, NULL, list_record_cb, l);
}

/* Keys of junk already logged: a pass runs after every publish, and one line per junk record
 * is enough (the node is single-threaded here). Past the cap, junk is still skipped, silently. */
#define JUNK_LOGGED_MAX 256
static char *junk_logged[JUNK_LOGGED_MAX];
static size_t n_junk_logged;

static void log_junk(const char *key, const char *why)
{
    for (size_t i = 0; i < n_junk_logged; i++)
        if (!strcmp(junk_logged[i], key))
            return;
    if (n_junk_logged == JUNK_LOGGED_MAX)
        return;
    char *dup = strdup(key);
    if (!dup)
        return;
    junk_logged[n_junk_logged++] = dup;
    node_log("skipped", "what", "retention", "record", key, "reason", why, (char *)NULL);
}

/* Reads the record at E's key and keeps it only if it is this node's own: it verifies under
 * TRUST (this node's key alone), is of run RUN and is filed under the key its content gives.
 * Returns 0 with e->own set (and its digests kept) or clear (junk: logged once, skipped);
 * PULSE_ERR_NOTFOUND when it is gone; a store failure otherwise. Nothing is ever deleted on
 * the word of a key alone: anyone who can write to the bucket can write keys. */
static int fetch_own(pulse_store *st, const char *run, const pulse_trust *trust, rec_entry *e)
{
    e->own = 0;
    e->fetched = 1;
    void *data = NULL;
    size_t len = 0;
    int r = pulse_store_get(st, e->key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &len, NULL);
    if (r == PULSE_ERR_LIMIT) {
        log_junk(e->key, "larger than any record");
        pulse_clear_error();
        return 0;
    }
    if (r)
        return r;
    pulse_record rec;
    r = pulse_record_verify(data, len, trust, NULL, &rec);
    pulse_store_free(data);
    if (r) {
        char why[400];
        snprintf(why, sizeof why, "does not verify under this node's key: %s", pulse_last_error());
        log_junk(e->key, why);
        pulse_clear_error();
        return 0;
    }
    char want[RET_KEY_MAX];
    size_t rl = strlen(run);
    if (strcmp(rec.run, run) || pulse_record_key(&rec, want, sizeof want) || strcmp(e->key + rl + 1, want)) {
        char why[RET_KEY_MAX + 100];
        snprintf(why, sizeof why, "the record inside is %s step %" PRIu64 " of run '%.200s' (a copy)",
                 pulse_record_kind_name(rec.kind) ? pulse_record_kind_name(rec.kind) : "?", rec.step, rec.run);
        log_junk(e->key, why);
        pulse_record_clear(&rec);
        pulse_clear_error();
        return 0;
    }
    r = 0;
    if (rec.n_objects && !(e->digests = malloc((size_t)rec.n_objects * 32)))
        r = pulse_fail(PULSE_ERR_NOMEM, "retention: digests");
    for (uint32_t i = 0; !r && i < rec.n_objects; i++)
        memcpy(e->digests[i], rec.objects[i].digest, 32);
    if (!r) {
        e->n_digests = rec.n_objects;
        e->own = 1;
    }
    pulse_record_clear(&rec);
    return r;
}

/* Adds the digests of the record at KEY, of any node, to SET: its objects are kept whoever
 * signed it. Bytes that are no record name nothing a reader could fetch, so they protect
 * nothing (and must not stop every later pass from deleting anything). */
static int record_digests(pulse_store *st, const char *key, digest_set *set)
{
    void *data = NULL;
    size_t len = 0;
    int r = pulse_store_get(st, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &len, NULL);
    if (r == PULSE_ERR_LIMIT) {
        pulse_clear_error();
        return 0;
    }
    if (r)
        return r;
    pulse_record rec;
    r = pulse_record_parse(data, len, &rec);
    pulse_store_free(data);
    if (r) {
        pulse_clear_error();
        return 0;
    }
    for (uint32_t i = 0; !r && i < rec.n_objects; i++)
        r = digest_add(set, rec.objects[i].digest);
    pulse_record_clear(&rec);
    return r;
}

static int desc_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

typedef struct obj_sweep {
    pulse_store *st;
    const char *run;
    const digest_set *named, *freed;
    int64_t orphan_before;
    node_retention_stats *stats;
    char (*victims)[RET_KEY_MAX];
    uint64_t *victim_sizes;
    size_t n, cap;
} obj_sweep;

static int list_object_cb(void *ctx, const char *key, const pulse_object_info *info)
{
    obj_sweep *s = ctx;
    size_t rl = strlen(s->run);
    uint8_t d[32];
    const char *hex = key + rl + 1 + strlen(PULSE_LAYOUT_OBJECTS);
    /* Hex of either case, as before the layout module: an orphan under an upper-case name is
     * collected too (pulse manifest audit names it). */
    if (strncmp(key, s->run, rl) || key[rl] != '/' || !PULSE_LAYOUT_IN(key + rl + 1, PULSE_LAYOUT_OBJECTS) ||
        strlen(hex) != 64 || pulse_hex_decode(hex, 64, d, sizeof d) || strlen(key) >= RET_KEY_MAX)
        return 0;
    if (digest_has(s->named, d))
        return 0;
    if (!digest_has(s->freed, d) && info->mtime >= s->orphan_before)
        return 0;
    /* Collected, deleted after the listing: deleting under a running listing could skip keys. */
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        void *p = realloc(s->victims, cap * RET_KEY_MAX), *q = realloc(s->victim_sizes, cap * 8);
        if (p)
            s->victims = p;
        if (q)
            s->victim_sizes = q;
        if (!p || !q)
            return pulse_fail(PULSE_ERR_NOMEM, "retention: object list");
        s->cap = cap;
    }
    strcpy(s->victims[s->n], key);
    s->victim_sizes[s->n++] = info->size;
    return 0;
}

static void free_entries(rec_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].digests);
    free(l->e);
    l->e = NULL;
    l->n = l->cap = 0;
}

/* Member I of RUN's family into OUT: 0 the run itself, I in 1..PARTS its part run I - 1. */
static int family_run(char out[PULSE_RECORD_MAX_RUN + 1], const char *run, uint32_t i, uint32_t parts)
{
    if (i == 0) {
        snprintf(out, PULSE_RECORD_MAX_RUN + 1, "%s", run);
        return 0;
    }
    return pulse_layout_part_run(out, PULSE_RECORD_MAX_RUN + 1, run, i - 1, parts);
}

/* Deletes the records of L (of run RUN) that retention drops with OLDEST the oldest kept
 * keyframe's step, each only once it verifies as this node's, adding the objects each named to
 * FREED. */
static int drop_records(pulse_store *st, const char *run, const pulse_trust *trust, rec_list *l, uint64_t oldest,
                        digest_set *freed, node_retention_stats *out)
{
    int r = 0;
    for (size_t i = 0; !r && i < l->n; i++) {
        rec_entry *e = &l->e[i];
        /* The patch AT the oldest kept keyframe's step leads into the chain from a state
         * before it (its base is older than the chain's start): it goes too, so the run's
         * chain starts with a keyframe (what `pulse manifest audit` checks). */
        int doomed = e->mine && ((e->kind == PULSE_RECORD_KEYFRAME && e->step < oldest) ||
                                 (e->kind == PULSE_RECORD_SYNC_PATCH && e->step <= oldest));
        if (!doomed)
            continue;
        if (!e->fetched) {
            int g = fetch_own(st, run, trust, e);
            if (g == PULSE_ERR_NOTFOUND)
                continue;  /* deleted meanwhile (another pass) */
            if (g)
                return g;
            out->records_skipped += !e->own;
        }
        if (!e->own)
            continue;
        for (uint32_t k = 0; !r && k < e->n_digests; k++)
            r = digest_add(freed, e->digests[k]);
        int g = r ? 0 : pulse_store_delete(st, e->key);
        if (g && g != PULSE_ERR_NOTFOUND)
            r = g;
        else if (!r)
            out->records_deleted++;
    }
    return r;
}

int node_retention_run(pulse_store *st, const char *run, uint32_t parts, const uint8_t node[32],
                       unsigned keep_keyframes, uint64_t orphan_grace_s, node_retention_stats *out)
{
    memset(out, 0, sizeof *out);
    if (keep_keyframes < 1)
        return pulse_fail(PULSE_ERR_INVALID, "retention keeps at least one keyframe");
    rec_list l = { .run = run };
    pulse_node_id_hex(node, l.node_hex);
    digest_set freed = { 0 }, named = { 0 };
    uint64_t *kf = NULL;
    obj_sweep sw = { 0 };
    pulse_trust *trust = NULL;

    int r = list_records(st, run, &l);
    size_t nkf = 0;
    for (size_t i = 0; !r && i < l.n; i++)
        nkf += l.e[i].mine && l.e[i].kind == PULSE_RECORD_KEYFRAME;
    if (r || nkf <= keep_keyframes)
        goto done;   /* fewer keys than kept keyframes: fewer records too, nothing to read */

    /* Only keyframes that verify as this node's count: junk under its node id (a key says
     * nothing) must neither push the real ones out of the kept window nor be deleted. */
    pulse_public_key self = { 0 };
    memcpy(self.key, node, 32);
    r = pulse_trust_new(&trust);
    if (!r)
        r = pulse_trust_add(trust, &self);
    if (!r && !(kf = malloc(nkf * sizeof *kf)))
        r = pulse_fail(PULSE_ERR_NOMEM, "retention");
    nkf = 0;
    for (size_t i = 0; !r && i < l.n; i++) {
        rec_entry *e = &l.e[i];
        if (!e->mine || e->kind != PULSE_RECORD_KEYFRAME)
            continue;
        int g = fetch_own(st, run, trust, e);
        if (g && g != PULSE_ERR_NOTFOUND)
            r = g;
        else if (!g && e->own)
            kf[nkf++] = e->step;
        else
            out->records_skipped += !g;
    }
    if (!r && nkf) {
        qsort(kf, nkf, sizeof *kf, desc_u64);
        out->keyframes_kept = nkf < keep_keyframes ? nkf : keep_keyframes;
        out->oldest_kept_keyframe = kf[out->keyframes_kept - 1];
    }
    if (r || nkf <= keep_keyframes)
        goto done;
    uint64_t oldest = out->oldest_kept_keyframe;

    /* 1. The doomed records' objects, then the records themselves (before any object: a
     *    reader that still lists a record must still find everything it names); the run's, then
     *    each part run's, whose objects lie under the run's. */
    r = drop_records(st, run, trust, &l, oldest, &freed, out);
    for (uint32_t i = 1; !r && i <= parts; i++) {
        char part_run[PULSE_RECORD_MAX_RUN + 1];
        rec_list pl = { .run = part_run };
        memcpy(pl.node_hex, l.node_hex, sizeof pl.node_hex);
        r = family_run(part_run, run, i, parts);
        if (!r)
            r = list_records(st, part_run, &pl);
        if (!r)
            r = drop_records(st, part_run, trust, &pl, oldest, &freed, out);
        free_entries(&pl);
    }
    if (r)
        goto done;
    if (freed.n)
        qsort(freed.d, freed.n, 32, digest_cmp);

    /* 2. Everything still named, by any node: listed again, after the deletions, so records
     *    written meanwhile count too. */
    for (uint32_t i = 0; !r && i <= parts; i++) {
        char name[PULSE_RECORD_MAX_RUN + 1];
        free_entries(&l);
        l.run = name;
        r = family_run(name, run, i, parts);
        if (!r)
            r = list_records(st, name, &l);
        for (size_t k = 0; !r && k < l.n; k++) {
            int g = record_digests(st, l.e[k].key, &named);
            if (g && g != PULSE_ERR_NOTFOUND)
                r = pulse_fail(g, "retention: cannot read %s, so no object is deleted", l.e[k].key);
        }
    }
    l.run = run;
    if (r)
        goto done;
    if (named.n)
        qsort(named.d, named.n, 32, digest_cmp);

    /* 3. Objects no record names: those the deleted records named, and old orphans. */
    char prefix[RET_KEY_MAX];
    char orel[16];
    r = pulse_layout_object(orel, sizeof orel, NULL);
    if (!r)
        r = pulse_layout_join(prefix, sizeof prefix, run, orel);
    if (r)
        goto done;
    sw.st = st;
    sw.run = run;
    sw.named = &named;
    sw.freed = &freed;
    sw.orphan_before = (int64_t)time(NULL) - (int64_t)orphan_grace_s;
    sw.stats = out;
    r = pulse_store_list(st, prefix, NULL, list_object_cb, &sw);
    for (size_t i = 0; !r && i < sw.n; i++) {
        int g = pulse_store_delete(st, sw.victims[i]);
        if (g && g != PULSE_ERR_NOTFOUND) {
            r = g;
        } else if (!g) {
            out->objects_deleted++;
            out->object_bytes_deleted += sw.victim_sizes[i];
        }
    }
done:
    pulse_trust_free(&trust);
    free(sw.victims);
    free(sw.victim_sizes);
    free(kf);
    free_entries(&l);
    free(freed.d);
    free(named.d);
    return r;
}
