/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper for the attack tests: forges validly signed records in a store, and reads a follower's index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/sha256.h"
#include "manifest/layout.h"
#include "pulseweights/keys.h"
#include "pulseweights/manifest.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

static const char usage[] =
    "usage: forge sign KEY.key STORE-URL RUN SRC-REL STEP [--base-of REL] [--objects-of REL]\n"
    "                  [--put-as REL] [--head] [--one-patch] [--add-object FILE ROLE]\n"
    "                  [--result-of REL] [--patch FILE]\n"
    "         a copy of the record at SRC-REL with step STEP, signed by KEY: base := the result\n"
    "         of the record at REL; objects (and the summary) := those of the record at REL;\n"
    "         --add-object: FILE stored as an object and named last, of ROLE (its bytes added to\n"
    "         the summary's); stored under its own key, or under REL with --put-as; --head moves\n"
    "         the signer's head to it; --one-patch: a patch in parts stored as one 'patch' object\n"
    "         and named as earlier publishers named it (the patch, then its head). Prints the key\n"
    "         it was stored under; --result-of: result := the result of the record at REL;\n"
    "         --patch: the objects := FILE (a patch) whole as 'patch' and its head as\n"
    "         'patch-index', both stored (as publishers before parts named a patch).\n"
    "       forge held STATE-DIR RUN\n"
    "         prints 'step N state HEX' of the last applied row of RUN in STATE-DIR/index.db,\n"
    "         or 'none'.\n";

static int die(const char *what, int rc)
{
    fprintf(stderr, "forge: %s: %s: %s\n", what, pulse_strerror(rc), pulse_last_error());
    return 1;
}

static int load(pulse_store *st, const char *run, const char *rel, pulse_record *r)
{
    char key[1024];
    snprintf(key, sizeof key, "%s/%s", run, rel);
    void *data = NULL;
    size_t len = 0;
    int rc = pulse_store_get(st, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &len, NULL);
    if (!rc)
        rc = pulse_record_parse(data, len, r);
    pulse_store_free(data);
    return rc;
}

/* Stores bytes as the run's object (objects/<digest>) and names it in r, of role, as [0, len). */
static int put_object(pulse_store *st, const char *run, pulse_record *r, const uint8_t *bytes, size_t len,
                      const char *role)
{
    uint8_t digest[32];
    pulse_sha256(bytes, len, digest);
    char rel[512], key[1024];
    int rc = pulse_layout_object(rel, sizeof rel, digest);
    snprintf(key, sizeof key, "%s/%s", run, rel);
    if (!rc)
        rc = pulse_store_put(st, key, bytes, len, 0);
    if (!rc)
        rc = pulse_record_add_object(r, digest, len, role, "", 0, 0);
    return rc;
}

/* The bytes of file stored as the run's object (objects/<digest>) and named last in r, of role. */
static int add_object(pulse_store *st, const char *run, pulse_record *r, const char *file, const char *role)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return PULSE_ERR_IO;
    static uint8_t buf[1 << 22];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int rc = put_object(st, run, r, buf, len, role);
    if (!rc)
        r->patch_bytes += len;
    return rc;
}

/* R's objects := the patch in FILE whole, then its head (header, table, digest), both stored. */
static int whole_patch(pulse_store *st, const char *run, pulse_record *r, const char *file)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return PULSE_ERR_IO;
    static uint8_t buf[1 << 24];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint64_t table = 0;
    for (int i = 7; len >= 104 && i >= 0; i--)
        table = table << 8 | buf[88 + i];
    if (len < 104 || table > len - 104 - 32)
        return PULSE_ERR_FORMAT;
    pulse_record fresh;
    memset(&fresh, 0, sizeof fresh);
    int rc = pulse_record_init(&fresh, r->kind, r->run, r->step);
    if (!rc)
        rc = put_object(st, run, &fresh, buf, len, "patch");
    if (!rc)
        rc = put_object(st, run, &fresh, buf, (size_t)(104 + table + 32), "patch-index");
    if (rc) {
        pulse_record_clear(&fresh);
        return rc;
    }
    fresh.time = r->time;
    memcpy(fresh.base, r->base, sizeof fresh.base);
    memcpy(fresh.result, r->result, sizeof fresh.result);
    fresh.changes = r->changes;
    fresh.dense_bytes = r->dense_bytes;
    fresh.patch_bytes = len + 104 + table + 32;
    pulse_record_clear(r);
    *r = fresh;
    return 0;
}

