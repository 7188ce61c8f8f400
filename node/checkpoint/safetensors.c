/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors reader: maps single files and Hugging Face sharded checkpoints, validating every header. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"

static const dtype_info dtypes[] = {
    { "BF16", PULSE_DT_BF16, 16 },       { "F16", PULSE_DT_F16, 16 },
    { "F32", PULSE_DT_F32, 32 },         { "F8_E4M3", PULSE_DT_F8_E4M3, 8 },
    { "F8_E5M2", PULSE_DT_F8_E5M2, 8 },  { "F64", PULSE_DT_OPAQUE, 64 },
    { "I64", PULSE_DT_OPAQUE, 64 },      { "I32", PULSE_DT_OPAQUE, 32 },
    { "I16", PULSE_DT_OPAQUE, 16 },      { "I8", PULSE_DT_OPAQUE, 8 },
    { "U64", PULSE_DT_OPAQUE, 64 },      { "U32", PULSE_DT_OPAQUE, 32 },
    { "U16", PULSE_DT_OPAQUE, 16 },      { "U8", PULSE_DT_OPAQUE, 8 },
    { "BOOL", PULSE_DT_OPAQUE, 8 },      { "F8_E8M0", PULSE_DT_OPAQUE, 8 },
    { "C64", PULSE_DT_OPAQUE, 64 },
    /* Sub-byte types are packed: nbytes = nelems * bits / 8 (a whole number), elem_size 1. */
    { "F4", PULSE_DT_OPAQUE, 4 },        { "F6_E2M3", PULSE_DT_OPAQUE, 6 },
    { "F6_E3M2", PULSE_DT_OPAQUE, 6 },
};

const dtype_info *ckpt_dtype_lookup(const char *name)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, name))
            return &dtypes[i];
    return NULL;
}

char *ckpt_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s)
        return NULL;
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* --- Header validation ------------------------------------------------------------ */

typedef struct tvec {
    pulse_tensor *t;
    size_t n, cap;
} tvec;

static int tvec_push(tvec *v, pulse_tensor **out)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        pulse_tensor *t = realloc(v->t, cap * sizeof *t);
        if (!t)
            return pulse_fail(PULSE_ERR_NOMEM, "tensor table");
        v->t = t;
        v->cap = cap;
    }
    *out = &v->t[v->n++];
    memset(*out, 0, sizeof **out);
    return 0;
}

/* Compact JSON text of a string->string object. */
int ckpt_metadata_text(const json_doc *d, const json_node *obj, const char *label, char **out)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int r = json_append_raw(&buf, &len, &cap, "{", 1);
    int first = 1;
    for (const json_node *m = json_at(d, obj->first); m && !r; m = json_at(d, m->next)) {
        if (m->type != JSON_STRING) {
            free(buf);
            return pulse_fail(PULSE_ERR_FORMAT, "%s: __metadata__ value of \"%s\" is not a string",
                              label, json_key(d, m));
        }
        if (!first)
            r = json_append_raw(&buf, &len, &cap, ",", 1);
        first = 0;
        if (!r) r = json_append_string(&buf, &len, &cap, json_key(d, m));
        if (!r) r = json_append_raw(&buf, &len, &cap, ":", 1);
        if (!r) r = json_append_string(&buf, &len, &cap, json_str(d, m));
    }
    if (!r)
        r = json_append_raw(&buf, &len, &cap, "}", 1);
    if (r) {
        free(buf);
        return r;
    }
    *out = buf;
    return 0;
}

