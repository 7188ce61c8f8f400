/* SPDX-License-Identifier: Apache-2.0 */
/* Writing a patch file: header, tensor table, header digest, chunk data; atomically (temporary file + rename). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/env_bytes.h"
#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/patch/patch_internal.h"

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int oom;
} wbuf;

static void put(wbuf *w, const void *src, size_t n)
{
    if (w->oom)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *q = realloc(w->p, cap);
        if (!q) {
            w->oom = 1;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void put_le(wbuf *w, uint64_t v, unsigned n)
{
    uint8_t b[8];
    for (unsigned i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, n);
}

/* The header, the tensor table and its digest, for chunks whose counts and lengths are final
 * (offsets: the chunks back to back in table order). With `planned` the counts are not known
 * yet: an entry is sized by chunks[c].planned and its fields are placeholders, which gives the
 * table's length (patch_table_len) from this one description of the layout. */
static int build_table(wbuf *w, uint32_t version, pulse_value_code values, uint32_t chunk_elems,
                       const uint8_t base_id[32], const uint8_t result_id[32], const patch_out_tensor *t, size_t n,
                       int planned, const char *metadata, const uint64_t *at, uint64_t *data_len)
{
    size_t k = 0;   /* coded chunks so far: with AT, the k-th lies at at[k] */
    uint8_t zero[PATCH_HEADER_BYTES] = { 0 };
    put(w, zero, PATCH_HEADER_BYTES);   /* filled once the table length is known */
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(t[i].name), dl = strlen(t[i].dtype_name);
        if (nl == 0 || nl > PATCH_MAX_NAME || dl == 0 || dl > PATCH_MAX_DTYPE_NAME)
            return pulse_fail(PULSE_ERR_LIMIT, "tensor %s: name or dtype name too long", t[i].name);
        put_le(w, nl, 2);
        put(w, t[i].name, nl);
        put_le(w, (uint64_t)t[i].dtype, 1);
        put_le(w, t[i].elem_size, 1);
        put_le(w, dl, 1);
        put(w, t[i].dtype_name, dl);
        put_le(w, (uint64_t)t[i].ndim, 1);
        for (int d = 0; d < t[i].ndim; d++)
            put_le(w, t[i].shape[d], 8);
        put_le(w, t[i].changes, 8);
        int any = t[i].changes != 0;
        for (uint64_t c = 0; planned && !any && c < t[i].nchunks; c++)
            any = t[i].chunks[c].planned;
        if (!any)
            continue;
        for (uint64_t c = 0; c < t[i].nchunks; c++) {
            const patch_out_chunk *oc = &t[i].chunks[c];
            put_le(w, oc->count, 4);
            if (planned ? !oc->planned : !oc->count)
                continue;
            put_le(w, at ? at[k++] : off, 8);
            put_le(w, oc->pos_len, 4);
            put_le(w, oc->val_len, 4);
            put(w, oc->digest, 32);
            off += (uint64_t)oc->pos_len + oc->val_len;
        }
    }
    /* The result's __metadata__ (format 4): its length, 0 when the patch does not carry it. */
    size_t ml = metadata ? strlen(metadata) : 0;
    if (ml > PULSE_ST_MAX_HEADER)
        return pulse_fail(PULSE_ERR_LIMIT, "metadata of %zu bytes", ml);
    put_le(w, ml, 4);
    put(w, metadata ? metadata : "", ml);
    if (w->oom)
        return pulse_fail(PULSE_ERR_NOMEM, "patch table");
    uint64_t table_len = w->len - PATCH_HEADER_BYTES;
    uint8_t *h = w->p;
    memcpy(h, PATCH_MAGIC, 8);
    for (unsigned i = 0; i < 4; i++) {
        h[8 + i] = (uint8_t)(version >> (8 * i));
        h[16 + i] = (uint8_t)(chunk_elems >> (8 * i));
        h[20 + i] = (uint8_t)((uint32_t)n >> (8 * i));
    }
    h[12] = (uint8_t)values;
    memcpy(h + 24, base_id, 32);
    memcpy(h + 56, result_id, 32);
    for (unsigned i = 0; i < 8; i++) {
        h[88 + i] = (uint8_t)(table_len >> (8 * i));
        h[96 + i] = (uint8_t)(off >> (8 * i));
    }
    uint8_t dg[32];
    pulse_sha256(w->p, w->len, dg);
    put(w, dg, 32);
    if (w->oom)
        return pulse_fail(PULSE_ERR_NOMEM, "patch table");
    *data_len = off;
    return 0;
}

