/* SPDX-License-Identifier: Apache-2.0 */
/* A step's directions: two bits an element of each BF16 and F16 tensor, bound to the state ids of the step's two ends, which is all of the checkpoint before its base that a format-6 patch is coded by. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/checkpoint/filespace.h"
#include "node/parallel.h"
#include "node/patch/patch_ctxcode.h"
#include "node/patch/patch_dirs.h"
#include "node/patch/patch_internal.h"
#include "node/patch/patch_undo.h"

/* The file (docs/patch-format.md, "Directions file"): magic, version, tensor count, the state
 * ids of the step's two ends, one element count a tensor (0 for a tensor without directions),
 * each tensor's directions packed four to a byte (element j at bits 2(j mod 4) of byte j / 4),
 * and the SHA-256 of everything before it. */
#define DIRS_MAGIC "PULSEDIR"
#define DIRS_VERSION 1u
#define DIRS_HEAD 80u
#define DIRS_DIGEST 32u
/* Elements a job packs from two checkpoints: a multiple of 4, so that no two jobs share a byte. */
#define DIRS_BLOCK ((uint64_t)1 << 20)

static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t packed_bytes(uint64_t elems)
{
    return (size_t)((elems + 3) / 4);
}

/* Frees an image: malloc'd, or a read-only mapping of `mapped` bytes. */
static void image_release(uint8_t *image, size_t mapped)
{
    if (mapped)
        munmap(image, mapped);
    else
        free(image);
}

void pulse_dirs_free(pulse_dirs **d)
{
    if (!d || !*d)
        return;
    image_release((*d)->image, (*d)->mapped);
    if ((*d)->tmp)
        unlink((*d)->tmp);
    free((*d)->tmp);
    free((*d)->elems);
    free((*d)->at);
    free(*d);
    *d = NULL;
}

/* d's image (d->len bytes, none yet) as a new temporary beside path, zero, mapped read-write,
 * its blocks reserved so that no store into the map can meet a full disk. */
static int map_new_file(pulse_dirs *d, const char *path)
{
    char tmp[4096];
    void *m;
    int err = pulse_map_new_temp(path, ".tmp.", 0644, d->len, tmp, sizeof tmp, &m);
    if (err)
        return err;
    char *name = strdup(tmp);
    if (!name) {
        munmap(m, d->len);
        unlink(tmp);
        return pulse_fail(PULSE_ERR_NOMEM, "directions file name");
    }
    d->image = m;
    d->mapped = d->len;
    d->tmp = name;
    return 0;
}

/* A directions object of ntensors tensors with elems[i] each (taken either way) around image
 * (taken: malloc'd, or a read-only mapping of `mapped` bytes; NULL: a zeroed one, every element
 * PATCH_DIR_NONE, is made with its head written: in a temporary beside path where path is given
 * and such a file can be made, else in memory). */
static int dirs_make(pulse_dirs **out, size_t ntensors, uint64_t *elems, uint8_t *image, size_t mapped,
                     const uint8_t from_id[32], const uint8_t to_id[32], const char *path)
{
    pulse_dirs *d = calloc(1, sizeof *d);
    if (!d) {
        free(elems);
        image_release(image, mapped);
        return pulse_fail(PULSE_ERR_NOMEM, "directions of a step");
    }
    d->ntensors = ntensors;
    d->elems = elems;
    d->image = image;
    d->mapped = mapped;
    d->at = calloc(ntensors ? ntensors : 1, sizeof *d->at);
    size_t len = DIRS_HEAD + 8 * ntensors;
    for (size_t i = 0; d->at && i < ntensors; i++) {
        d->at[i] = len;
        len += packed_bytes(elems[i]);
    }
    d->len = len + DIRS_DIGEST;
    if (d->at && !image && path && map_new_file(d, path) != 0)
        pulse_clear_error();   /* in memory, as without a path */
    if (!d->at || (!d->image && !(d->image = calloc(1, d->len)))) {
        pulse_dirs_free(&d);
        return pulse_fail(PULSE_ERR_NOMEM, "directions of a step (%zu bytes)", len);
    }
    if (!image) {
        memcpy(d->image, DIRS_MAGIC, 8);
        put_le(d->image + 8, DIRS_VERSION, 4);
        put_le(d->image + 12, ntensors, 4);
        memcpy(d->image + 16, from_id, 32);
        memcpy(d->image + 48, to_id, 32);
        for (size_t i = 0; i < ntensors; i++)
            put_le(d->image + DIRS_HEAD + 8 * i, elems[i], 8);
    }
    *out = d;
    return 0;
}

