/* SPDX-License-Identifier: Apache-2.0 */
/* A counting table of 64-bit keys, shared by `pulse inspect`'s order-0 bound (patch_info.c) and its context bound (patch_context.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/patch/patch_counts.h"

static int grow(patch_counts *h)
{
    size_t cap = h->cap ? h->cap * 2 : 256;
    uint64_t *key = calloc(cap, sizeof *key), *cnt = calloc(cap, sizeof *cnt);
    if (!key || !cnt) {
        free(key);
        free(cnt);
        return pulse_fail(PULSE_ERR_NOMEM, "symbol counts (%zu slots)", cap);
    }
    for (size_t i = 0; i < h->cap; i++) {
        if (!h->key[i])
            continue;
        size_t j = patch_counts_slot(h->key[i], cap);
        while (key[j])
            j = (j + 1) & (cap - 1);
        key[j] = h->key[i];
        cnt[j] = h->cnt[i];
    }
    free(h->key);
    free(h->cnt);
    h->key = key;
    h->cnt = cnt;
    h->cap = cap;
    return 0;
}

int patch_counts_add_grown(patch_counts *h, uint64_t key, uint64_t n)
{
    if (key == UINT64_MAX)   /* key + 1 would be the empty slot's 0 */
        return pulse_fail(PULSE_ERR_INVALID, "symbol counts: key 0x%llx cannot be counted", (unsigned long long)key);
    if (2 * (h->used + 1) > h->cap) {
        int err = grow(h);
        if (err)
            return err;
    }
    return patch_counts_add_n(h, key, n);
}

int patch_counts_merge(patch_counts *dst, const patch_counts *src, uint64_t key_offset)
{
    int err = 0;
    for (size_t i = 0; !err && i < src->cap; i++)
        if (src->key[i])
            err = patch_counts_add_n(dst, src->key[i] - 1 + key_offset, src->cnt[i]);
    return err;
}

int patch_counts_next(const patch_counts *h, size_t *at, uint64_t *key, uint64_t *count)
{
    for (size_t i = *at; i < h->cap; i++)
        if (h->key[i]) {
            *key = h->key[i] - 1;
            *count = h->cnt[i];
            *at = i + 1;
            return 1;
        }
    *at = h->cap;
    return 0;
}

double patch_counts_bits(const patch_counts *h)
{
    double bits = 0, n = (double)h->total;
    for (size_t i = 0; i < h->cap; i++)
        if (h->key[i])
            bits += (double)h->cnt[i] * log2(n / (double)h->cnt[i]);
    return bits;
}

void patch_counts_free(patch_counts *h)
{
    free(h->key);
    free(h->cnt);
    memset(h, 0, sizeof *h);
}
