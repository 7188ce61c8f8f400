/* SPDX-License-Identifier: Apache-2.0 */
/* Opening a patch: every header field, count, offset and length is checked before anything is allocated from it. */
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/patch/patch_internal.h"
#include "node/patch/patch_take.h"

/* A bounds-checked little-endian reader over the table. */
typedef struct rd {
    const uint8_t *p;
    size_t left;
    int bad;
} rd;

static const uint8_t *rd_take(rd *r, size_t n)
{
    if (r->bad || n > r->left) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *q = r->p;
    r->p += n;
    r->left -= n;
    return q;
}

static uint64_t rd_le(rd *r, unsigned n)
{
    const uint8_t *q = rd_take(r, n);
    uint64_t v = 0;
    for (unsigned i = 0; q && i < n; i++)
        v |= (uint64_t)q[i] << (8 * i);
    return v;
}

static uint64_t le(const uint8_t *q, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)q[i] << (8 * i);
    return v;
}

static int dtype_from_code(unsigned code, pulse_dtype *dt)
{
    if (code > PULSE_DT_F8_E5M2)
        return -1;
    *dt = (pulse_dtype)code;
    return 0;
}

/* One pass over the table. With p->tensors == NULL it only validates and counts tensors'
 * coded chunks into *ncoded; otherwise it fills tensors and chunks. */
