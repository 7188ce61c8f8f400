/* SPDX-License-Identifier: Apache-2.0 */
/* Apply's pass 1 checks (digest, frames, gaps, values) keeping each element-wise chunk's decompressed streams in a capped arena, and pass 2's writes from them. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/env_bytes.h"
#include "base/fail.h"
#include "node/patch/patch_internal.h"

/* ---- the arena ----------------------------------------------------------------------- */

/* The process keeps one arena between applies: in a long-running node every apply would
 * otherwise touch fresh pages again (a page fault and a zeroed page each; ~15 us a page in
 * the VMs measured in docs/performance.md). Used by one apply at a time; a concurrent apply
 * maps its own for the call. */
static atomic_flag kept_busy = ATOMIC_FLAG_INIT;
static uint8_t *kept_mem;   /* guarded by kept_busy */
static size_t kept_cap;

/* Huge pages where the kernel gives them on request (THP "madvise" mode): one fault per
 * 2 MiB instead of one per 4 KiB page the first time the arena is filled, and fewer TLB
 * misses in both passes. Resident memory then grows by 2 MiB steps, still within the cap. */
#define ARENA_ALIGN (2u << 20)

static uint8_t *map_arena(size_t cap)
{
    /* Untouched pages cost nothing: only what the chunks fill becomes resident. The
     * mapping is cap rounded up to the alignment, so that every huge page lies inside it. */
    size_t len = (cap + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    uint8_t *m = mmap(NULL, len + ARENA_ALIGN, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)m + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    if (a + len < m + len + ARENA_ALIGN)
        munmap(a + len, (size_t)(m + len + ARENA_ALIGN - (a + len)));
#ifdef MADV_HUGEPAGE
    (void)madvise(a, len, MADV_HUGEPAGE);   /* a hint: refused or ignored, small pages */
#endif
    return a;
}

static void unmap_arena(uint8_t *a, size_t cap)
{
    munmap(a, (cap + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1));
}

int patch_cache_open(patch_cache *cache, const pulse_patch *p)
{
    memset(cache, 0, sizeof *cache);
    atomic_init(&cache->used, 0);
    size_t cap = pulse_env_bytes("PULSE_APPLY_CACHE", PATCH_CACHE_CAP, PATCH_CACHE_MOST);
    if (!cap || !p->nchunks)
        return 0;
    cache->ent = calloc(p->nchunks, sizeof *cache->ent);
    if (!cache->ent)
        return pulse_fail(PULSE_ERR_NOMEM, "apply cache entries (%zu chunks)", p->nchunks);
    cache->nent = p->nchunks;
    cache->cap = cap;
    if (!atomic_flag_test_and_set(&kept_busy)) {
        if (kept_mem && kept_cap != cap) {
            unmap_arena(kept_mem, kept_cap);
            kept_mem = NULL;
        }
        if (!kept_mem && (kept_mem = map_arena(cap)) != NULL)
            kept_cap = cap;
        if (kept_mem) {
            cache->mem = kept_mem;
            cache->kept = 1;
            return 0;
        }
        atomic_flag_clear(&kept_busy);
    }
    /* Busy (another apply holds it) or unmappable: a private arena, or no cache at all. */
    cache->mem = map_arena(cap);
    return 0;
}

void patch_cache_close(patch_cache *cache)
{
    free(cache->ent);
    if (cache->kept)
        atomic_flag_clear(&kept_busy);
    else if (cache->mem)
        unmap_arena(cache->mem, cache->cap);
    memset(cache, 0, sizeof *cache);
}

void patch_cache_release(void)
{
    if (atomic_flag_test_and_set(&kept_busy))
        return;   /* in use: its apply keeps it */
    if (kept_mem)
        unmap_arena(kept_mem, kept_cap);
    kept_mem = NULL;
    kept_cap = 0;
    atomic_flag_clear(&kept_busy);
}

size_t patch_cache_reserve(patch_cache *cache, size_t n)
{
    if (!cache || !cache->mem)
        return SIZE_MAX;
    size_t used = atomic_load_explicit(&cache->used, memory_order_relaxed);
    do {
        if (n > cache->cap - used)
            return SIZE_MAX;
    } while (!atomic_compare_exchange_weak_explicit(&cache->used, &used, used + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return used;
}

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* ---- pass 1: checks -------------------------------------------------------------------- */

/* Set bits of x (no POPCNT instruction in the generic build). */
static unsigned popcount64(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
}
/* The checks patch_unpack_ulp makes for 16-bit values in 2-bit symbols (the common chunk),
 * without expanding them: as many escapes in the stream as symbols 3 among the k symbols,
 * each in range (z = e + 4 <= 65535), nothing after them, zero padding. Same errors. */
int patch_ulp2_check16(const patch_tensor *t, const patch_chunk *c, const uint8_t *packed, size_t k,
                       const uint8_t *esc, size_t elen)
{
    size_t full = k / 4, i = 0, nesc = 0;
    for (; i + 8 <= full; i += 8) {
        uint64_t w;
        memcpy(&w, packed + i, 8);
        nesc += popcount64(w & (w >> 1) & 0x5555555555555555ull);
    }
    for (; i < full; i++)
        nesc += popcount64(packed[i] & (packed[i] >> 1) & 0x55u);
    if (k % 4) {
        unsigned b = packed[full] & ((1u << (2 * (k % 4))) - 1);
        nesc += popcount64(b & (b >> 1) & 0x55u);
    }
    const pulse_kernels *kn = pulse_kernels_get();
    size_t at = 0, e = 0;
    while (e < nesc) {
        /* Runs of one-byte escapes (z < 132, always in range: nearly all of them) at once. */
        uint64_t unused = 0;
        size_t avail = elen - at < nesc - e ? elen - at : nesc - e;
        size_t r = kn->leb1_run(esc + at, avail, &unused);
        at += r;
        e += r;
        if (e == nesc)
            break;
        uint32_t v;
        if (pulse_leb_get(esc, elen, &at, &v) < 0 || v > 0xffffu - 4)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: escape stream short, overlong or out of range",
                              t->name, (unsigned long long)c->index);
        e++;
    }
    if (at != elen)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %zu stray bytes in the escape stream",
                          t->name, (unsigned long long)c->index, elen - at);
    if ((k * 2) % 8 && (packed[(k * 2) / 8] >> ((k * 2) % 8)))
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: nonzero padding after the last symbol",
                          t->name, (unsigned long long)c->index);
    return 0;
}

