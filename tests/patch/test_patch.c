/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the patch codec on real files: round trips for every dtype, squash, and every kind of bad input. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "crypto/sha256.h"
#include "node/patch/patch_internal.h"
#include "check.h"

static char dir[256];
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *path_of(const char *name)
{
    static char bufs[8][512];
    static int at;
    char *b = bufs[at++ & 7];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

/* The test layout: every dtype, sizes around the chunk size (CHUNK), special values. */
#define CHUNK 64
static const pulse_tensor_spec specs[] = {
    { "a.bf16", "BF16", 2, { 10, 100 } },      /* many chunks, sparse changes */
    { "b.f16", "F16", 1, { CHUNK } },          /* exactly a chunk, all changed */
    { "c.f32", "F32", 1, { CHUNK + 1 } },      /* chunk + 1 */
    { "d.e4m3", "F8_E4M3", 1, { 10 } },        /* smaller than a chunk */
    { "e.e5m2", "F8_E5M2", 1, { 200 } },       /* none changed */
    { "f.i64", "I64", 1, { 20 } },             /* opaque, changed */
    { "g.special", "BF16", 1, { 16 } },        /* NaN, Inf, -0 transitions */
    { "h.bool", "BOOL", 1, { 3 } },            /* opaque, unchanged */
    { "i.scalar", "F32", 0, { 0 } },           /* scalar */
};
#define NSPECS (sizeof specs / sizeof specs[0])

static int make_ckpt(const char *name, uint64_t seed, int step, pulse_ckpt **out)
{
    pulse_ckpt *c;
    int err = pulse_ckpt_create(&c, path_of(name), specs, NSPECS, NULL);
    if (err)
        return err;
    for (size_t i = 0; i < pulse_ckpt_count(c); i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(c, i);
        rng = seed * 1000 + i + 1;
        for (uint64_t j = 0; j < t->nbytes; j++)
            t->data[j] = (uint8_t)rnd();
        /* Step s changes a step-dependent subset. */
        rng = (uint64_t)step * 7919 + i + 3;
        if (!strcmp(t->name, "a.bf16")) {
            uint16_t *v = (uint16_t *)t->data;
            for (uint64_t j = 0; j < t->nelems; j++)
                if (step && rnd() % 100 < 5)
                    v[j] = (uint16_t)(v[j] + (rnd() % 2 ? 1 : -1) * (int)step);
        } else if (!strcmp(t->name, "b.f16") || !strcmp(t->name, "d.e4m3")
                   || !strcmp(t->name, "c.f32") || !strcmp(t->name, "i.scalar")) {
            for (uint64_t j = 0; j < t->nbytes; j += t->elem_size)
                t->data[j] = (uint8_t)(t->data[j] + step);   /* every element differs per step */
        } else if (!strcmp(t->name, "f.i64")) {
            if (step)
                t->data[5] ^= (uint8_t)step, t->data[150] ^= (uint8_t)(step << 1);
        } else if (!strcmp(t->name, "g.special")) {
            static const uint16_t vals[3][16] = {
                { 0x7fc0, 0x7f80, 0xff80, 0x8000, 0, 0x7fc1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 },
                { 0x8000, 0x7fc0, 0x7f80, 0, 0xff80, 0x7fc1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xffc0 },
                { 0, 0x8000, 0x7fc1, 0xff80, 0x7f80, 0x7fc0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xffc0 },
            };
            memcpy(t->data, vals[step % 3], 32);
        }
    }
    if ((err = pulse_ckpt_commit(c)) != 0) {
        pulse_ckpt_close(&c);
        return err;
    }
    *out = c;
    return 0;
}

static int same_data(const pulse_ckpt *a, const pulse_ckpt *b)
{
    if (pulse_ckpt_count(a) != pulse_ckpt_count(b))
        return 0;
    for (size_t i = 0; i < pulse_ckpt_count(a); i++) {
        const pulse_tensor *x = pulse_ckpt_tensor(a, i), *y = pulse_ckpt_tensor(b, i);
        if (x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes))
            return 0;
    }
    return 1;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len + 1);
    if (b && fread(b, 1, *len, f) != *len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static pulse_diff_opts opts_for(pulse_value_code v)
{
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.values = v;
    o.chunk_elems = CHUNK;
    o.threads = 2;
    return o;
}

/* Applies the patch at ppath to a copy of base into out_name; returns the error. */
static int apply_to_copy(const pulse_patch *p, const pulse_ckpt *base, const char *out_name, pulse_ckpt **out)
{
    pulse_ckpt *c;
    int err = pulse_ckpt_create_like(&c, path_of(out_name), base);
    if (err)
        return err;
    if ((err = pulse_patch_apply(p, c, 2)) == 0)
        err = pulse_ckpt_commit(c);
    if (err)
        pulse_ckpt_close(&c);
    else
        *out = c;
    return err;
}

static void test_round_trip(pulse_ckpt *a, pulse_ckpt *b, pulse_value_code v)
{
    pulse_diff_opts o = opts_for(v);
    const char *pp = path_of(v == PULSE_VALUES_ULP ? "ab.ulp" : "ab.abs");
    CHECK_OK(pulse_patch_diff(a, b, &o, pp));
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, pp));
    if (!p)
        return;
    CHECK_EQ_INT(pulse_patch_values(p), v);
    CHECK_EQ_INT(pulse_patch_tensor_count(p), NSPECS);
    CHECK_OK(pulse_patch_verify(p, a, 2));
    uint8_t ida[32], idb[32], idr[32];
    CHECK_OK(pulse_ckpt_state_id(a, 1, ida));
    CHECK_OK(pulse_ckpt_state_id(b, 1, idb));
    CHECK(!memcmp(pulse_patch_base_id(p), ida, 32));
    CHECK(!memcmp(pulse_patch_result_id(p), idb, 32));
    pulse_ckpt *r = NULL;
    CHECK_OK(apply_to_copy(p, a, "result.safetensors", &r));
    if (r) {
        CHECK(same_data(r, b));
        CHECK_OK(pulse_ckpt_state_id(r, 1, idr));
        CHECK(!memcmp(idr, idb, 32));
        /* The same patch on the result is for another base. */
        CHECK_ERR(pulse_patch_apply(p, r, 1), PULSE_ERR_MISMATCH);
        CHECK(same_data(r, b));
        pulse_ckpt_close(&r);
    }
    pulse_patch_stats st;
    CHECK_OK(pulse_patch_info(p, 1, &st));
    CHECK(st.changes > 0 && st.entropy_bits > 0);
    CHECK(st.opaque_changes == 2);
    pulse_patch_tensor_info ti;
    CHECK_OK(pulse_patch_tensor_info_get(p, 1, 1, &ti));   /* b.f16: all changed */
    CHECK_EQ_INT(ti.changes, CHUNK);
    CHECK_OK(pulse_patch_tensor_info_get(p, 4, 1, &ti));   /* e.e5m2: none */
    CHECK_EQ_INT(ti.changes, 0);
    CHECK_EQ_INT(ti.coded_chunks, 0);
    pulse_patch_close(&p);
    CHECK(p == NULL);
}

