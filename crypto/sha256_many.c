/* SPDX-License-Identifier: Apache-2.0 */
/* Many one-shot SHA-256 digests at once: the messages share the sixteen AVX-512 lanes, a lane taking the next message when its own ends, and the last few finish in SHA-NI pairs. */
#include <string.h>

#include "crypto/sha256.h"

/* A step of the sixteen-lane kernel costs the same however many lanes are busy: ~850 cycles
 * a block on the machine of docs/performance.md, against ~100 a block a message for SHA-NI's
 * interleaved pairs and ~180 for one message alone. So the lanes are worth it while at least
 * eight of them are busy where the CPU has SHA-NI, and while two are where it does not. */
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

/* Pairs of messages through the interleaved SHA-NI blocks for the whole blocks both have,
 * then each alone; paired by what is left of them, so that little is left alone. */
static void finish_in_pairs(pending *m, size_t n, uint8_t *out[])
{
    for (size_t i = 1; i < n; i++)   /* n <= 16: insertion sort, longest first */
        for (size_t j = i; j > 0 && left_of(&m[j]) > left_of(&m[j - 1]); j--) {
            pending t = m[j];
            m[j] = m[j - 1];
            m[j - 1] = t;
            uint8_t *o = out[j];
            out[j] = out[j - 1];
            out[j - 1] = o;
        }
    int ni = !strcmp(pulse_sha256_impl(), "sha-ni");
    for (size_t i = 0; i < n; i += 2) {
        if (ni && i + 1 < n) {
            size_t a = left_of(&m[i]) / 64, b = left_of(&m[i + 1]) / 64;
            size_t both = a < b ? a : b;
            pulse_sha256_blocks_ni_x2(m[i].h, m[i].data + m[i].done, m[i + 1].h, m[i + 1].data + m[i + 1].done,
                                      both);
            m[i].done += 64 * both;
            m[i + 1].done += 64 * both;
        }
        pending_finish(&m[i], out[i]);
        if (i + 1 < n)
            pending_finish(&m[i + 1], out[i + 1]);
    }
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
    finish_in_pairs(rest, nrest, rest_out);
}

void pulse_sha256_many(size_t n, const void *const data[], const size_t len[], uint8_t out[][32])
{
    int worth = !strcmp(pulse_sha256_impl(), "sha-ni") ? LANES_WORTH_NI : LANES_WORTH_PORTABLE;
    if (pulse_sha256_lanes16() && n >= (size_t)worth) {
        for (size_t i = 0; i < n; i += BATCH)
            many_in_lanes(n - i < BATCH ? n - i : BATCH, data + i, len + i, out + i, worth);
        return;
    }
    /* Without the lanes (or fewer messages than make them worth it): pairs, as they come. */
    for (size_t i = 0; i < n; i += 2) {
        if (i + 1 < n)
            pulse_sha256_x2(data[i], len[i], data[i + 1], len[i + 1], out[i], out[i + 1]);
        else
            pulse_sha256(data[i], len[i], out[i]);
    }
}
