/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of a patch whose coded chunks lie in the data section in another order than the table's (as a committer that merges parts' heads writes it): opened, verified, applied, sliced and staged as the in-order patch is; overlaps and holes refused. */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "crypto/sha256.h"
#include "node/patch/patch_internal.h"
#include "node/patch/patch_stage.h"
#include "check.h"

#define CHUNK 128
#define HEADER 104u

static char dir[] = "/tmp/pulse-chunk-order-XXXXXX";

static const char *path_of(const char *name)
{
    static char buf[8][512];
    static int at;
    char *p = buf[at++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* BF16 tensors of many chunks (one with untouched chunks between changed ones), an F32 one, an
 * opaque one and one that does not change. */
static const pulse_tensor_spec specs[] = {
    { "a.w", "BF16", 2, { 48, 64 } },
    { "b.w", "BF16", 1, { 1000 } },
    { "c.f", "F32", 1, { 900 } },
    { "d.ids", "U8", 1, { 300 } },
    { "e.w", "BF16", 1, { 50 } },
};
#define NSPECS (sizeof specs / sizeof specs[0])

static void make_pair(void)
{
    pulse_ckpt *x = NULL, *y = NULL;
    CHECK_OK(pulse_ckpt_create(&x, path_of("old.safetensors"), specs, NSPECS, NULL));
    CHECK_OK(pulse_ckpt_create(&y, path_of("new.safetensors"), specs, NSPECS, NULL));
    if (!x || !y)
        exit(check_done("chunk_order"));
    for (size_t t = 0; t < NSPECS; t++) {
        uint8_t *a = pulse_ckpt_tensor(x, t)->data, *b = pulse_ckpt_tensor(y, t)->data;
        for (size_t i = 0; i < pulse_ckpt_tensor(x, t)->nbytes; i++)
            a[i] = b[i] = (uint8_t)rnd();
    }
    for (size_t t = 0; t < 2; t++) {   /* BF16: +-1 ulp at ~10 %; b.w's chunk 2 untouched */
        uint16_t *a = (uint16_t *)(void *)pulse_ckpt_tensor(x, t)->data;
        uint16_t *b = (uint16_t *)(void *)pulse_ckpt_tensor(y, t)->data;
        for (size_t i = 0; i < pulse_ckpt_tensor(x, t)->nbytes / 2; i++)
            if (rnd() % 10 == 0 && !(t == 1 && i / CHUNK == 2))
                b[i] = (uint16_t)(a[i] + (rnd() % 2 ? 1 : -1));
    }
    uint32_t *f0 = (uint32_t *)(void *)pulse_ckpt_tensor(x, 2)->data;
    uint32_t *f1 = (uint32_t *)(void *)pulse_ckpt_tensor(y, 2)->data;
    for (size_t i = 0; i < 900; i++)
        if (rnd() % 8 == 0)
            f1[i] = f0[i] + (uint32_t)(1 + rnd() % 50);
    pulse_ckpt_tensor(y, 3)->data[5] ^= 0x11;
    pulse_ckpt_tensor(y, 3)->data[290] ^= 0x22;
    CHECK_OK(pulse_ckpt_commit(x));
    CHECK_OK(pulse_ckpt_commit(y));
    pulse_ckpt_close(&x);
    pulse_ckpt_close(&y);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        exit(check_done("chunk_order"));
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len ? *len : 1);
    CHECK(fread(b, 1, *len, f) == *len);
    fclose(f);
    return b;
}

static void write_all(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(b, 1, len, f) == len);
    if (f)
        fclose(f);
}

static uint64_t le(const uint8_t *q, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)q[i] << (8 * i);
    return v;
}

static void put_le(uint8_t *q, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        q[i] = (uint8_t)(v >> (8 * i));
}

/* A coded chunk's table entry, read independently of the library's parser. */
typedef struct entry {
    size_t at;        /* its offset field in the patch bytes */
    size_t tensor;
    uint64_t off;     /* in the data section */
    uint64_t len;     /* pos_len + val_len */
} entry;

/* The coded chunks of the patch in table order (docs/patch-format.md, "Tensor table"); no
 * packed dtypes here, so an entry's units are its elements (bytes for OPAQUE). */
