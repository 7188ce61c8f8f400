/* SPDX-License-Identifier: Apache-2.0 */
/* Many one-shot SHA-256 digests at once: the messages share the sixteen AVX-512 lanes, a lane taking the next message when its own ends, and the last few finish four at a time on SHA-NI. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "crypto/sha256.h"

/* A step of the sixteen-lane kernel costs the same however many lanes are busy: ~850 cycles
 * a block on the Xeon of docs/performance.md, against ~100 a block a message for SHA-NI's
 * interleaved pairs and ~180 for one message alone. So, where they outrun the four-message
 * kernel at all, the lanes are worth it while at least eight of them are busy where the CPU
 * has SHA-NI, and while two are where it does not. */
#define LANES_WORTH_NI 8
#define LANES_WORTH_PORTABLE 2
/* Messages scheduled together (longest first, see pulse_sha256_many); more are taken in
 * batches of this many. */
#define BATCH 256

/* A message on its way: where the next whole block is, and how many bytes are hashed. */
typedef struct pending {
    const uint8_t *data;
    size_t len;
    size_t done;   /* a multiple of 64 */
    uint32_t h[8];
} pending;

static void pending_start(pending *m, const void *data, size_t len)
{
    pulse_sha256_ctx c;
    pulse_sha256_init(&c);
    memcpy(m->h, c.h, sizeof m->h);
    m->data = data;
    m->len = len;
    m->done = 0;
}

/* The bytes after m->done (less than a block when the lanes finished it) and the padding. */
static void pending_finish(const pending *m, uint8_t out[32])
{
    pulse_sha256_ctx c;
    pulse_sha256_init(&c);
    memcpy(c.h, m->h, sizeof c.h);
    c.total = m->done;
    pulse_sha256_update(&c, m->data + m->done, m->len - m->done);
    pulse_sha256_final(&c, out);
}

static size_t left_of(const pending *m)
{
    return m->len - m->done;
}

/* Runs the whole blocks K (3 or 4) messages all have through the four-message kernel X4 (three
 * fill the fourth lane with the first again, its result dropped: still faster than a pair and
 * one alone). */
static void blocks_in_four(pulse_sha256_x4_fn x4, pending *m, size_t k)
{
    size_t both = SIZE_MAX;
    for (size_t l = 0; l < k; l++)
        if (left_of(&m[l]) / 64 < both)
            both = left_of(&m[l]) / 64;
    if (both == 0)
        return;
    uint32_t h[4][8];
    const uint8_t *p[4];
    for (size_t l = 0; l < 4; l++) {
        const pending *src = &m[l < k ? l : 0];
        memcpy(h[l], src->h, sizeof h[l]);
        p[l] = src->data + src->done;
    }
    x4(h, p, both);
    for (size_t l = 0; l < k; l++) {
        memcpy(m[l].h, h[l], sizeof m[l].h);
        m[l].done += 64 * both;
    }
}

/* Messages under way finished. With SHA-NI, while two or more have whole blocks left: the four
 * (or three) with the most left run through the four-message kernel for the blocks all of them
 * have, two through the two-message one; the one that ran out leaves the group and the next
 * longest takes its place. The rest of each (under a block) and any CPU without SHA-NI: alone. */
static void finish_pending(pending *m, size_t n, uint8_t *out[])
{
    pulse_sha256_x4_fn x4 = pulse_sha256_x4();
    for (;;) {
        for (size_t i = 1; i < n; i++)   /* n <= 16: insertion sort, most left first */
            for (size_t j = i; j > 0 && left_of(&m[j]) > left_of(&m[j - 1]); j--) {
                pending t = m[j];
                m[j] = m[j - 1];
                m[j - 1] = t;
                uint8_t *o = out[j];
                out[j] = out[j - 1];
                out[j - 1] = o;
            }
        size_t live = 0;
        while (live < n && left_of(&m[live]) >= 64)
            live++;
        if (!x4 || live < 2)
            break;
        if (live >= 3) {
            blocks_in_four(x4, m, live < 4 ? live : 4);
        } else {
            size_t both = left_of(&m[1]) / 64;
            pulse_sha256_blocks_ni_x2(m[0].h, m[0].data + m[0].done, m[1].h, m[1].data + m[1].done, both);
            m[0].done += 64 * both;
            m[1].done += 64 * both;
        }
    }
    for (size_t i = 0; i < n; i++)
        pending_finish(&m[i], out[i]);
}

/* The indices 0..n-1 in order of length, longest first (stable). */
static void longest_first(size_t n, const size_t len[], uint16_t order[])
{
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        for (; j > 0 && len[order[j - 1]] < len[i]; j--)
            order[j] = order[j - 1];
        order[j] = (uint16_t)i;
    }
}

/* One batch (n <= BATCH) through the lanes. The longest messages go first, so that the last
 * ones to take a lane are the shortest and the lanes run out of work close together: what is
 * left when too few are busy is then small. */