int patch_table_len(const patch_out_tensor *t, size_t n, int planned, const char *metadata, uint32_t version,
                    uint64_t *len)
{
    static const uint8_t zero_id[32];
    wbuf w = { 0 };
    uint64_t data_len;
    int err = build_table(&w, version ? version : PULSE_PATCH_VERSION, PULSE_VALUES_ULP, 1, zero_id, zero_id, t, n,
                          planned, metadata, NULL, &data_len);
    if (!err)
        *len = w.len - PATCH_HEADER_BYTES - 32;
    free(w.p);
    return err;
}

int patch_head_build(uint32_t version, pulse_value_code values, uint32_t chunk_elems, const uint8_t base_id[32],
                     const uint8_t result_id[32], const patch_out_tensor *t, size_t n, const char *metadata,
                     const uint64_t *at, uint8_t **out, size_t *len)
{
    wbuf w = { 0 };
    uint64_t data_len;
    int err = build_table(&w, version, values, chunk_elems, base_id, result_id, t, n, 0, metadata, at, &data_len);
    if (err) {
        free(w.p);
        return err;
    }
    *out = w.p;
    *len = w.len;
    return 0;
}

/* The flusher: fdatasync whenever flush_step more bytes have been put since the last one. The
 * fd's error is reported to one sync only, so the first failure is kept for the commit. */
static void *flusher_main(void *arg)
{
    patch_file_out *f = arg;
    pthread_mutex_lock(&f->flush_lock);
    for (;;) {
        while (!f->flush_stop && atomic_load(&f->written) < atomic_load(&f->flush_next))
            pthread_cond_wait(&f->flush_wake, &f->flush_lock);
        if (f->flush_stop || f->flush_errno)
            break;
        atomic_store(&f->flush_next, atomic_load(&f->written) + f->flush_step);
        pthread_mutex_unlock(&f->flush_lock);
        int e = fdatasync(f->fd) != 0 ? errno : 0;
        pthread_mutex_lock(&f->flush_lock);
        if (e && !f->flush_errno)
            f->flush_errno = e;
    }
    pthread_mutex_unlock(&f->flush_lock);
    return NULL;
}

/* Ends the flusher (after its sync in progress) and returns its first failure, 0 if none. */
static int flusher_end(patch_file_out *f)
{
    if (!f->flusher_on)
        return 0;
    pthread_mutex_lock(&f->flush_lock);
    f->flush_stop = 1;
    pthread_cond_signal(&f->flush_wake);
    pthread_mutex_unlock(&f->flush_lock);
    pthread_join(f->flusher, NULL);
    pthread_cond_destroy(&f->flush_wake);
    pthread_mutex_destroy(&f->flush_lock);
    f->flusher_on = 0;
    return f->flush_errno;
}

int patch_file_create(patch_file_out *f, const char *path, uint64_t table_len, int durable)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = path;
    f->durable = durable;
    f->data_start = PATCH_HEADER_BYTES + table_len + 32;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))   /* the rename would fail after all the work */
        return pulse_fail(PULSE_ERR_IO, "%s is a directory", path);
    size_t tl = strlen(path) + 32;
    if (!(f->tmp = malloc(tl)))
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    if ((f->fd = pulse_create_temp(path, ".tmp.", 0644, f->tmp, tl)) < 0) {
        int e = f->fd;
        f->fd = -1;
        free(f->tmp);
        f->tmp = NULL;
        return e;
    }
    /* A scratch file (a publisher's patch before its upload) is written over the last one,
     * moved to the temporary's fresh name: its pages are in the page cache already, and writing
     * over them costs a copy, where new pages cost ~15x that (allocation and the file system's
     * block reservation). The commit cuts it to its size. */
    int old;
    if (!durable && (old = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
        struct stat os;
        if (fstat(old, &os) == 0 && S_ISREG(os.st_mode) && rename(path, f->tmp) == 0) {
            close(f->fd);
            f->fd = old;
        } else {
            close(old);
        }
    }
    /* No flusher is no error: the final fsync then does all of it. */
    f->flush_step = durable ? pulse_env_bytes("PULSE_PATCH_FLUSH", PATCH_FLUSH_STEP, PATCH_FLUSH_STEP) : 0;
    atomic_store(&f->flush_next, f->flush_step);
    if (f->flush_step && pthread_mutex_init(&f->flush_lock, NULL) == 0) {
        if (pthread_cond_init(&f->flush_wake, NULL) != 0)
            pthread_mutex_destroy(&f->flush_lock);
        else if (pthread_create(&f->flusher, NULL, flusher_main, f) != 0) {
            pthread_cond_destroy(&f->flush_wake);
            pthread_mutex_destroy(&f->flush_lock);
        } else
            f->flusher_on = 1;
    }
    return 0;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            return -1;
        }
        p += r;
        off += (uint64_t)r;
        n -= (size_t)r;
    }
    return 0;
}

