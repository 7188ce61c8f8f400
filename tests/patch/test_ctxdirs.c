/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the context coder's previous-direction coding: chunks of a trainer with momentum round trip exactly given the directions they were coded with, cost fewer value bytes than without them, and are refused by every reader that does not hold them, with the wrong ones, or damaged. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights.h"
#include "base/leb128.h"
#include "node/patch/patch_ctxcode.h"
#include "check.h"

#define CAP (1u << 18)

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* The 16-bit pattern of f in dt, round to nearest even (finite inputs of these tests only). */
static uint16_t to16(pulse_dtype dt, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dt == PULSE_DT_BF16)
        return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    /* F16 of |f| in [2^-14, 65504): the exponent rebased, 13 mantissa bits rounded off */
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a < 0x38800000u)
        return (uint16_t)sign;
    uint32_t m = a - 0x38000000u;
    return (uint16_t)(sign | ((m + 0x0FFFu + ((m >> 13) & 1u)) >> 13));
}

static patch_ctx_scratch *S;
static uint16_t *prev_, *old_, *neu_, *zz, *work;
static uint32_t *idx;
static uint8_t *dirs, *enc, *enc0;

/* Three checkpoints of a trainer whose steps keep their direction with probability keep (a
 * momentum), of size lr times 0.5-1.5 and, with wide set, weights over 16 binades. */
static size_t three_steps(pulse_dtype dt, uint32_t n, double lr, double keep, int wide)
{
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        double w = (unif() - 0.5) * 0.08;
        if (wide)
            w = (rnd() & 1 ? 1 : -1) * 0.05 * pow(2.0, -16.0 * unif());
        double dir = rnd() & 1 ? 1 : -1, x[3];
        for (int t = 0; t < 3; t++) {
            x[t] = w;
            if (unif() > keep)
                dir = -dir;
            w += dir * lr * (0.5 + unif());
        }
        prev_[i] = to16(dt, (float)x[0]);
        old_[i] = to16(dt, (float)x[1]);
        neu_[i] = to16(dt, (float)x[2]);
        k += old_[i] != neu_[i];
    }
    patch_ctx_dirs(prev_, old_, n, dirs);
    return k;
}

static uint16_t unzig(uint16_t z)
{
    return (uint16_t)((z >> 1) ^ (uint16_t)(0u - (z & 1u)));
}

/* 1 when the decoded changes turn old_ into neu_ exactly. */
static int rebuilds(uint32_t n, size_t k)
{
    memcpy(work, old_, (size_t)n * 2);
    for (size_t j = 0; j < k; j++) {
        if (idx[j] >= n || !zz[j])
            return 0;
        work[idx[j]] = (uint16_t)(work[idx[j]] + unzig(zz[j]));
    }
    return memcmp(work, neu_, (size_t)n * 2) == 0;
}

static int err_has(const char *a)
{
    int ok = strstr(pulse_last_error(), a) != NULL;
    if (!ok)
        fprintf(stderr, "error \"%s\" lacks \"%s\"\n", pulse_last_error(), a);
    return ok;
}

/* Bands of the position stream at pos whose values are in a value mode (a header's bit 7). */
static unsigned value_mode_bands(const uint8_t *pos)
{
    size_t at = 2;
    unsigned n = 0;
    for (int b = 0; b < 16; b++) {
        uint8_t h = pos[at++];
        n += h >> 7;
        if (h & 3u)
            for (int f = 0; f < 2; f++)
                while (pos[at++] & 0x80u) {
                }
    }
    return n;
}

/* A count table's length at val + *at, skipped. */
static void skip_counts(const uint8_t *val, size_t *at)
{
    uint32_t set = pulse_leb_get_trusted(val, at);
    for (int y = 0; y < 31 - __builtin_clz(set); y++)
        if (set >> y & 1u)
            pulse_leb_get_trusted(val, at);
}

/* How the value-mode bands of a chunk coded by direction (pos, its value stream at val) code
 * their direction bits: by[0] raw, by[1] falls, by[2] turns (the format's walk, nothing checked). */