static size_t parse(const uint8_t *b, entry *e, size_t cap)
{
    const uint32_t chunk = (uint32_t)le(b + 16, 4), ntensors = (uint32_t)le(b + 20, 4);
    size_t at = HEADER, n = 0;
    for (size_t t = 0; t < ntensors; t++) {
        at += 2 + le(b + at, 2);
        const unsigned dcode = b[at], esize = b[at + 1];
        at += 2;
        at += 1 + b[at];
        const unsigned ndim = b[at++];
        uint64_t units = dcode == 0 ? esize : 1;
        for (unsigned d = 0; d < ndim; d++, at += 8)
            units *= le(b + at, 8);
        const uint64_t changes = le(b + at, 8);
        at += 8;
        for (uint64_t c = 0; changes && c < (units + chunk - 1) / chunk; c++) {
            const uint32_t count = (uint32_t)le(b + at, 4);
            at += 4;
            if (!count)
                continue;
            CHECK(n < cap);
            e[n++] = (entry){ .at = at, .tensor = t, .off = le(b + at, 8), .len = le(b + at + 8, 4) + le(b + at + 12, 4) };
            at += 8 + 4 + 4 + 32;
        }
    }
    return n;
}

/* The header digest again, after the table changed. */
static void seal(uint8_t *b)
{
    const uint64_t table = le(b + 88, 8);
    pulse_sha256(b, HEADER + table, b + HEADER + table);
}

/* The patch with its coded chunks' bytes laid out in data order order[0..n) (table indices),
 * each entry's offset rewritten, plus `extra` zero bytes at the end of the data section. */
static uint8_t *permute(const uint8_t *b, size_t len, const entry *e, size_t n, const size_t *order, size_t extra,
                        size_t *out_len)
{
    const uint64_t head = HEADER + le(b + 88, 8) + 32;
    uint8_t *q = calloc(1, len + extra);
    memcpy(q, b, head);
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const entry *x = &e[order[i]];
        memcpy(q + head + at, b + head + x->off, x->len);
        put_le(q + x->at, at, 8);
        at += x->len;
    }
    CHECK_EQ_INT(head + at, len);
    put_le(q + 96, le(b + 96, 8) + extra, 8);
    seal(q);
    *out_len = len + extra;
    return q;
}

/* Updates (index and new values, given the base) of every tensor of p, one buffer each. */
typedef struct all_updates {
    uint64_t n[NSPECS];
    int64_t *idx[NSPECS];
    uint8_t *val[NSPECS];
} all_updates;

static void updates_of(const pulse_patch *p, const pulse_ckpt *base, all_updates *u)
{
    for (size_t t = 0; t < NSPECS; t++) {
        u->n[t] = pulse_patch_tensor_changes(p, t);
        u->idx[t] = malloc((u->n[t] ? u->n[t] : 1) * sizeof *u->idx[t]);
        u->val[t] = malloc((u->n[t] ? u->n[t] : 1) * 4);
        CHECK_OK(pulse_patch_tensor_updates(p, t, base, 2, u->idx[t], u->val[t], NULL));
    }
}

static int same_updates(const all_updates *a, const all_updates *b)
{
    int same = 1;
    for (size_t t = 0; t < NSPECS; t++) {
        const unsigned w = t == 2 ? 4 : t == 3 ? 1 : 2;
        same &= a->n[t] == b->n[t] && !memcmp(a->idx[t], b->idx[t], a->n[t] * sizeof *a->idx[t])
                && !memcmp(a->val[t], b->val[t], a->n[t] * w);
    }
    return same;
}

static void free_updates(all_updates *u)
{
    for (size_t t = 0; t < NSPECS; t++)
        free(u->idx[t]), free(u->val[t]);
}

/* Applies the patch at path to a new copy of the old checkpoint on `threads`: the result must
 * be byte for byte the new checkpoint, with its state id. */
static void apply_to_new_file(const char *patch_path, int threads, const uint8_t *want, size_t want_len,
                              const char *what)
{
    char pp[512];   /* path_of's buffers are reused */
    snprintf(pp, sizeof pp, "%s", patch_path);
    patch_path = pp;
    pulse_patch *p = NULL;
    pulse_ckpt *old = NULL, *t = NULL;
    CHECK_OK(pulse_patch_open(&p, patch_path));
    CHECK_OK(pulse_ckpt_open(&old, path_of("old.safetensors"), PULSE_CKPT_READ));
    if (!p || !old)
        goto out;
    CHECK_OK(pulse_ckpt_create_like(&t, path_of("t.safetensors"), old));
    if (!t)
        goto out;
    int err = pulse_patch_apply(p, t, threads);
    CHECK_OK(err);
    uint8_t id[32];
    CHECK_OK(pulse_ckpt_state_id(t, 1, id));
    CHECK(!memcmp(id, pulse_patch_result_id(p), 32));
    CHECK_OK(pulse_ckpt_commit(t));
    pulse_ckpt_close(&t);
    size_t got_len = 0;
    uint8_t *got = read_all(path_of("t.safetensors"), &got_len);
    int same = got_len == want_len && !memcmp(got, want, want_len);
    CHECK(same);
    if (err || !same)
        fprintf(stderr, "apply %s, %d threads: %s\n", what, threads, err ? pulse_last_error() : "bytes differ");
    free(got);
out:
    pulse_ckpt_close(&t);
    pulse_ckpt_close(&old);
    pulse_patch_close(&p);
}

