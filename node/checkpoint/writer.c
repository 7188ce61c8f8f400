/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors writer: new files and copies of a layout under temporary names, published atomically. */
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
#include "node/checkpoint/ckpt_internal.h"
#include "node/checkpoint/filespace.h"

/* Room for the name of path's temporary, PATH.tmp.XXXXXX (made by pulse_create_temp*). */
static char *tmp_name(const char *path, size_t *cap)
{
    *cap = strlen(path) + 32;
    return malloc(*cap);
}

static int write_all(int fd, const void *buf, size_t n, uint64_t off, const char *path)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return pulse_fail_errno(PULSE_ERR_IO, "%s: write", path);
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int ckpt_rename_durable(const char *from, const char *to)
{
    if (rename(from, to) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "rename %s to %s", from, to);
    return pulse_fsync_parent(to);
}

/* Validates the optional metadata text and returns it compact (malloc). */
static int compact_metadata(const char *metadata, char **out)
{
    *out = NULL;
    if (!metadata)
        return 0;
    json_doc d;
    int r = json_parse(&d, metadata, strlen(metadata), "metadata");
    if (r)
        return r;
    const json_node *root = json_at(&d, 0);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (root->type != JSON_OBJECT)
        r = pulse_fail(PULSE_ERR_INVALID, "metadata is not a JSON object");
    if (!r) r = json_append_raw(&buf, &len, &cap, "{", 1);
    for (const json_node *m = json_at(&d, root->first); m && !r; m = json_at(&d, m->next)) {
        if (m->type != JSON_STRING) {
            r = pulse_fail(PULSE_ERR_INVALID, "metadata value of \"%s\" is not a string", json_key(&d, m));
            break;
        }
        if (m != json_at(&d, root->first)) r = json_append_raw(&buf, &len, &cap, ",", 1);
        if (!r) r = json_append_string(&buf, &len, &cap, json_key(&d, m));
        if (!r) r = json_append_raw(&buf, &len, &cap, ":", 1);
        if (!r) r = json_append_string(&buf, &len, &cap, json_str(&d, m));
    }
    if (!r) r = json_append_raw(&buf, &len, &cap, "}", 1);
    json_free(&d);
    if (r) {
        free(buf);
        return r;
    }
    *out = buf;
    return 0;
}

typedef struct layout {
    size_t spec;       /* index into specs */
    unsigned align;    /* element size, a power of two for every dtype we know */
    uint64_t nbytes, begin;
} layout;

static int cmp_layout(const void *a, const void *b)
{
    const layout *x = a, *y = b;
    if (x->align != y->align)
        return x->align > y->align ? -1 : 1;   /* widest first: each tensor lands aligned */
    return x->spec < y->spec ? -1 : x->spec > y->spec;
}

