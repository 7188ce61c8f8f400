/* SPDX-License-Identifier: Apache-2.0 */
/* Writing a patch file: header, tensor table, header digest, chunk data; atomically (temporary file + rename). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int fsync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return -1;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0)
        return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

/* Copies runs of the diff's spill file into the output: copy_file_range (one copy inside
 * the kernel, no round trip through a user buffer), or pread + write where the kernel or
 * file system cannot. */
typedef struct spill_copy {
    int spill_fd, out_fd;
    const char *tmp;
    uint64_t run_off, run_len;   /* the pending run of spill bytes */
    int no_cfr;                  /* copy_file_range refused: use the buffer */
    uint8_t *buf;
    size_t buf_cap;
} spill_copy;

static int spill_flush(spill_copy *c)
{
    while (c->run_len) {
        if (!c->no_cfr) {
            loff_t off = (loff_t)c->run_off;
            ssize_t r = copy_file_range(c->spill_fd, &off, c->out_fd, NULL, (size_t)c->run_len, 0);
            if (r > 0) {
                c->run_off += (uint64_t)r;
                c->run_len -= (uint64_t)r;
                continue;
            }
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && (errno == ENOSYS || errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP
                          || errno == EBADF)) {
                c->no_cfr = 1;
                continue;
            }
            if (r == 0)
                return pulse_fail(PULSE_ERR_IO, "reading back coded chunks: spill file too short");
            return pulse_fail_errno(PULSE_ERR_IO, "write %s", c->tmp);
        }
        size_t want = c->run_len < (1u << 20) ? (size_t)c->run_len : (1u << 20);
        if (want > c->buf_cap) {
            uint8_t *q = realloc(c->buf, want);
            if (!q)
                return pulse_fail(PULSE_ERR_NOMEM, "copy buffer of %zu bytes", want);
            c->buf = q;
            c->buf_cap = want;
        }
        ssize_t r = pread(c->spill_fd, c->buf, want, (off_t)c->run_off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return pulse_fail(PULSE_ERR_IO, "reading back coded chunks: spill file too short");
        if (r < 0)
            return pulse_fail_errno(PULSE_ERR_IO, "reading back a coded chunk");
        if (write_all(c->out_fd, c->buf, (size_t)r) != 0)
            return pulse_fail_errno(PULSE_ERR_IO, "write %s", c->tmp);
        c->run_off += (uint64_t)r;
        c->run_len -= (uint64_t)r;
    }
    return 0;
}

int patch_write_file_spill(const char *path, pulse_value_code values, uint32_t chunk_elems,
                     const uint8_t base_id[32], const uint8_t result_id[32],
                     const patch_out_tensor *t, size_t n, int spill_fd)
{
    wbuf w = { 0 };
    uint8_t zero[PATCH_HEADER_BYTES] = { 0 };
    put(&w, zero, PATCH_HEADER_BYTES);   /* filled once the table length is known */
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(t[i].name), dl = strlen(t[i].dtype_name);
        if (nl == 0 || nl > PATCH_MAX_NAME || dl == 0 || dl > PATCH_MAX_DTYPE_NAME) {
            free(w.p);
            return pulse_fail(PULSE_ERR_LIMIT, "tensor %s: name or dtype name too long", t[i].name);
        }
        put_le(&w, nl, 2);
        put(&w, t[i].name, nl);
        put_le(&w, (uint64_t)t[i].dtype, 1);
        put_le(&w, t[i].elem_size, 1);
        put_le(&w, dl, 1);
        put(&w, t[i].dtype_name, dl);
        put_le(&w, (uint64_t)t[i].ndim, 1);
        for (int d = 0; d < t[i].ndim; d++)
            put_le(&w, t[i].shape[d], 8);
        put_le(&w, t[i].changes, 8);
        if (t[i].changes == 0)
            continue;
        for (uint64_t c = 0; c < t[i].nchunks; c++) {
            const patch_out_chunk *oc = &t[i].chunks[c];
            put_le(&w, oc->count, 4);
            if (!oc->count)
                continue;
            put_le(&w, off, 8);
            put_le(&w, oc->pos_len, 4);
            put_le(&w, oc->val_len, 4);
            put(&w, oc->digest, 32);
            off += (uint64_t)oc->pos_len + oc->val_len;
        }
    }
    if (w.oom) {
        free(w.p);
        return pulse_fail(PULSE_ERR_NOMEM, "patch table");
    }
    uint64_t table_len = w.len - PATCH_HEADER_BYTES;
    uint8_t *h = w.p;
    memcpy(h, PATCH_MAGIC, 8);
    for (unsigned i = 0; i < 4; i++) {
        h[8 + i] = (uint8_t)(PULSE_PATCH_VERSION >> (8 * i));
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
    pulse_sha256(w.p, w.len, dg);
    put(&w, dg, 32);
    if (w.oom) {
        free(w.p);
        return pulse_fail(PULSE_ERR_NOMEM, "patch table");
    }

    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) {
        free(w.p);
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = pulse_fail_errno(PULSE_ERR_IO, "cannot create %s", tmp);
        free(tmp);
        free(w.p);
        return e;
    }
    int err = 0;
    spill_copy sc = { .spill_fd = spill_fd, .out_fd = fd, .tmp = tmp };
    if (write_all(fd, w.p, w.len) != 0)
        err = pulse_fail_errno(PULSE_ERR_IO, "write %s", tmp);
    for (size_t i = 0; !err && i < n; i++)
        for (uint64_t c = 0; !err && t[i].changes && c < t[i].nchunks; c++) {
            const patch_out_chunk *oc = &t[i].chunks[c];
            size_t len = (size_t)oc->pos_len + oc->val_len;
            if (!oc->count)
                continue;
            if (!oc->bytes) {
                if (spill_fd < 0)
                    err = pulse_fail(PULSE_ERR_INVALID, "chunk without bytes");
                else if (sc.run_len && oc->spill_off == sc.run_off + sc.run_len)
                    sc.run_len += len;   /* the next bytes of the spill file: one copy for both */
                else if ((err = spill_flush(&sc)) == 0) {
                    sc.run_off = oc->spill_off;
                    sc.run_len = len;
                }
                continue;
            }
            if ((err = spill_flush(&sc)) == 0 && write_all(fd, oc->bytes, len) != 0)
                err = pulse_fail_errno(PULSE_ERR_IO, "write %s", tmp);
        }
    if (!err)
        err = spill_flush(&sc);
    free(sc.buf);
    if (!err && fsync(fd) != 0)
        err = pulse_fail_errno(PULSE_ERR_IO, "fsync %s", tmp);
    if (close(fd) != 0 && !err)
        err = pulse_fail_errno(PULSE_ERR_IO, "close %s", tmp);
    if (!err && rename(tmp, path) != 0)
        err = pulse_fail_errno(PULSE_ERR_IO, "rename to %s", path);
    if (err)
        unlink(tmp);
    else
        fsync_dir_of(path);   /* best effort: the rename is already visible */
    free(tmp);
    free(w.p);
    return err;
}

int patch_write_file(const char *path, pulse_value_code values, uint32_t chunk_elems,
                     const uint8_t base_id[32], const uint8_t result_id[32],
                     const patch_out_tensor *t, size_t n)
{
    return patch_write_file_spill(path, values, chunk_elems, base_id, result_id, t, n, -1);
}
