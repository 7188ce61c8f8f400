/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of patch_counts, the symbol counts behind `pulse inspect`'s bounds: counts and totals through growth, the widest 32-bit symbol, merges with a key offset, each key visited once, the entropy sum, and the one key it refuses. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "pulseweights.h"
#include "node/patch/patch_counts.h"
#include "check.h"

/* Count of key in h, found by visiting every key (each must come once). */
static uint64_t count_of(const patch_counts *h, uint64_t want, int *seen)
{
    uint64_t key, count, found = 0;
    *seen = 0;
    for (size_t at = 0; patch_counts_next(h, &at, &key, &count);)
        if (key == want) {
            found = count;
            (*seen)++;
        }
    return found;
}

int main(void)
{
    patch_counts a = { 0 }, b = { 0 };
    int seen;

    /* Many keys force several doublings; key k counted k % 7 + 1 times. */
    const uint64_t nkeys = 5000;
    uint64_t total = 0;
    for (uint64_t k = 0; k < nkeys; k++) {
        const uint64_t key = k * 0x100000001ull;   /* both halves of the key in use */
        for (uint64_t r = 0; r <= k % 7; r++)
            CHECK_OK(patch_counts_add(&a, key));
        total += k % 7 + 1;
    }
    CHECK_EQ_INT(a.used, nkeys);
    CHECK_EQ_INT(a.total, total);
    CHECK(2 * a.used <= a.cap);
    CHECK_EQ_INT(count_of(&a, 4321 * 0x100000001ull, &seen), 4321 % 7 + 1);
    CHECK_EQ_INT(seen, 1);
    size_t visited = 0;
    uint64_t key, count, sum = 0;
    for (size_t at = 0; patch_counts_next(&a, &at, &key, &count);) {
        visited++;
        sum += count;
    }
    CHECK_EQ_INT(visited, nkeys);
    CHECK_EQ_INT(sum, total);

    /* 0xffffffff, the widest 32-bit symbol (an F32 sign flip's ulp symbol), and 0 are ordinary keys. */
    CHECK_OK(patch_counts_add_n(&b, UINT32_MAX, 3));
    CHECK_OK(patch_counts_add_n(&b, 0, 1));
    CHECK_EQ_INT(count_of(&b, UINT32_MAX, &seen), 3);
    CHECK_EQ_INT(seen, 1);
    CHECK_EQ_INT(count_of(&b, 0, &seen), 1);
    /* 3 x log2(4/3) + 1 x log2(4) */
    CHECK(fabs(patch_counts_bits(&b) - (3 * log2(4.0 / 3) + 2)) < 1e-9);

    /* The one key key + 1 cannot hold: refused, nothing counted. */
    CHECK_ERR(patch_counts_add(&b, UINT64_MAX), PULSE_ERR_INVALID);
    CHECK_EQ_INT(b.total, 4);
    CHECK_EQ_INT(b.used, 2);

    /* Merge with an offset: every key of b lands raised, a's own counts add up. */
    const uint64_t off = (uint64_t)5 << 32;
    CHECK_OK(patch_counts_add_n(&a, UINT32_MAX + off, 2));
    CHECK_OK(patch_counts_merge(&a, &b, off));
    CHECK_EQ_INT(count_of(&a, UINT32_MAX + off, &seen), 5);
    CHECK_EQ_INT(seen, 1);
    CHECK_EQ_INT(count_of(&a, off, &seen), 1);
    CHECK_EQ_INT(a.total, total + 2 + 4);
    CHECK_EQ_INT(count_of(&a, UINT32_MAX, &seen), 0);
    CHECK_EQ_INT(seen, 0);

    /* The order-0 sum of one key is 0, of an empty table 0. */
    patch_counts one = { 0 }, none = { 0 };
    CHECK_OK(patch_counts_add_n(&one, 42, 1000));
    CHECK(patch_counts_bits(&one) == 0);
    CHECK(patch_counts_bits(&none) == 0);
    CHECK(!patch_counts_next(&none, &(size_t){ 0 }, &key, &count));

    patch_counts_free(&a);
    patch_counts_free(&b);
    patch_counts_free(&one);
    CHECK(!a.key && !a.cap && !a.total);
    return check_done("patch-counts");
}