void patch_dirs_seal(pulse_dirs *d)
{
    pulse_sha256(d->image, d->len - DIRS_DIGEST, d->image + d->len - DIRS_DIGEST);
}

const uint8_t *pulse_dirs_from_id(const pulse_dirs *d)
{
    return d ? d->image + 16 : NULL;
}

const uint8_t *pulse_dirs_to_id(const pulse_dirs *d)
{
    return d ? d->image + 48 : NULL;
}

static int has_dirs(pulse_dtype dt)
{
    return patch_ctx_dtype_ok(dt);
}

int patch_dirs_check_patch(const pulse_dirs *d, const pulse_patch *p)
{
    if (d->ntensors != p->ntensors)
        return pulse_fail(PULSE_ERR_MISMATCH, "the directions are of %zu tensors, the patch has %zu", d->ntensors,
                          p->ntensors);
    for (size_t i = 0; i < p->ntensors; i++) {
        const patch_tensor *t = &p->tensors[i];
        const uint64_t want = has_dirs(t->dtype) ? t->units : 0;
        if (d->elems[i] != want)
            return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s: the directions hold %llu elements, the patch %llu",
                              t->name, (unsigned long long)d->elems[i], (unsigned long long)want);
    }
    return 0;
}

int patch_dirs_check_ckpt(const pulse_dirs *d, const pulse_ckpt *c)
{
    if (d->ntensors != pulse_ckpt_count(c))
        return pulse_fail(PULSE_ERR_MISMATCH, "the directions are of %zu tensors, the checkpoint has %zu",
                          d->ntensors, pulse_ckpt_count(c));
    for (size_t i = 0; i < d->ntensors; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(c, i);
        const uint64_t want = has_dirs(t->dtype) ? t->nelems : 0;
        if (d->elems[i] != want)
            return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s: the directions hold %llu elements, the checkpoint %llu",
                              t->name, (unsigned long long)d->elems[i], (unsigned long long)want);
    }
    return 0;
}

/* ---- from two checkpoints ---- */

typedef struct step_job {
    pulse_dirs *d;
    const pulse_ckpt *from, *to;
    uint64_t *block_start;   /* per tensor: its first job; [ntensors]: the job count */
} step_job;

/* patch_ctx_dir without a branch: the pack runs over every element of the model. */
static inline unsigned dir_of(uint16_t a, uint16_t b)
{
    const int16_t d = (int16_t)(uint16_t)(b - a);
    return (unsigned)(d > 0) | (unsigned)(d < 0) << 1;
}

static int pack_block(void *ctx, size_t job)
{
    step_job *q = ctx;
    size_t t = patch_chunk_tensor(q->block_start, q->d->ntensors, job);
    const uint64_t first = (job - q->block_start[t]) * DIRS_BLOCK;
    const uint64_t n = q->d->elems[t] - first < DIRS_BLOCK ? q->d->elems[t] - first : DIRS_BLOCK;
    const uint8_t *a = pulse_ckpt_tensor(q->from, t)->data + first * 2;
    const uint8_t *b = pulse_ckpt_tensor(q->to, t)->data + first * 2;
    uint8_t *out = q->d->image + q->d->at[t] + first / 4;
    uint64_t i = 0;
    if (!patch_misaligned(a, 2) && !patch_misaligned(b, 2)) {
        const uint16_t *x = (const uint16_t *)(const void *)a, *y = (const uint16_t *)(const void *)b;
        for (; i + 4 <= n; i += 4)
            out[i / 4] = (uint8_t)(dir_of(x[i], y[i]) | dir_of(x[i + 1], y[i + 1]) << 2 |
                                   dir_of(x[i + 2], y[i + 2]) << 4 | dir_of(x[i + 3], y[i + 3]) << 6);
    }
    /* the rest, and a tensor whose data is not 2-byte aligned, element by element through memcpy */
    for (; i < n; i++) {
        uint16_t x, y;
        memcpy(&x, a + 2 * i, 2);
        memcpy(&y, b + 2 * i, 2);
        out[i / 4] = (uint8_t)(out[i / 4] | dir_of(x, y) << (2 * (i & 3)));
    }
    return 0;
}

