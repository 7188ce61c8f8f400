/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of context-coded patches (format 5) in the library's read paths: verify, apply, sparse updates with and without the base, pieces of whole rows, sliced patches; each against the same step coded without context, for a BF16 and an F16 matrix. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "check.h"

#define ROWS 256
#define COLS 1024
#define N (ROWS * COLS)
#define CHUNK 65536   /* 64 rows a chunk, with enough changes that the diff keeps the context coding */
#define NF 700

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double gauss(void)
{
    double u = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0, v = (double)(rnd() >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static uint16_t bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float unbf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* x as F16, rounded to nearest even (subnormals kept; |x| here is far below F16's range). */
static uint16_t f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u, m = (u & 0x7FFFFFu) | 0x800000u;
    int e = (int)((u >> 23) & 0xFFu) - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7C00u);
    if (e < -10 || (u & 0x7FFFFFFFu) == 0)
        return (uint16_t)sign;
    unsigned sh = e > 0 ? 13u : (unsigned)(14 - e);
    uint32_t q = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    /* a normal's implicit bit lands on the exponent's lowest bit: add (e - 1) above it */
    return (uint16_t)(sign | (e > 0 ? ((uint32_t)(e - 1) << 10) + q : q));
}

static float unf16(uint16_t h)
{
    unsigned e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    float v = e ? ldexpf((float)(m | 0x400u), (int)e - 25) : ldexpf((float)m, -24);
    return (h & 0x8000u) ? -v : v;
}

/* The matrix's dtype in this run: "BF16" or "F16". */
static const char *dtype = "BF16";

static pulse_ckpt *wrap(uint16_t *w, float *f, int flags)
{
    pulse_mem_tensor mt[2];
    memset(mt, 0, sizeof mt);
    mt[0] = (pulse_mem_tensor){ .name = "a.w", .dtype_name = dtype, .ndim = 2, .shape = { ROWS, COLS }, .data = w,
                                .nbytes = N * 2 };
    mt[1] = (pulse_mem_tensor){ .name = "b.f", .dtype_name = "F32", .ndim = 1, .shape = { NF }, .data = f,
                                .nbytes = NF * 4 };
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c, mt, 2, flags));
    return c;
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len);
    CHECK(fread(b, 1, *len, f) == *len);
    fclose(f);
    return b;
}

/* Tensor i's updates of p against base (may be NULL): index, values, deltas; the return code. */
static int updates(const pulse_patch *p, size_t i, const pulse_ckpt *base, int64_t *idx, uint16_t *val, uint16_t *d)
{
    return pulse_patch_tensor_updates(p, i, base, 2, idx, val, d);
}