static void many_in_lanes(size_t n, const void *const data[], const size_t len[], uint8_t out[][32], int worth)
{
    uint16_t order[BATCH];
    longest_first(n, len, order);
    pending lane[16], rest[16];
    uint8_t *rest_out[16];
    uint32_t st[8][16];
    const uint8_t *p[16];
    size_t owner[16], next = 0, nrest = 0;
    unsigned live = 0;
    for (;;) {
        for (int l = 0; l < 16 && next < n; l++) {
            if ((live >> l) & 1)
                continue;
            size_t i = order[next++];
            pending_start(&lane[l], data[i], len[i]);
            if (len[i] < 64) {   /* no whole block: only the padding's */
                pending_finish(&lane[l], out[i]);
                l--;
                continue;
            }
            owner[l] = i;
            p[l] = lane[l].data;
            for (int j = 0; j < 8; j++)
                st[j][l] = lane[l].h[j];
            live |= 1u << l;
        }
        if (!live || (next == n && __builtin_popcount(live) < worth))
            break;
        size_t step = SIZE_MAX;
        for (int l = 0; l < 16; l++)
            if ((live >> l) & 1 && left_of(&lane[l]) / 64 < step)
                step = left_of(&lane[l]) / 64;
        pulse_sha256_blocks_x16(st, p, live, step);
        for (int l = 0; l < 16; l++) {
            if (!((live >> l) & 1))
                continue;
            lane[l].done += 64 * step;
            p[l] += 64 * step;
            if (left_of(&lane[l]) < 64) {
                for (int j = 0; j < 8; j++)
                    lane[l].h[j] = st[j][l];
                pending_finish(&lane[l], out[owner[l]]);
                live &= ~(1u << l);
            }
        }
    }
    for (int l = 0; l < 16; l++) {
        if (!((live >> l) & 1))
            continue;
        rest[nrest] = lane[l];
        for (int j = 0; j < 8; j++)
            rest[nrest].h[j] = st[j][l];
        rest_out[nrest++] = out[owner[l]];
    }
    finish_pending(rest, nrest, rest_out);
}

/* Whether the sixteen lanes outrun the four-message SHA-NI kernel here: on the Xeon of
 * docs/performance.md by about twice, on AMD Zen 4 they lose by a third (docs/checkpoints.md),
 * so the two are timed once, sixteen messages of 32 blocks each way, best of five. */
static int lanes_win;
static pthread_once_t lanes_once = PTHREAD_ONCE_INIT;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void time_lanes(void)
{
    pulse_sha256_x4_fn x4 = pulse_sha256_x4();
    if (!pulse_sha256_lanes16() || !x4) {
        lanes_win = pulse_sha256_lanes16();
        return;
    }
    enum { BLOCKS = 32 };
    static const uint8_t buf[16 * BLOCKS * 64];
    const uint8_t *p[16];
    uint32_t st[8][16] = { { 0 } }, h[4][8] = { { 0 } };
    for (int l = 0; l < 16; l++)
        p[l] = buf + (size_t)l * BLOCKS * 64;
    double best16 = 1e9, best4 = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        pulse_sha256_blocks_x16(st, p, 0xffffu, BLOCKS);
        double t1 = now_s();
        for (int g = 0; g < 4; g++)
            x4(h, p + 4 * g, BLOCKS);
        double t2 = now_s();
        if (t1 - t0 < best16)
            best16 = t1 - t0;
        if (t2 - t1 < best4)
            best4 = t2 - t1;
    }
    lanes_win = best16 < best4;
}

int pulse_sha256_many_uses_lanes(void)
{
    pthread_once(&lanes_once, time_lanes);
    return lanes_win;
}

void pulse_sha256_many_with(int lanes, size_t n, const void *const data[], const size_t len[], uint8_t out[][32])
{
    int worth = !strcmp(pulse_sha256_impl(), "sha-ni") ? LANES_WORTH_NI : LANES_WORTH_PORTABLE;
    if (lanes && pulse_sha256_lanes16() && n >= (size_t)worth) {
        for (size_t i = 0; i < n; i += BATCH)
            many_in_lanes(n - i < BATCH ? n - i : BATCH, data + i, len + i, out + i, worth);
        return;
    }
    /* Without the lanes (or fewer messages than make them worth it): sixteen at a time, in fours. */
    for (size_t i = 0; i < n; i += 16) {
        pending m[16];
        uint8_t *o[16];
        size_t k = n - i < 16 ? n - i : 16;
        for (size_t l = 0; l < k; l++) {
            pending_start(&m[l], data[i + l], len[i + l]);
            o[l] = out[i + l];
        }
        finish_pending(m, k, o);
    }
}

void pulse_sha256_many(size_t n, const void *const data[], const size_t len[], uint8_t out[][32])
{
    pulse_sha256_many_with(pulse_sha256_many_uses_lanes(), n, data, len, out);
}