/* Whether pass 1 keeps chunk c's streams (element-wise, ulp or abs): opaque chunks are
 * decoded as the decoder always does. */
static int cached_kind(const pulse_patch *p, const patch_chunk *c)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    return t->dtype != PULSE_DT_OPAQUE && t->unit != 0 && t->unit <= 4;
}

/* Room for a probed position stream's gaps in the arena: exactly the declared bytes of a zstd
 * frame; for Rice the most they can take plus the decoder's 64 bytes of slack. */
static size_t gap_room(const patch_pos *pp)
{
    return align8(pp->coding == PATCH_POS_ZSTD ? pp->glen : pp->glen + 64);
}

void patch_cache_keep(patch_cache *cache, size_t i, size_t off, size_t groom, size_t glen, size_t plen, size_t elen,
                      unsigned bits)
{
    patch_cache_entry *e = &cache->ent[i];
    e->off = off;
    e->groom = (uint32_t)groom;
    e->glen = (uint32_t)glen;
    e->plen = (uint32_t)plen;
    e->elen = (uint32_t)elen;
    e->bits = (uint8_t)bits;
    e->cached = 1;
}

/* Pass 1 for an abs chunk i whose bytes' digest was checked: the position stream and the
 * `unit` byte planes of the values (exactly k bytes each, nothing after them), sized first as
 * patch_decode_chunk sizes them, decompressed into the cache while it has room (entry bits 0:
 * planes after the gaps' room, plen = unit * k) and the gaps checked there. */