static int parse_table(pulse_patch *p, const uint8_t *table, size_t table_len, size_t ntensors,
                       size_t *ncoded)
{
    rd r = { table, table_len, 0 };
    size_t coded = 0;
    uint64_t expect_off = 0;   /* where the next chunk starts while they are in table order */
    uint64_t total = 0;        /* coded bytes of all chunks */
    int in_order = 1;
    const int fill = p->tensors != NULL;
    char prev_name[PATCH_MAX_NAME + 1] = "";
    for (size_t i = 0; i < ntensors; i++) {
        size_t start_left = r.left;
        unsigned name_len = (unsigned)rd_le(&r, 2);
        const uint8_t *name = rd_take(&r, name_len);
        unsigned dcode = (unsigned)rd_le(&r, 1);
        unsigned elem_size = (unsigned)rd_le(&r, 1);
        unsigned dn_len = (unsigned)rd_le(&r, 1);
        const uint8_t *dname = rd_take(&r, dn_len);
        unsigned ndim = (unsigned)rd_le(&r, 1);
        if (r.bad)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor table truncated at tensor %zu", i);
        if (name_len == 0 || name_len > PATCH_MAX_NAME || memchr(name, 0, name_len))
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %zu: bad name length %u", i, name_len);
        char nm[PATCH_MAX_NAME + 1];
        memcpy(nm, name, name_len);
        nm[name_len] = 0;
        /* Canonical order (bytewise, strictly ascending) makes names unique. */
        if (i > 0 && strcmp(prev_name, nm) >= 0)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: names not in ascending order", nm);
        memcpy(prev_name, nm, name_len + 1);
        pulse_dtype dt;
        if (dtype_from_code(dcode, &dt) != 0)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: unknown dtype code %u", nm, dcode);
        if (dn_len == 0 || dn_len > PATCH_MAX_DTYPE_NAME || memchr(dname, 0, dn_len))
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: bad dtype name", nm);
        char dn[PATCH_MAX_DTYPE_NAME + 1];
        memcpy(dn, dname, dn_len);
        dn[dn_len] = 0;
        unsigned unit = patch_dtype_unit(dt);
        if (unit ? elem_size != unit : (elem_size < 1 || elem_size > 8))
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: element size %u does not fit its dtype",
                              nm, elem_size);
        if (ndim > PULSE_MAX_DIMS)
            return pulse_fail(PULSE_ERR_LIMIT, "tensor %s: %u dimensions", nm, ndim);
        uint64_t shape[PULSE_MAX_DIMS] = { 0 };
        uint64_t nelems = 1;
        for (unsigned d = 0; d < ndim; d++) {
            shape[d] = rd_le(&r, 8);
            if (shape[d] && nelems > (UINT64_MAX >> 8) / shape[d])
                return pulse_fail(PULSE_ERR_LIMIT, "tensor %s: shape too large", nm);
            nelems *= shape[d];
        }
        uint64_t changes = rd_le(&r, 8);
        if (r.bad)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: table truncated", nm);
        if (nelems > (UINT64_MAX >> 8) / elem_size)
            return pulse_fail(PULSE_ERR_LIMIT, "tensor %s: size too large", nm);
        uint64_t units = unit ? nelems : nelems * elem_size;
        /* A packed sub-byte dtype (F4, F6_*) holds nelems x bits / 8 bytes, as the checkpoint
         * does: its OPAQUE units are those bytes, not nelems x elem_size. */
        const dtype_info *packed = unit ? NULL : ckpt_dtype_lookup(dn);
        if (packed && packed->bits < 8) {
            if (elem_size != 1 || nelems * packed->bits % 8 != 0)
                return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: %llu %s elements do not fill whole bytes", nm,
                                  (unsigned long long)nelems, packed->name);
            units = nelems * packed->bits / 8;
        }
        if (changes > units)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: %llu changes in %llu elements", nm,
                              (unsigned long long)changes, (unsigned long long)units);
        uint64_t nchunks = (units + p->chunk_elems - 1) / p->chunk_elems;
        size_t first = coded;
        uint64_t sum = 0;
        if (changes > 0) {
            /* Every chunk has at least a 4-byte entry: bound the count by the table. */
            if (nchunks > r.left / 4)
                return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: chunk table truncated", nm);
            for (uint64_t c = 0; c < nchunks; c++) {
                uint32_t count = (uint32_t)rd_le(&r, 4);
                if (r.bad)
                    return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: chunk table truncated", nm);
                if (count == 0)
                    continue;
                uint64_t first_unit = c * p->chunk_elems;
                uint32_t len = (uint32_t)(units - first_unit < p->chunk_elems
                                          ? units - first_unit : p->chunk_elems);
                uint64_t off = rd_le(&r, 8);
                uint32_t pos_len = (uint32_t)rd_le(&r, 4);
                uint32_t val_len = (uint32_t)rd_le(&r, 4);
                const uint8_t *dg = rd_take(&r, 32);
                if (r.bad)
                    return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: table truncated", nm,
                                      (unsigned long long)c);
                if (count > len)
                    return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %u changes in %u elements",
                                      nm, (unsigned long long)c, count, len);
                /* Each chunk inside the data; that they are disjoint and cover it is checked
                 * once every chunk is known (check_cover), here only while in table order. */
                uint64_t clen = (uint64_t)pos_len + val_len;
                if (clen == 0 || off > p->data_len || clen > p->data_len - off)
                    return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %llu bytes at %llu, past the data end",
                                      nm, (unsigned long long)c, (unsigned long long)clen, (unsigned long long)off);
                in_order &= off == expect_off;
                expect_off = off + clen;
                total += clen;
                sum += count;
                if (fill) {
                    patch_chunk *pc = &p->chunks[coded];
                    pc->tensor = i;
                    pc->index = c;
                    pc->first = first_unit;
                    pc->len = len;
                    pc->count = count;
                    pc->offset = off;
                    pc->pos_len = pos_len;
                    pc->val_len = val_len;
                    pc->digest = dg;
                }
                coded++;
            }
            if (sum != changes)
                return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: chunks hold %llu changes, header says %llu",
                                  nm, (unsigned long long)sum, (unsigned long long)changes);
        }
        if (fill) {
            patch_tensor *t = &p->tensors[i];
            t->name = malloc(name_len + 1);
            if (!t->name)
                return pulse_fail(PULSE_ERR_NOMEM, "tensor name");
            memcpy(t->name, nm, name_len + 1);
            memcpy(t->dtype_name, dname, dn_len);
            t->dtype_name[dn_len] = 0;
            t->dtype = dt;
            t->elem_size = elem_size;
            t->ndim = (int)ndim;
            memcpy(t->shape, shape, sizeof shape);
            t->nelems = nelems;
            t->unit = unit ? unit : 1;
            t->units = units;
            t->nchunks = nchunks;
            t->changes = changes;
            t->first_coded = first;
            t->ncoded = coded - first;
            t->table_bytes = start_left - r.left;
        }
    }
    if (p->version >= 4) {
        /* The result's __metadata__: covered by the header digest like the rest of the table. */
        uint32_t ml = (uint32_t)rd_le(&r, 4);
        if (r.bad)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor table truncated before the metadata");
        if (ml > PULSE_ST_MAX_HEADER)
            return pulse_fail(PULSE_ERR_LIMIT, "metadata of %u bytes", ml);
        const uint8_t *m = rd_take(&r, ml);
        if (r.bad)
            return pulse_fail(PULSE_ERR_FORMAT, "metadata truncated (%u bytes declared)", ml);
        int err;
        if (ml && !fill && (err = ckpt_metadata_check((const char *)m, ml, "patch metadata")) != 0)
            return err;
        if (ml && fill) {
            if (!(p->metadata = malloc((size_t)ml + 1)))
                return pulse_fail(PULSE_ERR_NOMEM, "metadata");
            memcpy(p->metadata, m, ml);
            p->metadata[ml] = 0;
        }
    }
    if (r.left != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "%zu stray bytes after the tensor table", r.left);
    /* Disjoint chunks inside the data cover it exactly when their lengths add up to it. */
    if (total < p->data_len)
        return pulse_fail(PULSE_ERR_FORMAT, "%llu data bytes not referenced by any chunk",
                          (unsigned long long)(p->data_len - total));
    if (total > p->data_len)
        return pulse_fail(PULSE_ERR_FORMAT, "chunks of %llu bytes in all overlap in a %llu-byte data section",
                          (unsigned long long)total, (unsigned long long)p->data_len);
    p->in_table_order = in_order;
    *ncoded = coded;
    return 0;
}

