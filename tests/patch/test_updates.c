/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of pulse_patch_tensor_updates: a patch's changes as index/values/deltas rebuild NEW from OLD bit for bit, on misaligned tensors, and bad requests and damaged chunks are refused. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
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
    static char bufs[4][512];
    static int at;
    char *b = bufs[at++ & 3];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

/* The layout, packed back to back from an odd address as a safetensors file may hold it (a U8
 * tensor of odd length first): every tensor after it is misaligned for its element size. */
#define CHUNK 16
typedef struct spec {
    const char *name, *dtype;
    uint64_t n;
    unsigned w;
} spec;
static const spec specs[] = {
    { "a.u8", "U8", 37, 1 },          /* opaque, odd length: shifts everything after it */
    { "b.bf16", "BF16", 300, 2 },     /* many chunks, sparse, some chunks unchanged */
    { "c.f32", "F32", 257, 4 },       /* large differences (escapes), last chunk short */
    { "d.i64", "I64", 40, 8 },        /* opaque, 320 bytes: 20 chunks */
    { "e.e4m3", "F8_E4M3", 50, 1 },
    { "f.f16", "F16", 24, 2 },        /* unchanged */
};
#define NSPECS (sizeof specs / sizeof specs[0])

typedef struct model {
    uint8_t *mem;       /* malloc'd; tensors start at mem + 1 */
    size_t off[NSPECS];
    size_t bytes;
    pulse_ckpt *ck;
} model;

static size_t layout(size_t off[NSPECS])
{
    size_t at = 1;   /* odd: nothing after the U8 tensor is aligned */
    for (size_t i = 0; i < NSPECS; i++) {
        off[i] = at;
        at += specs[i].n * specs[i].w;
    }
    return at;
}

static int wrap(model *m)
{
    pulse_mem_tensor mt[NSPECS];
    memset(mt, 0, sizeof mt);
    for (size_t i = 0; i < NSPECS; i++) {
        mt[i].name = specs[i].name;
        mt[i].dtype_name = specs[i].dtype;
        mt[i].ndim = 1;
        mt[i].shape[0] = specs[i].n;
        mt[i].data = m->mem + m->off[i];
        mt[i].nbytes = specs[i].n * specs[i].w;
    }
    return pulse_ckpt_wrap(&m->ck, mt, NSPECS, PULSE_CKPT_READ);
}

static void model_copy(model *dst, const model *src)
{
    dst->bytes = src->bytes;
    memcpy(dst->off, src->off, sizeof dst->off);
    dst->mem = malloc(src->bytes);
    memcpy(dst->mem, src->mem, src->bytes);
    dst->ck = NULL;
}

static void model_free(model *m)
{
    pulse_ckpt_close(&m->ck);
    free(m->mem);
    m->mem = NULL;
}

/* OLD random; NEW = OLD with sparse changes of every kind. */
static void make_pair(model *old, model *new_)
{
    old->bytes = layout(old->off);
    old->mem = malloc(old->bytes);
    for (size_t b = 0; b < old->bytes; b++)
        old->mem[b] = (uint8_t)rnd();
    model_copy(new_, old);
    uint8_t *nm = new_->mem;
    for (size_t i = 0; i < NSPECS; i++) {
        uint8_t *d = nm + new_->off[i];
        const unsigned w = specs[i].w;
        if (!strcmp(specs[i].name, "f.f16"))
            continue;
        for (uint64_t e = 0; e < specs[i].n; e++) {
            if (!strcmp(specs[i].name, "b.bf16") && (e / CHUNK) % 4 == 3)
                continue;   /* every fourth chunk unchanged: output slices are not chunk-aligned */
            if (rnd() % 100 >= (w == 8 ? 20u : 12u))
                continue;
            uint32_t x = 0;
            memcpy(&x, d + e * w, w < 4 ? w : 4);
            switch (rnd() % 4) {
            case 0: x += 1; break;
            case 1: x -= 1; break;
            case 2: x += (uint32_t)(rnd() % 5000) + 1; break;
            default: x ^= (uint32_t)rnd() | 1; break;
            }
            memcpy(d + e * w, &x, w < 4 ? w : 4);
        }
    }
    /* Wraparound of the bit pattern: 0xffff -> 0x0000 is +1 modulo 2^16. */
    uint8_t *bf = nm + new_->off[1], *bo = old->mem + old->off[1];
    bo[10] = 0xff, bo[11] = 0xff, bf[10] = 0, bf[11] = 0;
    CHECK_OK(wrap(old));
    CHECK_OK(wrap(new_));
}

