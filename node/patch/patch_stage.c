/* SPDX-License-Identifier: Apache-2.0 */
/* Staging a patch beside its target (each chunk's result computed, journalled and hashed as it arrives), then writing it, or replaying its journal. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/checkpoint/filespace.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"
#include "node/patch/patch_stage.h"

/* The journal file: this header, the patch's head, then each coded chunk's part at an offset the
 * head's table fixes (8-byte aligned): a bitmap of the chunk's units (bit i: unit i of the chunk
 * changes), then the new values of the set bits in order, unit bytes each. */
#define JOURNAL_MAGIC "PULSEJN1"
#define JOURNAL_HEADER 64u

enum { STATE_PLAIN = -1, STATE_SHARED = -2 };   /* owner[] values besides a coded chunk's index */

struct patch_stage {
    const pulse_patch *p;
    const pulse_ckpt *target;
    int jfd;
    uint64_t *joff;              /* per coded chunk: its part's offset in the journal */
    uint64_t jbytes;
    ckpt_chunk_ids ids;          /* the result's state chunks */
    int64_t *owner;              /* per state chunk: the coded chunk whose span holds it, or STATE_* */
    uint64_t *plain;             /* runs of untouched state chunks: first index of each */
    uint8_t *plain_len;          /* and its length (<= CKPT_CHUNKS_A_RUN) */
    size_t nplain;
    atomic_size_t plain_next;    /* the next run to hash */
    int hash;                    /* 0: nothing is hashed (the result is checked after the write) */
    patch_pool pool;
    uint8_t **part;              /* per pool slot: a chunk's journal part (bitmap + values), lazily */
    uint8_t **whole;             /* per pool slot: a state chunk built whole (shared ones), lazily */
};

static uint64_t align8(uint64_t v)
{
    return (v + 7) & ~(uint64_t)7;
}

static size_t bitmap_words(uint32_t len)
{
    return ((size_t)len + 63) / 64;
}

/* Bytes of coded chunk c's journal part. */
static uint64_t part_bytes(const pulse_patch *p, const patch_chunk *c)
{
    return 8 * (uint64_t)bitmap_words(c->len) + align8((uint64_t)c->count * p->tensors[c->tensor].unit);
}

/* The journal's parts after the header and the head, from the head's table alone (staging and
 * replay compute the same offsets). */
