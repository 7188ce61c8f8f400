/* SPDX-License-Identifier: Apache-2.0 */
/* State ids: a two-level SHA-256 tree over a checkpoint's tensors, chunks hashed on all cores. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/parallel.h"

/* The exact byte strings hashed are written down in docs/checkpoints.md; any change
 * here is a new version tag. */
static const char TENSOR_TAG[] = "pulse-tensor-v1";
static const char STATE_TAG[] = "pulse-state-v1";

static void put_u64(pulse_sha256_ctx *h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    pulse_sha256_update(h, b, 8);
}

static void put_str(pulse_sha256_ctx *h, const char *s)
{
    size_t n = strlen(s);
    put_u64(h, n);
    pulse_sha256_update(h, s, n);
}

static uint64_t chunks_of(const pulse_tensor *t)
{
    return (t->nbytes + PULSE_STATE_CHUNK - 1) / PULSE_STATE_CHUNK;
}

/* Chunk k of t: its bytes, returns its length. */
static size_t chunk_span(const pulse_tensor *t, uint64_t k, const uint8_t **data)
{
    uint64_t off = k * PULSE_STATE_CHUNK;
    *data = t->data + off;
    return (size_t)(t->nbytes - off < PULSE_STATE_CHUNK ? t->nbytes - off : PULSE_STATE_CHUNK);
}

static void chunk_hash(const pulse_tensor *t, uint64_t k, uint8_t out[32])
{
    const uint8_t *d;
    size_t len = chunk_span(t, k, &d);
    pulse_sha256(d, len, out);
}

void ckpt_tensor_hash_from(const pulse_tensor *t, const uint8_t *chunk_hashes, uint8_t out[32])
{
    pulse_sha256_ctx h;
    pulse_sha256_init(&h);
    pulse_sha256_update(&h, TENSOR_TAG, sizeof TENSOR_TAG - 1);
    put_str(&h, t->name);
    put_str(&h, t->dtype_name);
    put_u64(&h, (uint64_t)t->ndim);
    for (int i = 0; i < t->ndim; i++)
        put_u64(&h, t->shape[i]);
    put_u64(&h, t->nbytes);
    put_u64(&h, chunks_of(t));
    pulse_sha256_update(&h, chunk_hashes, (size_t)chunks_of(t) * 32);
    pulse_sha256_final(&h, out);
}

int pulse_tensor_hash(const pulse_tensor *t, uint8_t out[32])
{
    if (!t || !out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_tensor_hash: bad arguments");
    uint64_t n = chunks_of(t);
    if (n > SIZE_MAX / 32)
        return pulse_fail(PULSE_ERR_LIMIT, "tensor %s: too many chunks", t->name);
    uint8_t *ch = malloc(n ? (size_t)n * 32 : 1);
    if (!ch)
        return pulse_fail(PULSE_ERR_NOMEM, "tensor %s: chunk hashes", t->name);
    for (uint64_t k = 0; k < n; k++)
        chunk_hash(t, k, ch + k * 32);
    ckpt_tensor_hash_from(t, ch, out);
    free(ch);
    return 0;
}

int ckpt_chunk_ids_open(ckpt_chunk_ids *ids, const pulse_ckpt *c)
{
    memset(ids, 0, sizeof *ids);
    ids->c = c;
    if (!(ids->first = malloc((c->n + 1) * sizeof *ids->first)))
        return pulse_fail(PULSE_ERR_NOMEM, "chunk table");
    uint64_t total = 0;
    for (size_t i = 0; i < c->n; i++) {
        ids->first[i] = total;
        total += chunks_of(&c->t[i]);
    }
    ids->first[c->n] = total;
    ids->total = total;
    if (total > SIZE_MAX / 32 || !(ids->hash = malloc(total ? (size_t)total * 32 : 1))) {
        ckpt_chunk_ids_close(ids);
        return pulse_fail(total > SIZE_MAX / 32 ? PULSE_ERR_LIMIT : PULSE_ERR_NOMEM, "chunk hashes");
    }
    return 0;
}

void ckpt_chunk_ids_close(ckpt_chunk_ids *ids)
{
    free(ids->first);
    free(ids->hash);
    memset(ids, 0, sizeof *ids);
}

size_t ckpt_chunk_owner(const ckpt_chunk_ids *ids, uint64_t g)
{
    size_t lo = 0, hi = ids->c->n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ids->first[mid] <= g)
            lo = mid;
        else
            hi = mid;
    }
    /* empty tensors share their first index with the next one: the one with chunks owns g */
    while (ids->first[lo + 1] <= g)
        lo++;
    return lo;
}

size_t ckpt_chunk_bytes(const ckpt_chunk_ids *ids, uint64_t g, size_t *tensor, const uint8_t **data)
{
    size_t t = ckpt_chunk_owner(ids, g);
    *tensor = t;
    return chunk_span(&ids->c->t[t], g - ids->first[t], data);
}

