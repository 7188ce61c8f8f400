/* SPDX-License-Identifier: Apache-2.0 */
/* In-process LoCo simulation: K trainers x R rounds x H Adam steps, PULSELoCo vs dense DiLoCo on one objective. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fail.h"
#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"
#include "node/loco/objective.h"
#include "node/parallel.h"
#include "pulseweights/keys.h"

/* One trainer's memory: its local weights, Adam state, error feedback, gradient scratch. */
typedef struct sim_trainer {
    float *local, *g, *res, *e, *delta, *w16;
    loco_adam adam;
    uint32_t *idx;
    float *val;
} sim_trainer;

typedef struct sim {
    const loco_sim_cfg *cfg;
    const loco_objective *obj;
    const pulse_kernels *kt;
    size_t n;
    float *theta, *m, *acc;
    sim_trainer *tr;
    /* reduce_gate: union marks and one range's union entries and withheld ones */
    uint8_t *mark;
    uint32_t *uidx, *hidx;
    float *uval, *hval;
    double rg_pub, rg_held;
    int dense;
    int fail;
    /* the store pass */
    char (*dir)[4096];          /* per trainer (in node-id order): key base path, state dir */
    char (*state)[4096];
    const char **pubs;
    char url[4200];
    float **outs;
    double store_bytes, store_down, store_down_max;
    unsigned round;
} sim;

/* H Adam steps from theta on trainer T's data (one job of pulse_parallel_for). */
static int inner_steps(void *ctx, size_t t)
{
    sim *s = ctx;
    sim_trainer *tr = &s->tr[t];
    memcpy(tr->local, s->theta, s->n * 4);
    for (unsigned h = 0; h < s->cfg->inner_steps; h++) {
        const float *w = tr->local;
        if (s->cfg->bf16_forward) {   /* mixed precision: the gradient at the BF16 weights, FP32 master + Adam */
            for (size_t i = 0; i < s->n; i++)
                tr->w16[i] = loco_bf16_round(tr->local[i]);
            w = tr->w16;
        }
        loco_objective_grad(s->obj, w, (unsigned)t, tr->g, tr->res);
        loco_adam_step(&tr->adam, tr->local, tr->g, s->n, s->cfg->inner_lr);
    }
    return 0;
}

/* One round of PULSELoCo for every trainer: gate + error feedback per shard range, the shard
 * encoded (its bytes counted), the sparse a added in trainer order; then the outer step. */
static int loco_round(sim *s, double *sent, double *bytes)
{
    const loco_sim_cfg *c = s->cfg;
    memset(s->acc, 0, s->n * 4);
    for (unsigned t = 0; t < c->obj.trainers; t++) {
        sim_trainer *tr = &s->tr[t];
        loco_delta(s->theta, tr->local, tr->delta, s->n);
        for (size_t off = 0; off < s->n; off += c->shard_elems) {
            size_t len = s->n - off < c->shard_elems ? s->n - off : c->shard_elems;
            const float *th = s->theta + off;
            float *e = tr->e + off;
            size_t k = s->kt->gate[c->view](th, tr->delta + off, e, len, tr->idx, tr->val);
            if (c->bf16_values)   /* the round's own option: loco_bf16_values (outer.c) */
                k = loco_bf16_values(c->view, th, e, tr->idx, tr->val, k);
            if (k == 0)
                continue;
            uint8_t *obj = NULL;
            size_t obj_len = 0;
            int r = loco_shard_encode(c->view, off, (uint32_t)len, tr->idx, tr->val, (uint32_t)k, &obj, &obj_len);
            if (r)
                return r;
            free(obj);
            *sent += (double)k;
            *bytes += (double)obj_len;
            s->kt->scatter_add_f32(s->acc + off, tr->idx, k, tr->val);
            for (size_t j = 0; s->mark && j < k; j++)
                s->mark[off + tr->idx[j]] = 1;
        }
    }
    if (c->reduce_gate) {
        /* The owners' gate, as the reduce-gate rounds do it: range g (one tensor "w") belongs to
         * trainer g mod K (node order = trainer order in the store pass); its union sums whose mean
         * update would not change the view are withheld into the owner's e and not applied. */
        unsigned K = c->obj.trainers;
        for (size_t off = 0, g = 0; off < s->n; off += c->shard_elems, g++) {
            size_t len = s->n - off < c->shard_elems ? s->n - off : c->shard_elems, k = 0, np = 0, nh = 0;
            for (size_t i = 0; i < len; i++)
                if (s->mark[off + i]) {
                    s->uidx[k] = (uint32_t)i;
                    s->uval[k++] = s->acc[off + i];
                    s->mark[off + i] = 0;
                }
            int r = loco_gate_mean(s->kt, c->view, s->theta + off, (float)K, c->outer_lr, s->uidx, s->uval, k, s->hidx,
                                   s->hval, &np, &nh);
            if (r)
                return r;
            for (size_t j = 0; j < nh; j++)
                s->acc[off + s->hidx[j]] = 0.0f;   /* as the receivers' accumulator: +0 where nothing came */
            loco_carry_sum(s->tr[g % K].e + off, s->hidx, s->hval, nh);
            s->rg_pub += (double)np;
            s->rg_held += (double)nh;
        }
    }
    loco_outer_step(s->theta, s->acc, (float)c->obj.trainers, s->m, c->outer_lr, c->momentum, c->nesterov, s->theta,
                    s->n);
    return 0;
}

