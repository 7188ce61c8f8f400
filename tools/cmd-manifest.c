/* SPDX-License-Identifier: Apache-2.0 */
/* pulse manifest ls|show|audit: what a run published, one record readable, and the audit of the whole run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fail.h"
#include "base/names.h"
#include "crypto/sha256.h"
#include "manifest/layout.h"
#include "manifest/patch_objects.h"
#include "pulseweights/audit.h"
#include "pulseweights/patch.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static const char usage_text[] =
    "usage: pulse manifest <ls|show|audit> --store URL --run R [options]   (pulse manifest <sub> --help)\n"
    "\n"
    "  ls     the run's records, one line per step and kind: signer, state ids, sizes, density\n"
    "  show   one record (by key or step) in readable form or as JSON\n"
    "  audit  re-check everything under the run: signatures, chain, objects, orphans, heads;\n"
    "         exit 0 only when all holds, else one line per problem on stderr and exit 1\n"
    "\n"
    "URL is a store URL (file:///abs/dir or s3://bucket[/prefix]); the run lives under URL/R/.\n"
    "Layout and checks: docs/sync.md and docs/trust.md.\n";

static const char usage_ls[] =
    "usage: pulse manifest ls --store URL --run R [--trust PUB|DIR]... [--json]\n"
    "\n"
    "Lists every record of run R (sync patches, keyframes and any other kind), by step:\n"
    "  STEP KIND NODE BASE RESULT PATCH DENSE RATIO DENSITY TIME\n"
    "NODE is the comment of the trusted key that signed it; a record whose signature does not\n"
    "verify under a --trust key shows the node id abbreviated and UNTRUSTED (INVALID when a\n"
    "trusted record sits under the wrong key, UNREADABLE when it does not parse).\n"
    "BASE/RESULT: state ids, first 16 hex digits. PATCH: bytes of the record's objects; DENSE:\n"
    "bytes of tensor data of the checkpoint; RATIO = PATCH / DENSE.\n"
    "DENSITY = changed elements / all elements, where all elements is the `changes` of the\n"
    "newest keyframe at or before the step (a keyframe changes every element); '-' without one.\n"
    "Only records and signatures are read (no objects): use audit for the full check.\n"
    "\n"
    "options:\n"
    "  --store URL        the store\n"
    "  --run R            the run name\n"
    "  --trust PUB|DIR    a .pub file or a directory of them (repeatable)\n"
    "  --json             one JSON object per line instead of the table\n"
    "  -h, --help         show this help\n";

static const char usage_show[] =
    "usage: pulse manifest show --store URL --run R [--trust PUB|DIR]... [--json] KEY|STEP\n"
    "\n"
    "Prints one record: KEY relative to the run (records/sync-patch/000000000003/<node>), or\n"
    "STEP (a number: every record of that step, one after the other). With --trust the\n"
    "signature is checked and the signer named; without, it is shown unchecked.\n"
    "\n"
    "options:\n"
    "  --store URL        the store\n"
    "  --run R            the run name\n"
    "  --trust PUB|DIR    a .pub file or a directory of them (repeatable)\n"
    "  --json             the record as one JSON object\n"
    "  -h, --help         show this help\n";

static const char usage_audit[] =
    "usage: pulse manifest audit --store URL --run R --trust PUB|DIR... [--json] [--records-only]\n"
    "       [--memory BYTES]\n"
    "\n"
    "Re-checks everything under URL/R/ (docs/trust.md, \"Audit\"):\n"
    "  - every record parses strictly, is signed by a --trust key, and its content (kind, step,\n"
    "    node, run) matches the key it is stored under;\n"
    "  - chain continuity from keyframes: no missing steps; each sync patch's base is the result\n"
    "    of the previous step's record; records of one step agree on the result;\n"
    "  - every object named exists with exactly the declared size and its SHA-256 equals its\n"
    "    digest (each is downloaded and hashed); a patch's own base/result equal its record's and\n"
    "    its chunks verify; keyframe chunks are zstd frames of their range and cover the file;\n"
    "  - orphans (objects no record names); heads naming a missing or non-newest record;\n"
    "  - incomplete multipart uploads under the run (s3: billed, and no listing of objects shows\n"
    "    them; file:// has none).\n"
    "Prints per step the bytes against dense and the ratio, the storage total and the\n"
    "request-count estimate. Exit 0 only when everything holds; otherwise one line per problem\n"
    "on stderr and exit 1 (2: usage, 1 also when the store cannot be listed).\n"
    "\n"
    "options:\n"
    "  --store URL        the store\n"
    "  --run R            the run name\n"
    "  --trust PUB|DIR    a .pub file or a directory of them (repeatable; required)\n"
    "  --json             the report as one JSON object on stdout\n"
    "  --records-only     skip downloading objects (listing sizes only)\n"
    "  --memory BYTES     object bytes held in memory at once (default 256M; K/M/G suffixes)\n"
    "  -h, --help         show this help\n";

struct opts {
    const char *verb;
    const char *store;
    const char *run;
    const char *target;       /* show: KEY or STEP */
    pulse_trust *trust;
    int n_trust;
    int json;
    int records_only;
    uint64_t memory;
};

