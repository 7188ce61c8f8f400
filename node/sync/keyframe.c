/* SPDX-License-Identifier: Apache-2.0 */
/* Keyframes: a checkpoint as one safetensors file cut into zstd-compressed, content-addressed ranges. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/checkpoint/filespace.h"
#include "crypto/sha256.h"
#include "node/parallel.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/sync.h"

/* Chunks compressed (or decompressed) and in flight at once: bounds memory to about
 * BATCH x 2 x PULSE_KEYFRAME_CHUNK whatever the model size. */
#define BATCH 8
#define KEYFRAME_ROLE "keyframe-chunk"
#define KEYFRAME_MAX_BYTES (UINT64_C(1) << 42)

struct compress_job {
    const uint8_t *src;
    uint64_t src_len;
    uint64_t first;          /* index of the batch's first chunk */
    int level;
    sync_blob blobs[BATCH];
    void *bufs[BATCH];
};

static int compress_one(void *ctx, size_t i)
{
    struct compress_job *j = ctx;
    uint64_t off = (j->first + i) * (uint64_t)PULSE_KEYFRAME_CHUNK;
    size_t len = (size_t)(j->src_len - off < PULSE_KEYFRAME_CHUNK ? j->src_len - off : PULSE_KEYFRAME_CHUNK);
    size_t cap = ZSTD_compressBound(len);
    void *buf = malloc(cap);
    if (!buf)
        return pulse_fail(PULSE_ERR_NOMEM, "keyframe chunk %llu", (unsigned long long)(j->first + i));
    size_t n = ZSTD_compress(buf, cap, j->src + off, len, j->level);
    if (ZSTD_isError(n)) {
        free(buf);
        return pulse_fail(PULSE_ERR_INVALID, "keyframe chunk: zstd: %s", ZSTD_getErrorName(n));
    }
    j->bufs[i] = buf;
    j->blobs[i] = (sync_blob){ .data = buf, .len = n };
    pulse_sha256(buf, n, j->blobs[i].digest);
    return 0;
}

int sync_copy_to_file(const pulse_ckpt *c, const char *scratch, pulse_ckpt **out)
{
    size_t n = pulse_ckpt_count(c);
    int r = ckpt_create_shaped_like(out, scratch, c, NULL, pulse_ckpt_metadata(c));
    for (size_t i = 0; !r && i < n; i++) {
        const pulse_tensor *src = pulse_ckpt_tensor(c, i);
        const pulse_tensor *dst = pulse_ckpt_find(*out, src->name);
        if (src->nbytes)
            memcpy(dst->data, src->data, src->nbytes);
    }
    return r;
}

int sync_keyframe_publish(pulse_store *st, const char *run, const pulse_ckpt *c, int threads,
                          int zstd_level, pulse_record *r, uint64_t *moved)
{
    pulse_ckpt *copy = NULL;
    const pulse_ckpt *src = c;
    int rc = 0;
    if (c->nfiles != 1 || c->index_path) {
        char scratch[4096];
        snprintf(scratch, sizeof scratch, "%s.keyframe", c->files[0].path);
        if ((rc = sync_copy_to_file(c, scratch, &copy)))
            return rc;
        src = copy;
    }
    const uint8_t *bytes = src->files[0].map;
    uint64_t size = src->files[0].size;
    uint64_t nchunks = (size + PULSE_KEYFRAME_CHUNK - 1) / PULSE_KEYFRAME_CHUNK;
    sync_progress_total(size);

    for (uint64_t first = 0; !rc && first < nchunks; first += BATCH) {
        struct compress_job j = { .src = bytes, .src_len = size, .first = first, .level = zstd_level };
        size_t nb = (size_t)(nchunks - first < BATCH ? nchunks - first : BATCH);
        rc = pulse_parallel_for(nb, threads, compress_one, &j);
        if (!rc)
            rc = sync_put_objects(st, run, j.blobs, nb, moved);
        for (size_t i = 0; !rc && i < nb; i++) {
            uint64_t off = (first + i) * (uint64_t)PULSE_KEYFRAME_CHUNK;
            uint64_t len = size - off < PULSE_KEYFRAME_CHUNK ? size - off : PULSE_KEYFRAME_CHUNK;
            rc = pulse_record_add_object(r, j.blobs[i].digest, j.blobs[i].len, KEYFRAME_ROLE, "", off, len);
            if (!rc)
                sync_progress_add(len);
        }
        for (size_t i = 0; i < nb; i++)
            free(j.bufs[i]);
    }
    pulse_ckpt_close(&copy);
    return rc;
}

struct decompress_job {
    uint8_t *dst;
    const pulse_record_object *o;
    void **data;
};