typedef struct chunk_key {
    uint64_t offset;
    size_t k;
} chunk_key;

static int by_offset_cmp(const void *a, const void *b)
{
    const chunk_key *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Chunks out of table order (a writer that merged parts' heads): sorted by offset, each must start
 * where the one before it ends, so that they are disjoint and, their lengths adding up to the data
 * section (parse_table), cover it. Keeps the order in p->by_offset. */
static int check_cover(pulse_patch *p)
{
    if (p->in_table_order || !p->nchunks)
        return 0;
    chunk_key *key = malloc(p->nchunks * sizeof *key);
    p->by_offset = malloc(p->nchunks * sizeof *p->by_offset);
    if (!key || !p->by_offset) {
        free(key);
        return pulse_fail(PULSE_ERR_NOMEM, "chunk order (%zu chunks)", p->nchunks);
    }
    for (size_t k = 0; k < p->nchunks; k++)
        key[k] = (chunk_key){ p->chunks[k].offset, k };
    qsort(key, p->nchunks, sizeof *key, by_offset_cmp);
    uint64_t end = 0;
    for (size_t i = 0; i < p->nchunks; i++) {
        const patch_chunk *c = &p->chunks[key[i].k];
        if (c->offset != end) {
            int err = pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: offset %llu, %s at %llu",
                                 p->tensors[c->tensor].name, (unsigned long long)c->index,
                                 (unsigned long long)c->offset, c->offset < end ? "overlapping the chunk that ends"
                                 : "after a hole that starts", (unsigned long long)end);
            free(key);
            return err;
        }
        end += patch_chunk_coded(c);
        p->by_offset[i] = key[i].k;
    }
    free(key);
    return 0;
}

/* Frees a patch's buf: malloc'd, or a read-only mapping of `mapped` bytes. */
static void buf_release(uint8_t *buf, size_t mapped)
{
    if (mapped)
        munmap(buf, mapped);
    else
        free(buf);
}

/* Takes ownership of buf (malloc'd, buf_len bytes, or a mapping of `mapped` bytes) and of fd
 * (-1 for a patch in memory). len is the patch's total length. In memory, buf is the whole
 * patch (buf_len == len); from a file, buf holds the fixed header, table and header digest
 * when the declared table fits the file (else just the fixed header, which the size check
 * below then refuses), and the chunk data stays in the file, read chunk by chunk
 * (patch_chunk_bytes). */
static int open_owned(pulse_patch **out, uint8_t *buf, size_t buf_len, size_t len, int fd, size_t mapped)
{
    *out = NULL;
    pulse_patch *p = calloc(1, sizeof *p);
    if (!p) {
        buf_release(buf, mapped);
        if (fd >= 0)
            close(fd);
        return pulse_fail(PULSE_ERR_NOMEM, "patch");
    }
    p->buf = buf;
    p->mapped = mapped;
    p->len = len;
    p->fd = fd;
    int err;
    if (len < 8 || memcmp(buf, PATCH_MAGIC, 8) != 0) {
        err = pulse_fail(PULSE_ERR_FORMAT, "not a pulse patch (bad magic)");
        goto fail;
    }
    if (len < PATCH_HEADER_BYTES) {
        err = pulse_fail(PULSE_ERR_FORMAT, "header truncated (%zu bytes)", len);
        goto fail;
    }
    uint32_t version = (uint32_t)le(buf + 8, 4);
    if (version == PATCH_VERSION_BY_DIRECTION) {
        err = pulse_fail(PULSE_ERR_UNSUPPORTED, "format 6 (patches by direction) is no longer read; diff the "
                         "checkpoints again with --context (format 5)");
        goto fail;
    }
    if (version < 2 || version > PULSE_PATCH_VERSION_CONTEXT) {
        err = pulse_fail(PULSE_ERR_UNSUPPORTED, "patch format version %u (this build reads 2 to %u)",
                         version, PULSE_PATCH_VERSION_CONTEXT);
        goto fail;
    }
    p->version = version;
    unsigned code = buf[12];
    uint32_t chunk = (uint32_t)le(buf + 16, 4);
    uint32_t ntensors = (uint32_t)le(buf + 20, 4);
    uint64_t table_len = le(buf + 88, 8);
    uint64_t data_len = le(buf + 96, 8);
    if (buf[13] || buf[14] || buf[15]) {
        err = pulse_fail(PULSE_ERR_FORMAT, "reserved header bytes are not zero");
        goto fail;
    }
    if (code > PULSE_VALUES_ULP) {
        err = pulse_fail(PULSE_ERR_FORMAT, "unknown value code %u", code);
        goto fail;
    }
    if (chunk == 0 || chunk > PULSE_PATCH_MAX_CHUNK) {
        err = pulse_fail(PULSE_ERR_LIMIT, "chunk size %u elements", chunk);
        goto fail;
    }
    if (ntensors > PULSE_ST_MAX_TENSORS) {
        err = pulse_fail(PULSE_ERR_LIMIT, "%u tensors", ntensors);
        goto fail;
    }
    if (table_len > PATCH_MAX_TABLE || data_len > PULSE_PATCH_MAX_BYTES
        || PATCH_HEADER_BYTES + table_len + PATCH_DIGEST_BYTES + data_len != len) {
        err = pulse_fail(PULSE_ERR_FORMAT, "declared sizes (table %llu, data %llu) do not match the %zu-byte patch",
                         (unsigned long long)table_len, (unsigned long long)data_len, len);
        goto fail;
    }
    if (buf_len < PATCH_HEADER_BYTES + table_len + PATCH_DIGEST_BYTES) {
        err = pulse_fail(PULSE_ERR_FORMAT, "header truncated");
        goto fail;
    }
    uint8_t dg[32];
    pulse_sha256(buf, PATCH_HEADER_BYTES + table_len, dg);
    if (memcmp(dg, buf + PATCH_HEADER_BYTES + table_len, 32) != 0) {
        err = pulse_fail(PULSE_ERR_CORRUPT, "header digest mismatch");
        goto fail;
    }
    /* Smallest tensor entry: name length 2 + name 1 + dtype 1 + size 1 + name length 1
     * + dtype name 1 + ndim 1 + changes 8. */
    if (ntensors > table_len / 16) {
        err = pulse_fail(PULSE_ERR_FORMAT, "%u tensors cannot fit a %llu-byte table", ntensors,
                         (unsigned long long)table_len);
        goto fail;
    }
    p->values = (pulse_value_code)code;
    p->chunk_elems = chunk;
    memcpy(p->base_id, buf + 24, 32);
    memcpy(p->result_id, buf + 56, 32);
    p->data_off = PATCH_HEADER_BYTES + table_len + PATCH_DIGEST_BYTES;
    p->data = fd >= 0 ? NULL : buf + p->data_off;
    p->data_len = data_len;
    p->header_bytes = PATCH_HEADER_BYTES + table_len + PATCH_DIGEST_BYTES;
    size_t ncoded = 0;
    const uint8_t *table = buf + PATCH_HEADER_BYTES;
    if ((err = parse_table(p, table, (size_t)table_len, ntensors, &ncoded)) != 0)
        goto fail;
    p->tensors = calloc(ntensors ? ntensors : 1, sizeof *p->tensors);
    p->chunks = calloc(ncoded ? ncoded : 1, sizeof *p->chunks);
    if (!p->tensors || !p->chunks) {
        err = pulse_fail(PULSE_ERR_NOMEM, "patch tables");
        goto fail;
    }
    p->ntensors = ntensors;
    p->nchunks = ncoded;
    if ((err = parse_table(p, table, (size_t)table_len, ntensors, &ncoded)) != 0 || (err = check_cover(p)) != 0)
        goto fail;
    /* No valid chunk is larger than the coder's output buffer for a full chunk: refusing
     * larger ones here bounds the per-worker copy of a chunk read from the file. */
    size_t bound = patch_chunk_bytes_bound(p->chunk_elems);
    for (size_t i = 0; i < p->nchunks; i++) {
        const patch_chunk *c = &p->chunks[i];
        size_t n = patch_chunk_coded(c);
        if (n > bound) {
            err = pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %zu coded bytes, more than any valid chunk",
                             p->tensors[c->tensor].name, (unsigned long long)c->index, n);
            goto fail;
        }
        if (n > p->max_chunk_bytes)
            p->max_chunk_bytes = n;
    }
    *out = p;
    return 0;
fail:
    pulse_patch_close(&p);
    return err;
}

