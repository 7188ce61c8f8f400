/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256: FIPS 180 vectors on every implementation, each and the two-message and many-message forms against libsodium, and the sixteen lanes and every other form against OpenSSL, on random inputs. */
#include <openssl/evp.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "crypto/sha256.h"
#include "pulseweights/checkpoint.h"

static const char *impls[] = { "portable", "sha-ni" };

static void check_vector(const char *impl, const void *msg, size_t len, const char *want_hex)
{
    uint8_t got[32];
    char hex[65];
    if (pulse_sha256_with(impl, msg, len, got) != 0)
        return;
    pulse_id_hex(got, hex);
    if (strcmp(hex, want_hex))
        fprintf(stderr, "%s: length %zu: got %s, want %s\n", impl, len, hex, want_hex);
    CHECK(!strcmp(hex, want_hex));
}

/* OpenSSL's digest: the reference a second, independent library gives. */
static void openssl_sha256(const void *p, size_t n, uint8_t out[32])
{
    unsigned int olen = 0;
    if (!EVP_Digest(p, n, out, &olen, EVP_sha256(), NULL) || olen != 32)
        abort();
}

/* Every form against OpenSSL on random messages of many lengths: 0..300 one by one (every
 * padding case), then random lengths up to 256 KiB (lanes that run for thousands of blocks
 * next to lanes that end at once), at random offsets. pulse_sha256_many is given 1..80 such
 * messages, so the sixteen lanes (where the CPU has them and the mask allows) run full,
 * refill, and hand the last ones to pairs. */
static void against_openssl(void)
{
    enum { BIG = 256 << 10, N = 80 };
    uint8_t *buf = malloc(BIG + 64);
    CHECK(buf != NULL);
    if (!buf)
        return;
    randombytes_buf(buf, BIG + 64);
    int single = 0, split = 0, pairs = 0, many = 0, checked = 0;
    for (int iter = 0; iter < 700; iter++) {
        size_t len = iter <= 300 ? (size_t)iter : iter % 2 ? randombytes_uniform(BIG + 1) : randombytes_uniform(4097);
        const uint8_t *p = buf + randombytes_uniform(64);
        uint8_t want[32], got[32];
        openssl_sha256(p, len, want);
        pulse_sha256(p, len, got);
        single += memcmp(got, want, 32) != 0;
        for (int k = 0; k < 2; k++)
            if (pulse_sha256_with(impls[k], p, len, got) == 0)
                single += memcmp(got, want, 32) != 0;
        pulse_sha256_ctx c;
        pulse_sha256_init(&c);
        for (size_t done = 0, piece; done < len; done += piece) {
            piece = randombytes_uniform(1000);
            piece = piece > len - done ? len - done : piece;
            pulse_sha256_update(&c, p + done, piece);
        }
        pulse_sha256_final(&c, got);
        split += memcmp(got, want, 32) != 0;
        size_t lb = randombytes_uniform(5000);
        uint8_t wb[32], ga[32], gb[32];
        openssl_sha256(buf + 7, lb, wb);
        pulse_sha256_x2(p, len, buf + 7, lb, ga, gb);
        pairs += memcmp(ga, want, 32) != 0;
        pairs += memcmp(gb, wb, 32) != 0;
    }
    const void *md[N];
    size_t ml[N];
    uint8_t mo[N][32];
    for (int iter = 0; iter < 60; iter++) {
        size_t n = 1 + randombytes_uniform(N);
        for (size_t i = 0; i < n; i++) {
            int kind = (int)randombytes_uniform(4);
            ml[i] = kind == 0 ? randombytes_uniform(64) : kind == 1 ? randombytes_uniform(4097)
                  : kind == 2 ? 64 * randombytes_uniform(200) : randombytes_uniform(BIG + 1);
            md[i] = buf + randombytes_uniform(64);
        }
        pulse_sha256_many(n, md, ml, mo);
        for (size_t i = 0; i < n; i++) {
            uint8_t w[32];
            openssl_sha256(md[i], ml[i], w);
            many += memcmp(w, mo[i], 32) != 0;
            checked++;
        }
    }
    printf("against OpenSSL: 700 messages in every form, %d through pulse_sha256_many (%s)\n", checked,
           pulse_sha256_many_uses_lanes() ? "sixteen lanes" : pulse_sha256_x4() ? "fours" : "one by one");
    CHECK_EQ_INT(single, 0);
    CHECK_EQ_INT(split, 0);
    CHECK_EQ_INT(pairs, 0);
    CHECK_EQ_INT(many, 0);
    free(buf);
}