/* R's patch, a head and parts, read and stored again as one object, and R's objects made what
 * publishers before parts wrote: the patch, then its head. */
static int one_patch(pulse_store *st, const char *run, pulse_record *r)
{
    if (r->n_objects < 1 || strcmp(r->objects[0].role, "patch-index"))
        return PULSE_ERR_FORMAT;
    uint64_t total = 0;
    for (uint32_t i = 0; i < r->n_objects; i++)
        total += r->objects[i].size;
    uint8_t *patch = malloc(total ? total : 1);
    int rc = patch ? 0 : PULSE_ERR_NOMEM;
    uint64_t at = 0;
    for (uint32_t i = 0; !rc && i < r->n_objects; i++) {
        char rel[512], key[1024];
        pulse_layout_object(rel, sizeof rel, r->objects[i].digest);
        snprintf(key, sizeof key, "%s/%s", run, rel);
        void *data = NULL;
        size_t len = 0;
        rc = pulse_store_get(st, key, 0, PULSE_TO_END, (size_t)r->objects[i].size, &data, &len, NULL);
        if (!rc)
            memcpy(patch + at, data, len);
        at += len;
        pulse_store_free(data);
    }
    pulse_record one;
    memset(&one, 0, sizeof one);
    if (!rc)
        rc = pulse_record_init(&one, r->kind, r->run, r->step);
    if (!rc) {
        one.time = r->time;
        memcpy(one.base, r->base, sizeof one.base);
        memcpy(one.result, r->result, sizeof one.result);
        one.changes = r->changes;
        one.dense_bytes = r->dense_bytes;
        one.patch_bytes = total + r->objects[0].size;
        uint8_t digest[32];
        char rel[512], key[1024];
        pulse_sha256(patch, total, digest);
        pulse_layout_object(rel, sizeof rel, digest);
        snprintf(key, sizeof key, "%s/%s", run, rel);
        rc = pulse_store_put(st, key, patch, total, 0);
        if (!rc)
            rc = pulse_record_add_object(&one, digest, total, "patch", "", 0, 0);
        if (!rc)
            rc = pulse_record_add_object(&one, r->objects[0].digest, r->objects[0].size, "patch-index", "", 0, 0);
    }
    free(patch);
    /* the parts no record names now (an audit would call them orphans) */
    for (uint32_t i = 1; !rc && i < r->n_objects; i++) {
        char rel[512], key[1024];
        pulse_layout_object(rel, sizeof rel, r->objects[i].digest);
        snprintf(key, sizeof key, "%s/%s", run, rel);
        rc = pulse_store_delete(st, key);
    }
    if (rc) {
        pulse_record_clear(&one);
        return rc;
    }
    pulse_record_clear(r);
    *r = one;
    return 0;
}

