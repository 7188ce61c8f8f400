/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the LoCo pieces: shard codec round trip and refusals, gate conservation, the mean's arithmetic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"
#include "tests/check.h"

static uint32_t rng = 12345;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void test_shard_round_trip(void)
{
    enum { LEN = 5000 };
    uint32_t idx[LEN];
    float val[LEN];
    uint32_t k = 0;
    for (uint32_t i = 0; i < LEN; i++)
        if (next() % 17 == 0 || i == LEN - 1) {
            idx[k] = i;
            uint32_t b = next();
            memcpy(&val[k], &b, 4);
            if (val[k] != val[k])
                val[k] = 1.5f;
            k++;
        }
    uint8_t *obj = NULL;
    size_t n = 0;
    CHECK_OK(loco_shard_encode(PULSE_LOCO_VIEW_BF16, 7 * LEN, LEN, idx, val, k, &obj, &n));
    loco_shard s;
    CHECK_OK(loco_shard_decode(obj, n, PULSE_LOCO_VIEW_BF16, 7 * LEN, LEN, &s));
    CHECK_EQ_INT((int)s.k, (int)k);
    CHECK(memcmp(s.idx, idx, k * 4) == 0);
    CHECK(memcmp(s.val, val, k * 4) == 0);
    loco_shard_free(&s);
    /* Refusals: other view, other range, truncated, one byte more, every single flipped header byte. */
    CHECK_ERR(loco_shard_decode(obj, n, PULSE_LOCO_VIEW_FP16, 7 * LEN, LEN, &s), PULSE_ERR_MISMATCH);
    CHECK_ERR(loco_shard_decode(obj, n, PULSE_LOCO_VIEW_BF16, 0, LEN, &s), PULSE_ERR_FORMAT);
    CHECK_ERR(loco_shard_decode(obj, n - 1, PULSE_LOCO_VIEW_BF16, 7 * LEN, LEN, &s), PULSE_ERR_FORMAT);
    CHECK(loco_shard_decode(obj, LOCO_SHARD_HEADER - 1, PULSE_LOCO_VIEW_BF16, 7 * LEN, LEN, &s) != 0);
    for (size_t i = 0; i < LOCO_SHARD_HEADER; i++) {
        obj[i] ^= 0x40;
        CHECK(loco_shard_decode(obj, n, PULSE_LOCO_VIEW_BF16, 7 * LEN, LEN, &s) != 0);
        obj[i] ^= 0x40;
    }
    /* A range shorter than the last position: the gaps reach past it. */
    free(obj);
    CHECK_OK(loco_shard_encode(PULSE_LOCO_VIEW_BF16, 0, LEN - 1, idx, val, k, &obj, &n));
    CHECK_ERR(loco_shard_decode(obj, n, PULSE_LOCO_VIEW_BF16, 0, LEN - 1, &s), PULSE_ERR_FORMAT);
    free(obj);
    /* The empty shard (a trainer with nothing visible). */
    CHECK_OK(loco_shard_encode(PULSE_LOCO_VIEW_E4M3, 0, 10, NULL, NULL, 0, &obj, &n));
    CHECK_OK(loco_shard_decode(obj, n, PULSE_LOCO_VIEW_E4M3, 0, 10, &s));
    CHECK_EQ_INT((int)s.k, 0);
    loco_shard_free(&s);
    free(obj);
}

/* sent + e_new == a for every entry, bit for bit, with RL-sized pseudo-gradients. */
static void test_conservation(void)
{
    enum { N = 20000 };
    static float theta[N], local[N], delta[N], e[N], e0[N], val[N];
    static uint32_t idx[N];
    for (int i = 0; i < N; i++) {
        theta[i] = ((float)(next() % 20001) - 10000.0f) * 2e-6f;
        local[i] = theta[i] - ((float)(next() % 2001) - 1000.0f) * 1e-8f;
        e0[i] = e[i] = ((float)(next() % 2001) - 1000.0f) * 1e-8f;
    }
    const pulse_kernels *kt = pulse_kernels_get();
    loco_delta(theta, local, delta, N);
    size_t k = kt->gate[PULSE_VIEW_BF16](theta, delta, e, N, idx, val);
    CHECK(k > 0 && k < N / 2);
    size_t j = 0;
    for (int i = 0; i < N; i++) {
        float a = delta[i] + e0[i];
        float sent = (j < k && idx[j] == (uint32_t)i) ? val[j++] : 0.0f;
        CHECK(sent == 0.0f || e[i] == 0.0f);
        CHECK(memcmp(sent != 0.0f ? &sent : &e[i], &a, 4) == 0);
    }
    CHECK_EQ_INT((int)j, (int)k);
    size_t bad = 0;
    CHECK_EQ_INT(kt->gate_check[PULSE_VIEW_BF16](theta, N, idx, val, k, &bad), PULSE_GATE_OK);
}

/* lr 1, mu 0: theta - (sum / K); Nesterov by hand. */
static void test_outer_step(void)
{
    float theta[3] = { 1.0f, -2.0f, 0.5f }, acc[3] = { 0.3f, 0.0f, -0.9f }, m[3] = { 0 }, out[3];
    loco_outer_step(theta, acc, 3.0f, m, 1.0f, 0.0f, 0, out, 3);
    for (int i = 0; i < 3; i++) {
        volatile float g = acc[i] / 3.0f;
        volatile float want = theta[i] - g;
        CHECK(memcmp(&out[i], (const void *)&want, 4) == 0);
    }
    float m2[3] = { 0.1f, 0.2f, -0.3f };
    loco_outer_step(theta, acc, 2.0f, m2, 0.7f, 0.9f, 1, out, 3);
    float mm[3] = { 0.1f, 0.2f, -0.3f };
    for (int i = 0; i < 3; i++) {
        volatile float g = acc[i] / 2.0f, t1 = 0.9f * mm[i], mn = t1 + g, t2 = 0.9f * mn, u = g + t2, s = 0.7f * u,
                       want = theta[i] - s;
        CHECK(memcmp(&m2[i], (const void *)&mn, 4) == 0);
        CHECK(memcmp(&out[i], (const void *)&want, 4) == 0);
    }
}

int main(void)
{
    test_shard_round_trip();
    test_conservation();
    test_outer_step();
    return check_done("loco-unit");
}
