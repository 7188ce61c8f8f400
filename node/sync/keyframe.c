/* SPDX-License-Identifier: Apache-2.0 */
/* Keyframes: a checkpoint as one safetensors file (or, from a trainer publishing in parts, one file a shard) cut into zstd-compressed, content-addressed ranges. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "manifest/layout.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/checkpoint/filespace.h"
#include "node/checkpoint/json.h"
#include "crypto/sha256.h"
#include "node/parallel.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/sync.h"

/* Chunks compressed (or decompressed) and in flight at once: bounds memory to about
 * BATCH x 2 x PULSE_KEYFRAME_CHUNK whatever the model size. */
#define BATCH 8
#define KEYFRAME_ROLE "keyframe-chunk"
/* Trailing objects of a keyframe record that a restore does not fetch (the committer's tensor hashes). */
#define TENSOR_HASHES_ROLE "tensor-hashes"
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
    const pulse_record_object *o;
    uint8_t *dst[BATCH];       /* the file (shard) each chunk decompresses into */
    const char *shard[BATCH];  /* its name, "" for the one file */
    void **data;
};

static int decompress_one(void *ctx, size_t i)
{
    struct decompress_job *j = ctx;
    const pulse_record_object *o = &j->o[i];
    const char *of = j->shard[i][0] ? " of shard " : "";
    unsigned long long want = ZSTD_getFrameContentSize(j->data[i], o->size);
    if (want != o->range_length)
        return pulse_fail(PULSE_ERR_CORRUPT, "keyframe chunk at offset %llu%s%s: frame holds %llu bytes, record says %llu",
                          (unsigned long long)o->range_offset, of, j->shard[i], want,
                          (unsigned long long)o->range_length);
    size_t n = ZSTD_decompress(j->dst[i] + o->range_offset, o->range_length, j->data[i], o->size);
    if (ZSTD_isError(n) || n != o->range_length)
        return pulse_fail(PULSE_ERR_CORRUPT, "keyframe chunk at offset %llu%s%s: %s",
                          (unsigned long long)o->range_offset, of, j->shard[i],
                          ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short frame");
    return 0;
}

/* One file of a keyframe: the one file (name ""), or one shard of a sharded keyframe. */
struct kf_part {
    const char *name;        /* the record's tensor field of its chunks */
    uint32_t first, count;   /* its chunks: objects [first, first + count) */
    uint64_t size;           /* bytes: its ranges tile [0, size) */
    uint8_t *map;            /* while it is written */
    char *path;              /* its temporary file */
};

/* The files of keyframe record R (docs/sync.md "Objects of a keyframe record"): its
 * keyframe-chunk objects first, all with tensor "" (one file) or all naming a shard file (a
 * sharded keyframe; each shard's chunks consecutive, its name not seen again after another's),
 * then only tensor-hashes objects, which a restore ignores. Each file's ranges must tile
 * [0, size) in order: a record cannot make us write outside a file. *parts (malloc'd, *nparts of
 * them) and *nchunks (the chunk objects, all before the rest) on success. */
static int keyframe_layout(const pulse_record *r, struct kf_part **parts, size_t *nparts, uint32_t *nchunks)
{
    struct kf_part *p = NULL;
    size_t np = 0, cap = 0;
    uint64_t total = 0, at = 0;
    uint32_t nc = 0;
    int hashes = 0, rc = 0;
    for (uint32_t i = 0; i < r->n_objects && !rc; i++) {
        const pulse_record_object *o = &r->objects[i];
        if (!strcmp(o->role, TENSOR_HASHES_ROLE)) {
            hashes = 1;
            continue;
        }
        if (strcmp(o->role, KEYFRAME_ROLE) != 0) {
            rc = pulse_fail(PULSE_ERR_FORMAT, "keyframe object %u has role '%s', not '%s' or '%s'", i, o->role,
                            KEYFRAME_ROLE, TENSOR_HASHES_ROLE);
            break;
        }
        if (hashes) {
            rc = pulse_fail(PULSE_ERR_FORMAT, "keyframe object %u is a %s after a %s object", i, KEYFRAME_ROLE,
                            TENSOR_HASHES_ROLE);
            break;
        }
        const char *name = o->tensor ? o->tensor : "";
        if (np && !p[0].name[0] != !name[0]) {
            rc = pulse_fail(PULSE_ERR_FORMAT, "keyframe object %u: chunks with and without a shard name "
                            "in one record", i);
            break;
        }
        if (name[0] && !pulse_layout_shard_name_ok(name)) {
            rc = pulse_fail(PULSE_ERR_FORMAT, "keyframe object %u: shard name '%.80s' is not a plain "
                            "*.safetensors file name", i, name);
            break;
        }
        if (!np || strcmp(p[np - 1].name, name) != 0) {
            for (size_t k = 0; k < np && !rc; k++)
                if (!strcmp(p[k].name, name))
                    rc = pulse_fail(PULSE_ERR_FORMAT, "keyframe object %u: shard %s again after shard %s "
                                    "(a shard's chunks must be consecutive)", i, name, p[np - 1].name);
            if (!rc && np == PULSE_ST_MAX_SHARDS)
                rc = pulse_fail(PULSE_ERR_LIMIT, "keyframe of more than %u shards", PULSE_ST_MAX_SHARDS);
            if (!rc && np == cap) {
                size_t ncap = cap ? 2 * cap : 4;
                struct kf_part *q = realloc(p, ncap * sizeof *q);
                if (!q)
                    rc = pulse_fail(PULSE_ERR_NOMEM, "keyframe shards");
                else
                    p = q, cap = ncap;
            }
            if (rc)
                break;
            p[np++] = (struct kf_part){ .name = name, .first = i };
            at = 0;
        }
        if (o->range_offset != at || o->range_length == 0 || o->range_length > PULSE_KEYFRAME_CHUNK) {
            rc = pulse_fail(PULSE_ERR_FORMAT, "keyframe object %u covers [%llu, +%llu)%s%s, expected offset %llu",
                            i, (unsigned long long)o->range_offset, (unsigned long long)o->range_length,
                            name[0] ? " of shard " : "", name, (unsigned long long)at);
            break;
        }
        at += o->range_length;
        total += o->range_length;
        if (total > KEYFRAME_MAX_BYTES) {
            rc = pulse_fail(PULSE_ERR_LIMIT, "keyframe larger than %llu bytes", (unsigned long long)KEYFRAME_MAX_BYTES);
            break;
        }
        p[np - 1].count++;
        p[np - 1].size = at;
        nc = i + 1;
    }
    if (!rc && !np)
        rc = pulse_fail(PULSE_ERR_FORMAT, "keyframe record names no chunk");
    if (rc) {
        free(p);
        return rc;
    }
    *parts = p;
    *nparts = np;
    *nchunks = nc;
    return 0;
}

/* Fetches chunks [0, nchunks) of R in batches of BATCH (the memory bound) and decompresses each
 * into its part's map. */
static int keyframe_fill(pulse_store *st, const char *run, const pulse_record *r, uint32_t nchunks,
                         const struct kf_part *parts, int threads, uint64_t *moved)
{
    int rc = 0;
    size_t part = 0;
    for (uint32_t first = 0; !rc && first < nchunks; first += BATCH) {
        size_t nb = nchunks - first < BATCH ? nchunks - first : BATCH;
        void *data[BATCH] = { 0 };
        struct decompress_job j = { .o = &r->objects[first], .data = data };
        for (size_t i = 0; i < nb; i++) {
            while (first + i >= parts[part].first + parts[part].count)
                part++;
            j.dst[i] = parts[part].map;
            j.shard[i] = parts[part].name;
        }
        rc = sync_fetch_objects(st, run, &r->objects[first], nb, data, moved);
        if (!rc)
            rc = pulse_parallel_for(nb, threads, decompress_one, &j);
        for (size_t i = 0; i < nb; i++)
            pulse_store_free(data[i]);
    }
    return rc;
}

/* The state id of C must be the record's result. */
static int keyframe_check_result(const pulse_ckpt *c, const pulse_record *r, int threads)
{
    uint8_t id[32];
    int rc = pulse_ckpt_state_id(c, threads, id);
    if (!rc && memcmp(id, r->result, 32) != 0)
        rc = pulse_fail(PULSE_ERR_CORRUPT, "keyframe of step %llu does not hash to the record's result state",
                        (unsigned long long)r->step);
    return rc;
}

/* One file: decompressed into a temporary beside PATH, checked, renamed into place. */
static int restore_one_file(pulse_store *st, const char *run, const pulse_record *r, uint32_t nchunks,
                            struct kf_part *part, int threads, const char *path, uint64_t *moved)
{
    uint64_t total = part->size;
    char tmp[4096];
    int fd = pulse_create_temp(path, ".keyframe.", 0644, tmp, sizeof tmp);
    if (fd < 0)
        return fd;
    int rc;
    if ((rc = pulse_file_reserve(fd, total, tmp)) != 0)
        ;   /* a full disk: said here, before any store into the map could SIGBUS */
    else if ((part->map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        rc = pulse_fail_errno(PULSE_ERR_IO, "%s: mmap", tmp);
    else
        rc = keyframe_fill(st, run, r, nchunks, part, threads, moved);
    if (part->map && part->map != MAP_FAILED) {
        if (!rc && msync(part->map, total, MS_SYNC) != 0)
            rc = pulse_fail_errno(PULSE_ERR_IO, "%s: msync", tmp);
        munmap(part->map, total);
    }
    part->map = NULL;
    if (!rc && fsync(fd) != 0)
        rc = pulse_fail_errno(PULSE_ERR_IO, "%s: fsync", tmp);
    close(fd);

    /* The reassembled bytes must parse and hash to the state the record promises. */
    if (!rc) {
        pulse_ckpt *c = NULL;
        rc = pulse_ckpt_open(&c, tmp, PULSE_CKPT_READ);
        if (rc)
            rc = pulse_fail(rc, "keyframe of step %llu: %s", (unsigned long long)r->step, pulse_last_error());
        else
            rc = keyframe_check_result(c, r, threads);
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

/* One tensor of a shard, to find a name held by two shards and to write the index. */
struct kf_name {
    const char *tensor;
    const char *shard;
};

static int kf_name_cmp(const void *a, const void *b)
{
    const struct kf_name *x = a, *y = b;
    int c = strcmp(x->tensor, y->tensor);
    return c ? c : strcmp(x->shard, y->shard);
}

#define INDEX_HEAD "{\"metadata\":{},\"weight_map\":{"

/* DIR/model.safetensors.index.json naming each tensor of the shards' files (opened in shards[]),
 * so that the reader opens them as one checkpoint. A tensor held by two shards is refused. */
static int write_index(const char *dir, const pulse_record *r, const struct kf_part *parts, size_t np,
                       pulse_ckpt *const *shards, char **index_path)
{
    size_t nt = 0;
    for (size_t k = 0; k < np; k++)
        nt += pulse_ckpt_count(shards[k]);
    struct kf_name *names = malloc((nt ? nt : 1) * sizeof *names);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    if (!names)
        return pulse_fail(PULSE_ERR_NOMEM, "keyframe shards");
    size_t at = 0;
    for (size_t k = 0; k < np; k++)
        for (size_t i = 0; i < pulse_ckpt_count(shards[k]); i++)
            names[at++] = (struct kf_name){ pulse_ckpt_tensor(shards[k], i)->name, parts[k].name };
    if (nt)
        qsort(names, nt, sizeof *names, kf_name_cmp);
    for (size_t i = 1; i < nt && !rc; i++)
        if (!strcmp(names[i - 1].tensor, names[i].tensor))
            rc = pulse_fail(PULSE_ERR_FORMAT, "keyframe of step %llu: tensor %.200s is in shards %s and %s",
                            (unsigned long long)r->step, names[i].tensor, names[i - 1].shard, names[i].shard);
    if (!rc)
        rc = json_append_raw(&buf, &len, &cap, INDEX_HEAD, strlen(INDEX_HEAD));
    for (size_t i = 0; i < nt && !rc; i++) {
        rc = json_append_raw(&buf, &len, &cap, i ? "," : "", i ? 1 : 0);
        if (!rc) rc = json_append_string(&buf, &len, &cap, names[i].tensor);
        if (!rc) rc = json_append_raw(&buf, &len, &cap, ":", 1);
        if (!rc) rc = json_append_string(&buf, &len, &cap, names[i].shard);
    }
    if (!rc)
        rc = json_append_raw(&buf, &len, &cap, "}}\n", 3);
    if (rc == PULSE_ERR_NOMEM)
        rc = pulse_fail(rc, "keyframe index");
    free(names);
    if (!rc && !(*index_path = ckpt_join(dir, "model.safetensors.index.json")))
        rc = pulse_fail(PULSE_ERR_NOMEM, "path");
    if (!rc) {
        int fd = open(*index_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            rc = pulse_fail_errno(PULSE_ERR_IO, "create %s", *index_path);
        for (size_t done = 0; !rc && done < len;) {
            ssize_t w = write(fd, buf + done, len - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                rc = pulse_fail_errno(PULSE_ERR_IO, "write %s", *index_path);
            else
                done += (size_t)w;
        }
        if (fd >= 0)
            close(fd);
    }
    free(buf);
    return rc;
}

/* A sharded keyframe: each shard decompressed into its file in a new temporary directory beside
 * PATH, the shards opened as one checkpoint (an index naming each one's tensors; a name in two
 * shards is refused), copied into one single file beside PATH, checked, committed to PATH. The
 * shard files are temporaries of this call only, never synced; the directory goes on every path. */
static int restore_sharded(pulse_store *st, const char *run, const pulse_record *r, uint32_t nchunks,
                           struct kf_part *parts, size_t np, int threads, const char *path, uint64_t *moved)
{
    char dir[4096];
    int rc = pulse_create_temp_dir(path, ".keyframe.", 0700, dir, sizeof dir);
    if (rc)
        return rc;
    pulse_ckpt **shards = calloc(np, sizeof *shards);
    pulse_ckpt *whole = NULL, *out = NULL;
    char *index = NULL;
    if (!shards)
        rc = pulse_fail(PULSE_ERR_NOMEM, "keyframe shards");
    for (size_t k = 0; k < np && !rc; k++) {
        if (!(parts[k].path = ckpt_join(dir, parts[k].name))) {
            rc = pulse_fail(PULSE_ERR_NOMEM, "path");
            break;
        }
        int fd = open(parts[k].path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = pulse_fail_errno(PULSE_ERR_IO, "create %s", parts[k].path);
            free(parts[k].path);
            parts[k].path = NULL;
            break;
        }
        /* reserved before the map: a full disk is said here, not by a SIGBUS */
        if (!(rc = pulse_file_reserve(fd, parts[k].size, parts[k].path))) {
            void *m = mmap(NULL, parts[k].size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED)
                rc = pulse_fail_errno(PULSE_ERR_IO, "%s: mmap", parts[k].path);
            else
                parts[k].map = m;   /* the map outlives the descriptor: one open file at a time */
        }
        close(fd);
    }
    if (!rc)
        rc = keyframe_fill(st, run, r, nchunks, parts, threads, moved);
    for (size_t k = 0; k < np; k++) {
        if (parts[k].map)
            munmap(parts[k].map, parts[k].size);
        parts[k].map = NULL;
    }

    /* Each shard must parse; together they are one checkpoint. */
    for (size_t k = 0; k < np && !rc; k++)
        if ((rc = pulse_ckpt_open(&shards[k], parts[k].path, PULSE_CKPT_READ)) != 0)
            rc = pulse_fail(rc, "keyframe of step %llu: %s", (unsigned long long)r->step, pulse_last_error());
    size_t nt = 0;
    for (size_t k = 0; k < np && !rc; k++)
        nt += pulse_ckpt_count(shards[k]);
    if (!rc)
        rc = write_index(dir, r, parts, np, shards, &index);
    for (size_t k = 0; shards && k < np; k++)
        pulse_ckpt_close(&shards[k]);
    /* Shards without a tensor are in no index; with none at all, the first shard is the model. */
    if (!rc && (rc = pulse_ckpt_open(&whole, nt ? index : parts[0].path, PULSE_CKPT_READ)) != 0)
        rc = pulse_fail(rc, "keyframe of step %llu: %s", (unsigned long long)r->step, pulse_last_error());

    /* One file beside PATH (PATH.tmp.XXXXXX until committed; removed when closed uncommitted),
     * whose state id must be the record's result. */
    if (!rc)
        rc = sync_copy_to_file(whole, path, &out);
    pulse_ckpt_close(&whole);
    if (!rc)
        rc = keyframe_check_result(out, r, threads);
    if (!rc)
        rc = pulse_ckpt_commit(out);   /* msync, fsync, rename to PATH, fsync of its directory */
    pulse_ckpt_close(&out);

    for (size_t k = 0; k < np; k++) {
        if (parts[k].path)
            unlink(parts[k].path);
        free(parts[k].path);
        parts[k].path = NULL;
    }
    if (index)
        unlink(index);
    free(index);
    free(shards);
    rmdir(dir);
    return rc;
}

int sync_keyframe_restore(pulse_store *st, const char *run, const pulse_record *r, int threads,
                          const char *path, uint64_t *moved)
{
    struct kf_part *parts = NULL;
    size_t np = 0;
    uint32_t nchunks = 0;
    int rc = keyframe_layout(r, &parts, &np, &nchunks);
    if (rc)
        return rc;
    if (!parts[0].name[0])
        rc = restore_one_file(st, run, r, nchunks, &parts[0], threads, path, moved);
    else
        rc = restore_sharded(st, run, r, nchunks, parts, np, threads, path, moved);
    free(parts);
    return rc;
}

/* Removes what a restore killed midway left beside PATH: PATH.keyframe.* (a file, or a sharded
 * keyframe's directory of shard files and their index) and PATH.tmp.* (the one-file copy).
 * Called only by the holder of PATH's follower state, so no restore is under way. */
void sync_keyframe_sweep(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dirname[4096], stem[2][1024];
    if (slash == path)
        snprintf(dirname, sizeof dirname, "/");
    else if (slash)
        snprintf(dirname, sizeof dirname, "%.*s", (int)(slash - path), path);
    else
        snprintf(dirname, sizeof dirname, ".");
    const char *base = slash ? slash + 1 : path;
    snprintf(stem[0], sizeof stem[0], "%s.keyframe.", base);
    snprintf(stem[1], sizeof stem[1], "%s.tmp.", base);
    const char *const stems[2] = { stem[0], stem[1] };
    state_dir_sweep(dirname, stems, 2);   /* a sharded restore's directory goes with its files */
}