static int decompress_one(void *ctx, size_t i)
{
    struct decompress_job *j = ctx;
    const pulse_record_object *o = &j->o[i];
    unsigned long long want = ZSTD_getFrameContentSize(j->data[i], o->size);
    if (want != o->range_length)
        return pulse_fail(PULSE_ERR_CORRUPT, "keyframe chunk at offset %llu: frame holds %llu bytes, record says %llu",
                          (unsigned long long)o->range_offset, want, (unsigned long long)o->range_length);
    size_t n = ZSTD_decompress(j->dst + o->range_offset, o->range_length, j->data[i], o->size);
    if (ZSTD_isError(n) || n != o->range_length)
        return pulse_fail(PULSE_ERR_CORRUPT, "keyframe chunk at offset %llu: %s",
                          (unsigned long long)o->range_offset,
                          ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short frame");
    return 0;
}

/* The ranges must tile [0, total) in order: a record cannot make us write outside the file. */
static int check_ranges(const pulse_record *r, uint64_t *total)
{
    uint64_t at = 0;
    for (uint32_t i = 0; i < r->n_objects; i++) {
        const pulse_record_object *o = &r->objects[i];
        if (strcmp(o->role, KEYFRAME_ROLE) != 0)
            return pulse_fail(PULSE_ERR_FORMAT, "keyframe object %u has role '%s'", i, o->role);
        if (o->range_offset != at || o->range_length == 0 || o->range_length > PULSE_KEYFRAME_CHUNK)
            return pulse_fail(PULSE_ERR_FORMAT, "keyframe object %u covers [%llu, +%llu), expected offset %llu",
                              i, (unsigned long long)o->range_offset,
                              (unsigned long long)o->range_length, (unsigned long long)at);
        at += o->range_length;
        if (at > KEYFRAME_MAX_BYTES)
            return pulse_fail(PULSE_ERR_LIMIT, "keyframe larger than %llu bytes",
                              (unsigned long long)KEYFRAME_MAX_BYTES);
    }
    if (at == 0)
        return pulse_fail(PULSE_ERR_FORMAT, "keyframe record names no chunk");
    *total = at;
    return 0;
}

int sync_keyframe_restore(pulse_store *st, const char *run, const pulse_record *r, int threads,
                          const char *path, uint64_t *moved)
{
    uint64_t total = 0;
    int rc = check_ranges(r, &total);
    if (rc)
        return rc;
    char tmp[4096];
    int fd = pulse_create_temp(path, ".keyframe.", 0644, tmp, sizeof tmp);
    if (fd < 0)
        return fd;
    uint8_t *map = MAP_FAILED;
    if ((rc = pulse_file_reserve(fd, total, tmp)) != 0)
        ;   /* a full disk: said here, before any store into the map could SIGBUS */
    else if ((map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        rc = pulse_fail_errno(PULSE_ERR_IO, "%s: mmap", tmp);

    for (uint32_t first = 0; !rc && first < r->n_objects; first += BATCH) {
        size_t nb = r->n_objects - first < BATCH ? r->n_objects - first : BATCH;
        void *data[BATCH] = { 0 };
        rc = sync_fetch_objects(st, run, &r->objects[first], nb, data, moved);
        if (!rc) {
            struct decompress_job j = { .dst = map, .o = &r->objects[first], .data = data };
            rc = pulse_parallel_for(nb, threads, decompress_one, &j);
        }
        for (size_t i = 0; i < nb; i++)
            pulse_store_free(data[i]);
    }
    if (map != MAP_FAILED) {
        if (!rc && msync(map, total, MS_SYNC) != 0)
            rc = pulse_fail_errno(PULSE_ERR_IO, "%s: msync", tmp);
        munmap(map, total);
    }
    if (!rc && fsync(fd) != 0)
        rc = pulse_fail_errno(PULSE_ERR_IO, "%s: fsync", tmp);
    close(fd);

    /* The reassembled bytes must parse and hash to the state the record promises. */
    if (!rc) {
        pulse_ckpt *c = NULL;
        uint8_t id[32];
        rc = pulse_ckpt_open(&c, tmp, PULSE_CKPT_READ);
        if (rc)
            rc = pulse_fail(rc, "keyframe of step %llu: %s", (unsigned long long)r->step, pulse_last_error());
        if (!rc && !(rc = pulse_ckpt_state_id(c, threads, id)) && memcmp(id, r->result, 32) != 0)
            rc = pulse_fail(PULSE_ERR_CORRUPT, "keyframe of step %llu does not hash to the record's result state",
                            (unsigned long long)r->step);
        pulse_ckpt_close(&c);
    }
    if (!rc && rename(tmp, path) != 0)
        rc = pulse_fail_errno(PULSE_ERR_IO, "cannot rename %s to %s", tmp, path);
    else if (!rc)
        rc = pulse_fsync_parent(path);   /* the restore is durable once this returns */
    if (rc)
        unlink(tmp);
    return rc;
}