static int same_tensors(const pulse_ckpt *a, const pulse_ckpt *b)
{
    if (pulse_ckpt_count(a) != pulse_ckpt_count(b))
        return pulse_fail(PULSE_ERR_MISMATCH, "the two checkpoints have %zu and %zu tensors", pulse_ckpt_count(a),
                          pulse_ckpt_count(b));
    for (size_t i = 0; i < pulse_ckpt_count(a); i++) {
        const pulse_tensor *x = pulse_ckpt_tensor(a, i), *y = pulse_ckpt_tensor(b, i);
        if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || x->nelems != y->nelems)
            return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s: not the same tensor in both checkpoints", x->name);
    }
    return 0;
}

/* pulse_dirs_of_step, built beside path (a temporary, mapped) when path is given and such a
 * file can be made, else in memory. */
static int dirs_of_step(pulse_dirs **out, const pulse_ckpt *from, const pulse_ckpt *to, const uint8_t *from_id,
                        const uint8_t *to_id, int threads, const char *path)
{
    pulse_clear_error();
    if (!out || !from || !to)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_dirs_of_step: NULL argument");
    *out = NULL;
    int err = same_tensors(from, to);
    if (err)
        return err;
    uint8_t ids[2][32];
    if (!from_id && (err = pulse_ckpt_state_id(from, threads, ids[0])) != 0)
        return err;
    if (!to_id && (err = pulse_ckpt_state_id(to, threads, ids[1])) != 0)
        return err;
    const size_t n = pulse_ckpt_count(from);
    uint64_t *elems = calloc(n ? n : 1, sizeof *elems), *block_start = calloc(n + 1, sizeof *block_start);
    if (!elems || !block_start) {
        free(elems);
        free(block_start);
        return pulse_fail(PULSE_ERR_NOMEM, "directions of a step");
    }
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(from, i);
        elems[i] = has_dirs(t->dtype) ? t->nelems : 0;
        block_start[i + 1] = block_start[i] + (elems[i] + DIRS_BLOCK - 1) / DIRS_BLOCK;
    }
    pulse_dirs *d;
    if ((err = dirs_make(&d, n, elems, NULL, 0, from_id ? from_id : ids[0], to_id ? to_id : ids[1], path)) != 0) {
        free(block_start);
        return err;
    }
    step_job q = { .d = d, .from = from, .to = to, .block_start = block_start };
    err = pulse_parallel_for((size_t)block_start[n], threads, pack_block, &q);
    free(block_start);
    if (err) {
        pulse_dirs_free(&d);
        return err;
    }
    patch_dirs_seal(d);
    *out = d;
    return 0;
}

int pulse_dirs_of_step(pulse_dirs **out, const pulse_ckpt *from, const pulse_ckpt *to, const uint8_t *from_id,
                       const uint8_t *to_id, int threads)
{
    return dirs_of_step(out, from, to, from_id, to_id, threads, NULL);
}

int patch_dirs_of_step_at(pulse_dirs **out, const pulse_ckpt *from, const pulse_ckpt *to, const uint8_t from_id[32],
                          const uint8_t to_id[32], int threads, const char *path)
{
    return dirs_of_step(out, from, to, from_id, to_id, threads, path);
}

