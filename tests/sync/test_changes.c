/* SPDX-License-Identifier: Apache-2.0 */
/* A step published from its changes (pulse_changes on the host, the GPU path's CPU twin): the patch byte for byte the diff's, a whole run and a run in parts followed bit-identically, bad lists refused with nothing published; on file://, or the test RGW with $PULSE_TEST_STORE. */
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "node/patch/patch_changes.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/cuda.h"
#include "pulseweights/keys.h"
#include "pulseweights/patch.h"
#include "pulseweights/sync.h"

static char dir[64];

static const char *at(const char *name)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

static uint32_t rng = 4242;
static uint32_t next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* The model: a BF16 tensor over three patch chunks (and three jobs of the host's find), an F32,
 * an F8 and a tiny BF16 one. Part 0 holds a.emb and c.gate, part 1 the other two. */
#define EMB (3000 * 700)
#define PROJ (1000 * 300)
#define GATE 5000
typedef struct model {
    uint16_t *emb;
    float *proj;
    uint8_t *gate;
    uint16_t tiny[7];
} model;

static void model_init(model *m)
{
    m->emb = malloc(EMB * 2);
    m->proj = malloc(PROJ * 4);
    m->gate = malloc(GATE);
    for (size_t i = 0; i < EMB; i++)
        m->emb[i] = (uint16_t)(0x3c00 + next() % 2048);
    for (size_t i = 0; i < PROJ; i++)
        m->proj[i] = (float)(next() % 100000) / 1e5f - 0.5f;
    for (size_t i = 0; i < GATE; i++)
        m->gate[i] = (uint8_t)(next() % 0x70);
    for (size_t i = 0; i < 7; i++)
        m->tiny[i] = (uint16_t)(0x4000 + i);
}

static void model_copy(model *dst, const model *src)
{
    model_init(dst);
    memcpy(dst->emb, src->emb, EMB * 2);
    memcpy(dst->proj, src->proj, PROJ * 4);
    memcpy(dst->gate, src->gate, GATE);
    memcpy(dst->tiny, src->tiny, sizeof dst->tiny);
}

static void model_free(model *m)
{
    free(m->emb);
    free(m->proj);
    free(m->gate);
}

/* One training step: about 1% of the weights move by a few units in the last place, either way. */
static void train(model *m)
{
    for (int k = 0; k < EMB / 100; k++)
        m->emb[next() % EMB] += (uint16_t)(next() % 2 ? 1 : 0xffff);
    for (int k = 0; k < PROJ / 100; k++) {
        uint32_t bits;
        size_t i = next() % PROJ;
        memcpy(&bits, &m->proj[i], 4);
        bits += 1 + next() % 5;
        memcpy(&m->proj[i], &bits, 4);
    }
    for (int k = 0; k < 40; k++)
        m->gate[next() % GATE] ^= 1;
    m->tiny[next() % 7]++;
}

/* Part PART's tensors (-1: all), in an order the wrap and the changes sort. */
static size_t describe(const model *m, int part, pulse_mem_tensor t[4])
{
    size_t n = 0;
    memset(t, 0, 4 * sizeof *t);
    if (part != 0)
        t[n++] = (pulse_mem_tensor){ .name = "d.tiny", .dtype_name = "BF16", .ndim = 1, .shape = { 7 },
                                     .data = (void *)m->tiny, .nbytes = sizeof m->tiny };
    if (part != 1)
        t[n++] = (pulse_mem_tensor){ .name = "a.emb", .dtype_name = "BF16", .ndim = 2, .shape = { 3000, 700 },
                                     .data = m->emb, .nbytes = EMB * 2 };
    if (part != 0)
        t[n++] = (pulse_mem_tensor){ .name = "b.proj", .dtype_name = "F32", .ndim = 2, .shape = { 1000, 300 },
                                     .data = m->proj, .nbytes = PROJ * 4 };
    if (part != 1)
        t[n++] = (pulse_mem_tensor){ .name = "c.gate", .dtype_name = "F8_E4M3", .ndim = 1, .shape = { GATE },
                                     .data = m->gate, .nbytes = GATE };
    return n;
}

static int files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        same = x == y;
        if (x == EOF || y == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* The patch of the host's change lists is the diff's, byte for byte, in both value codes and at
 * two chunk sizes; the lists and hashes are the tensors'. */
static void test_same_patch(void)
{
    model m0, m1;
    model_init(&m0);
    model_copy(&m1, &m0);
    train(&m1);
    pulse_mem_tensor t0[4], t1[4];
    size_t n = describe(&m0, -1, t0);
    describe(&m1, -1, t1);
    pulse_ckpt *c0 = NULL, *c1 = NULL, *layout = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c0, t0, n, PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_wrap(&c1, t1, n, PULSE_CKPT_READ));
    pulse_changes *ch = NULL;
    const pulse_tensor_changes *out = NULL;
    CHECK_OK(pulse_changes_open(&ch, t0, n, PULSE_MEM_HOST));
    CHECK_OK(pulse_changes_find(ch, t1, n, &out));
    uint64_t differ = 0, listed = 0;
    for (size_t i = 0; out && i < n; i++) {
        const pulse_tensor *a = pulse_ckpt_tensor(c0, i), *b = pulse_ckpt_tensor(c1, i);
        uint8_t h[32];
        CHECK_OK(pulse_tensor_hash(b, h));
        CHECK(!memcmp(h, out[i].hash, 32));
        CHECK(!strcmp(out[i].tensor.name, b->name));
        for (uint64_t e = 0; e < b->nelems; e++)
            differ += memcmp(a->data + e * a->elem_size, b->data + e * b->elem_size, a->elem_size) != 0;
        for (uint64_t q = 0; q < out[i].count; q++)
            listed += !memcmp(b->data + out[i].index[q] * b->elem_size,
                              (const uint8_t *)out[i].values + q * b->elem_size, b->elem_size);
    }
    CHECK(differ > EMB / 200);
    CHECK_EQ_INT(listed, differ);
    CHECK_OK(patch_changes_layout(out, n, &layout));
    uint8_t base[32], result[32];
    CHECK_OK(pulse_ckpt_state_id(c0, 2, base));
    CHECK_OK(pulse_ckpt_state_id(c1, 2, result));
    for (int values = 0; values < 2; values++)
        for (int small = 0; small < 2; small++) {
            pulse_diff_opts o;
            pulse_diff_opts_default(&o);
            o.values = values ? PULSE_VALUES_ULP : PULSE_VALUES_ABS;
            o.chunk_elems = small ? 4096 : PULSE_PATCH_DEFAULT_CHUNK;
            o.threads = 2;
            o.old_id = base;
            o.new_id = result;
            CHECK_OK(pulse_patch_diff(c0, c1, &o, at("diff.patch")));
            CHECK_OK(patch_from_changes(layout, out, n, &o, base, result, at("changes.patch")));
            CHECK(files_equal(at("diff.patch"), at("changes.patch")));
        }
    /* found again without an accept: the same lists; accepted, the base is NOW and nothing changes */
    uint64_t first = out ? out[0].count : 0;
    CHECK_OK(pulse_changes_find(ch, t1, n, &out));
    CHECK_EQ_INT(out[0].count, first);
    CHECK_OK(pulse_changes_accept(ch));
    CHECK_ERR(pulse_changes_accept(ch), PULSE_ERR_INVALID);
    CHECK_OK(pulse_changes_find(ch, t1, n, &out));
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_INT(out[i].count, 0);
    /* another layout; a tensor not element-wise; a device where there is none */
    CHECK_ERR(pulse_changes_find(ch, t1, n - 1, &out), PULSE_ERR_MISMATCH);
    pulse_changes *bad = NULL;
    pulse_mem_tensor opaque[5];
    memcpy(opaque, t0, sizeof t0);
    int64_t step = 3;
    opaque[n] = (pulse_mem_tensor){ .name = "step", .dtype_name = "I64", .ndim = 0, .data = &step, .nbytes = 8 };
    CHECK_ERR(pulse_changes_open(&bad, opaque, n + 1, PULSE_MEM_HOST), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "step") != NULL);
    int devices = 0;
    if (pulse_cuda_device_count(&devices) != 0)
        CHECK(pulse_changes_open(&bad, t0, n, PULSE_MEM_CUDA) != 0 && bad == NULL);
    pulse_changes_close(&ch);
    pulse_ckpt_close(&layout);
    pulse_ckpt_close(&c0);
    pulse_ckpt_close(&c1);
    model_free(&m0);
    model_free(&m1);
}

