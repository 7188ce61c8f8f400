/* SPDX-License-Identifier: Apache-2.0 */
/* Not a test: MB/s of each SHA-256 implementation and libsodium on a 64 MiB buffer (docs/checkpoints.md). */
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
    free(buf);
    return 0;
}