static int parse_tensor(const json_doc *d, const json_node *e, const char *label, unsigned fi,
                        const uint8_t *data, uint64_t data_len, pulse_tensor *t)
{
    const char *name = json_key(d, e);
    t->name = name;
    t->file = fi;
    if (e->type != JSON_OBJECT)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: entry is not an object", label, name);
    const json_node *dt = NULL, *shape = NULL, *offs = NULL;
    for (const json_node *m = json_at(d, e->first); m; m = json_at(d, m->next)) {
        const char *k = json_key(d, m);
        if (!strcmp(k, "dtype")) dt = m;
        else if (!strcmp(k, "shape")) shape = m;
        else if (!strcmp(k, "data_offsets")) offs = m;
        else
            return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: unknown field \"%s\"", label, name, k);
    }
    if (!dt || dt->type != JSON_STRING)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: dtype missing or not a string", label, name);
    const dtype_info *info = ckpt_dtype_lookup(json_str(d, dt));
    if (!info)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: unknown dtype \"%.32s\"", label, name,
                          json_str(d, dt));
    t->dtype_name = info->name;
    t->dtype = info->dtype;
    t->elem_size = info->bits >= 8 ? info->bits / 8 : 1;

    if (!shape || shape->type != JSON_ARRAY)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: shape missing or not an array", label, name);
    uint64_t nelems = 1;
    int ndim = 0;
    for (const json_node *s = json_at(d, shape->first); s; s = json_at(d, s->next)) {
        if (ndim == PULSE_MAX_DIMS)
            return pulse_fail(PULSE_ERR_LIMIT, "%s: tensor %s: more than %d dimensions", label, name,
                              PULSE_MAX_DIMS);
        if (s->type != JSON_INT)
            return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: shape holds a non-integer", label, name);
        uint64_t dim = s->val;
        if (dim && nelems > UINT64_MAX / 64 / dim)   /* keeps nelems * bits in range */
            return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: shape overflows", label, name);
        nelems *= dim;
        t->shape[ndim++] = dim;
    }
    t->ndim = ndim;
    t->nelems = nelems;
    /* Hugging Face's reader refuses a packed sub-byte tensor that ends inside a byte
     * (MisalignedSlice): its bytes are exactly nelems x bits / 8. */
    if (nelems * info->bits % 8 != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: %llu %s elements do not fill whole bytes", label,
                          name, (unsigned long long)nelems, info->name);
    t->nbytes = nelems * info->bits / 8;

    if (!offs || offs->type != JSON_ARRAY)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: data_offsets missing", label, name);
    const json_node *b = json_at(d, offs->first);
    const json_node *en = b ? json_at(d, b->next) : NULL;
    if (!b || !en || en->next != JSON_NONE || b->type != JSON_INT || en->type != JSON_INT)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: data_offsets is not [begin, end]", label, name);
    if (b->val > en->val)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: data_offsets end before begin", label, name);
    if (en->val > data_len)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: data_offsets [%llu, %llu) past the end of "
                          "the file (%llu data bytes)", label, name, (unsigned long long)b->val,
                          (unsigned long long)en->val, (unsigned long long)data_len);
    if (en->val - b->val != t->nbytes)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s: %llu data bytes, but %s shape needs %llu",
                          label, name, (unsigned long long)(en->val - b->val), info->name,
                          (unsigned long long)t->nbytes);
    t->data = (uint8_t *)data + b->val;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const pulse_tensor *x = *(const pulse_tensor *const *)a, *y = *(const pulse_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

/* No two non-empty tensors of one file share a byte. */
static int check_overlap(pulse_tensor *t, size_t n, const char *label)
{
    if (n < 2)
        return 0;
    pulse_tensor **by = malloc(n * sizeof *by);
    if (!by)
        return pulse_fail(PULSE_ERR_NOMEM, "offset table");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].nbytes)
            by[k++] = &t[i];
    qsort(by, k, sizeof *by, cmp_by_offset);
    int r = 0;
    for (size_t i = 1; i < k; i++) {
        if (by[i - 1]->data + by[i - 1]->nbytes > by[i]->data) {
            r = pulse_fail(PULSE_ERR_FORMAT, "%s: tensors %s and %s overlap", label, by[i - 1]->name,
                           by[i]->name);
            break;
        }
    }
    free(by);
    return r;
}

