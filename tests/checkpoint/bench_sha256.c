/* SPDX-License-Identifier: Apache-2.0 */
/* Not a test: MB/s of each SHA-256 implementation, OpenSSL's EVP and libsodium on a 64 MiB buffer and on single messages of 64 B..16 MiB (all in turn, best of five), and of the two- and many-message forms on it cut into pieces (docs/checkpoints.md, docs/architecture.md). */
#include <openssl/evp.h>
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

static EVP_MD *evp_md;
static EVP_MD_CTX *evp_ctx;

static void own(const void *p, size_t n, uint8_t out[32])
{
    pulse_sha256(p, n, out);
}

/* EVP as a caller would use it at its fastest: the algorithm fetched once, one context reused. */
static void evp(const void *p, size_t n, uint8_t out[32])
{
    if (!EVP_DigestInit_ex2(evp_ctx, evp_md, NULL) || !EVP_DigestUpdate(evp_ctx, p, n) ||
        !EVP_DigestFinal_ex(evp_ctx, out, NULL))
        abort();
}

/* EVP_Digest: one call, the algorithm looked up each time. */
static void evp_oneshot(const void *p, size_t n, uint8_t out[32])
{
    if (!EVP_Digest(p, n, out, NULL, EVP_sha256(), NULL))
        abort();
}

static void sodium(const void *p, size_t n, uint8_t out[32])
{
    crypto_hash_sha256(out, p, n);
}

/* Single messages of each size, every implementation in turn within each of five rounds (so
 * that a busy neighbour slows them alike), 16 MiB (or four big messages) hashed per measure. */
static void single_messages(const uint8_t *buf, size_t n)
{
    void (*fn[])(const void *, size_t, uint8_t *) = { own, evp, evp_oneshot, sodium };
    const char *name[] = { "pulse_sha256", "EVP (ctx reused)", "EVP_Digest", "libsodium" };
    static const size_t sizes[] = { 64, 256, 1024, 4096, 1 << 20, 16 << 20 };
    enum { NF = 4, NS = sizeof sizes / sizeof sizes[0] };
    double best[NS][NF];
    uint8_t out[32];
    for (size_t i = 0; i < NS; i++)
        for (int k = 0; k < NF; k++)
            best[i][k] = 1e9;
    for (int round = 0; round < 5; round++)
        for (size_t i = 0; i < NS && sizes[i] <= n; i++)
            for (int k = 0; k < NF; k++) {
                size_t m = sizes[i] >= (1u << 20) ? 4 : (16u << 20) / sizes[i];
                double t0 = now();
                for (size_t j = 0; j < m; j++)
                    fn[k](buf + (j * 4096) % (n - sizes[i] + 1), sizes[i], out);
                double t = (now() - t0) / (double)m;
                if (t < best[i][k])
                    best[i][k] = t;
            }
    printf("single messages (%s):\n%-9s", pulse_sha256_impl(), "bytes");
    for (int k = 0; k < NF; k++)
        printf(" %18s", name[k]);
    printf("\n");
    for (size_t i = 0; i < NS && sizes[i] <= n; i++) {
        printf("%-9zu", sizes[i]);
        for (int k = 0; k < NF; k++)
            if (sizes[i] <= 4096)
                printf(" %6.0f ns %5.0f MB/s", best[i][k] * 1e9, sizes[i] / best[i][k] / 1e6);
            else
                printf(" %13.0f MB/s", sizes[i] / best[i][k] / 1e6);
        printf("\n");
    }
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    size_t n = mib << 20;
    unsigned char *buf = malloc(n), out[32];
    if (!buf || sodium_init() < 0)
        return 1;
    memset(buf, 0x5a, n);
    evp_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    evp_ctx = EVP_MD_CTX_new();
    if (!evp_md || !evp_ctx)
        return 1;
    single_messages(buf, n);
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
        double best[4] = { 1e9, 1e9, 1e9, 1e9 };
        for (int rep = 0; rep < 3; rep++) {
            for (int form = 0; form < 4; form++) {
                double t0 = now();
                if (form == 0)
                    for (size_t i = 0; i < m; i++)
                        pulse_sha256(data[i], len[i], digests[i]);
                else if (form == 1)
                    for (size_t i = 0; i + 1 < m; i += 2)
                        pulse_sha256_x2(data[i], len[i], data[i + 1], len[i + 1], digests[i], digests[i + 1]);
                else if (form == 2)
                    pulse_sha256_many(m, data, len, digests);
                else
                    for (size_t i = 0; i < m; i++)
                        evp(data[i], len[i], digests[i]);
                double t = now() - t0;
                if (t < best[form])
                    best[form] = t;
            }
        }
        printf("%4zu KiB messages: one by one %6.0f MB/s, pairs %6.0f MB/s, many %6.0f MB/s (%s), "
               "EVP one by one %6.0f MB/s\n",
               pieces[k] >> 10, m * pieces[k] / best[0] / 1e6, m * pieces[k] / best[1] / 1e6,
               m * pieces[k] / best[2] / 1e6, pulse_sha256_many_uses_lanes() ? "sixteen lanes" : pulse_sha256_x4() ? "fours" : "one by one",
               m * pieces[k] / best[3] / 1e6);
    }
    free(data);
    free(len);
    free(digests);
    free(buf);
    EVP_MD_CTX_free(evp_ctx);
    EVP_MD_free(evp_md);
    return 0;
}