static void direction_codings(const uint8_t *pos, const uint8_t *val, unsigned by[3])
{
    uint32_t c[16] = {0};
    uint8_t v[16] = {0};
    size_t at = 2;
    for (int b = 0; b < 16; b++) {
        uint8_t h = pos[at++];
        v[b] = h >> 7;
        if (h & 3u) {
            c[b] = pulse_leb_get_trusted(pos, &at);
            pulse_leb_get_trusted(pos, &at);
        }
    }
    by[0] = by[1] = by[2] = 0;
    at = 0;
    for (int b = 0; b < 16; b++) {
        if (!c[b])
            continue;
        if (v[b]) {
            at++;
            pulse_leb_get_trusted(val, &at);
            skip_counts(val, &at);
            uint32_t d = pulse_leb_get_trusted(val, &at);
            by[!(pos[0] & PATCH_CTX_SIGN_SYMBOLS) ? 2 : d == 0 ? 0 : (d & 1u) ? 1 : 2]++;
        } else {
            uint32_t c0 = pulse_leb_get_trusted(val, &at);
            if (c0)
                skip_counts(val, &at);
            if (c0 < c[b])
                skip_counts(val, &at);
        }
    }
}

/* Codes old_ -> neu_ with dirs and without; checks every reader's answer to the first; returns
 * its value bytes over the second's. */
static double roundtrip(const char *what, pulse_dtype dt, uint32_t n, size_t k, uint32_t *pl, uint32_t *vl)
{
    uint32_t pl0, vl0;
    size_t bound = patch_ctx_bound(n, k);
    CHECK_OK(patch_ctx_encode(S, dt, old_, neu_, n, k, enc0, bound, &pl0, &vl0));
    int r = patch_ctx_encode_dirs(S, dt, old_, neu_, dirs, n, k, enc, bound, pl, vl);
    CHECK_OK(r);
    if (r)
        return 0;
    CHECK((size_t)*pl + *vl <= bound);
    CHECK(enc[0] & PATCH_CTX_PREV_DIRS);
    CHECK(enc[0] & PATCH_CTX_COUNT_TABLES);
    /* the positions are coded as without (a band's value mode may differ: its header's bit 7) */
    CHECK_EQ_INT(*pl, pl0);
    CHECK_OK(patch_ctx_check_dirs(dt, enc, *pl, enc + *pl, *vl, k, n, what, 1));
    r = patch_ctx_decode_dirs(S, dt, old_, dirs, n, enc, *pl, enc + *pl, *vl, k, idx, zz, what, 1);
    CHECK_OK(r);
    CHECK(!r && rebuilds(n, k));
    /* a reader without the directions refuses it before any value */
    CHECK_ERR(patch_ctx_check(dt, enc, *pl, enc + *pl, *vl, k, n, what, 1), PULSE_ERR_UNSUPPORTED);
    CHECK(err_has("previous step's directions"));
    CHECK_ERR(patch_ctx_decode(S, dt, old_, n, enc, *pl, enc + *pl, *vl, k, idx, zz, what, 1), PULSE_ERR_UNSUPPORTED);
    CHECK_ERR(patch_ctx_check_base(S, dt, old_, n, enc, *pl, enc + *pl, *vl, k, idx, zz, what, 1),
              PULSE_ERR_UNSUPPORTED);
    /* a chunk without them is read by the _dirs readers as by the others */
    CHECK_OK(patch_ctx_check_dirs(dt, enc0, pl0, enc0 + pl0, vl0, k, n, what, 1));
    CHECK_OK(patch_ctx_decode_dirs(S, dt, old_, dirs, n, enc0, pl0, enc0 + pl0, vl0, k, idx, zz, what, 1));
    CHECK(rebuilds(n, k));
    double ratio = (double)*vl / (double)vl0;
    printf("%s: %zu changes of %u, values %u bytes with the previous directions, %u without (%.3f)\n", what, k, n,
           *vl, vl0, ratio);
    return ratio;
}