int main(void)
{
    if (sodium_init() < 0)
        return 2;
    printf("dispatch: %s\n", pulse_sha256_impl());
    int have_ni = pulse_sha256_with("sha-ni", "", 0, (uint8_t[32]){ 0 }) == 0;
    printf("sha-ni %savailable on this CPU\n", have_ni ? "" : "NOT ");
    CHECK(pulse_sha256_with("no-such", "", 0, (uint8_t[32]){ 0 }) == -1);
    /* Dispatch: SHA-NI when the CPU has it, unless PULSE_CPU_MASK clears bit 0x8. */
    const char *mask = getenv("PULSE_CPU_MASK");
    int masked = mask && (strtoul(mask, NULL, 16) & 0x8);
    CHECK(!strcmp(pulse_sha256_impl(), have_ni && !masked ? "sha-ni" : "portable"));

    size_t million = 1000000;
    char *as = malloc(million);
    memset(as, 'a', million);
    for (int k = 0; k < 2; k++) {
        const char *i = impls[k];
        check_vector(i, "abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        check_vector(i, "", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        check_vector(i, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
                     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
        check_vector(i, "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                     "klmnopqrlmnopqrsmnopqrstnopqrstu", 112,
                     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
        check_vector(i, as, million, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    }

    /* Random lengths 0..10000 at random offsets, one-shot and split in random pieces. */
    uint8_t *buf = malloc(10000 + 64);
    randombytes_buf(buf, 10000 + 64);
    int mismatches = 0;
    for (int iter = 0; iter < 1500; iter++) {
        size_t len = iter < 200 ? (size_t)iter : randombytes_uniform(10001);
        const uint8_t *p = buf + randombytes_uniform(64);
        uint8_t want[32], got[32];
        crypto_hash_sha256(want, p, len);
        for (int k = 0; k < 2; k++)
            if (pulse_sha256_with(impls[k], p, len, got) == 0 && memcmp(got, want, 32))
                mismatches++;
        pulse_sha256_ctx c;
        pulse_sha256_init(&c);
        size_t done = 0;
        while (done < len) {
            size_t piece = randombytes_uniform(200);
            if (piece > len - done)
                piece = len - done;
            pulse_sha256_update(&c, p + done, piece);
            done += piece;
        }
        pulse_sha256_final(&c, got);
        if (memcmp(got, want, 32))
            mismatches++;
    }
    CHECK_EQ_INT(mismatches, 0);

    /* pulse_sha256_x2 against libsodium: both lengths random (equal, one shorter, either empty,
     * block boundaries), at random offsets, so the interleaved part and each lone tail vary. */
    int x2_mismatches = 0;
    for (int iter = 0; iter < 1500; iter++) {
        size_t la = iter < 130 ? (size_t)iter : randombytes_uniform(10001);
        size_t lb = iter % 3 == 0 ? la : iter % 3 == 1 ? randombytes_uniform(10001) : (size_t)randombytes_uniform(130);
        const uint8_t *pa = buf + randombytes_uniform(64), *pb = buf + randombytes_uniform(64);
        uint8_t wa[32], wb[32], ga[32], gb[32];
        crypto_hash_sha256(wa, pa, la);
        crypto_hash_sha256(wb, pb, lb);
        pulse_sha256_x2(pa, la, pb, lb, ga, gb);
        x2_mismatches += memcmp(ga, wa, 32) != 0;
        x2_mismatches += memcmp(gb, wb, 32) != 0;
    }
    CHECK_EQ_INT(x2_mismatches, 0);
    uint8_t m1[32], m2[32];
    pulse_sha256_x2(as, million, "abc", 3, m1, m2);
    char hex[65];
    CHECK(!strcmp(pulse_id_hex(m1, hex), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    CHECK(!strcmp(pulse_id_hex(m2, hex), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));

    /* The sixteen-lane kernel itself (when this CPU has it, whatever the mask says): random
     * chaining values, a random subset of lanes live, against the portable compression; the
     * lanes outside the mask must come back as they went in. */
    int lanes = pulse_sha256_lanes16_built();
    printf("sixteen lanes %savailable on this CPU; pulse_sha256_many %s them\n", lanes ? "" : "NOT ",
           pulse_sha256_many_uses_lanes() ? "uses" : "does not use");
    int masked16 = mask && (strtoul(mask, NULL, 16) & 0x2);
    CHECK_EQ_INT(pulse_sha256_lanes16(), lanes && !masked16);
    CHECK(!pulse_sha256_many_uses_lanes() || pulse_sha256_lanes16());
    int x16_mismatches = 0;
    for (int iter = 0; lanes && iter < 300; iter++) {
        uint32_t st[8][16], want[16][8];
        const uint8_t *p[16];
        unsigned live = iter == 0 ? 0xffffu : iter == 1 ? 0 : randombytes_uniform(1u << 16);
        size_t nb = iter < 20 ? (size_t)(iter % 4) : randombytes_uniform(6);
        for (int l = 0; l < 16; l++) {
            p[l] = buf + randombytes_uniform(10000 - 6 * 64);
            for (int j = 0; j < 8; j++)
                st[j][l] = want[l][j] = randombytes_random();
            if ((live >> l) & 1)
                pulse_sha256_blocks_c(want[l], p[l], nb);
        }
        pulse_sha256_blocks_x16(st, p, live, nb);
        for (int l = 0; l < 16; l++)
            for (int j = 0; j < 8; j++)
                x16_mismatches += st[j][l] != want[l][j];
    }
    CHECK_EQ_INT(x16_mismatches, 0);

    /* The four-message SHA-NI kernels (each this CPU has, whatever the mask says), likewise. */
    int has_ni = pulse_sha256_with("sha-ni", "", 0, (uint8_t[32]){ 0 }) == 0;
    int evex = pulse_sha256_x4_evex_built(), x4_mismatches = 0;
    CHECK(!evex || has_ni);
    for (int k = 0; has_ni && k < 1 + evex; k++)
        for (int iter = 0; iter < 200; iter++) {
            uint32_t h[4][8], want[4][8];
            const uint8_t *p[4];
            size_t nb = iter < 8 ? (size_t)(iter % 4) : randombytes_uniform(9);
            for (int l = 0; l < 4; l++) {
                p[l] = buf + randombytes_uniform(10000 - 9 * 64);
                for (int j = 0; j < 8; j++)
                    h[l][j] = want[l][j] = randombytes_random();
                pulse_sha256_blocks_c(want[l], p[l], nb);
            }
            (k ? pulse_sha256_blocks_ni_x4_evex : pulse_sha256_blocks_ni_x4)(h, p, nb);
            x4_mismatches += memcmp(h, want, sizeof h) != 0;
        }
    printf("four-message kernels checked: %s\n", !has_ni ? "none (no SHA-NI)" : evex ? "SSE and AVX-512 VL" : "SSE");
    CHECK_EQ_INT(x4_mismatches, 0);

    /* pulse_sha256_many against libsodium: counts around the lanes (0, 1, the thresholds, 16,
     * 17, many more), lengths equal, spread, short (no whole block: 0..63) and at the padding's
     * edges (55, 56, 63, 64, 119, 120), so lanes refill at different steps and the last ones
     * finish in fours and pairs; with the lanes and without, and the mask, when set, without. */
    enum { MANY = 80 };
    const void *md[MANY];
    size_t ml[MANY];
    uint8_t mo[MANY][32];
    static const size_t edges[] = { 0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128 };
    int many_mismatches = 0;
    for (int iter = 0; iter < 400; iter++) {
        size_t n = iter < MANY ? (size_t)iter : randombytes_uniform(MANY + 1);
        int kind = iter % 4;
        size_t common = randombytes_uniform(10001);
        for (size_t i = 0; i < n; i++) {
            ml[i] = kind == 0 ? common
                    : kind == 1 ? randombytes_uniform(10001)
                    : kind == 2 ? edges[randombytes_uniform(sizeof edges / sizeof edges[0])]
                                : (i % 2 ? randombytes_uniform(64) : 1000 + randombytes_uniform(9001));
            md[i] = buf + randombytes_uniform(64);
        }
        for (int lanes = 0; lanes < 2; lanes++) {   /* whichever pulse_sha256_many chose, both ways */
            pulse_sha256_many_with(lanes, n, md, ml, mo);
            for (size_t i = 0; i < n; i++) {
                uint8_t w[32];
                crypto_hash_sha256(w, md[i], ml[i]);
                many_mismatches += memcmp(w, mo[i], 32) != 0;
            }
        }
    }
    CHECK_EQ_INT(many_mismatches, 0);
    against_openssl();
    free(buf);
    free(as);
    return check_done("test_sha256");
}