static int cmp_spec_names(const void *a, const void *b)
{
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

/* Checks the specs and places the tensors: widest elements first, contiguous (readers
 * such as Hugging Face's refuse gaps between tensors), so every tensor is aligned to its
 * element size given the 8-byte aligned data start. */
static int plan_layout(const pulse_tensor_spec *specs, size_t n, layout *lay, uint64_t *total)
{
    if (n > PULSE_ST_MAX_TENSORS)
        return pulse_fail(PULSE_ERR_LIMIT, "%zu tensors (limit %u)", n, PULSE_ST_MAX_TENSORS);
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor_spec *s = &specs[i];
        if (!s->name || !s->dtype_name)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %zu: no name or dtype", i);
        if (!strcmp(s->name, "__metadata__"))
            return pulse_fail(PULSE_ERR_INVALID, "a tensor cannot be named __metadata__");
        const dtype_info *info = ckpt_dtype_lookup(s->dtype_name);
        if (!info)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: unknown dtype %s", s->name, s->dtype_name);
        if (s->ndim < 0 || s->ndim > PULSE_MAX_DIMS)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %d dimensions", s->name, s->ndim);
        uint64_t ne = 1;
        for (int k = 0; k < s->ndim; k++) {
            if (s->shape[k] && ne > UINT64_MAX / 64 / s->shape[k])
                return pulse_fail(PULSE_ERR_INVALID, "tensor %s: shape overflows", s->name);
            ne *= s->shape[k];
        }
        lay[i].spec = i;
        lay[i].align = info->bits >= 8 ? info->bits / 8 : 1;
        if (ne * info->bits % 8 != 0)   /* packed sub-byte: Hugging Face's reader wants whole bytes */
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %llu %s elements do not fill whole bytes", s->name,
                              (unsigned long long)ne, info->name);
        lay[i].nbytes = ne * info->bits / 8;
    }
    const char ***names = malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return pulse_fail(PULSE_ERR_NOMEM, "name table");
    for (size_t i = 0; i < n; i++)
        names[i] = (const char **)&specs[i].name;
    qsort(names, n, sizeof *names, cmp_spec_names);
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(*names[i - 1], *names[i])) {
            int r = pulse_fail(PULSE_ERR_INVALID, "tensor %s given twice", *names[i]);
            free(names);
            return r;
        }
    }
    free(names);
    layout *sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted)
        return pulse_fail(PULSE_ERR_NOMEM, "layout");
    memcpy(sorted, lay, n * sizeof *lay);
    qsort(sorted, n, sizeof *sorted, cmp_layout);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (sorted[i].nbytes > UINT64_MAX / 2 - off) {
            free(sorted);
            return pulse_fail(PULSE_ERR_INVALID, "tensors too large");
        }
        lay[sorted[i].spec].begin = off;
        off += sorted[i].nbytes;
    }
    free(sorted);
    *total = off;
    return 0;
}

static int header_json(const pulse_tensor_spec *specs, size_t n, const layout *lay,
                       const char *meta, char **out, size_t *out_len)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int r = json_append_raw(&buf, &len, &cap, "{", 1);
    if (!r && meta) {
        r = json_append_raw(&buf, &len, &cap, "\"__metadata__\":", 15);
        if (!r) r = json_append_raw(&buf, &len, &cap, meta, strlen(meta));
    }
    for (size_t i = 0; i < n && !r; i++) {
        const pulse_tensor_spec *s = &specs[i];
        char num[64];
        if ((i || meta) && (r = json_append_raw(&buf, &len, &cap, ",", 1)))
            break;
        r = json_append_string(&buf, &len, &cap, s->name);
        if (!r) r = json_append_raw(&buf, &len, &cap, ":{\"dtype\":", 10);
        if (!r) r = json_append_string(&buf, &len, &cap, ckpt_dtype_lookup(s->dtype_name)->name);
        if (!r) r = json_append_raw(&buf, &len, &cap, ",\"shape\":[", 10);
        for (int k = 0; k < s->ndim && !r; k++) {
            int m = snprintf(num, sizeof num, "%s%llu", k ? "," : "", (unsigned long long)s->shape[k]);
            r = json_append_raw(&buf, &len, &cap, num, (size_t)m);
        }
        if (!r) {
            int m = snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}",
                             (unsigned long long)lay[i].begin,
                             (unsigned long long)(lay[i].begin + lay[i].nbytes));
            r = json_append_raw(&buf, &len, &cap, num, (size_t)m);
        }
    }
    if (!r) r = json_append_raw(&buf, &len, &cap, "}", 1);
    /* Spaces after the JSON (allowed by the format) put the data start on 8 bytes. */
    while (!r && (8 + len) % 8)
        r = json_append_raw(&buf, &len, &cap, " ", 1);
    if (r) {
        free(buf);
        return r;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

int pulse_ckpt_create(pulse_ckpt **out, const char *path, const pulse_tensor_spec *specs, size_t n,
                      const char *metadata)
{
    if (!out || !path || (n && !specs))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_ckpt_create: bad arguments");
    *out = NULL;
    char *meta = NULL, *header = NULL, *tmp = NULL;
    size_t hlen = 0;
    uint64_t data_len = 0;
    int fd = -1;
    layout *lay = malloc((n ? n : 1) * sizeof *lay);
    if (!lay)
        return pulse_fail(PULSE_ERR_NOMEM, "layout");
    int r = compact_metadata(metadata, &meta);
    if (!r) r = plan_layout(specs, n, lay, &data_len);
    if (!r) r = header_json(specs, n, lay, meta, &header, &hlen);
    if (!r && hlen > PULSE_ST_MAX_HEADER)
        r = pulse_fail(PULSE_ERR_LIMIT, "header of %zu bytes (limit %u)", hlen, PULSE_ST_MAX_HEADER);
    size_t tcap = 0;
    if (!r && !(tmp = tmp_name(path, &tcap)))
        r = pulse_fail(PULSE_ERR_NOMEM, "path");
    if (!r && (fd = pulse_create_temp(path, ".tmp.", 0644, tmp, tcap)) < 0)
        r = fd;
    if (!r) {
        uint8_t len8[8];
        for (int i = 0; i < 8; i++)
            len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        r = write_all(fd, len8, 8, 0, tmp);
        if (!r) r = write_all(fd, header, hlen, 8, tmp);
        /* The data region, zeros, with its disk space reserved: the caller writes it through
         * a shared map, where a full disk would otherwise be a SIGBUS. */
        if (!r)
            r = pulse_file_reserve(fd, 8 + hlen + data_len, tmp);
    }
    if (fd >= 0)
        close(fd);
    if (!r) {
        pulse_ckpt *c;
        r = pulse_ckpt_open(&c, tmp, PULSE_CKPT_WRITE);
        if (!r) {
            c->uncommitted = 1;
            c->final_path = strdup(path);
            if (!c->final_path) {
                pulse_ckpt_close(&c);
                r = pulse_fail(PULSE_ERR_NOMEM, "path");
            }
            *out = c;
        }
    }
    if (r && tmp && fd >= 0)
        unlink(tmp);
    free(lay);
    free(meta);
    free(header);
    free(tmp);
    return r;
}

/* The layout of LIKE, possibly under another dtype (ckpt_internal.h). */
int ckpt_create_shaped_like(pulse_ckpt **out, const char *path, const pulse_ckpt *like,
                            const char *dtype_name, const char *metadata)
{
    size_t n = pulse_ckpt_count(like);
    pulse_tensor_spec *specs = calloc(n ? n : 1, sizeof *specs);
    if (!specs)
        return pulse_fail(PULSE_ERR_NOMEM, "layout of %s", path);
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(like, i);
        specs[i].name = t->name;
        specs[i].dtype_name = dtype_name ? dtype_name : t->dtype_name;
        specs[i].ndim = t->ndim;
        memcpy(specs[i].shape, t->shape, sizeof specs[i].shape);
    }
    int r = pulse_ckpt_create(out, path, specs, n, metadata);
    free(specs);
    return r;
}