static void test_roundtrips(void)
{
    uint32_t pl, vl;
    int falls = 0;   /* wide chunks coded by direction whose value-mode bands code falls and turns */
    for (int d = 0; d < 2; d++) {
        pulse_dtype dt = d ? PULSE_DT_F16 : PULSE_DT_BF16;
        const char *name = d ? "F16" : "BF16";
        char what[64];
        /* steps below an ulp of most weights, that keep their direction 85 % of the time or half:
         * either way the direction of a weight's last change tells of the next, by the momentum
         * or by the rounding (a weight that just crossed a cell's edge sits next to it, so a step
         * back crosses it again more often than one on): 9-10 % fewer value bytes */
        const double lr = d ? 4e-6 : 3e-5;
        size_t k = three_steps(dt, CAP, lr, 0.85, 0);
        snprintf(what, sizeof what, "%s momentum", name);
        CHECK(roundtrip(what, dt, CAP, k, &pl, &vl) < 0.95);
        k = three_steps(dt, CAP, lr, 0.5, 0);
        snprintf(what, sizeof what, "%s no momentum", name);
        CHECK(roundtrip(what, dt, CAP, k, &pl, &vl) < 0.95);
        /* weights over many binades: bands in value modes beside bands whose values are coded
         * by direction. A value mode's direction bits are symbols of whether they turn from the
         * previous direction or, band by band where that costs less (many of these weights grow
         * away from zero, which format 5 codes too), whether they fall */
        k = three_steps(dt, CAP, 2e-4, 0.85, 1);
        snprintf(what, sizeof what, "%s wide", name);
        CHECK(roundtrip(what, dt, CAP, k, &pl, &vl) < 0.99);
        CHECK(value_mode_bands(enc) > 0);
        unsigned by[3];
        direction_codings(enc, enc + pl, by);
        printf("%s: value-mode bands' direction bits: %u raw, %u falls, %u turns\n", what, by[0], by[1], by[2]);
        falls += (enc[0] & PATCH_CTX_SIGN_SYMBOLS) != 0 && by[1] > 0 && by[2] > 0;
        /* turns only (the writers before sign symbols): read as well */
        patch_ctx_raw_signs(S, 1);
        snprintf(what, sizeof what, "%s wide, turns", name);
        roundtrip(what, dt, CAP, k, &pl, &vl);
        CHECK(value_mode_bands(enc) > 0 && !(enc[0] & PATCH_CTX_SIGN_SYMBOLS));
        direction_codings(enc, enc + pl, by);
        CHECK(by[0] == 0 && by[1] == 0 && by[2] == value_mode_bands(enc));
        patch_ctx_raw_signs(S, 0);
        /* small chunks, every one of their elements moving */
        for (uint32_t n = 1; n <= 300; n += 37) {
            k = three_steps(dt, n, 2e-2, 0.85, 0);
            if (k) {
                snprintf(what, sizeof what, "%s %u elements", name, n);
                roundtrip(what, dt, n, k, &pl, &vl);
            }
        }
    }
    CHECK(falls > 0);
}

/* Directions other than those coded with: refused by count, or other values; a dirs byte
 * above PATCH_DIR_DOWN reads as up. */
