/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of apply's pass-1 cache: every cap, populate mode, thread count and source writes the same bytes; the cap holds; concurrent applies. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "base/env_bytes.h"
#include "pulseweights.h"
#include "crypto/sha256.h"
#include "pulseweights/patch.h"
#include "node/patch/patch_internal.h"
#include "check.h"

static char dir[256];
static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *path_of(const char *name)
{
    static char buf[8][512];
    static int at;
    char *p = buf[at++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

enum { CH = 4096, NBF = 9 * CH + 77 };

/* Every element-wise width and an opaque tensor. The BF16 tensor has chunks of +-1 (2-bit
 * symbols, a few escapes), +-1..7 (4 or 8 bits), wide differences (8 bits, many escapes),
 * runs of long gaps (multi-byte LEB128), a dense chunk and untouched chunks. */
static const pulse_tensor_spec specs[] = {
    { "a.bf16", "BF16", 1, { NBF } },
    { "b.f32", "F32", 1, { 3 * CH + 5 } },
    { "c.e4m3", "F8_E4M3", 1, { 2 * CH + 1 } },
    { "d.i64", "I64", 1, { 100 } },
};
#define NSPECS (sizeof specs / sizeof specs[0])

static int make_pair(pulse_ckpt **x, pulse_ckpt **y)
{
    int err = pulse_ckpt_create(x, path_of("x.safetensors"), specs, NSPECS, NULL);
    if (!err)
        err = pulse_ckpt_create(y, path_of("y.safetensors"), specs, NSPECS, NULL);
    if (err)
        return err;
    for (size_t t = 0; t < NSPECS; t++) {
        uint8_t *a = pulse_ckpt_tensor(*x, t)->data, *b = pulse_ckpt_tensor(*y, t)->data;
        size_t nb = pulse_ckpt_tensor(*x, t)->nbytes;
        for (size_t i = 0; i < nb; i++)
            a[i] = b[i] = (uint8_t)rnd();
    }
    uint16_t *a0 = (uint16_t *)(void *)pulse_ckpt_tensor(*x, 0)->data;
    uint16_t *a1 = (uint16_t *)(void *)pulse_ckpt_tensor(*y, 0)->data;
    for (unsigned i = 0; i < NBF; i++) {
        unsigned c = i / CH;
        int d = 0;
        switch (c) {
        case 0: d = rnd() % 20 == 0 ? (rnd() % 30 == 0 ? 2 + (int)(rnd() % 300) : 1) : 0; break;
        case 1: d = rnd() % 8 == 0 ? 1 + (int)(rnd() % 7) : 0; break;
        case 2: d = rnd() % 3 == 0 ? 1 + (int)(rnd() % 2000) : 0; break;
        case 3: d = rnd() % 300 == 0 ? 1 : 0; break;              /* gaps >= 128: multi-byte */
        case 4: d = 1 + (rnd() % 50 == 0 ? (int)(rnd() % 9) : 0); break;   /* every element */
        case 5: break;                                              /* untouched */
        case 6: d = rnd() % 2 ? 1 : 0; break;
        default: d = rnd() % 25 == 0 ? (rnd() % 10 == 0 ? 3 : 1) : 0; break;
        }
        a1[i] = (uint16_t)(a0[i] + (rnd() % 2 ? d : -d));
    }
    a0[8 * CH + 1] = 0x8000;   /* the largest zigzag value: d = -32768 */
    a1[8 * CH + 1] = 0x0000;
    uint32_t *f0 = (uint32_t *)(void *)pulse_ckpt_tensor(*x, 1)->data;
    uint32_t *f1 = (uint32_t *)(void *)pulse_ckpt_tensor(*y, 1)->data;
    for (unsigned i = 0; i < 3 * CH + 5; i++)
        if (rnd() % 10 == 0)
            f1[i] = f0[i] + (uint32_t)(rnd() % 4 == 0 ? rnd() % 100000 : 1);
    uint8_t *e0 = pulse_ckpt_tensor(*x, 2)->data, *e1 = pulse_ckpt_tensor(*y, 2)->data;
    for (unsigned i = 0; i < 2 * CH + 1; i++)
        if (rnd() % 7 == 0)
            e1[i] = (uint8_t)(e0[i] + 1 + rnd() % 3);
    pulse_ckpt_tensor(*y, 3)->data[17] ^= 0x5a;
    if ((err = pulse_ckpt_commit(*x)) == 0)
        err = pulse_ckpt_commit(*y);
    return err;
}

static int same_data(const pulse_ckpt *a, const pulse_ckpt *b)
{
    for (size_t i = 0; i < pulse_ckpt_count(a); i++) {
        const pulse_tensor *s = pulse_ckpt_tensor(a, i), *t = pulse_ckpt_tensor(b, i);
        if (s->nbytes != t->nbytes || memcmp(s->data, t->data, s->nbytes))
            return 0;
    }
    return 1;
}

/* Applies p to a fresh copy of x (trusted base, no result check: only the passes run) and
 * compares it with y; with the safe apply too when `safe`. */
static void apply_and_compare(const pulse_patch *p, pulse_ckpt *x, pulse_ckpt *y, int threads, int safe,
                              const char *what)
{
    pulse_ckpt *t = NULL;
    CHECK_OK(pulse_ckpt_create_like(&t, path_of("t.safetensors"), x));
    if (!t)
        return;
    uint8_t idx[32];
    CHECK_OK(pulse_ckpt_state_id(x, 1, idx));
    pulse_patch_apply_opts o;
    pulse_patch_apply_opts_default(&o);
    o.threads = threads;
    o.trust_base_id = idx;
    o.skip_result_check = !safe;
    int err = pulse_patch_apply_ex(p, t, &o);
    CHECK_OK(err);
    int same = same_data(t, y);
    CHECK(same);
    if (err || !same)
        fprintf(stderr, "apply_and_compare: %s, %d threads: %s\n", what, threads, err ? pulse_last_error() : "bytes differ");
    pulse_ckpt_close(&t);
}

/* How many coded chunks pass 1 keeps under the current PULSE_APPLY_CACHE; *ulp gets how
 * many could be kept at all (element-wise chunks, ulp or abs). */
static size_t kept_chunks(const pulse_patch *p, size_t *ulp)
{
    patch_cache c;
    size_t n = 0;
    *ulp = 0;
    for (size_t i = 0; i < p->nchunks; i++)
        *ulp += p->tensors[p->chunks[i].tensor].unit != 0 && p->tensors[p->chunks[i].tensor].dtype != PULSE_DT_OPAQUE;
    if (patch_cache_open(&c, p) != 0)
        return 0;
    CHECK_OK(patch_run_pass1(p, NULL, 2, &c));
    for (size_t i = 0; i < c.nent; i++)
        n += c.ent[i].cached;
    CHECK(atomic_load(&c.used) <= c.cap || !c.mem);
    patch_cache_close(&c);
    return n;
}

static void test_caps(pulse_ckpt *x, pulse_ckpt *y, pulse_value_code v, int from_file)
{
    pulse_diff_opts d;
    pulse_diff_opts_default(&d);
    d.values = v;
    d.chunk_elems = CH;
    d.threads = 2;
    CHECK_OK(pulse_patch_diff(x, y, &d, path_of("xy.patch")));
    pulse_patch *p = NULL;
    if (from_file) {
        CHECK_OK(pulse_patch_open(&p, path_of("xy.patch")));
    } else {
        FILE *f = fopen(path_of("xy.patch"), "rb");
        static uint8_t buf[1 << 20];
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        CHECK(n > 0 && n < sizeof buf);
        CHECK_OK(pulse_patch_open_mem(&p, buf, n));
    }
    if (!p)
        return;
    if (!from_file && v == PULSE_VALUES_ULP) {
        /* The symbol widths the BF16 chunks got: all three, or the test means less. */
        unsigned seen = 0;
        for (size_t i = 0; i < p->nchunks; i++)
            if (p->chunks[i].tensor == 0)
                seen |= p->data[p->chunks[i].offset + p->chunks[i].pos_len];
        CHECK_EQ_INT(seen, 2 | 4 | 8);
    }
    static const char *caps[] = { NULL, "0", "1K", "6K", "20K", "64M", "1G" };
    static const size_t cap_bytes[] = { PATCH_CACHE_CAP, 0, 1024, 6144, 20480, 64u << 20, (size_t)1 << 30 };
    for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++) {
        if (caps[ci])
            setenv("PULSE_APPLY_CACHE", caps[ci], 1);
        else
            unsetenv("PULSE_APPLY_CACHE");
        size_t ulp, kept = kept_chunks(p, &ulp);
        patch_cache c;
        if (patch_cache_open(&c, p) == 0) {
            CHECK_EQ_INT(c.cap, cap_bytes[ci]);   /* the cap asked for, above the default too ("1G") */
            patch_cache_close(&c);
        }
        if (caps[ci] && !strcmp(caps[ci], "0")) {
            CHECK_EQ_INT(kept, 0);
        } else if (caps[ci] && (!strcmp(caps[ci], "1K") || !strcmp(caps[ci], "6K"))) {
            CHECK(kept > 0 && kept < ulp);   /* some kept, the rest decoded again in pass 2 */
        } else if (caps[ci] && !strcmp(caps[ci], "20K") && v == PULSE_VALUES_ABS) {
            CHECK(kept > 0 && kept < ulp);   /* abs streams are larger: 20K holds only some */
        } else {
            CHECK_EQ_INT(kept, ulp);
        }
        static const char *pop[] = { NULL, "0", "1" };
        for (size_t pi = 0; pi < 3; pi++) {
            if (pop[pi])
                setenv("PULSE_APPLY_POPULATE", pop[pi], 1);
            else
                unsetenv("PULSE_APPLY_POPULATE");
            char what[96];
            snprintf(what, sizeof what, "%s %s, cache %s, populate %s", v == PULSE_VALUES_ULP ? "ulp" : "abs",
                     from_file ? "file" : "memory", caps[ci] ? caps[ci] : "default", pop[pi] ? pop[pi] : "auto");
            apply_and_compare(p, x, y, 1, ci == 0, what);
            apply_and_compare(p, x, y, 2, 0, what);
        }
    }
    unsetenv("PULSE_APPLY_CACHE");
    unsetenv("PULSE_APPLY_POPULATE");
    pulse_patch_close(&p);
}

/* The process's arena is used by one apply at a time: a second cache opened meanwhile maps
 * its own; after release the next one maps a new kept arena. */
static void test_kept_arena(pulse_ckpt *x, pulse_ckpt *y)
{
    pulse_diff_opts d;
    pulse_diff_opts_default(&d);
    d.chunk_elems = CH;
    CHECK_OK(pulse_patch_diff(x, y, &d, path_of("k.patch")));
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of("k.patch")));
    if (p) {
        patch_cache c1, c2;
        CHECK_OK(patch_cache_open(&c1, p));
        CHECK_OK(patch_cache_open(&c2, p));
        CHECK(c1.kept && c1.mem);
        CHECK(!c2.kept && c2.mem && c2.mem != c1.mem);
        uint8_t *m1 = c1.mem;
        patch_cache_close(&c2);
        patch_cache_close(&c1);
        CHECK_OK(patch_cache_open(&c1, p));
        CHECK(c1.kept && c1.mem == m1);   /* the same pages again */
        patch_cache_close(&c1);
        patch_apply_release();
        CHECK_OK(patch_cache_open(&c1, p));
        CHECK(c1.kept && c1.mem);
        patch_cache_close(&c1);
    }
    pulse_patch_close(&p);
}

