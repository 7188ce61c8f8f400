/* SPDX-License-Identifier: Apache-2.0 */
/* The synthetic RL trainer: Llama-shaped config, counter-keyed random streams, Adam, BF16 output. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "pulseweights/checkpoint.h"
#include "tools/synth/round.h"
#include "tools/synth/synth.h"

/* Elements per work item. Results depend on it (the random streams are keyed by block), so
 * it is a constant of the format of the trajectory, not a tuning knob. */
#define BLOCK 16384u

#define ADAM_BETA1 0.9
#define ADAM_BETA2 0.999
#define ADAM_EPS 1e-8

void synth_opts_default(synth_opts *o)
{
    o->params = 100000000u;
    o->seed = 1;
    o->lr = 3e-6;
    o->rho = 0.9;
    o->spread = 0.0;
    o->fp16 = 0;
    o->threads = 0;
}

/* --- Model config ------------------------------------------------------------------ */

/* Rungs of Llama-like widths; a target size picks the first rung it fits under and the
 * layer count is fitted to it. MLP width ~ 8/3 hidden rounded as Llama does. */
static const struct rung {
    uint64_t upto;
    unsigned hidden, intermediate, vocab;
} rungs[] = {
    { 400000u, 64, 176, 512 },
    { 4000000u, 128, 352, 2048 },
    { 48000000u, 384, 1024, 8192 },
    { 400000000u, 768, 2048, 32000 },
    { 4000000000u, 2048, 5504, 32000 },
    { UINT64_MAX, 4096, 11008, 32000 },
};

static void add_tensor(synth_model *m, const char *name, uint64_t rows, uint64_t cols,
                       float mean, float std)
{
    synth_tensor *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->nelems = cols ? rows * cols : rows;
    t->init_mean = mean;
    t->init_std = std;
    m->params += t->nelems;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Seed of one random stream: every (tensor, block, step) has its own, so the result does not
 * depend on which thread computes what, nor in which order. */
static uint64_t stream_key(uint64_t seed, uint64_t tensor, uint64_t block, uint64_t step)
{
    const uint64_t golden = 0x9e3779b97f4a7c15ull;
    uint64_t k = mix64(seed + golden);
    k = mix64(k + golden * (tensor + 1));
    k = mix64(k + golden * (block + 1));
    return mix64(k + golden * (step + 1));
}

int synth_model_init(synth_model *m, const synth_opts *o)
{
    memset(m, 0, sizeof *m);
    if (o->params < SYNTH_MIN_PARAMS || o->params > SYNTH_MAX_PARAMS)
        return pulse_fail(PULSE_ERR_INVALID, "--params %llu is outside [%u, %llu]",
                          (unsigned long long)o->params, SYNTH_MIN_PARAMS,
                          (unsigned long long)SYNTH_MAX_PARAMS);
    const struct rung *r = rungs;
    while (o->params > r->upto)
        r++;
    uint64_t h = r->hidden, f = r->intermediate, v = r->vocab;
    uint64_t fixed = 2 * v * h + h;                 /* embed, lm_head, final norm */
    uint64_t per_layer = 4 * h * h + 3 * h * f + 2 * h;
    uint64_t layers = 1;
    if (o->params > fixed)
        layers = (o->params - fixed + per_layer / 2) / per_layer;
    if (layers < 1)
        layers = 1;
    if (layers > 4096)
        layers = 4096;
    m->vocab = (unsigned)v;
    m->hidden = (unsigned)h;
    m->intermediate = (unsigned)f;
    m->layers = (unsigned)layers;
    m->tensors = calloc(3 + 9 * layers, sizeof *m->tensors);
    if (!m->tensors)
        return pulse_fail(PULSE_ERR_NOMEM, "synth: %llu tensors", (unsigned long long)(3 + 9 * layers));

    /* std ~ 1/sqrt(fan_in) for every matrix (fan_in = the input width, the second dim);
     * RMSNorm weights 1 + small noise, as a trained model's are. */
    float sh = (float)(1.0 / sqrt((double)h)), sf = (float)(1.0 / sqrt((double)f));
    char name[80];
    add_tensor(m, "model.embed_tokens.weight", v, h, 0.0f, sh);
    static const char *const attn[] = { "q_proj", "k_proj", "v_proj", "o_proj" };
    for (uint64_t l = 0; l < layers; l++) {
        snprintf(name, sizeof name, "model.layers.%llu.input_layernorm.weight", (unsigned long long)l);
        add_tensor(m, name, h, 0, 1.0f, 0.02f);
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "model.layers.%llu.self_attn.%s.weight", (unsigned long long)l, attn[i]);
            add_tensor(m, name, h, h, 0.0f, sh);
        }
        snprintf(name, sizeof name, "model.layers.%llu.post_attention_layernorm.weight", (unsigned long long)l);
        add_tensor(m, name, h, 0, 1.0f, 0.02f);
        snprintf(name, sizeof name, "model.layers.%llu.mlp.gate_proj.weight", (unsigned long long)l);
        add_tensor(m, name, f, h, 0.0f, sh);
        snprintf(name, sizeof name, "model.layers.%llu.mlp.up_proj.weight", (unsigned long long)l);
        add_tensor(m, name, f, h, 0.0f, sh);
        snprintf(name, sizeof name, "model.layers.%llu.mlp.down_proj.weight", (unsigned long long)l);
        add_tensor(m, name, h, f, 0.0f, sf);
    }
    add_tensor(m, "model.norm.weight", h, 0, 1.0f, 0.02f);
    add_tensor(m, "lm_head.weight", v, h, 0.0f, sh);

    synth_grad_scales(m, o->seed);
    return 0;
}

