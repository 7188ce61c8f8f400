/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoint I/O and state ids: write, reopen, shard, copy, and refuse every kind of malformed file. */
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "node/checkpoint/ckpt_internal.h"
#include "pulseweights/checkpoint.h"

static char dir[64];

static const char *at(const char *name)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

/* A safetensors file byte by byte: the 8-byte length (hlen, or the JSON's own when
 * hlen == UINT64_MAX), the header text, then data_len bytes of data. */
static void write_raw(const char *path, const char *json, uint64_t hlen, size_t data_len)
{
    size_t jl = strlen(json);
    if (hlen == UINT64_MAX)
        hlen = jl;
    size_t n = 8 + jl + data_len;
    uint8_t *b = calloc(1, n);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(b + 8, json, jl);
    for (size_t i = 0; i < data_len; i++)
        b[8 + jl + i] = (uint8_t)(i * 7 + 1);
    write_bytes(path, b, n);
    free(b);
}

static int open_raw(const char *json, size_t data_len)
{
    write_raw(at("bad.safetensors"), json, UINT64_MAX, data_len);
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_open(&c, at("bad.safetensors"), PULSE_CKPT_READ);
    CHECK(r ? c == NULL : c != NULL);
    pulse_ckpt_close(&c);
    return r;
}

static void state_id(const char *path, int threads, uint8_t id[32])
{
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_open(&c, path, PULSE_CKPT_READ));
    if (!c) {
        memset(id, 0, 32);
        return;
    }
    CHECK_OK(pulse_ckpt_state_id(c, threads, id));
    pulse_ckpt_close(&c);
}

/* Deterministic bytes for tensor `name`, so files written twice hold the same data. */
static void fill(const pulse_tensor *t, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 12345;
    for (const char *p = t->name; *p; p++)
        x = x * 31 + (uint8_t)*p;
    for (uint64_t i = 0; i < t->nbytes; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        t->data[i] = (uint8_t)x;
    }
}

static int check_fill(const pulse_tensor *t, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 12345;
    for (const char *p = t->name; *p; p++)
        x = x * 31 + (uint8_t)*p;
    for (uint64_t i = 0; i < t->nbytes; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        if (t->data[i] != (uint8_t)x)
            return 0;
    }
    return 1;
}

/* Writes specs[0..n) with data fill(seed) to path and commits. */
static void make(const char *path, const pulse_tensor_spec *specs, size_t n, const char *meta, uint32_t seed)
{
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_create(&c, path, specs, n, meta));
    if (!c)
        return;
    for (size_t i = 0; i < pulse_ckpt_count(c); i++)
        fill(pulse_ckpt_tensor(c, i), seed);
    CHECK_OK(pulse_ckpt_commit(c));
    pulse_ckpt_close(&c);
}

static const pulse_tensor_spec specs[] = {
    { "model.layers.0.mlp.weight", "BF16", 2, { 64, 48 } },
    { "model.norm.weight", "F32", 1, { 33 } },
    { "step", "I64", 0, { 0 } },                        /* a scalar, opaque */
    { "lm_head.weight", "F16", 2, { 5, 7 } },
    { "fp8.e4m3", "F8_E4M3", 3, { 3, 1, 5 } },
    { "fp8.e5m2", "F8_E5M2", 1, { 9 } },
    { "mask", "BOOL", 1, { 11 } },
    { "empty", "F32", 2, { 0, 4 } },
    { "big", "F32", 1, { (7u << 20) / 8 } },            /* 3.5 MiB: four state-id chunks */
};
#define NSPECS (sizeof specs / sizeof specs[0])

