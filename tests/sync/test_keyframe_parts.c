/* SPDX-License-Identifier: Apache-2.0 */
/* A sharded keyframe (a trainer in parts: one file a part) restored through a file:// store into one single-file checkpoint, bit-identical; malformed records and a tensor in two shards refused with nothing left behind; the audit accepts the form and names what is wrong. */
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "crypto/sha256.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/audit.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

#define NSHARDS 3

static char dir[64];

static const char *at(const char *name)
{
    static char buf[8][512];
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

static uint32_t rng = 777;
static uint32_t next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* The model: six tensors in three shards of disjoint names; shard 1 is about 20 MB, so its
 * keyframe spans two chunks. */
static const struct {
    int shard;
    pulse_tensor_spec spec;
} model[] = {
    { 0, { "embed.weight", "BF16", 2, { 1024, 512 } } },
    { 0, { "norm.bias", "F32", 1, { 4096 } } },
    { 1, { "layers.0.mlp", "F32", 3, { 5, 1024, 1024 } } },
    { 1, { "step", "I64", 0, { 0 } } },
    { 2, { "head.weight", "BF16", 2, { 300, 7 } } },
    { 2, { "head.scale", "F32", 1, { 3 } } },
};
#define NT (sizeof model / sizeof model[0])

static const char *shard_name(int i)
{
    static char buf[NSHARDS + 1][64];
    snprintf(buf[i], sizeof buf[i], "part-%05d-of-%05d.safetensors", i, NSHARDS);
    return buf[i];
}

/* A shard file of the model's tensors of shard S (or, S == NSHARDS, a stray shard holding
 * norm.bias again), filled with compressible but not constant bytes. */
static int make_shard(int s, const char *path, const char *metadata)
{
    pulse_tensor_spec specs[NT];
    size_t n = 0;
    for (size_t i = 0; i < NT; i++)
        if (model[i].shard == s || (s == NSHARDS && !strcmp(model[i].spec.name, "norm.bias")))
            specs[n++] = model[i].spec;
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_create(&c, path, specs, n, metadata);
    for (size_t i = 0; !r && i < pulse_ckpt_count(c); i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(c, i);
        for (uint64_t b = 0; b < t->nbytes; b++)
            t->data[b] = (uint8_t)(b % 7 == 0 ? next() : b * 31 / 17);
    }
    if (!r)
        r = pulse_ckpt_commit(c);
    pulse_ckpt_close(&c);
    return r;
}

/* Entries of DIR other than . and .. */
static int entries(const char *d)
{
    DIR *h = opendir(d);
    int n = 0;
    if (!h)
        return -1;
    for (struct dirent *e; (e = readdir(h));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(h);
    return n;
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static pulse_record shard_recs[NSHARDS + 1];   /* each shard's keyframe objects, as published */
static uint8_t whole_id[32];
/* The committer's list of tensor hashes: not in the store (never fetched) until the audit's test. */
static uint8_t hashes_digest[32] = { 1, 2, 3 };
#define HASHES_SIZE 4321

enum mutation {
    GOOD,
    MIXED,          /* shard 0's chunks with tensor "" */
    SLASH,          /* shard 1 named "x/part-..." */
    GAP,            /* shard 1's second chunk one byte further on */
    REPEATED,       /* shard 2's chunks named as shard 0 */
    WRONG_RESULT,   /* the result id differs */
    DUP_TENSOR,     /* shard 2 replaced by a shard holding norm.bias, as shard 0 does */
    CHUNK_AFTER_HASHES,
    UNKNOWN_ROLE,
    NO_HASHES,
};

static void merged(pulse_record *r, enum mutation m, const uint8_t result[32])
{
    CHECK_OK(pulse_record_init(r, PULSE_RECORD_KEYFRAME, "R", 1));
    memcpy(r->result, result, 32);
    if (m == WRONG_RESULT)
        r->result[5] ^= 1;
    for (int s = 0; s < NSHARDS; s++) {
        const pulse_record *from = &shard_recs[m == DUP_TENSOR && s == 2 ? NSHARDS : s];
        const char *name = shard_name(m == REPEATED && s == 2 ? 0 : s);
        char bad[320];
        if (m == SLASH && s == 1) {
            snprintf(bad, sizeof bad, "x/%s", name);
            name = bad;
        }
        if (m == MIXED && s == 0)
            name = "";
        for (uint32_t k = 0; k < from->n_objects; k++) {
            const pulse_record_object *o = &from->objects[k];
            uint64_t off = o->range_offset + (m == GAP && s == 1 && k == 1);
            CHECK_OK(pulse_record_add_object(r, o->digest, o->size, "keyframe-chunk", name, off, o->range_length));
        }
        if (m == CHUNK_AFTER_HASHES && s == 1) {
            uint8_t d[32] = { 9 };
            CHECK_OK(pulse_record_add_object(r, d, 100, "tensor-hashes", "", 0, 0));
        }
    }
    if (m != NO_HASHES)
        CHECK_OK(pulse_record_add_object(r, hashes_digest, HASHES_SIZE, m == UNKNOWN_ROLE ? "tensor-hashes-v9" : "tensor-hashes",
                                         "part-00000-of-00003.safetensors", 0, 0));
}

/* The restored file holds the original tensors byte for byte, hashes to the model's id, and
 * carries shard 0's metadata. */
static void check_restored(const char *path, pulse_ckpt *const *shards)
{
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_open(&c, path, PULSE_CKPT_READ));
    if (!c)
        return;
    CHECK_EQ_INT(pulse_ckpt_nfiles(c), 1);
    CHECK_EQ_INT(pulse_ckpt_count(c), NT);
    uint8_t id[32];
    CHECK_OK(pulse_ckpt_state_id(c, 2, id));
    CHECK(!memcmp(id, whole_id, 32));
    CHECK(!strcmp(pulse_ckpt_metadata(c), "{\"format\":\"pt\",\"part\":\"0\"}"));
    for (int s = 0; s < NSHARDS; s++)
        for (size_t i = 0; i < pulse_ckpt_count(shards[s]); i++) {
            const pulse_tensor *a = pulse_ckpt_tensor(shards[s], i);
            const pulse_tensor *b = pulse_ckpt_find(c, a->name);
            CHECK(b != NULL);
            if (!b)
                continue;
            CHECK(!strcmp(a->dtype_name, b->dtype_name));
            CHECK_EQ_INT(a->ndim, b->ndim);
            CHECK_EQ_INT(a->nbytes, b->nbytes);
            CHECK(a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes));
        }
    pulse_ckpt_close(&c);
}

/* A refused record: an error of one line, nothing at PATH, no temporary beside it. */
static void check_refused(pulse_store *st, enum mutation m, int want)
{
    pulse_record r;
    merged(&r, m, whole_id);
    uint64_t moved = 0;
    const char *path = at("out/model.safetensors");
    int rc = sync_keyframe_restore(st, "R", &r, 2, path, &moved);
    if (want)
        CHECK_EQ_INT(rc, want);
    else
        CHECK(rc != 0);
    const char *e = pulse_last_error();
    CHECK(e[0] && !strchr(e, '\n'));
    printf("  mutation %d refused: %s\n", (int)m, e);
    CHECK(!exists(path));
    CHECK_EQ_INT(entries(at("out")), 0);
    pulse_record_clear(&r);
}

static int has_problem(const pulse_audit_report *rep, const char *key_part, const char *text)
{
    for (size_t i = 0; i < rep->n_problems; i++)
        if (strstr(rep->problems[i], key_part) && (!text || strstr(rep->problems[i], text)))
            return 1;
    return 0;
}

/* The audit: the sharded form with its trailing tensor-hashes passes the shape check and the
 * full download (each chunk a frame of its range); a malformed one is named. */
static void test_audit(pulse_store *st)
{
    pulse_secret_key *key = NULL;
    pulse_trust *trust = NULL;
    CHECK_OK(pulse_key_generate(&key));
    CHECK_OK(pulse_trust_new(&trust));
    pulse_public_key pub = { 0 };
    pulse_key_public(key, pub.key);
    CHECK_OK(pulse_trust_add(trust, &pub));

    /* the tensor-hashes object the records name, so that it is not missing */
    static uint8_t blob[HASHES_SIZE];
    sync_blob b = { .data = blob, .len = sizeof blob };
    pulse_sha256(blob, sizeof blob, b.digest);
    memcpy(hashes_digest, b.digest, 32);
    uint64_t moved = 0;
    CHECK_OK(sync_put_objects(st, "R", &b, 1, &moved));
    pulse_record good;
    merged(&good, GOOD, whole_id);
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < good.n_objects; k++)
        bytes += good.objects[k].size;
    good.patch_bytes = bytes;

    char rel[SYNC_KEY_MAX];
    uint8_t *signed_bytes = NULL;
    size_t len = 0;
    CHECK_OK(sync_commit_record(st, "R", key, &good, sync_same_transition, rel, &signed_bytes, &len, &moved));
    free(signed_bytes);

    pulse_audit_opts o;
    pulse_audit_opts_default(&o);
    o.trust = trust;
    o.level = PULSE_AUDIT_FULL;
    pulse_audit_report rep;
    CHECK_OK(pulse_audit_run(st, "R", &o, &rep));
    for (size_t i = 0; i < rep.n_problems; i++)
        if (strstr(rep.problems[i], "keyframe") || strstr(rep.problems[i], "objects/")) {
            fprintf(stderr, "unexpected audit problem: %s\n", rep.problems[i]);
            CHECK(0);
        }
    CHECK(rep.objects_checked > 0);
    pulse_audit_report_clear(&rep);

    /* a second keyframe, at step 2, whose shard 1 has a gap; a third, mixed */
    pulse_record bad;
    merged(&bad, GAP, whole_id);
    bad.step = 2;
    bad.patch_bytes = bytes;
    CHECK_OK(sync_commit_record(st, "R", key, &bad, sync_same_transition, rel, &signed_bytes, &len, &moved));
    free(signed_bytes);
    pulse_record_clear(&bad);
    merged(&bad, MIXED, whole_id);
    bad.step = 3;
    bad.patch_bytes = bytes;
    CHECK_OK(sync_commit_record(st, "R", key, &bad, sync_same_transition, rel, &signed_bytes, &len, &moved));
    free(signed_bytes);
    pulse_record_clear(&bad);
    CHECK_OK(pulse_audit_run(st, "R", &o, &rep));
    CHECK(has_problem(&rep, "keyframe/000000000002/", "of shard part-00001-of-00003.safetensors"));
    CHECK(has_problem(&rep, "keyframe/000000000003/", "with and without a shard name"));
    CHECK(!has_problem(&rep, "keyframe/000000000001/", NULL));
    for (size_t i = 0; i < rep.n_problems; i++)
        printf("  audit: %s\n", rep.problems[i]);
    pulse_audit_report_clear(&rep);
    pulse_record_clear(&good);
    pulse_trust_free(&trust);
    pulse_key_free(&key);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-kfparts-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    mkdir(at("src"), 0755);
    mkdir(at("out"), 0755);
    mkdir(at("dup"), 0755);

    /* The shards, and the whole model opened through an index naming them: its state id is
     * the one of the model whatever the split. */
    pulse_ckpt *shards[NSHARDS + 1] = { 0 };
    char meta[64];
    FILE *ix = fopen(at("src/model.safetensors.index.json"), "w");
    CHECK(ix != NULL);
    fprintf(ix, "{\"metadata\":{},\"weight_map\":{");
    for (int s = 0; s < NSHARDS; s++) {
        char rel[320];
        snprintf(rel, sizeof rel, "src/%s", shard_name(s));
        snprintf(meta, sizeof meta, "{\"format\":\"pt\",\"part\":\"%d\"}", s);
        CHECK_OK(make_shard(s, at(rel), meta));
        CHECK_OK(pulse_ckpt_open(&shards[s], at(rel), PULSE_CKPT_READ));
        for (size_t i = 0; shards[s] && i < pulse_ckpt_count(shards[s]); i++)
            fprintf(ix, "%s\"%s\":\"%s\"", s || i ? "," : "", pulse_ckpt_tensor(shards[s], i)->name, shard_name(s));
    }
    fprintf(ix, "}}\n");
    fclose(ix);
    CHECK_OK(make_shard(NSHARDS, at("dup/part-00002-of-00003.safetensors"), NULL));
    CHECK_OK(pulse_ckpt_open(&shards[NSHARDS], at("dup/part-00002-of-00003.safetensors"), PULSE_CKPT_READ));
    pulse_ckpt *whole = NULL;
    CHECK_OK(pulse_ckpt_open(&whole, at("src"), PULSE_CKPT_READ));
    CHECK_EQ_INT(pulse_ckpt_count(whole), NT);
    CHECK_OK(pulse_ckpt_state_id(whole, 2, whole_id));

    char url[128];
    snprintf(url, sizeof url, "file://%s/store", dir);
    mkdir(at("store"), 0755);
    pulse_store *st = NULL;
    CHECK_OK(pulse_store_open(&st, url, NULL));

    /* Each part publishes its shard's keyframe as an ordinary one-file keyframe. */
    uint64_t moved = 0;
    for (int s = 0; s <= NSHARDS; s++) {
        CHECK_OK(pulse_record_init(&shard_recs[s], PULSE_RECORD_KEYFRAME, "R", 1));
        CHECK_OK(sync_keyframe_publish(st, "R", shards[s], 2, 3, &shard_recs[s], &moved));
    }
    CHECK_EQ_INT(shard_recs[1].n_objects, 2);   /* about 20 MB: two chunks */
    CHECK_EQ_INT(shard_recs[0].n_objects, 1);

    /* A part's own keyframe record, one file with a trailing tensor-hashes: restored. */
    {
        pulse_record pr;
        uint8_t id0[32], d[32] = { 4 };
        CHECK_OK(pulse_ckpt_state_id(shards[0], 2, id0));
        CHECK_OK(pulse_record_init(&pr, PULSE_RECORD_KEYFRAME, "R.part-0-of-3", 1));
        memcpy(pr.result, id0, 32);
        for (uint32_t k = 0; k < shard_recs[0].n_objects; k++) {
            const pulse_record_object *o = &shard_recs[0].objects[k];
            CHECK_OK(pulse_record_add_object(&pr, o->digest, o->size, o->role, "", o->range_offset, o->range_length));
        }
        CHECK_OK(pulse_record_add_object(&pr, d, 99, "tensor-hashes", "", 0, 0));
        CHECK_OK(sync_keyframe_restore(st, "R", &pr, 2, at("out/part0.safetensors"), &moved));
        pulse_ckpt *c = NULL;
        uint8_t id[32];
        CHECK_OK(pulse_ckpt_open(&c, at("out/part0.safetensors"), PULSE_CKPT_READ));
        CHECK(c && !pulse_ckpt_state_id(c, 2, id) && !memcmp(id, id0, 32));
        pulse_ckpt_close(&c);
        unlink(at("out/part0.safetensors"));
        CHECK_EQ_INT(entries(at("out")), 0);
        pulse_record_clear(&pr);
    }

    /* The sharded keyframe, restored as one file: only PATH is left. */
    {
        pulse_record r;
        merged(&r, GOOD, whole_id);
        uint64_t got = 0;
        CHECK_OK(sync_keyframe_restore(st, "R", &r, 2, at("out/model.safetensors"), &got));
        CHECK(got > 0);
        check_restored(at("out/model.safetensors"), shards);
        CHECK_EQ_INT(entries(at("out")), 1);
        /* again, over the file now there: replaced */
        CHECK_OK(sync_keyframe_restore(st, "R", &r, 1, at("out/model.safetensors"), &got));
        check_restored(at("out/model.safetensors"), shards);
        CHECK_EQ_INT(entries(at("out")), 1);
        unlink(at("out/model.safetensors"));
        pulse_record_clear(&r);
        /* without the trailing object too */
        merged(&r, NO_HASHES, whole_id);
        CHECK_OK(sync_keyframe_restore(st, "R", &r, 2, at("out/model.safetensors"), &got));
        check_restored(at("out/model.safetensors"), shards);
        unlink(at("out/model.safetensors"));
        pulse_record_clear(&r);
    }

    /* What a restore killed midway leaves beside PATH is swept (a follower does at open), and
     * nothing else: a temporary file, a shard directory with its files, a copy's temporary. */
    {
        FILE *f;
        mkdir(at("out/model.safetensors.keyframe.AbC123"), 0700);
        const char *made[] = { "out/model.safetensors.keyframe.AbC123/part-00001-of-00003.safetensors",
                               "out/model.safetensors.keyframe.AbC123/model.safetensors.index.json",
                               "out/model.safetensors.keyframe.x9y8z7", "out/model.safetensors.tmp.Q1w2E3",
                               "out/model.safetensors.keep", "out/other.safetensors.keyframe.x9y8z7",
                               "out/model.safetensors" };
        for (size_t i = 0; i < sizeof made / sizeof *made; i++)
            if ((f = fopen(at(made[i]), "w")) != NULL) {
                fputs("x", f);
                fclose(f);
            }
        CHECK_EQ_INT(entries(at("out")), 6);
        sync_keyframe_sweep(at("out/model.safetensors"));
        CHECK_EQ_INT(entries(at("out")), 3);
        CHECK(exists(at("out/model.safetensors")) && exists(at("out/model.safetensors.keep")) &&
              exists(at("out/other.safetensors.keyframe.x9y8z7")));
        for (size_t i = 4; i < sizeof made / sizeof *made; i++)
            unlink(at(made[i]));
        CHECK_EQ_INT(entries(at("out")), 0);
    }

    /* Refusals. */
    check_refused(st, MIXED, PULSE_ERR_FORMAT);
    check_refused(st, SLASH, PULSE_ERR_FORMAT);
    check_refused(st, GAP, PULSE_ERR_FORMAT);
    check_refused(st, REPEATED, PULSE_ERR_FORMAT);
    check_refused(st, WRONG_RESULT, PULSE_ERR_CORRUPT);
    check_refused(st, DUP_TENSOR, PULSE_ERR_FORMAT);
    check_refused(st, CHUNK_AFTER_HASHES, PULSE_ERR_FORMAT);
    check_refused(st, UNKNOWN_ROLE, PULSE_ERR_FORMAT);
    CHECK(strstr(pulse_last_error(), "tensor-hashes-v9") != NULL);

    /* Shard names: only plain *.safetensors names. */
    {
        static const char *bad[] = { ".part.safetensors", "part.bin", "part one.safetensors", "..safetensors",
                                     ".safetensors", "a\\b.safetensors" };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            pulse_record r;
            merged(&r, GOOD, whole_id);
            free(r.objects[0].tensor);
            r.objects[0].tensor = strdup(bad[i]);
            CHECK_ERR(sync_keyframe_restore(st, "R", &r, 2, at("out/model.safetensors"), &moved), PULSE_ERR_FORMAT);
            CHECK(!exists(at("out/model.safetensors")));
            pulse_record_clear(&r);
        }
        char longname[300];
        memset(longname, 'a', sizeof longname);
        strcpy(longname + 256 - strlen(".safetensors"), ".safetensors");   /* 256 bytes */
        pulse_record r;
        merged(&r, GOOD, whole_id);
        free(r.objects[0].tensor);
        r.objects[0].tensor = strdup(longname);
        CHECK_ERR(sync_keyframe_restore(st, "R", &r, 2, at("out/model.safetensors"), &moved), PULSE_ERR_FORMAT);
        pulse_record_clear(&r);
        CHECK_EQ_INT(entries(at("out")), 0);
    }

    /* The stray shard's objects are no part of the run the audit sees. */
    for (uint32_t k = 0; k < shard_recs[NSHARDS].n_objects; k++) {
        char key[SYNC_KEY_MAX];
        CHECK_OK(sync_object_key("R", shard_recs[NSHARDS].objects[k].digest, key));
        CHECK_OK(pulse_store_delete(st, key));
    }
    test_audit(st);

    pulse_store_close(&st);
    pulse_ckpt_close(&whole);
    for (int s = 0; s <= NSHARDS; s++) {
        pulse_ckpt_close(&shards[s]);
        pulse_record_clear(&shard_recs[s]);
    }
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_done("test_keyframe_parts");
}
