/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints over the caller's memory: validated tensor tables whose data pointers are borrowed, not mapped. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const pulse_tensor *)a)->name, ((const pulse_tensor *)b)->name);
}

static int cmp_by_data(const void *a, const void *b)
{
    const pulse_tensor *x = *(const pulse_tensor *const *)a, *y = *(const pulse_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

/* A writable wrap must not alias: a patch applies each tensor once, and an ulp delta written
 * through two names of one byte would be added twice. */
static int check_disjoint(pulse_tensor *t, size_t n)
{
    if (n < 2)
        return 0;
    pulse_tensor **by = malloc(n * sizeof *by);
    if (!by)
        return pulse_fail(PULSE_ERR_NOMEM, "tensor table");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].nbytes)
            by[k++] = &t[i];
    if (k > 1)
        qsort(by, k, sizeof *by, cmp_by_data);
    int r = 0;
    for (size_t i = 1; i < k && !r; i++)
        if ((uintptr_t)by[i - 1]->data + by[i - 1]->nbytes > (uintptr_t)by[i]->data)
            r = pulse_fail(PULSE_ERR_INVALID, "tensors %s and %s share memory; a writable checkpoint "
                           "needs each tensor in its own buffer", by[i - 1]->name, by[i]->name);
    free(by);
    return r;
}

/* One tensor's facts from its description; the name is set by the caller. */
static int describe(const pulse_mem_tensor *m, size_t i, pulse_tensor *t, int layout_only)
{
    if (!m->name || !m->dtype_name)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %zu: no name or dtype", i);
    if (!strcmp(m->name, "__metadata__"))
        return pulse_fail(PULSE_ERR_INVALID, "a tensor cannot be named __metadata__");
    const dtype_info *info = ckpt_dtype_lookup(m->dtype_name);
    if (!info)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: unknown dtype %.32s", m->name, m->dtype_name);
    if (m->ndim < 0 || m->ndim > PULSE_MAX_DIMS)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %d dimensions (at most %d)", m->name, m->ndim,
                          PULSE_MAX_DIMS);
    uint64_t ne = 1;
    for (int k = 0; k < m->ndim; k++) {
        if (m->shape[k] && ne > UINT64_MAX / 64 / m->shape[k])   /* keeps ne * bits in range */
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: shape overflows", m->name);
        ne *= m->shape[k];
        t->shape[k] = m->shape[k];
    }
    t->dtype_name = info->name;
    t->dtype = info->dtype;
    t->elem_size = info->bits >= 8 ? info->bits / 8 : 1;
    t->ndim = m->ndim;
    t->nelems = ne;
    if (ne * info->bits % 8 != 0)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %llu %s elements do not fill whole bytes", m->name,
                          (unsigned long long)ne, info->name);
    t->nbytes = ne * info->bits / 8;
    if (m->nbytes != t->nbytes)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %llu bytes given, but %s shape needs %llu", m->name,
                          (unsigned long long)m->nbytes, info->name, (unsigned long long)t->nbytes);
    if (t->nbytes && !m->data && !layout_only)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: no data", m->name);
    t->data = layout_only ? NULL : m->data;
    t->file = 0;
    return 0;
}

/* flags: PULSE_CKPT_READ or PULSE_CKPT_WRITE, or CKPT_LAYOUT_ONLY. */
static int wrap(pulse_ckpt **out, const pulse_mem_tensor *mt, size_t n, int flags)
{
    if (!out || (n && !mt) || (flags & ~(PULSE_CKPT_WRITE | CKPT_LAYOUT_ONLY)))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_ckpt_wrap: bad arguments");
    *out = NULL;
    if (n > PULSE_ST_MAX_TENSORS)
        return pulse_fail(PULSE_ERR_LIMIT, "%zu tensors (limit %u)", n, PULSE_ST_MAX_TENSORS);
    /* The table and the names in one block: pulse_ckpt_close frees the table, and with it the names. */
    size_t names = 0;
    for (size_t i = 0; i < n; i++) {
        if (!mt[i].name)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %zu: no name", i);
        names += strlen(mt[i].name) + 1;
    }
    pulse_ckpt *c = calloc(1, sizeof *c);
    pulse_tensor *t = malloc(n * sizeof *t + names + 1);
    char *metadata = strdup("{}");
    if (!c || !t || !metadata) {
        free(c);
        free(t);
        free(metadata);
        return pulse_fail(PULSE_ERR_NOMEM, "checkpoint");
    }
    memset(t, 0, n * sizeof *t);
    c->flags = flags;
    c->t = t;
    c->n = n;
    c->metadata = metadata;
    char *at = (char *)(t + n);
    int r = 0;
    for (size_t i = 0; i < n && !r; i++) {
        size_t len = strlen(mt[i].name) + 1;
        memcpy(at, mt[i].name, len);
        t[i].name = at;
        at += len;
        r = describe(&mt[i], i, &t[i], flags & CKPT_LAYOUT_ONLY);
    }
    if (!r && n > 1)
        qsort(t, n, sizeof *t, cmp_by_name);
    for (size_t i = 1; i < n && !r; i++)
        if (!strcmp(t[i - 1].name, t[i].name))
            r = pulse_fail(PULSE_ERR_INVALID, "tensor %s given twice", t[i].name);
    if (!r && (flags & PULSE_CKPT_WRITE))
        r = check_disjoint(t, n);
    if (r) {
        pulse_ckpt_close(&c);
        return r;
    }
    *out = c;
    return 0;
}

int pulse_ckpt_wrap(pulse_ckpt **out, const pulse_mem_tensor *t, size_t n, int flags)
{
    if (flags & CKPT_LAYOUT_ONLY)   /* internal: a caller's checkpoint holds its data */
        return pulse_fail(PULSE_ERR_INVALID, "pulse_ckpt_wrap: bad arguments");
    return wrap(out, t, n, flags);
}

int ckpt_wrap_layout(pulse_ckpt **out, const pulse_mem_tensor *t, size_t n)
{
    return wrap(out, t, n, CKPT_LAYOUT_ONLY);
}
