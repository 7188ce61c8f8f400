/* SPDX-License-Identifier: Apache-2.0 */
/* A LoCo trainer's state directory: theta_r, e and momentum (F32), theta_r's view, and the round file (the commit point). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"
#include "node/parallel.h"
#include "node/sync/sync_internal.h"

#define ROUND_FILE_MAX 512

static const char *const view_names[] = { "bf16", "fp16", "e4m3", "e5m2" };
static const char *const view_dtypes[] = { "BF16", "F16", "F8_E4M3", "F8_E5M2" };

const char *pulse_loco_view_name(int view)
{
    return view >= 0 && view < 4 ? view_names[view] : NULL;
}

int pulse_loco_view_from_name(const char *name)
{
    for (int i = 0; name && i < 4; i++)
        if (!strcmp(name, view_names[i]))
            return i;
    return -1;
}

void loco_state_path(const char *dir, const char *what, uint64_t round, char out[4096])
{
    snprintf(out, 4096, "%s/%s-%012" PRIu64 ".safetensors", dir, what, round);
}

int loco_same_layout(const pulse_ckpt *a, const pulse_ckpt *b, const char *what)
{
    size_t n = pulse_ckpt_count(a);
    if (pulse_ckpt_count(b) != n)
        return pulse_fail(PULSE_ERR_MISMATCH, "%s has %zu tensors, theta_r has %zu", what, pulse_ckpt_count(b), n);
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *x = pulse_ckpt_tensor(a, i), *y = pulse_ckpt_tensor(b, i);
        if (strcmp(x->name, y->name) || x->ndim != y->ndim ||
            memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) || y->dtype != PULSE_DT_F32)
            return pulse_fail(PULSE_ERR_MISMATCH, "%s: tensor %s differs from theta_r's (name, shape or not F32)",
                              what, y->name);
    }
    return 0;
}

int loco_state_commit(const char *dir, uint64_t round, int view, const uint8_t view_id[32], unsigned members)
{
    char path[4096], tmp[4200], hex[65], text[ROUND_FILE_MAX];
    snprintf(path, sizeof path, "%s/round", dir);
    snprintf(tmp, sizeof tmp, "%s/round.tmp", dir);
    int n = snprintf(text, sizeof text, "pulse-loco-state-v1\nround %" PRIu64 "\nview %s\nview-state %s\n", round,
                     pulse_loco_view_name(view), pulse_id_hex(view_id, hex));
    /* The next round's default quorum is a majority of these (docs/loco.md "Quorum"). */
    if (members)
        n += snprintf(text + n, sizeof text - (size_t)n, "members %u\n", members);
    return pulse_replace_file(path, tmp, text, (size_t)n, 1);
}

static int read_round(const char *dir, uint64_t *round, int *view, uint8_t id[32], unsigned *members)
{
    char path[4096], text[ROUND_FILE_MAX + 1];
    snprintf(path, sizeof path, "%s/round", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO,
                                "no loco state in %s (run pulse loco init)", dir);
    ssize_t n = read(fd, text, ROUND_FILE_MAX);
    close(fd);
    if (n <= 0 || n >= ROUND_FILE_MAX)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: empty or too long", path);
    text[n] = 0;
    char vname[16], hex[80];
    unsigned long long r = 0;
    unsigned k = 0;
    int used = 0, more = 0;
    /* the members line is absent after init and in states written before it existed */
    if (sscanf(text, "pulse-loco-state-v1\nround %llu\nview %15s\nview-state %79s\n%n", &r, vname, hex, &used) != 3 ||
        (used != n && (sscanf(text + used, "members %u\n%n", &k, &more) != 1 || k == 0 || used + more != n)) ||
        (*view = pulse_loco_view_from_name(vname)) < 0 || strlen(hex) != 64 || pulse_id_parse(hex, id))
        return pulse_fail(PULSE_ERR_FORMAT, "%s: not a pulse-loco-state-v1 round file", path);
    *round = r;
    *members = k;
    return 0;
}

int pulse_loco_state_round(const char *state_dir, uint64_t *round, uint8_t view_id[32], int *view)
{
    pulse_clear_error();
    unsigned members;
    return read_round(state_dir, round, view, view_id, &members);
}

void loco_state_close(loco_state *s)
{
    pulse_ckpt_close(&s->theta);
    pulse_ckpt_close(&s->e);
    pulse_ckpt_close(&s->m);
}

int loco_state_load(const char *dir, loco_state *s)
{
    memset(s, 0, sizeof *s);
    /* Its files decide what the round computes and publishes: as a node's state directory. */
    int r = state_dir_check(dir);
    if (r == PULSE_ERR_NOTFOUND) {
        pulse_clear_error();   /* read_round names what is missing */
        r = 0;
    }
    if (!r)
        r = read_round(dir, &s->round, &s->view, s->view_id, &s->prev_members);
    char path[4096];
    if (!r) {
        loco_state_path(dir, "theta", s->round, path);
        r = pulse_ckpt_open(&s->theta, path, PULSE_CKPT_READ);
    }
    if (!r) {
        loco_state_path(dir, "e", s->round, path);
        r = pulse_ckpt_open(&s->e, path, PULSE_CKPT_READ);
    }
    if (!r) {
        loco_state_path(dir, "m", s->round, path);
        r = pulse_ckpt_open(&s->m, path, PULSE_CKPT_READ);
    }
    if (!r)
        r = loco_same_layout(s->theta, s->theta, "theta_r");
    if (!r)
        r = loco_same_layout(s->theta, s->e, "the error-feedback file");
    if (!r)
        r = loco_same_layout(s->theta, s->m, "the momentum file");
    if (r)
        loco_state_close(s);
    return r;
}

