/* SPDX-License-Identifier: Apache-2.0 */
/* Writing a checkpoint's __metadata__ into its open file: the header in place when it fits, else the file rewritten whole. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"

/* A header that has to grow is given this much room beyond what it needs, and the data area then
 * starts on a 4 KiB boundary (which keeps every tensor's alignment): the next few metadata
 * changes of a run (a step number, a note) are written in place. */
#define META_SLACK 1024u
#define META_ALIGN 4096u

int ckpt_metadata_check(const char *text, size_t len, const char *what)
{
    json_doc d = { 0 };
    int r = json_parse(&d, text, len, what);
    if (r)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: %s", what, pulse_last_error());
    char *canon = NULL;
    if (json_at(&d, 0)->type != JSON_OBJECT)
        r = pulse_fail(PULSE_ERR_FORMAT, "%s: metadata is not a JSON object", what);
    else if (!(r = ckpt_metadata_text(&d, json_at(&d, 0), what, &canon))
             && (strlen(canon) != len || memcmp(canon, text, len) != 0))
        r = pulse_fail(PULSE_ERR_FORMAT, "%s: metadata is not in compact form", what);
    free(canon);
    json_free(&d);
    return r;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The header of file FI of C with TEXT as its metadata: the tensors at their current offsets. */
static int build_header(const pulse_ckpt *c, unsigned fi, const uint8_t *data, const char *text, char **out,
                        size_t *len)
{
    char *b = NULL;
    size_t n = 0, cap = 0;
    int r = json_append_raw(&b, &n, &cap, "{\"__metadata__\":", 16);
    if (!r) r = json_append_raw(&b, &n, &cap, text, strlen(text));
    char num[64];
    for (size_t i = 0; i < c->n && !r; i++) {
        const pulse_tensor *t = &c->t[i];
        if (t->file != fi)
            continue;
        r = json_append_raw(&b, &n, &cap, ",", 1);
        if (!r) r = json_append_string(&b, &n, &cap, t->name);
        if (!r) r = json_append_raw(&b, &n, &cap, ":{\"dtype\":", 10);
        if (!r) r = json_append_string(&b, &n, &cap, t->dtype_name);
        if (!r) r = json_append_raw(&b, &n, &cap, ",\"shape\":[", 10);
        for (int d = 0; d < t->ndim && !r; d++) {
            int k = snprintf(num, sizeof num, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
            r = json_append_raw(&b, &n, &cap, num, (size_t)k);
        }
        uint64_t begin = (uint64_t)(t->data - data);
        int k = snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin,
                         (unsigned long long)(begin + t->nbytes));
        if (!r) r = json_append_raw(&b, &n, &cap, num, (size_t)k);
    }
    if (!r) r = json_append_raw(&b, &n, &cap, "}", 1);
    if (r) {
        free(b);
        return r;
    }
    *out = b;
    *len = n;
    return 0;
}

static int write_all(int fd, const void *buf, size_t n, off_t off)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n > (1u << 30) ? (1u << 30) : n, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}

/* The whole file again with a larger header: written beside it, then renamed over it; C then maps
 * the new file (the tensors' pointers move with it). */
static int rewrite_file(pulse_ckpt *c, unsigned fi, const char *hdr, size_t hlen)
{
    ckpt_file *f = &c->files[fi];
    uint64_t old_hlen = le64(f->map);
    const uint8_t *old_data = f->map + 8 + old_hlen;
    size_t data_len = f->size - 8 - (size_t)old_hlen;
    size_t padded = ((8 + hlen + META_SLACK + META_ALIGN - 1) / META_ALIGN) * META_ALIGN - 8;
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "%s", f->path);
    char tmp[4096];
    int fd = pulse_create_temp(f->path, ".meta.", 0600, tmp, sizeof tmp);
    if (fd < 0)
        return fd;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    char *h = malloc(padded);
    int r = h ? 0 : pulse_fail(PULSE_ERR_NOMEM, "header of %zu bytes", padded);
    if (!r) {
        memcpy(h, hdr, hlen);
        memset(h + hlen, ' ', padded - hlen);
        /* The data area read through the mapping: what was just written to it is there. */
        if (fchmod(fd, st.st_mode & 07777) != 0 || write_all(fd, len8, 8, 0) != 0
            || write_all(fd, h, padded, 8) != 0 || write_all(fd, old_data, data_len, (off_t)(8 + padded)) != 0
            || fsync(fd) != 0)
            r = pulse_fail_errno(PULSE_ERR_IO, "%s", tmp);
    }
    free(h);
    size_t size = 8 + padded + data_len;
    void *m = MAP_FAILED;
    if (!r && (m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        r = pulse_fail_errno(PULSE_ERR_IO, "%s: mmap", tmp);
    if (!r)
        r = ckpt_rename_durable(tmp, f->path);
    if (r) {
        if (m != MAP_FAILED)
            munmap(m, size);
        close(fd);
        unlink(tmp);
        return r;
    }
    uint8_t *new_data = (uint8_t *)m + 8 + padded;
    for (size_t i = 0; i < c->n; i++)
        if (c->t[i].file == fi)
            c->t[i].data = new_data + (c->t[i].data - old_data);
    munmap(f->map, f->size);
    close(f->fd);
    f->map = m;
    f->size = size;
    f->fd = fd;
    return 0;
}

int ckpt_set_metadata(pulse_ckpt *c, const char *text)
{
    if (!(c->flags & PULSE_CKPT_WRITE))
        return pulse_fail(PULSE_ERR_INVALID, "metadata: the checkpoint was not opened writable");
    if (c->metadata && !strcmp(c->metadata, text))
        return 0;
    char *copy = strdup(text);
    if (!copy)
        return pulse_fail(PULSE_ERR_NOMEM, "metadata");
    int r = 0;
    /* Hugging Face's sharded form keeps it in the first shard (bytewise name order), which is
     * where the reader takes it from. */
    ckpt_file *f = c->nfiles ? &c->files[0] : NULL;
    if (f && f->mapped && f->fd >= 0) {
        uint64_t old_hlen = le64(f->map);
        char *hdr = NULL;
        size_t hlen = 0;
        r = build_header(c, 0, f->map + 8 + old_hlen, text, &hdr, &hlen);
        if (!r && hlen <= old_hlen) {
            /* Same data offset: trailing spaces are part of a valid header. */
            memcpy(f->map + 8, hdr, hlen);
            memset(f->map + 8 + hlen, ' ', (size_t)old_hlen - hlen);
        } else if (!r) {
            r = rewrite_file(c, 0, hdr, hlen);
        }
        free(hdr);
    }
    if (r) {
        free(copy);
        return r;
    }
    free(c->metadata);
    c->metadata = copy;
    return 0;
}