/* Log-uniform over 1e-4..1e-2: far above Adam's eps, so only their ratio to the running
 * moments matters, as in real training. */
void synth_grad_scales(synth_model *m, uint64_t seed)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        double u = (double)(mix64(seed ^ mix64(i + 0x5157)) >> 11) * 0x1p-53;
        m->tensors[i].grad_scale = (float)pow(10.0, -4.0 + 2.0 * u);
    }
}

void synth_model_free(synth_model *m)
{
    free(m->tensors);
    pulse_ckpt_close(&m->from);
    memset(m, 0, sizeof *m);
}

/* One element of a source tensor as FP32 (the master weight it starts from). */
static float src_value(const synth_tensor *t, size_t i)
{
    if (t->src_dtype == PULSE_DT_F32) {
        float f;
        memcpy(&f, (const uint8_t *)t->src + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)t->src + 2 * i, 2);
    if (t->src_dtype == PULSE_DT_BF16) {
        uint32_t b = (uint32_t)h << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    /* F16: sign, 5-bit exponent, 10-bit mantissa */
    unsigned e = (h >> 10) & 0x1F, mt = h & 0x3FF;
    float v = e == 0 ? ldexpf((float)mt, -24)
              : e == 31 ? (mt ? NAN : INFINITY)
                        : ldexpf((float)(1024 | mt), (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

int synth_step_path(char *buf, size_t size, const char *dir, uint64_t k)
{
    int n = snprintf(buf, size, "%s/step-%06llu.safetensors", dir, (unsigned long long)k);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* --- Random numbers ---------------------------------------------------------------- */

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64 as its authors recommend. */
typedef struct rng {
    uint64_t s[4];
} rng;

static void rng_seed(rng *r, uint64_t key)
{
    for (int i = 0; i < 4; i++) {
        key += 0x9e3779b97f4a7c15ull;
        r->s[i] = mix64(key);
    }
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Standard normals by Box-Muller: one 64-bit draw gives two 24-bit uniforms and two normals.
 * u1 is in (0, 1] so the logarithm is finite. */
static void fill_normal(rng *r, float *out, size_t n)
{
    const float two_pi = 6.28318530717958647692f;
    for (size_t i = 0; i < n; i += 2) {
        uint64_t x = rng_next(r);
        float u1 = (float)((x >> 40) + 1) * 0x1p-24f;
        float u2 = (float)((x >> 16) & 0xffffffu) * 0x1p-24f;
        float rad = sqrtf(-2.0f * logf(u1));
        out[i] = rad * cosf(two_pi * u2);
        if (i + 1 < n)
            out[i + 1] = rad * sinf(two_pi * u2);
    }
}

/* --- The trajectory ---------------------------------------------------------------- */

struct item {
    uint32_t tensor;
    uint64_t lo, len;          /* element range of the block within its tensor */
    uint64_t block;
};

struct run {
    const synth_model *m;
    const synth_opts *o;
    struct item *items;
    uint64_t *offsets;         /* element offset of each tensor in the full state arrays */
    float *state;              /* NULL within one window; else w, m, v, g for all params */
    uint64_t s0, s1;           /* this window: state after s0 in, steps s0+1..s1 done */
    uint16_t **out;            /* [(k - s0) * ntensors + t]: where step k of tensor t goes, or NULL */
    _Atomic uint64_t *changed; /* [k] */
};

static int run_block(void *ctx, size_t i)
{
    struct run *r = ctx;
    const struct item *it = &r->items[i];
    const synth_tensor *t = &r->m->tensors[it->tensor];
    size_t n = (size_t)it->len;
    size_t nt = r->m->ntensors;

    /* Scratch: the state (when not kept globally), the noise, the previous BF16 view. */
    size_t own = r->state ? 0 : 4;
    float *buf = malloc(((own + 1) * sizeof(float) + 2 * sizeof(uint16_t)) * BLOCK);
    if (!buf)
        return pulse_fail(PULSE_ERR_NOMEM, "synth: scratch of a block");
    float *w, *mo, *ve, *g;
    if (r->state) {
        uint64_t off = r->offsets[it->tensor] + it->lo, p = r->m->params;
        w = r->state + off;
        mo = r->state + p + off;
        ve = r->state + 2 * p + off;
        g = r->state + 3 * p + off;
    } else {
        w = buf;
        mo = buf + BLOCK;
        ve = buf + 2 * BLOCK;
        g = buf + 3 * BLOCK;
    }
    float *noise = buf + own * BLOCK;
    uint16_t *prev = (uint16_t *)(noise + BLOCK), *cur = prev + BLOCK;
    rng rg;

    if (r->s0 == 0) {
        rng_seed(&rg, stream_key(r->o->seed, it->tensor, it->block, 0));
        if (t->src) {
            for (size_t j = 0; j < n; j++)
                w[j] = src_value(t, it->lo + j);
        } else if (r->o->spread > 0 && t->cols) {
            /* trained conv and vision models spread a matrix's magnitudes over many binades:
             * |w| = std 2^(-spread u), u uniform, with a random sign */
            const double sp = r->o->spread;
            for (size_t j = 0; j < n; j++) {
                uint64_t x = rng_next(&rg);
                double u = (double)(x >> 11) * 0x1p-53;
                float mag = (float)((double)t->init_std * exp2(-sp * u));
                w[j] = (x & 1) ? -mag : mag;
            }
        } else {
            fill_normal(&rg, w, n);
            for (size_t j = 0; j < n; j++)
                w[j] = t->init_mean + t->init_std * w[j];
        }
        for (size_t j = 0; j < n; j++)
            mo[j] = ve[j] = g[j] = 0.0f;
    }
    for (size_t j = 0; j < n; j++)
        prev[j] = synth_view_rne(r->o->fp16, w[j]);
    if (r->s0 == 0 && r->out[it->tensor])
        memcpy(r->out[it->tensor] + it->lo, prev, n * sizeof *prev);

    const float rho = (float)r->o->rho, fresh = (float)sqrt(1.0 - r->o->rho * r->o->rho);
    const float b1 = (float)ADAM_BETA1, b2 = (float)ADAM_BETA2, scale = t->grad_scale;
    for (uint64_t k = r->s0 + 1; k <= r->s1; k++) {
        /* AR(1) gradients: g_k = rho g_{k-1} + sqrt(1 - rho^2) noise_k (g_1 = noise_1), so
         * each has unit variance and consecutive ones correlate by rho, as a slowly turning
         * loss landscape would give. */
        rng_seed(&rg, stream_key(r->o->seed, it->tensor, it->block, k));
        fill_normal(&rg, noise, n);
        const float c1 = (float)(1.0 / (1.0 - pow(ADAM_BETA1, (double)k)));
        const float c2 = (float)(1.0 / (1.0 - pow(ADAM_BETA2, (double)k)));
        const float lr = (float)r->o->lr, eps = (float)ADAM_EPS;
        for (size_t j = 0; j < n; j++) {
            float gj = k == 1 ? noise[j] : rho * g[j] + fresh * noise[j];
            g[j] = gj;
            float gs = gj * scale;
            mo[j] = b1 * mo[j] + (1.0f - b1) * gs;
            ve[j] = b2 * ve[j] + (1.0f - b2) * gs * gs;
            w[j] -= lr * (mo[j] * c1) / (sqrtf(ve[j] * c2) + eps);
        }
        uint64_t moved = 0;
        for (size_t j = 0; j < n; j++) {
            cur[j] = synth_view_rne(r->o->fp16, w[j]);
            moved += cur[j] != prev[j];
        }
        atomic_fetch_add_explicit(&r->changed[k], moved, memory_order_relaxed);
        uint16_t *dst = r->out[(k - r->s0) * nt + it->tensor];
        if (dst)
            memcpy(dst + it->lo, cur, n * sizeof *cur);
        uint16_t *swap = prev;
        prev = cur;
        cur = swap;
    }
    free(buf);
    return 0;
}

static int build_items(const synth_model *m, struct item **out, size_t *count, uint64_t **offsets)
{
    size_t n = 0;
    for (size_t t = 0; t < m->ntensors; t++)
        n += (size_t)((m->tensors[t].nelems + BLOCK - 1) / BLOCK);
    struct item *items = calloc(n, sizeof *items);
    uint64_t *off = calloc(m->ntensors, sizeof *off);
    if (!items || !off) {
        free(items);
        free(off);
        return pulse_fail(PULSE_ERR_NOMEM, "synth: %zu work items", n);
    }
    size_t i = 0;
    uint64_t base = 0;
    for (size_t t = 0; t < m->ntensors; t++) {
        off[t] = base;
        base += m->tensors[t].nelems;
        for (uint64_t lo = 0, b = 0; lo < m->tensors[t].nelems; lo += BLOCK, b++) {
            uint64_t left = m->tensors[t].nelems - lo;
            items[i++] = (struct item){ (uint32_t)t, lo, left < BLOCK ? left : BLOCK, b };
        }
    }
    *out = items;
    *count = n;
    *offsets = off;
    return 0;
}

static int create_checkpoint(const synth_model *m, const synth_opts *o, const char *path,
                             pulse_ckpt **out, uint16_t **data)
{
    pulse_tensor_spec *specs = calloc(m->ntensors, sizeof *specs);
    if (!specs)
        return pulse_fail(PULSE_ERR_NOMEM, "synth: tensor specs");
    for (size_t t = 0; t < m->ntensors; t++) {
        const synth_tensor *st = &m->tensors[t];
        specs[t].name = st->name;
        specs[t].dtype_name = o->fp16 ? "F16" : "BF16";
        if (st->shaped) {
            specs[t].ndim = st->ndim;
            memcpy(specs[t].shape, st->shape, sizeof st->shape);
        } else {
            specs[t].ndim = st->cols ? 2 : 1;
            specs[t].shape[0] = st->rows;
            specs[t].shape[1] = st->cols;
        }
    }
    /* The metadata is the same at every step, so a patched checkpoint is byte-identical
     * to the real next one, header included. */
    char meta[256];
    snprintf(meta, sizeof meta,
             "{\"format\":\"pt\",\"generator\":\"pulse synth\",\"seed\":\"%llu\",\"lr\":\"%g\"%s}",
             (unsigned long long)o->seed, o->lr, o->fp16 ? ",\"view\":\"fp16\"" : "");
    int err = pulse_ckpt_create(out, path, specs, m->ntensors, meta);
    free(specs);
    if (err < 0)
        return err;
    for (size_t t = 0; t < m->ntensors; t++) {
        const pulse_tensor *pt = pulse_ckpt_find(*out, m->tensors[t].name);
        if (!pt || pt->nbytes != m->tensors[t].nelems * 2) {
            pulse_ckpt_close(out);
            return pulse_fail(PULSE_ERR_FORMAT, "synth: %s: tensor missing in the created file",
                              m->tensors[t].name);
        }
        data[t] = (uint16_t *)pt->data;
    }
    return 0;
}

int synth_run(const synth_model *m, const synth_opts *o, uint64_t steps,
              const char *const *paths, uint64_t *changed)
{
    if (steps > SYNTH_MAX_STEPS)
        return pulse_fail(PULSE_ERR_INVALID, "synth: %llu steps is more than %u",
                          (unsigned long long)steps, SYNTH_MAX_STEPS);
    struct run r = { .m = m, .o = o };
    size_t nitems = 0, nt = m->ntensors;
    int err = build_items(m, &r.items, &nitems, &r.offsets);
    if (err < 0)
        return err;
    pulse_ckpt *ck[SYNTH_WINDOW + 1] = { 0 };
    r.out = calloc((size_t)(SYNTH_WINDOW + 1) * nt, sizeof *r.out);
    r.changed = calloc((size_t)steps + 1, sizeof *r.changed);
    if (!r.out || !r.changed) {
        err = pulse_fail(PULSE_ERR_NOMEM, "synth: output tables");
        goto out;
    }
    if (steps > SYNTH_WINDOW) {
        /* More windows than one: the state has to outlive each of them. */
        if (m->params > SIZE_MAX / 16 || !(r.state = malloc((size_t)m->params * 16))) {
            err = pulse_fail(PULSE_ERR_NOMEM, "synth: %llu bytes of trainer state for %llu steps",
                             (unsigned long long)m->params * 16, (unsigned long long)steps);
            goto out;
        }
    }
    for (uint64_t s0 = 0;;) {
        uint64_t s1 = steps - s0 > SYNTH_WINDOW ? s0 + SYNTH_WINDOW : steps;
        r.s0 = s0;
        r.s1 = s1;
        memset(r.out, 0, (size_t)(SYNTH_WINDOW + 1) * nt * sizeof *r.out);
        /* Slot 0 is step s0, written only in the first window (later it was written already). */
        for (uint64_t k = s0; k <= s1 && !err; k++)
            if (paths && paths[k] && (k > s0 || s0 == 0))
                err = create_checkpoint(m, o, paths[k], &ck[k - s0], r.out + (k - s0) * nt);
        if (!err)
            err = pulse_parallel_for(nitems, o->threads, run_block, &r);
        for (uint64_t k = s0; k <= s1; k++) {
            if (!ck[k - s0])
                continue;
            if (!err)
                err = pulse_ckpt_commit(ck[k - s0]);
            pulse_ckpt_close(&ck[k - s0]);   /* uncommitted: the temporary file goes */
        }
        if (err || s1 == steps)
            break;
        s0 = s1;
    }
    if (!err && changed) {
        changed[0] = 0;
        for (uint64_t k = 1; k <= steps; k++)
            changed[k] = atomic_load(&r.changed[k]);
    }
out:
    free(r.state);
    free(r.out);
    free((void *)r.changed);
    free(r.items);
    free(r.offsets);
    return err;
}