static void test_write_read(void)
{
    const char *meta = "{ \"format\" : \"pt\", \"note\": \"tab\\there \\u00e9 \\ud83d\\ude00\" }";
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_create(&c, at("a.safetensors"), specs, NSPECS, meta));
    if (!c)
        return;
    CHECK(!exists(at("a.safetensors")));   /* only the temporary until commit */
    for (size_t i = 0; i < pulse_ckpt_count(c); i++)
        fill(pulse_ckpt_tensor(c, i), 1);
    CHECK_OK(pulse_ckpt_commit(c));
    CHECK(exists(at("a.safetensors")));
    CHECK(!strcmp(pulse_ckpt_file_path(c, 0), at("a.safetensors")));
    uint8_t id_w[32];
    CHECK_OK(pulse_ckpt_state_id(c, 2, id_w));
    pulse_ckpt_close(&c);
    CHECK(c == NULL);

    CHECK_OK(pulse_ckpt_open(&c, at("a.safetensors"), PULSE_CKPT_READ));
    if (!c)
        return;
    CHECK_EQ_INT(pulse_ckpt_count(c), NSPECS);
    CHECK_EQ_INT(pulse_ckpt_nfiles(c), 1);
    CHECK(!strcmp(pulse_ckpt_metadata(c),
                  "{\"format\":\"pt\",\"note\":\"tab\\there \xc3\xa9 \xf0\x9f\x98\x80\"}"));
    for (size_t i = 1; i < pulse_ckpt_count(c); i++)
        CHECK(strcmp(pulse_ckpt_tensor(c, i - 1)->name, pulse_ckpt_tensor(c, i)->name) < 0);
    for (size_t s = 0; s < NSPECS; s++) {
        const pulse_tensor *t = pulse_ckpt_find(c, specs[s].name);
        CHECK(t != NULL);
        if (!t)
            continue;
        CHECK(!strcmp(t->dtype_name, specs[s].dtype_name));
        CHECK_EQ_INT(t->ndim, specs[s].ndim);
        uint64_t ne = 1;
        for (int k = 0; k < t->ndim; k++) {
            CHECK_EQ_INT(t->shape[k], specs[s].shape[k]);
            ne *= specs[s].shape[k];
        }
        CHECK_EQ_INT(t->nelems, ne);
        CHECK_EQ_INT(t->nbytes, ne * t->elem_size);
        CHECK_EQ_INT(t->file, 0);
        CHECK(((uintptr_t)t->data % t->elem_size) == 0);   /* each tensor aligned to its width */
        CHECK(check_fill(t, 1));
    }
    const pulse_tensor *t = pulse_ckpt_find(c, "step");
    CHECK(t && t->dtype == PULSE_DT_OPAQUE && t->elem_size == 8 && t->ndim == 0 && t->nelems == 1);
    t = pulse_ckpt_find(c, "mask");
    CHECK(t && t->dtype == PULSE_DT_OPAQUE && t->elem_size == 1);
    t = pulse_ckpt_find(c, "model.layers.0.mlp.weight");
    CHECK(t && t->dtype == PULSE_DT_BF16 && t->elem_size == 2);
    CHECK(pulse_ckpt_find(c, "lm_head.weight")->dtype == PULSE_DT_F16);
    CHECK(pulse_ckpt_find(c, "fp8.e4m3")->dtype == PULSE_DT_F8_E4M3);
    CHECK(pulse_ckpt_find(c, "fp8.e5m2")->dtype == PULSE_DT_F8_E5M2);
    CHECK(pulse_ckpt_find(c, "model.norm.weight")->dtype == PULSE_DT_F32);
    CHECK(pulse_ckpt_find(c, "empty")->nbytes == 0);
    CHECK(pulse_ckpt_find(c, "nope") == NULL);
    CHECK(pulse_ckpt_tensor(c, NSPECS) == NULL);

    /* The id of what was written equals the id of what is read, on any thread count. */
    uint8_t id1[32], id2[32], id3[32];
    CHECK_OK(pulse_ckpt_state_id(c, 1, id1));
    CHECK_OK(pulse_ckpt_state_id(c, 3, id2));
    CHECK_OK(pulse_ckpt_state_id(c, 0, id3));
    CHECK(!memcmp(id1, id_w, 32) && !memcmp(id1, id2, 32) && !memcmp(id1, id3, 32));
    /* Per-tensor hashes from the one-pass id equal pulse_tensor_hash, and build the id. */
    uint8_t th[NSPECS * 32], id4[32];
    CHECK_OK(ckpt_state_id_tensors(c, 2, id4, th));
    CHECK(!memcmp(id4, id1, 32));
    for (size_t i = 0; i < pulse_ckpt_count(c); i++) {
        uint8_t one[32];
        CHECK_OK(pulse_tensor_hash(pulse_ckpt_tensor(c, i), one));
        CHECK(!memcmp(one, th + i * 32, 32));
    }
    char hex[65];
    uint8_t back[32];
    CHECK_EQ_INT(strlen(pulse_id_hex(id1, hex)), 64);
    CHECK_OK(pulse_id_parse(hex, back));
    CHECK(!memcmp(back, id1, 32));
    CHECK_ERR(pulse_id_parse("abc", back), PULSE_ERR_FORMAT);
    hex[10] = 'g';
    CHECK_ERR(pulse_id_parse(hex, back), PULSE_ERR_FORMAT);
    pulse_ckpt_close(&c);
    pulse_ckpt_close(&c);   /* NULL-safe */

    /* A file without metadata reports "{}". */
    make(at("nometa.safetensors"), specs, 2, NULL, 1);
    CHECK_OK(pulse_ckpt_open(&c, at("nometa.safetensors"), PULSE_CKPT_READ));
    CHECK(c && !strcmp(pulse_ckpt_metadata(c), "{}"));
    pulse_ckpt_close(&c);
}

