/* SPDX-License-Identifier: Apache-2.0 */
/* pulse status: every node of a run, trainer heads and follower receipts, with lag and state match. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/names.h"
#include "manifest/layout.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"
#include "tools/cli.h"
#include "tools/verbs.h"

#define KEY_MAX 1100

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse status --store URL --run R [--trust PUB|DIR]... [--json]\n"
        "\n"
        "Shows every node seen in run R: trainers (their head: newest step, state, time) and\n"
        "followers (their newest receipt: step and state held, time; lag in steps behind the\n"
        "newest trainer step and in seconds since the first step they lack was published; whether\n"
        "their state equals the trainer's record for that step). Every record read is checked\n"
        "against its own signature; with --trust, signers outside the set are marked untrusted\n"
        "and only trusted trainers define the newest step.\n"
        "\n"
        "  --store URL     file:///dir or s3://bucket/prefix\n"
        "  --run R         run name\n"
        "  --trust P       a .pub file or a directory of them (repeatable)\n"
        "  --json          one JSON object instead of the table\n");
}

/* One node's newest record: a trainer's head record or a follower's newest receipt. */
typedef struct node_row {
    char node_hex[PULSE_NODE_ID_HEX];
    int trainer;
    char key[KEY_MAX];          /* relative to the run */
    int have;                   /* record read and parsed */
    const char *signer;         /* trusted, untrusted, signed, bad-signature, unreadable */
    uint64_t step, time;
    int kind;
    uint8_t state[32];
    char error[200];
    /* followers */
    int64_t lag_steps;
    int64_t lag_s;              /* -1: unknown */
    const char *match;          /* yes, no, unknown */
} node_row;

typedef struct status {
    pulse_store *st;
    const char *run;
    pulse_trust *trust;
    node_row *rows;
    size_t n, cap;
    char (*records)[KEY_MAX];   /* every records/ key, relative to the run */
    size_t n_records, cap_records;
} status;

static node_row *row_for(status *s, const char *hex, int trainer)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->rows[i].trainer == trainer && !strcmp(s->rows[i].node_hex, hex))
            return &s->rows[i];
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        node_row *r = realloc(s->rows, cap * sizeof *r);
        if (!r)
            return NULL;
        s->rows = r;
        s->cap = cap;
    }
    node_row *r = &s->rows[s->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->node_hex, sizeof r->node_hex, "%s", hex);
    r->trainer = trainer;
    r->lag_s = -1;
    r->match = "unknown";
    r->signer = "unreadable";
    return r;
}

static int list_cb(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)info;
    status *s = ctx;
    size_t rl = strlen(s->run);
    if (strncmp(key, s->run, rl) || key[rl] != '/' || strlen(key) >= KEY_MAX)
        return 0;
    const char *rel = key + rl + 1;
    uint8_t node[32];
    int kind;
    uint64_t step;
    char hex[PULSE_NODE_ID_HEX];
    if (!pulse_layout_parse_head(rel, node)) {
        pulse_node_id_hex(node, hex);
        node_row *r = row_for(s, hex, 1);
        if (!r)
            return PULSE_ERR_NOMEM;
        snprintf(r->key, sizeof r->key, "%s", rel);   /* the head; resolved later */
    } else if (PULSE_LAYOUT_IN(rel, PULSE_LAYOUT_RECEIPTS)) {
        if (pulse_layout_parse_record(rel, &kind, &step, node))
            return 0;
        pulse_node_id_hex(node, hex);
        node_row *r = row_for(s, hex, 0);
        if (!r)
            return PULSE_ERR_NOMEM;
        /* Keys come in bytewise order and steps are zero-padded: the last one is the newest. */
        snprintf(r->key, sizeof r->key, "%s", rel);
    } else if (PULSE_LAYOUT_IN(rel, PULSE_LAYOUT_RECORDS)) {
        if (s->n_records == s->cap_records) {
            size_t cap = s->cap_records ? s->cap_records * 2 : 64;
            void *p = realloc(s->records, cap * KEY_MAX);
            if (!p)
                return PULSE_ERR_NOMEM;
            s->records = p;
            s->cap_records = cap;
        }
        strcpy(s->records[s->n_records++], rel);
    }
    return 0;
}

/* Fetches and parses the record at REL (relative to the run); checks its signature against its
 * own node key and, with a trust set, whether that key is trusted. */
static int read_record(status *s, const char *rel, pulse_record *rec, const char **signer)
{
    char key[KEY_MAX + 200];
    void *data = NULL;
    size_t len = 0;
    int r = pulse_layout_join(key, sizeof key, s->run, rel);
    if (!r)
        r = pulse_store_get(s->st, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &len, NULL);
    if (!r)
        r = pulse_record_parse(data, len, rec);
    if (r) {
        pulse_store_free(data);
        return r;
    }
    pulse_trust *self = NULL;
    pulse_public_key pk;
    memset(&pk, 0, sizeof pk);
    memcpy(pk.key, rec->node, sizeof pk.key);
    int v = pulse_trust_new(&self);
    if (!v)
        v = pulse_trust_add(self, &pk);
    if (!v)
        v = pulse_record_verify(data, len, self, NULL, NULL);
    pulse_trust_free(&self);
    pulse_store_free(data);
    if (v)
        *signer = "bad-signature";
    else if (!s->trust)
        *signer = "signed";
    else
        *signer = pulse_trust_find(s->trust, rec->node) ? "trusted" : "untrusted";
    return 0;
}

