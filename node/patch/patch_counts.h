/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: how often each 64-bit key occurs, the symbol frequencies behind `pulse inspect`'s entropy bounds. */
#ifndef PULSE_NODE_PATCH_COUNTS_H
#define PULSE_NODE_PATCH_COUNTS_H

#include <stddef.h>
#include <stdint.h>

/* Open addressing, key + 1 stored (0 = an empty slot), grown at half load. Start from
 * { 0 }; every key but UINT64_MAX can be counted. */
typedef struct patch_counts {
    uint64_t *key;      /* key + 1 per slot; 0 = empty */
    uint64_t *cnt;
    size_t cap, used;
    uint64_t total;     /* sum of every count */
} patch_counts;

/* The slow path of patch_counts_add_n: grows the table (or refuses UINT64_MAX), then counts. */
int patch_counts_add_grown(patch_counts *h, uint64_t key, uint64_t n);

static inline size_t patch_counts_slot(uint64_t stored, size_t cap)
{
    return (size_t)((stored * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

/* Counts key n times. Inline: callers count once per decoded symbol. */
static inline int patch_counts_add_n(patch_counts *h, uint64_t key, uint64_t n)
{
    if (key == UINT64_MAX || 2 * (h->used + 1) > h->cap)
        return patch_counts_add_grown(h, key, n);
    const uint64_t k = key + 1;
    size_t j = patch_counts_slot(k, h->cap);
    while (h->key[j] && h->key[j] != k)
        j = (j + 1) & (h->cap - 1);
    if (!h->key[j]) {
        h->key[j] = k;
        h->used++;
    }
    h->cnt[j] += n;
    h->total += n;
    return 0;
}

static inline int patch_counts_add(patch_counts *h, uint64_t key) { return patch_counts_add_n(h, key, 1); }

/* Adds src's counts into dst, each key raised by key_offset on the way. */
int patch_counts_merge(patch_counts *dst, const patch_counts *src, uint64_t key_offset);

/* Visits the keys in no particular order: size_t at = 0; while (patch_counts_next(h, &at, &key, &count)) ...
 * Returns 0 when none is left. */
int patch_counts_next(const patch_counts *h, size_t *at, uint64_t *key, uint64_t *count);

/* Sum over keys of count x log2(total / count): total x the order-0 entropy, in bits. */
double patch_counts_bits(const patch_counts *h);

/* Frees the table and leaves it as { 0 }. */
void patch_counts_free(patch_counts *h);

#endif