/* Validates the image of one file and appends its tensors (file index fi) to v. */
static int parse_image(ckpt_file *f, unsigned fi, const char *label, tvec *v, char **metadata)
{
    if (f->size < 8)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: %zu bytes, shorter than the 8-byte header length",
                          label, f->size);
    uint64_t hlen = load_le64(f->map);
    if (hlen > PULSE_ST_MAX_HEADER)
        return pulse_fail(PULSE_ERR_LIMIT, "%s: header of %llu bytes (limit %u)", label,
                          (unsigned long long)hlen, PULSE_ST_MAX_HEADER);
    if (hlen > f->size - 8)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: header length %llu runs past the end of the file "
                          "(%zu bytes)", label, (unsigned long long)hlen, f->size);
    int r = json_parse(&f->doc, (const char *)f->map + 8, (size_t)hlen, label);
    if (r)
        return r;
    const json_doc *d = &f->doc;
    const json_node *root = json_at(d, 0);
    if (root->type != JSON_OBJECT)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: header is not a JSON object", label);
    const uint8_t *data = f->map + 8 + hlen;
    uint64_t data_len = f->size - 8 - hlen;
    size_t start = v->n;
    for (const json_node *e = json_at(d, root->first); e; e = json_at(d, e->next)) {
        if (!strcmp(json_key(d, e), "__metadata__")) {
            if (e->type != JSON_OBJECT)
                return pulse_fail(PULSE_ERR_FORMAT, "%s: __metadata__ is not an object", label);
            if (metadata && !*metadata && (r = ckpt_metadata_text(d, e, label, metadata)))
                return r;
            continue;
        }
        if (v->n >= PULSE_ST_MAX_TENSORS)
            return pulse_fail(PULSE_ERR_LIMIT, "%s: more than %u tensors", label, PULSE_ST_MAX_TENSORS);
        pulse_tensor *t = NULL;
        if ((r = tvec_push(v, &t)) || (r = parse_tensor(d, e, label, fi, data, data_len, t)))
            return r;
    }
    return check_overlap(v->t + start, v->n - start, label);
}

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const pulse_tensor *)a)->name, ((const pulse_tensor *)b)->name);
}

/* Sorts the tensors into canonical order and refuses a name seen twice (across shards too). */
static int finish_tensors(pulse_ckpt *c, tvec *v)
{
    if (v->n > 1)   /* qsort(NULL, 0, ...) is undefined behaviour */
        qsort(v->t, v->n, sizeof *v->t, cmp_by_name);
    for (size_t i = 1; i < v->n; i++)
        if (!strcmp(v->t[i - 1].name, v->t[i].name))
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s appears twice", v->t[i].name);
    c->t = v->t;
    c->n = v->n;
    v->t = NULL;
    return 0;
}

/* --- Files ----------------------------------------------------------------------- */

static int map_file(ckpt_file *f, const char *path, int flags)
{
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path)
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    const char *slash = strrchr(path, '/');
    f->name = strdup(slash ? slash + 1 : path);
    if (!f->name)
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    int write = flags & PULSE_CKPT_WRITE;
    f->fd = open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (f->fd < 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "%s", path);
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "%s", path);
    if (!S_ISREG(st.st_mode))
        return pulse_fail(PULSE_ERR_FORMAT, "%s: not a regular file", path);
    if ((uint64_t)st.st_size < 8)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: %lld bytes, shorter than the 8-byte header length",
                          path, (long long)st.st_size);
    if ((uint64_t)st.st_size > SIZE_MAX)
        return pulse_fail(PULSE_ERR_LIMIT, "%s: too large to map", path);
    f->size = (size_t)st.st_size;
    void *m = mmap(NULL, f->size, write ? PROT_READ | PROT_WRITE : PROT_READ,
                   write ? MAP_SHARED : MAP_PRIVATE, f->fd, 0);
    if (m == MAP_FAILED)
        return pulse_fail_errno(PULSE_ERR_IO, "%s: mmap", path);
    f->map = m;
    f->mapped = 1;
    return 0;
}