static int diff(const model *a, const model *b, pulse_value_code v, const char *name)
{
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.values = v;
    o.chunk_elems = CHUNK;
    o.threads = 2;
    return pulse_patch_diff(a->ck, b->ck, &o, path_of(name));
}

typedef struct upd {
    uint64_t n;
    unsigned w;
    int64_t *index;
    uint8_t *values, *deltas;
} upd;

static void upd_free(upd *u)
{
    free(u->index);
    free(u->values);
    free(u->deltas);
    memset(u, 0, sizeof *u);
}

static int get(const pulse_patch *p, size_t i, const pulse_ckpt *base, int threads, int want_index, int want_values,
               int want_deltas, upd *u)
{
    pulse_patch_tensor_info info;
    memset(u, 0, sizeof *u);
    CHECK_OK(pulse_patch_tensor_info_get(p, i, 0, &info));
    u->n = pulse_patch_tensor_changes(p, i);
    CHECK_EQ_INT(u->n, info.changes);
    u->w = specs[i].w > 4 || !strcmp(specs[i].dtype, "U8") ? 1 : specs[i].w;
    size_t n = u->n ? u->n : 1;
    if (want_index)
        u->index = malloc(n * sizeof *u->index);
    if (want_values)
        u->values = malloc(n * u->w);
    if (want_deltas)
        u->deltas = malloc(n * u->w);
    /* Poison, so that a slot left unwritten shows. */
    if (u->index)
        memset(u->index, 0xa5, n * sizeof *u->index);
    if (u->values)
        memset(u->values, 0xa5, n * u->w);
    if (u->deltas)
        memset(u->deltas, 0xa5, n * u->w);
    return pulse_patch_tensor_updates(p, i, base, threads, u->index, u->values, u->deltas);
}

/* Applies u (values, else deltas) to tensor i of m; checks the indices on the way. */
static void apply(model *m, size_t i, const upd *u, int use_deltas)
{
    uint8_t *d = m->mem + m->off[i];
    const uint64_t units = specs[i].n * specs[i].w / u->w;
    for (uint64_t j = 0; j < u->n; j++) {
        CHECK(u->index[j] >= 0 && (uint64_t)u->index[j] < units);
        if (u->index[j] < 0 || (uint64_t)u->index[j] >= units)
            continue;
        if (j)
            CHECK(u->index[j] > u->index[j - 1]);
        uint8_t *at = d + (uint64_t)u->index[j] * u->w;
        if (!use_deltas) {
            memcpy(at, u->values + j * u->w, u->w);
        } else {
            uint32_t x = 0, dx = 0;
            memcpy(&x, at, u->w);
            memcpy(&dx, u->deltas + j * u->w, u->w);
            x += dx;
            memcpy(at, &x, u->w);
        }
    }
}

static int same_tensor(const model *a, const model *b, size_t i)
{
    return memcmp(a->mem + a->off[i], b->mem + b->off[i], specs[i].n * specs[i].w) == 0;
}

/* Every tensor through values and through deltas, with base, on `threads` threads. */
static void check_with_base(const pulse_patch *p, const model *old, const model *new_, int threads)
{
    model byv, byd;
    model_copy(&byv, old);
    model_copy(&byd, old);
    uint64_t total = 0;
    for (size_t i = 0; i < NSPECS; i++) {
        upd u;
        CHECK_OK(get(p, i, old->ck, threads, 1, 1, 1, &u));
        total += u.n;
        apply(&byv, i, &u, 0);
        apply(&byd, i, &u, 1);
        CHECK(same_tensor(&byv, new_, i));
        CHECK(same_tensor(&byd, new_, i));
        upd_free(&u);
    }
    CHECK(total > 60);
    CHECK(memcmp(byv.mem, new_->mem, new_->bytes) == 0);
    CHECK(memcmp(byd.mem, new_->mem, new_->bytes) == 0);
    model_free(&byv);
    model_free(&byd);
}