/* One trainer's real round (a thread): theta_local from memory, theta_{r+1} into outs[t]. */
typedef struct round_job {
    sim *s;
    unsigned t;
    int rc;
    pulse_loco_report rep;
    char err[256];
} round_job;

static void *round_thread(void *arg)
{
    round_job *j = arg;
    sim *s = j->s;
    const loco_sim_cfg *c = s->cfg;
    char key[4200];
    snprintf(key, sizeof key, "%s.key", s->dir[j->t]);
    pulse_loco_tensor lt = { "w", 2, { c->obj.rows, c->obj.cols }, s->tr[j->t].local };
    pulse_loco_tensor ot = { "w", 2, { c->obj.rows, c->obj.cols }, s->outs[j->t] };
    pulse_loco_round_opts o;
    pulse_loco_round_default_opts(&o);
    o.store_url = s->url;
    o.run = "sim";
    o.key_path = key;
    o.trust_paths = s->pubs;
    o.n_trust = c->obj.trainers;
    o.state_dir = s->state[j->t];
    o.local_tensors = &lt;
    o.n_local = 1;
    o.out_tensors = &ot;
    o.n_out = 1;
    o.deadline_s = 600;
    o.outer_lr = c->outer_lr;
    o.momentum = c->momentum;
    o.nesterov = c->nesterov;
    o.threads = 1;
    o.shard_elems = c->shard_elems;
    o.bf16_values = c->bf16_values;
    o.reduce_scatter = c->reduce_scatter;
    o.reduce_gate = c->reduce_gate;
    j->rc = pulse_loco_round(&o, &j->rep);
    if (j->rc)
        snprintf(j->err, sizeof j->err, "%s", pulse_last_error());
    return NULL;
}