/* Identical checkpoints: a patch with no changes that still checks the state ids. */
static void test_no_change(pulse_ckpt *a)
{
    pulse_diff_opts o = opts_for(PULSE_VALUES_ULP);
    CHECK_OK(pulse_patch_diff(a, a, &o, path_of("aa.ulp")));
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of("aa.ulp")));
    pulse_ckpt *r = NULL;
    if (p)
        CHECK_OK(apply_to_copy(p, a, "aa.safetensors", &r));
    if (r)
        CHECK(same_data(r, a));
    pulse_patch_stats st;
    if (p) {
        CHECK_OK(pulse_patch_info(p, 1, &st));
        CHECK_EQ_INT(st.changes, 0);
    }
    pulse_ckpt_close(&r);
    pulse_patch_close(&p);
}

/* Whether files x and y hold the same bytes. */
static int same_file(const char *x, const char *y)
{
    FILE *f = fopen(x, "rb"), *g = fopen(y, "rb");
    int same = f && g;
    while (same) {
        int u = getc(f), v = getc(g);
        same = u == v;
        if (u == EOF)
            break;
    }
    if (f)
        fclose(f);
    if (g)
        fclose(g);
    return same;
}

/* A follower journals each ulp step as the squash of that one patch against its weights
 * (a fast path that keeps the patch's positions and position frames): the result must be
 * exactly the abs diff of the same pair, byte for byte, and so must the squash of one abs
 * patch (the general path). */
static void test_squash_one(pulse_ckpt *a, pulse_ckpt *b)
{
    pulse_diff_opts o = opts_for(PULSE_VALUES_ABS);
    CHECK_OK(pulse_patch_diff(a, b, &o, path_of("one.abs")));
    const pulse_value_code codes[2] = { PULSE_VALUES_ULP, PULSE_VALUES_ABS };
    for (int k = 0; k < 2; k++) {
        o = opts_for(codes[k]);
        CHECK_OK(pulse_patch_diff(a, b, &o, path_of("one.in")));
        pulse_patch *p = NULL;
        CHECK_OK(pulse_patch_open(&p, path_of("one.in")));
        if (!p)
            continue;
        for (int threads = 1; threads <= 2; threads++) {
            unlink(path_of("one.sq"));
            CHECK_OK(pulse_patch_squash(&p, 1, a, threads, 0, path_of("one.sq")));
            CHECK(same_file(path_of("one.sq"), path_of("one.abs")));
        }
        /* The wrong base is refused before anything is written. */
        unlink(path_of("one.sq"));
        CHECK_ERR(pulse_patch_squash(&p, 1, b, 1, 0, path_of("one.sq")), PULSE_ERR_MISMATCH);
        CHECK(access(path_of("one.sq"), F_OK) != 0);
        pulse_patch_close(&p);
    }
}

static void test_squash(pulse_ckpt *a, pulse_ckpt *b, pulse_ckpt *c)
{
    const pulse_value_code codes[2] = { PULSE_VALUES_ABS, PULSE_VALUES_ULP };
    for (int k = 0; k < 2; k++) {
        pulse_diff_opts o = opts_for(codes[k]);
        unlink(path_of("sq"));
        CHECK_OK(pulse_patch_diff(a, b, &o, path_of("p1")));
        CHECK_OK(pulse_patch_diff(b, c, &o, path_of("p2")));
        pulse_patch *p[2] = { NULL, NULL }, *q = NULL;
        CHECK_OK(pulse_patch_open(&p[0], path_of("p1")));
        CHECK_OK(pulse_patch_open(&p[1], path_of("p2")));
        if (!p[0] || !p[1])
            return;
        /* Out of order: not consecutive. */
        pulse_patch *rev[2] = { p[1], p[0] };
        CHECK_ERR(pulse_patch_squash(rev, 2, NULL, 1, 0, path_of("sq")), PULSE_ERR_MISMATCH);
        if (codes[k] == PULSE_VALUES_ULP) {
            CHECK_ERR(pulse_patch_squash(p, 2, NULL, 1, 0, path_of("sq")), PULSE_ERR_INVALID);
            CHECK_ERR(pulse_patch_squash(p, 2, b, 1, 0, path_of("sq")), PULSE_ERR_MISMATCH);
        }
        CHECK(access(path_of("sq"), F_OK) != 0);
        for (int with_base = 0; with_base < 2; with_base++) {
            if (codes[k] == PULSE_VALUES_ULP && !with_base)
                continue;
            CHECK_OK(pulse_patch_squash(p, 2, with_base ? a : NULL, 2, 0, path_of("sq")));
            CHECK_OK(pulse_patch_open(&q, path_of("sq")));
            pulse_ckpt *r = NULL;
            if (q) {
                CHECK_EQ_INT(pulse_patch_values(q), PULSE_VALUES_ABS);
                CHECK_OK(apply_to_copy(q, a, "sq.safetensors", &r));
            }
            if (r)
                CHECK(same_data(r, c));
            pulse_ckpt_close(&r);
            pulse_patch_close(&q);
        }
        pulse_patch_close(&p[0]);
        pulse_patch_close(&p[1]);
    }
}

/* Every truncation and every flipped byte of a small patch is refused, and an in-place
 * target is left byte for byte as it was. */
static void test_damage(pulse_ckpt *a, pulse_ckpt *b)
{
    pulse_diff_opts o = opts_for(PULSE_VALUES_ULP);
    CHECK_OK(pulse_patch_diff(a, b, &o, path_of("dmg.ulp")));
    size_t len = 0;
    uint8_t *buf = slurp(path_of("dmg.ulp"), &len);
    CHECK(buf != NULL && len > 200);
    if (!buf)
        return;
    pulse_patch *p = NULL;
    int refused = 0;
    for (size_t n = 0; n < len; n++) {
        int err = pulse_patch_open_mem(&p, buf, n);
        refused += err < 0 && p == NULL;
    }
    CHECK_EQ_INT(refused, len);

    /* An in-place target: a copy of a, opened writable. */
    pulse_ckpt *t = NULL;
    CHECK_OK(pulse_ckpt_create_like(&t, path_of("inplace.safetensors"), a));
    if (t)
        CHECK_OK(pulse_ckpt_commit(t));
    if (!t) {
        free(buf);
        return;
    }
    int bad_open = 0, bad_apply = 0, accepted = 0;
    for (size_t i = 0; i < len; i++) {
        buf[i] ^= 0x5a;
        int err = pulse_patch_open_mem(&p, buf, len);
        if (err)
            bad_open++;
        else if (pulse_patch_apply(p, t, 1) != 0)
            bad_apply++;
        else
            accepted++;
        pulse_patch_close(&p);
        buf[i] ^= 0x5a;
    }
    CHECK_EQ_INT(accepted, 0);
    CHECK_EQ_INT(bad_open + bad_apply, len);
    CHECK(bad_apply > 0);   /* chunk bytes are only checked on decode */
    CHECK(same_data(t, a));
    pulse_ckpt_close(&t);
    free(buf);
}

