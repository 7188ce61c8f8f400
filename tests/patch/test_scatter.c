/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of pulse_updates_scatter: adds with wraparound and sets on 1/2/4-byte elements, misaligned arrays, refused positions that leave the tensor as it was, and the check-only call. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint32_t get(const uint8_t *p, unsigned w)
{
    uint32_t x = 0;
    memcpy(&x, p, w);   /* little-endian host, like the format */
    return x;
}

/* Random tensor, random ascending positions and sources at byte offset `skew` (misaligned for
 * w > 1): the scatter's result equals an element-by-element reference computed here. */
static void random_case(unsigned w, int add, unsigned skew)
{
    const uint64_t n = 10007;
    uint8_t *dst = malloc(n * w + 8), *ref = malloc(n * w), *src = malloc(n * w + 8);
    int64_t *index = malloc(n * sizeof *index);
    uint8_t *d = dst + skew, *s = src + skew;
    uint64_t count = 0;
    for (uint64_t i = 0; i < n * w; i++)
        d[i] = ref[i] = (uint8_t)rnd();
    for (uint64_t i = 0; i < n; i++)
        if (rnd() % 3 == 0 || i == 0 || i == n - 1)   /* both ends, about a third between */
            index[count++] = (int64_t)i;
    for (uint64_t k = 0; k < count * w; k++)
        s[k] = (uint8_t)rnd();
    uint32_t mask = w == 4 ? 0xffffffffu : (1u << (8 * w)) - 1;
    for (uint64_t k = 0; k < count; k++) {
        uint8_t *r = ref + (uint64_t)index[k] * w;
        uint32_t v = get(s + k * w, w);
        uint32_t x = add ? (get(r, w) + v) & mask : v;
        memcpy(r, &x, w);
    }
    CHECK_OK(pulse_updates_scatter(d, n, w, index, s, count, add));
    CHECK(memcmp(d, ref, n * w) == 0);
    free(dst);
    free(ref);
    free(src);
    free(index);
}

/* The add is on the integer bits, modulo 2^(8w): what a ulp delta means. */
static void wraparound(void)
{
    uint16_t h[3] = {0xffff, 0x8000, 0x0001};
    int16_t dh[3] = {1, -32768, -2};
    int64_t ix[3] = {0, 1, 2};
    CHECK_OK(pulse_updates_scatter(h, 3, 2, ix, dh, 3, 1));
    CHECK_EQ_INT(h[0], 0);
    CHECK_EQ_INT(h[1], 0);
    CHECK_EQ_INT(h[2], 0xffff);
    uint8_t b[2] = {0xff, 0x7f};
    int8_t db[2] = {2, 1};
    CHECK_OK(pulse_updates_scatter(b, 2, 1, ix, db, 2, 1));
    CHECK_EQ_INT(b[0], 1);
    CHECK_EQ_INT(b[1], 0x80);
    uint32_t f[2] = {0xffffffffu, 5};
    int32_t df[2] = {1, -6};
    CHECK_OK(pulse_updates_scatter(f, 2, 4, ix, df, 2, 1));
    CHECK_EQ_INT(f[0], 0);
    CHECK_EQ_INT(f[1], 0xffffffffu);
    /* a set ignores what was there */
    uint16_t v[3] = {0x1234, 0x5678, 0x9abc};
    uint16_t nv[2] = {0xffff, 0};
    int64_t ix2[2] = {0, 2};
    CHECK_OK(pulse_updates_scatter(v, 3, 2, ix2, nv, 2, 0));
    CHECK_EQ_INT(v[0], 0xffff);
    CHECK_EQ_INT(v[1], 0x5678);
    CHECK_EQ_INT(v[2], 0);
}

/* A bad position anywhere (even the last) refuses the whole call before any write. */
static void refuse(const int64_t *index, uint64_t count, uint64_t n, unsigned w, const char *detail)
{
    uint16_t t[8], before[8];
    int16_t src[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < 8; i++)
        t[i] = before[i] = (uint16_t)(100 + i);
    for (int add = 0; add < 2; add++) {
        CHECK_ERR(pulse_updates_scatter(t, n, w, index, src, count, add), PULSE_ERR_INVALID);
        CHECK(memcmp(t, before, sizeof t) == 0);
        CHECK_ERR(pulse_updates_scatter(NULL, n, w, index, NULL, count, add), PULSE_ERR_INVALID);   /* check only */
        CHECK(memcmp(t, before, sizeof t) == 0);
        if (!strstr(pulse_last_error(), detail)) {
            CHECK(!"error detail names what was wrong");
            fprintf(stderr, "  wanted \"%s\" in \"%s\"\n", detail, pulse_last_error());
        }
    }
}

static void refusals(void)
{
    int64_t past_end[3] = {0, 3, 8};
    refuse(past_end, 3, 8, 2, "index[2] = 8 is outside the tensor's 8 elements");
    int64_t negative[2] = {-1, 2};
    refuse(negative, 2, 8, 2, "index[0] = -1 is outside");
    int64_t equal[4] = {0, 2, 2, 5};
    refuse(equal, 4, 8, 2, "index[2] = 2 does not ascend strictly");
    int64_t descending[3] = {1, 4, 3};
    refuse(descending, 3, 8, 2, "index[2] = 3 does not ascend strictly");
    int64_t fine[2] = {0, 1};
    refuse(fine, 2, 8, 3, "element width 3");
    refuse(fine, 2, 8, 8, "element width 8");
    refuse(fine, 2, 1, 2, "index[1] = 1 is outside the tensor's 1 elements");
    CHECK_ERR(pulse_updates_scatter(NULL, 8, 2, fine, fine, 2, 1), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "dst is NULL") != NULL);
    CHECK_ERR(pulse_updates_scatter(fine, 8, 2, NULL, fine, 2, 1), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "index is NULL") != NULL);
    /* src NULL: the checks alone, nothing written even where dst is given */
    uint16_t t[2] = {7, 9};
    CHECK_OK(pulse_updates_scatter(t, 2, 2, fine, NULL, 2, 1));
    CHECK_OK(pulse_updates_scatter(NULL, 2, 2, fine, NULL, 2, 0));
    CHECK(t[0] == 7 && t[1] == 9);
    /* nothing to write: fine with no arrays at all */
    CHECK_OK(pulse_updates_scatter(NULL, 0, 2, NULL, NULL, 0, 1));
}

int main(void)
{
    for (unsigned w = 1; w <= 4; w *= 2)
        for (int add = 0; add < 2; add++)
            for (unsigned skew = 0; skew < 2; skew++)
                random_case(w, add, skew);
    wraparound();
    refusals();
    return check_done("test_scatter");
}