int patch_file_put(patch_file_out *f, uint64_t data_off, const uint8_t *p, size_t len)
{
    if (pwrite_all(f->fd, p, len, f->data_start + data_off) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "write %s", f->tmp);
    uint64_t now = atomic_fetch_add(&f->written, len) + len;
    if (f->flusher_on && now >= atomic_load(&f->flush_next)) {
        pthread_mutex_lock(&f->flush_lock);
        pthread_cond_signal(&f->flush_wake);
        pthread_mutex_unlock(&f->flush_lock);
    }
    return 0;
}

void patch_file_abort(patch_file_out *f)
{
    flusher_end(f);
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    free(f->tmp);
    f->fd = -1;
    f->tmp = NULL;
}

int patch_file_commit(patch_file_out *f, pulse_value_code values, uint32_t chunk_elems,
                      const uint8_t base_id[32], const uint8_t result_id[32], const patch_out_tensor *t,
                      size_t n, const char *metadata)
{
    wbuf w = { 0 };
    uint64_t data_len = 0;
    int err = build_table(&w, f->version ? f->version : PULSE_PATCH_VERSION, values, chunk_elems, base_id, result_id,
                          t, n, 0, metadata, NULL, &data_len);
    /* The chunk bytes were placed after a table of the planned length; a chunk that turned out
     * unchanged (or changed) against the plan means the inputs changed under the diff. */
    if (!err && (w.len != f->data_start || data_len != atomic_load(&f->written)))
        err = pulse_fail(PULSE_ERR_IO, "the checkpoints changed while the patch was being written");
    if (!err && pwrite_all(f->fd, w.p, w.len, 0) != 0)
        err = pulse_fail_errno(PULSE_ERR_IO, "write %s", f->tmp);
    if (!err && ftruncate(f->fd, (off_t)(f->data_start + data_len)) != 0)   /* a scratch file written over */
        err = pulse_fail_errno(PULSE_ERR_IO, "truncate %s", f->tmp);
    free(w.p);
    int flush_errno = flusher_end(f);
    if (!err && flush_errno) {
        errno = flush_errno;
        err = pulse_fail_errno(PULSE_ERR_IO, "fsync %s", f->tmp);
    }
    if (!err && f->durable && fsync(f->fd) != 0)
        err = pulse_fail_errno(PULSE_ERR_IO, "fsync %s", f->tmp);
    if (close(f->fd) != 0 && !err)
        err = pulse_fail_errno(PULSE_ERR_IO, "close %s", f->tmp);
    f->fd = -1;
    if (!err && rename(f->tmp, f->path) != 0)
        err = pulse_fail_errno(PULSE_ERR_IO, "rename to %s", f->path);
    if (!err) {
        free(f->tmp);
        f->tmp = NULL;
        if (f->durable)
            (void)pulse_fsync_parent(f->path);   /* best effort: the rename is already visible */
    }
    patch_file_abort(f);
    return err;
}

int patch_write_file(const char *path, pulse_value_code values, uint32_t chunk_elems,
                     const uint8_t base_id[32], const uint8_t result_id[32],
                     const patch_out_tensor *t, size_t n)
{
    return patch_write_file_meta(path, values, chunk_elems, base_id, result_id, t, n, NULL);
}

int patch_write_file_meta(const char *path, pulse_value_code values, uint32_t chunk_elems,
                          const uint8_t base_id[32], const uint8_t result_id[32],
                          const patch_out_tensor *t, size_t n, const char *metadata)
{
    patch_file_out f;
    uint64_t table_len = 0;
    int err = patch_table_len(t, n, 0, metadata, 0, &table_len);
    if (err || (err = patch_file_create(&f, path, table_len, 1)) != 0)
        return err;
    uint64_t off = 0;
    for (size_t i = 0; !err && i < n; i++)
        for (uint64_t c = 0; !err && t[i].changes && c < t[i].nchunks; c++) {
            const patch_out_chunk *oc = &t[i].chunks[c];
            size_t len = (size_t)oc->pos_len + oc->val_len;
            if (!oc->count)
                continue;
            if (!oc->bytes)
                err = pulse_fail(PULSE_ERR_INVALID, "chunk without bytes");
            else
                err = patch_file_put(&f, off, oc->bytes, len);
            off += len;
        }
    if (err) {
        patch_file_abort(&f);
        return err;
    }
    return patch_file_commit(&f, values, chunk_elems, base_id, result_id, t, n, metadata);
}

void patch_out_free(patch_out_tensor *t, size_t n)
{
    if (!t)
        return;
    for (size_t i = 0; i < n; i++) {
        for (uint64_t c = 0; t[i].chunks && c < t[i].nchunks; c++)
            free(t[i].chunks[c].bytes);
        free(t[i].chunks);
    }
    free(t);
}