/* Builds one element-wise chunk from a position stream body (raw gap bytes for zstd coding
 * 0, else the Rice planes as given) and a ulp value stream: the coding byte, the packed
 * symbols and, when esc_len > 0, the escape bytes, with valid digests. */
static void raw_chunk_coded(uint8_t pos_coding, const uint8_t *leb, size_t leb_len, uint8_t coding,
                            const uint8_t *packed, size_t plen, const uint8_t *esc, size_t esc_len, uint32_t count,
                            patch_out_chunk *oc)
{
    size_t cap = 1 + ZSTD_compressBound(leb_len) + 1 + ZSTD_compressBound(plen) + ZSTD_compressBound(esc_len);
    oc->bytes = malloc(cap);
    oc->bytes[0] = pos_coding;
    size_t pl = 1 + (pos_coding == PATCH_POS_ZSTD ? ZSTD_compress(oc->bytes + 1, cap - 1, leb, leb_len, 3)
                                                  : (memcpy(oc->bytes + 1, leb, leb_len), leb_len));
    size_t vl = 1;
    oc->bytes[pl] = coding;
    vl += ZSTD_compress(oc->bytes + pl + vl, cap - pl - vl, packed, plen, 3);
    if (esc_len)
        vl += ZSTD_compress(oc->bytes + pl + vl, cap - pl - vl, esc, esc_len, 3);
    oc->count = count;
    oc->pos_len = (uint32_t)pl;
    oc->val_len = (uint32_t)vl;
    pulse_sha256(oc->bytes, pl + vl, oc->digest);
}

static void raw_chunk(const uint8_t *leb, size_t leb_len, uint8_t coding, const uint8_t *packed, size_t plen,
                      const uint8_t *esc, size_t esc_len, uint32_t count, patch_out_chunk *oc)
{
    raw_chunk_coded(PATCH_POS_ZSTD, leb, leb_len, coding, packed, plen, esc, esc_len, count, oc);
}

/* An abs chunk of a BF16 tensor from raw gap bytes and nplanes value planes of plane_len bytes
 * each (a well-formed one has 2 planes of `count` bytes), with valid digests. */
static void raw_abs_chunk(const uint8_t *leb, size_t leb_len, unsigned nplanes, size_t plane_len, uint32_t count,
                          patch_out_chunk *oc)
{
    uint8_t plane[16];
    size_t cap = 1 + ZSTD_compressBound(leb_len) + 4 * ZSTD_compressBound(sizeof plane);
    oc->bytes = malloc(cap);
    oc->bytes[0] = PATCH_POS_ZSTD;
    size_t pl = 1 + ZSTD_compress(oc->bytes + 1, cap - 1, leb, leb_len, 3), vl = 0;
    for (unsigned b = 0; b < nplanes; b++) {
        for (size_t j = 0; j < plane_len && j < sizeof plane; j++)
            plane[j] = (uint8_t)(b ? 0x3f : 0x80 + j);
        vl += ZSTD_compress(oc->bytes + pl + vl, cap - pl - vl, plane, plane_len, 3);
    }
    oc->count = count;
    oc->pos_len = (uint32_t)pl;
    oc->val_len = (uint32_t)vl;
    pulse_sha256(oc->bytes, pl + vl, oc->digest);
}

/* Apply's pass 1 must refuse a crafted chunk exactly as verify does, before any write,
 * whether its streams go to the cache or to scratch buffers (cache off). */
static void crafted_apply(const pulse_patch *p, pulse_ckpt *a, const uint8_t ida[32], int want)
{
    static const char *caps[2] = { NULL, "0" };
    for (int ci = 0; ci < 2; ci++) {
        if (caps[ci])
            setenv("PULSE_APPLY_CACHE", caps[ci], 1);
        else
            unsetenv("PULSE_APPLY_CACHE");
        pulse_ckpt *t = NULL;
        CHECK_OK(pulse_ckpt_create_like(&t, path_of("crafted-t.safetensors"), a));
        if (!t)
            continue;
        pulse_patch_apply_opts o;
        pulse_patch_apply_opts_default(&o);
        o.threads = 1;
        o.trust_base_id = ida;
        o.skip_result_check = 1;
        CHECK_EQ_INT(pulse_patch_apply_ex(p, t, &o), want);
        if (want)
            CHECK(same_data(t, a));   /* refused before anything was written */
        pulse_ckpt_close(&t);
    }
    unsetenv("PULSE_APPLY_CACHE");
}

/* Writes the crafted chunk now in ot[0].chunks[0] into a patch of the given value code, and
 * requires verify and apply (crafted_apply) to give `want`; frees the chunk's bytes. */
static void crafted_case(patch_out_tensor *ot, size_t n, pulse_value_code values, pulse_ckpt *a,
                         const uint8_t ida[32], const char *what, int want)
{
    CHECK_OK(patch_write_file(path_of("crafted"), values, CHUNK, ida, ida, ot, n));
    pulse_patch *p = NULL;
    int err = pulse_patch_open(&p, path_of("crafted"));
    if (!err)
        err = pulse_patch_verify(p, a, 1);
    if (err != want)
        fprintf(stderr, "crafted case '%s': got %d (%s), wanted %d\n", what, err, pulse_last_error(), want);
    CHECK_EQ_INT(err, want);
    if (p)
        crafted_apply(p, a, ida, want);
    pulse_patch_close(&p);
    free(ot[0].chunks[0].bytes);
    ot[0].chunks[0].bytes = NULL;
}