/* Copies one mapped file to a new path, into fd when the caller created it already (the kernel
 * copies when it can). */
static int copy_file(const ckpt_file *src, const char *dst, int fd)
{
    if (fd < 0)
        fd = open(dst, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return pulse_fail_errno(PULSE_ERR_IO, "%s", dst);
    int r = 0;
    uint64_t done = 0;
    if (src->fd >= 0) {
        loff_t in = 0, o = 0;
        while (done < src->size) {
            ssize_t k = copy_file_range(src->fd, &in, fd, &o, src->size - done, 0);
            if (k <= 0)
                break;   /* not supported here, or short: fall back to writing from the map */
            done += (uint64_t)k;
        }
    }
    if (done < src->size)
        r = write_all(fd, src->map + done, src->size - done, done, dst);
    if (!r && ftruncate(fd, (off_t)src->size) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "%s: ftruncate", dst);
    close(fd);
    if (r)
        unlink(dst);
    return r;
}

int pulse_ckpt_create_like(pulse_ckpt **out, const char *path, const pulse_ckpt *like)
{
    if (!out || !path || !like || !like->nfiles)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_ckpt_create_like: bad arguments");
    *out = NULL;
    size_t tcap = 0;
    char *tmp = tmp_name(path, &tcap);
    if (!tmp)
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    int r = 0;
    pulse_ckpt *c = NULL;
    if (!like->index_path) {
        int fd = pulse_create_temp(path, ".tmp.", 0644, tmp, tcap);
        r = fd < 0 ? fd : copy_file(&like->files[0], tmp, fd);
        if (!r && (r = pulse_ckpt_open(&c, tmp, PULSE_CKPT_WRITE)))
            unlink(tmp);
        if (!r) {
            c->uncommitted = 1;
            c->final_path = strdup(path);
        }
    } else {
        if ((r = pulse_create_temp_dir(path, ".tmp.", 0755, tmp, tcap)) != 0) {
            free(tmp);
            return r;
        }
        unsigned made = 0;
        for (; made < like->nfiles && !r; made++) {
            char *p = ckpt_join(tmp, like->files[made].name);
            r = p ? copy_file(&like->files[made], p, -1) : pulse_fail(PULSE_ERR_NOMEM, "path");
            free(p);
        }
        char *index = ckpt_join(tmp, like->index_name);
        if (!r && !index)
            r = pulse_fail(PULSE_ERR_NOMEM, "path");
        if (!r) {
            int fd = open(index, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (fd < 0)
                r = pulse_fail_errno(PULSE_ERR_IO, "%s", index);
            else {
                r = write_all(fd, like->index_bytes, like->index_len, 0, index);
                if (!r && fsync(fd) != 0)
                    r = pulse_fail_errno(PULSE_ERR_IO, "%s: fsync", index);
                close(fd);
            }
        }
        if (!r)
            r = pulse_ckpt_open(&c, index, PULSE_CKPT_WRITE);
        if (r) {
            /* Remove what was made; the names are those of LIKE. */
            for (unsigned i = 0; i < made; i++) {
                char *p = ckpt_join(tmp, like->files[i].name);
                if (p) unlink(p);
                free(p);
            }
            if (index) unlink(index);
            rmdir(tmp);
        } else {
            c->uncommitted = 1;
            c->final_path = strdup(path);
            c->tmp_dir = tmp;
            tmp = NULL;
        }
        free(index);
    }
    free(tmp);
    if (!r && !c->final_path) {
        pulse_ckpt_close(&c);
        r = pulse_fail(PULSE_ERR_NOMEM, "path");
    }
    if (!r)
        *out = c;
    return r;
}

int pulse_ckpt_sync(pulse_ckpt *c)
{
    if (!c)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_ckpt_sync: no checkpoint");
    if (!(c->flags & PULSE_CKPT_WRITE))
        return 0;
    for (unsigned i = 0; i < c->nfiles; i++) {
        ckpt_file *f = &c->files[i];
        if (f->mapped && msync(f->map, f->size, MS_SYNC) != 0)
            return pulse_fail_errno(PULSE_ERR_IO, "%s: msync", f->path);
        if (f->fd >= 0 && fsync(f->fd) != 0)
            return pulse_fail_errno(PULSE_ERR_IO, "%s: fsync", f->path);
    }
    return 0;
}

int pulse_ckpt_commit(pulse_ckpt *c)
{
    if (!c || !c->uncommitted)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_ckpt_commit: nothing to commit");
    int r = pulse_ckpt_sync(c);
    if (r)
        return r;
    if (!c->tmp_dir) {
        if (rename(c->files[0].path, c->final_path) != 0)
            return pulse_fail_errno(PULSE_ERR_IO, "rename %s to %s", c->files[0].path, c->final_path);
        free(c->files[0].path);
        c->files[0].path = c->final_path;
        c->final_path = NULL;
        c->uncommitted = 0;
        return pulse_fsync_parent(c->files[0].path);
    }
    if ((r = pulse_fsync_dir(c->tmp_dir)) != 0)
        return r;
    /* rename(2) replaces an empty directory; a non-empty one is an error, never clobbered. */
    if (rename(c->tmp_dir, c->final_path) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "rename %s to %s", c->tmp_dir, c->final_path);
    c->uncommitted = 0;
    for (unsigned i = 0; i < c->nfiles; i++) {
        char *p = ckpt_join(c->final_path, c->files[i].name);
        if (!p)
            return pulse_fail(PULSE_ERR_NOMEM, "path");
        free(c->files[i].path);
        c->files[i].path = p;
    }
    char *p = ckpt_join(c->final_path, c->index_name);
    if (!p)
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    free(c->index_path);
    c->index_path = p;
    free(c->tmp_dir);
    c->tmp_dir = NULL;
    return pulse_fsync_parent(c->final_path);
}
