/* SPDX-License-Identifier: Apache-2.0 */
/* Not a test: MB/s of each SHA-256 implementation and libsodium on a 64 MiB buffer, and of the two- and many-message forms on it cut into pieces (docs/checkpoints.md). */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/sha256.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    size_t n = mib << 20;
    unsigned char *buf = malloc(n), out[32];
    if (!buf || sodium_init() < 0)
        return 1;
    memset(buf, 0x5a, n);
    const char *impls[] = { "portable", "sha-ni", "libsodium" };
    for (int k = 0; k < 3; k++) {
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            if (k == 2)
                crypto_hash_sha256(out, buf, n);
            else if (pulse_sha256_with(impls[k], buf, n, out) != 0) {
                best = -1;
                break;
            }
            double t = now() - t0;
            if (t < best)
                best = t;
        }
        if (best < 0)
            printf("%-10s not available\n", impls[k]);
        else
            printf("%-10s %8.0f MB/s\n", impls[k], n / best / 1e6);
    }
    /* The buffer as messages of a patch chunk's size (40 KiB) and of a state-id leaf (1 MiB):
     * one at a time, in pairs, and all at once (the lanes where the CPU has them). */
    static const size_t pieces[] = { 40 << 10, 1 << 20 };
    size_t most = n / (40 << 10);
    const void **data = malloc(most * sizeof *data);
    size_t *len = malloc(most * sizeof *len);
    uint8_t (*digests)[32] = malloc(most * 32);
    if (!data || !len || !digests)
        return 1;
    for (int k = 0; k < 2; k++) {
        size_t m = n / pieces[k];
        for (size_t i = 0; i < m; i++) {
            data[i] = buf + i * pieces[k];
            len[i] = pieces[k];
        }
        double best[3] = { 1e9, 1e9, 1e9 };
        for (int rep = 0; rep < 3; rep++) {
            for (int form = 0; form < 3; form++) {
                double t0 = now();
                if (form == 0)
                    for (size_t i = 0; i < m; i++)
                        pulse_sha256(data[i], len[i], digests[i]);
                else if (form == 1)
                    for (size_t i = 0; i + 1 < m; i += 2)
                        pulse_sha256_x2(data[i], len[i], data[i + 1], len[i + 1], digests[i], digests[i + 1]);
                else
                    pulse_sha256_many(m, data, len, digests);
                double t = now() - t0;
                if (t < best[form])
                    best[form] = t;
            }
        }
        printf("%4zu KiB messages: one by one %6.0f MB/s, pairs %6.0f MB/s, many %6.0f MB/s (%s)\n",
               pieces[k] >> 10, m * pieces[k] / best[0] / 1e6, m * pieces[k] / best[1] / 1e6,
               m * pieces[k] / best[2] / 1e6, pulse_sha256_lanes16() ? "sixteen lanes" : "pairs");
    }
    free(data);
    free(len);
    free(digests);
    free(buf);
    return 0;
}