static void test_id_sensitivity(void)
{
    uint8_t base[32], other[32];
    state_id(at("a.safetensors"), 2, base);

    /* One byte of the last chunk of a multi-chunk tensor. */
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_open(&c, at("a.safetensors"), PULSE_CKPT_WRITE));
    if (!c)
        return;
    pulse_tensor *big = (pulse_tensor *)pulse_ckpt_find(c, "big");
    big->data[big->nbytes - 1] ^= 1;
    CHECK_OK(pulse_ckpt_sync(c));
    pulse_ckpt_close(&c);
    state_id(at("a.safetensors"), 2, other);
    CHECK(memcmp(base, other, 32) != 0);
    CHECK_OK(pulse_ckpt_open(&c, at("a.safetensors"), PULSE_CKPT_WRITE));
    big = (pulse_tensor *)pulse_ckpt_find(c, "big");
    big->data[big->nbytes - 1] ^= 1;   /* WRITE maps are shared: the flip reached the file */
    pulse_ckpt_close(&c);
    state_id(at("a.safetensors"), 1, other);
    CHECK(!memcmp(base, other, 32));

    /* A name, a shape (same bytes), a dtype (same width). */
    pulse_tensor_spec s[NSPECS];
    memcpy(s, specs, sizeof s);
    make(at("same.safetensors"), s, NSPECS, NULL, 1);
    state_id(at("same.safetensors"), 2, other);
    CHECK(!memcmp(base, other, 32));   /* metadata is not part of the state */
    s[1].name = "model.norm.weighT";
    make(at("renamed.safetensors"), s, NSPECS, NULL, 1);
    memcpy(s, specs, sizeof s);
    s[0].shape[0] = 48;
    s[0].shape[1] = 64;
    make(at("reshaped.safetensors"), s, NSPECS, NULL, 1);
    memcpy(s, specs, sizeof s);
    s[0].dtype_name = "F16";
    make(at("retyped.safetensors"), s, NSPECS, NULL, 1);
    const char *variants[] = { "renamed.safetensors", "reshaped.safetensors", "retyped.safetensors" };
    for (int i = 0; i < 3; i++) {
        state_id(at(variants[i]), 2, other);
        CHECK(memcmp(base, other, 32) != 0);
    }
    make(at("fewer.safetensors"), specs, NSPECS - 1, NULL, 1);
    state_id(at("fewer.safetensors"), 2, other);
    CHECK(memcmp(base, other, 32) != 0);
}

static void write_index(const char *path, const char *json)
{
    write_bytes(path, json, strlen(json));
}