static void test_round_trip(const model *old, const model *new_, pulse_value_code v, const char *name)
{
    CHECK_OK(diff(old, new_, v, name));
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of(name)));
    if (!p)
        return;
    CHECK_EQ_INT(pulse_patch_tensor_count(p), NSPECS);
    CHECK_OK(pulse_patch_verify(p, old->ck, 2));
    /* Several chunks in the tensors tested, some of them unchanged. */
    pulse_patch_tensor_info info;
    CHECK_OK(pulse_patch_tensor_info_get(p, 1, 0, &info));
    CHECK(info.chunks == (300 + CHUNK - 1) / CHUNK && info.coded_chunks > 3 && info.coded_chunks < info.chunks);
    CHECK_OK(pulse_patch_tensor_info_get(p, 3, 0, &info));
    CHECK(info.coded_chunks > 1);
    CHECK_OK(pulse_patch_tensor_info_get(p, 5, 0, &info));
    CHECK_EQ_INT(info.changes, 0);

    check_with_base(p, old, new_, 1);
    check_with_base(p, old, new_, 3);

    /* Without base: the element-wise tensors through what the patch carries (ulp: deltas, abs:
     * values); the rest is refused by name, before anything is decoded. */
    model m;
    model_copy(&m, old);
    const int ulp = v == PULSE_VALUES_ULP;
    for (size_t i = 0; i < NSPECS; i++) {
        upd u;
        const int opaque = !strcmp(specs[i].dtype, "U8") || !strcmp(specs[i].dtype, "I64");
        if (opaque) {
            CHECK_ERR(get(p, i, NULL, 2, 1, 0, 0, &u), PULSE_ERR_INVALID);
            CHECK(strstr(pulse_last_error(), specs[i].name) != NULL);
            upd_free(&u);
            CHECK_ERR(get(p, i, NULL, 2, 0, 0, 1, &u), PULSE_ERR_INVALID);
            upd_free(&u);
            /* Nothing asked: the chunks are only checked. */
            CHECK_OK(pulse_patch_tensor_updates(p, i, NULL, 2, NULL, NULL, NULL));
            continue;
        }
        CHECK_ERR(get(p, i, NULL, 2, 1, ulp, !ulp, &u), PULSE_ERR_INVALID);
        CHECK(strstr(pulse_last_error(), specs[i].name) != NULL);
        CHECK(strstr(pulse_last_error(), ulp ? "values" : "deltas") != NULL);
        upd_free(&u);
        CHECK_OK(get(p, i, NULL, 2, 1, !ulp, ulp, &u));
        apply(&m, i, &u, ulp);
        CHECK(same_tensor(&m, new_, i));
        /* Only the index: the same positions. */
        upd only;
        CHECK_OK(get(p, i, NULL, 2, 1, 0, 0, &only));
        CHECK(only.n == u.n && memcmp(only.index, u.index, u.n * sizeof *u.index) == 0);
        upd_free(&only);
        upd_free(&u);
    }
    model_free(&m);

    /* The same from memory. */
    size_t len = 0;
    int fd = open(path_of(name), O_RDONLY);
    uint8_t *buf = malloc(1 << 20);
    ssize_t got = fd >= 0 ? read(fd, buf, 1 << 20) : -1;
    if (fd >= 0)
        close(fd);
    CHECK(got > 0);
    len = got > 0 ? (size_t)got : 0;
    pulse_patch *pm = NULL;
    CHECK_OK(pulse_patch_open_mem(&pm, buf, len));
    free(buf);
    if (pm)
        check_with_base(pm, old, new_, 2);
    pulse_patch_close(&pm);

    /* Bad arguments and a base that is not in the base state. */
    CHECK_ERR(pulse_patch_tensor_updates(p, NSPECS, NULL, 1, NULL, NULL, NULL), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_patch_tensor_updates(NULL, 0, NULL, 1, NULL, NULL, NULL), PULSE_ERR_INVALID);
    CHECK_EQ_INT(pulse_patch_tensor_changes(p, NSPECS), 0);
    CHECK_EQ_INT(pulse_patch_tensor_changes(NULL, 0), 0);
    upd u;
    CHECK_ERR(get(p, 3, new_->ck, 2, 1, 1, 1, &u), PULSE_ERR_MISMATCH);   /* I64 bytes: 0 differ from NEW */
    CHECK(strstr(pulse_last_error(), "d.i64") != NULL);
    upd_free(&u);
    pulse_patch_close(&p);
}