static void fill_row(status *s, node_row *row)
{
    char rel[KEY_MAX];
    snprintf(rel, sizeof rel, "%s", row->key);
    if (row->trainer) {
        /* The head names the newest record: one line, relative to the run. */
        char key[KEY_MAX + 200];
        void *data = NULL;
        size_t len = 0;
        int r = pulse_layout_join(key, sizeof key, s->run, row->key);
        if (!r)
            r = pulse_store_get(s->st, key, 0, PULSE_TO_END, PULSE_LAYOUT_HEAD_MAX, &data, &len, NULL);
        if (r) {
            snprintf(row->error, sizeof row->error, "head: %s", pulse_strerror(r));
            return;
        }
        uint64_t ms;
        const uint8_t *carried;
        size_t carried_len;
        if (pulse_layout_parse_head_content(data, len, rel, sizeof rel, &ms, &carried, &carried_len) ||
            strncmp(rel, PULSE_LAYOUT_RECORDS, strlen(PULSE_LAYOUT_RECORDS))) {
            snprintf(row->error, sizeof row->error, "head: not a record key");
            pulse_store_free(data);
            return;
        }
        pulse_store_free(data);
        snprintf(row->key, sizeof row->key, "%s", rel);
    }
    pulse_record rec;
    int r = read_record(s, rel, &rec, &row->signer);
    if (r) {
        snprintf(row->error, sizeof row->error, "%.120s: %s", rel, pulse_strerror(r));
        return;
    }
    char hex[PULSE_NODE_ID_HEX];
    pulse_node_id_hex(rec.node, hex);
    if (strcmp(hex, row->node_hex)) {
        row->signer = "bad-signature";   /* signed by a key other than the one its key names */
        snprintf(row->error, sizeof row->error, "%.120s: signed by another node %.16s", rel, hex);
    }
    row->have = 1;
    row->step = rec.step;
    row->time = rec.time;
    row->kind = rec.kind;
    memcpy(row->state, rec.result, 32);
    pulse_record_clear(&rec);
}

/* The trainer's record at STEP (sync-patch or keyframe), or the first one after STEP when
 * AFTER: its key relative to the run, or NULL. */
static const char *trainer_record(status *s, const char *trainer_hex, uint64_t step, int after)
{
    const char *best = NULL;
    uint64_t best_step = UINT64_MAX;
    for (size_t i = 0; i < s->n_records; i++) {
        const char *k = s->records[i];
        int kind;
        uint64_t st;
        uint8_t node[32];
        char hex[PULSE_NODE_ID_HEX];
        if (pulse_layout_parse_record(k, &kind, &st, node) ||
            (kind != PULSE_RECORD_SYNC_PATCH && kind != PULSE_RECORD_KEYFRAME))
            continue;
        pulse_node_id_hex(node, hex);
        if (strcmp(hex, trainer_hex))
            continue;
        if (after ? (st > step && st < best_step) : st == step) {
            best = k;
            best_step = st;
            if (!after)
                break;
        }
    }
    return best;
}