static void unmap_file(ckpt_file *f)
{
    if (f->mapped && f->map)
        munmap(f->map, f->size);
    if (f->fd >= 0)
        close(f->fd);
    json_free(&f->doc);
    free(f->path);
    free(f->name);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

static pulse_ckpt *ckpt_new(int flags, unsigned nfiles)
{
    pulse_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->flags = flags;
    c->files = calloc(nfiles, sizeof *c->files);
    if (!c->files) {
        free(c);
        return NULL;
    }
    for (unsigned i = 0; i < nfiles; i++)
        c->files[i].fd = -1;
    c->nfiles = nfiles;
    return c;
}

static int set_default_metadata(pulse_ckpt *c)
{
    if (!c->metadata && !(c->metadata = strdup("{}")))
        return pulse_fail(PULSE_ERR_NOMEM, "metadata");
    return 0;
}

static int open_single(pulse_ckpt **out, const char *path, int flags)
{
    pulse_ckpt *c = ckpt_new(flags, 1);
    if (!c)
        return pulse_fail(PULSE_ERR_NOMEM, "checkpoint");
    tvec v = { 0 };
    int r = map_file(&c->files[0], path, flags);
    if (!r) r = parse_image(&c->files[0], 0, path, &v, &c->metadata);
    if (!r) r = finish_tensors(c, &v);
    if (!r) r = set_default_metadata(c);
    free(v.t);
    if (r) {
        pulse_ckpt_close(&c);
        return r;
    }
    *out = c;
    return 0;
}

int pulse_ckpt_open_memory(pulse_ckpt **out, const uint8_t *buf, size_t size)
{
    *out = NULL;
    pulse_ckpt *c = ckpt_new(PULSE_CKPT_READ, 1);
    if (!c)
        return pulse_fail(PULSE_ERR_NOMEM, "checkpoint");
    c->files[0].map = (uint8_t *)buf;
    c->files[0].size = size;
    tvec v = { 0 };
    int r = parse_image(&c->files[0], 0, "memory", &v, &c->metadata);
    if (!r) r = finish_tensors(c, &v);
    if (!r) r = set_default_metadata(c);
    free(v.t);
    if (r) {
        pulse_ckpt_close(&c);
        return r;
    }
    *out = c;
    return 0;
}

static int read_whole(const char *path, size_t limit, uint8_t **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "%s", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pulse_fail(PULSE_ERR_FORMAT, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > limit) {
        close(fd);
        return pulse_fail(PULSE_ERR_LIMIT, "%s: %lld bytes (limit %zu)", path, (long long)st.st_size, limit);
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return pulse_fail(PULSE_ERR_NOMEM, "%s", path);
    }
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int r = pulse_fail_errno(PULSE_ERR_IO, "%s: read", path);
            close(fd);
            free(buf);
            return r;
        }
        got += (size_t)k;
    }
    close(fd);
    *out = buf;
    *len = n;
    return 0;
}

