/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of a step's directions (pulse_dirs): the file's bits checked element by element against the step, the same file from the two checkpoints and from ulp and abs patches (chunks that split a byte, tensors not 2-byte aligned, odd lengths, an F32 tensor without directions), and every malformed file refused by name, read into memory and mapped; the directions built in a temporary beside their file (a squash, a publisher, pulse_dirs_write_step). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "crypto/sha256.h"
#include "node/patch/patch_dirs.h"
#include "check.h"
#include "dir_entries.h"

#define NA 7      /* BF16, fewer than a byte's four and odd */
#define NB 5      /* F32: no directions */
#define NC 1003   /* F16 */
#define ND 2112   /* BF16, 64 x 33 */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Every 16-bit tensor's old and new bit patterns, each one byte past an even address so that no
 * tensor's data is 2-byte aligned (the memcpy paths). */
static uint8_t store_old[2 * (NA + NC + ND) + 16], store_new[2 * (NA + NC + ND) + 16];
static float fold[NB], fnew[NB];
static const size_t n16[3] = { NA, NC, ND };
static size_t at16[3];

static uint16_t get16(const uint8_t *p, size_t i)
{
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);
    return v;
}

static void put16(uint8_t *p, size_t i, uint16_t v)
{
    memcpy(p + 2 * i, &v, 2);
}

static pulse_ckpt *wrap(uint8_t *s16, float *f)
{
    pulse_mem_tensor mt[4];
    memset(mt, 0, sizeof mt);
    mt[0] = (pulse_mem_tensor){ .name = "a", .dtype_name = "BF16", .ndim = 1, .shape = { NA },
                                .data = s16 + at16[0], .nbytes = NA * 2 };
    mt[1] = (pulse_mem_tensor){ .name = "b", .dtype_name = "F32", .ndim = 1, .shape = { NB }, .data = f,
                                .nbytes = NB * 4 };
    mt[2] = (pulse_mem_tensor){ .name = "c", .dtype_name = "F16", .ndim = 1, .shape = { NC },
                                .data = s16 + at16[1], .nbytes = NC * 2 };
    mt[3] = (pulse_mem_tensor){ .name = "d", .dtype_name = "BF16", .ndim = 2, .shape = { 64, 33 },
                                .data = s16 + at16[2], .nbytes = ND * 2 };
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c, mt, 4, PULSE_CKPT_READ));
    return c;
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *len = 0;
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len ? *len : 1);
    CHECK(fread(b, 1, *len, f) == *len);
    fclose(f);
    return b;
}

static void write_all(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, len, f) == len);
    fclose(f);
}

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The file's layout read here on its own (docs/patch-format.md, "Directions file"): each
 * element's two bits are the direction of its step, the F32 tensor has none, the digest holds. */
static void check_file(const uint8_t *b, size_t len, const uint8_t from[32], const uint8_t to[32])
{
    CHECK(len > 112 && !memcmp(b, "PULSEDIR", 8) && le(b + 8, 4) == 1 && le(b + 12, 4) == 4);
    CHECK(!memcmp(b + 16, from, 32) && !memcmp(b + 48, to, 32));
    const uint64_t want[4] = { NA, 0, NC, ND };
    size_t at = 80 + 32;
    for (int t = 0; t < 4; t++)
        CHECK(le(b + 80 + 8 * t, 8) == want[t]);
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < n16[k]; i++) {
            const int16_t d = (int16_t)(uint16_t)(get16(store_new + at16[k], i) - get16(store_old + at16[k], i));
            const unsigned dir = d == 0 ? 0 : d > 0 ? 1 : 2;
            bad += ((b[at + i / 4] >> (2 * (i % 4))) & 3u) != dir;
        }
        /* the last byte's unused bits stay 0 */
        if (n16[k] % 4)
            bad += (b[at + n16[k] / 4] >> (2 * (n16[k] % 4))) != 0;
        at += (n16[k] + 3) / 4;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(at + 32, len);
    uint8_t digest[32];
    pulse_sha256(b, len - 32, digest);
    CHECK(!memcmp(digest, b + len - 32, 32));
}