static void fmt_time(uint64_t t, char out[32])
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int cmd_status(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("status");
    }
    const char *url = NULL, *run = NULL;
    int json = 0;
    status s;
    memset(&s, 0, sizeof s);
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (i + 1 >= argc) {
            rc = cli_usage_error("status", "%s needs a value", a);
            break;
        }
        const char *val = argv[++i];
        if (!strcmp(a, "--store")) url = val;
        else if (!strcmp(a, "--run")) run = val;
        else if (!strcmp(a, "--trust")) {
            int r = s.trust ? 0 : pulse_trust_new(&s.trust);
            if (!r)
                r = pulse_trust_load(s.trust, val);
            if (r)
                rc = cli_fail("status", r, val);
        } else {
            rc = cli_usage_error("status", "unknown option '%s'", a);
        }
    }
    if (!rc && (!url || !run))
        rc = cli_usage_error("status", "needs --store and --run");
    if (!rc && pulse_check_run(run))
        rc = cli_usage_error("status", "%s", pulse_last_error());
    if (rc) {
        pulse_trust_free(&s.trust);
        return rc;
    }
    s.run = run;
    int r = pulse_store_open(&s.st, url, NULL);
    char prefix[PULSE_RECORD_MAX_RUN + 2];
    snprintf(prefix, sizeof prefix, "%s/", run);
    if (!r)
        r = pulse_store_list(s.st, prefix, NULL, list_cb, &s);
    if (r) {
        rc = cli_fail("status", r, url);
        goto out;
    }
    for (size_t i = 0; i < s.n; i++)
        fill_row(&s, &s.rows[i]);

    /* The reference trainer: the one (trusted, when a trust set is given) with the newest step. */
    node_row *ref = NULL;
    for (size_t i = 0; i < s.n; i++) {
        node_row *t = &s.rows[i];
        if (!t->trainer || !t->have || !strcmp(t->signer, "bad-signature") || !strcmp(t->signer, "untrusted"))
            continue;
        if (!ref || t->step > ref->step)
            ref = t;
    }
    uint64_t now = (uint64_t)time(NULL);
    for (size_t i = 0; ref && i < s.n; i++) {
        node_row *f = &s.rows[i];
        if (f->trainer || !f->have)
            continue;
        f->lag_steps = (int64_t)ref->step - (int64_t)f->step;
        if (f->lag_steps <= 0) {
            f->lag_s = 0;
        } else {
            /* Seconds since the first step the follower lacks was published. */
            const char *k = trainer_record(&s, ref->node_hex, f->step, 1);
            pulse_record rec;
            const char *sg;
            if (k && !read_record(&s, k, &rec, &sg)) {
                f->lag_s = rec.time <= now ? (int64_t)(now - rec.time) : 0;
                pulse_record_clear(&rec);
            }
        }
        const char *k = trainer_record(&s, ref->node_hex, f->step, 0);
        pulse_record rec;
        const char *sg;
        if (k && !read_record(&s, k, &rec, &sg)) {
            f->match = !memcmp(rec.result, f->state, 32) ? "yes" : "no";
            pulse_record_clear(&rec);
        }
    }

    char hex[65], ts[32];
    if (json) {
        printf("{\"run\":\"%s\",\"newest_step\":", run);
        if (ref)
            printf("%" PRIu64, ref->step);
        else
            printf("null");
        printf(",\"nodes\":[");
        for (size_t i = 0; i < s.n; i++) {
            node_row *n = &s.rows[i];
            printf("%s{\"node\":\"%s\",\"role\":\"%s\",\"signer\":\"%s\"", i ? "," : "", n->node_hex,
                   n->trainer ? "trainer" : "follower", n->signer);
            if (n->have) {
                fmt_time(n->time, ts);
                printf(",\"step\":%" PRIu64 ",\"state\":\"%s\",\"time\":\"%s\",\"record\":\"%s\"", n->step,
                       pulse_id_hex(n->state, hex), ts, n->key);
            }
            if (!n->trainer && n->have && ref) {
                printf(",\"lag_steps\":%" PRId64 ",\"lag_s\":", n->lag_steps);
                if (n->lag_s >= 0)
                    printf("%" PRId64, n->lag_s);
                else
                    printf("null");
                printf(",\"match\":\"%s\"", n->match);
            }
            if (n->error[0]) {
                printf(",\"error\":\"");
                for (const char *p = n->error; *p; p++) {
                    if (*p == '"' || *p == '\\')
                        putchar('\\');
                    putchar((unsigned char)*p < 0x20 ? '?' : *p);
                }
                printf("\"");
            }
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("run %s: %zu node%s, newest trainer step ", run, s.n, s.n == 1 ? "" : "s");
        if (ref)
            printf("%" PRIu64 "\n", ref->step);
        else
            printf("none\n");
        printf("%-16s  %-8s  %-13s  %8s  %-16s  %-20s  %6s  %7s  %-7s\n", "NODE", "ROLE", "SIGNER", "STEP",
               "STATE", "TIME", "LAG", "LAG_S", "MATCH");
        for (size_t i = 0; i < s.n; i++) {
            node_row *n = &s.rows[i];
            printf("%.16s  %-8s  %-13s  ", n->node_hex, n->trainer ? "trainer" : "follower", n->signer);
            if (!n->have) {
                printf("%8s  %-16s  %-20s  %6s  %7s  %-7s  %s\n", "-", "-", "-", "-", "-", "-", n->error);
                continue;
            }
            fmt_time(n->time, ts);
            printf("%8" PRIu64 "  %.16s  %-20s  ", n->step, pulse_id_hex(n->state, hex), ts);
            if (n->trainer || !ref) {
                printf("%6s  %7s  %-7s", "-", "-", "-");
            } else {
                char lag_s[24] = "?";
                if (n->lag_s >= 0)
                    snprintf(lag_s, sizeof lag_s, "%" PRId64, n->lag_s);
                printf("%6" PRId64 "  %7s  %-7s", n->lag_steps, lag_s, n->match);
            }
            printf("%s%s\n", n->error[0] ? "  " : "", n->error);
        }
    }
    rc = cli_finish_stdout("status");
out:
    free(s.rows);
    free(s.records);
    pulse_trust_free(&s.trust);
    pulse_store_close(&s.st);
    return rc;
}
