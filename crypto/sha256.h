/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: SHA-256, one-shot and incremental, on the fastest implementation this CPU has. */
#ifndef PULSE_CRYPTO_SHA256_H
#define PULSE_CRYPTO_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* Incremental state. Opaque contents; large enough for libsodium's and our SHA-NI state. */
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

/* Which implementation runs: "sha-ni" or "portable". Honours PULSE_CPU_MASK like the kernels. */
const char *pulse_sha256_impl(void);

#endif
