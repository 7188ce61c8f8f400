/* SPDX-License-Identifier: Apache-2.0 */
/* Benchmark (not a test): the format 5 context coder's size against the order-0 floor and its encode and decode time per chunk, on two BF16 checkpoints or on a synthetic 2^20-element chunk. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pulseweights.h"
#include "node/patch/patch_ctxcode.h"

#define CHUNK (1u << 20)

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);   /* CPU time: the machine is shared */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint16_t bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

typedef struct chunk {
    const uint16_t *old, *neu;
    uint32_t n;
    size_t k;
} chunk;

static uint32_t gcnt[CHUNK + 1], zcnt[65536];

/* Order-0 entropy in bits of the chunk's gaps and z values. */
static double floor_bits(const chunk *c)
{
    uint32_t prev = UINT32_MAX;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->old[i] != c->neu[i]) {
            gcnt[i - prev - 1]++;
            uint16_t d = (uint16_t)(c->neu[i] - c->old[i]);
            zcnt[(uint16_t)((uint16_t)(d << 1) ^ (uint16_t)(0u - (d >> 15)))]++;
            prev = i;
        }
    double h = 0, k = (double)c->k;
    for (uint32_t i = 0; i <= c->n; i++)
        if (gcnt[i]) {
            h -= gcnt[i] * log2(gcnt[i] / k);
            gcnt[i] = 0;
        }
    for (uint32_t i = 0; i < 65536; i++)
        if (zcnt[i]) {
            h -= zcnt[i] * log2(zcnt[i] / k);
            zcnt[i] = 0;
        }
    return h;
}

/* Codes chunk c (k changes) REPS times: its streams' lengths, the best encode and decode CPU
 * times, and 1 with the error printed when it fails or does not round trip. */