static int parse_opts(struct opts *o, int argc, char **argv, int want_target)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *val = NULL;
        if (!strcmp(s, "--store") || !strcmp(s, "--run") || !strcmp(s, "--trust")
            || (!strcmp(s, "--memory") && !strcmp(o->verb, "manifest audit"))) {
            if (i + 1 >= argc)
                return cli_usage_error(o->verb, "%s needs a value", s);
            val = argv[++i];
        }
        if (!strcmp(s, "--store")) {
            o->store = val;
        } else if (!strcmp(s, "--run")) {
            o->run = val;
        } else if (!strcmp(s, "--trust")) {
            if (!o->trust && pulse_trust_new(&o->trust))
                return cli_fail(o->verb, PULSE_ERR_NOMEM, "trust set");
            int rc = pulse_trust_load(o->trust, val);
            if (rc) {
                char what[300];
                snprintf(what, sizeof what, "--trust %s", val);
                return cli_fail(o->verb, rc, what);
            }
            o->n_trust++;
        } else if (!strcmp(s, "--memory")) {
            if (cli_parse_u64(val, &o->memory) || o->memory == 0)
                return cli_usage_error(o->verb, "--memory needs a positive size, not '%s'", val);
        } else if (!strcmp(s, "--json")) {
            o->json = 1;
        } else if (!strcmp(s, "--records-only") && !strcmp(o->verb, "manifest audit")) {
            o->records_only = 1;
        } else if (s[0] == '-' && s[1]) {
            return cli_usage_error(o->verb, "unknown option '%s'", s);
        } else if (want_target && !o->target) {
            o->target = s;
        } else {
            return cli_usage_error(o->verb, "unexpected argument '%s'", s);
        }
    }
    if (!o->store)
        return cli_usage_error(o->verb, "--store URL is required");
    if (!o->run)
        return cli_usage_error(o->verb, "--run R is required");
    if (pulse_check_run(o->run))
        return cli_usage_error(o->verb, "%s", pulse_last_error());
    if (want_target && !o->target)
        return cli_usage_error(o->verb, "missing KEY or STEP");
    return 0;
}