/* Patches crafted with valid digests over bad content reach the decoder's own checks. */
static void test_crafted(pulse_ckpt *a)
{
    uint8_t ida[32];
    CHECK_OK(pulse_ckpt_state_id(a, 1, ida));
    /* One BF16 tensor layout copied from a: "a.bf16" only would mismatch a; use a's full
     * layout with all tensors unchanged except a.bf16's first chunk. */
    size_t n = pulse_ckpt_count(a);
    patch_out_tensor *ot = calloc(n, sizeof *ot);
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(a, i);
        ot[i].name = t->name;
        ot[i].dtype_name = t->dtype_name;
        ot[i].dtype = t->dtype == PULSE_DT_OPAQUE ? PULSE_DT_OPAQUE : t->dtype;
        ot[i].elem_size = t->elem_size;
        ot[i].ndim = t->ndim;
        ot[i].shape = t->shape;
        uint64_t units = t->dtype == PULSE_DT_OPAQUE ? t->nbytes : t->nelems;
        ot[i].nchunks = (units + CHUNK - 1) / CHUNK;
        ot[i].chunks = calloc(ot[i].nchunks + 1, sizeof *ot[i].chunks);
    }
    static const struct {
        const char *what;
        uint8_t leb[8];
        size_t leb_len;
        uint32_t count;
        int want;
    } cases[] = {
        { "position past chunk end", { 70 }, 1, 1, PULSE_ERR_FORMAT },
        { "gap overflow", { 0xff, 0xff, 0xff, 0xff, 0x7f }, 5, 1, PULSE_ERR_FORMAT },
        { "gaps wrap", { 10, 0xff, 0xff, 0xff, 0xff, 0x0f }, 6, 2, PULSE_ERR_FORMAT },
        { "too few gaps", { 1 }, 1, 2, PULSE_ERR_FORMAT },
        { "stray bytes", { 1, 2, 3 }, 3, 2, PULSE_ERR_FORMAT },
        { "unterminated gap", { 0x81 }, 1, 1, PULSE_ERR_FORMAT },
        { "valid", { 0, 5 }, 2, 2, 0 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t packed[1] = { cases[c].count == 2 ? 0x05 : 0x01 };   /* z = 2 each */
        raw_chunk(cases[c].leb, cases[c].leb_len, 2, packed, 1, NULL, 0, cases[c].count, &ot[0].chunks[0]);
        ot[0].changes = cases[c].count;
        crafted_case(ot, n, PULSE_VALUES_ULP, a, ida, cases[c].what, cases[c].want);
    }
    /* Rice-coded position streams (coding byte 1 + shift): remainder plane, then per gap its
     * quotient in zeros and a one, LSB first. */
    static const struct {
        const char *what;
        uint8_t pos_coding;
        uint8_t body[8];
        size_t body_len;
        uint32_t count;
        int want;
    } rcases[] = {
        { "rice: valid (gaps 0 and 5 at shift 2)", 3, { 0x04, 0x05 }, 2, 2, 0 },
        { "rice: valid (gaps 0 and 5 at shift 0)", 1, { 0x41 }, 1, 2, 0 },
        { "rice: position past chunk end", 7, { 0x06, 0x02 }, 2, 1, PULSE_ERR_FORMAT },
        { "rice: too few gaps", 1, { 0x01 }, 1, 2, PULSE_ERR_FORMAT },
        { "rice: a byte after the last gap", 1, { 0x03, 0x00 }, 2, 2, PULSE_ERR_FORMAT },
        { "rice: a one after the last gap", 1, { 0x03 }, 1, 1, PULSE_ERR_FORMAT },
        { "rice: nonzero remainder padding", 3, { 0x14, 0x05 }, 2, 2, PULSE_ERR_FORMAT },
        { "rice: gap overflow", 32, { 0, 0, 0, 0, 0x04 }, 5, 1, PULSE_ERR_FORMAT },
        { "rice: remainder plane past the stream", 32, { 0, 0, 0 }, 3, 2, PULSE_ERR_FORMAT },
        { "rice: unknown coding", 33, { 0x01 }, 1, 1, PULSE_ERR_UNSUPPORTED },
        { "rice: no planes", 1, { 0 }, 0, 1, PULSE_ERR_FORMAT },
    };
    for (size_t c = 0; c < sizeof rcases / sizeof rcases[0]; c++) {
        uint8_t packed[1] = { rcases[c].count == 2 ? 0x05 : 0x01 };
        raw_chunk_coded(rcases[c].pos_coding, rcases[c].body, rcases[c].body_len, 2, packed, 1, NULL, 0,
                        rcases[c].count, &ot[0].chunks[0]);
        ot[0].changes = rcases[c].count;
        crafted_case(ot, n, PULSE_VALUES_ULP, a, ida, rcases[c].what, rcases[c].want);
    }
    /* Value streams: 4 changes at positions 0..3 of a.bf16 (BF16: largest zigzag 65535). */
    static const struct {
        const char *what;
        uint8_t coding;
        uint8_t packed[4];
        size_t plen;
        uint8_t esc[8];
        size_t esc_len;
        int want;
    } vcases[] = {
        { "unknown coding", 3, { 0 }, 1, { 0 }, 0, PULSE_ERR_UNSUPPORTED },
        { "coding 2, no escapes", 2, { 0x24 }, 1, { 0 }, 0, 0 },
        { "escape missing", 2, { 0xc0 }, 1, { 0 }, 0, PULSE_ERR_FORMAT },
        { "escape present", 2, { 0xc0 }, 1, { 7 }, 1, 0 },
        { "escape at the largest value", 2, { 0xc0 }, 1, { 0xfb, 0xff, 0x03 }, 3, 0 },
        { "escape past the largest value", 2, { 0xc0 }, 1, { 0xfc, 0xff, 0x03 }, 3, PULSE_ERR_FORMAT },
        { "escape overflows 32 bits", 2, { 0xc0 }, 1, { 0xff, 0xff, 0xff, 0xff, 0x7f }, 5, PULSE_ERR_FORMAT },
        { "stray escape bytes", 2, { 0xc0 }, 1, { 7, 7 }, 2, PULSE_ERR_FORMAT },
        { "escape stream without escapes", 2, { 0x00 }, 1, { 7 }, 1, PULSE_ERR_FORMAT },
        { "packed length short", 4, { 0x11 }, 1, { 0 }, 0, PULSE_ERR_FORMAT },
        { "coding 4", 4, { 0x21, 0xf3 }, 2, { 9 }, 1, 0 },
        { "coding 8", 8, { 0, 1, 254, 255 }, 4, { 0 }, 1, 0 },
        { "coding 8, escape missing", 8, { 0, 1, 254, 255 }, 4, { 0 }, 0, PULSE_ERR_FORMAT },
    };
    for (size_t c = 0; c < sizeof vcases / sizeof vcases[0]; c++) {
        static const uint8_t gaps[4] = { 0, 0, 0, 0 };
        raw_chunk(gaps, 4, vcases[c].coding, vcases[c].packed, vcases[c].plen, vcases[c].esc, vcases[c].esc_len,
                  4, &ot[0].chunks[0]);
        ot[0].changes = 4;
        crafted_case(ot, n, PULSE_VALUES_ULP, a, ida, vcases[c].what, vcases[c].want);
    }
    /* Padding bits after the last symbol must be zero: 3 changes at coding 2 leave 2 bits. */
    {
        static const uint8_t gaps[3] = { 0, 0, 0 }, pad[1] = { 0x40 };
        raw_chunk(gaps, 3, 2, pad, 1, NULL, 0, 3, &ot[0].chunks[0]);
        ot[0].changes = 3;
        CHECK_OK(patch_write_file(path_of("crafted"), PULSE_VALUES_ULP, CHUNK, ida, ida, ot, n));
        pulse_patch *p = NULL;
        CHECK_OK(pulse_patch_open(&p, path_of("crafted")));
        if (p) {
            CHECK_ERR(pulse_patch_verify(p, a, 1), PULSE_ERR_FORMAT);
            crafted_apply(p, a, ida, PULSE_ERR_FORMAT);
        }
        pulse_patch_close(&p);
        free(ot[0].chunks[0].bytes);
        ot[0].chunks[0].bytes = NULL;
    }
    /* Abs chunks: the same gap cases, and value planes of the wrong number or length. Pass 1
     * keeps abs streams too, so it must refuse each before any write, with the cache and
     * without it, as verify does. */
    static const struct {
        const char *what;
        uint8_t leb[8];
        size_t leb_len;
        uint32_t count;
        unsigned nplanes;
        size_t plane_len;
        int want;
    } acases[] = {
        { "abs: position past chunk end", { 70 }, 1, 1, 2, 1, PULSE_ERR_FORMAT },
        { "abs: gap overflow", { 0xff, 0xff, 0xff, 0xff, 0x7f }, 5, 1, 2, 1, PULSE_ERR_FORMAT },
        { "abs: too few gaps", { 1 }, 1, 2, 2, 2, PULSE_ERR_FORMAT },
        { "abs: stray gap bytes", { 1, 2, 3 }, 3, 2, 2, 2, PULSE_ERR_FORMAT },
        { "abs: a plane short", { 0, 5 }, 2, 2, 2, 1, PULSE_ERR_FORMAT },
        { "abs: a plane missing", { 0, 5 }, 2, 2, 1, 2, PULSE_ERR_FORMAT },
        { "abs: a plane too many", { 0, 5 }, 2, 2, 3, 2, PULSE_ERR_FORMAT },
        { "abs: valid", { 0, 5 }, 2, 2, 2, 2, 0 },
    };
    for (size_t c = 0; c < sizeof acases / sizeof acases[0]; c++) {
        raw_abs_chunk(acases[c].leb, acases[c].leb_len, acases[c].nplanes, acases[c].plane_len, acases[c].count,
                      &ot[0].chunks[0]);
        ot[0].changes = acases[c].count;
        crafted_case(ot, n, PULSE_VALUES_ABS, a, ida, acases[c].what, acases[c].want);
    }
    /* Absurd shape (layout check at open): 2^62 elements. */
    uint64_t huge[1] = { 1ull << 62 };
    ot[0].shape = huge;
    ot[0].ndim = 1;
    ot[0].changes = 0;
    CHECK_OK(patch_write_file(path_of("crafted"), PULSE_VALUES_ULP, CHUNK, ida, ida, ot, n));
    pulse_patch *p = NULL;
    CHECK_ERR(pulse_patch_open(&p, path_of("crafted")), PULSE_ERR_LIMIT);
    /* Absurd chunk size, tensor count, table length with a valid header digest. */
    ot[0].shape = pulse_ckpt_tensor(a, 0)->shape;
    CHECK_OK(patch_write_file(path_of("crafted"), PULSE_VALUES_ULP, CHUNK, ida, ida, ot, n));
    size_t len;
    uint8_t *buf = slurp(path_of("crafted"), &len);
    struct { size_t off; unsigned bytes; uint64_t v; int want; } hdr[] = {
        { 16, 4, 0, PULSE_ERR_LIMIT },
        { 16, 4, 0xffffffffu, PULSE_ERR_LIMIT },
        { 20, 4, 0xffffffffu, PULSE_ERR_LIMIT },
        { 20, 4, 100000, PULSE_ERR_FORMAT },
        { 88, 8, 1ull << 60, PULSE_ERR_FORMAT },
        { 96, 8, ~0ull, PULSE_ERR_FORMAT },
        { 8, 4, 1, PULSE_ERR_UNSUPPORTED },   /* version 1: the old value layout */
        { 8, 4, PULSE_PATCH_VERSION_CONTEXT + 1, PULSE_ERR_UNSUPPORTED },   /* format 6: no longer read */
        { 8, 4, PATCH_VERSION_BY_DIRECTION + 1, PULSE_ERR_UNSUPPORTED },
        { 12, 1, 7, PULSE_ERR_FORMAT },
    };
    for (size_t h = 0; buf && h < sizeof hdr / sizeof hdr[0]; h++) {
        uint8_t *cp = malloc(len);
        memcpy(cp, buf, len);
        for (unsigned i = 0; i < hdr[h].bytes; i++)
            cp[hdr[h].off + i] = (uint8_t)(hdr[h].v >> (8 * i));
        uint64_t tl = 0;
        for (unsigned i = 0; i < 8; i++)
            tl |= (uint64_t)cp[88 + i] << (8 * i);
        if (PATCH_HEADER_BYTES + tl + 32 <= len)   /* re-seal so the field check is what refuses */
            pulse_sha256(cp, PATCH_HEADER_BYTES + tl, cp + PATCH_HEADER_BYTES + tl);
        CHECK_ERR(pulse_patch_open_mem(&p, cp, len), hdr[h].want);
        free(cp);
    }
    free(buf);
    for (size_t i = 0; i < n; i++)
        free(ot[i].chunks);
    free(ot);
}

