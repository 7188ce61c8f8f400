/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: SHA-256, one-shot and incremental, on the fastest implementation this CPU has. */
#ifndef PULSE_CRYPTO_SHA256_H
#define PULSE_CRYPTO_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* Incremental state: the chaining value, the byte count and a partial block. */
typedef struct pulse_sha256_ctx {
    uint32_t h[8];
    uint64_t total;
    uint8_t buf[64];
    size_t fill;
} pulse_sha256_ctx;

void pulse_sha256_init(pulse_sha256_ctx *c);
void pulse_sha256_update(pulse_sha256_ctx *c, const void *data, size_t len);
void pulse_sha256_final(pulse_sha256_ctx *c, uint8_t out[32]);
void pulse_sha256(const void *data, size_t len, uint8_t out[32]);
/* Two one-shot digests at once: with SHA-NI the two messages' blocks are interleaved (the
 * rounds of one fill the other's latency: ~1.4x the throughput of two pulse_sha256 calls);
 * otherwise exactly two pulse_sha256 calls. */
void pulse_sha256_x2(const void *a, size_t la, const void *b, size_t lb, uint8_t out_a[32],
                     uint8_t out_b[32]);

/* n one-shot digests at once (out[i] of data[i], len[i] bytes). On AVX-512 the messages share
 * the sixteen lanes of pulse_sha256_blocks_x16, a lane taking the next message as soon as its
 * own ends; the last few (when fewer than would keep the lanes worth it) and any CPU without
 * AVX-512 go four at a time through the four-message SHA-NI kernel where the CPU has SHA-NI,
 * else one by one. */
void pulse_sha256_many(size_t n, const void *const data[], const size_t len[], uint8_t out[][32]);
/* Whether pulse_sha256_many uses the lanes: where they are (pulse_sha256_lanes16) and, with
 * SHA-NI beside them, where they outran the four-message kernel when timed once; and, for
 * tests, pulse_sha256_many with the lanes taken (where they are) or not, whatever that says. */
int pulse_sha256_many_uses_lanes(void);
void pulse_sha256_many_with(int lanes, size_t n, const void *const data[], const size_t len[], uint8_t out[][32]);

/* Which implementation runs: "sha-ni" or "portable". Honours PULSE_CPU_MASK like the kernels
 * (bit 0x8 masks SHA-NI; the features and the mask are base/cpu.c's, shared with the kernels). */
const char *pulse_sha256_impl(void);

/* For tests and benchmarks: one-shot SHA-256 on a named implementation ("portable" or
 * "sha-ni"). Returns 0, or -1 when that implementation is not built or the CPU lacks it
 * (PULSE_CPU_MASK is not consulted here, so tests can compare both on one run). */
int pulse_sha256_with(const char *impl, const void *data, size_t len, uint8_t out[32]);

/* Whether pulse_sha256_many may use the sixteen lanes (AVX-512 F+BW, not masked by bit 0x2 of
 * PULSE_CPU_MASK); and, for tests, whether this CPU and build could (the mask not consulted). */
int pulse_sha256_lanes16(void);
int pulse_sha256_lanes16_built(void);

/* The 64 round constants, shared by every implementation. */
extern const uint32_t pulse_sha256_k[64];

/* Compression of whole 64-byte blocks into h; one per implementation. */
void pulse_sha256_blocks_c(uint32_t h[8], const uint8_t *p, size_t nblocks);
void pulse_sha256_blocks_ni(uint32_t h[8], const uint8_t *p, size_t nblocks);
void pulse_sha256_blocks_ni_x2(uint32_t ha[8], const uint8_t *pa, uint32_t hb[8], const uint8_t *pb,
                               size_t nblocks);
/* Four chaining values, each compressing nblocks blocks from its p[i] (SSE registers; _evex:
 * the same built for AVX-512 VL). */
void pulse_sha256_blocks_ni_x4(uint32_t h[4][8], const uint8_t *const p[4], size_t nblocks);
void pulse_sha256_blocks_ni_x4_evex(uint32_t h[4][8], const uint8_t *const p[4], size_t nblocks);
typedef void (*pulse_sha256_x4_fn)(uint32_t h[4][8], const uint8_t *const p[4], size_t nblocks);
/* The four-message kernel pulse_sha256_many runs on this CPU (PULSE_CPU_MASK honoured), NULL
 * without SHA-NI; for tests, whether the _evex one could run here (the mask not consulted). */
pulse_sha256_x4_fn pulse_sha256_x4(void);
int pulse_sha256_x4_evex_built(void);
/* Sixteen chaining values at once, transposed (st[j][l] is word j of lane l): each lane l in the
 * bit mask live compresses nblocks blocks from p[l]; the other lanes are left as they were and
 * their p[l] is not read. */
void pulse_sha256_blocks_x16(uint32_t st[8][16], const uint8_t *const p[16], unsigned live, size_t nblocks);

#endif