static void abbrev(const uint8_t *id, char out[17])
{
    char full[65];
    pulse_hex_encode(id, 32, full);
    memcpy(out, full, 16);
    out[16] = 0;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static void utc(uint64_t t, char *buf, size_t cap)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if ((uint64_t)tt != t || !gmtime_r(&tt, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, cap, "?");
}

/* What the patch check needs beyond an object's bytes: the store, to read the head of a patch
 * that comes in parts when it checks a part. */
struct patch_check {
    pulse_store *st;
    const char *run;
};

/* The head of record R's patch (its first object, a patch-index), opened for PATCH_BYTES. */
static int open_patch_head(struct patch_check *pc, const pulse_record *r, uint64_t patch_bytes, pulse_patch **p)
{
    const pulse_record_object *h = &r->objects[0];
    char key[PULSE_RECORD_MAX_RUN + 80];
    if (pulse_layout_object_key(key, sizeof key, pc->run, h->digest))
        return PULSE_ERR_LIMIT;
    void *bytes = NULL;
    size_t len = 0;
    int rc = pulse_store_get(pc->st, key, 0, PULSE_TO_END, (size_t)h->size + 1, &bytes, &len, NULL);
    uint8_t d[32];
    if (!rc && len == h->size)
        pulse_sha256(bytes, len, d);
    if (!rc && (len != h->size || memcmp(d, h->digest, 32)))
        rc = pulse_fail(PULSE_ERR_CORRUPT, "its patch's head %s is not the object its record names", key);
    if (!rc)
        rc = pulse_patch_open_head(p, bytes, len, patch_bytes);
    pulse_store_free(bytes);
    return rc;
}

/* The patch check the audit runs on the objects of a sync-patch record: the patch's header names
 * the record's base and result, and every chunk decodes and matches its digest (as far as it
 * can without the weights). A whole `patch` object is checked alone; a `patch-index` object, the
 * head, names the states; a `patch-data` part is checked under its head (read from the store),
 * whole chunks only. A `patch-by-direction` object (format 6, named by earlier publishers) is no
 * longer read: its size and digest are checked as every object's, its contents not. Lives here,
 * not in manifest/, because the patch codec is in node/ (arrows point one way). */
static int check_patch_object(void *ctx, const pulse_record *r, const pulse_record_object *o, const void *bytes,
                              size_t len)
{
    const int head = !strcmp(o->role, PULSE_ROLE_PATCH_INDEX), part = !strcmp(o->role, PULSE_ROLE_PATCH_DATA);
    if (strcmp(o->role, PULSE_ROLE_PATCH) && !head && !part)
        return 0;
    patch_objects po;
    int rc = patch_objects_of(r, &po);
    if (rc)
        return rc;
    const uint64_t patch_bytes = po.bytes;
    patch_objects_free(&po);
    pulse_patch *p = NULL;
    if (part) {
        rc = open_patch_head(ctx, r, patch_bytes, &p);
        if (!rc && (rc = pulse_patch_supply(p, o->range_offset, bytes, len)) == PULSE_ERR_INVALID)
            rc = pulse_fail(PULSE_ERR_FORMAT, "part at byte %llu of the patch does not hold whole chunks",
                            (unsigned long long)o->range_offset);
    } else {
        rc = head ? pulse_patch_open_head(&p, bytes, len, patch_bytes) : pulse_patch_open_mem(&p, bytes, len);
    }
    if (rc) {
        pulse_patch_close(&p);
        return rc;  /* the detail says why */
    }
    char pb[17], pr[17], rb[17], rr[17];
    abbrev(pulse_patch_base_id(p), pb);
    abbrev(pulse_patch_result_id(p), pr);
    abbrev(r->base, rb);
    abbrev(r->result, rr);
    if (memcmp(pulse_patch_base_id(p), r->base, 32) || memcmp(pulse_patch_result_id(p), r->result, 32)) {
        pulse_patch_close(&p);
        return pulse_fail(PULSE_ERR_MISMATCH, "patch goes from %s to %s, its record from %s to %s "
                          "(an object of another step)", pb, pr, rb, rr);
    }
    rc = pulse_patch_verify(p, NULL, 0);
    pulse_patch_close(&p);
    return rc;
}

static int open_store(struct opts *o, pulse_store **st)
{
    int rc = pulse_store_open(st, o->store, NULL);
    if (rc) {
        char what[300];
        snprintf(what, sizeof what, "opening %s", o->store);
        return cli_fail(o->verb, rc, what);
    }
    return 0;
}

static const char *node_label(const pulse_audit_entry *e, char *buf, size_t cap)
{
    char id[17];
    abbrev(e->node, id);
    if (!e->parsed)
        snprintf(buf, cap, "UNREADABLE");
    else if (e->signer && !e->valid)
        snprintf(buf, cap, "%s INVALID", e->signer->comment);
    else if (e->signer)
        snprintf(buf, cap, "%s", e->signer->comment);
    else
        snprintf(buf, cap, "%s UNTRUSTED", id);
    return buf;
}

static void print_ratio(char *buf, size_t cap, uint64_t num, uint64_t den)
{
    if (den)
        snprintf(buf, cap, "%.2f%%", 100.0 * (double)num / (double)den);
    else
        snprintf(buf, cap, "-");
}

static void entry_json(const pulse_audit_entry *e)
{
    char hex[65];
    printf("{\"key\":");
    cli_json_str(e->key);
    printf(",\"step\":%llu,\"kind\":", (unsigned long long)e->key_step);
    cli_json_str(pulse_record_kind_name(e->kind) ? pulse_record_kind_name(e->kind) : "?");
    printf(",\"parsed\":%s,\"trusted\":%s,\"valid\":%s,\"problems\":%d", e->parsed ? "true" : "false",
           e->trusted ? "true" : "false", e->valid ? "true" : "false", e->problems);
    if (e->parsed) {
        pulse_hex_encode(e->node, 32, hex);
        printf(",\"node\":\"%s\",\"signer\":", hex);
        if (e->signer)
            cli_json_str(e->signer->comment);
        else
            printf("null");
        pulse_hex_encode(e->base, 32, hex);
        printf(",\"base\":\"%s\"", hex);
        pulse_hex_encode(e->result, 32, hex);
        printf(",\"result\":\"%s\",\"time\":%llu,\"changes\":%llu,\"elements\":%llu,\"dense_bytes\":%llu,"
               "\"patch_bytes\":%llu,\"object_bytes\":%llu,\"objects\":%u",
               hex, (unsigned long long)e->time, (unsigned long long)e->changes, (unsigned long long)e->elements,
               (unsigned long long)e->dense_bytes, (unsigned long long)e->patch_bytes,
               (unsigned long long)e->object_bytes, e->n_objects);
    }
    printf("}");
}

static int run_audit(struct opts *o, int level, pulse_audit_report *rep)
{
    pulse_store *st = NULL;
    int rc = open_store(o, &st);
    if (rc)
        return rc;
    pulse_audit_opts ao;
    pulse_audit_opts_default(&ao);
    ao.level = level;
    ao.trust = o->trust;
    if (o->memory)
        ao.memory_bytes = o->memory;
    struct patch_check pc = { st, o->run };
    ao.check_content = check_patch_object;
    ao.content_ctx = &pc;
    rc = pulse_audit_run(st, o->run, &ao, rep);
    pulse_store_close(&st);
    if (rc) {
        char what[300];
        snprintf(what, sizeof what, "auditing run %s in %s", o->run, o->store);
        return cli_fail(o->verb, rc, what);
    }
    return 0;
}

static int cmd_ls(struct opts *o)
{
    pulse_audit_report rep;
    int rc = run_audit(o, PULSE_AUDIT_RECORDS, &rep);
    if (rc)
        return rc;
    if (!rep.n_entries) {
        pulse_audit_report_clear(&rep);
        fprintf(stderr, "pulse %s: no records under %s/%s/\n", o->verb, o->store, o->run);
        return 1;
    }
    if (!o->json)
        printf("%-6s %-11s %-26s %-16s %-16s %12s %12s %8s %8s %s\n", "STEP", "KIND", "NODE", "BASE", "RESULT",
               "PATCH", "DENSE", "RATIO", "DENSITY", "TIME");
    for (size_t i = 0; i < rep.n_entries; i++) {
        const pulse_audit_entry *e = &rep.entries[i];
        if (o->json) {
            entry_json(e);
            putchar('\n');
            continue;
        }
        char node[PULSE_KEY_MAX_COMMENT + 32], base[17], result[17], ratio[16], density[16], when[32];
        const char *kind = pulse_record_kind_name(e->kind) ? pulse_record_kind_name(e->kind) : "?";
        if (!e->parsed) {
            printf("%-6llu %-11s %-26s %s\n", (unsigned long long)e->key_step, kind, "UNREADABLE", e->key);
            continue;
        }
        if (all_zero(e->base, 32))
            snprintf(base, sizeof base, "-");
        else
            abbrev(e->base, base);
        if (all_zero(e->result, 32))
            snprintf(result, sizeof result, "-");
        else
            abbrev(e->result, result);
        print_ratio(ratio, sizeof ratio, e->object_bytes, e->dense_bytes);
        if (e->kind == PULSE_RECORD_SYNC_PATCH || e->kind == PULSE_RECORD_KEYFRAME)
            print_ratio(density, sizeof density, e->changes, e->elements);
        else
            snprintf(density, sizeof density, "-");
        utc(e->time, when, sizeof when);
        printf("%-6llu %-11s %-26s %-16s %-16s %12llu %12llu %8s %8s %s\n", (unsigned long long)e->key_step, kind,
               node_label(e, node, sizeof node), base, result, (unsigned long long)e->object_bytes,
               (unsigned long long)e->dense_bytes, ratio, density, when);
    }
    pulse_audit_report_clear(&rep);
    return cli_finish_stdout(o->verb);
}

/* Fetches and prints the record at REL (relative to the run). */
static int show_one(struct opts *o, pulse_store *st, const char *rel)
{
    char key[PULSE_AUDIT_MAX_KEY + PULSE_RECORD_MAX_RUN + 2];
    void *data = NULL;
    size_t len = 0;
    int rc = pulse_layout_join(key, sizeof key, o->run, rel);
    if (!rc)
        rc = pulse_store_get(st, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &len, NULL);
    if (rc)
        return cli_fail(o->verb, rc, key);
    pulse_record r;
    memset(&r, 0, sizeof r);
    rc = pulse_record_parse(data, len, &r);
    if (rc) {
        pulse_store_free(data);
        return cli_fail(o->verb, rc, key);
    }
    const pulse_public_key *signer = NULL;
    int vrc = o->trust ? pulse_record_verify(data, len, o->trust, &signer, NULL) : 1;
    char why[300];
    snprintf(why, sizeof why, "%s", vrc < 0 ? pulse_last_error() : "");
    pulse_store_free(data);
    rc = pulse_record_render(&r, signer, o->json ? PULSE_RENDER_JSON : PULSE_RENDER_TEXT, stdout);
    pulse_record_clear(&r);
    if (rc)
        return cli_fail(o->verb, rc, "printing the record");
    if (!o->json) {
        printf("  key          %s\n", rel);
        if (vrc == 0)
            printf("  verified     yes, signed by %s\n", signer->comment);
        else if (vrc > 0)
            printf("  verified     not checked (no --trust)\n");
        else
            printf("  verified     NO: %s\n", why);
    }
    return 0;
}

struct step_match {
    uint64_t step;
    char (*keys)[PULSE_AUDIT_MAX_KEY];
    size_t n, cap;
    size_t run_len;
};

static int collect_step(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)info;
    struct step_match *m = ctx;
    const char *rel = key + m->run_len + 1;
    int kind;
    uint64_t v;
    uint8_t node[32];
    if (pulse_layout_parse_record(rel, &kind, &v, node) || v != m->step || strlen(rel) >= PULSE_AUDIT_MAX_KEY)
        return 0;
    if (m->n == m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 8;
        void *p = realloc(m->keys, nc * sizeof *m->keys);
        if (!p)
            return PULSE_ERR_NOMEM;
        m->keys = p;
        m->cap = nc;
    }
    snprintf(m->keys[m->n++], PULSE_AUDIT_MAX_KEY, "%s", rel);
    return 0;
}