static int check_abs_bytes(const pulse_patch *p, size_t i, const uint8_t *bytes, patch_scratch *s, patch_cache *cache)
{
    const patch_chunk *c = &p->chunks[i];
    const patch_tensor *t = &p->tensors[c->tensor];
    const size_t k = c->count, unit = t->unit;
    size_t glen, got;
    patch_pos pp;
    int err = patch_pos_probe(p, c, bytes, &pp);
    if (err)
        return err;
    int64_t fv[4];
    const uint8_t *v = bytes + c->pos_len;
    size_t left = c->val_len;
    for (size_t b = 0; b < unit; b++) {
        if ((fv[b] = patch_frame_probe(t, c, "value", v, left, k, k, &got)) < 0)
            return (int)fv[b];
        v += fv[b];
        left -= (size_t)fv[b];
    }
    if (left != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in value stream",
                          t->name, (unsigned long long)c->index);
    size_t gsz = gap_room(&pp), off = patch_cache_reserve(cache, gsz + align8(unit * k));
    uint8_t *g = off != SIZE_MAX ? cache->mem + off : s->leb;
    uint8_t *planes = off != SIZE_MAX ? g + gsz : s->planes;
    err = patch_pos_decode(s, p, c, &pp, g, &glen, 1);
    v = bytes + c->pos_len;
    for (size_t b = 0; !err && b < unit; b++) {
        err = patch_frame_unzstd(s, t, c, "value", v, (size_t)fv[b], planes + b * k, k);
        v += fv[b];
    }
    if (err)
        return err;
    if (off != SIZE_MAX)
        patch_cache_keep(cache, i, off, gsz, glen, unit * k, 0, 0);
    return 0;
}

/* Pass 1 for a ulp chunk i whose bytes' digest was checked: the frames sized first (bounded
 * as in patch_decode_chunk, so that the room they need is known before anything is
 * decompressed), the streams decompressed into the cache while it has room (cache may be
 * NULL), else into the scratch buffers, and checked there; *out says where they are. */
static int check_ulp_bytes(const pulse_patch *p, size_t i, const uint8_t *bytes, patch_scratch *s, patch_cache *cache,
                           patch_ulp_streams *out)
{
    const patch_chunk *c = &p->chunks[i];
    const patch_tensor *t = &p->tensors[c->tensor];
    int err;
    const size_t k = c->count;
    size_t glen, plen, pcs, elen = 0;
    patch_pos pp;
    if ((err = patch_pos_probe(p, c, bytes, &pp)) != 0)
        return err;
    const uint8_t *v = bytes + c->pos_len;
    size_t left = c->val_len;
    unsigned bits = 0;
    int bad = patch_ulp_bits(t, c, &v, &left, &bits);
    if (bad)
        return bad;
    plen = (k * bits + 7) / 8;
    int64_t fv = patch_frame_probe(t, c, "value", v, left, plen, plen, &pcs), fe = 0;
    if (fv < 0)
        return (int)fv;
    if (left > (size_t)fv) {
        fe = patch_frame_probe(t, c, "escape", v + fv, left - (size_t)fv, 1, k * PATCH_LEB_MAX, &elen);
        if (fe < 0)
            return (int)fe;
        if ((uint64_t)fe != left - (size_t)fv)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in value stream",
                              t->name, (unsigned long long)c->index);
    }
    /* Into the cache while it has room, else into the scratch buffers (gaps <= 5k bytes in
     * leb, packed + 4 in planes, escapes <= 5k in gaps: each large enough). */
    size_t gsz = gap_room(&pp), psz = align8(plen + 4);
    size_t off = patch_cache_reserve(cache, gsz + psz + align8(elen));
    uint8_t *g, *pk, *es;
    if (off != SIZE_MAX) {
        g = cache->mem + off;
        pk = g + gsz;
        es = pk + psz;
    } else {
        g = s->leb;
        pk = s->planes;
        es = (uint8_t *)s->gaps;
    }
    if ((err = patch_pos_decode(s, p, c, &pp, g, &glen, 1)) != 0
        || (err = patch_frame_unzstd(s, t, c, "value", v, (size_t)fv, pk, plen)) != 0
        || (elen && (err = patch_frame_unzstd(s, t, c, "escape", v + fv, (size_t)fe, es, elen)) != 0))
        return err;
    memset(pk + plen, 0, 4);   /* pass 2 loads 32 bits of symbols at a time */
    err = t->unit == 2 && bits == 2 ? patch_ulp2_check16(t, c, pk, k, es, elen)
                                    : patch_unpack_ulp(t, c, s, bits, pk, es, elen);
    if (err)
        return err;
    if (off != SIZE_MAX)
        patch_cache_keep(cache, i, off, gsz, glen, plen, elen, bits);
    *out = (patch_ulp_streams){ .gaps = g, .glen = glen, .packed = pk, .esc = es, .elen = elen, .bits = bits };
    return 0;
}