int pulse_dirs_write_step(const pulse_ckpt *from, const pulse_ckpt *to, const uint8_t *from_id,
                          const uint8_t *to_id, int threads, const char *path, int durable)
{
    if (!path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_dirs_write_step: NULL path");
    pulse_dirs *d = NULL;
    int err = dirs_of_step(&d, from, to, from_id, to_id, threads, path);
    if (!err)
        err = patch_dirs_commit(d, path, durable);
    pulse_dirs_free(&d);   /* and its temporary, where it was not renamed */
    return err;
}

/* ---- from a patch and its base ---- */

static int dirs_empty(pulse_dirs **d, const pulse_patch *p, const uint8_t from_id[32], const uint8_t to_id[32],
                      const char *path)
{
    uint64_t *elems = calloc(p->ntensors ? p->ntensors : 1, sizeof *elems);
    if (!elems)
        return pulse_fail(PULSE_ERR_NOMEM, "directions of a step");
    for (size_t i = 0; i < p->ntensors; i++)
        elems[i] = has_dirs(p->tensors[i].dtype) ? p->tensors[i].units : 0;
    return dirs_make(d, p->ntensors, elems, NULL, 0, from_id, to_id, path);
}

int patch_dirs_empty(pulse_dirs **d, const pulse_patch *p, const uint8_t from_id[32], const uint8_t to_id[32])
{
    return dirs_empty(d, p, from_id, to_id, NULL);
}

int patch_dirs_empty_at(pulse_dirs **d, const pulse_patch *p, const uint8_t from_id[32], const uint8_t to_id[32],
                        const char *path)
{
    return dirs_empty(d, p, from_id, to_id, path);
}

int patch_dirs_commit(pulse_dirs *d, const char *path, int durable)
{
    if (!d->tmp)
        return patch_dirs_save_mapped(d, path, durable);
    if (durable && msync(d->image, d->mapped, MS_SYNC) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "directions file %s: msync", d->tmp);
    if (rename(d->tmp, path) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "directions file: rename %s to %s", d->tmp, path);
    free(d->tmp);
    d->tmp = NULL;
    return durable ? pulse_fsync_parent(path) : 0;
}

typedef struct patch_job {
    pulse_dirs *d;
    const pulse_patch *p;
    const pulse_ckpt *base;
    patch_pool pool;
} patch_job;

static int chunk_dirs_job(void *ctx, size_t i)
{
    patch_job *q = ctx;
    const patch_chunk *c = &q->p->chunks[i];
    if (!q->d->elems[c->tensor])
        return 0;
    int err = 0;
    patch_scratch *s = patch_pool_take(&q->pool, &err);
    if (!s)
        return err;
    const uint8_t *base = patch_chunk_base(q->p, c, q->base);
    if ((err = patch_decode_chunk_base(q->p, c, s, base)) == 0) {
        const uint16_t *v = (const uint16_t *)(const void *)s->vals;
        const int ulp = q->p->values == PULSE_VALUES_ULP;
        for (uint32_t j = 0; j < c->count; j++) {
            uint16_t old;
            memcpy(&old, base + 2 * (size_t)s->idx[j], 2);
            const uint8_t dir = ulp ? patch_ctx_dir_of_zigzag(v[j]) : patch_ctx_dir(old, v[j]);
            patch_dirs_set(q->d, c->tensor, c->first + s->idx[j], dir);
        }
    }
    patch_pool_give(&q->pool, s);
    return err;
}

int pulse_dirs_of_patch(pulse_dirs **out, const pulse_patch *p, const pulse_ckpt *base, int threads)
{
    pulse_clear_error();
    if (!out || !p || !base)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_dirs_of_patch: NULL argument");
    *out = NULL;
    if (p->present)
        return pulse_fail(PULSE_ERR_INVALID, "the directions of a sliced patch: every chunk is needed");
    int err = patch_check_layout(p, base);
    pulse_dirs *d;
    if (err || (err = patch_dirs_empty(&d, p, p->base_id, p->result_id)) != 0)
        return err;
    /* two chunks of a tensor share a byte of its directions unless a chunk is whole bytes */
    if (p->chunk_elems % 4)
        threads = 1;
    patch_job q = { .d = d, .p = p, .base = base };
    if ((err = patch_pool_init(&q.pool, threads, p->chunk_elems, 0)) == 0) {
        err = pulse_parallel_for(p->nchunks, threads, chunk_dirs_job, &q);
        patch_pool_free(&q.pool);
    }
    if (err) {
        pulse_dirs_free(&d);
        return err;
    }
    patch_dirs_seal(d);
    *out = d;
    return 0;
}

/* ---- from an in-place apply's undo ---- */

int patch_dirs_of_undo(pulse_dirs **out, const struct patch_undo *u, const pulse_ckpt *target, const char *path)
{
    const pulse_patch *p = u->p;
    *out = NULL;
    pulse_dirs *d;
    int err = patch_dirs_empty_at(&d, p, p->base_id, p->result_id, path);
    if (err)
        return err;
    for (size_t i = 0; i < u->n; i++) {
        const patch_chunk *c = &p->chunks[i];
        const patch_undo_chunk *e = &u->ent[i];
        if (!d->elems[c->tensor] || !e->idx)
            continue;
        const uint8_t *now = pulse_ckpt_tensor(target, c->tensor)->data + c->first * 2;
        for (uint32_t m = 0; m < e->k; m++) {
            uint16_t was, is;
            memcpy(&was, e->old + 2 * (size_t)m, 2);
            memcpy(&is, now + 2 * (size_t)e->idx[m], 2);
            patch_dirs_set(d, c->tensor, c->first + e->idx[m], patch_ctx_dir(was, is));
        }
    }
    patch_dirs_seal(d);
    *out = d;
    return 0;
}

/* ---- the file ---- */

int pulse_dirs_save(const pulse_dirs *d, const char *path, int durable)
{
    pulse_clear_error();
    if (!d || !path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_dirs_save: NULL argument");
    return pulse_replace_file(path, path, d->image, d->len, durable);
}

static int bad(const char *path, const char *what)
{
    return pulse_fail(PULSE_ERR_FORMAT, "directions file %s: %s", path, what);
}

/* Parses the n bytes read from path into a directions object (image taken either way: malloc'd,
 * or, mapped != 0, a read-only mapping of the n bytes). */
static int parse(pulse_dirs **out, const char *path, uint8_t *image, size_t n, size_t mapped)
{
    if (n < DIRS_HEAD + DIRS_DIGEST || memcmp(image, DIRS_MAGIC, 8) != 0) {
        const int magic = n >= 8 && memcmp(image, DIRS_MAGIC, 8) == 0;
        image_release(image, mapped);
        return bad(path, magic ? "truncated header" : "not a directions file (no PULSEDIR magic)");
    }
    const uint64_t version = get_le(image + 8, 4), ntensors = get_le(image + 12, 4);
    if (version != DIRS_VERSION) {
        image_release(image, mapped);
        return pulse_fail(PULSE_ERR_FORMAT, "directions file %s: version %llu unknown (this build reads %u)", path,
                          (unsigned long long)version, DIRS_VERSION);
    }
    if (ntensors > (n - DIRS_HEAD - DIRS_DIGEST) / 8) {
        image_release(image, mapped);
        return bad(path, "truncated tensor table");
    }
    uint64_t *elems = calloc(ntensors ? ntensors : 1, sizeof *elems);
    if (!elems) {
        image_release(image, mapped);
        return pulse_fail(PULSE_ERR_NOMEM, "directions of a step");
    }
    /* the table's sizes are summed only while they fit in the file: a count no file holds is
     * refused before it can wrap the sum */
    uint64_t want = DIRS_HEAD + 8 * ntensors + DIRS_DIGEST;
    for (size_t i = 0; i < ntensors && want <= n; i++) {
        elems[i] = get_le(image + DIRS_HEAD + 8 * i, 8);
        want = elems[i] / 4 > n - want ? (uint64_t)n + 1 : want + packed_bytes(elems[i]);
    }
    if (want != n) {
        image_release(image, mapped);
        free(elems);
        if (want > n)
            return pulse_fail(PULSE_ERR_FORMAT, "directions file %s: %zu bytes, its table says more (truncated or "
                              "extended)", path, n);
        return pulse_fail(PULSE_ERR_FORMAT, "directions file %s: %zu bytes, its table says %llu (truncated or "
                          "extended)", path, n, (unsigned long long)want);
    }
    uint8_t digest[32];
    pulse_sha256(image, n - DIRS_DIGEST, digest);
    if (memcmp(digest, image + n - DIRS_DIGEST, 32) != 0) {
        image_release(image, mapped);
        free(elems);
        return bad(path, "digest mismatch (the file is damaged)");
    }
    return dirs_make(out, (size_t)ntensors, elems, image, mapped, NULL, NULL, NULL);
}

/* The directions file at path, opened read-only (a regular file), with its size. */
static int open_regular(const char *path, int *fd, size_t *n)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "directions file %s", path);
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        return pulse_fail(PULSE_ERR_IO, "directions file %s: not a regular file", path);
    }
    *n = (size_t)st.st_size;
    return 0;
}

