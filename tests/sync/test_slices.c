/* SPDX-License-Identifier: Apache-2.0 */
/* An engine-held follower holding slices (a tensor-parallel rank's rows) fetches the patch head and only its chunks by range through a file:// store, bit-identical on its rows; damaged chunks and bad slices are refused. */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/patch.h"
#include "pulseweights/record.h"
#include "pulseweights/sync.h"

#define ROWS 64
#define COLS 32
#define CHUNK 64           /* two rows a chunk: 32 chunks in w */
#define R0 16              /* the rank holds rows [R0, R1) of w, and all of norm */
#define R1 32

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
    uint16_t w[ROWS * COLS];   /* BF16 */
    uint16_t norm[COLS];       /* BF16 */
} model;

static pulse_ckpt *wrap(model *m)
{
    pulse_mem_tensor t[2];
    memset(t, 0, sizeof t);
    t[0] = (pulse_mem_tensor){ .name = "layer.norm", .dtype_name = "BF16", .ndim = 1, .shape = { COLS },
                               .data = m->norm, .nbytes = sizeof m->norm };
    t[1] = (pulse_mem_tensor){ .name = "layer.w", .dtype_name = "BF16", .ndim = 2, .shape = { ROWS, COLS },
                               .data = m->w, .nbytes = sizeof m->w };
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c, t, 2, PULSE_CKPT_READ));
    return c;
}

static uint32_t rng = 4242;
static uint32_t next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* A step that changes rows [lo, hi) of w (and the norm when asked). */
static void train(model *m, unsigned lo, unsigned hi, int norm)
{
    for (int k = 0; k < 400; k++)
        m->w[(lo + next() % (hi - lo)) * COLS + next() % COLS] += 1;
    if (norm)
        m->norm[next() % COLS] -= 1;
}

/* The rank: rows [R0, R1) of w and the norm, written only through the callbacks. */
typedef struct rank {
    uint16_t rows[(R1 - R0) * COLS];
    uint16_t norm[COLS];
    int patches, keyframes, outside;
    uint64_t moved;            /* bytes the last delivered patch step fetched */
    uint64_t head;             /* of its patch's head */
    int whole;                 /* follows without slices (the whole patch), for comparison */
} rank;

static int same(const rank *r, const model *m)
{
    return !memcmp(r->rows, m->w + R0 * COLS, sizeof r->rows) && !memcmp(r->norm, m->norm, sizeof r->norm);
}

static int on_keyframe(void *ctx, const pulse_sync_step *s, const pulse_ckpt *k)
{
    (void)s;
    rank *r = ctx;
    const pulse_tensor *w = pulse_ckpt_find(k, "layer.w"), *n = pulse_ckpt_find(k, "layer.norm");
    if (!w || !n)
        return 1;
    memcpy(r->rows, w->data + R0 * COLS * 2, sizeof r->rows);
    memcpy(r->norm, n->data, sizeof r->norm);
    r->keyframes++;
    return 0;
}

/* Applies one tensor's deltas to dst, which holds its elements [lo, hi). */
static int apply(const pulse_patch *p, const char *name, uint16_t *dst, uint64_t lo, uint64_t hi, int *outside)
{
    size_t i;
    if (pulse_patch_tensor_find(p, name, &i))
        return 1;
    uint64_t n = pulse_patch_tensor_changes(p, i);
    int64_t *idx = malloc((n ? n : 1) * sizeof *idx);
    uint16_t *d = malloc((n ? n : 1) * sizeof *d);
    int rc = pulse_patch_tensor_updates(p, i, NULL, 1, idx, NULL, d);
    for (uint64_t k = 0; !rc && k < n; k++) {
        if ((uint64_t)idx[k] < lo || (uint64_t)idx[k] >= hi) {
            (*outside)++;   /* a chunk the rank fetched may hold a neighbour's elements */
            continue;
        }
        dst[idx[k] - (int64_t)lo] += d[k];
    }
    free(idx);
    free(d);
    return rc != 0;
}

static int on_patch(void *ctx, const pulse_sync_step *s, const pulse_patch *p)
{
    rank *r = ctx;
    r->moved = s->moved_bytes;
    r->head = pulse_patch_head_bytes(p);
    if (pulse_patch_is_sliced(p) == r->whole)
        return 1;
    if (apply(p, "layer.w", r->rows, R0 * COLS, R1 * COLS, &r->outside) ||
        apply(p, "layer.norm", r->norm, 0, COLS, &r->outside))
        return 1;
    r->patches++;
    return 0;
}

