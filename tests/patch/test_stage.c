/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the staged apply (node/patch/patch_stage.c) on real files: the result id before any write, the write, the journal's replay over a torn target, and refusals. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pulseweights.h"
#include "crypto/sha256.h"
#include "node/patch/patch_stage.h"
#include "check.h"

static char dir[256];
static uint64_t rng;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *at(const char *name)
{
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

/* Several state chunks (1 MiB) per big tensor, so that spans own some, share some (small chunks)
 * and leave some untouched (an unchanged tensor), beside small and opaque tensors. */
static const pulse_tensor_spec specs[] = {
    { "a.bf16", "BF16", 2, { 1536, 1024 } },   /* 3 MiB, sparse changes */
    { "b.f32", "F32", 1, { 300000 } },         /* 1.14 MiB, every fifth element changes */
    { "c.bf16", "BF16", 1, { 700000 } },       /* unchanged: hashed from the target only */
    { "d.e4m3", "F8_E4M3", 1, { 1000 } },
    { "e.i64", "I64", 1, { 40 } },             /* opaque */
    { "f.scalar", "F32", 0, { 0 } },
};
#define NSPECS (sizeof specs / sizeof specs[0])

static void make(const char *name, int step)
{
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_create(&c, at(name), specs, NSPECS, NULL));
    if (!c)
        return;
    for (size_t i = 0; i < pulse_ckpt_count(c); i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(c, i);
        rng = 1000 + i;
        for (uint64_t j = 0; j < t->nbytes; j++)
            t->data[j] = (uint8_t)rnd();
        rng = (uint64_t)step * 7919 + i + 3;
        if (!step || !strcmp(t->name, "c.bf16"))
            continue;
        if (!strcmp(t->name, "a.bf16")) {
            uint16_t *v = (uint16_t *)t->data;
            for (uint64_t j = 0; j < t->nelems; j++)
                if (rnd() % 100 < 6)
                    v[j] = (uint16_t)(v[j] + (rnd() % 2 ? 1 : -1) * step);
        } else if (!strcmp(t->name, "b.f32")) {
            for (uint64_t j = 0; j < t->nelems; j += 5)
                ((uint32_t *)t->data)[j] += (uint32_t)step;
        } else if (!strcmp(t->name, "e.i64")) {
            t->data[7] ^= (uint8_t)step;
            t->data[200] ^= 0x40;
        } else {
            for (uint64_t j = 0; j < t->nbytes; j += 3)
                t->data[j] = (uint8_t)(t->data[j] + step);
        }
    }
    CHECK_OK(pulse_ckpt_commit(c));
    pulse_ckpt_close(&c);
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

static int same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    uint8_t *x = slurp(a, &la), *y = slurp(b, &lb);
    int same = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    uint8_t *b = slurp(from, &n);
    FILE *f = fopen(to, "wb");
    CHECK(b && f && fwrite(b, 1, n, f) == n);
    if (f)
        fclose(f);
    free(b);
}

/* The patch's head length, from the whole patch opened in memory. */
static uint64_t head_bytes_of(const uint8_t *bytes, size_t len)
{
    pulse_patch *p = NULL;
    uint64_t n = pulse_patch_open_mem(&p, bytes, len) == 0 ? pulse_patch_head_bytes(p) : 0;
    pulse_patch_close(&p);
    return n;
}

/* Stages every chunk of PATCH (bytes, len) against TARGET in reverse table order, interleaving the
 * untouched chunks' hashing; returns the stage (or NULL) with the result id. */
static patch_stage *stage_all(const uint8_t *bytes, size_t len, pulse_patch **head, const pulse_ckpt *target,
                              int jfd, uint8_t result[32], int *err)
{
    patch_stage *st = NULL;
    *err = pulse_patch_open_head(head, bytes, (size_t)head_bytes_of(bytes, len), len);
    if (!*err)
        *err = patch_stage_open(&st, *head, target, jfd, 2, 1);
    for (size_t k = st ? patch_stage_chunks(st) : 0; !*err && k-- > 0;) {
        *err = patch_stage_chunk(st, k, bytes + patch_stage_chunk_at(st, k));
        patch_stage_hash_untouched(st);
    }
    if (!*err)
        *err = patch_stage_finish(st, 2, result);
    return st;
}