static int cmp_str_ptrs(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int shard_index(const char **names, unsigned n, const char *name)
{
    const char **hit = bsearch(&name, names, n, sizeof *names, cmp_str_ptrs);
    return hit ? (int)(hit - names) : -1;
}

/* Opens a model.safetensors.index.json and every shard it names. */
static int open_sharded(pulse_ckpt **out, const char *index_path, int flags)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    json_doc d = { 0 };
    const char **names = NULL;
    pulse_ckpt *c = NULL;
    tvec v = { 0 };
    char *dir = NULL;
    int r = read_whole(index_path, PULSE_ST_MAX_HEADER, &bytes, &len);
    if (r)
        return r;
    if ((r = json_parse(&d, (const char *)bytes, len, index_path)))
        goto out;
    const json_node *root = json_at(&d, 0);
    const json_node *wm = json_get(&d, root, "weight_map");
    if (!wm || wm->type != JSON_OBJECT) {
        r = pulse_fail(PULSE_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
        goto out;
    }
    /* Shard names: plain file names beside the index, so an index cannot reach elsewhere. */
    size_t nmap = 0;
    for (const json_node *e = json_at(&d, wm->first); e; e = json_at(&d, e->next)) {
        if (e->type != JSON_STRING) {
            r = pulse_fail(PULSE_ERR_FORMAT, "%s: weight_map entry %s is not a string", index_path,
                           json_key(&d, e));
            goto out;
        }
        const char *s = json_str(&d, e);
        if (!*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, "..")) {
            r = pulse_fail(PULSE_ERR_FORMAT, "%s: shard name \"%.64s\" is not a plain file name",
                           index_path, s);
            goto out;
        }
        if (++nmap > PULSE_ST_MAX_TENSORS) {
            r = pulse_fail(PULSE_ERR_LIMIT, "%s: more than %u tensors", index_path, PULSE_ST_MAX_TENSORS);
            goto out;
        }
    }
    names = malloc((nmap ? nmap : 1) * sizeof *names);
    if (!names) {
        r = pulse_fail(PULSE_ERR_NOMEM, "shard table");
        goto out;
    }
    size_t k = 0;
    for (const json_node *e = json_at(&d, wm->first); e; e = json_at(&d, e->next))
        names[k++] = json_str(&d, e);
    qsort(names, k, sizeof *names, cmp_str_ptrs);
    unsigned nshards = 0;
    for (size_t i = 0; i < k; i++) {
        if (nshards && !strcmp(names[nshards - 1], names[i]))
            continue;
        if (nshards == PULSE_ST_MAX_SHARDS) {
            r = pulse_fail(PULSE_ERR_LIMIT, "%s: more than %u shards", index_path, PULSE_ST_MAX_SHARDS);
            goto out;
        }
        names[nshards++] = names[i];
    }
    if (!nshards) {
        r = pulse_fail(PULSE_ERR_FORMAT, "%s: weight_map is empty", index_path);
        goto out;
    }
    c = ckpt_new(flags, nshards);
    if (!c) {
        r = pulse_fail(PULSE_ERR_NOMEM, "checkpoint");
        goto out;
    }
    const char *slash = strrchr(index_path, '/');
    dir = slash ? strndup(index_path, (size_t)(slash - index_path)) : strdup(".");
    c->index_path = strdup(index_path);
    c->index_name = strdup(slash ? slash + 1 : index_path);
    if (!dir || !c->index_path || !c->index_name) {
        r = pulse_fail(PULSE_ERR_NOMEM, "path");
        goto out;
    }
    for (unsigned i = 0; i < nshards && !r; i++) {
        char *p = ckpt_join(dir, names[i]);
        if (!p) {
            r = pulse_fail(PULSE_ERR_NOMEM, "path");
            break;
        }
        r = map_file(&c->files[i], p, flags);
        if (!r)
            r = parse_image(&c->files[i], i, p, &v, &c->metadata);
        free(p);
    }
    if (!r) r = finish_tensors(c, &v);
    if (r)
        goto out;
    /* Each tensor of the map is in its shard; the counts then make it a bijection
     * (names are unique on both sides). */
    for (const json_node *e = json_at(&d, wm->first); e; e = json_at(&d, e->next)) {
        const char *tname = json_key(&d, e);
        const pulse_tensor *t = pulse_ckpt_find(c, tname);
        int want = shard_index(names, nshards, json_str(&d, e));
        if (!t || (int)t->file != want) {
            r = pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s is not in shard %s", index_path, tname,
                           json_str(&d, e));
            goto out;
        }
    }
    if (c->n != nmap) {
        for (size_t i = 0; i < c->n; i++) {
            if (!json_get(&d, wm, c->t[i].name)) {
                r = pulse_fail(PULSE_ERR_FORMAT, "%s: tensor %s of shard %s is not in the weight_map",
                               index_path, c->t[i].name, c->files[c->t[i].file].name);
                goto out;
            }
        }
    }
    if ((r = set_default_metadata(c)))
        goto out;
    c->index_bytes = bytes;
    c->index_len = len;
    bytes = NULL;
    *out = c;
    c = NULL;
out:
    free(v.t);
    free(names);
    free(dir);
    json_free(&d);
    free(bytes);
    pulse_ckpt_close(&c);
    return r;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* A directory: its model.safetensors.index.json, else its only *.safetensors.index.json,
 * else its only *.safetensors. */
