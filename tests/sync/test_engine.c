/* SPDX-License-Identifier: Apache-2.0 */
/* Engine-held weights: a follower with on_patch / on_keyframe callbacks delivers verified steps to weights it never holds, through a file:// store. */
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

typedef struct model {
    uint16_t emb[96 * 16];     /* BF16 */
    float proj[8 * 32];        /* F32 */
} model;

static void describe(model *m, pulse_mem_tensor t[2])
{
    memset(t, 0, 2 * sizeof *t);
    t[0] = (pulse_mem_tensor){ .name = "a.emb", .dtype_name = "BF16", .ndim = 2, .shape = { 96, 16 },
                               .data = m->emb, .nbytes = sizeof m->emb };
    t[1] = (pulse_mem_tensor){ .name = "w.proj", .dtype_name = "F32", .ndim = 2, .shape = { 8, 32 },
                               .data = m->proj, .nbytes = sizeof m->proj };
}

static int same(const model *a, const model *b)
{
    return !memcmp(a->emb, b->emb, sizeof a->emb) && !memcmp(a->proj, b->proj, sizeof a->proj);
}

static uint32_t rng = 777;
static uint32_t next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

static void train(model *m)
{
    for (int k = 0; k < 30; k++)
        m->emb[next() % (96 * 16)] += 1;
    for (int k = 0; k < 5; k++) {
        uint32_t bits;
        size_t i = next() % (8 * 32);
        memcpy(&bits, &m->proj[i], 4);
        bits -= 2;
        memcpy(&m->proj[i], &bits, 4);
    }
}

/* The engine: its own weights, written only through the two callbacks; it applies a patch
 * without pulse reading its weights (trust_base_id + skip_result_check: the follower said
 * which state it holds). */
typedef struct engine {
    model w;
    int patches, keyframes;
    int refuse;                 /* the next on_patch refuses (and writes nothing) */
    uint64_t last_step;
    uint8_t state[32];
} engine;

static int on_keyframe(void *ctx, const pulse_sync_step *s, const pulse_ckpt *k)
{
    engine *e = ctx;
    const pulse_tensor *a = pulse_ckpt_find(k, "a.emb"), *b = pulse_ckpt_find(k, "w.proj");
    if (!a || !b || a->nbytes != sizeof e->w.emb || b->nbytes != sizeof e->w.proj)
        return 1;
    memcpy(e->w.emb, a->data, a->nbytes);
    memcpy(e->w.proj, b->data, b->nbytes);
    e->keyframes++;
    e->last_step = s->step;
    memcpy(e->state, s->result, 32);
    return 0;
}

static int on_patch(void *ctx, const pulse_sync_step *s, const pulse_patch *p)
{
    engine *e = ctx;
    if (e->refuse) {
        e->refuse = 0;
        return 1;
    }
    if (memcmp(s->base, e->state, 32))
        return 1;   /* not the state this engine holds: the follower must never deliver it */
    pulse_mem_tensor t[2];
    describe(&e->w, t);
    pulse_ckpt *w = NULL;
    int r = pulse_ckpt_wrap(&w, t, 2, PULSE_CKPT_WRITE);
    pulse_patch_apply_opts o;
    pulse_patch_apply_opts_default(&o);
    o.trust_base_id = e->state;
    o.skip_result_check = 1;
    if (!r)
        r = pulse_patch_apply_ex(p, w, &o);
    pulse_ckpt_close(&w);
    if (r)
        return 1;
    e->patches++;
    e->last_step = s->step;
    memcpy(e->state, s->result, 32);
    return 0;
}

static pulse_follow_opts engine_opts(const char *url, pulse_trust *trust, const char *state, engine *e)
{
    pulse_follow_opts o;
    pulse_follow_opts_default(&o);
    o.store_url = url;
    o.run = "rl";
    o.trust = trust;
    o.state_dir = state;
    o.threads = 2;
    o.on_patch = on_patch;
    o.on_keyframe = on_keyframe;
    o.engine_ctx = e;
    return o;
}

/* Files under DIR whose name ends in .safetensors (the follower keeps no weights). */
static int weight_files(const char *d)
{
    DIR *h = opendir(d);
    int n = 0;
    struct dirent *x;
    while (h && (x = readdir(h))) {
        size_t l = strlen(x->d_name);
        n += l > 12 && !strcmp(x->d_name + l - 12, ".safetensors");
    }
    if (h)
        closedir(h);
    return n;
}

/* Names of the run's objects, to find the ones a publish added. */
static int list_objects(const char *run_dir, char names[][300], int cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/objects", run_dir);
    return dir_names(path, names, cap);
}

/* Flips a byte near the end of the largest object that is in AFTER and not in BEFORE (a step
 * adds its patch and the patch's head; the follower of whole tensors reads the patch). */