static int journal_layout(const pulse_patch *p, uint64_t **joff, uint64_t *total)
{
    uint64_t *o = malloc((p->nchunks ? p->nchunks : 1) * sizeof *o);
    if (!o)
        return pulse_fail(PULSE_ERR_NOMEM, "journal layout (%zu chunks)", p->nchunks);
    uint64_t at = align8(JOURNAL_HEADER + p->header_bytes);
    for (size_t k = 0; k < p->nchunks; k++) {
        o[k] = at;
        at += part_bytes(p, &p->chunks[k]);
    }
    *joff = o;
    *total = at;
    return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
    const uint8_t *b = buf;
    while (n) {
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w <= 0)
            return pulse_fail_errno(PULSE_ERR_IO, "writing the step journal");
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    uint8_t *b = buf;
    while (n) {
        ssize_t r = pread(fd, b, n, (off_t)off);
        if (r <= 0)
            return pulse_fail_errno(r == 0 ? PULSE_ERR_FORMAT : PULSE_ERR_IO, "reading the step journal (%s)",
                                    r == 0 ? "shorter than its layout" : "read");
        b += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Marks the state chunks coded chunk k's span covers: owned when the span holds one whole,
 * shared when it holds part of one (another span may hold the rest). */
static void mark_owner(patch_stage *st, size_t k)
{
    const patch_chunk *c = &st->p->chunks[k];
    const pulse_tensor *t = pulse_ckpt_tensor(st->target, c->tensor);
    const uint64_t unit = st->p->tensors[c->tensor].unit, lo = c->first * unit, hi = lo + (uint64_t)c->len * unit;
    for (uint64_t j = lo / PULSE_STATE_CHUNK; j * PULSE_STATE_CHUNK < hi; j++) {
        uint64_t a = j * PULSE_STATE_CHUNK, b = a + PULSE_STATE_CHUNK < t->nbytes ? a + PULSE_STATE_CHUNK : t->nbytes;
        int64_t *o = &st->owner[st->ids.first[c->tensor] + j];
        *o = lo <= a && b <= hi && *o == STATE_PLAIN ? (int64_t)k : STATE_SHARED;
    }
}

static int plan_plain(patch_stage *st)
{
    size_t cap = (size_t)(st->ids.total / CKPT_CHUNKS_A_RUN) + (size_t)st->ids.total / 2 + 1;
    if (!(st->plain = malloc(cap * sizeof *st->plain)) || !(st->plain_len = malloc(cap)))
        return pulse_fail(PULSE_ERR_NOMEM, "state chunk table");
    for (uint64_t g = 0; g < st->ids.total;) {
        if (st->owner[g] != STATE_PLAIN) {
            g++;
            continue;
        }
        uint64_t e = g;
        while (e < st->ids.total && e - g < CKPT_CHUNKS_A_RUN && st->owner[e] == STATE_PLAIN)
            e++;
        st->plain[st->nplain] = g;
        st->plain_len[st->nplain++] = (uint8_t)(e - g);
        g = e;
    }
    return 0;
}

int patch_stage_open(patch_stage **out, const pulse_patch *p, const pulse_ckpt *target, int journal_fd, int threads,
                     int hash)
{
    *out = NULL;
    int r = patch_check_layout(p, target);
    if (r)
        return r;
    for (size_t i = 0; i < p->ntensors; i++)
        if (p->tensors[i].ncoded && !pulse_ckpt_tensor(target, i)->data)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: the checkpoint holds no data for it", p->tensors[i].name);
    patch_stage *st = calloc(1, sizeof *st);
    if (!st)
        return pulse_fail(PULSE_ERR_NOMEM, "stage");
    st->p = p;
    st->target = target;
    st->jfd = journal_fd;
    st->hash = hash;
    atomic_init(&st->plain_next, 0);
    r = journal_layout(p, &st->joff, &st->jbytes);
    if (!r)
        r = ckpt_chunk_ids_open(&st->ids, target);
    if (!r && !(st->owner = malloc((st->ids.total ? st->ids.total : 1) * sizeof *st->owner)))
        r = pulse_fail(PULSE_ERR_NOMEM, "state chunk table");
    if (!r) {
        for (uint64_t g = 0; g < st->ids.total; g++)
            st->owner[g] = STATE_PLAIN;
        for (size_t k = 0; k < p->nchunks; k++)
            mark_owner(st, k);
        r = plan_plain(st);
    }
    if (!r)
        r = patch_pool_init(&st->pool, threads, p->chunk_elems, 1);
    if (!r && (!(st->part = calloc(st->pool.n, sizeof *st->part)) || !(st->whole = calloc(st->pool.n, sizeof *st->whole))))
        r = pulse_fail(PULSE_ERR_NOMEM, "stage");
    /* the journal's header and the head: replay finds the table there */
    uint8_t h[JOURNAL_HEADER] = { 0 };
    memcpy(h, JOURNAL_MAGIC, 8);
    for (int i = 0; i < 8; i++) {
        h[8 + i] = (uint8_t)(p->header_bytes >> (8 * i));
        h[16 + i] = (uint8_t)(st->jbytes >> (8 * i));
        h[24 + i] = (uint8_t)((p->header_bytes + p->data_len) >> (8 * i));
    }
    /* room for the whole journal first: a full disk is said before a byte of it is written */
    if (!r && (pulse_file_allocate(journal_fd, 0, st->jbytes) != 0 || ftruncate(journal_fd, (off_t)st->jbytes) != 0))
        r = pulse_fail_errno(PULSE_ERR_IO, "no room for the step journal (%llu bytes)", (unsigned long long)st->jbytes);
    if (!r)
        r = pwrite_all(journal_fd, h, sizeof h, 0);
    if (!r)
        r = pwrite_all(journal_fd, p->buf, (size_t)p->header_bytes, JOURNAL_HEADER);
    if (r) {
        patch_stage_close(&st);
        return r;
    }
    *out = st;
    return 0;
}

void patch_stage_close(patch_stage **pst)
{
    if (!pst || !*pst)
        return;
    patch_stage *st = *pst;
    for (size_t i = 0; st->part && i < st->pool.n; i++)
        free(st->part[i]);
    for (size_t i = 0; st->whole && i < st->pool.n; i++)
        free(st->whole[i]);
    free(st->part);
    free(st->whole);
    patch_pool_free(&st->pool);
    free(st->plain);
    free(st->plain_len);
    free(st->owner);
    ckpt_chunk_ids_close(&st->ids);
    free(st->joff);
    free(st);
    *pst = NULL;
}

uint64_t patch_stage_journal_bytes(const patch_stage *st)
{
    return st->jbytes;
}

size_t patch_stage_chunks(const patch_stage *st)
{
    return st->p->nchunks;
}

uint64_t patch_stage_chunk_at(const patch_stage *st, size_t k)
{
    return st->p->header_bytes + st->p->chunks[k].offset;
}

size_t patch_stage_chunk_len(const patch_stage *st, size_t k)
{
    return patch_chunk_coded(&st->p->chunks[k]);
}

size_t patch_stage_chunk_by_offset(const patch_stage *st, size_t i)
{
    return patch_chunk_by_offset(st->p, i);
}

/* The values of the set bits of bitmap (words) from span, unit bytes each, into vals; returns
 * how many. */
static size_t gather_bits(const uint64_t *bits, size_t words, const uint8_t *span, unsigned unit, uint8_t *vals)
{
    size_t n = 0;
    for (size_t w = 0; w < words; w++)
        for (uint64_t b = bits[w]; b; b &= b - 1) {
            size_t i = 64 * w + (size_t)__builtin_ctzll(b);
            switch (unit) {
            case 1: vals[n] = span[i]; break;
            case 2: memcpy(vals + 2 * n, span + 2 * i, 2); break;
            default: memcpy(vals + 4 * n, span + 4 * i, 4); break;
            }
            n++;
        }
    return n;
}

/* Writes the values of the set bits into span (the inverse of gather_bits), at most max of
 * them; returns how many the bitmap has. */
static size_t scatter_bits(const uint64_t *bits, size_t words, uint8_t *span, unsigned unit, const uint8_t *vals,
                           size_t max)
{
    size_t n = 0;
    for (size_t w = 0; w < words; w++)
        for (uint64_t b = bits[w]; b; b &= b - 1, n++) {
            if (n >= max)
                continue;
            size_t i = 64 * w + (size_t)__builtin_ctzll(b);
            switch (unit) {
            case 1: span[i] = vals[n]; break;
            case 2: memcpy(span + 2 * i, vals + 2 * n, 2); break;
            default: memcpy(span + 4 * i, vals + 4 * n, 4); break;
            }
        }
    return n;
}

static uint8_t *slot_part(patch_stage *st, const patch_scratch *s)
{
    size_t i = (size_t)(s - st->pool.slots);
    size_t n = st->p->chunk_elems;
    if (!st->part[i] && !(st->part[i] = malloc(8 * bitmap_words((uint32_t)n) + 4 * (size_t)n + 8)))
        pulse_fail(PULSE_ERR_NOMEM, "journal part of a chunk (%zu elements)", n);
    return st->part[i];
}

/* Chunk c's span of the result into s->dense (the target's span, then the chunk's changes) and
 * its bitmap and values into part. */
static int stage_span(patch_stage *st, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes, uint8_t *part)
{
    const pulse_patch *p = st->p;
    const patch_tensor *t = &p->tensors[c->tensor];
    const unsigned unit = t->unit;
    const uint8_t *base = pulse_ckpt_tensor(st->target, c->tensor)->data + c->first * unit;
    const size_t span = (size_t)c->len * unit, words = bitmap_words(c->len);
    uint64_t *bits = (uint64_t *)(void *)part;
    uint8_t *res = s->dense, *vals = part + 8 * words;
    int err = patch_decode_bytes_base(p, c, s, bytes, base);
    if (err)
        return err;
    memset(bits, 0, 8 * words);
    if (t->dtype == PULSE_DT_OPAQUE) {
        memcpy(res, s->vals, span);   /* the chunk is its span's new bytes */
        for (size_t i = 0; i < span; i++)
            if (res[i] != base[i])
                bits[i / 64] |= (uint64_t)1 << (i % 64);
    } else {
        memcpy(res, base, span);
        patch_chunk_scatter(p, c, s, res);
        for (uint32_t j = 0; j < c->count; j++)
            bits[s->idx[j] / 64] |= (uint64_t)1 << (s->idx[j] % 64);
    }
    size_t n = gather_bits(bits, words, res, unit, vals);
    if (n == c->count)   /* the part's padding to 8 bytes goes to the journal too: no stale heap bytes */
        memset(vals + n * unit, 0, (size_t)(align8((uint64_t)n * unit) - (uint64_t)n * unit));
    if (n != c->count)
        return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s chunk %llu: changes %zu units of the checkpoint, the patch "
                          "says %u (the checkpoint is not the patch's base, or a position repeats)",
                          t->name, (unsigned long long)c->index, n, c->count);
    return 0;
}

int patch_stage_chunk(patch_stage *st, size_t k, const uint8_t *bytes)
{
    const pulse_patch *p = st->p;
    const patch_chunk *c = &p->chunks[k];
    uint8_t digest[32];
    pulse_sha256(bytes, patch_chunk_coded(c), digest);
    if (memcmp(digest, c->digest, 32) != 0)
        return pulse_fail(PULSE_ERR_CORRUPT, "tensor %s chunk %llu: its bytes fail their digest",
                          p->tensors[c->tensor].name, (unsigned long long)c->index);
    int err = 0;
    patch_scratch *s = patch_pool_take(&st->pool, &err);
    if (!s)
        return err;
    uint8_t *part = slot_part(st, s);
    if (!part) {
        patch_pool_give(&st->pool, s);
        return PULSE_ERR_NOMEM;
    }
    err = stage_span(st, c, s, bytes, part);
    if (!err)
        err = pwrite_all(st->jfd, part, (size_t)part_bytes(p, c), st->joff[k]);
    if (!err && st->hash) {
        /* the state chunks this span holds whole, hashed from the span while it is in cache */
        const uint64_t unit = p->tensors[c->tensor].unit, lo = c->first * unit;
        const pulse_tensor *t = pulse_ckpt_tensor(st->target, c->tensor);
        const void *data[16];
        size_t len[16], m = 0;
        uint64_t g0 = 0;
        for (uint64_t j = lo / PULSE_STATE_CHUNK; j * PULSE_STATE_CHUNK < lo + (uint64_t)c->len * unit; j++) {
            uint64_t g = st->ids.first[c->tensor] + j, a = j * PULSE_STATE_CHUNK;
            if (st->owner[g] != (int64_t)k)
                continue;
            if (m == 16 || (m && g != g0 + m)) {
                pulse_sha256_many(m, data, len, st->ids.hash + g0);
                m = 0;
            }
            if (!m)
                g0 = g;
            data[m] = s->dense + (a - lo);
            len[m++] = (size_t)(t->nbytes - a < PULSE_STATE_CHUNK ? t->nbytes - a : PULSE_STATE_CHUNK);
        }
        if (m)
            pulse_sha256_many(m, data, len, st->ids.hash + g0);
    }
    patch_pool_give(&st->pool, s);
    return err;
}

int patch_stage_hash_untouched(patch_stage *st)
{
    if (!st->hash)
        return 0;
    size_t i = atomic_fetch_add(&st->plain_next, 1);
    if (i >= st->nplain)
        return 0;
    ckpt_chunk_ids_hash_run(&st->ids, st->plain[i], st->plain_len[i]);
    return 1;
}

typedef struct finish_job {
    patch_stage *st;
    uint64_t *shared;
    size_t nshared;
    size_t nplain_jobs;
} finish_job;

/* A state chunk several coded chunks share: the target's bytes with each chunk's changes that
 * fall inside it, from the journal parts staging wrote. */
static int hash_shared(patch_stage *st, uint64_t g, patch_scratch *s)
{
    size_t ti = ckpt_chunk_owner(&st->ids, g);
    const pulse_tensor *t = pulse_ckpt_tensor(st->target, ti);
    const patch_tensor *pt = &st->p->tensors[ti];
    const uint64_t a = (g - st->ids.first[ti]) * PULSE_STATE_CHUNK;
    const uint64_t b = t->nbytes - a < PULSE_STATE_CHUNK ? t->nbytes : a + PULSE_STATE_CHUNK;
    uint8_t **whole = &st->whole[s - st->pool.slots], *part = slot_part(st, s);
    if (!*whole && !(*whole = malloc(PULSE_STATE_CHUNK)))
        return pulse_fail(PULSE_ERR_NOMEM, "a state chunk");
    if (!part)
        return PULSE_ERR_NOMEM;
    uint8_t *buf = *whole;
    memcpy(buf, t->data + a, (size_t)(b - a));
    for (size_t k = pt->first_coded; k < pt->first_coded + pt->ncoded; k++) {
        const patch_chunk *c = &st->p->chunks[k];
        const uint64_t lo = c->first * pt->unit, hi = lo + (uint64_t)c->len * pt->unit;
        if (hi <= a || lo >= b)
            continue;
        size_t words = bitmap_words(c->len), pb = (size_t)part_bytes(st->p, c);
        int err = pread_all(st->jfd, part, pb, st->joff[k]);
        if (err)
            return err;
        const uint64_t *bits = (const uint64_t *)(const void *)part;
        const uint8_t *vals = part + 8 * words;
        size_t n = 0;
        for (size_t w = 0; w < words; w++)
            for (uint64_t bb = bits[w]; bb; bb &= bb - 1, n++) {
                uint64_t at = lo + (64 * w + (uint64_t)__builtin_ctzll(bb)) * pt->unit;
                if (at >= a && at < b)
                    memcpy(buf + (at - a), vals + n * pt->unit, pt->unit);
            }
    }
    pulse_sha256(buf, (size_t)(b - a), st->ids.hash[g]);
    return 0;
}

static int finish_one(void *ctx, size_t i)
{
    finish_job *f = ctx;
    if (i < f->nplain_jobs) {
        patch_stage_hash_untouched(f->st);
        return 0;
    }
    int err = 0;
    patch_scratch *s = patch_pool_take(&f->st->pool, &err);
    if (!s)
        return err;
    err = hash_shared(f->st, f->shared[i - f->nplain_jobs], s);
    patch_pool_give(&f->st->pool, s);
    return err;
}

int patch_stage_finish(patch_stage *st, int threads, uint8_t result[32])
{
    if (!st->hash) {
        memset(result, 0, 32);
        return 0;
    }
    finish_job f = { .st = st };
    size_t done = atomic_load(&st->plain_next);
    f.nplain_jobs = done < st->nplain ? st->nplain - done : 0;
    for (uint64_t g = 0; g < st->ids.total; g++)
        f.nshared += st->owner[g] == STATE_SHARED;
    if (f.nshared && !(f.shared = malloc(f.nshared * sizeof *f.shared)))
        return pulse_fail(PULSE_ERR_NOMEM, "shared state chunks");
    for (uint64_t g = 0, n = 0; g < st->ids.total; g++)
        if (st->owner[g] == STATE_SHARED)
            f.shared[n++] = g;
    int err = pulse_parallel_for(f.nplain_jobs + f.nshared, threads, finish_one, &f);
    free(f.shared);
    if (!err)
        ckpt_chunk_ids_state(&st->ids, result, NULL);
    return err;
}

/* ---- the write, and its replay ------------------------------------------------------------ */

typedef struct write_job {
    const pulse_patch *p;
    pulse_ckpt *target;
    patch_populate populate;
    int jfd;
    const uint64_t *joff;
    patch_pool *pool;
    uint8_t **part;
} write_job;

static int write_chunk(void *ctx, size_t k)
{
    write_job *w = ctx;
    const patch_chunk *c = &w->p->chunks[k];
    const unsigned unit = w->p->tensors[c->tensor].unit;
    int err = 0;
    patch_scratch *s = patch_pool_take(w->pool, &err);
    if (!s)
        return err;
    size_t slot = (size_t)(s - w->pool->slots), words = bitmap_words(c->len);
    if (!w->part[slot] && !(w->part[slot] = malloc(8 * bitmap_words(w->p->chunk_elems) + 4 * (size_t)w->p->chunk_elems + 8)))
        err = pulse_fail(PULSE_ERR_NOMEM, "journal part of a chunk");
    uint8_t *part = w->part[slot];
    if (!err)
        err = pread_all(w->jfd, part, (size_t)part_bytes(w->p, c), w->joff[k]);
    if (!err) {
        uint8_t *span = pulse_ckpt_tensor(w->target, c->tensor)->data + c->first * unit;
        const uint64_t *bits = (const uint64_t *)(const void *)part;
        long f0 = patch_populate_begin(&w->populate, span, (size_t)c->len * unit, c->count);
        /* bits past the chunk's end would write past its span: the layout refuses them */
        if (c->len % 64 && (bits[words - 1] >> (c->len % 64)))
            err = pulse_fail(PULSE_ERR_FORMAT, "step journal: chunk %zu marks units past its end", k);
        else if (scatter_bits(bits, words, span, unit, part + 8 * words, c->count) != c->count)
            err = pulse_fail(PULSE_ERR_FORMAT, "step journal: chunk %zu marks another count of changes than its "
                             "patch (%u)", k, c->count);
        patch_populate_end(&w->populate, f0, (size_t)c->len * unit);
    }
    patch_pool_give(w->pool, s);
    return err;
}

static int write_from(const pulse_patch *p, int jfd, const uint64_t *joff, pulse_ckpt *target, int threads)
{
    if (!(target->flags & PULSE_CKPT_WRITE))
        return pulse_fail(PULSE_ERR_INVALID, "the weights were not opened writable");
    patch_pool pool;
    int err = patch_pool_init(&pool, threads, 64, 0);
    if (err)
        return err;
    write_job w = { .p = p, .target = target, .jfd = jfd, .joff = joff, .pool = &pool };
    patch_populate_init(&w.populate);
    if (!(w.part = calloc(pool.n, sizeof *w.part)))
        err = pulse_fail(PULSE_ERR_NOMEM, "stage write");
    if (!err)
        err = pulse_parallel_for(p->nchunks, threads, write_chunk, &w);
    /* last: the header of a target whose tensors are not the result is never touched */
    if (!err && p->metadata && (err = ckpt_set_metadata(target, p->metadata)) != 0)
        err = pulse_fail(err, "writing the result's metadata: %s (the weights were written)", pulse_last_error());
    for (size_t i = 0; w.part && i < pool.n; i++)
        free(w.part[i]);
    free(w.part);
    patch_pool_free(&pool);
    return err;
}

int patch_stage_write(patch_stage *st, pulse_ckpt *target, int threads)
{
    return write_from(st->p, st->jfd, st->joff, target, threads);
}

int patch_stage_replay(int journal_fd, const uint8_t head_digest[32], pulse_ckpt *target, int threads)
{
    uint8_t h[JOURNAL_HEADER];
    int err = pread_all(journal_fd, h, sizeof h, 0);
    if (err)
        return err;
    uint64_t head_len = 0, total = 0, patch_bytes = 0;
    for (int i = 7; i >= 0; i--) {
        head_len = head_len << 8 | h[8 + i];
        total = total << 8 | h[16 + i];
        patch_bytes = patch_bytes << 8 | h[24 + i];
    }
    if (memcmp(h, JOURNAL_MAGIC, 8) != 0 || head_len == 0 || head_len > PATCH_MAX_TABLE + PATCH_HEADER_BYTES + 64)
        return pulse_fail(PULSE_ERR_FORMAT, "step journal: not a journal of a staged step");
    uint8_t *head = malloc((size_t)head_len);
    if (!head)
        return pulse_fail(PULSE_ERR_NOMEM, "step journal: a head of %llu bytes", (unsigned long long)head_len);
    pulse_patch *p = NULL;
    uint64_t *joff = NULL, want = 0;
    uint8_t digest[32];
    err = pread_all(journal_fd, head, (size_t)head_len, JOURNAL_HEADER);
    if (!err) {
        pulse_sha256(head, (size_t)head_len, digest);
        if (memcmp(digest, head_digest, 32) != 0)
            err = pulse_fail(PULSE_ERR_CORRUPT, "step journal: its patch head is not the step's");
    }
    if (!err)
        err = pulse_patch_open_head(&p, head, (size_t)head_len, patch_bytes);
    if (!err)
        err = patch_check_layout(p, target);
    if (!err)
        err = journal_layout(p, &joff, &want);
    if (!err && want != total)
        err = pulse_fail(PULSE_ERR_FORMAT, "step journal: %llu bytes by its header, %llu by its table",
                         (unsigned long long)total, (unsigned long long)want);
    if (!err)
        err = write_from(p, journal_fd, joff, target, threads);
    free(joff);
    pulse_patch_close(&p);
    free(head);
    return err;
}