static void test_layout_mismatch(pulse_ckpt *a)
{
    static const pulse_tensor_spec other[][2] = {
        { { "a.bf16", "BF16", 1, { 1000 } }, { "b", "F32", 1, { 4 } } },   /* shape */
        { { "a.bf16", "F16", 2, { 10, 100 } }, { "b", "F32", 1, { 4 } } }, /* dtype */
        { { "a.bf17", "BF16", 2, { 10, 100 } }, { "b", "F32", 1, { 4 } } },/* name */
    };
    pulse_diff_opts o = opts_for(PULSE_VALUES_ULP);
    for (size_t k = 0; k < 3; k++) {
        pulse_ckpt *x = NULL, *y = NULL;
        CHECK_OK(pulse_ckpt_create(&x, path_of("lx.safetensors"), other[k], 2, NULL));
        if (!x)
            continue;
        CHECK_OK(pulse_ckpt_commit(x));
        CHECK_ERR(pulse_patch_diff(a, x, &o, path_of("lm.patch")), PULSE_ERR_MISMATCH);
        CHECK(strstr(pulse_last_error(), "layout changed") != NULL);
        CHECK(access(path_of("lm.patch"), F_OK) != 0);
        /* A patch for x's layout refused by a (a patch x -> x). */
        CHECK_OK(pulse_patch_diff(x, x, &o, path_of("xx.patch")));
        pulse_patch *p = NULL;
        CHECK_OK(pulse_patch_open(&p, path_of("xx.patch")));
        CHECK_OK(pulse_ckpt_open(&y, path_of("result.safetensors"), PULSE_CKPT_WRITE));
        if (p && y)
            CHECK_ERR(pulse_patch_apply(p, y, 1), PULSE_ERR_MISMATCH);
        pulse_patch_close(&p);
        pulse_ckpt_close(&y);
        pulse_ckpt_close(&x);
    }
    /* Unwritable output: no file, an IO error. */
    CHECK_ERR(pulse_patch_diff(a, a, &o, "/nonexistent-dir/x.patch"), PULSE_ERR_IO);
    CHECK(access("/nonexistent-dir/x.patch", F_OK) != 0);
}

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* Order-0 bits of n symbols: sum over distinct symbols of count * log2(n / count). */
static double order0_bits(uint32_t *sym, size_t n)
{
    qsort(sym, n, sizeof *sym, cmp_u32);
    double bits = 0;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i; j < n && sym[j] == sym[i]; j++)
            ;
        bits += (double)(j - i) * log2((double)n / (double)(j - i));
    }
    return bits;
}

