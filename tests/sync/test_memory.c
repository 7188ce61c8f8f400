/* SPDX-License-Identifier: Apache-2.0 */
/* Tensors in memory: pulse_ckpt_wrap, publish from memory and follow into memory through a file:// store. */
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "dir_entries.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/patch.h"
#include "pulseweights/record.h"
#include "pulseweights/sync.h"
#include "node/sync/sync_internal.h"

static char dir[64];

static const char *at(const char *name)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Writes tensors in memory as one safetensors file at PATH, through the publisher's own
 * copy-to-one-file (sync_copy_to_file) over a read-only wrap. */
static int write_file(const pulse_mem_tensor *t, size_t n, const char *path)
{
    pulse_ckpt *w = NULL, *f = NULL;
    int r = pulse_ckpt_wrap(&w, t, n, PULSE_CKPT_READ);
    if (!r)
        r = sync_copy_to_file(w, path, &f);
    if (!r)
        r = pulse_ckpt_commit(f);
    pulse_ckpt_close(&f);
    pulse_ckpt_close(&w);
    return r;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

/* The trainer's model: three tensors in separate buffers, one of each patched width. */
typedef struct model {
    uint16_t emb[64 * 16];     /* BF16 */
    float proj[8 * 32];        /* F32 */
    uint8_t gate[100];         /* F8_E4M3 */
    int64_t count[1];          /* I64: carried as opaque bytes */
} model;

/* Given in an order that is not the canonical one: the wrap sorts. */
static void describe(model *m, pulse_mem_tensor t[4], const char *proj_dtype)
{
    memset(t, 0, 4 * sizeof *t);
    t[0] = (pulse_mem_tensor){ .name = "w.proj", .dtype_name = proj_dtype, .ndim = 2, .shape = { 8, 32 },
                               .data = m->proj, .nbytes = sizeof m->proj };
    t[1] = (pulse_mem_tensor){ .name = "a.emb", .dtype_name = "BF16", .ndim = 2, .shape = { 64, 16 },
                               .data = m->emb, .nbytes = sizeof m->emb };
    t[2] = (pulse_mem_tensor){ .name = "m.gate", .dtype_name = "F8_E4M3", .ndim = 1, .shape = { 100 },
                               .data = m->gate, .nbytes = sizeof m->gate };
    t[3] = (pulse_mem_tensor){ .name = "step", .dtype_name = "I64", .ndim = 0,
                               .data = m->count, .nbytes = sizeof m->count };
}

/* Field by field: the struct's padding is not the model. */
static int same(const model *a, const model *b)
{
    return !memcmp(a->emb, b->emb, sizeof a->emb) && !memcmp(a->proj, b->proj, sizeof a->proj) &&
           !memcmp(a->gate, b->gate, sizeof a->gate) && a->count[0] == b->count[0];
}

static uint32_t rng = 12345;
static uint32_t next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

static void init_model(model *m)
{
    for (size_t i = 0; i < 64 * 16; i++)
        m->emb[i] = (uint16_t)(0x3c00 + next() % 512);
    for (size_t i = 0; i < 8 * 32; i++)
        m->proj[i] = (float)(next() % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < 100; i++)
        m->gate[i] = (uint8_t)(next() % 0x70);
    m->count[0] = 0;
}

/* One training step: a few weights move by a unit in the last place. */
static void train(model *m)
{
    for (int k = 0; k < 20; k++)
        m->emb[next() % (64 * 16)] += 1;
    for (int k = 0; k < 10; k++) {
        uint32_t bits;
        size_t i = next() % (8 * 32);
        memcpy(&bits, &m->proj[i], 4);
        bits += 3;
        memcpy(&m->proj[i], &bits, 4);
    }
    m->gate[next() % 100] ^= 1;
    m->count[0]++;
}

static void test_wrap(void)
{
    model m;
    init_model(&m);
    pulse_mem_tensor t[4];
    describe(&m, t, "F32");
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c, t, 4, PULSE_CKPT_READ));
    CHECK_EQ_INT(pulse_ckpt_count(c), 4);
    CHECK(!strcmp(pulse_ckpt_tensor(c, 0)->name, "a.emb"));
    CHECK(!strcmp(pulse_ckpt_tensor(c, 3)->name, "w.proj"));
    CHECK(pulse_ckpt_find(c, "w.proj")->data == (uint8_t *)m.proj);   /* borrowed, not copied */
    CHECK_EQ_INT(pulse_ckpt_find(c, "a.emb")->dtype, PULSE_DT_BF16);
    CHECK_EQ_INT(pulse_ckpt_find(c, "step")->ndim, 0);
    CHECK_EQ_INT(pulse_ckpt_nfiles(c), 0);
    CHECK(pulse_ckpt_file_path(c, 0) == NULL);
    CHECK(!strcmp(pulse_ckpt_metadata(c), "{}"));
    CHECK_OK(pulse_ckpt_sync(c));
    CHECK_ERR(pulse_ckpt_commit(c), PULSE_ERR_INVALID);
    pulse_ckpt *like = NULL;
    CHECK_ERR(pulse_ckpt_create_like(&like, at("like.safetensors"), c), PULSE_ERR_INVALID);

    /* The state id is the one of the same tensors in a file. */
    uint8_t id_mem[32], id_file[32];
    CHECK_OK(pulse_ckpt_state_id(c, 2, id_mem));
    CHECK_OK(write_file(t, 4, at("model.safetensors")));
    pulse_ckpt *f = NULL;
    CHECK_OK(pulse_ckpt_open(&f, at("model.safetensors"), PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_state_id(f, 1, id_file));
    CHECK(!memcmp(id_mem, id_file, 32));

    /* Diff memory -> memory, apply into a writable wrap of a copy of the old state. */
    model next_m = m, target = m;
    train(&next_m);
    pulse_mem_tensor tn[4], tt[4];
    describe(&next_m, tn, "F32");
    describe(&target, tt, "F32");
    pulse_ckpt *cn = NULL, *ct = NULL;
    CHECK_OK(pulse_ckpt_wrap(&cn, tn, 4, PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_wrap(&ct, tt, 4, PULSE_CKPT_WRITE));
    CHECK_OK(pulse_patch_diff(c, cn, NULL, at("p.patch")));
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, at("p.patch")));
    CHECK_OK(pulse_patch_verify(p, ct, 1));
    CHECK_OK(pulse_patch_apply(p, ct, 2));
    CHECK(same(&target, &next_m));
    pulse_patch_close(&p);
    pulse_ckpt_close(&cn);
    pulse_ckpt_close(&ct);
    pulse_ckpt_close(&f);
    pulse_ckpt_close(&c);
    CHECK(c == NULL);

    /* Refusals. */
    pulse_mem_tensor bad[4];
    describe(&m, bad, "F33");
    CHECK_ERR(pulse_ckpt_wrap(&c, bad, 4, 0), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "F33") != NULL);
    describe(&m, bad, "BF16");   /* 8x32 BF16 is 512 bytes, the buffer says 1024 */
    CHECK_ERR(pulse_ckpt_wrap(&c, bad, 4, 0), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "w.proj") != NULL);
    describe(&m, bad, "F32");
    bad[2].name = "a.emb";
    CHECK_ERR(pulse_ckpt_wrap(&c, bad, 4, 0), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "twice") != NULL);
    describe(&m, bad, "F32");
    bad[3].name = "__metadata__";
    CHECK_ERR(pulse_ckpt_wrap(&c, bad, 4, 0), PULSE_ERR_INVALID);
    describe(&m, bad, "F32");
    bad[1].data = NULL;
    CHECK_ERR(pulse_ckpt_wrap(&c, bad, 4, 0), PULSE_ERR_INVALID);
    describe(&m, bad, "F32");
    bad[0].ndim = PULSE_MAX_DIMS + 1;
    CHECK_ERR(pulse_ckpt_wrap(&c, bad, 4, 0), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_ckpt_wrap(&c, bad, 4, 8), PULSE_ERR_INVALID);
    /* Two names over one buffer (tied weights): fine to read, refused as a target. */
    describe(&m, bad, "F32");
    bad[2] = bad[1];
    bad[2].name = "tied.emb";
    CHECK_OK(pulse_ckpt_wrap(&c, bad, 4, PULSE_CKPT_READ));
    pulse_ckpt_close(&c);
    CHECK_ERR(pulse_ckpt_wrap(&c, bad, 4, PULSE_CKPT_WRITE), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "share memory") != NULL);
    CHECK(c == NULL);
    /* No tensors at all is a valid (empty) checkpoint. */
    CHECK_OK(pulse_ckpt_wrap(&c, NULL, 0, PULSE_CKPT_WRITE));
    CHECK_OK(pulse_ckpt_state_id(c, 1, id_mem));
    pulse_ckpt_close(&c);
}

