/* SPDX-License-Identifier: Apache-2.0 */
/* The services a LoCo round's all-gather (round.c) and reduce-scatter (reduce.c) share: messages,
 * the clock, the trainer table, listing, fetching and verifying records, checking a shard. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/fail.h"
#include "base/names.h"
#include "manifest/layout.h"
#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"
#include "node/loco/round_internal.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

#define LIST_MAX_KEYS (2u * PULSE_TRUST_MAX_KEYS + 64u)

/* ---- messages, clock, trainer table ------------------------------------------------- */

void loco_say(const round_ctx *c, int always, const char *fmt, ...)
{
    if (!always && !c->o->verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pulse loco: round %" PRIu64 ": ", c->st.round);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double loco_now_s(void)
{
    return pulse_monotonic_s();
}

void loco_sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

trainer *loco_find_trainer(round_ctx *c, const uint8_t node[32])
{
    for (size_t i = 0; i < c->n_tr; i++)
        if (!memcmp(c->tr[i].node, node, 32))
            return &c->tr[i];
    return NULL;
}

size_t loco_quorum(const round_ctx *c)
{
    if (c->o->quorum)
        return c->o->quorum;
    /* The members of round r-1 come from a result every honest trainer computed or adopted alike
     * (results are compared), so this is one number for all of them; a majority, so that one
     * trainer excluded or gone does not stop the run, and never fewer than two of two. */
    size_t base = c->st.prev_members && c->st.prev_members < c->n_tr ? c->st.prev_members : c->n_tr;
    return base / 2 + 1;
}

static int round_prefix(const round_ctx *c, int kind, char out[SYNC_KEY_MAX])
{
    char rel[SYNC_KEY_MAX];
    int r = pulse_layout_records_prefix(rel, sizeof rel, kind, c->st.round);
    return r ? r : sync_run_key(c->o->run, rel, out);
}

/* ---- listing and fetching records ---------------------------------------------------- */

typedef struct list_ctx {
    round_ctx *c;
    size_t prefix_len, seen;
    uint8_t (*nodes)[32];
    size_t n;
} list_ctx;

static int on_record_key(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)info;
    list_ctx *l = ctx;
    if (++l->seen > LIST_MAX_KEYS)
        return pulse_fail(PULSE_ERR_LIMIT, "more than %u records under one round", LIST_MAX_KEYS);
    const char *name = key + l->prefix_len;
    uint8_t node[32];
    if (pulse_layout_parse_hex32(name, strlen(name), node) != 0)
        return 0;   /* not a record key: ignored */
    if (!loco_find_trainer(l->c, node))
        return 0;   /* an untrusted writer's record: never read */
    memcpy(l->nodes[l->n++], node, 32);
    return 0;
}

/* The trusted nodes with a record of KIND for this round (at most n_tr). */
int loco_list_round(round_ctx *c, int kind, uint8_t (*nodes)[32], size_t *n)
{
    char prefix[SYNC_KEY_MAX];
    list_ctx l = { .c = c, .nodes = nodes };
    int r = round_prefix(c, kind, prefix);
    l.prefix_len = strlen(prefix);
    if (!r)
        r = pulse_store_list(c->store, prefix, NULL, on_record_key, &l);
    *n = l.n;
    return r;
}

/* Fetches and verifies the record of KIND for this round by NODE: signature by that trusted key,
 * run, round, base = theta_r's view. *bytes receives its bytes (malloc'ed) when wanted. */
int loco_fetch_record(round_ctx *c, int kind, const uint8_t node[32], pulse_record *rec, void **bytes,
                      size_t *len)
{
    char rel[SYNC_KEY_MAX], key[SYNC_KEY_MAX];
    int r = pulse_layout_record(rel, sizeof rel, kind, c->st.round, node);
    if (!r)
        r = sync_run_key(c->o->run, rel, key);
    void *data = NULL;
    size_t n = 0;
    const pulse_public_key *signer = NULL;
    if (!r)
        r = pulse_store_get(c->store, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &n, NULL);
    if (!r) {
        c->rep->downloaded += n;
        r = pulse_record_verify(data, n, c->trust, &signer, rec);
    }
    if (!r && memcmp(signer->key, node, 32))
        r = pulse_fail(PULSE_ERR_AUTH, "record %s is signed by another key", rel);
    if (!r && (rec->kind != kind || rec->step != c->st.round || strcmp(rec->run, c->o->run)))
        r = pulse_fail(PULSE_ERR_FORMAT, "record %s is not a %s record of run %s round %" PRIu64 " (replayed?)", rel,
                       pulse_record_kind_name(kind), c->o->run, c->st.round);
    if (!r && memcmp(rec->base, c->st.view_id, 32))
        r = pulse_fail(PULSE_ERR_MISMATCH, "record %s starts from another state than this trainer's theta_r", rel);
    if (r) {
        pulse_record_clear(rec);
        pulse_store_free(data);
        return r;
    }
    if (bytes) {
        *bytes = data;
        *len = n;
    } else {
        pulse_store_free(data);
    }
    return 0;
}

/* ---- checking another trainer's shard ---------------------------------------------- */

int loco_check_shard_object(round_ctx *c, const pulse_record_object *o, const void *obj, size_t ti, loco_shard *s)
{
    int r = loco_shard_decode(obj, o->size, c->st.view, o->range_offset, o->range_length, s);
    s->tensor = ti;
    if (r)
        return pulse_fail(r, "tensor %s shard at %" PRIu64 ": %s", o->tensor, o->range_offset, pulse_last_error());
    const float *theta = (const float *)(const void *)pulse_ckpt_tensor(c->st.theta, ti)->data + o->range_offset;
    size_t bad = 0;
    int g = c->kt->gate_check[c->st.view](theta, o->range_length, s->idx, s->val, s->k, &bad);
    if (g != PULSE_GATE_OK) {
        static const char *const why[] = { "ok", "positions not ascending", "position out of range",
                                           "a value that is not finite",
                                           ("an entry that does not pass the gate (padded or byzantine)") };
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s element %" PRIu64 ": %s", o->tensor,
                          o->range_offset + s->idx[bad], why[-g]);
    }
    /* Finite is not enough: a few values near FP32's limit overflow the sum (docs/loco.md
     * "Bounded values"). The rule depends on the value alone, so every trainer decides alike. */
    size_t over = loco_first_over(s->val, s->k, LOCO_MAX_VALUE);
    if (over < s->k)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s element %" PRIu64 ": a value over the bound (%g, more than %g)",
                          o->tensor, o->range_offset + s->idx[over], (double)s->val[over], (double)LOCO_MAX_VALUE);
    return 0;
}

/* ---- waiting for the trainers' records --------------------------------------------- */

int loco_wait_listed(round_ctx *c, loco_wait_stop stop, void *ctx, int *found)
{
    uint8_t (*nodes)[32] = calloc(c->n_tr, 32);
    int r = nodes ? 0 : pulse_fail(PULSE_ERR_NOMEM, "trainers");
    double deadline = loco_now_s() + c->o->deadline_s, pause = 0.05;
    *found = 0;
    while (!r) {
        if ((r = stop(c, ctx, found)) || *found)
            break;
        size_t n = 0, listed = 0;
        if ((r = loco_list_round(c, PULSE_RECORD_LOCO_SHARD, nodes, &n)))
            break;
        for (size_t i = 0; i < n; i++)
            loco_find_trainer(c, nodes[i])->listed = 1;
        for (size_t i = 0; i < c->n_tr; i++)
            listed += c->tr[i].listed;
        if (listed >= c->n_tr || loco_now_s() >= deadline)
            break;
        loco_sleep_s(pause);
        pause = pause * 2 > 1.0 ? 1.0 : pause * 2;
    }
    free(nodes);
    return r;
}
