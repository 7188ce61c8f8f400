/* SPDX-License-Identifier: Apache-2.0 */
/* A part's tensor hashes: encoded by its publisher, parsed strictly by the committer. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/sync/part_hashes.h"

#define MAGIC "PULSETH1"
#define MAX_NAME 4096u

int part_hashes_encode(size_t n, const char *const *names, const uint8_t (*hashes)[32], uint8_t **out, size_t *len)
{
    size_t total = 16;
    for (size_t i = 0; i < n; i++)
        total += 2 + strlen(names[i]) + 32;
    uint8_t *b = malloc(total), *w = b;
    if (!b)
        return pulse_fail(PULSE_ERR_NOMEM, "tensor hashes of %zu tensors", n);
    memcpy(w, MAGIC, 8);
    for (int k = 0; k < 8; k++)
        w[8 + k] = (uint8_t)((uint64_t)n >> (8 * k));
    w += 16;
    for (size_t i = 0; i < n; i++) {
        const char *nm = names[i];
        size_t l = strlen(nm);
        w[0] = (uint8_t)l;
        w[1] = (uint8_t)(l >> 8);
        memcpy(w + 2, nm, l);
        memcpy(w + 2 + l, hashes[i], 32);
        w += 2 + l + 32;
    }
    *out = b;
    *len = total;
    return 0;
}

void part_hashes_free(part_hashes *h)
{
    for (size_t i = 0; h->name && i < h->n; i++)
        free(h->name[i]);
    free(h->name);
    free(h->hash);
    memset(h, 0, sizeof *h);
}

int part_hashes_parse(const void *bytes, size_t len, part_hashes *out)
{
    const uint8_t *b = bytes, *end = b + len;
    memset(out, 0, sizeof *out);
    if (len < 16 || memcmp(b, MAGIC, 8))
        return pulse_fail(PULSE_ERR_FORMAT, "tensor hashes: not a PULSETH1 object");
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = n << 8 | b[8 + k];
    if (n > (len - 16) / 35)   /* each entry takes at least 2 + 1 + 32 bytes */
        return pulse_fail(PULSE_ERR_FORMAT, "tensor hashes: %llu entries in %zu bytes", (unsigned long long)n, len);
    out->name = calloc(n ? n : 1, sizeof *out->name);
    out->hash = calloc(n ? n : 1, sizeof *out->hash);
    if (!out->name || !out->hash) {
        part_hashes_free(out);
        return pulse_fail(PULSE_ERR_NOMEM, "tensor hashes");
    }
    out->n = (size_t)n;
    const uint8_t *r = b + 16;
    for (size_t i = 0; i < out->n; i++) {
        size_t l = end - r >= 2 ? (size_t)r[0] | (size_t)r[1] << 8 : 0;
        if (l == 0 || l > MAX_NAME || (size_t)(end - r) < 2 + l + 32 || memchr(r + 2, 0, l)) {
            part_hashes_free(out);
            return pulse_fail(PULSE_ERR_FORMAT, "tensor hashes: entry %zu is truncated or malformed", i);
        }
        if (!(out->name[i] = strndup((const char *)r + 2, l))) {
            part_hashes_free(out);
            return pulse_fail(PULSE_ERR_NOMEM, "tensor hashes");
        }
        memcpy(out->hash[i], r + 2 + l, 32);
        if (i && strcmp(out->name[i - 1], out->name[i]) >= 0) {
            int err = pulse_fail(PULSE_ERR_FORMAT, "tensor hashes: %s after %s (names must ascend)", out->name[i],
                                 out->name[i - 1]);
            part_hashes_free(out);
            return err;
        }
        r += 2 + l + 32;
    }
    if (r != end) {
        part_hashes_free(out);
        return pulse_fail(PULSE_ERR_FORMAT, "tensor hashes: %zu bytes after the last entry", (size_t)(end - r));
    }
    return 0;
}

void part_hashes_state(const part_hashes *h, uint8_t out[32])
{
    ckpt_state_of_hashes(h->n, (const uint8_t(*)[32])h->hash, out);
}

long part_hashes_find(const part_hashes *h, const char *name)
{
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(h->name[mid], name);
        if (!c)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}