/* Names of the run's objects, to find the ones a publish added. */
static int list_objects(const char *run_dir, char names[][300], int cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/objects", run_dir);
    return dir_names(path, names, cap);
}

static int follower(pulse_follower **out, pulse_trust *trust, const char *state, pulse_ckpt *w)
{
    char url[128];
    snprintf(url, sizeof url, "file://%s", at("store"));
    pulse_follow_opts o;
    pulse_follow_opts_default(&o);
    o.store_url = url;
    o.run = "rl";
    o.trust = trust;
    o.state_dir = state;
    o.weights = w;
    o.threads = 2;
    return pulse_follower_open(out, &o);
}

static void test_sync(void)
{
    char url[128];
    snprintf(url, sizeof url, "file://%s", at("store"));
    pulse_secret_key *k = NULL;
    CHECK_OK(pulse_key_generate(&k));
    CHECK_OK(pulse_key_save(k, at("trainer"), "trainer"));
    pulse_key_free(&k);
    CHECK_OK(pulse_key_generate(&k));
    CHECK_OK(pulse_key_save(k, at("other"), "other"));
    pulse_key_free(&k);
    pulse_trust *trust = NULL, *wrong = NULL;
    CHECK_OK(pulse_key_load_trust_dir(at("trainer.pub"), &trust));
    CHECK_OK(pulse_key_load_trust_dir(at("other.pub"), &wrong));

    pulse_publish_opts po;
    pulse_publish_opts_default(&po);
    po.store_url = url;
    po.run = "rl";
    po.key_path = at("trainer.key");
    po.state_dir = at("pub");
    po.threads = 2;
    pulse_publisher *pub = NULL;
    CHECK_OK(pulse_publisher_open(&pub, &po));

    static model trainer, inference, wrong_shape;
    init_model(&trainer);
    memset(&inference, 0x55, sizeof inference);   /* a fresh model: whatever is in memory */
    pulse_mem_tensor tt[4], ti[4], tw[4];
    describe(&trainer, tt, "F32");
    describe(&inference, ti, "F32");
    pulse_ckpt *ct = NULL, *ci = NULL;
    CHECK_OK(pulse_ckpt_wrap(&ct, tt, 4, PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_wrap(&ci, ti, 4, PULSE_CKPT_WRITE));

    pulse_follower *fol = NULL;
    CHECK_OK(follower(&fol, trust, at("fol"), ci));
    /* Options refused: a read-only wrap, both or neither of weights and weights_path. */
    pulse_follower *bad = NULL;
    CHECK_ERR(follower(&bad, trust, at("fol2"), ct), PULSE_ERR_INVALID);
    pulse_follow_opts o;
    pulse_follow_opts_default(&o);
    o.store_url = url;
    o.run = "rl";
    o.trust = trust;
    o.state_dir = at("fol2");
    CHECK_ERR(pulse_follower_open(&bad, &o), PULSE_ERR_INVALID);
    o.weights = ci;
    o.weights_path = at("w.safetensors");
    CHECK_ERR(pulse_follower_open(&bad, &o), PULSE_ERR_INVALID);

    char objs_before[64][300], objs_after[64][300], run_dir[256];
    snprintf(run_dir, sizeof run_dir, "%s/rl", at("store"));
    uint8_t ids[4][32];
    for (int step = 0; step < 3; step++) {
        if (step)
            train(&trainer);
        pulse_sync_step s, held;
        CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
        CHECK_EQ_INT(s.step, step);
        CHECK_EQ_INT(s.kind, step ? PULSE_RECORD_SYNC_PATCH : PULSE_RECORD_KEYFRAME);
        CHECK_OK(pulse_ckpt_state_id(ct, 1, ids[step]));
        CHECK(!memcmp(s.result, ids[step], 32));
        size_t applied = 0;
        CHECK_OK(pulse_follower_pull(fol, &applied, &held));
        CHECK_EQ_INT(applied, 1);
        CHECK_EQ_INT(held.step, step);
        CHECK(!memcmp(held.result, ids[step], 32));
        CHECK(same(&inference, &trainer));
    }
    /* The follower keeps its own copies of the option strings: a buffer the caller reuses after
     * pulse_follower_open (as at() does, and as follower()'s URL goes out of scope) changes
     * nothing. Here the state directory's name is overwritten with one that cannot be made, and
     * a fresh follower still restores the keyframe through its state directory and applies the
     * patches, each fetched into the state directory's fetch.data (kept for the next step) and
     * staged through an unlinked temporary there: nothing else is left. */
    {
        static model third;
        memset(&third, 0x33, sizeof third);
        pulse_mem_tensor t3[4];
        describe(&third, t3, "F32");
        pulse_ckpt *c3 = NULL;
        CHECK_OK(pulse_ckpt_wrap(&c3, t3, 4, PULSE_CKPT_WRITE));
        char sd[512];
        snprintf(sd, sizeof sd, "%s", at("fol3"));
        pulse_follower *f3 = NULL;
        CHECK_OK(follower(&f3, trust, sd, c3));
        snprintf(sd, sizeof sd, "/nonexistent/state");
        size_t applied = 0;
        CHECK_OK(pulse_follower_pull(f3, &applied, NULL));
        CHECK_EQ_INT(applied, 3);
        CHECK(same(&third, &trainer));
        pulse_follower_close(&f3);
        pulse_ckpt_close(&c3);
        DIR *d = opendir(at("fol3"));
        int temporaries = 0;
        for (struct dirent *e; d && (e = readdir(d));)
            temporaries += (!strncmp(e->d_name, "fetch", 5) && strcmp(e->d_name, "fetch.data")) ||
                           !strncmp(e->d_name, "keyframe", 8) || !strncmp(e->d_name, "staged", 6);
        CHECK(d != NULL && temporaries == 0);
        if (d)
            closedir(d);
    }
    /* Publishing the same state again is a no-op; the copy in the state dir is named by the id. */
    pulse_sync_step s;
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    CHECK(s.already);
    char hex[65], last[256];
    snprintf(last, sizeof last, "%s/last-%s.safetensors", at("pub"), pulse_id_hex(ids[2], hex));
    CHECK(access(last, F_OK) == 0);
    CHECK(access(at("pub/snapshot.safetensors"), F_OK) != 0);

    /* Step 3: its patch object corrupted in the store. The pull refuses; memory unchanged. */
    int nb = list_objects(run_dir, objs_before, 64);
    train(&trainer);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    CHECK_OK(pulse_ckpt_state_id(ct, 1, ids[3]));
    int na = list_objects(run_dir, objs_after, 64);
    CHECK_EQ_INT(na, nb + 2);   /* the patch and its head */
    int changed = 0;
    for (int i = 0; i < na; i++) {
        int seen = 0;
        for (int j = 0; j < nb; j++)
            seen |= !strcmp(objs_after[i], objs_before[j]);
        if (seen)
            continue;
        char obj[1024];
        snprintf(obj, sizeof obj, "%.256s/objects/%.300s", run_dir, objs_after[i]);
        FILE *fp = fopen(obj, "r+b");
        CHECK(fp != NULL);
        if (fp) {
            fseek(fp, 40, SEEK_SET);
            int ch = fgetc(fp);
            fseek(fp, 40, SEEK_SET);
            fputc(ch ^ 0x10, fp);
            fclose(fp);
            changed++;
        }
    }
    CHECK_EQ_INT(changed, 2);
    model before = inference;
    size_t applied = 9;
    CHECK_ERR(pulse_follower_pull(fol, &applied, NULL), PULSE_ERR_CORRUPT);
    CHECK_EQ_INT(applied, 0);
    CHECK(same(&inference, &before));
    pulse_follower_close(&fol);

    /* A follower trusting another key finds nothing to start from; memory untouched. */
    memset(&inference, 0x55, sizeof inference);
    before = inference;
    CHECK_OK(follower(&fol, wrong, at("fol3"), ci));
    CHECK_ERR(pulse_follower_pull(fol, NULL, NULL), PULSE_ERR_NOTFOUND);
    CHECK(same(&inference, &before));
    pulse_follower_close(&fol);

    /* Tensors that are not the run's: refused before anything is written. */
    memset(&wrong_shape, 0x77, sizeof wrong_shape);
    describe(&wrong_shape, tw, "F32");
    tw[0].shape[0] = 32;   /* 32 x 8 instead of 8 x 32 */
    tw[0].shape[1] = 8;
    pulse_ckpt *cw = NULL;
    CHECK_OK(pulse_ckpt_wrap(&cw, tw, 4, PULSE_CKPT_WRITE));
    model wbefore = wrong_shape;
    CHECK_OK(follower(&fol, trust, at("fol4"), cw));
    CHECK_ERR(pulse_follower_pull(fol, NULL, NULL), PULSE_ERR_MISMATCH);
    CHECK(strstr(pulse_last_error(), "w.proj") != NULL);
    CHECK(same(&wrong_shape, &wbefore));
    pulse_follower_close(&fol);
    pulse_ckpt_close(&cw);
    /* One tensor fewer: refused too. */
    CHECK_OK(pulse_ckpt_wrap(&cw, tw + 1, 3, PULSE_CKPT_WRITE));
    CHECK_OK(follower(&fol, trust, at("fol5"), cw));
    CHECK_ERR(pulse_follower_pull(fol, NULL, NULL), PULSE_ERR_MISMATCH);
    CHECK(same(&wrong_shape, &wbefore));
    pulse_follower_close(&fol);
    pulse_ckpt_close(&cw);

    /* A keyframe of step 4 lets a fresh follower reach the trainer past the damaged step; the
     * path-taking publish is the same publisher (a file of the trainer's tensors). */
    train(&trainer);
    CHECK_OK(write_file(tt, 4, at("step4.safetensors")));
    CHECK_OK(pulse_publisher_publish(pub, at("step4.safetensors"), -1, PULSE_PUBLISH_KEYFRAME, &s));
    CHECK_EQ_INT(s.step, 4);
    memset(&inference, 0, sizeof inference);
    CHECK_OK(follower(&fol, trust, at("fol6"), ci));
    pulse_sync_step held;
    CHECK_OK(pulse_follower_pull(fol, &applied, &held));
    CHECK_EQ_INT(held.step, 4);
    CHECK(same(&inference, &trainer));
    pulse_follower_close(&fol);
    /* The same state dir and the same memory: it goes on from the state it last applied
     * (nothing to do), and a step published later is applied as a patch. */
    CHECK_OK(follower(&fol, trust, at("fol6"), ci));
    CHECK_OK(pulse_follower_pull(fol, &applied, &held));
    CHECK_EQ_INT(applied, 0);
    CHECK_EQ_INT(held.step, 4);
    train(&trainer);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    CHECK_OK(pulse_follower_pull(fol, &applied, &held));
    CHECK_EQ_INT(applied, 1);
    CHECK_EQ_INT(held.step, 5);
    CHECK(same(&inference, &trainer));
    /* The caller wrote its buffers behind the follower's back: the next patch is refused
     * (its base is not what memory holds) and memory is left as the caller made it. */
    inference.proj[0] = 42.0f;
    before = inference;
    train(&trainer);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    CHECK_ERR(pulse_follower_pull(fol, &applied, NULL), PULSE_ERR_MISMATCH);
    CHECK(same(&inference, &before));
    pulse_follower_close(&fol);

    pulse_ckpt_close(&ct);
    pulse_ckpt_close(&ci);
    pulse_publisher_close(&pub);
    pulse_trust_free(&trust);
    pulse_trust_free(&wrong);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-memory.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_wrap();
    test_sync();
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_done("sync-memory");
}