/* The bound `inspect` reports, recomputed here from the two checkpoints: gaps within each
 * chunk and zigzag ulp differences, over all element-wise tensors. */
static double bound_of(const pulse_ckpt *x, const pulse_ckpt *y, uint32_t chunk)
{
    size_t cap = 0;
    for (size_t i = 0; i < pulse_ckpt_count(x); i++)
        cap += pulse_ckpt_tensor(x, i)->nelems;
    uint32_t *gaps = malloc(cap * sizeof *gaps), *vals = malloc(cap * sizeof *vals);
    size_t n = 0;
    for (size_t i = 0; gaps && vals && i < pulse_ckpt_count(x); i++) {
        const pulse_tensor *a = pulse_ckpt_tensor(x, i), *b = pulse_ckpt_tensor(y, i);
        unsigned w = a->elem_size;
        int64_t prev = -1;
        for (uint64_t e = 0; e < a->nelems; e++) {
            if (e % chunk == 0)
                prev = (int64_t)e - 1;
            uint32_t u = 0, v = 0;
            memcpy(&u, a->data + e * w, w);
            memcpy(&v, b->data + e * w, w);
            if (u == v)
                continue;
            uint64_t mod = 1ull << (8 * w), d = ((uint64_t)v - u) & (mod - 1);
            uint64_t z = d < mod / 2 ? 2 * d : 2 * (mod - d) - 1;   /* zigzag of the signed difference */
            gaps[n] = (uint32_t)((int64_t)e - prev - 1);
            vals[n++] = (uint32_t)z;
            prev = (int64_t)e;
        }
    }
    double bits = gaps && vals ? order0_bits(gaps, n) + order0_bits(vals, n) : -1;
    free(gaps);
    free(vals);
    return bits;
}

/* ulp round trips through every symbol width and the escape path: per BF16 chunk a
 * different spread of differences (+-1 with 2% escapes, |d| < 8, |d| up to 127), then
 * wrapping and extreme differences and NaN/Inf/-0 transitions for BF16, F32 and F8. */
/* Two fresh checkpoints of one layout, NAME-x and NAME-y; 0 (both closed) when either fails. */
static int make_pair(const char *name, const pulse_tensor_spec *sp, size_t n, pulse_ckpt **x, pulse_ckpt **y)
{
    char nx[64], ny[64];
    snprintf(nx, sizeof nx, "%s-x.safetensors", name);
    snprintf(ny, sizeof ny, "%s-y.safetensors", name);
    *x = *y = NULL;
    CHECK_OK(pulse_ckpt_create(x, path_of(nx), sp, n, NULL));
    CHECK_OK(pulse_ckpt_create(y, path_of(ny), sp, n, NULL));
    if (*x && *y)
        return 1;
    pulse_ckpt_close(x);
    pulse_ckpt_close(y);
    return 0;
}

/* The diff codes each chunk's positions in Rice or zstd, whichever is smaller: independent
 * changes (RL's usual step) go to Rice, a regular pattern and runs of changes to zstd, and
 * every one of them applies bit for bit. */
static void test_position_codings(void)
{
    enum { CH = 4096, N = 3 * CH };
    static const pulse_tensor_spec sp[] = { { "a", "BF16", 1, { N } } };
    pulse_ckpt *x, *y;
    if (!make_pair("pos", sp, 1, &x, &y))
        return;
    uint16_t *a0 = (uint16_t *)(void *)pulse_ckpt_tensor(x, 0)->data;
    uint16_t *a1 = (uint16_t *)(void *)pulse_ckpt_tensor(y, 0)->data;
    rng = 7;
    for (unsigned i = 0; i < N; i++) {
        a0[i] = a1[i] = (uint16_t)rnd();
        int change = i < CH ? rnd() % 20 == 0        /* chunk 0: independent, 5 % */
                     : i < 2 * CH ? i % 4 == 0       /* chunk 1: every fourth element */
                                  : i % 1000 < 200;  /* chunk 2: runs of 200 in 1000 */
        if (change)
            a1[i] = (uint16_t)(a0[i] + (rnd() % 2 ? 1 : -1));
    }
    CHECK_OK(pulse_ckpt_commit(x));
    CHECK_OK(pulse_ckpt_commit(y));
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.chunk_elems = CH;
    CHECK_OK(pulse_patch_diff(x, y, &o, path_of("pos.patch")));
    size_t len = 0;
    uint8_t *bytes = slurp(path_of("pos.patch"), &len);
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of("pos.patch")));
    if (p && bytes) {
        CHECK_EQ_INT((int)p->nchunks, 3);
        CHECK_EQ_INT((int)pulse_patch_version(p), PULSE_PATCH_VERSION);
        for (size_t i = 0; i < p->nchunks && i < 3; i++) {
            unsigned coding = bytes[p->data_off + p->chunks[i].offset];
            if (i == 0)
                CHECK(coding >= PATCH_POS_RICE && coding <= PATCH_POS_RICE + 31);
            else
                CHECK_EQ_INT((int)coding, (int)PATCH_POS_ZSTD);
        }
        pulse_ckpt *r = NULL;
        CHECK_OK(apply_to_copy(p, x, "pos-r.safetensors", &r));
        CHECK(r && same_data(r, y));
        pulse_ckpt_close(&r);
    }
    pulse_patch_close(&p);
    free(bytes);
    pulse_ckpt_close(&x);
    pulse_ckpt_close(&y);
}