static void test_sharded(void)
{
    /* The same tensors as a.safetensors, split over two shards. */
    mkdir(at("sharded"), 0755);
    make(at("sharded/model-00001-of-00002.safetensors"), specs, 4, "{\"format\":\"pt\"}", 1);
    make(at("sharded/model-00002-of-00002.safetensors"), specs + 4, NSPECS - 4, NULL, 1);
    char idx[4096];
    int n = snprintf(idx, sizeof idx, "{\"metadata\": {\"total_size\": 1234}, \"weight_map\": {");
    for (size_t i = 0; i < NSPECS; i++)
        n += snprintf(idx + n, sizeof idx - (size_t)n, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                      i ? ", " : "", specs[i].name, i < 4 ? 1 : 2);
    snprintf(idx + n, sizeof idx - (size_t)n, "}}");
    write_index(at("sharded/model.safetensors.index.json"), idx);

    uint8_t single[32], by_dir[32], by_index[32];
    state_id(at("a.safetensors"), 2, single);
    state_id(at("sharded"), 2, by_dir);
    state_id(at("sharded/model.safetensors.index.json"), 1, by_index);
    CHECK(!memcmp(single, by_dir, 32));
    CHECK(!memcmp(single, by_index, 32));

    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_open(&c, at("sharded"), PULSE_CKPT_READ));
    if (!c)
        return;
    CHECK_EQ_INT(pulse_ckpt_nfiles(c), 2);
    CHECK(!strcmp(pulse_ckpt_file_path(c, 1), at("sharded/model-00002-of-00002.safetensors")));
    CHECK_EQ_INT(pulse_ckpt_find(c, "step")->file, 0);
    CHECK_EQ_INT(pulse_ckpt_find(c, "big")->file, 1);
    CHECK(check_fill(pulse_ckpt_find(c, "big"), 1));
    CHECK(!strcmp(pulse_ckpt_metadata(c), "{\"format\":\"pt\"}"));

    /* create_like of a sharded checkpoint: a directory with the same names and index. */
    pulse_ckpt *copy = NULL;
    CHECK_OK(pulse_ckpt_create_like(&copy, at("sharded-copy"), c));
    if (copy) {
        CHECK(!exists(at("sharded-copy")));
        CHECK_OK(pulse_ckpt_commit(copy));
        pulse_ckpt_close(&copy);
    }
    uint8_t copied[32];
    state_id(at("sharded-copy"), 2, copied);
    CHECK(!memcmp(single, copied, 32));
    CHECK(exists(at("sharded-copy/model.safetensors.index.json")));
    CHECK(exists(at("sharded-copy/model-00002-of-00002.safetensors")));

    /* Uncommitted: nothing left behind. */
    CHECK_OK(pulse_ckpt_create_like(&copy, at("sharded-gone"), c));
    pulse_ckpt_close(&copy);
    CHECK(!exists(at("sharded-gone")));
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", at("sharded-gone"), (long)getpid());
    CHECK(!exists(tmp));
    pulse_ckpt_close(&c);

    /* Bad indexes. */
    mkdir(at("badidx"), 0755);
    make(at("badidx/s1.safetensors"), specs, 2, NULL, 1);
    make(at("badidx/s2.safetensors"), specs + 2, 1, NULL, 1);
    struct { const char *json; int err; } cases[] = {
        { "{\"weight_map\": {\"model.layers.0.mlp.weight\": \"s1.safetensors\"}}", PULSE_ERR_FORMAT },
        { "{\"weight_map\": {\"model.layers.0.mlp.weight\": \"s1.safetensors\", \"model.norm.weight\": "
          "\"s2.safetensors\"}}", PULSE_ERR_FORMAT },
        { "{\"weight_map\": {\"model.layers.0.mlp.weight\": \"s1.safetensors\", \"model.norm.weight\": "
          "\"s1.safetensors\", \"extra\": \"s1.safetensors\"}}", PULSE_ERR_FORMAT },
        { "{\"weight_map\": {\"model.layers.0.mlp.weight\": \"../badidx/s1.safetensors\"}}", PULSE_ERR_FORMAT },
        { "{\"weight_map\": {\"model.layers.0.mlp.weight\": \"..\"}}", PULSE_ERR_FORMAT },
        { "{\"weight_map\": {\"x\": \"missing.safetensors\"}}", PULSE_ERR_NOTFOUND },
        { "{\"weight_map\": {}}", PULSE_ERR_FORMAT },
        { "{\"metadata\": {}}", PULSE_ERR_FORMAT },
        { "{\"weight_map\": {\"a\": 3}}", PULSE_ERR_FORMAT },
        { "{\"weight_map\": {\"a\": \"s1.safetensors\"}} junk", PULSE_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_index(at("badidx/model.safetensors.index.json"), cases[i].json);
        CHECK_ERR(pulse_ckpt_open(&c, at("badidx"), PULSE_CKPT_READ), cases[i].err);
        CHECK(c == NULL);
    }
    /* The same tensor in two shards. */
    make(at("badidx/s3.safetensors"), specs, 1, NULL, 1);
    write_index(at("badidx/model.safetensors.index.json"),
                "{\"weight_map\": {\"model.layers.0.mlp.weight\": \"s1.safetensors\", \"model.norm.weight\": "
                "\"s1.safetensors\", \"step\": \"s3.safetensors\"}}");
    CHECK_ERR(pulse_ckpt_open(&c, at("badidx"), PULSE_CKPT_READ), PULSE_ERR_FORMAT);
    /* The good index for these shards opens. */
    write_index(at("badidx/model.safetensors.index.json"),
                "{\"weight_map\": {\"model.layers.0.mlp.weight\": \"s1.safetensors\", \"model.norm.weight\": "
                "\"s1.safetensors\", \"step\": \"s2.safetensors\"}}");
    CHECK_OK(pulse_ckpt_open(&c, at("badidx"), PULSE_CKPT_READ));
    CHECK(c && pulse_ckpt_count(c) == 3 && pulse_ckpt_nfiles(c) == 2);
    pulse_ckpt_close(&c);
}