static int code_chunk(const chunk *c, size_t ci, int reps, patch_ctx_scratch *S, uint8_t *out, uint32_t *idx,
                      uint16_t *z, uint32_t *pl, uint32_t *vl, double *be, double *bd)
{
    const size_t k = c->k;
    *be = *bd = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_s();
        if (patch_ctx_encode(S, PULSE_DT_BF16, c->old, c->neu, c->n, k, out, patch_ctx_bound(CHUNK, CHUNK), pl, vl)) {
            fprintf(stderr, "ctxcode_bench: encode: %s\n", pulse_last_error());
            return 1;
        }
        double t1 = cpu_s();
        if (patch_ctx_decode(S, PULSE_DT_BF16, c->old, c->n, out, *pl, out + *pl, *vl, k, idx, z, "bench", ci)) {
            fprintf(stderr, "ctxcode_bench: decode: %s\n", pulse_last_error());
            return 1;
        }
        double t2 = cpu_s();
        *be = t1 - t0 < *be ? t1 - t0 : *be;
        *bd = t2 - t1 < *bd ? t2 - t1 : *bd;
    }
    for (size_t j = 0; j < k; j++) {
        uint16_t d = (uint16_t)((z[j] >> 1) ^ (uint16_t)(0u - (z[j] & 1u)));
        if ((uint16_t)(c->old[idx[j]] + d) != c->neu[idx[j]]) {
            fprintf(stderr, "ctxcode_bench: chunk %zu does not round trip\n", ci);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* ctxcode_bench [OLD NEW] [REPEAT] */
    int reps = argc > 3 ? atoi(argv[3]) : argc == 2 ? atoi(argv[1]) : 5;
    if (reps < 1)
        reps = 1;
    chunk *ch = NULL;
    size_t nch = 0;
    pulse_ckpt *A = NULL, *B = NULL;
    uint16_t *syn = NULL;
    if (argc >= 3) {
        if (pulse_ckpt_open(&A, argv[1], PULSE_CKPT_READ) || pulse_ckpt_open(&B, argv[2], PULSE_CKPT_READ)) {
            fprintf(stderr, "ctxcode_bench: cannot open %s or %s: %s\n", argv[1], argv[2], pulse_last_error());
            return 1;
        }
        size_t cap = 0;
        for (size_t i = 0; i < pulse_ckpt_count(A) && i < pulse_ckpt_count(B); i++) {
            const pulse_tensor *ta = pulse_ckpt_tensor(A, i), *tb = pulse_ckpt_tensor(B, i);
            if (ta->dtype != PULSE_DT_BF16 || tb->dtype != PULSE_DT_BF16 || ta->nelems != tb->nelems ||
                strcmp(ta->name, tb->name))
                continue;
            for (uint64_t off = 0; off < ta->nelems; off += CHUNK) {
                if (nch == cap) {
                    cap = cap ? 2 * cap : 256;
                    ch = realloc(ch, cap * sizeof *ch);
                    if (!ch)
                        return 1;
                }
                uint32_t n = (uint32_t)(ta->nelems - off < CHUNK ? ta->nelems - off : CHUNK);
                ch[nch++] = (chunk){(const uint16_t *)ta->data + off, (const uint16_t *)tb->data + off, n, 0};
            }
        }
    } else {
        /* weights ~N(0, 0.02); the change probability doubles per binade down from the chunk's
         * largest (about 5 % of the elements in all), steps of +-1 ulp, larger in low binades */
        syn = malloc(4u * CHUNK);
        ch = malloc(sizeof *ch);
        if (!syn || !ch)
            return 1;
        for (uint32_t i = 0; i < CHUNK; i++) {
            double u = unif(), v = unif();
            float w = (float)(0.02 * sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
            uint16_t o = bf16(w), e = (o >> 7) & 0xFF;
            double p = 0.006 * pow(2.0, 121.0 - (double)e);
            uint16_t nw = o;
            if (unif() < p) {
                int d = e < 113 ? 1 + (int)(rnd() % 8) : 1;
                nw = (uint16_t)(o + (rnd() & 1 ? d : -d));
            }
            syn[i] = o;
            syn[CHUNK + i] = nw;
        }
        ch[0] = (chunk){syn, syn + CHUNK, CHUNK, 0};
        nch = 1;
    }
    patch_ctx_scratch *S = patch_ctx_scratch_new(CHUNK);
    uint8_t *out = malloc(patch_ctx_bound(CHUNK, CHUNK));
    uint32_t *idx = malloc(4u * CHUNK);
    uint16_t *z = malloc(2u * CHUNK);
    if (!S || !out || !idx || !z)
        return 1;
    uint64_t changes = 0, elems = 0, pos_b = 0, val_b = 0;
    double floor_b = 0, t_enc = 0, t_dec = 0;
    size_t coded = 0;
    for (size_t c = 0; c < nch; c++) {
        size_t k = 0;
        for (uint32_t i = 0; i < ch[c].n; i++)
            k += ch[c].old[i] != ch[c].neu[i];
        ch[c].k = k;
        elems += ch[c].n;
        if (!k)
            continue;
        coded++;
        changes += k;
        floor_b += floor_bits(&ch[c]);
        uint32_t pl = 0, vl = 0;
        double be, bd;
        if (code_chunk(&ch[c], c, reps, S, out, idx, z, &pl, &vl, &be, &bd))
            return 1;
        t_enc += be;
        t_dec += bd;
        pos_b += pl;
        val_b += vl;
    }
    double kc = (double)changes;
    printf("%zu chunks (%zu coded), %llu elements, %.3f %% changed\n", nch, coded, (unsigned long long)elems,
           100.0 * kc / (double)elems);
    printf("bits/change: positions %.3f + values %.3f = %.3f; order-0 floor %.3f (%.3fx)\n",
           8.0 * (double)pos_b / kc, 8.0 * (double)val_b / kc, 8.0 * (double)(pos_b + val_b) / kc,
           floor_b / kc, 8.0 * (double)(pos_b + val_b) / floor_b);
    double per = (double)elems / CHUNK;
    printf("per 2^20 elements (one thread, CPU time, best of %d): encode %.3f ms, decode %.3f ms\n", reps,
           1e3 * t_enc / per, 1e3 * t_dec / per);
    patch_ctx_scratch_free(S);
    free(out);
    free(idx);
    free(z);
    free(ch);
    free(syn);
    pulse_ckpt_close(&A);
    pulse_ckpt_close(&B);
    return 0;
}