/* Pass 1 for a context-coded chunk i: decoded against base into the cache while it has room
 * (entry bits PATCH_CACHE_CONTEXT: k positions, then k 16-bit values), else into s; base NULL
 * (a verify without the weights): the checks that need no base (patch_ctx_check). */
static int check_context(const pulse_patch *p, size_t i, const uint8_t *bytes, patch_scratch *s, patch_cache *cache,
                         const uint8_t *base)
{
    const patch_chunk *c = &p->chunks[i];
    if (!base)
        return patch_check_context_streams(p, c, bytes);
    const size_t k = c->count, iroom = (k * 4 + 7) & ~(size_t)7, zroom = (k * 2 + 7) & ~(size_t)7;
    size_t off = patch_cache_reserve(cache, iroom + zroom);
    if (off == SIZE_MAX)   /* not kept: the write pass decodes it again, so only check it here */
        return patch_decode_context(p, c, s, bytes, base, s->idx, (uint16_t *)(void *)s->vals, 1);
    uint32_t *idx = (uint32_t *)(void *)(cache->mem + off);
    uint16_t *z = (uint16_t *)(void *)(cache->mem + off + iroom);
    int err = patch_decode_context(p, c, s, bytes, base, idx, z, 0);
    if (err)
        return err;
    patch_cache_keep(cache, i, off, iroom, 0, 0, 0, PATCH_CACHE_CONTEXT);
    return 0;
}

/* Pass 1 for chunk i of a cached kind whose bytes' digest was checked. */
static int check_bytes(const pulse_patch *p, size_t i, const uint8_t *bytes, patch_scratch *s, patch_cache *cache,
                       const pulse_ckpt *base)
{
    patch_ulp_streams unused;
    const patch_chunk *c = &p->chunks[i];
    if (patch_chunk_is_context(p, c, bytes))
        return check_context(p, i, bytes, s, cache, patch_chunk_base(p, c, base));
    return p->values == PULSE_VALUES_ABS ? check_abs_bytes(p, i, bytes, s, cache)
                                         : check_ulp_bytes(p, i, bytes, s, cache, &unused);
}

int patch_check_ulp_streams(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes, patch_scratch *s,
                            patch_ulp_streams *out)
{
    return check_ulp_bytes(p, (size_t)(c - p->chunks), bytes, s, NULL, out);
}

int patch_check_chunk(const pulse_patch *p, size_t i, patch_scratch *s, patch_cache *cache, const pulse_ckpt *base)
{
    const patch_chunk *c = &p->chunks[i];
    if (!cached_kind(p, c))
        return patch_decode_chunk(p, c, s);
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 1, &bytes);
    return err ? err : check_bytes(p, i, bytes, s, cache, base);
}