static void run(void)
{
    printf("-- a %s matrix\n", dtype);
    char dir[] = "/tmp/pulse-ctxpaths-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    /* One training step of a matrix whose rows have different scales (so the exponent bands
     * differ in how often they change): w += lr * sign-ish noise, rounded to the dtype (F16's
     * cells are 8x finer: a step 10x smaller changes a like share of them). */
    static uint16_t w0[N], w1[N], work[N];
    static float f0[NF], f1[NF];
    const int half = !strcmp(dtype, "F16");
    for (size_t i = 0; i < N; i++) {
        double scale = 0.002 * (double)(1 + (i / COLS) % 8);
        float x = (float)(scale * gauss());
        w0[i] = half ? f16(x) : bf16(x);
        w1[i] = half ? f16(unf16(w0[i]) + (float)(1e-5 * gauss())) : bf16(unbf16(w0[i]) + (float)(1e-4 * gauss()));
    }
    w1[5] = (uint16_t)(w0[5] + 300);   /* a large difference: an escape */
    for (size_t i = 0; i < NF; i++)
        f1[i] = f0[i] = (float)i * 0.5f;
    f1[9] = -1.0f;
    pulse_ckpt *old = wrap(w0, f0, PULSE_CKPT_READ), *new_ = wrap(w1, f1, PULSE_CKPT_READ);
    char p4path[300], p5path[300];
    snprintf(p4path, sizeof p4path, "%s/p4.patch", dir);
    snprintf(p5path, sizeof p5path, "%s/p5.patch", dir);
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.chunk_elems = CHUNK;
    CHECK_OK(pulse_patch_diff(old, new_, &o, p4path));
    o.context = 1;
    CHECK_OK(pulse_patch_diff(old, new_, &o, p5path));
    size_t len4 = 0, len5 = 0;
    uint8_t *b4 = read_all(p4path, &len4), *b5 = read_all(p5path, &len5);
    pulse_patch *p4 = NULL, *p5 = NULL;
    CHECK_OK(pulse_patch_open_mem(&p4, b4, len4));
    CHECK_OK(pulse_patch_open_mem(&p5, b5, len5));
    CHECK_EQ_INT(pulse_patch_version(p4), PULSE_PATCH_VERSION);
    CHECK_EQ_INT(pulse_patch_version(p5), PULSE_PATCH_VERSION_CONTEXT);
    const uint64_t changes = pulse_patch_tensor_changes(p4, 0);
    CHECK(changes > N / 4 && changes < N);
    CHECK_EQ_INT(pulse_patch_tensor_changes(p5, 0), changes);

    /* Verify without the weights (the checks that need no base), and with them. */
    CHECK_OK(pulse_patch_verify(p5, NULL, 2));
    CHECK_OK(pulse_patch_verify(p5, old, 2));

    /* Sparse updates: with the base, exactly the format-4 patch's, positions ascending; without
     * it the matrix is refused by name, the F32 one (not context-coded) still given. */
    int64_t *i4 = malloc(changes * sizeof *i4), *i5 = malloc(changes * sizeof *i5);
    uint16_t *v4 = malloc(changes * 2), *v5 = malloc(changes * 2), *d4 = malloc(changes * 2), *d5 = malloc(changes * 2);
    CHECK_OK(updates(p4, 0, old, i4, v4, d4));
    CHECK_OK(updates(p5, 0, old, i5, v5, d5));
    CHECK(memcmp(i4, i5, changes * sizeof *i4) == 0);
    CHECK(memcmp(v4, v5, changes * 2) == 0);
    CHECK(memcmp(d4, d5, changes * 2) == 0);
    CHECK_ERR(updates(p5, 0, NULL, i5, NULL, NULL), PULSE_ERR_UNSUPPORTED);
    CHECK(strstr(pulse_last_error(), "a.w") && strstr(pulse_last_error(), "base weights"));
    int64_t fi[4];
    CHECK_EQ_INT(pulse_patch_tensor_changes(p5, 1), 1);
    CHECK_OK(pulse_patch_tensor_updates(p5, 1, NULL, 1, fi, NULL, NULL));
    CHECK_EQ_INT(fi[0], 9);

    /* Apply to a writable copy of the base: bit for bit the new weights. */
    static uint16_t t[N];
    static float tf[NF];
    memcpy(t, w0, sizeof t);
    memcpy(tf, f0, sizeof tf);
    pulse_ckpt *target = wrap(t, tf, PULSE_CKPT_READ | PULSE_CKPT_WRITE);
    CHECK_OK(pulse_patch_apply(p5, target, 2));
    CHECK(memcmp(t, w1, sizeof t) == 0 && memcmp(tf, f1, sizeof tf) == 0);
    /* Again on the result: the base id differs, refused, nothing written. */
    CHECK_ERR(pulse_patch_apply(p5, target, 2), PULSE_ERR_MISMATCH);
    CHECK(memcmp(t, w1, sizeof t) == 0);
    pulse_ckpt_close(&target);

    /* A piece of whole rows holding whole chunks (rows 64..192: chunks 1 and 2) decodes against
     * the rows it holds; one that cuts a chunk (rows 32..192) cannot, and is refused by name. */
    pulse_piece pc = { .rows = ROWS, .cols = COLS, .dim = 0, .start = 64, .stop = 192, .param_cols = COLS, .at = 0 };
    memcpy(work, w0 + 64 * COLS, 128 * COLS * 2);
    uint64_t written = 0;
    CHECK_OK(pulse_patch_apply_piece(p5, 0, &pc, work, 128 * COLS, 2, &written));
    CHECK(memcmp(work, w1 + 64 * COLS, 128 * COLS * 2) == 0);
    CHECK(written > 0);
    pc.start = 32;
    memcpy(work, w0 + 32 * COLS, 160 * COLS * 2);
    CHECK_ERR(pulse_patch_apply_piece(p5, 0, &pc, work, 160 * COLS, 1, NULL), PULSE_ERR_UNSUPPORTED);
    CHECK(strstr(pulse_last_error(), "base weights") != NULL);

    /* Sliced: the head and every chunk supplied verifies (without the weights). */
    pulse_patch *sp = NULL;
    const uint64_t head = pulse_patch_head_bytes(p5);
    CHECK_OK(pulse_patch_open_head(&sp, b5, (size_t)head, len5));
    CHECK_OK(pulse_patch_want(sp, 0, 0, N));
    pulse_patch_range rg[64];
    size_t nr = pulse_patch_missing(sp, 0, rg, 64);
    CHECK(nr > 0 && nr <= 64);
    for (size_t k = 0; k < nr && k < 64; k++)
        CHECK_OK(pulse_patch_supply(sp, rg[k].offset, b5 + rg[k].offset, (size_t)rg[k].length));
    CHECK_OK(pulse_patch_verify(sp, NULL, 2));
    CHECK_OK(updates(sp, 0, old, i5, NULL, d5));
    CHECK(memcmp(i4, i5, changes * sizeof *i4) == 0 && memcmp(d4, d5, changes * 2) == 0);
    pulse_patch_close(&sp);

    /* The context pays here too: the matrix's streams are smaller than format 4's. */
    pulse_patch_tensor_info t4, t5;
    CHECK_OK(pulse_patch_tensor_info_get(p4, 0, 0, &t4));
    CHECK_OK(pulse_patch_tensor_info_get(p5, 0, 0, &t5));
    CHECK(t5.pos_bytes + t5.val_bytes < t4.pos_bytes + t4.val_bytes);
    printf("%s streams: %llu bytes context-coded, %llu in format 4\n", dtype,
           (unsigned long long)(t5.pos_bytes + t5.val_bytes), (unsigned long long)(t4.pos_bytes + t4.val_bytes));

    free(i4); free(i5); free(v4); free(v5); free(d4); free(d5);
    pulse_patch_close(&p4);
    pulse_patch_close(&p5);
    free(b4);
    free(b5);
    pulse_ckpt_close(&old);
    pulse_ckpt_close(&new_);
    unlink(p4path);
    unlink(p5path);
    rmdir(dir);
}

int main(void)
{
    run();
    dtype = "F16";
    run();
    return check_done("test_ctxpaths");
}