static void test_ulp_escapes(void)
{
    enum { N = 3 * 4096, CH = 4096 };
    static const pulse_tensor_spec sp[] = {
        { "a", "BF16", 1, { N } }, { "b", "F32", 1, { 16 } }, { "c", "F8_E5M2", 1, { 16 } },
    };
    pulse_ckpt *x, *y;
    if (!make_pair("esc", sp, 3, &x, &y))
        return;
    uint16_t *a0 = (uint16_t *)(void *)pulse_ckpt_tensor(x, 0)->data;
    uint16_t *a1 = (uint16_t *)(void *)pulse_ckpt_tensor(y, 0)->data;
    rng = 42;
    for (unsigned i = 0; i < N; i++) {
        a0[i] = a1[i] = (uint16_t)rnd();
        int d = 0;
        if (i < CH)
            d = rnd() % 50 == 0 ? 2 + (int)(rnd() % 5) : 1;
        else if (i < 2 * CH)
            d = 1 + (int)(rnd() % 7);
        else
            d = 1 + (int)(rnd() % 127);
        a1[i] = (uint16_t)(a0[i] + (rnd() % 2 ? d : -d));
    }
    /* Wraps and extremes in the last chunk: 0xffff -> 0, 0 -> 0xffff, d = -32768 (zigzag
     * 65535, the largest), NaN -> -NaN, +Inf -> NaN, -0 -> +0. */
    static const uint16_t from16[] = { 0xffff, 0x0000, 0x8000, 0x7fc0, 0x7f80, 0x8000, 0x1234 };
    static const uint16_t to16[] = { 0x0000, 0xffff, 0x0000, 0xffc0, 0x7fc1, 0x0000, 0x9234 };
    for (unsigned i = 0; i < sizeof from16 / sizeof from16[0]; i++) {
        a0[2 * CH + 3 * i] = from16[i];
        a1[2 * CH + 3 * i] = to16[i];
    }
    static const uint32_t from32[] = { 0xffffffffu, 0, 0x80000000u, 0x7fc00000u, 0x3f800000u, 5 };
    static const uint32_t to32[] = { 0, 0xffffffffu, 0, 0xffc00000u, 0x3f800001u, 5 };
    static const uint8_t from8[] = { 0xff, 0, 0x80, 0x7c, 0x7e, 1, 2, 3 };
    static const uint8_t to8[] = { 0, 0xff, 0, 0x7e, 0xfc, 2, 1, 3 };
    memcpy(pulse_ckpt_tensor(x, 1)->data, from32, sizeof from32);
    memcpy(pulse_ckpt_tensor(y, 1)->data, to32, sizeof to32);
    memcpy(pulse_ckpt_tensor(x, 2)->data, from8, sizeof from8);
    memcpy(pulse_ckpt_tensor(y, 2)->data, to8, sizeof to8);
    CHECK_OK(pulse_ckpt_commit(x));
    CHECK_OK(pulse_ckpt_commit(y));
    pulse_diff_opts o = opts_for(PULSE_VALUES_ULP);
    o.chunk_elems = CH;
    /* Level 1: the first chunk's 2-bit coding (with its escape frame) is then the smallest by
     * a clear margin; at the default fast level the 4-bit trial of this small chunk wins. */
    o.zstd_level = 1;
    CHECK_OK(pulse_patch_diff(x, y, &o, path_of("esc.ulp")));
    pulse_patch *p = NULL;
    /* In memory, so that the test can look at the coded bytes (p->data). */
    size_t esc_len = 0;
    uint8_t *esc_buf = slurp(path_of("esc.ulp"), &esc_len);
    CHECK(esc_buf != NULL);
    if (esc_buf)
        CHECK_OK(pulse_patch_open_mem(&p, esc_buf, esc_len));
    free(esc_buf);
    if (p) {
        /* The widths chosen per BF16 chunk, and the escape frame where escapes are needed. */
        static const uint8_t want_bits[3] = { 2, 4, 8 };
        CHECK_EQ_INT(p->tensors[0].ncoded, 3);
        for (size_t c = 0; c < 3 && c < p->nchunks; c++) {
            const patch_chunk *pc = &p->chunks[c];
            const uint8_t *v = p->data + pc->offset + pc->pos_len;
            /* The middle chunk (differences 1..7, no escapes at 4 or 8 bits) is a near tie
             * between 4 and 8 bits, which the trial compression settles per zstd level. */
            if (c == 1)
                CHECK(v[0] == 4 || v[0] == 8);
            else
                CHECK_EQ_INT(v[0], want_bits[c]);
            size_t f = ZSTD_findFrameCompressedSize(v + 1, pc->val_len - 1);
            CHECK(!ZSTD_isError(f));
            if (c != 1)
                CHECK(1 + f < pc->val_len);   /* an escape frame follows */
        }
        /* inspect's bound (decoded on all cores, histograms merged) is the one computed here. */
        pulse_patch_stats st;
        CHECK_OK(pulse_patch_info(p, 1, &st));
        double want = bound_of(x, y, CH);
        CHECK(want > 0 && fabs(st.entropy_bits - want) < 1e-6 * want);
        pulse_ckpt *r = NULL;
        CHECK_OK(apply_to_copy(p, x, "esc-r.safetensors", &r));
        if (r)
            CHECK(same_data(r, y));
        pulse_ckpt_close(&r);
        /* Squash with the base turns it into an equivalent abs patch. */
        pulse_patch *one[1] = { p };
        CHECK_OK(pulse_patch_squash(one, 1, x, 1, 0, path_of("esc.sq")));
        pulse_patch *q = NULL;
        CHECK_OK(pulse_patch_open(&q, path_of("esc.sq")));
        if (q)
            CHECK_OK(apply_to_copy(q, x, "esc-r2.safetensors", &r));
        if (r)
            CHECK(same_data(r, y));
        pulse_ckpt_close(&r);
        pulse_patch_close(&q);
    }
    pulse_patch_close(&p);
    pulse_ckpt_close(&x);
    pulse_ckpt_close(&y);
}

/* pulse_patch_apply_ex: the trusted base id is still compared with the patch's; a false
 * trust is caught by the result check unless that is skipped too; bad options refused. */
static void test_apply_opts(pulse_ckpt *a, pulse_ckpt *b, pulse_ckpt *c)
{
    pulse_diff_opts d = opts_for(PULSE_VALUES_ULP);
    CHECK_OK(pulse_patch_diff(a, b, &d, path_of("opt.ulp")));
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of("opt.ulp")));
    if (!p)
        return;
    uint8_t ida[32], idc[32];
    CHECK_OK(pulse_ckpt_state_id(a, 1, ida));
    CHECK_OK(pulse_ckpt_state_id(c, 1, idc));
    pulse_patch_apply_opts o;
    pulse_patch_apply_opts_default(&o);
    CHECK_EQ_INT(o.size, sizeof o);
    CHECK(o.trust_base_id == NULL && o.skip_result_check == 0);
    pulse_ckpt *t = NULL;
    /* Trusted, true: applies, result checked. */
    CHECK_OK(pulse_ckpt_create_like(&t, path_of("opt1.safetensors"), a));
    o.trust_base_id = ida;
    if (t) {
        CHECK_OK(pulse_patch_apply_ex(p, t, &o));
        CHECK(same_data(t, b));
        /* A trusted id that is not the patch's base: refused, untouched. */
        o.trust_base_id = idc;
        CHECK_ERR(pulse_patch_apply_ex(p, t, &o), PULSE_ERR_MISMATCH);
        CHECK(same_data(t, b));
        pulse_ckpt_close(&t);
    }
    /* A false trust (target is c, caller claims a): the result check catches it... */
    CHECK_OK(pulse_ckpt_create_like(&t, path_of("opt2.safetensors"), c));
    o.trust_base_id = ida;
    if (t) {
        CHECK_ERR(pulse_patch_apply_ex(p, t, &o), PULSE_ERR_CORRUPT);
        pulse_ckpt_close(&t);
    }
    /* ...and with the check skipped it is the caller's problem: success, wrong bytes. */
    CHECK_OK(pulse_ckpt_create_like(&t, path_of("opt3.safetensors"), c));
    o.skip_result_check = 1;
    if (t) {
        CHECK_OK(pulse_patch_apply_ex(p, t, &o));
        CHECK(!same_data(t, b));
        pulse_ckpt_close(&t);
    }
    /* Defaults through NULL opts; a size from the future is refused. */
    CHECK_OK(pulse_ckpt_create_like(&t, path_of("opt4.safetensors"), a));
    if (t) {
        o.size = sizeof o + 8;
        CHECK_ERR(pulse_patch_apply_ex(p, t, &o), PULSE_ERR_INVALID);
        CHECK_OK(pulse_patch_apply_ex(p, t, NULL));
        CHECK(same_data(t, b));
        pulse_ckpt_close(&t);
    }
    pulse_patch_close(&p);
}