int pulse_dirs_load(pulse_dirs **out, const char *path)
{
    pulse_clear_error();
    if (!out || !path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_dirs_load: NULL argument");
    *out = NULL;
    int fd;
    size_t n;
    int err = open_regular(path, &fd, &n);
    if (err)
        return err;
    uint8_t *image = malloc(n ? n : 1);
    if (!image) {
        close(fd);
        return pulse_fail(PULSE_ERR_NOMEM, "directions file %s (%zu bytes)", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, image + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? pulse_fail_errno(PULSE_ERR_IO, "read %s", path) : bad(path, "shorter than it was");
            free(image);
            close(fd);
            return e;
        }
        got += (size_t)r;
    }
    close(fd);
    return parse(out, path, image, n, 0);
}

int patch_dirs_load_mapped(pulse_dirs **out, const char *path)
{
    pulse_clear_error();
    *out = NULL;
    int fd;
    size_t n;
    int err = open_regular(path, &fd, &n);
    if (err)
        return err;
    if (n < DIRS_HEAD + DIRS_DIGEST) {   /* nothing worth mapping: the parse says what it is */
        close(fd);
        return pulse_dirs_load(out, path);
    }
    void *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return pulse_fail_errno(PULSE_ERR_IO, "directions file %s: mmap", path);
    return parse(out, path, m, n, n);
}

int patch_dirs_save_mapped(pulse_dirs *d, const char *path, int durable)
{
    int err = pulse_dirs_save(d, path, durable);
    if (err || d->mapped)
        return err;
    int fd;
    size_t n;
    if (open_regular(path, &fd, &n) != 0) {
        pulse_clear_error();
        return 0;   /* written; held in memory as it was */
    }
    void *m = n == d->len ? mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED)
        return 0;
    free(d->image);
    d->image = m;
    d->mapped = n;
    return 0;
}