/* The store: $PULSE_TEST_STORE (the test RGW, tests/sync/changes_rgw.sh), else file:// in the test's directory. */
static const char *store_url(void)
{
    static char url[512];
    const char *env = getenv("PULSE_TEST_STORE");
    snprintf(url, sizeof url, "%s%s", env && *env ? "" : "file://", env && *env ? env : at("store"));
    return url;
}

static pulse_publisher *publisher(const char *run, const char *state, uint32_t part, uint32_t parts)
{
    const char *url = store_url();
    pulse_publish_opts po;
    pulse_publish_opts_default(&po);
    po.store_url = url;
    po.run = run;
    po.key_path = at("trainer.key");
    po.state_dir = state;
    po.threads = 2;
    po.part = part;
    po.parts = parts;
    pulse_publisher *p = NULL;
    CHECK_OK(pulse_publisher_open(&p, &po));
    return p;
}

/* A follower of RUN into tensors in memory holds M's state after a pull. */
static void follow_holds(const char *run, const char *state, const model *m, uint64_t step)
{
    const char *url = store_url();
    pulse_trust *trust = NULL;
    CHECK_OK(pulse_key_load_trust_dir(at("trainer.pub"), &trust));
    model f;
    model_init(&f);
    memset(f.emb, 0, EMB * 2);
    pulse_mem_tensor tf[4], tm[4];
    size_t n = describe(&f, -1, tf);
    describe(m, -1, tm);
    pulse_ckpt *cf = NULL, *cm = NULL;
    CHECK_OK(pulse_ckpt_wrap(&cf, tf, n, PULSE_CKPT_WRITE));
    CHECK_OK(pulse_ckpt_wrap(&cm, tm, n, PULSE_CKPT_READ));
    pulse_follow_opts o;
    pulse_follow_opts_default(&o);
    o.store_url = url;
    o.run = run;
    o.trust = trust;
    o.state_dir = state;
    o.weights = cf;
    o.threads = 2;
    pulse_follower *fol = NULL;
    pulse_sync_step held = { 0 };
    CHECK_OK(pulse_follower_open(&fol, &o));
    CHECK_OK(pulse_follower_pull(fol, NULL, &held));
    uint8_t id[32];
    CHECK_OK(pulse_ckpt_state_id(cm, 2, id));
    CHECK(!memcmp(held.result, id, 32));
    CHECK_EQ_INT(held.step, step);
    CHECK(!memcmp(f.emb, m->emb, EMB * 2) && !memcmp(f.proj, m->proj, PROJ * 4) && !memcmp(f.gate, m->gate, GATE)
          && !memcmp(f.tiny, m->tiny, sizeof f.tiny));
    pulse_follower_close(&fol);
    pulse_ckpt_close(&cf);
    pulse_ckpt_close(&cm);
    pulse_trust_free(&trust);
    model_free(&f);
}