int loco_write_view(const pulse_ckpt *src, int view, const char *path, int threads, uint8_t id[32])
{
    size_t n = pulse_ckpt_count(src);
    pulse_ckpt *out = NULL;
    int r = ckpt_create_shaped_like(&out, path, src, view_dtypes[view], NULL);
    for (size_t i = 0; !r && i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(src, i);
        const pulse_tensor *o = pulse_ckpt_find(out, t->name);
        if (!o)
            r = pulse_fail(PULSE_ERR_NOTFOUND, "view: tensor %s", t->name);
        for (uint64_t j = 0; !r && j < t->nelems; j++) {
            float x;
            memcpy(&x, t->data + 4 * j, 4);
            uint32_t b = pulse_view_bits((pulse_view)view, x);
            if (o->elem_size == 2) {
                o->data[2 * j] = (uint8_t)b;
                o->data[2 * j + 1] = (uint8_t)(b >> 8);
            } else {
                o->data[j] = (uint8_t)b;
            }
        }
    }
    if (!r)
        r = pulse_ckpt_commit(out);
    if (!r)
        r = pulse_ckpt_state_id(out, threads, id);
    pulse_ckpt_close(&out);
    if (r)
        unlink(path);
    return r;
}

int pulse_loco_init(const char *state_dir, const char *from, int view)
{
    pulse_clear_error();
    if (!state_dir || !from || !pulse_loco_view_name(view))
        return pulse_fail(PULSE_ERR_INVALID, "loco init needs a state directory, a checkpoint and a view");
    if (mkdir(state_dir, 0700) != 0 && errno != EEXIST)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot create %s", state_dir);
    int bad = state_dir_check(state_dir);
    if (bad)
        return bad;
    char path[4096];
    snprintf(path, sizeof path, "%s/round", state_dir);
    if (access(path, F_OK) == 0)
        return pulse_fail(PULSE_ERR_EXISTS, "%s already holds a loco state", state_dir);
    pulse_ckpt *src = NULL, *out = NULL;
    int r = pulse_ckpt_open(&src, from, PULSE_CKPT_READ);
    if (!r)
        r = loco_same_layout(src, src, from);
    static const char *const what[] = { "theta", "e", "m" };
    for (int w = 0; !r && w < 3; w++) {
        loco_state_path(state_dir, what[w], 0, path);
        r = pulse_ckpt_create_like(&out, path, src);
        for (size_t i = 0; !r && w > 0 && i < pulse_ckpt_count(out); i++) {
            const pulse_tensor *t = pulse_ckpt_tensor(out, i);
            if (t->nbytes)
                memset(t->data, 0, t->nbytes);   /* e = 0 and momentum = 0 (+0.0f is all zero bits) */
        }
        if (!r)
            r = pulse_ckpt_commit(out);
        pulse_ckpt_close(&out);
    }
    uint8_t id[32];
    if (!r) {
        loco_state_path(state_dir, "view", 0, path);
        r = loco_write_view(src, view, path, 0, id);
    }
    if (!r)
        r = loco_state_commit(state_dir, 0, view, id, 0);
    pulse_ckpt_close(&src);
    return r;
}

int pulse_loco_init_tensors(const char *state_dir, const pulse_loco_tensor *t, size_t n, int view)
{
    pulse_clear_error();
    if (!state_dir || (n && !t) || n > PULSE_ST_MAX_TENSORS || !pulse_loco_view_name(view))
        return pulse_fail(PULSE_ERR_INVALID, "loco init needs a state directory, tensors and a view");
    if (mkdir(state_dir, 0700) != 0 && errno != EEXIST)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot create %s", state_dir);
    int bad = state_dir_check(state_dir);
    if (bad)
        return bad;
    /* The tensors go through a checkpoint file in the state directory (then removed): the state
     * is made exactly as from a file, by pulse_loco_init. */
    pulse_tensor_spec *specs = calloc(n ? n : 1, sizeof *specs);
    if (!specs)
        return pulse_fail(PULSE_ERR_NOMEM, "%zu tensors", n);
    int r = 0;
    for (size_t i = 0; !r && i < n; i++) {
        if (!t[i].name || !t[i].data || t[i].ndim < 0 || t[i].ndim > PULSE_MAX_DIMS)
            r = pulse_fail(PULSE_ERR_INVALID, "tensor %zu: no name, no data or %d dimensions", i, t[i].ndim);
        specs[i].name = t[i].name;
        specs[i].dtype_name = "F32";
        specs[i].ndim = t[i].ndim;
        for (int d = 0; !r && d < t[i].ndim; d++)
            specs[i].shape[d] = t[i].shape[d];
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/init-%ld.safetensors", state_dir, (long)getpid());
    pulse_ckpt *c = NULL;
    if (!r)
        r = pulse_ckpt_create(&c, path, specs, n, NULL);
    for (size_t i = 0; !r && i < n; i++) {
        const pulse_tensor *x = pulse_ckpt_find(c, t[i].name);
        if (x && x->nbytes)
            memcpy(x->data, t[i].data, x->nbytes);
    }
    if (!r)
        r = pulse_ckpt_commit(c);
    pulse_ckpt_close(&c);
    free(specs);
    if (!r) {
        r = pulse_loco_init(state_dir, path, view);
        unlink(path);
    }
    return r;
}