static void test_wrong_dirs(void)
{
    const uint32_t n = 4096;
    size_t k = three_steps(PULSE_DT_BF16, n, 3e-5, 0.85, 0);
    uint32_t pl, vl;
    roundtrip("wrong dirs base", PULSE_DT_BF16, n, k, &pl, &vl);
    uint32_t moved = n, still = n;
    for (uint32_t i = 0; i < n; i++) {
        /* weights of 2^-6 and up: their steps are an ulp or two, so their bands take no value mode */
        if (old_[i] == neu_[i] || ((old_[i] >> 7) & 0xFFu) < 121)
            continue;
        if (dirs[i] == PATCH_DIR_UP && moved == n)
            moved = i;
        if (dirs[i] == PATCH_DIR_NONE && still == n)
            still = i;
    }
    CHECK(moved < n && still < n);
    /* a change that moved before read as one that did not: the count written says otherwise */
    dirs[moved] = PATCH_DIR_NONE;
    CHECK_ERR(patch_ctx_decode_dirs(S, PULSE_DT_BF16, old_, dirs, n, enc, pl, enc + pl, vl, k, idx, zz, "w", 2),
              PULSE_ERR_FORMAT);
    CHECK(err_has("without a previous direction"));
    dirs[moved] = PATCH_DIR_UP;
    dirs[still] = PATCH_DIR_DOWN;
    CHECK_ERR(patch_ctx_decode_dirs(S, PULSE_DT_BF16, old_, dirs, n, enc, pl, enc + pl, vl, k, idx, zz, "w", 2),
              PULSE_ERR_FORMAT);
    dirs[still] = PATCH_DIR_NONE;
    /* up read as down: the same count, another value (the digest of the patch is what binds the
     * directions; the coder only keeps their counts) */
    dirs[moved] = PATCH_DIR_DOWN;
    CHECK_OK(patch_ctx_decode_dirs(S, PULSE_DT_BF16, old_, dirs, n, enc, pl, enc + pl, vl, k, idx, zz, "w", 2));
    CHECK(!rebuilds(n, k));
    /* 3 is up */
    dirs[moved] = 3;
    CHECK_OK(patch_ctx_decode_dirs(S, PULSE_DT_BF16, old_, dirs, n, enc, pl, enc + pl, vl, k, idx, zz, "w", 2));
    CHECK(rebuilds(n, k));
    dirs[moved] = PATCH_DIR_UP;
    /* no directions at all */
    CHECK_ERR(patch_ctx_decode_dirs(S, PULSE_DT_BF16, old_, NULL, n, enc, pl, enc + pl, vl, k, idx, zz, "w", 2),
              PULSE_ERR_INVALID);
    CHECK_ERR(patch_ctx_encode_dirs(S, PULSE_DT_BF16, old_, neu_, NULL, n, k, enc0, patch_ctx_bound(n, k), &pl, &vl),
              PULSE_ERR_INVALID);
    /* directions without count tables */
    uint8_t *b = malloc((size_t)pl + vl);
    memcpy(b, enc, (size_t)pl + vl);
    b[0] &= (uint8_t)~PATCH_CTX_COUNT_TABLES;
    CHECK_ERR(patch_ctx_check_dirs(PULSE_DT_BF16, b, pl, b + pl, vl, k, n, "w", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("without count tables"));
    free(b);
}

/* Every single-bit change and 0xFF at every byte, and every truncation, of a small chunk coded by
 * direction: refused (FORMAT / UNSUPPORTED) or decoded to k in-range changes; check_dirs never
 * refuses what decode_dirs accepts; never a read out of bounds (ASan). */
static void test_damage(void)
{
    const uint32_t n = 512;
    size_t k = three_steps(PULSE_DT_BF16, n, 3e-3, 0.85, 0);
    uint32_t pl, vl;
    roundtrip("damage base", PULSE_DT_BF16, n, k, &pl, &vl);
    const size_t len = (size_t)pl + vl;
    size_t refused = 0, accepted = 0;
    for (size_t at = 0; at < len; at++)
        for (unsigned x = 1; x < 256; x++) {
            if (x != 0xFF && (x & (x - 1)))
                continue;
            uint8_t *b = malloc(len);
            memcpy(b, enc, len);
            b[at] ^= (uint8_t)x;
            int rc = patch_ctx_check_dirs(PULSE_DT_BF16, b, pl, b + pl, vl, k, n, "d", 3);
            int rd = patch_ctx_decode_dirs(S, PULSE_DT_BF16, old_, dirs, n, b, pl, b + pl, vl, k, idx, zz, "d", 3);
            CHECK(rc == 0 || rc == PULSE_ERR_FORMAT || rc == PULSE_ERR_UNSUPPORTED);
            CHECK(rd == 0 || rd == PULSE_ERR_FORMAT || rd == PULSE_ERR_UNSUPPORTED);
            if (rd == 0) {
                CHECK_EQ_INT(rc, 0);
                int ok = 1;
                for (size_t j = 0; j < k; j++)
                    ok &= idx[j] < n && zz[j] != 0;
                CHECK(ok);
                accepted++;
            } else {
                refused++;
            }
            free(b);
        }
    for (int which = 0; which < 2; which++)
        for (size_t cut = 0; cut < (which ? vl : pl); cut++) {
            size_t plen = which ? pl : cut, vlen = which ? cut : vl;
            uint8_t *p = malloc(plen ? plen : 1), *v = malloc(vlen ? vlen : 1);
            memcpy(p, enc, plen);
            memcpy(v, enc + pl, vlen);
            CHECK_ERR(patch_ctx_check_dirs(PULSE_DT_BF16, p, plen, v, vlen, k, n, "d", 3), PULSE_ERR_FORMAT);
            CHECK_ERR(patch_ctx_decode_dirs(S, PULSE_DT_BF16, old_, dirs, n, p, plen, v, vlen, k, idx, zz, "d", 3),
                      PULSE_ERR_FORMAT);
            free(p);
            free(v);
        }
    printf("damage: %zu changes refused, %zu accepted\n", refused, accepted);
}

int main(void)
{
    S = patch_ctx_scratch_new(CAP);
    prev_ = malloc(2u * CAP);
    old_ = malloc(2u * CAP);
    neu_ = malloc(2u * CAP);
    work = malloc(2u * CAP);
    zz = malloc(2u * CAP);
    idx = malloc(4u * CAP);
    dirs = malloc(CAP);
    enc = malloc(patch_ctx_bound(CAP, CAP));
    enc0 = malloc(patch_ctx_bound(CAP, CAP));
    if (!S || !prev_ || !old_ || !neu_ || !work || !zz || !idx || !dirs || !enc || !enc0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    test_roundtrips();
    test_wrong_dirs();
    test_damage();
    patch_ctx_scratch_free(S);
    free(prev_);
    free(old_);
    free(neu_);
    free(work);
    free(zz);
    free(idx);
    free(dirs);
    free(enc);
    free(enc0);
    return check_done("test_ctxdirs");
}