static int cmd_show(struct opts *o)
{
    pulse_store *st = NULL;
    int rc = open_store(o, &st);
    if (rc)
        return rc;
    uint64_t step;
    if (cli_parse_u64(o->target, &step) == 0 && strspn(o->target, "0123456789") == strlen(o->target)) {
        struct step_match m = { .step = step, .run_len = strlen(o->run) };
        char prefix[PULSE_RECORD_MAX_RUN + 16];
        rc = pulse_layout_join(prefix, sizeof prefix, o->run, PULSE_LAYOUT_RECORDS);
        if (!rc)
            rc = pulse_store_list(st, prefix, NULL, collect_step, &m);
        if (rc) {
            free(m.keys);
            pulse_store_close(&st);
            return cli_fail(o->verb, rc, "listing the records");
        }
        if (!m.n) {
            free(m.keys);
            pulse_store_close(&st);
            fprintf(stderr, "pulse %s: no record of step %llu in run %s\n", o->verb, (unsigned long long)step, o->run);
            return 1;
        }
        for (size_t i = 0; i < m.n && !rc; i++) {
            if (i && !o->json)
                putchar('\n');
            rc = show_one(o, st, m.keys[i]);
        }
        free(m.keys);
    } else {
        const char *rel = o->target;
        size_t rl = strlen(o->run);
        if (!strncmp(rel, o->run, rl) && rel[rl] == '/')
            rel += rl + 1;  /* accept the key with the run in front too */
        rc = show_one(o, st, rel);
    }
    pulse_store_close(&st);
    return rc ? rc : cli_finish_stdout(o->verb);
}