int pulse_patch_open_mem(pulse_patch **out, const void *buf, size_t len)
{
    if (!out || (!buf && len))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_open_mem: NULL argument");
    *out = NULL;
    if (len > PULSE_PATCH_MAX_BYTES)
        return pulse_fail(PULSE_ERR_LIMIT, "patch of %zu bytes", len);
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return pulse_fail(PULSE_ERR_NOMEM, "patch of %zu bytes", len);
    if (len)
        memcpy(copy, buf, len);
    return patch_open_mem_take(out, copy, len);
}

int patch_open_mem_take(pulse_patch **out, void *buf, size_t len)
{
    if (!out || (!buf && len)) {
        free(buf);
        return pulse_fail(PULSE_ERR_INVALID, "patch_open_mem_take: NULL argument");
    }
    *out = NULL;
    if (len > PULSE_PATCH_MAX_BYTES) {
        free(buf);
        return pulse_fail(PULSE_ERR_LIMIT, "patch of %zu bytes", len);
    }
    if (!buf && !(buf = malloc(1)))   /* an empty object: refused below as a patch */
        return pulse_fail(PULSE_ERR_NOMEM, "patch of 0 bytes");
    return open_owned(out, buf, len, len, -1, 0);
}

int patch_open_map_take(pulse_patch **out, void *map, size_t len)
{
    if (!out || !map || !len) {
        if (map && len)
            munmap(map, len);
        return pulse_fail(PULSE_ERR_INVALID, "patch_open_map_take: no mapping");
    }
    *out = NULL;
    if (len > PULSE_PATCH_MAX_BYTES) {
        munmap(map, len);
        return pulse_fail(PULSE_ERR_LIMIT, "patch of %zu bytes", len);
    }
    return open_owned(out, map, len, len, -1, len);
}