/* A patch opened from a file keeps only its header and tables in memory and reads each
 * chunk when it is used: bytes that change or vanish in the file after open are caught by
 * the chunk digest (CORRUPT) or the short read (IO), never decoded and never a crash. */
static void test_file_changes(pulse_ckpt *a, pulse_ckpt *b)
{
    pulse_diff_opts o = opts_for(PULSE_VALUES_ULP);
    CHECK_OK(pulse_patch_diff(a, b, &o, path_of("chg.ulp")));
    size_t len = 0;
    uint8_t *orig = slurp(path_of("chg.ulp"), &len);
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of("chg.ulp")));
    if (!orig || !p) {
        free(orig);
        pulse_patch_close(&p);
        return;
    }
    CHECK(p->data == NULL && p->nchunks > 0);   /* chunk data stays in the file */
    CHECK_OK(pulse_patch_verify(p, a, 2));
    int fd = open(path_of("chg.ulp"), O_WRONLY);
    CHECK(fd >= 0);
    uint8_t x = orig[len - 1] ^ 0x40;
    CHECK(pwrite(fd, &x, 1, (off_t)(len - 1)) == 1);   /* the last chunk's last byte */
    CHECK_ERR(pulse_patch_verify(p, a, 2), PULSE_ERR_CORRUPT);
    pulse_ckpt *t = NULL;
    CHECK_OK(pulse_ckpt_create_like(&t, path_of("chg-t.safetensors"), a));
    if (t) {
        CHECK_ERR(pulse_patch_apply(p, t, 2), PULSE_ERR_CORRUPT);
        CHECK(same_data(t, a));   /* refused before anything was written */
    }
    CHECK(ftruncate(fd, (off_t)(len / 2)) == 0);
    CHECK_ERR(pulse_patch_verify(p, a, 2), PULSE_ERR_IO);
    CHECK(pwrite(fd, orig, len, 0) == (ssize_t)len);   /* the original bytes again */
    close(fd);
    CHECK_OK(pulse_patch_verify(p, a, 2));
    if (t) {
        CHECK_OK(pulse_patch_apply(p, t, 2));
        CHECK(same_data(t, b));
    }
    pulse_ckpt_close(&t);
    pulse_patch_close(&p);
    free(orig);
}

/* The diff writes each coded chunk straight to its place in the file, in table order, whatever
 * order the threads finish in: a chunk that finishes early waits in memory (up to
 * PULSE_DIFF_PARK bytes over all of them, then its thread waits). Every thread count and cap,
 * the one-byte cap that makes threads wait almost every time included, gives the bytes of the
 * one-thread diff; so does every background flush step (PULSE_PATCH_FLUSH: off, after every
 * chunk, every 4 KiB, the default), the flusher's fdatasync running while chunks are put. */
static void test_thread_order(pulse_ckpt *a, pulse_ckpt *b)
{
    static const pulse_value_code codes[] = { PULSE_VALUES_ULP, PULSE_VALUES_ABS };
    static const int threads[] = { 2, 3, 8 };
    static const char *caps[] = { NULL, "0", "1", "300" };
    static const char *flush_steps[] = { "0", "1", "4K", NULL };
    for (size_t v = 0; v < 2; v++) {
        pulse_diff_opts o = opts_for(codes[v]);
        o.threads = 1;
        CHECK_OK(pulse_patch_diff(a, b, &o, path_of("order-1")));
        size_t want_len = 0;
        uint8_t *want = slurp(path_of("order-1"), &want_len);
        CHECK(want != NULL && want_len > 0);
        for (size_t t = 0; want && t < sizeof threads / sizeof threads[0]; t++)
            for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++)
                for (int rep = 0; rep < 4; rep++) {
                    if (caps[c])
                        setenv("PULSE_DIFF_PARK", caps[c], 1);
                    else
                        unsetenv("PULSE_DIFF_PARK");
                    if (flush_steps[rep])
                        setenv("PULSE_PATCH_FLUSH", flush_steps[rep], 1);
                    else
                        unsetenv("PULSE_PATCH_FLUSH");
                    o.threads = threads[t];
                    CHECK_OK(pulse_patch_diff(a, b, &o, path_of("order-n")));
                    size_t len = 0;
                    uint8_t *got = slurp(path_of("order-n"), &len);
                    if (!got || len != want_len || memcmp(got, want, len) != 0) {
                        CHECK(!"diff bytes depend on the thread count");
                        fprintf(stderr, "  values %d, %d threads, PULSE_DIFF_PARK=%s, PULSE_PATCH_FLUSH=%s\n",
                                (int)codes[v], threads[t], caps[c] ? caps[c] : "(unset)",
                                flush_steps[rep] ? flush_steps[rep] : "(unset)");
                    }
                    free(got);
                }
        unsetenv("PULSE_DIFF_PARK");
        unsetenv("PULSE_PATCH_FLUSH");
        /* A scratch output (not made durable) has the same bytes. */
        o.threads = 2;
        o.scratch = 1;
        CHECK_OK(pulse_patch_diff(a, b, &o, path_of("order-scratch")));
        size_t slen = 0;
        uint8_t *sgot = slurp(path_of("order-scratch"), &slen);
        CHECK(want && sgot && slen == want_len && memcmp(sgot, want, slen) == 0);
        free(sgot);
        free(want);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/test-patch-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    pulse_ckpt *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(make_ckpt("a.safetensors", 1, 0, &a));
    CHECK_OK(make_ckpt("b.safetensors", 1, 1, &b));
    CHECK_OK(make_ckpt("c.safetensors", 1, 2, &c));
    if (a && b && c) {
        test_round_trip(a, b, PULSE_VALUES_ABS);
        test_round_trip(a, b, PULSE_VALUES_ULP);
        test_round_trip(b, c, PULSE_VALUES_ULP);
        test_no_change(a);
        test_squash(a, b, c);
        test_squash_one(a, b);
        test_damage(a, b);
        test_crafted(a);
        test_layout_mismatch(a);
        test_ulp_escapes();
        test_position_codings();
        test_apply_opts(a, b, c);
        test_file_changes(a, b);
        test_thread_order(a, b);
        test_thread_order(b, c);
    }
    pulse_ckpt_close(&a);
    pulse_ckpt_close(&b);
    pulse_ckpt_close(&c);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done("test_patch");
}
