/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper: publishes a validly signed but bad LoCo shard record (an entry the gate keeps back, a NaN, a huge value, or a replayed older record). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/sha256.h"
#include "node/loco/loco_internal.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

static int die(const char *what, int rc)
{
    fprintf(stderr, "loco_forge: %s: %s: %s\n", what, pulse_strerror(rc), pulse_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fputs("usage: loco_forge STORE-URL RUN KEY.key STATE-DIR invisible|nan|replay|result [SRC-ROUND | OFFSET LEN]\n"
              "       loco_forge STORE-URL RUN KEY.key STATE-DIR value|reduced V [OFFSET LEN]\n"
              "  signs with KEY a loco-shard record for STATE-DIR's round (theta_r and its view id from there):\n"
              "  invisible: one good entry and one the BF16 gate keeps back; visible: the good entry only;\n"
              "  nan: a NaN value; value V: two entries, +V and -V (any large V passes the gate);\n"
              "  reduced V: instead a loco-reduced record of attempt 0 (KEY as an owner) with one reduced\n"
              "  object, +V and -V, at [OFFSET, OFFSET + LEN) of the first tensor;\n"
              "  replay: KEY's own record of SRC-ROUND copied byte for byte under this round's key;\n"
              "  result: a loco-result record for the round with another result state (members unreadable).\n",
              stderr);
        return 2;
    }
    const char *url = argv[1], *run = argv[2], *mode = argv[5];
    pulse_secret_key *k = NULL;
    pulse_store *st = NULL;
    loco_state s;
    int rc = pulse_key_load_secret(argv[3], &k);
    if (rc)
        return die(argv[3], rc);
    if ((rc = pulse_store_open(&st, url, NULL)))
        return die(url, rc);
    if ((rc = loco_state_load(argv[4], &s)))
        return die(argv[4], rc);
    uint8_t pub[32];
    char hex[PULSE_NODE_ID_HEX], key[SYNC_KEY_MAX], rel[SYNC_KEY_MAX];
    pulse_key_public(k, pub);
    pulse_node_id_hex(pub, hex);
    snprintf(rel, sizeof rel, "records/loco-shard/%012llu/%s", (unsigned long long)s.round, hex);
    sync_run_key(run, rel, key);
    if (!strcmp(mode, "replay")) {
        if (argc < 7)
            return die("replay needs SRC-ROUND", PULSE_ERR_INVALID);
        char src[SYNC_KEY_MAX], srel[SYNC_KEY_MAX];
        snprintf(srel, sizeof srel, "records/loco-shard/%012llu/%s", strtoull(argv[6], NULL, 10), hex);
        sync_run_key(run, srel, src);
        void *data = NULL;
        size_t len = 0;
        if ((rc = pulse_store_get(st, src, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &len, NULL)))
            return die(src, rc);
        if ((rc = pulse_store_put(st, key, data, len, PULSE_PUT_IF_ABSENT)))
            return die(key, rc);
        pulse_store_free(data);
        puts(rel);
        loco_state_close(&s);
        pulse_store_close(&st);
        pulse_key_free(&k);
        return 0;
    }
    if (!strcmp(mode, "result")) {
        static const char junk[] = "not a members object";
        sync_blob jb = { .data = junk, .len = sizeof junk };
        pulse_sha256(junk, sizeof junk, jb.digest);
        uint64_t moved = 0;
        pulse_record r;
        uint8_t *bytes = NULL;
        size_t blen = 0;
        if ((rc = sync_put_objects(st, run, &jb, 1, &moved)) ||
            (rc = pulse_record_init(&r, PULSE_RECORD_LOCO_RESULT, run, s.round)))
            return die("object", rc);
        memcpy(r.base, s.view_id, 32);
        memset(r.result, 0x5a, 32);
        r.time = (uint64_t)time(NULL);
        if ((rc = pulse_record_add_object(&r, jb.digest, sizeof junk, "loco-members", NULL, 0, 0)) ||
            (rc = pulse_record_sign(&r, k, &bytes, &blen)) || (rc = pulse_record_key(&r, rel, sizeof rel)) ||
            (rc = sync_run_key(run, rel, key)) || (rc = pulse_store_put(st, key, bytes, blen, PULSE_PUT_IF_ABSENT)))
            return die("result", rc);
        puts(rel);
        free(bytes);
        pulse_record_clear(&r);
        loco_state_close(&s);
        pulse_store_close(&st);
        pulse_key_free(&k);
        return 0;
    }
    /* invisible|nan|value V|reduced V [OFFSET LEN]: the shard covers [OFFSET, OFFSET + LEN) of the
     * first tensor (default [0, 4096)), so a reduce-scatter test can put it in a range another
     * trainer owns (or, reduced, in one this key owns). */
    int with_value = !strcmp(mode, "value") || !strcmp(mode, "reduced");
    if (with_value && argc < 7)
        return die("value and reduced need V", PULSE_ERR_INVALID);
    int ra = with_value ? 7 : 6;   /* where OFFSET LEN start */
    const pulse_tensor *t = pulse_ckpt_tensor(s.theta, 0);
    uint64_t start = argc >= ra + 2 ? strtoull(argv[ra], NULL, 10) : 0;
    uint32_t len = argc >= ra + 2 ? (uint32_t)strtoul(argv[ra + 1], NULL, 10)
                                  : (t->nelems < 4096 ? (uint32_t)t->nelems : 4096);
    if (len == 0 || start > t->nelems || len > t->nelems - start)
        return die("range outside the first tensor", PULSE_ERR_INVALID);
    const float *theta = (const float *)(const void *)t->data + start;
    uint32_t idx[2];
    float val[2];
    uint32_t n = 0;
    if (!strcmp(mode, "nan")) {
        idx[0] = 0;
        val[0] = NAN;
        n = 1;
    } else if (with_value) {
        if (len < 2)
            return die("value and reduced need a range of 2 elements at least", PULSE_ERR_INVALID);
        float v = strtof(argv[6], NULL);
        idx[0] = 0;
        val[0] = v;
        idx[1] = 1;
        val[1] = -v;
        n = 2;
    } else {
        /* A visible entry (half the weight), then an invisible one (a millionth of a weight). */
        for (uint32_t i = 0; i < len && n < 2; i++)
            if (fabsf(theta[i]) > 1e-3f) {
                idx[n] = i;
                val[n] = n == 0 ? theta[i] * 0.5f : theta[i] * 1e-6f;
                n++;
            }
        /* visible: only the first entry, a shard that passes every check (a member that then
         * never does its part as a reduce-scatter owner) */
        if (!strcmp(mode, "visible") && n > 1)
            n = 1;
    }
    uint8_t *obj = NULL;
    size_t olen = 0;
    if ((rc = loco_shard_encode(s.view, start, len, idx, val, n, &obj, &olen)))
        return die("encode", rc);
    sync_blob b = { .data = obj, .len = olen };
    pulse_sha256(obj, olen, b.digest);
    uint64_t moved = 0;
    pulse_record r;
    uint8_t *bytes = NULL;
    size_t blen = 0;
    int reduced = !strcmp(mode, "reduced");
    if (reduced) {   /* an owner's record of attempt 0: <run>/loco-rs/<round:012>/00/<node id> */
        snprintf(rel, sizeof rel, "loco-rs/%012llu/00/%s", (unsigned long long)s.round, hex);
        sync_run_key(run, rel, key);
    }
    if ((rc = sync_put_objects(st, run, &b, 1, &moved)) ||
        (rc = pulse_record_init(&r, reduced ? PULSE_RECORD_LOCO_REDUCED : PULSE_RECORD_LOCO_SHARD, run, s.round)))
        return die("object", rc);
    memcpy(r.base, s.view_id, 32);
    r.time = (uint64_t)time(NULL);
    r.changes = n;
    if ((rc = pulse_record_add_object(&r, b.digest, olen, reduced ? "loco-reduced" : "loco-shard", t->name, start,
                                      len)) ||
        (rc = pulse_record_sign(&r, k, &bytes, &blen)) || (rc = pulse_store_put(st, key, bytes, blen, PULSE_PUT_IF_ABSENT)))
        return die(key, rc);
    puts(rel);
    free(bytes);
    free(obj);
    pulse_record_clear(&r);
    loco_state_close(&s);
    pulse_store_close(&st);
    pulse_key_free(&k);
    return 0;
}
