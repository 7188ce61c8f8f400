/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256: FIPS 180 vectors on every implementation, each and the two-message form against libsodium on random inputs. */
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
    free(buf);
    free(as);
    return check_done("test_sha256");
}