static int copies_in(const char *state)
{
    DIR *d = opendir(state);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, "last-", 5);
    if (d)
        closedir(d);
    return n;
}

/* A whole run: step 0 from the tensors, then from changes, a keyframe on the way; the records
 * those of a publisher of the tensors; bad lists refused with nothing published. */
static void test_publish(void)
{
    model m;
    model_init(&m);
    pulse_mem_tensor t[4];
    size_t n = describe(&m, -1, t);
    pulse_publisher *p = publisher("rl", at("pub"), 0, 0), *ref = publisher("ref", at("ref"), 0, 0);
    pulse_sync_step s = { 0 }, r = { 0 };
    pulse_changes *ch = NULL;
    const pulse_tensor_changes *out = NULL;
    CHECK_OK(pulse_changes_open(&ch, t, n, PULSE_MEM_HOST));
    CHECK_OK(pulse_changes_find(ch, t, n, &out));
    CHECK_ERR(pulse_publisher_publish_changes(p, out, n, 0, &s), PULSE_ERR_INVALID);   /* nothing published yet */
    CHECK(strstr(pulse_last_error(), "keyframe") != NULL);
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c, t, n, PULSE_CKPT_READ));
    CHECK_OK(pulse_publisher_publish_ckpt(p, c, 0, 0, &s));
    CHECK_OK(pulse_publisher_publish_ckpt(ref, c, 0, 0, &r));
    for (int64_t step = 1; step <= 4; step++) {
        train(&m);
        CHECK_OK(pulse_changes_find(ch, t, n, &out));
        CHECK_OK(pulse_publisher_publish_changes(p, out, n, step, &s));
        CHECK_OK(pulse_changes_accept(ch));
        CHECK_OK(pulse_publisher_publish_ckpt(ref, c, step, 0, &r));
        CHECK_EQ_INT(s.kind, PULSE_RECORD_SYNC_PATCH);
        CHECK(!memcmp(s.result, r.result, 32) && !memcmp(s.base, r.base, 32));
        CHECK_EQ_INT(s.object_bytes, r.object_bytes);   /* the same patch, whichever way it was found */
        CHECK_EQ_INT(s.changes, r.changes);
        if (step == 2) {   /* a keyframe of this step, from the tensors; its copy goes with the next step */
            CHECK_OK(pulse_publisher_publish_ckpt(p, c, step, PULSE_PUBLISH_KEYFRAME, &s));
            CHECK_EQ_INT(s.kind, PULSE_RECORD_KEYFRAME);
            CHECK_EQ_INT(copies_in(at("pub")), 1);
        }
    }
    CHECK_EQ_INT(copies_in(at("pub")), 0);
    /* the same state again: already published, nothing new */
    CHECK_OK(pulse_changes_find(ch, t, n, &out));
    CHECK_OK(pulse_publisher_publish_changes(p, out, n, -1, &s));
    CHECK(s.already && s.step == 4);

    /* refused lists: nothing is published */
    model held;
    model_copy(&held, &m);
    train(&m);
    CHECK_OK(pulse_changes_find(ch, t, n, &out));
    pulse_tensor_changes bad[4];
    memcpy(bad, out, sizeof bad);
    int64_t *idx = malloc(out[0].count * sizeof *idx);
    memcpy(idx, out[0].index, out[0].count * sizeof *idx);
    bad[0].index = idx;
    idx[1] = idx[0];
    CHECK_ERR(pulse_publisher_publish_changes(p, bad, n, 5, &s), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "a.emb") != NULL && strstr(pulse_last_error(), "not after") != NULL);
    memcpy(idx, out[0].index, out[0].count * sizeof *idx);
    idx[out[0].count - 1] = EMB;
    CHECK_ERR(pulse_publisher_publish_changes(p, bad, n, 5, &s), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "beyond") != NULL);
    memcpy(bad, out, sizeof bad);
    uint16_t *d = malloc(out[0].count * 2);
    memcpy(d, out[0].deltas, out[0].count * 2);
    d[out[0].count / 2] = 0;
    bad[0].deltas = d;
    CHECK_ERR(pulse_publisher_publish_changes(p, bad, n, 5, &s), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "delta 0") != NULL);
    bad[0].deltas = NULL;
    CHECK_ERR(pulse_publisher_publish_changes(p, bad, n, 5, &s), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "deltas") != NULL);
    memcpy(bad, out, sizeof bad);
    bad[0] = out[1];
    bad[1] = out[0];
    CHECK_ERR(pulse_publisher_publish_changes(p, bad, n, 5, &s), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "name order") != NULL);
    CHECK_ERR(pulse_publisher_publish_changes(p, out, n, 3, &s), PULSE_ERR_INVALID);   /* not after step 4 */
    free(idx);
    free(d);
    follow_holds("rl", at("fol"), &held, 4);   /* ... from the keyframe's chain, step 4 */
    CHECK_OK(pulse_publisher_publish_changes(p, out, n, 5, &s));
    CHECK_OK(pulse_changes_accept(ch));
    follow_holds("rl", at("fol"), &m, 5);
    follow_holds("rl", at("fol-new"), &m, 5);   /* a new follower: keyframe 2, then 3-5 */
    model_free(&held);
    pulse_changes_close(&ch);
    pulse_ckpt_close(&c);
    pulse_publisher_close(&p);
    pulse_publisher_close(&ref);
    model_free(&m);
}