static void corrupt_added_object(const char *run_dir, char before[][300], int nb, char after[][300], int na)
{
    const char *added = NULL;
    long most = -1;
    char p[1024];
    for (int i = 0; i < na; i++) {
        int seen = 0;
        for (int j = 0; j < nb; j++)
            seen |= !strcmp(after[i], before[j]);
        struct stat st;
        snprintf(p, sizeof p, "%.400s/objects/%.300s", run_dir, after[i]);
        if (!seen && stat(p, &st) == 0 && st.st_size > most) {
            most = st.st_size;
            added = after[i];
        }
    }
    CHECK(added != NULL);
    snprintf(p, sizeof p, "%.400s/objects/%.300s", run_dir, added ? added : "none");
    FILE *fp = fopen(p, "r+b");
    CHECK(fp != NULL);
    if (fp) {
        fseek(fp, -3, SEEK_END);
        int ch = fgetc(fp);
        fseek(fp, -3, SEEK_END);
        fputc(ch ^ 0x20, fp);
        fclose(fp);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-engine.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    char url[128], run_dir[256];
    snprintf(url, sizeof url, "file://%s", at("store"));
    snprintf(run_dir, sizeof run_dir, "%s/rl", at("store"));
    pulse_secret_key *k = NULL;
    CHECK_OK(pulse_key_generate(&k));
    CHECK_OK(pulse_key_save(k, at("trainer"), "trainer"));
    pulse_key_free(&k);
    pulse_trust *trust = NULL;
    CHECK_OK(pulse_key_load_trust_dir(at("trainer.pub"), &trust));

    pulse_publish_opts po;
    pulse_publish_opts_default(&po);
    po.store_url = url;
    po.run = "rl";
    po.key_path = at("trainer.key");
    po.state_dir = at("pub");
    pulse_publisher *pub = NULL;
    CHECK_OK(pulse_publisher_open(&pub, &po));
    static model trainer;
    for (size_t i = 0; i < 96 * 16; i++)
        trainer.emb[i] = (uint16_t)(0x3c00 + next() % 512);
    for (size_t i = 0; i < 8 * 32; i++)
        trainer.proj[i] = (float)(next() % 1000) / 1000.0f;
    pulse_mem_tensor tt[2];
    describe(&trainer, tt);
    pulse_ckpt *ct = NULL;
    CHECK_OK(pulse_ckpt_wrap(&ct, tt, 2, PULSE_CKPT_READ));

    /* Options: both callbacks, and no weights beside them. */
    static engine e;
    memset(&e, 0x55, sizeof e.w);
    pulse_follower *f = NULL;
    pulse_follow_opts o = engine_opts(url, trust, at("fol"), &e);
    o.on_keyframe = NULL;
    CHECK_ERR(pulse_follower_open(&f, &o), PULSE_ERR_INVALID);
    o = engine_opts(url, trust, at("fol"), &e);
    o.weights_path = at("w.safetensors");
    CHECK_ERR(pulse_follower_open(&f, &o), PULSE_ERR_INVALID);
    CHECK(f == NULL);

    o = engine_opts(url, trust, at("fol"), &e);
    CHECK_OK(pulse_follower_open(&f, &o));
    pulse_sync_step s, held;
    size_t applied = 0;
    /* Steps 0..3: a keyframe, then patches, each delivered once and bit for bit. */
    for (int step = 0; step < 4; step++) {
        if (step)
            train(&trainer);
        CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
        CHECK_OK(pulse_follower_pull(f, &applied, &held));
        CHECK_EQ_INT(applied, 1);
        CHECK_EQ_INT(held.step, step);
        CHECK(same(&e.w, &trainer));
        CHECK(!memcmp(e.state, s.result, 32));
    }
    CHECK_EQ_INT(e.keyframes, 1);
    CHECK_EQ_INT(e.patches, 3);
    CHECK_EQ_INT(weight_files(at("fol")), 0);   /* no copy of the model in the state directory */

    /* A corrupt patch object: refused before the engine sees any of it. */
    static char objs_before[64][300], objs_after[64][300];
    int nb = list_objects(run_dir, objs_before, 64);
    train(&trainer);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    int na = list_objects(run_dir, objs_after, 64);
    CHECK_EQ_INT(na, nb + 2);   /* the patch and its head */
    corrupt_added_object(run_dir, objs_before, nb, objs_after, na);
    model before = e.w;
    int patches = e.patches;
    CHECK(pulse_follower_pull(f, &applied, NULL) != 0);
    CHECK_EQ_INT(applied, 0);
    CHECK_EQ_INT(e.patches, patches);
    CHECK(same(&e.w, &before));
    pulse_follower_close(&f);

    /* A keyframe mends the chain; then the engine refuses a step: the pull stops, nothing is
     * recorded, and the next pull delivers that same step again. */
    train(&trainer);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, PULSE_PUBLISH_KEYFRAME, &s));
    CHECK_EQ_INT(s.step, 5);
    CHECK_OK(pulse_follower_open(&f, &o));
    CHECK_OK(pulse_follower_pull(f, &applied, &held));
    CHECK_EQ_INT(held.step, 5);
    CHECK_EQ_INT(e.keyframes, 2);
    CHECK(same(&e.w, &trainer));
    train(&trainer);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    e.refuse = 1;
    before = e.w;
    CHECK_ERR(pulse_follower_pull(f, &applied, NULL), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "engine refused step 6") != NULL);
    CHECK(same(&e.w, &before));
    CHECK_OK(pulse_follower_pull(f, &applied, &held));
    CHECK_EQ_INT(applied, 1);
    CHECK_EQ_INT(held.step, 6);
    CHECK(same(&e.w, &trainer));
    pulse_follower_close(&f);

    /* Reopened on the same state directory: it goes on from the state it last delivered. */
    int kf = e.keyframes;
    train(&trainer);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    CHECK_OK(pulse_follower_open(&f, &o));
    CHECK_OK(pulse_follower_pull(f, &applied, &held));
    CHECK_EQ_INT(applied, 1);
    CHECK_EQ_INT(held.step, 7);
    CHECK_EQ_INT(e.keyframes, kf);
    CHECK(same(&e.w, &trainer));
    pulse_follower_close(&f);

    pulse_ckpt_close(&ct);
    pulse_publisher_close(&pub);
    pulse_trust_free(&trust);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_done("sync-engine");
}