/* A malformed file: refused with PULSE_ERR_FORMAT and a detail holding `why`. */
static void refused(const char *path, const uint8_t *b, size_t len, const char *why)
{
    write_all(path, b, len);
    for (int mapped = 0; mapped < 2; mapped++) {   /* read into memory, and a node's own, mapped */
        pulse_dirs *d = NULL;
        CHECK_ERR(mapped ? patch_dirs_load_mapped(&d, path) : pulse_dirs_load(&d, path), PULSE_ERR_FORMAT);
        CHECK(d == NULL);
        if (!strstr(pulse_last_error(), why))
            fprintf(stderr, "detail '%s' lacks '%s'\n", pulse_last_error(), why);
        CHECK(strstr(pulse_last_error(), why) != NULL);
    }
}

/* A copy of b (len bytes) with its digest made right again. */
static void reseal(uint8_t *b, size_t len)
{
    pulse_sha256(b, len - 32, b + len - 32);
}

int main(void)
{
    char dir[] = "/tmp/pulse-dirs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], p1[256], p2[256];
    at16[0] = 1;
    at16[1] = at16[0] + 2 * NA;
    at16[2] = at16[1] + 2 * NC;
    /* old values anywhere; a third of them step by 1-3 patterns either way, a few across 0 */
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n16[k]; i++) {
            const uint16_t o = (uint16_t)rnd();
            uint16_t v = o;
            if (rnd() % 3 == 0) {
                const int step = (int)(1 + rnd() % 3);
                v = (uint16_t)(o + (rnd() & 1 ? step : -step));
            }
            if (i == 5)
                v = (uint16_t)(o + 0x8000u);   /* half way round: the direction of int16's sign */
            put16(store_old + at16[k], i, o);
            put16(store_new + at16[k], i, v);
        }
    for (int i = 0; i < NB; i++) {
        fold[i] = (float)i;
        fnew[i] = (float)i + (i & 1);
    }
    pulse_ckpt *a = wrap(store_old, fold), *b = wrap(store_new, fnew);
    uint8_t ida[32], idb[32];
    CHECK_OK(pulse_ckpt_state_id(a, 1, ida));
    CHECK_OK(pulse_ckpt_state_id(b, 1, idb));

    /* From the two checkpoints: the file's bits are the step's. */
    pulse_dirs *ds = NULL;
    CHECK_OK(pulse_dirs_of_step(&ds, a, b, NULL, NULL, 2));
    CHECK(!memcmp(pulse_dirs_from_id(ds), ida, 32) && !memcmp(pulse_dirs_to_id(ds), idb, 32));
    snprintf(p1, sizeof p1, "%s/step.dirs", dir);
    CHECK_OK(pulse_dirs_save(ds, p1, 0));
    size_t len1;
    uint8_t *f1 = read_all(p1, &len1);
    check_file(f1, len1, ida, idb);

    /* From patches: ulp and abs values, chunks of 256 and of 250 (two chunks share a byte). */
    const struct { pulse_value_code v; uint32_t chunk; } cases[] = {
        { PULSE_VALUES_ULP, 256 }, { PULSE_VALUES_ULP, 250 }, { PULSE_VALUES_ABS, 256 }, { PULSE_VALUES_ULP, 1 << 20 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pulse_diff_opts o;
        pulse_diff_opts_default(&o);
        o.values = cases[c].v;
        o.chunk_elems = cases[c].chunk;
        o.threads = 2;
        snprintf(path, sizeof path, "%s/p%zu", dir, c);
        CHECK_OK(pulse_patch_diff(a, b, &o, path));
        pulse_patch *p = NULL;
        CHECK_OK(pulse_patch_open(&p, path));
        pulse_dirs *dp = NULL;
        CHECK_OK(pulse_dirs_of_patch(&dp, p, a, 2));
        snprintf(p2, sizeof p2, "%s/p%zu.dirs", dir, c);
        CHECK_OK(pulse_dirs_save(dp, p2, 1));
        size_t len2;
        uint8_t *f2 = read_all(p2, &len2);
        CHECK(len2 == len1 && !memcmp(f1, f2, len1));
        free(f2);
        pulse_dirs_free(&dp);
        pulse_patch_close(&p);
    }

    /* Read back: the same ids; a format-4 patch takes no directions. */
    pulse_dirs *dl = NULL;
    CHECK_OK(pulse_dirs_load(&dl, p1));
    CHECK(dl && !memcmp(pulse_dirs_to_id(dl), idb, 32));
    /* A node's own file held mapped: loaded (digest checked), or kept from the save that wrote
     * it; the same bytes and tables either way, the image a mapping of the file. */
    pulse_dirs *dm = NULL;
    CHECK_OK(patch_dirs_load_mapped(&dm, p1));
    CHECK(dm && dm->mapped == len1 && dm->len == len1 && !memcmp(dm->image, f1, len1));
    CHECK(dm && dm->ntensors == dl->ntensors && !memcmp(dm->at, dl->at, dl->ntensors * sizeof *dl->at));
    pulse_dirs_free(&dm);
    pulse_dirs *dk = NULL;
    CHECK_OK(pulse_dirs_of_step(&dk, a, b, NULL, NULL, 1));
    snprintf(p2, sizeof p2, "%s/kept.dirs", dir);
    CHECK_OK(patch_dirs_save_mapped(dk, p2, 1));
    size_t lenk;
    uint8_t *fk = read_all(p2, &lenk);
    CHECK(lenk == len1 && !memcmp(fk, f1, len1));
    CHECK(dk->mapped == len1 && !memcmp(dk->image, f1, len1));
    CHECK_OK(patch_dirs_save_mapped(dk, p2, 0));   /* saved again from its own mapping */
    free(fk);
    fk = read_all(p2, &lenk);
    CHECK(lenk == len1 && !memcmp(fk, f1, len1) && !memcmp(dk->image, f1, len1));
    free(fk);
    pulse_dirs_free(&dk);
    pulse_patch *p0 = NULL;
    snprintf(path, sizeof path, "%s/p0", dir);
    CHECK_OK(pulse_patch_open(&p0, path));
    CHECK_ERR(pulse_patch_set_prev_dirs(p0, dl), PULSE_ERR_INVALID);
    /* Built in a temporary beside their file, as a follower's squash builds them: the same bytes
     * as the step's once put in place; freed before that, the temporary goes and nothing is
     * left at the file. */
    snprintf(p2, sizeof p2, "%s/built.dirs", dir);
    for (int commit = 0; commit < 2; commit++) {
        pulse_dirs *db = NULL;
        char sq[4096], tmpname[4096];
        snprintf(sq, sizeof sq, "%s/squash%d", dir, commit);
        CHECK_OK(patch_squash_dirs(&p0, 1, a, 2, 0, sq, &db, p2));
        CHECK(db && db->tmp && db->mapped == len1 && access(db->tmp, F_OK) == 0);
        snprintf(tmpname, sizeof tmpname, "%s", db && db->tmp ? db->tmp : "");
        if (commit && db) {
            CHECK_OK(patch_dirs_commit(db, p2, 1));
            CHECK(db->tmp == NULL && access(tmpname, F_OK) != 0);
            size_t lenb;
            uint8_t *fb = read_all(p2, &lenb);
            CHECK(lenb == len1 && !memcmp(fb, f1, len1) && !memcmp(db->image, f1, len1));
            free(fb);
        }
        pulse_dirs_free(&db);
        CHECK(access(tmpname, F_OK) != 0);
        CHECK((access(p2, F_OK) == 0) == commit);
    }
    /* No file can be made there: built in memory instead, not an error. */
    pulse_dirs *dmem = NULL;
    CHECK_OK(patch_dirs_empty_at(&dmem, p0, ida, idb, "/nonexistent/dir/x.dirs"));
    CHECK(dmem && !dmem->tmp && !dmem->mapped);
    pulse_dirs_free(&dmem);
    /* From the two checkpoints, built beside their file as a publisher builds them: the step's
     * bytes, mapped from a temporary, gone when freed before it is put in place. */
    pulse_dirs *dsa = NULL;
    CHECK_OK(patch_dirs_of_step_at(&dsa, a, b, ida, idb, 2, p2));
    CHECK(dsa && dsa->tmp && dsa->mapped == len1 && !memcmp(dsa->image, f1, len1));
    char tmp_sa[4096];
    snprintf(tmp_sa, sizeof tmp_sa, "%s", dsa && dsa->tmp ? dsa->tmp : "");
    pulse_dirs_free(&dsa);
    CHECK(access(tmp_sa, F_OK) != 0);
    CHECK_OK(patch_dirs_of_step_at(&dsa, a, b, ida, idb, 1, "/nonexistent/dir/x.dirs"));
    CHECK(dsa && !dsa->tmp && !dsa->mapped && !memcmp(dsa->image, f1, len1));
    pulse_dirs_free(&dsa);
    /* ... and written by the public call: the file pulse_dirs_save writes, nothing else left in
     * the directory; where it cannot be written, an error and no file. */
    char wdir[4096], wpath[4200];
    snprintf(wdir, sizeof wdir, "%s/write_step", dir);
    CHECK(mkdir(wdir, 0700) == 0);
    snprintf(wpath, sizeof wpath, "%s/w.dirs", wdir);
    CHECK_OK(pulse_dirs_write_step(a, b, NULL, NULL, 2, wpath, 1));
    size_t lenw;
    uint8_t *fw = read_all(wpath, &lenw);
    CHECK(fw && lenw == len1 && !memcmp(fw, f1, len1));
    free(fw);
    CHECK(dir_entries(wdir) == 1);
    CHECK_ERR(pulse_dirs_write_step(a, b, ida, idb, 1, "/nonexistent/dir/x.dirs", 0), PULSE_ERR_IO);
    CHECK_ERR(pulse_dirs_write_step(a, b, ida, idb, 1, NULL, 0), PULSE_ERR_INVALID);
    pulse_patch_close(&p0);
    /* Another layout: the two checkpoints swapped tensor for tensor are refused. */
    pulse_dirs *dx = NULL;
    pulse_mem_tensor one = { .name = "a", .dtype_name = "BF16", .ndim = 1, .shape = { NA },
                             .data = store_old + at16[0], .nbytes = NA * 2 };
    pulse_ckpt *c1 = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c1, &one, 1, PULSE_CKPT_READ));
    CHECK_ERR(pulse_dirs_of_step(&dx, a, c1, NULL, NULL, 1), PULSE_ERR_MISMATCH);
    CHECK(dx == NULL);
    pulse_ckpt_close(&c1);

    /* Malformed files, each refused by what is wrong. */
    snprintf(path, sizeof path, "%s/bad.dirs", dir);
    uint8_t *m = malloc(len1 + 64);
    refused(path, f1, 0, "not a directions file");
    memcpy(m, f1, len1);
    m[0] ^= 1;
    refused(path, m, len1, "not a directions file");
    refused(path, f1, 100, "truncated header");
    memcpy(m, f1, len1);
    m[8] = 2;
    reseal(m, len1);
    refused(path, m, len1, "version 2 unknown");
    refused(path, f1, len1 - 1, "truncated or extended");
    memcpy(m, f1, len1);
    m[len1] = 0;
    memmove(m + len1 - 31, m + len1 - 32, 32);
    refused(path, m, len1 + 1, "truncated or extended");
    memcpy(m, f1, len1);
    m[len1 / 2] ^= 4;
    refused(path, m, len1, "digest mismatch");
    /* counts no file could hold, with a digest that matches: refused before any sum wraps */
    memcpy(m, f1, len1);
    for (int t = 0; t < 4; t++)
        memset(m + 80 + 8 * t, 0xff, 8);
    reseal(m, len1);
    refused(path, m, len1, "its table says more");
    memcpy(m, f1, len1);
    memset(m + 12, 0xff, 4);   /* 2^32 - 1 tensors */
    reseal(m, len1);
    refused(path, m, len1, "truncated tensor table");
    pulse_dirs *dn = NULL;
    snprintf(path, sizeof path, "%s/none", dir);
    CHECK_ERR(pulse_dirs_load(&dn, path), PULSE_ERR_NOTFOUND);
    CHECK_ERR(patch_dirs_load_mapped(&dn, path), PULSE_ERR_NOTFOUND);

    free(m);
    free(f1);
    pulse_dirs_free(&dl);
    pulse_dirs_free(&ds);
    pulse_ckpt_close(&a);
    pulse_ckpt_close(&b);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return check_done("test_dirs");
}