/* A sliced open of the patch bytes b: the given element ranges of each tensor wanted (all of
 * every tensor when `all`), the missing ranges fetched max_bytes at most each and supplied. */
static pulse_patch *sliced(const uint8_t *b, size_t len, int all, uint64_t max_bytes)
{
    const uint64_t head = HEADER + le(b + 88, 8) + 32;
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open_head(&p, b, (size_t)head, len));
    if (!p)
        return NULL;
    for (size_t t = 0; t < NSPECS; t++) {
        uint64_t n = 1;
        for (int d = 0; d < specs[t].ndim; d++)
            n *= specs[t].shape[d];
        CHECK_OK(pulse_patch_want(p, t, all ? 0 : n / 3, all ? n : n / 3 + n / 4 + 1));
    }
    pulse_patch_range rg[256];
    size_t n = pulse_patch_missing(p, max_bytes, rg, 256);
    CHECK(n > 0 && n <= 256);
    for (size_t i = 0; i < n && i < 256; i++) {   /* ascending, disjoint, inside the data */
        CHECK(rg[i].offset >= head && rg[i].offset + rg[i].length <= len);
        CHECK(i == 0 || rg[i - 1].offset + rg[i - 1].length <= rg[i].offset);
        CHECK_OK(pulse_patch_supply(p, rg[i].offset, b + rg[i].offset, (size_t)rg[i].length));
    }
    CHECK_EQ_INT(pulse_patch_missing(p, max_bytes, NULL, 0), 0);
    CHECK_OK(pulse_patch_verify(p, NULL, 2));
    return p;
}

/* A follower's staging (node/sync/fetch_stage.c) over the head of the patch bytes b: chunks taken
 * in data order as their bytes would arrive (patch_stage_chunk_by_offset), the result id known
 * before the write, the written target the new checkpoint. */