int patch_check_run(const pulse_patch *p, size_t first, size_t n, patch_scratch *s, patch_cache *cache,
                    const pulse_ckpt *base)
{
    if (n == 1)
        return patch_check_chunk(p, first, s, cache, base);
    const uint8_t *bytes[PATCH_RUN_MOST];
    int err = patch_chunk_bytes_run(p, first, n, s, bytes);
    for (size_t i = 0; !err && i < n; i++)   /* a rare kind kept out of the cache decodes alone */
        err = cached_kind(p, &p->chunks[first + i]) ? check_bytes(p, first + i, bytes[i], s, cache, base)
                                                     : patch_decode_chunk(p, &p->chunks[first + i], s);
    return err;
}

/* ---- pass 2: writes -------------------------------------------------------------------- */

int patch_write_cached_chunk(const pulse_patch *p, size_t i, patch_scratch *s, const patch_cache *cache,
                             uint8_t *dst)
{
    if (!cache || !cache->mem || i >= cache->nent || !cache->ent[i].cached)
        return 1;
    const patch_cache_entry *e = &cache->ent[i];
    const patch_chunk *c = &p->chunks[i];
    const patch_tensor *t = &p->tensors[c->tensor];
    const uint8_t *g = cache->mem + e->off, *pk = g + e->groom, *es = pk + align8((size_t)e->plen + 4);
    const pulse_kernels *kn = pulse_kernels_get();
    if (e->bits == PATCH_CACHE_CONTEXT) {
        /* positions and values decoded against the base in pass 1, before anything was written */
        kn->ulp_apply16((uint16_t *)(void *)dst, (const uint32_t *)(const void *)g, c->count,
                        (const uint16_t *)(const void *)(g + e->groom));
        return 0;
    }
    if (e->bits == 0) {
        /* abs: positions from the kept gaps, values interleaved from their byte planes */
        const size_t k = c->count, unit = t->unit;
        int lr = patch_leb_positions(g, e->glen, k, c->len, s->idx);
        if (lr < 0)
            return patch_gap_error(t, c, lr);
        for (size_t b = 0; b < unit; b++)
            for (size_t j = 0; j < k; j++)
                s->vals[j * unit + b] = pk[b * k + j];
        switch (unit) {
        case 1: kn->scatter8(dst, s->idx, k, s->vals); break;
        case 2: kn->scatter16((uint16_t *)(void *)dst, s->idx, k, (const uint16_t *)(void *)s->vals); break;
        default: kn->scatter32((uint32_t *)(void *)dst, s->idx, k, (const uint32_t *)(void *)s->vals); break;
        }
        return 0;
    }
    if (t->unit == 2 && e->bits == 2) {
        /* the streams passed every check of pass 1 (patch_leb_check, patch_ulp2_check16) and lie
         * in private memory: the kernel checks nothing again */
        pulse_kernels_get()->ulp2_add16((uint16_t *)(void *)dst, g, e->glen, pk, es, c->count);
        return 0;
    }
    /* Other widths and element sizes (rare): expand from the kept streams, then add. */
    int lr = patch_leb_positions(g, e->glen, c->count, c->len, s->idx);
    if (lr < 0)
        return patch_gap_error(t, c, lr);
    int err = patch_unpack_ulp(t, c, s, e->bits, pk, es, e->elen);
    if (err)
        return err;
    switch (t->unit) {
    case 1: kn->ulp_apply8(dst, s->idx, c->count, s->vals); break;
    case 2: kn->ulp_apply16((uint16_t *)(void *)dst, s->idx, c->count, (const uint16_t *)(void *)s->vals); break;
    default: kn->ulp_apply32((uint32_t *)(void *)dst, s->idx, c->count, (const uint32_t *)(void *)s->vals); break;
    }
    return 0;
}