/* A base of another layout is refused by name. */
static void test_layout(const model *old)
{
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of("ulp.patch")));
    if (!p)
        return;
    pulse_mem_tensor mt[NSPECS];
    memset(mt, 0, sizeof mt);
    for (size_t i = 0; i < NSPECS; i++) {
        mt[i].name = specs[i].name;
        mt[i].dtype_name = specs[i].dtype;
        mt[i].ndim = 1;
        mt[i].shape[0] = specs[i].n;
        mt[i].data = old->mem + old->off[i];
        mt[i].nbytes = specs[i].n * specs[i].w;
    }
    mt[2].shape[0] = 256;   /* c.f32 one element short */
    mt[2].nbytes = 256 * 4;
    pulse_ckpt *other = NULL;
    CHECK_OK(pulse_ckpt_wrap(&other, mt, NSPECS, PULSE_CKPT_READ));
    upd u;
    CHECK_ERR(get(p, 2, other, 2, 1, 1, 1, &u), PULSE_ERR_MISMATCH);
    CHECK(strstr(pulse_last_error(), "c.f32") != NULL);
    upd_free(&u);
    /* Only tensor i is compared (a walk over all tensors stays linear); verify compares all. */
    CHECK_OK(get(p, 1, other, 2, 1, 1, 1, &u));
    upd_free(&u);
    CHECK_ERR(pulse_patch_verify(p, other, 2), PULSE_ERR_MISMATCH);
    pulse_ckpt_close(&other);
    /* A tensor less: refused whichever tensor is asked. */
    CHECK_OK(pulse_ckpt_wrap(&other, mt, NSPECS - 1, PULSE_CKPT_READ));
    CHECK_ERR(get(p, 0, other, 2, 1, 1, 1, &u), PULSE_ERR_MISMATCH);
    upd_free(&u);
    pulse_ckpt_close(&other);
    /* Another dtype of the same width. */
    mt[2].shape[0] = 257;
    mt[2].nbytes = 257 * 4;
    mt[2].dtype_name = "I32";
    CHECK_OK(pulse_ckpt_wrap(&other, mt, NSPECS, PULSE_CKPT_READ));
    CHECK_ERR(get(p, 2, other, 2, 1, 1, 1, &u), PULSE_ERR_MISMATCH);
    CHECK(strstr(pulse_last_error(), "c.f32") != NULL);
    upd_free(&u);
    pulse_ckpt_close(&other);
    pulse_patch_close(&p);
}

/* A byte of a chunk's data flipped in the file: the chunk's digest catches it. */
static void test_corrupt(const model *old, pulse_value_code v, const char *name)
{
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path_of(name)));
    if (!p)
        return;
    const patch_tensor *t = &p->tensors[1];
    CHECK(t->ncoded > 2);
    const patch_chunk *c = &p->chunks[t->first_coded + 2];   /* the third coded chunk of b.bf16 */
    off_t at = (off_t)(p->data_off + c->offset + patch_chunk_coded(c) / 2);
    pulse_patch_close(&p);
    int fd = open(path_of(name), O_RDWR);
    CHECK(fd >= 0);
    uint8_t b = 0;
    CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x10;
    CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);

    CHECK_OK(pulse_patch_open(&p, path_of(name)));   /* open reads only the table */
    if (!p)
        return;
    const int ulp = v == PULSE_VALUES_ULP;
    for (int threads = 1; threads <= 3; threads += 2) {
        upd u;
        CHECK_ERR(get(p, 1, old->ck, threads, 1, 1, 1, &u), PULSE_ERR_CORRUPT);
        CHECK(strstr(pulse_last_error(), "b.bf16") != NULL);
        upd_free(&u);
        CHECK_ERR(get(p, 1, NULL, threads, 1, !ulp, ulp, &u), PULSE_ERR_CORRUPT);
        upd_free(&u);
    }
    CHECK_ERR(pulse_patch_verify(p, NULL, 2), PULSE_ERR_CORRUPT);
    /* Another tensor still decodes: why callers verify the whole patch first. */
    upd u;
    CHECK_OK(get(p, 2, old->ck, 2, 1, 1, 1, &u));
    upd_free(&u);
    pulse_patch_close(&p);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-test-updates-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    model old, new_;
    make_pair(&old, &new_);
    test_round_trip(&old, &new_, PULSE_VALUES_ULP, "ulp.patch");
    test_round_trip(&old, &new_, PULSE_VALUES_ABS, "abs.patch");
    test_layout(&old);
    test_corrupt(&old, PULSE_VALUES_ULP, "ulp.patch");
    test_corrupt(&old, PULSE_VALUES_ABS, "abs.patch");
    model_free(&old);
    model_free(&new_);
    unlink(path_of("ulp.patch"));
    unlink(path_of("abs.patch"));
    rmdir(dir);
    return check_done("test_updates");
}