static void one_case(const char *label, const pulse_diff_opts *d)
{
    char p_name[64];
    snprintf(p_name, sizeof p_name, "%s.patch", label);
    pulse_ckpt *old = NULL, *new_ = NULL;
    CHECK_OK(pulse_ckpt_open(&old, at("old.safetensors"), PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_open(&new_, at("new.safetensors"), PULSE_CKPT_READ));
    if (!old || !new_)
        return;
    CHECK_OK(pulse_patch_diff(old, new_, d, at(p_name)));
    uint8_t new_id[32];
    CHECK_OK(pulse_ckpt_state_id(new_, 1, new_id));
    pulse_ckpt_close(&old);
    pulse_ckpt_close(&new_);
    size_t len = 0;
    uint8_t *bytes = slurp(at(p_name), &len);
    CHECK(bytes != NULL);
    if (!bytes)
        return;

    /* staged against the base: the result id before any write, the target untouched */
    copy_file(at("old.safetensors"), at("w.safetensors"));
    pulse_ckpt *w = NULL;
    CHECK_OK(pulse_ckpt_open(&w, at("w.safetensors"), PULSE_CKPT_WRITE));
    int jfd = open(at("journal"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(jfd >= 0);
    pulse_patch *head = NULL;
    uint8_t result[32], head_digest[32];
    int err = 0;
    patch_stage *st = stage_all(bytes, len, &head, w, jfd, result, &err);
    CHECK_OK(err);
    CHECK(!memcmp(result, new_id, 32));
    CHECK(same_file(at("w.safetensors"), at("old.safetensors")));
    if (st)
        CHECK_OK(patch_stage_write(st, w, 2));
    CHECK_OK(pulse_ckpt_sync(w));
    pulse_ckpt_close(&w);
    CHECK(same_file(at("w.safetensors"), at("new.safetensors")));
    patch_stage_close(&st);
    pulse_patch_close(&head);
    pulse_sha256(bytes, (size_t)head_bytes_of(bytes, len), head_digest);

    /* the journal replayed over a torn target (half the result, half the base) and over the base */
    size_t n = 0;
    uint8_t *oldb = slurp(at("old.safetensors"), &n), *newb = slurp(at("new.safetensors"), &n);
    if (oldb && newb) {
        memcpy(oldb, newb, n / 2);
        FILE *f = fopen(at("torn.safetensors"), "wb");
        CHECK(f && fwrite(oldb, 1, n, f) == n);
        if (f)
            fclose(f);
    }
    free(oldb);
    free(newb);
    const char *targets[] = { "torn.safetensors", "old.safetensors" };
    for (int i = 0; i < 2; i++) {
        if (i)
            copy_file(at("old.safetensors"), at("torn.safetensors"));
        CHECK_OK(pulse_ckpt_open(&w, at(targets[0]), PULSE_CKPT_WRITE));
        if (w)
            CHECK_OK(patch_stage_replay(jfd, head_digest, w, 2));
        pulse_ckpt_close(&w);
        CHECK(same_file(at(targets[0]), at("new.safetensors")));
    }

    /* refused: a journal whose head is not the step's, one cut short; the target unchanged */
    copy_file(at("old.safetensors"), at("torn.safetensors"));
    uint8_t other[32];
    memcpy(other, head_digest, 32);
    other[0] ^= 1;
    CHECK_OK(pulse_ckpt_open(&w, at("torn.safetensors"), PULSE_CKPT_WRITE));
    if (w) {
        CHECK_ERR(patch_stage_replay(jfd, other, w, 2), PULSE_ERR_CORRUPT);
        off_t full = lseek(jfd, 0, SEEK_END);
        CHECK(ftruncate(jfd, full - 9) == 0);
        int r = patch_stage_replay(jfd, head_digest, w, 2);
        CHECK(r == PULSE_ERR_FORMAT);
    }
    pulse_ckpt_close(&w);
    close(jfd);

    /* a chunk that fails its digest: refused by name, the target unchanged */
    copy_file(at("old.safetensors"), at("w.safetensors"));
    CHECK_OK(pulse_ckpt_open(&w, at("w.safetensors"), PULSE_CKPT_WRITE));
    jfd = open(at("journal"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (w && jfd >= 0) {
        CHECK_OK(pulse_patch_open_head(&head, bytes, (size_t)head_bytes_of(bytes, len), len));
        if (head && !patch_stage_open(&st, head, w, jfd, 1, 1)) {
            size_t k = patch_stage_chunks(st) / 2;
            uint8_t *bad = malloc(patch_stage_chunk_len(st, k));
            memcpy(bad, bytes + patch_stage_chunk_at(st, k), patch_stage_chunk_len(st, k));
            bad[patch_stage_chunk_len(st, k) / 2] ^= 0x10;
            CHECK_ERR(patch_stage_chunk(st, k, bad), PULSE_ERR_CORRUPT);
            CHECK(strstr(pulse_last_error(), "fail their digest") != NULL);
            free(bad);
        }
        patch_stage_close(&st);
        pulse_patch_close(&head);
    }
    pulse_ckpt_close(&w);
    CHECK(same_file(at("w.safetensors"), at("old.safetensors")));

    /* staged against a checkpoint that is not the base: never the patch's result */
    copy_file(at("other.safetensors"), at("w.safetensors"));
    CHECK_OK(pulse_ckpt_open(&w, at("w.safetensors"), PULSE_CKPT_WRITE));
    if (w) {
        st = stage_all(bytes, len, &head, w, jfd, result, &err);
        CHECK(err != 0 || memcmp(result, new_id, 32) != 0);
        patch_stage_close(&st);
        pulse_patch_close(&head);
    }
    pulse_ckpt_close(&w);
    CHECK(same_file(at("w.safetensors"), at("other.safetensors")));
    close(jfd);
    free(bytes);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-test-stage-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    make("old.safetensors", 0);
    make("new.safetensors", 1);
    make("other.safetensors", 3);
    pulse_diff_opts d;
    pulse_diff_opts_default(&d);
    d.threads = 2;
    one_case("ulp", &d);
    d.values = PULSE_VALUES_ABS;
    one_case("abs", &d);
    d.values = PULSE_VALUES_ULP;
    d.context = 1;
    one_case("context", &d);
    d.context = 0;
    d.chunk_elems = 1000;   /* spans that share state chunks */
    one_case("small", &d);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done("stage");
}