static void test_create_like_single(void)
{
    pulse_ckpt *a = NULL, *b = NULL;
    CHECK_OK(pulse_ckpt_open(&a, at("a.safetensors"), PULSE_CKPT_READ));
    if (!a)
        return;
    CHECK_OK(pulse_ckpt_create_like(&b, at("b.safetensors"), a));
    if (b) {
        CHECK(!exists(at("b.safetensors")));
        pulse_tensor *t = (pulse_tensor *)pulse_ckpt_find(b, "step");
        t->data[0] ^= 0x80;   /* writable, and the change survives commit */
        CHECK_OK(pulse_ckpt_commit(b));
        CHECK(!strcmp(pulse_ckpt_file_path(b, 0), at("b.safetensors")));
        pulse_ckpt_close(&b);
    }
    CHECK_OK(pulse_ckpt_open(&b, at("b.safetensors"), PULSE_CKPT_READ));
    if (b) {
        CHECK_EQ_INT(pulse_ckpt_count(b), pulse_ckpt_count(a));
        CHECK(!strcmp(pulse_ckpt_metadata(a), pulse_ckpt_metadata(b)));
        for (size_t i = 0; i < pulse_ckpt_count(a); i++) {
            const pulse_tensor *x = pulse_ckpt_tensor(a, i), *y = pulse_ckpt_tensor(b, i);
            CHECK(!strcmp(x->name, y->name) && x->nbytes == y->nbytes);
            int same = !memcmp(x->data, y->data, x->nbytes);
            CHECK(strcmp(x->name, "step") ? same : !same);
        }
        pulse_ckpt_close(&b);
    }
    /* Same header bytes: the files differ in exactly that one data byte. */
    FILE *fa = fopen(at("a.safetensors"), "rb"), *fb = fopen(at("b.safetensors"), "rb");
    int diffs = 0, ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        diffs += ca != cb;
    } while (ca != EOF || cb != EOF);
    fclose(fa);
    fclose(fb);
    CHECK_EQ_INT(diffs, 1);

    /* Closing without commit leaves no file, neither final nor temporary. */
    CHECK_OK(pulse_ckpt_create_like(&b, at("gone.safetensors"), a));
    pulse_ckpt_close(&b);
    CHECK(!exists(at("gone.safetensors")));
    CHECK_OK(pulse_ckpt_create(&b, at("gone2.safetensors"), specs, NSPECS, NULL));
    pulse_ckpt_close(&b);
    CHECK(!exists(at("gone2.safetensors")));
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", at("gone2.safetensors"), (long)getpid());
    CHECK(!exists(tmp));
    pulse_ckpt_close(&a);

    /* Bad specs. */
    pulse_tensor_spec s[2] = { { "x", "F32", 1, { 4 } }, { "x", "F32", 1, { 4 } } };
    CHECK_ERR(pulse_ckpt_create(&b, at("c.safetensors"), s, 2, NULL), PULSE_ERR_INVALID);
    s[1].name = "y";
    s[1].dtype_name = "F128";
    CHECK_ERR(pulse_ckpt_create(&b, at("c.safetensors"), s, 2, NULL), PULSE_ERR_INVALID);
    s[1].dtype_name = "F32";
    CHECK_ERR(pulse_ckpt_create(&b, at("c.safetensors"), s, 2, "{\"a\": 1}"), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_ckpt_create(&b, at("c.safetensors"), s, 2, "{\"a\": \"1\""), PULSE_ERR_FORMAT);
    s[1].ndim = 9;
    CHECK_ERR(pulse_ckpt_create(&b, at("c.safetensors"), s, 2, NULL), PULSE_ERR_INVALID);
    CHECK(b == NULL && !exists(at("c.safetensors")));
}