/* Every trainer's round at once (they wait for each other through the store); theta = theirs. */
static int store_round(sim *s)
{
    unsigned k = s->cfg->obj.trainers;
    round_job *jobs = calloc(k, sizeof *jobs);
    pthread_t *th = calloc(k, sizeof *th);
    int r = jobs && th ? 0 : pulse_fail(PULSE_ERR_NOMEM, "round threads");
    unsigned started = 0;
    for (unsigned t = 0; !r && t < k; t++) {
        jobs[t] = (round_job){ .s = s, .t = t };
        if (pthread_create(&th[t], NULL, round_thread, &jobs[t]) != 0)
            r = pulse_fail(PULSE_ERR_IO, "cannot start a round thread");
        else
            started++;
    }
    for (unsigned t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    for (unsigned t = 0; !r && t < k; t++) {
        if (jobs[t].rc)
            r = pulse_fail(jobs[t].rc, "round %u, trainer %u: %s", s->round, t, jobs[t].err);
        else if (memcmp(s->outs[t], s->outs[0], s->n * 4))
            r = pulse_fail(PULSE_ERR_MISMATCH, "round %u: trainer %u's theta differs from trainer 0's", s->round, t);
        else
        {
            s->store_bytes += (double)jobs[t].rep.shard_bytes;
            s->store_down += (double)jobs[t].rep.downloaded;
            if ((double)jobs[t].rep.downloaded > s->store_down_max)
                s->store_down_max = (double)jobs[t].rep.downloaded;
        }
    }
    if (!r)
        memcpy(s->theta, s->outs[0], s->n * 4);
    free(jobs);
    free(th);
    return r;
}

typedef struct node_rank {
    uint8_t node[32];
    unsigned i;
} node_rank;

static int cmp_rank(const void *a, const void *b)
{
    return memcmp(((const node_rank *)a)->node, ((const node_rank *)b)->node, 32);
}

/* Keys (named in node-id order), states from theta_0 and the store for the store pass. */
static int store_setup(sim *s)
{
    const loco_sim_cfg *c = s->cfg;
    unsigned k = c->obj.trainers;
    if (mkdir(c->store_dir, 0755) != 0)
        return pulse_fail_errno(errno == EEXIST ? PULSE_ERR_EXISTS : PULSE_ERR_IO, "cannot create %s", c->store_dir);
    s->dir = calloc(k, sizeof *s->dir);
    s->state = calloc(k, sizeof *s->state);
    s->pubs = calloc(k, sizeof *s->pubs);
    s->outs = calloc(k, sizeof *s->outs);
    node_rank *nr = calloc(k, sizeof *nr);
    pulse_secret_key **keys = calloc(k, sizeof *keys);
    int r = s->dir && s->state && s->pubs && s->outs && nr && keys ? 0 : pulse_fail(PULSE_ERR_NOMEM, "trainers");
    for (unsigned t = 0; !r && t < k; t++) {
        if ((r = pulse_key_generate(&keys[t])) == 0) {
            pulse_key_public(keys[t], nr[t].node);
            nr[t].i = t;
        }
    }
    if (!r)
        qsort(nr, k, sizeof *nr, cmp_rank);
    pulse_loco_tensor w0 = { "w", 2, { c->obj.rows, c->obj.cols }, s->obj->w0 };
    for (unsigned t = 0; !r && t < k; t++) {
        char comment[32], pub[4200];
        snprintf(s->dir[t], sizeof s->dir[t], "%.3000s/t%u", c->store_dir, t);
        snprintf(s->state[t], sizeof s->state[t], "%.3000s/s%u", c->store_dir, t);
        snprintf(comment, sizeof comment, "t%u", t);
        snprintf(pub, sizeof pub, "%s.pub", s->dir[t]);
        s->pubs[t] = strdup(pub);
        s->outs[t] = malloc(s->n * 4);
        if (!s->pubs[t] || !s->outs[t])
            r = pulse_fail(PULSE_ERR_NOMEM, "trainer");
        if (!r)
            r = pulse_key_save(keys[nr[t].i], s->dir[t], comment);   /* t<rank>: rank t in node order */
        if (!r)
            r = pulse_loco_init_tensors(s->state[t], &w0, 1, c->view);
    }
    snprintf(s->url, sizeof s->url, "file://%.4000s/store", c->store_dir);
    for (unsigned t = 0; keys && t < k; t++)
        pulse_key_free(&keys[t]);
    free(keys);
    free(nr);
    return r;
}

/* Dense DiLoCo: the FP32 pseudo-gradients summed in trainer order, the same outer step. */
static void dense_round(sim *s)
{
    const loco_sim_cfg *c = s->cfg;
    memset(s->acc, 0, s->n * 4);
    for (unsigned t = 0; t < c->obj.trainers; t++) {
        sim_trainer *tr = &s->tr[t];
        loco_delta(s->theta, tr->local, tr->delta, s->n);
        for (size_t i = 0; i < s->n; i++)
            s->acc[i] += tr->delta[i];
    }
    loco_outer_step(s->theta, s->acc, (float)c->obj.trainers, s->m, c->outer_lr, c->momentum, c->nesterov, s->theta,
                    s->n);
}

static void sim_free(sim *s)
{
    for (unsigned t = 0; s->tr && t < s->cfg->obj.trainers; t++) {
        sim_trainer *tr = &s->tr[t];
        free(tr->local);
        free(tr->g);
        free(tr->res);
        free(tr->e);
        free(tr->delta);
        free(tr->w16);
        free(tr->adam.m);
        free(tr->adam.v);
        free(tr->idx);
        free(tr->val);
    }
    free(s->tr);
    for (unsigned t = 0; t < s->cfg->obj.trainers; t++) {
        if (s->pubs)
            free((void *)s->pubs[t]);
        if (s->outs)
            free(s->outs[t]);
    }
    free(s->dir);
    free(s->state);
    free(s->pubs);
    free(s->outs);
    free(s->theta);
    free(s->m);
    free(s->acc);
    free(s->mark);
    free(s->uidx);
    free(s->hidx);
    free(s->uval);
    free(s->hval);
}

/* One whole run (LoCo or dense) from theta_0; the final loss into *loss, per-round losses into losses[]. */
/* dense: 0 PULSELoCo in memory, 1 dense DiLoCo, 2 PULSELoCo through the store (store_bytes out). */
static int sim_pass(const loco_sim_cfg *c, const loco_objective *obj, int dense, double *losses, double *losses16,
                    double *sent, double *bytes, double *store_bytes, double *store_down, float *theta_out,
                    double rg[2])
{
    sim s = { .cfg = c, .obj = obj, .kt = pulse_kernels_get(), .n = (size_t)c->obj.rows * c->obj.cols, .dense = dense };
    int r = 0;
    s.theta = malloc(s.n * 4);
    s.m = calloc(s.n, 4);
    s.acc = malloc(s.n * 4);
    s.tr = calloc(c->obj.trainers, sizeof *s.tr);
    if (!s.theta || !s.m || !s.acc || !s.tr)
        r = pulse_fail(PULSE_ERR_NOMEM, "simulation");
    if (!r && c->reduce_gate && dense == 0) {
        s.mark = calloc(s.n, 1);
        s.uidx = malloc((size_t)c->shard_elems * 4);
        s.hidx = malloc((size_t)c->shard_elems * 4);
        s.uval = malloc((size_t)c->shard_elems * 4);
        s.hval = malloc((size_t)c->shard_elems * 4);
        if (!s.mark || !s.uidx || !s.hidx || !s.uval || !s.hval)
            r = pulse_fail(PULSE_ERR_NOMEM, "simulation");
    }
    for (unsigned t = 0; !r && t < c->obj.trainers; t++) {
        sim_trainer *tr = &s.tr[t];
        tr->local = malloc(s.n * 4);
        tr->g = malloc(s.n * 4);
        tr->res = malloc((size_t)c->obj.samples * c->obj.rows * 4);
        tr->e = calloc(s.n, 4);
        tr->delta = malloc(s.n * 4);
        tr->w16 = malloc(s.n * 4);
        tr->adam.m = calloc(s.n, 4);
        tr->adam.v = calloc(s.n, 4);
        tr->idx = malloc((size_t)c->shard_elems * 4);
        tr->val = malloc((size_t)c->shard_elems * 4);
        if (!tr->local || !tr->g || !tr->res || !tr->e || !tr->delta || !tr->w16 || !tr->adam.m || !tr->adam.v || !tr->idx ||
            !tr->val)
            r = pulse_fail(PULSE_ERR_NOMEM, "simulation trainer");
    }
    if (!r)
        memcpy(s.theta, obj->w0, s.n * 4);
    if (!r && dense == 2)
        r = store_setup(&s);
    for (unsigned round = 0; !r && round < c->rounds; round++) {
        s.round = round;
        r = pulse_parallel_for(c->obj.trainers, c->threads, inner_steps, &s);
        if (!r && dense == 2)
            r = store_round(&s);
        else if (!r && dense)
            dense_round(&s);
        else if (!r)
            r = loco_round(&s, &sent[round], &bytes[round]);
        if (!r) {
            losses[round] = loco_objective_loss(obj, s.theta);
            /* ... and of theta's BF16 rounding: the model as BF16 inference runs it */
            for (size_t i = 0; i < s.n; i++)
                s.acc[i] = loco_bf16_round(s.theta[i]);
            losses16[round] = loco_objective_loss(obj, s.acc);
            if (theta_out)   /* this round's theta_{r+1}: the store pass is compared with it */
                memcpy(theta_out + (size_t)round * s.n, s.theta, s.n * 4);
        }
    }
    if (store_bytes)
        *store_bytes = s.store_bytes;
    if (store_down) {
        store_down[0] = s.store_down;
        store_down[1] = s.store_down_max;
    }
    if (rg) {
        rg[0] = s.rg_pub;
        rg[1] = s.rg_held;
    }
    sim_free(&s);
    return r;
}

int loco_sim_run(const loco_sim_cfg *c, loco_sim_result *out)
{
    memset(out, 0, sizeof *out);
    if (c->rounds == 0 || c->rounds > 100000 || c->inner_steps == 0 || c->shard_elems == 0 ||
        c->shard_elems > LOCO_SHARD_MAX_ELEMS || c->view < 0 || c->view >= PULSE_VIEW_COUNT)
        return pulse_fail(PULSE_ERR_INVALID, "simulation: rounds, inner steps, shard size or view out of range");
    if (c->reduce_gate && (c->momentum != 0.0f || !(c->outer_lr > 0.0f)))
        return pulse_fail(PULSE_ERR_INVALID, "simulation: --reduce-gate needs outer momentum 0 and an outer lr above 0");
    loco_objective obj;
    int r = loco_objective_make(&obj, &c->obj);
    if (r)
        return r;
    double *lo = calloc(c->rounds, sizeof *lo), *ld = calloc(c->rounds, sizeof *ld);
    double *lo16 = calloc(c->rounds, sizeof *lo16), *ld16 = calloc(c->rounds, sizeof *ld16);
    double *sent = calloc(c->rounds, sizeof *sent), *bytes = calloc(c->rounds, sizeof *bytes);
    double *unused = calloc(c->rounds, sizeof *unused);
    if (!lo || !ld || !lo16 || !ld16 || !sent || !bytes || !unused)
        r = pulse_fail(PULSE_ERR_NOMEM, "losses");
    size_t n = (size_t)c->obj.rows * c->obj.cols;
    float *th_mem = NULL, *th_store = NULL;
    if (!r && c->store_dir) {
        th_mem = malloc((size_t)c->rounds * n * 4);
        th_store = malloc((size_t)c->rounds * n * 4);
        if (!th_mem || !th_store)
            r = pulse_fail(PULSE_ERR_NOMEM, "thetas of %u rounds", c->rounds);
    }
    double rg[2] = { 0, 0 };
    if (!r)
        r = sim_pass(c, &obj, 0, lo, lo16, sent, bytes, NULL, NULL, th_mem, rg);
    if (!r) {
        out->rg_published_per_round = rg[0] / c->rounds;
        out->rg_withheld_per_round = rg[1] / c->rounds;
    }
    if (!r) {   /* dense DiLoCo: no gate anywhere */
        loco_sim_cfg d = *c;
        d.reduce_gate = 0;
        r = sim_pass(&d, &obj, 1, ld, ld16, unused, unused, NULL, NULL, NULL, NULL);
    }
    if (!r && c->store_dir) {
        double sb = 0, down[2] = { 0, 0 };
        r = sim_pass(c, &obj, 2, unused, unused, unused, unused, &sb, down, th_store, NULL);
        if (!r) {
            out->store_ran = 1;
            out->store_same = memcmp(th_mem, th_store, (size_t)c->rounds * n * 4) == 0;
            out->store_shard_bytes_per_round = sb / ((double)c->rounds * c->obj.trainers);
            out->store_down_per_round = down[0] / ((double)c->rounds * c->obj.trainers);
            out->store_down_max = down[1];
        }
    }
    free(th_mem);
    free(th_store);
    if (!r) {
        double per = (double)c->rounds * c->obj.trainers;
        out->loss0 = loco_objective_loss(&obj, obj.w0);
        float *w16 = malloc(n * 4);
        if (w16) {
            for (size_t i = 0; i < n; i++)
                w16[i] = loco_bf16_round(obj.w0[i]);
            out->loss16_0 = loco_objective_loss(&obj, w16);
            free(w16);
        }
        out->loss_loco = lo[c->rounds - 1];
        out->loss_dense = ld[c->rounds - 1];
        out->loss16_loco = lo16[c->rounds - 1];
        out->loss16_dense = ld16[c->rounds - 1];
        for (unsigned i = 0; i < c->rounds; i++) {
            out->sent_per_round += sent[i] / per;
            out->shard_bytes_per_round += bytes[i] / per;
        }
        out->dense_bytes_per_round = 4.0 * (double)n;
        if (!c->quiet) {
            /* per trainer: entries sent, their share of the parameters, shard bytes, bytes per entry */
            printf("%6s %13s %13s %9s %13s %13s %9s %9s %8s %11s %8s\n", "round", "loss-loco", "loss-diloco",
                   "loco/dil", "bf16-loco", "bf16-diloco", "loco/dil", "sent", "dense%", "shard-bytes", "B/entry");
            printf("%6s %13.6e %13.6e %9s %13.6e %13.6e\n", "init", out->loss0, out->loss0, "", out->loss16_0,
                   out->loss16_0);
            for (unsigned i = 0; i < c->rounds; i++) {
                double k = sent[i] / c->obj.trainers, b = bytes[i] / c->obj.trainers;
                printf("%6u %13.6e %13.6e %9.4f %13.6e %13.6e %9.4f %9.0f %8.3f %11.0f %8.2f\n", i, lo[i], ld[i],
                       lo[i] / ld[i], lo16[i], ld16[i], lo16[i] / ld16[i], k, 100.0 * k / (double)n, b,
                       k > 0 ? b / k : 0.0);
            }
        }
    }
    free(lo);
    free(ld);
    free(lo16);
    free(ld16);
    free(sent);
    free(bytes);
    free(unused);
    loco_objective_free(&obj);
    return r;
}