/* The object holding the last bytes of the patch of the record at REL (store/rl/REL): its last
 * part, whose last chunk is one of the rank's rows. */
static void patch_tail(const char *objdir, const char *rel, char *out, size_t cap)
{
    char path[700];
    snprintf(path, sizeof path, "%s/rl/%s", at("store"), rel);
    static uint8_t bytes[1 << 16];
    FILE *fp = fopen(path, "rb");
    size_t len = fp ? fread(bytes, 1, sizeof bytes, fp) : 0;
    if (fp)
        fclose(fp);
    pulse_record r;
    memset(&r, 0, sizeof r);
    out[0] = 0;
    CHECK_OK(pulse_record_parse(bytes, len, &r));
    CHECK(r.n_objects >= 2 && !strcmp(r.objects[r.n_objects - 1].role, "patch-data"));
    if (r.n_objects) {
        char hex[65];
        pulse_hex_encode(r.objects[r.n_objects - 1].digest, 32, hex);
        snprintf(out, cap, "%s/%s", objdir, hex);
    }
    pulse_record_clear(&r);
}

static void flip_last(const char *path)
{
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL);
    if (!fp)
        return;
    fseek(fp, -1, SEEK_END);
    int ch = fgetc(fp);
    fseek(fp, -1, SEEK_END);
    fputc(ch ^ 0x10, fp);
    fclose(fp);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-slices.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    char url[128], objdir[256];
    snprintf(url, sizeof url, "file://%s", at("store"));
    snprintf(objdir, sizeof objdir, "%s/rl/objects", at("store"));
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
    po.chunk_elems = PULSE_PATCH_MAX_CHUNK + 1;
    pulse_publisher *pub = NULL;
    CHECK_ERR(pulse_publisher_open(&pub, &po), PULSE_ERR_INVALID);
    po.chunk_elems = CHUNK;
    CHECK_OK(pulse_publisher_open(&pub, &po));
    static model m;
    for (size_t i = 0; i < ROWS * COLS; i++)
        m.w[i] = (uint16_t)(0x3c00 + next() % 512);
    for (size_t i = 0; i < COLS; i++)
        m.norm[i] = 0x3f80;
    pulse_ckpt *ct = wrap(&m);

    static rank r;
    pulse_slice sl[2] = { { "layer.w", R0 * COLS, R1 * COLS }, { "layer.norm", 0, COLS } };
    pulse_follow_opts o;
    pulse_follow_opts_default(&o);
    o.store_url = url;
    o.run = "rl";
    o.trust = trust;
    o.state_dir = at("rank");
    o.threads = 2;
    o.on_patch = on_patch;
    o.on_keyframe = on_keyframe;
    o.engine_ctx = &r;
    o.slices = sl;
    o.n_slices = 2;
    pulse_follower *f = NULL;
    /* Slices are for engine-held weights; an empty range is refused at open. */
    pulse_follow_opts bad = o;
    bad.on_patch = NULL;
    bad.on_keyframe = NULL;
    bad.weights_path = at("w.safetensors");
    CHECK_ERR(pulse_follower_open(&f, &bad), PULSE_ERR_INVALID);
    pulse_slice empty = { "layer.w", 5, 5 };
    bad = o;
    bad.slices = &empty;
    bad.n_slices = 1;
    CHECK_ERR(pulse_follower_open(&f, &bad), PULSE_ERR_INVALID);
    CHECK(f == NULL);
    CHECK_OK(pulse_follower_open(&f, &o));
    /* The same rank without slices, to compare bytes: it fetches whole patches. */
    static rank rw = { .whole = 1 };
    pulse_follow_opts ow = o;
    ow.state_dir = at("whole");
    ow.engine_ctx = &rw;
    ow.slices = NULL;
    ow.n_slices = 0;
    pulse_follower *fw = NULL;
    CHECK_OK(pulse_follower_open(&fw, &ow));

    /* A keyframe, then steps touching every row: the rank's rows and norm bit for bit, and
     * fewer bytes fetched than the patch object. */
    pulse_sync_step s, held;
    size_t applied = 0;
    for (int step = 0; step < 4; step++) {
        if (step)
            train(&m, 0, ROWS, 1);
        CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
        CHECK_OK(pulse_follower_pull(f, &applied, &held));
        CHECK_EQ_INT(applied, 1);
        CHECK_EQ_INT(held.step, step);
        CHECK(same(&r, &m));
        CHECK_OK(pulse_follower_pull(fw, &applied, &held));
        CHECK(same(&rw, &m));
        if (step) {
            /* Both fetch the record; the whole patch is head + data, the slices the head and a
             * quarter of w's chunks and the norm's: under half the data. */
            const uint64_t data = s.object_bytes - r.head;
            printf("step %d: slices fetched %llu bytes, the whole patch %llu (head %llu, data %llu)\n", step,
                   (unsigned long long)r.moved, (unsigned long long)rw.moved, (unsigned long long)r.head,
                   (unsigned long long)data);
            CHECK(rw.moved > r.moved);
            CHECK(rw.moved - r.moved > data / 2);
        }
    }
    CHECK_EQ_INT(r.keyframes, 1);
    CHECK_EQ_INT(r.patches, 3);
    CHECK_EQ_INT(r.outside, 0);   /* rows R0..R1 are whole chunks */
    CHECK(rw.outside > 0);
    pulse_follower_close(&fw);

    /* A damaged chunk the rank holds: refused, nothing written, and the same step again after. */
    train(&m, R0, R1, 0);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    char obj[700];
    patch_tail(objdir, s.record_key, obj, sizeof obj);
    flip_last(obj);   /* the last coded chunk: one of the rank's rows */
    rank before = r;
    CHECK_ERR(pulse_follower_pull(f, &applied, NULL), PULSE_ERR_CORRUPT);
    CHECK(strstr(pulse_last_error(), "layer.w") != NULL);
    CHECK(!memcmp(&before, &r, sizeof r));
    /* The step is refused for good (docs/trust.md): a keyframe mends the chain. */
    flip_last(obj);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, PULSE_PUBLISH_KEYFRAME, &s));
    CHECK_OK(pulse_follower_pull(f, &applied, &held));
    CHECK_EQ_INT(held.step, s.step);
    CHECK_EQ_INT(r.keyframes, 2);
    CHECK(same(&r, &m));

    /* A damaged chunk of rows the rank does not hold is never fetched: the step applies. */
    train(&m, 48, ROWS, 0);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    patch_tail(objdir, s.record_key, obj, sizeof obj);
    flip_last(obj);
    CHECK_OK(pulse_follower_pull(f, &applied, &held));
    CHECK_EQ_INT(applied, 1);
    CHECK(same(&r, &m));
    flip_last(obj);
    pulse_follower_close(&f);

    /* A slice the run's tensors do not have: refused by name, nothing delivered. */
    pulse_slice ghost[2] = { { "layer.w", R0 * COLS, R1 * COLS }, { "layer.ghost", 0, 4 } };
    pulse_slice beyond[1] = { { "layer.w", 0, ROWS * COLS + 1 } };
    train(&m, 0, ROWS, 1);
    CHECK_OK(pulse_publisher_publish_ckpt(pub, ct, -1, 0, &s));
    before = r;
    bad = o;
    bad.slices = ghost;
    bad.n_slices = 2;
    CHECK_OK(pulse_follower_open(&f, &bad));
    CHECK_ERR(pulse_follower_pull(f, &applied, NULL), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "layer.ghost") != NULL);
    pulse_follower_close(&f);
    bad.slices = beyond;
    bad.n_slices = 1;
    CHECK_OK(pulse_follower_open(&f, &bad));
    CHECK_ERR(pulse_follower_pull(f, &applied, NULL), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "layer.w") != NULL);
    pulse_follower_close(&f);
    CHECK(!memcmp(&before, &r, sizeof r));
    CHECK_OK(pulse_follower_open(&f, &o));
    CHECK_OK(pulse_follower_pull(f, &applied, &held));
    CHECK_EQ_INT(applied, 1);
    CHECK(same(&r, &m));
    pulse_follower_close(&f);

    pulse_ckpt_close(&ct);
    pulse_publisher_close(&pub);
    pulse_trust_free(&trust);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_done("sync-slices");
}