/* ---- the patch after the step ---- */

int pulse_patch_set_prev_dirs(pulse_patch *p, const pulse_dirs *d)
{
    pulse_clear_error();
    if (!p || !d)
        return pulse_fail(PULSE_ERR_INVALID, "set_prev_dirs: no patch or no directions");
    if (p->version < PULSE_PATCH_VERSION_PREV)
        return pulse_fail(PULSE_ERR_INVALID, "a format-%u patch is not coded by the step before its base (format %u is)",
                          p->version, PULSE_PATCH_VERSION_PREV);
    int err = patch_dirs_check_patch(d, p);
    if (err)
        return err;
    char h1[65], h2[65];
    if (memcmp(pulse_dirs_to_id(d), p->base_id, 32) != 0)
        return pulse_fail(PULSE_ERR_MISMATCH, "the directions are of a step to state %.16s.., the patch's base is %.16s..",
                          pulse_id_hex(pulse_dirs_to_id(d), h1), pulse_id_hex(p->base_id, h2));
    if (memcmp(pulse_dirs_from_id(d), p->prev_id, 32) != 0)
        return pulse_fail(PULSE_ERR_MISMATCH, "the directions are of a step from state %.16s.., the patch was coded "
                          "after state %.16s..", pulse_id_hex(pulse_dirs_from_id(d), h1),
                          pulse_id_hex(p->prev_id, h2));
    p->prev_dirs = d;
    p->prev = NULL;
    return 0;
}