int pulse_patch_open_head(pulse_patch **out, const void *head, size_t head_len, uint64_t patch_bytes)
{
    if (!out || !head)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_open_head: NULL argument");
    *out = NULL;
    if (patch_bytes > PULSE_PATCH_MAX_BYTES || head_len > patch_bytes)
        return pulse_fail(PULSE_ERR_LIMIT, "patch head of %zu bytes for a %llu-byte patch", head_len,
                          (unsigned long long)patch_bytes);
    uint8_t *copy = malloc(head_len ? head_len : 1);
    if (!copy)
        return pulse_fail(PULSE_ERR_NOMEM, "patch head of %zu bytes", head_len);
    memcpy(copy, head, head_len);
    pulse_patch *p = NULL;
    int err = open_owned(&p, copy, head_len, (size_t)patch_bytes, -1, 0);
    if (err)
        return err;
    /* Exactly the head: a longer buffer would be data this handle does not track. */
    if (head_len != p->header_bytes) {
        err = pulse_fail(PULSE_ERR_FORMAT, "patch head of %zu bytes, its header declares %llu", head_len,
                         (unsigned long long)p->header_bytes);
        pulse_patch_close(&p);
        return err;
    }
    p->data = NULL;
    p->present = calloc(p->nchunks ? p->nchunks : 1, sizeof *p->present);
    p->wanted = calloc(p->nchunks ? p->nchunks : 1, 1);
    if (!p->present || !p->wanted) {
        pulse_patch_close(&p);
        return pulse_fail(PULSE_ERR_NOMEM, "sliced patch tables");
    }
    *out = p;
    return 0;
}