void ckpt_state_of_hashes(size_t n, const uint8_t (*hashes)[32], uint8_t out[PULSE_STATE_ID_BYTES])
{
    pulse_sha256_ctx h;
    pulse_sha256_init(&h);
    pulse_sha256_update(&h, STATE_TAG, sizeof STATE_TAG - 1);
    put_u64(&h, n);
    for (size_t i = 0; i < n; i++)
        pulse_sha256_update(&h, hashes[i], 32);
    pulse_sha256_final(&h, out);
}

void ckpt_chunk_ids_state(const ckpt_chunk_ids *ids, uint8_t out[PULSE_STATE_ID_BYTES], uint8_t *tensor_hashes)
{
    const pulse_ckpt *c = ids->c;
    pulse_sha256_ctx h;
    pulse_sha256_init(&h);
    pulse_sha256_update(&h, STATE_TAG, sizeof STATE_TAG - 1);
    put_u64(&h, c->n);
    for (size_t i = 0; i < c->n; i++) {
        uint8_t th[32];
        ckpt_tensor_hash_from(&c->t[i], ids->hash[ids->first[i]], th);
        pulse_sha256_update(&h, th, 32);
        if (tensor_hashes)
            memcpy(tensor_hashes + i * 32, th, 32);
    }
    pulse_sha256_final(&h, out);
}

void ckpt_chunk_ids_hash_run(ckpt_chunk_ids *ids, uint64_t g, size_t n)
{
    const void *data[CKPT_CHUNKS_A_RUN];
    size_t len[CKPT_CHUNKS_A_RUN];
    while (n > 0) {
        size_t m = n < CKPT_CHUNKS_A_RUN ? n : CKPT_CHUNKS_A_RUN;
        for (size_t i = 0; i < m; i++) {
            size_t t;
            const uint8_t *d;
            len[i] = ckpt_chunk_bytes(ids, g + i, &t, &d);
            data[i] = d;
        }
        pulse_sha256_many(m, data, len, ids->hash + g);
        g += m;
        n -= m;
    }
}

/* Job p hashes global chunks CKPT_CHUNKS_A_RUN * p onwards, all at once. */
static int hash_chunk_group(void *ctx, size_t p)
{
    ckpt_chunk_ids *ids = ctx;
    uint64_t g = CKPT_CHUNKS_A_RUN * (uint64_t)p;
    ckpt_chunk_ids_hash_run(ids, g, ids->total - g < CKPT_CHUNKS_A_RUN ? (size_t)(ids->total - g) : CKPT_CHUNKS_A_RUN);
    return 0;
}

int pulse_ckpt_state_id(const pulse_ckpt *c, int threads, uint8_t out[PULSE_STATE_ID_BYTES])
{
    return ckpt_state_id_tensors(c, threads, out, NULL);
}

int ckpt_state_id_tensors(const pulse_ckpt *c, int threads, uint8_t out[PULSE_STATE_ID_BYTES],
                          uint8_t *tensor_hashes)
{
    if (!c || !out || threads < 0)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_ckpt_state_id: bad arguments");
    ckpt_chunk_ids ids;
    int r = ckpt_chunk_ids_open(&ids, c);
    if (r)
        return r;
    size_t groups = (size_t)((ids.total + CKPT_CHUNKS_A_RUN - 1) / CKPT_CHUNKS_A_RUN);
    r = groups ? pulse_parallel_for(groups, threads, hash_chunk_group, &ids) : 0;
    if (!r)
        ckpt_chunk_ids_state(&ids, out, tensor_hashes);
    ckpt_chunk_ids_close(&ids);
    return r;
}

char *pulse_id_hex(const uint8_t id[32], char buf[65])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        buf[2 * i] = hex[id[i] >> 4];
        buf[2 * i + 1] = hex[id[i] & 15];
    }
    buf[64] = '\0';
    return buf;
}

static int hexdigit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int pulse_id_parse(const char *hex, uint8_t id[32])
{
    if (!hex || !id)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_id_parse: bad arguments");
    uint8_t tmp[32];
    for (int i = 0; i < 32; i++) {
        int a = hexdigit(hex[2 * i]), b = a < 0 ? -1 : hexdigit(hex[2 * i + 1]);
        if (a < 0 || b < 0)
            return pulse_fail(PULSE_ERR_FORMAT, "id \"%.70s\" is not 64 hex digits", hex);
        tmp[i] = (uint8_t)(a << 4 | b);
    }
    if (hex[64] != '\0')
        return pulse_fail(PULSE_ERR_FORMAT, "id \"%.70s\" is not 64 hex digits", hex);
    memcpy(id, tmp, 32);
    return 0;
}