static int open_dir(pulse_ckpt **out, const char *path, int flags)
{
    char *p = ckpt_join(path, "model.safetensors.index.json");
    if (!p)
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    if (access(p, F_OK) == 0) {
        int r = open_sharded(out, p, flags);
        free(p);
        return r;
    }
    free(p);
    DIR *dir = opendir(path);
    if (!dir)
        return pulse_fail_errno(PULSE_ERR_IO, "%s", path);
    char *index = NULL, *single = NULL;
    int nindex = 0, nsingle = 0, r = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        if (ends_with(e->d_name, ".safetensors.index.json")) {
            if (!nindex++) index = strdup(e->d_name);
        } else if (ends_with(e->d_name, ".safetensors")) {
            if (!nsingle++) single = strdup(e->d_name);
        }
    }
    closedir(dir);
    const char *pick = NULL;
    if (nindex == 1)
        pick = index;
    else if (nindex > 1)
        r = pulse_fail(PULSE_ERR_FORMAT, "%s: %d *.safetensors.index.json files; name one", path, nindex);
    else if (nsingle == 1)
        pick = single;
    else if (nsingle > 1)
        r = pulse_fail(PULSE_ERR_FORMAT, "%s: %d .safetensors files and no index; name one", path, nsingle);
    else
        r = pulse_fail(PULSE_ERR_NOTFOUND, "%s: no .safetensors file or index in this directory", path);
    if (!r && !pick)
        r = pulse_fail(PULSE_ERR_NOMEM, "path");
    if (!r) {
        char *full = ckpt_join(path, pick);
        if (!full)
            r = pulse_fail(PULSE_ERR_NOMEM, "path");
        else
            r = nindex ? open_sharded(out, full, flags) : open_single(out, full, flags);
        free(full);
    }
    free(index);
    free(single);
    return r;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14 */
#endif

void ckpt_prefault(const pulse_ckpt *c)
{
    for (unsigned i = 0; i < c->nfiles; i++)
        if (c->files[i].mapped && c->files[i].size)
            (void)madvise(c->files[i].map, c->files[i].size, MADV_POPULATE_READ);
}

int pulse_ckpt_open(pulse_ckpt **out, const char *path, int flags)
{
    if (!out || !path || (flags & ~PULSE_CKPT_WRITE))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_ckpt_open: bad arguments");
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "%s", path);
    if (S_ISDIR(st.st_mode))
        return open_dir(out, path, flags);
    if (ends_with(path, ".index.json"))
        return open_sharded(out, path, flags);
    return open_single(out, path, flags);
}

void pulse_ckpt_close(pulse_ckpt **cp)
{
    if (!cp || !*cp)
        return;
    pulse_ckpt *c = *cp;
    for (unsigned i = 0; i < c->nfiles; i++) {
        /* Uncommitted temporaries go; a committed or opened file is never removed. */
        if (c->uncommitted && c->files[i].path)
            unlink(c->files[i].path);
        unmap_file(&c->files[i]);
    }
    if (c->uncommitted && c->tmp_dir) {
        if (c->index_path)
            unlink(c->index_path);
        rmdir(c->tmp_dir);
    }
    free(c->files);
    free(c->t);
    free(c->metadata);
    free(c->index_path);
    free(c->index_name);
    free(c->index_bytes);
    free(c->final_path);
    free(c->tmp_dir);
    free(c);
    *cp = NULL;
}

size_t pulse_ckpt_count(const pulse_ckpt *c) { return c ? c->n : 0; }

const pulse_tensor *pulse_ckpt_tensor(const pulse_ckpt *c, size_t i)
{
    return c && i < c->n ? &c->t[i] : NULL;
}

const pulse_tensor *pulse_ckpt_find(const pulse_ckpt *c, const char *name)
{
    if (!c || !name)
        return NULL;
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = strcmp(c->t[mid].name, name);
        if (!d)
            return &c->t[mid];
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *pulse_ckpt_metadata(const pulse_ckpt *c) { return c && c->metadata ? c->metadata : "{}"; }
unsigned pulse_ckpt_nfiles(const pulse_ckpt *c) { return c ? c->nfiles : 0; }

const char *pulse_ckpt_file_path(const pulse_ckpt *c, unsigned i)
{
    return c && i < c->nfiles ? c->files[i].path : NULL;
}