static void audit_text(const struct opts *o, const pulse_audit_report *rep)
{
    printf("audit of run %s in %s: %zu record%s, %llu object%s, %llu head%s\n", o->run, o->store, rep->n_entries,
           rep->n_entries == 1 ? "" : "s", (unsigned long long)rep->objects, rep->objects == 1 ? "" : "s",
           (unsigned long long)rep->heads, rep->heads == 1 ? "" : "s");
    printf("%-6s %-11s %-26s %12s %12s %8s %s\n", "STEP", "KIND", "NODE", "BYTES", "DENSE", "RATIO", "STATUS");
    for (size_t i = 0; i < rep->n_entries; i++) {
        const pulse_audit_entry *e = &rep->entries[i];
        char node[PULSE_KEY_MAX_COMMENT + 32], ratio[16], status[32];
        print_ratio(ratio, sizeof ratio, e->object_bytes, e->dense_bytes);
        if (e->problems)
            snprintf(status, sizeof status, "%d problem%s", e->problems, e->problems == 1 ? "" : "s");
        else
            snprintf(status, sizeof status, "ok");
        printf("%-6llu %-11s %-26s %12llu %12llu %8s %s\n", (unsigned long long)e->key_step,
               pulse_record_kind_name(e->kind) ? pulse_record_kind_name(e->kind) : "?",
               node_label(e, node, sizeof node), (unsigned long long)e->object_bytes,
               (unsigned long long)e->dense_bytes, ratio, status);
    }
    char r[16];
    print_ratio(r, sizeof r, rep->patch_total, rep->dense_total);
    char uploads[64];
    if (rep->uploads < 0)
        snprintf(uploads, sizeof uploads, "none (file:// has no multipart uploads)");
    else
        snprintf(uploads, sizeof uploads, "%lld", (long long)rep->uploads);
    printf("storage: %llu bytes in %llu keys (records %llu in %llu, objects %llu in %llu, orphans %llu in %llu, "
           "heads %llu); incomplete uploads %s\n",
           (unsigned long long)rep->key_bytes, (unsigned long long)rep->keys, (unsigned long long)rep->record_bytes,
           (unsigned long long)rep->records, (unsigned long long)rep->object_bytes, (unsigned long long)rep->objects,
           (unsigned long long)rep->orphan_bytes, (unsigned long long)rep->orphans, (unsigned long long)rep->heads,
           uploads);
    printf("sync: %llu bytes of objects for %llu dense bytes published (%s)\n", (unsigned long long)rep->patch_total,
           (unsigned long long)rep->dense_total, r);
    const pulse_audit_requests *q = &rep->requests;
    printf("requests (estimate, docs/trust.md): trainer %llu PUTs; follower from scratch %llu LIST + %llu GETs, "
           "then %llu GETs per new step; this audit %llu LIST + %llu GETs (%llu objects hashed, %llu bytes)\n",
           (unsigned long long)q->trainer_puts, (unsigned long long)q->follower_lists,
           (unsigned long long)q->follower_gets, (unsigned long long)q->follower_step_gets,
           (unsigned long long)q->audit_lists, (unsigned long long)q->audit_gets,
           (unsigned long long)rep->objects_checked, (unsigned long long)rep->bytes_hashed);
    if (!rep->n_problems)
        printf("ok: every check holds\n");
    else
        printf("%zu problem%s (listed on stderr)\n", rep->n_problems, rep->n_problems == 1 ? "" : "s");
}