typedef struct conc_arg {
    const pulse_patch *p;
    pulse_ckpt *x;
    const char *name;
    int err, same;
    pulse_ckpt *y;
} conc_arg;

static void *conc_apply(void *v)
{
    conc_arg *a = v;
    pulse_ckpt *t = NULL;
    a->err = pulse_ckpt_create_like(&t, a->name, a->x);
    for (int r = 0; !a->err && r < 20; r++) {
        /* each round from a fresh copy of x, hashed before and after (the safe apply) */
        for (size_t i = 0; i < pulse_ckpt_count(t); i++)
            memcpy(pulse_ckpt_tensor(t, i)->data, pulse_ckpt_tensor(a->x, i)->data, pulse_ckpt_tensor(t, i)->nbytes);
        a->err = pulse_patch_apply(a->p, t, 1);
        a->same = !a->err && same_data(t, a->y);
        if (!a->same)
            break;
    }
    pulse_ckpt_close(&t);
    return NULL;
}

/* Applies from three threads at once (one holds the kept arena and pool, the others map
 * their own): every result is right. */
static void test_concurrent(pulse_ckpt *x, pulse_ckpt *y)
{
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of("k.patch")));
    if (!p)
        return;
    pthread_t th[3];
    conc_arg args[3];
    static const char *names[3] = { "c0.safetensors", "c1.safetensors", "c2.safetensors" };
    for (int i = 0; i < 3; i++) {
        args[i] = (conc_arg){ .p = p, .x = x, .y = y, .name = path_of(names[i]) };
        CHECK(pthread_create(&th[i], NULL, conc_apply, &args[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK_OK(args[i].err);
        CHECK(args[i].same);
    }
    pulse_patch_close(&p);
}

/* ---- random crafted chunks: pass 1's checks against the decoder's ------------------- */

enum { RL = 64, RCH = 400 };   /* elements per chunk, chunks per tensor */

static size_t leb_put(uint8_t *o, uint32_t v, int overlong)
{
    size_t n = 0;
    while (v >= 0x80) {
        o[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    if (overlong && n < 3) {   /* the same value with a redundant zero group */
        o[n++] = (uint8_t)(v | 0x80);
        v = 0;
    }
    o[n++] = (uint8_t)v;
    return n;
}

static void put_frame(patch_out_chunk *oc, size_t *at, const uint8_t *src, size_t n)
{
    *at += ZSTD_compress(oc->bytes + *at, ZSTD_compressBound(n) + 64, src, n, 1);
}

/* The Rice planes of gaps g[0..k) at shift sh (docs/patch-format.md), bit by bit, to o;
 * returns the bytes. */
static size_t rice_put(const uint32_t *g, size_t k, unsigned sh, uint8_t *o)
{
    size_t rb = (k * sh + 7) / 8, bit = 0;
    memset(o, 0, rb);
    for (size_t j = 0; j < k; j++)
        for (unsigned b = 0; b < sh; b++, bit++)
            if (g[j] >> b & 1)
                o[bit >> 3] |= (uint8_t)(1u << (bit & 7));
    uint8_t *u = o + rb;
    bit = 0;
    for (size_t j = 0; j < k; j++) {
        for (uint32_t q = g[j] >> sh; q; q--, bit++)
            if (!(bit & 7))
                u[bit >> 3] = 0;
        if (!(bit & 7))
            u[bit >> 3] = 0;
        u[bit >> 3] |= (uint8_t)(1u << (bit & 7));
        bit++;
    }
    return rb + (bit + 7) / 8;
}

/* One chunk of a `unit`-byte tensor: k changes with random positions and zigzag values,
 * positions coded by zstd or Rice, values at a random width; one time in three one stream
 * is damaged in some small way. */
static void random_chunk(unsigned unit, patch_out_chunk *oc)
{
    uint8_t gaps[RL * 6 + 8], packed[RL + 8], esc[RL * 6 + 8];
    size_t k = 1 + rnd() % RL, gl = 0, el = 0;
    uint32_t pos[RL], last = 0;
    size_t chosen = 0;
    for (uint32_t i = 0; i < RL && chosen < k; i++)   /* k positions, ascending */
        if (rnd() % (RL - i) < k - chosen)
            pos[chosen++] = i;
    uint32_t gv[RL];
    for (size_t j = 0; j < k; j++) {
        gv[j] = pos[j] - (j ? last + 1 : 0);
        gl += leb_put(gaps + gl, gv[j], rnd() % 16 == 0);
        last = pos[j];
    }
    int rice = rnd() % 2;
    unsigned shift = rnd() % 8 ? (unsigned)(rnd() % 7) : 31;
    static const unsigned widths[] = { 2, 2, 2, 4, 8 };
    unsigned bits = widths[rnd() % 5];
    uint32_t m = 1u << bits, maxz = unit == 4 ? 0xffffffffu : (1u << (8 * unit)) - 1;
    size_t plen = (k * bits + 7) / 8;
    memset(packed, 0, sizeof packed);
    for (size_t j = 0; j < k; j++) {
        uint32_t z = rnd() % 4 ? 1 + (uint32_t)(rnd() % 3) : 1 + (uint32_t)(rnd() % maxz);
        uint32_t sym = z < m ? z - 1 : m - 1;
        if (z >= m)
            el += leb_put(esc + el, z - m, rnd() % 16 == 0);
        packed[(j * bits) / 8] |= (uint8_t)(sym << ((j * bits) % 8));
    }
    int count_delta = 0;
    if (rnd() % 3 == 0) {
        switch (rnd() % 10) {
        case 0: if (rice) gv[rnd() % k] += 1 + (uint32_t)(rnd() % 3); else gaps[rnd() % gl] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 1: if (gl > 1) gl--; break;
        case 2: gaps[gl++] = (uint8_t)(rnd() % 4); break;
        case 3: packed[rnd() % plen] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 4: if ((k * bits) % 8) packed[plen - 1] |= 0x80; break;   /* padding */
        case 5: if (el) el--; break;
        case 6: esc[el++] = (uint8_t)(rnd() % 128); break;
        case 7: el += leb_put(esc + el, maxz - m + 1, 0); break;       /* out of range */
        case 8: count_delta = k < RL ? 1 : -1; break;
        default: bits = 3; break;                                      /* unknown coding */
        }
    }
    oc->bytes = malloc(1 + ZSTD_compressBound(gl) + 4 * RL + 64 + ZSTD_compressBound(plen) + ZSTD_compressBound(el) + 256);
    size_t at = 1;
    if (rice) {
        /* damage: a gap grown (above), or the planes cut, lengthened or a bit flipped */
        oc->bytes[0] = (uint8_t)(PATCH_POS_RICE + shift);
        size_t rl = rice_put(gv, k, shift, oc->bytes + 1);
        unsigned d = rnd() % 12;
        if (d == 0 && rl > 1)
            rl--;
        else if (d == 1)
            oc->bytes[1 + rl++] = (uint8_t)(rnd() % 4);
        else if (d == 2)
            oc->bytes[1 + rnd() % rl] ^= (uint8_t)(1u << (rnd() % 8));
        at += rl;
    } else {
        oc->bytes[0] = PATCH_POS_ZSTD;
        put_frame(oc, &at, gaps, gl);
    }
    oc->pos_len = (uint32_t)at;
    oc->bytes[at++] = (uint8_t)bits;
    put_frame(oc, &at, packed, plen);
    if (el)
        put_frame(oc, &at, esc, el);
    oc->val_len = (uint32_t)(at - oc->pos_len);
    oc->count = (uint32_t)((int)k + count_delta);
    pulse_sha256(oc->bytes, at, oc->digest);
}

/* Pass 1 (patch_check_chunk) accepts exactly the chunks the decoder accepts, and what pass 2
 * adds from the cache is what decode + ulp_apply writes; for 8-, 16- and 32-bit elements. */
static void test_random_chunks(void)
{
    static const char *names[3] = { "r08", "r16", "r32" };
    static const char *dtypes[3] = { "F8_E5M2", "BF16", "F32" };
    static const pulse_dtype dts[3] = { PULSE_DT_F8_E5M2, PULSE_DT_BF16, PULSE_DT_F32 };
    static const unsigned units[3] = { 1, 2, 4 };
    uint64_t shape[1] = { (uint64_t)RL * RCH };
    patch_out_tensor ot[3];
    for (int u = 0; u < 3; u++) {
        ot[u] = (patch_out_tensor){ .name = names[u], .dtype_name = dtypes[u], .dtype = dts[u],
                                    .elem_size = units[u], .ndim = 1, .shape = shape, .nchunks = RCH };
        ot[u].chunks = calloc(RCH, sizeof *ot[u].chunks);
        for (int c = 0; c < RCH; c++) {
            random_chunk(units[u], &ot[u].chunks[c]);
            ot[u].changes += ot[u].chunks[c].count;
        }
    }
    uint8_t id[32] = { 0 };
    CHECK_OK(patch_write_file(path_of("random.patch"), PULSE_VALUES_ULP, RL, id, id, ot, 3));
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of("random.patch")));
    patch_pool pool;
    patch_cache cache;
    int err = 0;
    if (p && patch_pool_init(&pool, 2, RL, 0) == 0) {
        patch_scratch *sa = patch_pool_take(&pool, &err), *sb = patch_pool_take(&pool, &err);
        patch_scratch *sc = patch_pool_take(&pool, &err);
        CHECK_OK(patch_cache_open(&cache, p));
        size_t accepted = 0, refused = 0, fused = 0;
        for (size_t i = 0; sa && sb && sc && i < p->nchunks; i++) {
            const patch_chunk *c = &p->chunks[i];
            unsigned unit = p->tensors[c->tensor].unit;
            int a = patch_check_chunk(p, i, sa, &cache, NULL);
            int b = patch_decode_checked_chunk(p, c, sb);
            CHECK((a == 0) == (b == 0) && a <= 0 && b <= 0);
            if (!((a == 0) == (b == 0)))
                fprintf(stderr, "chunk %zu (unit %u): pass 1 %d, decoder %d (%s)\n", i, unit, a, b, pulse_last_error());
            uint8_t x[RL * 4], y[RL * 4], w[RL * 4];
            for (size_t j = 0; j < sizeof x; j++)
                x[j] = y[j] = w[j] = (uint8_t)(j * 37 + i);
            /* Pass 2 without the cache (BF16 chunks of 2-bit symbols: decompress, check, add):
             * it refuses what the decoder refuses, and then has written nothing. */
            int f = patch_apply_checked_chunk(p, c, sc, w);
            if (f <= 0) {
                fused++;
                CHECK((f == 0) == (b == 0));
                if (f < 0)
                    CHECK(!memcmp(w, y, sizeof w));
            }
            if (a || b) {
                refused++;
                continue;
            }
            accepted++;
            CHECK(cache.ent[i].cached);
            CHECK_OK(patch_write_cached_chunk(p, i, sa, &cache, x));
            const pulse_kernels *kn = pulse_kernels_get();
            if (unit == 1)
                kn->ulp_apply8(y, sb->idx, c->count, sb->vals);
            else if (unit == 2)
                kn->ulp_apply16((uint16_t *)(void *)y, sb->idx, c->count, (const uint16_t *)(void *)sb->vals);
            else
                kn->ulp_apply32((uint32_t *)(void *)y, sb->idx, c->count, (const uint32_t *)(void *)sb->vals);
            CHECK(!memcmp(x, y, sizeof x));
            if (f == 0)
                CHECK(!memcmp(w, y, sizeof w));   /* the fused path added the same */
        }
        CHECK(accepted > 300 && refused > 100);   /* both kinds well represented */
        CHECK(fused > 100);                        /* and the fused path saw many of them */
        patch_cache_close(&cache);
        if (sa)
            patch_pool_give(&pool, sa);
        if (sb)
            patch_pool_give(&pool, sb);
        if (sc)
            patch_pool_give(&pool, sc);
        patch_pool_free(&pool);
    }
    pulse_patch_close(&p);
    for (int u = 0; u < 3; u++) {
        for (int c = 0; c < RCH; c++)
            free(ot[u].chunks[c].bytes);
        free(ot[u].chunks);
    }
}

/* A trimmed pool keeps its zstd contexts and allocates its chunk buffers again on take. */
static void test_pool_trim(void)
{
    patch_pool pool;
    int err = 0;
    CHECK_OK(patch_pool_init(&pool, 1, CH, 0));
    patch_scratch *s = patch_pool_take(&pool, &err);
    CHECK(s && s->idx && s->dctx && s->cctx);
    if (!s) {
        patch_pool_free(&pool);
        return;
    }
    ZSTD_DCtx *d = s->dctx;
    patch_pool_give(&pool, s);
    patch_pool_trim(&pool);
    CHECK(pool.slots[0].idx == NULL && pool.slots[0].dctx == d);
    s = patch_pool_take(&pool, &err);
    CHECK(s && s->idx && s->vals && s->leb && s->planes && s->gaps && s->dctx == d);
    if (s) {
        memset(s->vals, 1, (size_t)CH * 4);   /* the full sizes are there again */
        memset(s->leb, 2, (size_t)CH * PATCH_LEB_MAX);
        patch_pool_give(&pool, s);
    }
    patch_pool_free(&pool);
}

/* The byte counts of PULSE_APPLY_CACHE and the other caps: suffixes, the bound, the default
 * for no number. */
static void test_env_bytes(void)
{
    static const struct { const char *v; size_t want; } cases[] = {
        { NULL, 64u << 20 }, { "", 64u << 20 }, { "0", 0 }, { "4096", 4096 }, { "2k", 2048 },
        { "3K", 3072 }, { "128M", (size_t)128 << 20 }, { "2G", (size_t)2 << 30 },
        { "100G", (size_t)8 << 30 }, { "99999999999999999999", (size_t)8 << 30 }, { "junk", 64u << 20 },
        { "-1", 64u << 20 }, { " 5M", 64u << 20 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].v)
            setenv("PULSE_TEST_BYTES", cases[i].v, 1);
        else
            unsetenv("PULSE_TEST_BYTES");
        size_t got = pulse_env_bytes("PULSE_TEST_BYTES", 64u << 20, (size_t)8 << 30);
        if (got != cases[i].want)
            fprintf(stderr, "PULSE_TEST_BYTES=%s: %zu, wanted %zu\n", cases[i].v ? cases[i].v : "(unset)", got,
                    cases[i].want);
        CHECK(got == cases[i].want);
    }
    unsetenv("PULSE_TEST_BYTES");
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/test-apply-cache-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    pulse_ckpt *x = NULL, *y = NULL;
    CHECK_OK(make_pair(&x, &y));
    if (x && y) {
        test_caps(x, y, PULSE_VALUES_ULP, 1);
        test_caps(x, y, PULSE_VALUES_ULP, 0);
        test_caps(x, y, PULSE_VALUES_ABS, 1);
        test_kept_arena(x, y);
        test_concurrent(x, y);
    }
    test_random_chunks();
    test_pool_trim();
    test_env_bytes();
    pulse_ckpt_close(&x);
    pulse_ckpt_close(&y);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done("test_apply_cache");
}