static void stage_in_data_order(const uint8_t *b, size_t len, const uint8_t *new_bytes, size_t new_len,
                                const char *what)
{
    const uint64_t head = HEADER + le(b + 88, 8) + 32;
    pulse_patch *h = NULL;
    pulse_ckpt *old = NULL, *t = NULL;
    patch_stage *st = NULL;
    int jfd = open(path_of("journal"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(jfd >= 0);
    CHECK_OK(pulse_patch_open_head(&h, b, (size_t)head, len));
    CHECK_OK(pulse_ckpt_open(&old, path_of("old.safetensors"), PULSE_CKPT_READ));
    if (old)
        CHECK_OK(pulse_ckpt_create_like(&t, path_of("s.safetensors"), old));
    if (h && t)
        CHECK_OK(patch_stage_open(&st, h, t, jfd, 2, 1));
    uint64_t at = head;
    int err = 0;
    for (size_t i = 0; st && !err && i < patch_stage_chunks(st); i++) {
        const size_t k = patch_stage_chunk_by_offset(st, i);
        CHECK_EQ_INT(patch_stage_chunk_at(st, k), at);
        err = patch_stage_chunk(st, k, b + patch_stage_chunk_at(st, k));
        CHECK_OK(err);
        at += patch_stage_chunk_len(st, k);
    }
    uint8_t result[32];
    if (st) {
        CHECK_EQ_INT(at, len);
        CHECK_OK(patch_stage_finish(st, 2, result));
        CHECK(!memcmp(result, pulse_patch_result_id(h), 32));
        CHECK_OK(patch_stage_write(st, t, 2));
        CHECK_OK(pulse_ckpt_commit(t));
        pulse_ckpt_close(&t);
        size_t got_len = 0;
        uint8_t *got = read_all(path_of("s.safetensors"), &got_len);
        int same = got_len == new_len && !memcmp(got, new_bytes, new_len);
        CHECK(same);
        if (!same)
            fprintf(stderr, "stage %s: bytes differ\n", what);
        free(got);
    }
    patch_stage_close(&st);
    pulse_ckpt_close(&t);
    pulse_ckpt_close(&old);
    pulse_patch_close(&h);
    if (jfd >= 0)
        close(jfd);
}

/* Every check of one permuted patch (bytes b) against the in-order one (ref, ref_len). */
static void check_permuted(const uint8_t *b, size_t len, const uint8_t *ref, size_t ref_len, const uint8_t *new_bytes,
                           size_t new_len, const char *what)
{
    char path[512];   /* path_of's buffers are reused */
    snprintf(path, sizeof path, "%s", path_of("perm.patch"));
    write_all(path, b, len);
    pulse_patch *p = NULL, *m = NULL, *r = NULL;
    pulse_ckpt *old = NULL;
    CHECK_OK(pulse_patch_open(&p, path));
    CHECK_OK(pulse_patch_open_mem(&m, b, len));
    CHECK_OK(pulse_patch_open_mem(&r, ref, ref_len));
    CHECK_OK(pulse_ckpt_open(&old, path_of("old.safetensors"), PULSE_CKPT_READ));
    if (!p || !m || !r || !old) {
        fprintf(stderr, "%s: %s\n", what, pulse_last_error());
        goto out;
    }
    CHECK(!p->in_table_order && p->by_offset != NULL);
    CHECK_OK(pulse_patch_verify(p, old, 2));
    CHECK_OK(pulse_patch_verify(m, old, 1));

    /* A run of chunks that do not follow each other in the data is read chunk by chunk. */
    {
        patch_pool pool;
        int err = 0;
        CHECK_OK(patch_pool_init(&pool, 1, p->chunk_elems, 0));
        patch_scratch *s = patch_pool_take(&pool, &err);
        const uint8_t *bytes[PATCH_RUN_MOST];
        size_t n = p->nchunks < 8 ? p->nchunks : 8;
        if (s) {
            CHECK_OK(patch_chunk_bytes_run(p, 0, n, s, bytes));
            patch_pool_give(&pool, s);
        }
        patch_pool_free(&pool);
    }

    all_updates want, got;
    updates_of(r, old, &want);
    updates_of(p, old, &got);
    CHECK(same_updates(&want, &got));
    free_updates(&got);
    updates_of(m, old, &got);
    CHECK(same_updates(&want, &got));
    free_updates(&got);

    /* Sliced: every tensor whole in one range, chunk by chunk, and a part of each tensor; the
     * in-order patch sliced alike gives the same updates. */
    for (int all = 1; all >= 0; all--)
        for (int each = 0; each < 2; each++) {
            pulse_patch *s = sliced(b, len, all, each ? 1 : 0), *sr = sliced(ref, ref_len, all, each ? 1 : 0);
            if (!s || !sr) {
                pulse_patch_close(&s);
                pulse_patch_close(&sr);
                continue;
            }
            all_updates a, z;
            updates_of(sr, old, &a);
            updates_of(s, old, &z);
            CHECK(same_updates(&a, &z));
            if (all)
                CHECK(same_updates(&want, &z));
            free_updates(&a);
            free_updates(&z);
            pulse_patch_close(&s);
            pulse_patch_close(&sr);
        }
    free_updates(&want);

    stage_in_data_order(b, len, new_bytes, new_len, what);
    apply_to_new_file(path, 1, new_bytes, new_len, what);
    apply_to_new_file(path, 2, new_bytes, new_len, what);
out:
    pulse_ckpt_close(&old);
    pulse_patch_close(&p);
    pulse_patch_close(&m);
    pulse_patch_close(&r);
}

/* The patch b with table entry k's offset set to off (the digest sealed again): refused at open. */
static void refused_offset(const uint8_t *b, size_t len, const entry *e, size_t k, uint64_t off, const char *want)
{
    uint8_t *q = malloc(len);
    memcpy(q, b, len);
    put_le(q + e[k].at, off, 8);
    seal(q);
    pulse_patch *p = NULL;
    CHECK_ERR(pulse_patch_open_mem(&p, q, len), PULSE_ERR_FORMAT);
    CHECK(strstr(pulse_last_error(), want) != NULL);
    if (!strstr(pulse_last_error(), want))
        fprintf(stderr, "wanted \"%s\" in: %s\n", want, pulse_last_error());
    free(q);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(path);
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL);
    make_pair();
    pulse_ckpt *old = NULL, *new_ = NULL;
    CHECK_OK(pulse_ckpt_open(&old, path_of("old.safetensors"), PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_open(&new_, path_of("new.safetensors"), PULSE_CKPT_READ));
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.chunk_elems = CHUNK;
    CHECK_OK(pulse_patch_diff(old, new_, &o, path_of("p.patch")));
    pulse_ckpt_close(&old);
    pulse_ckpt_close(&new_);
    size_t len = 0, new_len = 0;
    uint8_t *b = read_all(path_of("p.patch"), &len);
    uint8_t *new_bytes = read_all(path_of("new.safetensors"), &new_len);

    /* The diff writes table order: each offset the sum of the lengths before it. */
    static entry e[256];
    const size_t n = parse(b, e, 256);
    CHECK(n >= 40);
    uint64_t sum = 0;
    for (size_t k = 0; k < n; k++) {
        CHECK_EQ_INT(e[k].off, sum);
        sum += e[k].len;
    }
    {
        pulse_patch *p = NULL;
        CHECK_OK(pulse_patch_open(&p, path_of("p.patch")));
        CHECK(p && p->in_table_order && !p->by_offset);
        pulse_patch_close(&p);
    }
    apply_to_new_file(path_of("p.patch"), 1, new_bytes, new_len, "in order");

    /* Every chunk reversed; then the tensors' blocks reversed, each block in table order (as
     * parts merged by a committer lie); then every other pair of chunks swapped. */
    size_t order[256], m = 0, perm_len = 0;
    for (size_t k = 0; k < n; k++)
        order[k] = n - 1 - k;
    uint8_t *perm = permute(b, len, e, n, order, 0, &perm_len);
    check_permuted(perm, perm_len, b, len, new_bytes, new_len, "reversed");
    free(perm);
    for (size_t t = NSPECS; t-- > 0;)
        for (size_t k = 0; k < n; k++)
            if (e[k].tensor == t)
                order[m++] = k;
    CHECK_EQ_INT(m, n);
    perm = permute(b, len, e, n, order, 0, &perm_len);
    check_permuted(perm, perm_len, b, len, new_bytes, new_len, "tensors reversed");
    for (size_t k = 0; k < n; k++)
        order[k] = k % 4 < 2 && (k ^ 1) < n ? k ^ 1 : k;
    uint8_t *swapped = permute(b, len, e, n, order, 0, &perm_len);
    check_permuted(swapped, perm_len, b, len, new_bytes, new_len, "pairs swapped");
    free(swapped);

    /* Refused at open: two chunks at the same offset (their lengths still adding up to the
     * data section), a chunk moved one byte on (a hole before it, an overlap after it), and one
     * byte more of data than the chunks cover (in order and permuted). */
    static entry pe[256];
    CHECK_EQ_INT(parse(perm, pe, 256), n);
    size_t a = 0, z = 1;   /* two chunks of different tensors: the first and last in data order */
    for (size_t k = 0; k < n; k++) {
        if (pe[k].off == 0)
            a = k;
        if (pe[k].off + pe[k].len == len - (HEADER + le(b + 88, 8) + 32))
            z = k;
    }
    refused_offset(perm, perm_len, pe, z, 0, "overlapping");
    refused_offset(perm, perm_len, pe, a, 1, "hole");
    refused_offset(b, len, e, 3, e[3].off + 1, "hole");
    size_t hole_len = 0;
    for (size_t k = 0; k < n; k++)
        order[k] = k;
    uint8_t *hole = permute(b, len, e, n, order, 1, &hole_len);
    pulse_patch *p = NULL;
    CHECK_ERR(pulse_patch_open_mem(&p, hole, hole_len), PULSE_ERR_FORMAT);
    CHECK(strstr(pulse_last_error(), "not referenced") != NULL);
    free(hole);
    for (size_t t = NSPECS, i = 0; t-- > 0;)
        for (size_t k = 0; k < n; k++)
            if (e[k].tensor == t)
                order[i++] = k;
    hole = permute(b, len, e, n, order, 1, &hole_len);
    write_all(path_of("hole.patch"), hole, hole_len);
    CHECK_ERR(pulse_patch_open(&p, path_of("hole.patch")), PULSE_ERR_FORMAT);
    free(hole);
    free(perm);
    free(b);
    free(new_bytes);
    nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);   /* the temporary directory and its files */
    return check_done("chunk_order");
}