static void audit_json(const struct opts *o, const pulse_audit_report *rep)
{
    char uploads[24] = "null";   /* file:// has no multipart uploads */
    if (rep->uploads >= 0)
        snprintf(uploads, sizeof uploads, "%lld", (long long)rep->uploads);
    printf("{\"run\":");
    cli_json_str(o->run);
    printf(",\"store\":");
    cli_json_str(o->store);
    printf(",\"ok\":%s,\"problems\":[", rep->n_problems ? "false" : "true");
    for (size_t i = 0; i < rep->n_problems; i++) {
        if (i)
            putchar(',');
        cli_json_str(rep->problems[i]);
    }
    printf("],\"records\":[");
    for (size_t i = 0; i < rep->n_entries; i++) {
        if (i)
            putchar(',');
        entry_json(&rep->entries[i]);
    }
    const pulse_audit_requests *q = &rep->requests;
    printf("],\"storage\":{\"keys\":%llu,\"bytes\":%llu,\"records\":%llu,\"record_bytes\":%llu,\"objects\":%llu,"
           "\"object_bytes\":%llu,\"orphans\":%llu,\"orphan_bytes\":%llu,\"heads\":%llu,\"incomplete_uploads\":%s},"
           "\"sync\":{\"object_bytes\":%llu,\"dense_bytes\":%llu},"
           "\"requests\":{\"trainer_puts\":%llu,\"follower_lists\":%llu,\"follower_gets\":%llu,"
           "\"follower_step_gets\":%llu,\"audit_lists\":%llu,\"audit_gets\":%llu},"
           "\"objects_hashed\":%llu,\"bytes_hashed\":%llu}\n",
           (unsigned long long)rep->keys, (unsigned long long)rep->key_bytes, (unsigned long long)rep->records,
           (unsigned long long)rep->record_bytes, (unsigned long long)rep->objects,
           (unsigned long long)rep->object_bytes, (unsigned long long)rep->orphans,
           (unsigned long long)rep->orphan_bytes, (unsigned long long)rep->heads, uploads,
           (unsigned long long)rep->patch_total, (unsigned long long)rep->dense_total,
           (unsigned long long)q->trainer_puts, (unsigned long long)q->follower_lists,
           (unsigned long long)q->follower_gets, (unsigned long long)q->follower_step_gets,
           (unsigned long long)q->audit_lists, (unsigned long long)q->audit_gets,
           (unsigned long long)rep->objects_checked, (unsigned long long)rep->bytes_hashed);
}