static int cmd_sign(int argc, char **argv)
{
    if (argc < 7)
        return fputs(usage, stderr), 2;
    const char *keyfile = argv[2], *url = argv[3], *run = argv[4], *src = argv[5];
    uint64_t step = strtoull(argv[6], NULL, 10);
    const char *base_of = NULL, *objects_of = NULL, *put_as = NULL, *add_file = NULL, *add_role = NULL;
    const char *result_of = NULL, *patch_file = NULL;
    int head = 0, as_one = 0;
    for (int i = 7; i < argc; i++) {
        if (!strcmp(argv[i], "--head"))
            head = 1;
        else if (!strcmp(argv[i], "--one-patch"))
            as_one = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--base-of"))
            base_of = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--objects-of"))
            objects_of = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--put-as"))
            put_as = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--result-of"))
            result_of = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--patch"))
            patch_file = argv[++i];
        else if (i + 2 < argc && !strcmp(argv[i], "--add-object")) {
            add_file = argv[++i];
            add_role = argv[++i];
        }
        else
            return fputs(usage, stderr), 2;
    }
    pulse_secret_key *k = NULL;
    pulse_store *st = NULL;
    pulse_record r, other;
    memset(&r, 0, sizeof r);
    memset(&other, 0, sizeof other);
    int rc = pulse_key_load_secret(keyfile, &k);
    if (rc)
        return die(keyfile, rc);
    if ((rc = pulse_store_open(&st, url, NULL)))
        return die(url, rc);
    if ((rc = load(st, run, src, &r)))
        return die(src, rc);
    r.step = step;
    r.time = (uint64_t)time(NULL);
    if (base_of) {
        if ((rc = load(st, run, base_of, &other)))
            return die(base_of, rc);
        memcpy(r.base, other.result, sizeof r.base);
        pulse_record_clear(&other);
    }
    if (objects_of) {
        if ((rc = load(st, run, objects_of, &other)))
            return die(objects_of, rc);
        /* Rebuild the object list from the other record (the record API owns its strings). */
        pulse_record fresh;
        memset(&fresh, 0, sizeof fresh);
        if ((rc = pulse_record_init(&fresh, r.kind, r.run, r.step)))
            return die("init", rc);
        fresh.time = r.time;
        memcpy(fresh.base, r.base, sizeof fresh.base);
        memcpy(fresh.result, r.result, sizeof fresh.result);
        fresh.changes = other.changes;
        fresh.dense_bytes = other.dense_bytes;
        fresh.patch_bytes = other.patch_bytes;
        for (uint32_t i = 0; i < other.n_objects && !rc; i++) {
            const pulse_record_object *o = &other.objects[i];
            rc = pulse_record_add_object(&fresh, o->digest, o->size, o->role, o->tensor, o->range_offset,
                                         o->range_length);
        }
        if (rc)
            return die("objects", rc);
        pulse_record_clear(&other);
        pulse_record_clear(&r);
        r = fresh;
    }
    if (result_of) {
        if ((rc = load(st, run, result_of, &other)))
            return die(result_of, rc);
        memcpy(r.result, other.result, sizeof r.result);
        pulse_record_clear(&other);
    }
    if (patch_file && (rc = whole_patch(st, run, &r, patch_file)))
        return die(patch_file, rc);
    if (as_one && (rc = one_patch(st, run, &r)))
        return die("--one-patch", rc);
    if (add_file && (rc = add_object(st, run, &r, add_file, add_role)))
        return die(add_file, rc);
    uint8_t *bytes = NULL;
    size_t len = 0;
    if ((rc = pulse_record_sign(&r, k, &bytes, &len)))
        return die("sign", rc);
    char rel[512], key[1024];
    if (put_as)
        snprintf(rel, sizeof rel, "%s", put_as);
    else if ((rc = pulse_record_key(&r, rel, sizeof rel)))
        return die("key", rc);
    snprintf(key, sizeof key, "%s/%s", run, rel);
    if ((rc = pulse_store_put(st, key, bytes, len, 0)))
        return die(key, rc);
    if (head) {
        char id[PULSE_NODE_ID_HEX], hkey[1024], line[600];
        pulse_node_id_hex(r.node, id);
        snprintf(hkey, sizeof hkey, "%s/heads/sync/%s", run, id);
        int n = snprintf(line, sizeof line, "%s\n", rel);
        if ((rc = pulse_store_put(st, hkey, line, (size_t)n, 0)))
            return die(hkey, rc);
    }
    printf("%s\n", rel);
    free(bytes);
    pulse_record_clear(&r);
    pulse_store_close(&st);
    pulse_key_free(&k);
    return 0;
}

static int cmd_held(int argc, char **argv)
{
    if (argc != 4)
        return fputs(usage, stderr), 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/index.db", argv[2]);
    FILE *f = fopen(path, "rb");
    if (!f) {  /* opening would create it: a follower that never pulled holds nothing */
        printf("none\n");
        return 0;
    }
    fclose(f);
    pulse_index *ix = NULL;
    int rc = pulse_index_open(&ix, path);
    if (rc)
        return die(path, rc);
    pulse_index_applied a;
    rc = pulse_index_last_applied(ix, argv[3], &a);
    pulse_index_close(&ix);
    if (rc == PULSE_ERR_NOTFOUND) {
        printf("none\n");
        return 0;
    }
    if (rc)
        return die("last applied", rc);
    char hex[2 * PULSE_DIGEST_BYTES + 1];
    pulse_hex_encode(a.state, sizeof a.state, hex);
    printf("step %llu state %s\n", (unsigned long long)a.step, hex);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "sign"))
        return cmd_sign(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "held"))
        return cmd_held(argc, argv);
    fputs(usage, stderr);
    return 2;
}