/* A run in two parts, each published from its changes after its keyframe, committed step by
 * step and followed whole; a part restarted without its base. */
static void test_parts(void)
{
    model m;
    model_init(&m);
    pulse_mem_tensor t[2][4];
    size_t n[2];
    pulse_publisher *part[2], *committer = publisher("split", at("commit"), 0, 0);
    pulse_changes *ch[2];
    pulse_sync_step s = { 0 };
    for (int i = 0; i < 2; i++) {
        n[i] = describe(&m, i, t[i]);
        part[i] = publisher("split", at(i ? "part1" : "part0"), (uint32_t)i, 2);
        pulse_ckpt *c = NULL;
        CHECK_OK(pulse_ckpt_wrap(&c, t[i], n[i], PULSE_CKPT_READ));
        CHECK_OK(pulse_publisher_publish_ckpt(part[i], c, 0, 0, &s));
        pulse_ckpt_close(&c);
        CHECK_OK(pulse_changes_open(&ch[i], t[i], n[i], PULSE_MEM_HOST));
    }
    CHECK_OK(pulse_publisher_commit(committer, 2, 0, 10, &s));
    for (int64_t step = 1; step <= 3; step++) {
        train(&m);
        for (int i = 0; i < 2; i++) {
            const pulse_tensor_changes *out = NULL;
            CHECK_OK(pulse_changes_find(ch[i], t[i], n[i], &out));
            CHECK_OK(pulse_publisher_publish_changes(part[i], out, n[i], step, &s));
            CHECK_OK(pulse_changes_accept(ch[i]));
        }
        CHECK_OK(pulse_publisher_commit(committer, 2, step, 10, &s));
        CHECK_EQ_INT(s.kind, PULSE_RECORD_SYNC_PATCH);
    }
    follow_holds("split", at("fol-split"), &m, 3);

    /* Part 1's process dies and its copy on the device with it: restarted, it has no base to find
     * changes against, and its next step from the tensors is a keyframe only. The commit says what
     * to do (a keyframe in every part); part 0 adds one, the step commits, and both go on from
     * changes opened over that step. */
    pulse_changes_close(&ch[1]);
    pulse_publisher_close(&part[1]);
    part[1] = publisher("split", at("part1"), 1, 2);
    train(&m);
    const pulse_tensor_changes *out0 = NULL;
    CHECK_OK(pulse_changes_find(ch[0], t[0], n[0], &out0));
    CHECK_OK(pulse_publisher_publish_changes(part[0], out0, n[0], 4, &s));
    CHECK_OK(pulse_changes_accept(ch[0]));
    pulse_ckpt *c1 = NULL, *c0 = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c1, t[1], n[1], PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_wrap(&c0, t[0], n[0], PULSE_CKPT_READ));
    CHECK_OK(pulse_publisher_publish_ckpt(part[1], c1, 4, 0, &s));
    CHECK_EQ_INT(s.kind, PULSE_RECORD_KEYFRAME);
    CHECK_ERR(pulse_publisher_commit(committer, 2, 4, 1, &s), PULSE_ERR_MISMATCH);
    CHECK(strstr(pulse_last_error(), "keyframe in every part") != NULL);
    CHECK_OK(pulse_publisher_publish_ckpt(part[0], c0, 4, PULSE_PUBLISH_KEYFRAME, &s));
    CHECK_OK(pulse_publisher_commit(committer, 2, 4, 10, &s));
    CHECK_EQ_INT(s.kind, PULSE_RECORD_KEYFRAME);
    CHECK_OK(pulse_changes_open(&ch[1], t[1], n[1], PULSE_MEM_HOST));
    train(&m);
    for (int i = 0; i < 2; i++) {
        const pulse_tensor_changes *out = NULL;
        CHECK_OK(pulse_changes_find(ch[i], t[i], n[i], &out));
        CHECK_OK(pulse_publisher_publish_changes(part[i], out, n[i], 5, &s));
        CHECK_OK(pulse_changes_accept(ch[i]));
    }
    CHECK_OK(pulse_publisher_commit(committer, 2, 5, 10, &s));
    CHECK_EQ_INT(s.kind, PULSE_RECORD_SYNC_PATCH);
    follow_holds("split", at("fol-split"), &m, 5);
    pulse_ckpt_close(&c0);
    pulse_ckpt_close(&c1);
    for (int i = 0; i < 2; i++) {
        pulse_changes_close(&ch[i]);
        pulse_publisher_close(&part[i]);
    }
    pulse_publisher_close(&committer);
    model_free(&m);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-changes.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    pulse_secret_key *k = NULL;
    CHECK_OK(pulse_key_generate(&k));
    CHECK_OK(pulse_key_save(k, at("trainer"), "trainer"));
    pulse_key_free(&k);
    test_same_patch();
    test_publish();
    test_parts();
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_done("sync-changes");
}