static int cmd_audit(struct opts *o)
{
    if (!o->n_trust)
        return cli_usage_error(o->verb, "--trust PUB|DIR is required (whose records are valid)");
    pulse_audit_report rep;
    int rc = run_audit(o, o->records_only ? PULSE_AUDIT_RECORDS : PULSE_AUDIT_FULL, &rep);
    if (rc)
        return rc;
    if (o->json)
        audit_json(o, &rep);
    else
        audit_text(o, &rep);
    rc = cli_finish_stdout(o->verb);
    for (size_t i = 0; i < rep.n_problems; i++)
        fprintf(stderr, "pulse %s: %s\n", o->verb, rep.problems[i]);
    if (rep.n_problems)
        rc = 1;
    pulse_audit_report_clear(&rep);
    return rc;
}

int cmd_manifest(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : cli_finish_stdout("manifest");
    }
    struct opts o;
    memset(&o, 0, sizeof o);
    static const struct { const char *name, *usage; } subverbs[] = {
        { "ls", usage_ls }, { "show", usage_show }, { "audit", usage_audit },
    };
    const char *sub = argv[1], *help = NULL;
    for (size_t i = 0; i < sizeof subverbs / sizeof subverbs[0]; i++)
        if (!strcmp(sub, subverbs[i].name)) {
            sub = subverbs[i].name;   /* the literal: gcc -fsanitize then sees it is not NULL */
            help = subverbs[i].usage;
        }
    if (!help)
        return cli_usage_error("manifest", "unknown subverb '%s' (ls, show, audit)", sub);
    char verb[32];
    snprintf(verb, sizeof verb, "manifest %s", sub);
    o.verb = verb;
    if (cli_wants_help(argc - 1, argv + 1)) {
        fputs(help, stdout);
        return cli_finish_stdout(verb);
    }
    int rc = parse_opts(&o, argc - 1, argv + 1, !strcmp(sub, "show"));
    if (!rc)
        rc = !strcmp(sub, "ls") ? cmd_ls(&o) : !strcmp(sub, "show") ? cmd_show(&o) : cmd_audit(&o);
    pulse_trust_free(&o.trust);
    return rc;
}