/* ckpt_update_from (the publisher's in-place copy of the last state): only the 4 KiB blocks that
 * differ are written, the result is the source's bytes, and a layout that differs or a target
 * not open for writing is refused before any write. */
static void test_update_from(void)
{
    make(at("u-old.safetensors"), specs, NSPECS, NULL, 5);
    make(at("u-new.safetensors"), specs, NSPECS, NULL, 5);
    pulse_ckpt *dst = NULL, *src = NULL;
    CHECK_OK(pulse_ckpt_open(&src, at("u-new.safetensors"), PULSE_CKPT_WRITE));
    if (!src)
        return;
    /* three blocks of "big" (the first, one inside, the last, which is short) and the scalar */
    pulse_tensor *big = (pulse_tensor *)pulse_ckpt_find(src, "big"), *step = (pulse_tensor *)pulse_ckpt_find(src, "step");
    big->data[5] ^= 1;
    big->data[4096 * 100 + 4095] ^= 1;
    big->data[big->nbytes - 1] ^= 1;
    step->data[0] ^= 1;
    uint64_t want = 4096 + 4096 + (big->nbytes % 4096 ? big->nbytes % 4096 : 4096) + step->nbytes;
    CHECK_OK(pulse_ckpt_sync(src));

    uint8_t before[32], after[32], id_src[32];
    state_id(at("u-old.safetensors"), 1, before);
    CHECK_OK(pulse_ckpt_state_id(src, 1, id_src));
    CHECK(memcmp(before, id_src, 32) != 0);
    CHECK_OK(pulse_ckpt_open(&dst, at("u-old.safetensors"), PULSE_CKPT_READ));
    if (dst)   /* read-only: refused */
        CHECK_ERR(ckpt_update_from(dst, src, NULL, 0, 1, NULL), PULSE_ERR_INVALID);
    pulse_ckpt_close(&dst);

    /* another layout: refused, nothing written */
    pulse_tensor_spec other[NSPECS];
    memcpy(other, specs, sizeof other);
    other[1].shape[0] = 34;
    make(at("u-other.safetensors"), other, NSPECS, NULL, 5);
    pulse_ckpt *o = NULL;
    CHECK_OK(pulse_ckpt_open(&o, at("u-other.safetensors"), PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_open(&dst, at("u-old.safetensors"), PULSE_CKPT_WRITE));
    if (o && dst)
        CHECK_ERR(ckpt_update_from(dst, o, NULL, 0, 2, NULL), PULSE_ERR_MISMATCH);
    pulse_ckpt_close(&o);
    pulse_ckpt_close(&dst);
    state_id(at("u-old.safetensors"), 1, after);
    CHECK(memcmp(before, after, 32) == 0);

    /* spans: only what they name is looked at (the publisher's copy updated where its diff found
     * changes); a span past its tensor is refused before anything is written */
    CHECK_OK(pulse_ckpt_open(&dst, at("u-old.safetensors"), PULSE_CKPT_WRITE));
    if (dst) {
        size_t bi = 0;
        while (strcmp(pulse_ckpt_tensor(src, bi)->name, "big"))
            bi++;
        ckpt_span bad = { bi, big->nbytes - 10, 11 }, first = { bi, 0, 4096 };
        CHECK_ERR(ckpt_update_from(dst, src, &bad, 1, 2, NULL), PULSE_ERR_INVALID);
        uint64_t written = 0;
        CHECK_OK(ckpt_update_from(dst, src, &first, 1, 2, &written));
        CHECK_EQ_INT(written, 4096);
        const pulse_tensor *db = pulse_ckpt_find(dst, "big"), *ds = pulse_ckpt_find(dst, "step");
        CHECK(db->data[5] == big->data[5] && db->data[big->nbytes - 1] != big->data[big->nbytes - 1]);
        CHECK(ds->data[0] != step->data[0]);
    }
    pulse_ckpt_close(&dst);

    for (int threads = 1; threads <= 3; threads += 2) {
        CHECK_OK(pulse_ckpt_open(&dst, at("u-old.safetensors"), PULSE_CKPT_WRITE));
        if (!dst)
            break;
        uint64_t written = 12345;
        CHECK_OK(ckpt_update_from(dst, src, NULL, 0, threads, &written));
        CHECK_EQ_INT(written, threads == 1 ? want - 4096 : 0);   /* the second time there is nothing to do */
        CHECK_OK(pulse_ckpt_sync(dst));
        pulse_ckpt_close(&dst);
        state_id(at("u-old.safetensors"), 1, after);
        CHECK(memcmp(after, id_src, 32) == 0);
    }
    pulse_ckpt_close(&src);
}

#define T(dt, shape, b, e) "\"" dt "\", \"shape\": " shape ", \"data_offsets\": [" #b ", " #e "]"

static void test_malformed(void)
{
    pulse_ckpt *c = NULL;
    /* A valid baseline, so the cases below fail for their own reason. */
    CHECK_OK(open_raw("{\"a\": {\"dtype\": " T("F32", "[2]", 0, 8) "}}", 8));
    CHECK_OK(open_raw("{\"a\": {\"dtype\": " T("F32", "[2]", 0, 8) "}}    \n", 8)); /* padding */
    CHECK_OK(open_raw("{}", 0));

    /* Length field. */
    write_bytes(at("bad.safetensors"), "\x02\0\0\0", 4);
    CHECK_ERR(pulse_ckpt_open(&c, at("bad.safetensors"), 0), PULSE_ERR_FORMAT);
    write_raw(at("bad.safetensors"), "{}", (uint64_t)PULSE_ST_MAX_HEADER + 1, 0);
    CHECK_ERR(pulse_ckpt_open(&c, at("bad.safetensors"), 0), PULSE_ERR_LIMIT);
    write_raw(at("bad.safetensors"), "{}", UINT64_MAX - 1, 0);
    CHECK_ERR(pulse_ckpt_open(&c, at("bad.safetensors"), 0), PULSE_ERR_LIMIT);
    write_raw(at("bad.safetensors"), "{}", 3, 0);    /* one byte past the end */
    CHECK_ERR(pulse_ckpt_open(&c, at("bad.safetensors"), 0), PULSE_ERR_FORMAT);
    write_raw(at("bad.safetensors"), "{}", 1, 0);    /* cuts the JSON short */
    CHECK_ERR(pulse_ckpt_open(&c, at("bad.safetensors"), 0), PULSE_ERR_FORMAT);

    static const struct { const char *json; size_t data; int err; } cases[] = {
        /* JSON itself */
        { "", 0, PULSE_ERR_FORMAT },
        { "[]", 0, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 0, 8) "}", 8, PULSE_ERR_FORMAT },
        { "{} x", 0, PULSE_ERR_FORMAT },
        { "{}{}", 0, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 0, 8) ",}}", 8, PULSE_ERR_FORMAT },
        { "{'a': 1}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"\\x\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"\\ud800\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"\\udc00\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"\\u00\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"\\u0000\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"a\nb\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"\xc3\x28\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"\xc0\xaf\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"v\", \"k\": \"w\"}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": 1}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": [\"k\"]}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": {\"k\": \"unterminated}}", 0, PULSE_ERR_FORMAT },
        { "{\"__metadata__\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
          0, PULSE_ERR_LIMIT },
        { "{\"a\": tru}", 0, PULSE_ERR_FORMAT },
        /* Tensor entries */
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 0, 8) "}, \"a\": {\"dtype\": " T("F32", "[2]", 8, 16) "}}",
          16, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 0, 16) "}}", 8, PULSE_ERR_FORMAT },      /* past EOF */
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 8, 16) "}}", 12, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 0, 8) "}, \"b\": {\"dtype\": " T("F32", "[2]", 4, 12) "}}",
          16, PULSE_ERR_FORMAT },                                                          /* overlap */
        { "{\"a\": {\"dtype\": " T("F32", "[4]", 0, 16) "}, \"b\": {\"dtype\": " T("F32", "[2]", 4, 12) "}}",
          16, PULSE_ERR_FORMAT },                                                          /* nested */
        { "{\"a\": {\"dtype\": " T("F32", "[3]", 0, 8) "}}", 8, PULSE_ERR_FORMAT },      /* size */
        { "{\"a\": {\"dtype\": " T("BF16", "[2]", 0, 8) "}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("I64", "[]", 0, 4) "}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[1099511627776, 1099511627776]", 0, 8) "}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("U8", "[18446744073709551615]", 0, 8) "}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[1,1,1,1,1,1,1,1,2]", 0, 8) "}}", 8, PULSE_ERR_LIMIT },
        { "{\"a\": {\"dtype\": " T("F32", "[-2]", 0, 8) "}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[2.0]", 0, 8) "}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "2", 0, 8) "}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 8, 0) "}}", 8, PULSE_ERR_FORMAT },      /* end < begin */
        { "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8, 8]}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F128", "[2]", 0, 8) "}}", 8, PULSE_ERR_FORMAT },     /* unknown dtype */
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 0, 8) ", \"extra\": 1}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 0, 8) ", \"dtype\": \"F32\"}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": [1, 2]}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": 3, \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F32", "[2]", 0, 99999999999999999999) "}}", 8, PULSE_ERR_FORMAT },
        { "{\"a\": {\"dtype\": " T("F4", "[3]", 0, 2) "}}", 8, PULSE_ERR_FORMAT },   /* half a byte */
        { "{\"a\": {\"dtype\": " T("F6_E2M3", "[3]", 0, 3) "}}", 8, PULSE_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = open_raw(cases[i].json, cases[i].data);
        if (r != cases[i].err)
            fprintf(stderr, "malformed case %zu: got %d, wanted %d: %s\n", i, r, cases[i].err, cases[i].json);
        CHECK_EQ_INT(r, cases[i].err);
    }
    /* Duplicate names across files, refused when an index joins them: see test_sharded. */

    /* Opaque dtypes with their real widths; zero-size tensors may share an offset. */
    CHECK_OK(open_raw("{\"a\": {\"dtype\": " T("I64", "[]", 0, 8) "}, \"b\": {\"dtype\": "
                      T("U16", "[0]", 8, 8) "}, \"c\": {\"dtype\": " T("F8_E8M0", "[0]", 8, 8) "},"
                      "\"d\": {\"dtype\": " T("F4", "[4]", 8, 10) "}, \"\\u00e9\": {\"dtype\": "
                      T("F64", "[1]", 10, 18) "}}", 18));
    CHECK(!exists(at("bad.safetensors.tmp")));
    CHECK_ERR(pulse_ckpt_open(&c, at("does-not-exist.safetensors"), 0), PULSE_ERR_NOTFOUND);
    mkdir(at("emptydir"), 0755);
    CHECK_ERR(pulse_ckpt_open(&c, at("emptydir"), 0), PULSE_ERR_NOTFOUND);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-ckpt-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_write_read();
    test_id_sensitivity();
    test_sharded();
    test_create_like_single();
    test_update_from();
    test_malformed();
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return check_done("test_checkpoint");
}