/* Reads exactly n bytes at off; PULSE_ERR_IO when the file ends first. */
static int pread_full(int fd, uint8_t *dst, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, dst + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return pulse_fail_errno(PULSE_ERR_IO, "read");
        if (r == 0)
            return pulse_fail(PULSE_ERR_IO, "file shrank while reading");
        got += (size_t)r;
    }
    return 0;
}

int pulse_patch_open(pulse_patch **out, const char *path)
{
    if (!out || !path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_open: NULL argument");
    *out = NULL;
    /* Only the header and tables are read here; chunk data is read chunk by chunk into
     * per-worker buffers when it is verified or applied, so memory does not grow with the
     * patch, and every byte decoded is a byte whose digest was checked in that copy. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "%s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = pulse_fail_errno(PULSE_ERR_IO, "%s", path);
        close(fd);
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pulse_fail(PULSE_ERR_INVALID, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > PULSE_PATCH_MAX_BYTES) {
        close(fd);
        return pulse_fail(PULSE_ERR_LIMIT, "%s: %lld bytes", path, (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    size_t want = len < PATCH_HEADER_BYTES ? len : PATCH_HEADER_BYTES;
    uint8_t *buf = malloc(PATCH_HEADER_BYTES);
    int err = buf ? pread_full(fd, buf, want, 0) : pulse_fail(PULSE_ERR_NOMEM, "patch header");
    if (!err && want == PATCH_HEADER_BYTES) {
        uint64_t table_len = le(buf + 88, 8);
        if (len >= PATCH_HEADER_BYTES + PATCH_DIGEST_BYTES
            && table_len <= len - PATCH_HEADER_BYTES - PATCH_DIGEST_BYTES) {
            want = PATCH_HEADER_BYTES + (size_t)table_len + PATCH_DIGEST_BYTES;
            uint8_t *grown = realloc(buf, want);
            if (!grown)
                err = pulse_fail(PULSE_ERR_NOMEM, "patch table of %llu bytes", (unsigned long long)table_len);
            else
                buf = grown;
            if (!err)
                err = pread_full(fd, buf + PATCH_HEADER_BYTES, want - PATCH_HEADER_BYTES, PATCH_HEADER_BYTES);
        }
    }
    if (err) {
        free(buf);
        close(fd);
        char detail[512];
        snprintf(detail, sizeof detail, "%s", pulse_last_error());
        return pulse_fail(err, "%s: %s", path, detail);
    }
    err = open_owned(out, buf, want, len, fd, 0);
    if (err) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", pulse_last_error());
        return pulse_fail(err, "%s: %s", path, detail);
    }
    return 0;
}

/* Chunk c's bytes without the digest check: into the patch's memory, or read into *buf
 * (grown to cap the largest chunk; bounded at open by patch_chunk_bytes_bound). */
static int chunk_read(const pulse_patch *p, const patch_chunk *c, uint8_t **buf, size_t *buf_cap,
                      const uint8_t **bytes)
{
    size_t n = patch_chunk_coded(c);
    if (p->present) {
        *bytes = p->present[c - p->chunks];
        return *bytes ? 0 : pulse_fail(PULSE_ERR_INVALID, "tensor %s chunk %llu: not fetched (a sliced patch holds "
                                       "only the chunks supplied to it)", p->tensors[c->tensor].name,
                                       (unsigned long long)c->index);
    }
    if (p->fd < 0) {
        *bytes = p->data + c->offset;
        return 0;
    }
    if (*buf_cap < n) {
        size_t cap = n > p->max_chunk_bytes ? n : p->max_chunk_bytes;
        uint8_t *in = realloc(*buf, cap);
        if (!in)
            return pulse_fail(PULSE_ERR_NOMEM, "chunk buffer of %zu bytes", cap);
        *buf = in;
        *buf_cap = cap;
    }
    int err = pread_full(p->fd, *buf, n, p->data_off + c->offset);
    if (err)
        return pulse_fail(err, "tensor %s chunk %llu: %s", p->tensors[c->tensor].name,
                          (unsigned long long)c->index, pulse_last_error());
    *bytes = *buf;
    return 0;
}

static int digest_mismatch(const pulse_patch *p, const patch_chunk *c)
{
    return pulse_fail(PULSE_ERR_CORRUPT, "tensor %s chunk %llu: digest mismatch", p->tensors[c->tensor].name,
                      (unsigned long long)c->index);
}

int patch_chunk_bytes(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, int check,
                      const uint8_t **bytes)
{
    int err = chunk_read(p, c, &s->in, &s->in_cap, bytes);
    if (err)
        return err;
    /* A file can change between reads: every copy is checked. Bytes in memory are checked
     * until a verify pass has checked them all; a sliced patch's were checked when supplied
     * (into its own copy). */
    if ((check && !p->present && !atomic_load_explicit(&p->verified, memory_order_relaxed)) || p->fd >= 0) {
        uint8_t digest[32];
        pulse_sha256(*bytes, patch_chunk_coded(c), digest);
        if (memcmp(digest, c->digest, 32) != 0)
            return digest_mismatch(p, c);
    }
    return 0;
}

/* Reads a run's chunks into s->run, one after the other: one read of their span when they lie
 * back to back in the data (what cut_runs makes), else one read each. */
static int run_read(const pulse_patch *p, size_t first, size_t n, patch_scratch *s, const uint8_t *bytes[])
{
    const patch_chunk *a = &p->chunks[first], *z = &p->chunks[first + n - 1];
    size_t span = 0;
    int apart = 0;
    for (size_t i = 0; i < n; i++) {
        span += patch_chunk_coded(&p->chunks[first + i]);
        apart |= i > 0 && !patch_chunk_follows(p, first + i);
    }
    if (s->run_cap < span) {
        size_t cap = span > PATCH_RUN_BYTES ? span : PATCH_RUN_BYTES;
        uint8_t *in = realloc(s->run, cap);
        if (!in)
            return pulse_fail(PULSE_ERR_NOMEM, "chunk run buffer of %zu bytes", cap);
        s->run = in;
        s->run_cap = cap;
    }
    int err = apart ? 0 : pread_full(p->fd, s->run, span, p->data_off + a->offset);
    size_t at = 0;
    for (size_t i = 0; !err && i < n; i++) {
        const patch_chunk *c = &p->chunks[first + i];
        bytes[i] = s->run + at;
        if (apart)
            err = pread_full(p->fd, s->run + at, patch_chunk_coded(c), p->data_off + c->offset);
        at += patch_chunk_coded(c);
    }
    if (err)
        return pulse_fail(err, "tensor %s chunk %llu to tensor %s chunk %llu: %s", p->tensors[a->tensor].name,
                          (unsigned long long)a->index, p->tensors[z->tensor].name, (unsigned long long)z->index,
                          pulse_last_error());
    return 0;
}

int patch_chunk_bytes_run(const pulse_patch *p, size_t first, size_t n, patch_scratch *s, const uint8_t *bytes[])
{
    if (n == 1 || p->present) {   /* a sliced patch's chunks lie wherever they were supplied */
        for (size_t i = 0; i < n; i++) {
            int err = patch_chunk_bytes(p, &p->chunks[first + i], s, 1, &bytes[i]);
            if (err)
                return err;
        }
        return 0;
    }
    if (p->fd >= 0) {
        int err = run_read(p, first, n, s, bytes);
        if (err)
            return err;
    } else {
        for (size_t i = 0; i < n; i++)
            bytes[i] = p->data + p->chunks[first + i].offset;
    }
    const void *data[PATCH_RUN_MOST] = { 0 };   /* set below for i < n; zeroed for the compiler */
    size_t len[PATCH_RUN_MOST] = { 0 };
    uint8_t digest[PATCH_RUN_MOST][32];
    for (size_t i = 0; i < n; i++) {
        data[i] = bytes[i];
        len[i] = patch_chunk_coded(&p->chunks[first + i]);
    }
    pulse_sha256_many(n, data, len, digest);
    for (size_t i = 0; i < n; i++)
        if (memcmp(digest[i], p->chunks[first + i].digest, 32) != 0)
            return digest_mismatch(p, &p->chunks[first + i]);
    return 0;
}

void pulse_patch_close(pulse_patch **pp)
{
    if (!pp || !*pp)
        return;
    pulse_patch *p = *pp;
    if (p->tensors)
        for (size_t i = 0; i < p->ntensors; i++)
            free(p->tensors[i].name);
    free(p->tensors);
    free(p->chunks);
    free(p->by_offset);
    free(p->metadata);
    /* a sliced patch's (pulse_patch_open_head, patch_slice.c) */
    for (size_t i = 0; i < p->nheld; i++)
        free(p->held[i]);
    free(p->held);
    free(p->present);
    free(p->wanted);
    buf_release(p->buf, p->mapped);
    if (p->fd >= 0)
        close(p->fd);
    free(p);
    *pp = NULL;
}

pulse_value_code pulse_patch_values(const pulse_patch *p) { return p->values; }
const uint8_t *pulse_patch_base_id(const pulse_patch *p) { return p->base_id; }
const uint8_t *pulse_patch_result_id(const pulse_patch *p) { return p->result_id; }
uint32_t pulse_patch_chunk_elems(const pulse_patch *p) { return p->chunk_elems; }
uint32_t pulse_patch_version(const pulse_patch *p) { return p->version; }
size_t pulse_patch_tensor_count(const pulse_patch *p) { return p->ntensors; }
uint64_t pulse_patch_head_bytes(const pulse_patch *p) { return p->header_bytes; }
int pulse_patch_is_sliced(const pulse_patch *p) { return p->present != NULL; }
