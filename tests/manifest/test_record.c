/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of records: sign/verify, tampering, trust, parser strictness on crafted bytes, canonical round trip. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pulseweights/record.h"

/* Deterministic PRNG (splitmix64) so every run tests the same records. */
static uint64_t prng_state = 0x5eedf00dULL;
static uint64_t prng(void)
{
    uint64_t z = (prng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + 31 * i + 1);
}

/* A valid record of KIND with N_OBJ objects (0 where the kind needs none). */
static void make_record(pulse_record *r, int kind, uint32_t n_obj)
{
    CHECK_OK(pulse_record_init(r, kind, "run-7.b_x", 42));
    r->time = 1764400000;
    if (kind != PULSE_RECORD_KEYFRAME)
        fill(r->base, 32, 1);
    if (kind != PULSE_RECORD_LOCO_SHARD && kind != PULSE_RECORD_LOCO_REDUCED)
        fill(r->result, 32, 2);
    r->changes = 123456;
    r->dense_bytes = 1 << 30;
    r->patch_bytes = 25000000;
    if (kind == PULSE_RECORD_RECEIPT)
        n_obj = 0;
    for (uint32_t i = 0; i < n_obj; i++) {
        uint8_t d[32];
        fill(d, 32, (uint8_t)(10 + i));
        char tensor[64];
        snprintf(tensor, sizeof tensor, "model.layers.%u.mlp.weight", i);
        CHECK_OK(pulse_record_add_object(r, d, 1000 + i, "patch-chunk", tensor, i * 4096ull, 4096));
    }
}

/* Offset of the field with TAG in valid record bytes (walks the TLVs), or 0. */
static size_t field_at(const uint8_t *b, size_t len, unsigned tag)
{
    size_t pos = 8;
    while (pos + 5 <= len) {
        uint32_t flen = (uint32_t)b[pos + 1] | (uint32_t)b[pos + 2] << 8 | (uint32_t)b[pos + 3] << 16 |
                        (uint32_t)b[pos + 4] << 24;
        if (b[pos] == tag)
            return pos;
        pos += 5 + flen;
    }
    return 0;
}

static size_t field_len(const uint8_t *b, size_t off)
{
    return 5 + ((uint32_t)b[off + 1] | (uint32_t)b[off + 2] << 8 | (uint32_t)b[off + 3] << 16 |
                (uint32_t)b[off + 4] << 24);
}

/* New buffer: B with [off, off+cut) replaced by INS[0..ins_len). */
static uint8_t *splice(const uint8_t *b, size_t len, size_t off, size_t cut, const uint8_t *ins, size_t ins_len,
                       size_t *out_len)
{
    uint8_t *o = malloc(len - cut + ins_len + 1);
    memcpy(o, b, off);
    if (ins_len)
        memcpy(o + off, ins, ins_len);
    memcpy(o + off + ins_len, b + off + cut, len - off - cut);
    *out_len = len - cut + ins_len;
    return o;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Parse must refuse B with CODE and a detail containing WHAT. */
static int expect_refused(const uint8_t *b, size_t len, int code, const char *what, int line)
{
    pulse_record r;
    int err = pulse_record_parse(b, len, &r);
    int ok = err == code && strstr(pulse_last_error(), what) != NULL;
    if (!ok)
        fprintf(stderr, "line %d: wanted %d with '%s', got %d: %s\n", line, code, what, err, pulse_last_error());
    CHECK(ok);
    CHECK(r.run == NULL && r.objects == NULL);   /* cleared on failure */
    return ok;
}
#define REFUSED(b, len, code, what) expect_refused(b, len, code, what, __LINE__)

static void test_sign_verify_tamper(void)
{
    pulse_secret_key *k = NULL, *stranger = NULL;
    CHECK_OK(pulse_key_generate(&k));
    CHECK_OK(pulse_key_generate(&stranger));
    pulse_public_key pk = { .comment = "trainer" }, spk = { .comment = "stranger" };
    pulse_key_public(k, pk.key);
    pulse_key_public(stranger, spk.key);
    pulse_trust *trust = NULL, *other = NULL;
    CHECK_OK(pulse_trust_new(&trust));
    CHECK_OK(pulse_trust_add(trust, &pk));
    CHECK_OK(pulse_trust_new(&other));
    CHECK_OK(pulse_trust_add(other, &spk));

    for (int kind = 1; kind <= PULSE_RECORD_KIND_MAX; kind++) {
        pulse_record r, got;
        make_record(&r, kind, 3);
        uint8_t *bytes = NULL;
        size_t len = 0;
        CHECK_OK(pulse_record_sign(&r, k, &bytes, &len));
        CHECK(memcmp(r.node, pk.key, 32) == 0);
        const pulse_public_key *signer = NULL;
        CHECK_OK(pulse_record_verify(bytes, len, trust, &signer, &got));
        CHECK(signer && !strcmp(signer->comment, "trainer"));
        CHECK(got.kind == kind && got.step == 42 && !strcmp(got.run, "run-7.b_x") && got.n_objects == r.n_objects);
        CHECK(memcmp(got.signature, r.signature, 64) == 0);
        pulse_record_clear(&got);

        /* Not trusted: PULSE_ERR_AUTH naming the node. */
        CHECK_ERR(pulse_record_verify(bytes, len, other, &signer, NULL), PULSE_ERR_AUTH);
        CHECK(strstr(pulse_last_error(), "not a trusted key") != NULL);

        /* Every single flipped bit position of every byte is refused (format or signature). */
        int refused = 0, auth = 0;
        for (size_t i = 0; i < len; i++) {
            bytes[i] ^= (uint8_t)(1u << (i % 8));
            int err = pulse_record_verify(bytes, len, trust, NULL, NULL);
            refused += err != 0;
            auth += err == PULSE_ERR_AUTH;
            bytes[i] ^= (uint8_t)(1u << (i % 8));
        }
        CHECK_EQ_INT(refused, len);
        CHECK(auth > 0);
        CHECK_OK(pulse_record_verify(bytes, len, trust, NULL, NULL));

        /* A signature over other bytes does not transfer. */
        size_t step_off = field_at(bytes, len, 2);
        put64(bytes + step_off + 5, 43);
        CHECK_ERR(pulse_record_verify(bytes, len, trust, NULL, NULL), PULSE_ERR_AUTH);
        CHECK(strstr(pulse_last_error(), "does not verify") != NULL);
        free(bytes);
        pulse_record_clear(&r);
    }
    pulse_trust_free(&trust);
    pulse_trust_free(&other);
    pulse_key_free(&k);
    pulse_key_free(&stranger);
}

static void test_strictness(void)
{
    pulse_record r;
    make_record(&r, PULSE_RECORD_SYNC_PATCH, 2);
    fill(r.node, 32, 9);
    fill(r.signature, 64, 3);
    uint8_t *b = NULL, *m;
    size_t len = 0, ml;
    CHECK_OK(pulse_record_encode(&r, &b, &len));
    pulse_record ok;
    CHECK_OK(pulse_record_parse(b, len, &ok));
    pulse_record_clear(&ok);
    uint8_t *c = malloc(len + 64);

    /* Header. */
    memcpy(c, b, len); c[0] = 'X';
    REFUSED(c, len, PULSE_ERR_FORMAT, "magic");
    memcpy(c, b, len); c[4] = 2;
    REFUSED(c, len, PULSE_ERR_FORMAT, "version 2");
    memcpy(c, b, len); c[6] = 7;   /* the first unknown kind (6 is loco-reduced) */
    REFUSED(c, len, PULSE_ERR_FORMAT, "kind 7");
    memcpy(c, b, len); c[6] = 0;
    REFUSED(c, len, PULSE_ERR_FORMAT, "kind 0");
    memcpy(c, b, len); c[7] = 1;
    REFUSED(c, len, PULSE_ERR_FORMAT, "flags");

    /* Trailing bytes, and every truncation. */
    memcpy(c, b, len); c[len] = 0;
    REFUSED(c, len + 1, PULSE_ERR_FORMAT, "trailing");
    int all_prefixes = 1;
    for (size_t n = 0; n < len; n++) {
        pulse_record t;
        if (pulse_record_parse(b, n, &t) != PULSE_ERR_FORMAT)
            all_prefixes = 0;
    }
    CHECK(all_prefixes);

    /* Field order: duplicate, out of order, missing, unknown tag, wrong fixed length. */
    size_t run_off = field_at(b, len, 1), step_off = field_at(b, len, 2), node_off = field_at(b, len, 3);
    size_t time_off = field_at(b, len, 4), sum_off = field_at(b, len, 7), obj_off = field_at(b, len, 8);
    size_t sig_off = field_at(b, len, 255);
    CHECK(run_off == 8 && step_off && node_off && time_off && sum_off && obj_off && sig_off);
    m = splice(b, len, node_off, 0, b + step_off, 13, &ml);        /* step twice */
    REFUSED(m, ml, PULSE_ERR_FORMAT, "field step: duplicate");
    free(m);
    m = splice(b, len, field_at(b, len, 5), 0, b + step_off, 13, &ml);  /* step again after time */
    REFUSED(m, ml, PULSE_ERR_FORMAT, "field step: out of order");
    free(m);
    m = splice(b, len, sum_off, 29, NULL, 0, &ml);                 /* no summary */
    REFUSED(m, ml, PULSE_ERR_FORMAT, "field summary: missing");
    free(m);
    m = splice(b, len, sig_off, 69, NULL, 0, &ml);                 /* unsigned */
    REFUSED(m, ml, PULSE_ERR_FORMAT, "field signature: missing");
    free(m);
    memcpy(c, b, len); c[time_off] = 9;
    REFUSED(c, len, PULSE_ERR_FORMAT, "unknown field tag 9");
    {
        uint8_t shortstep[12] = { 2, 7, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7 };
        m = splice(b, len, step_off, 13, shortstep, 12, &ml);
        REFUSED(m, ml, PULSE_ERR_FORMAT, "field step: 7 bytes");
        free(m);
    }
    memcpy(c, b, len); put32(c + sum_off + 1, 1000000);
    REFUSED(c, len, PULSE_ERR_FORMAT, "field summary: length");

    /* Strings: over-long run, bad characters, empty. */
    {
        uint8_t run[5 + 129];
        run[0] = 1;
        put32(run + 1, 129);
        memset(run + 5, 'a', 129);
        m = splice(b, len, run_off, field_len(b, run_off), run, sizeof run, &ml);
        REFUSED(m, ml, PULSE_ERR_LIMIT, "field run");
        free(m);
        put32(run + 1, 128);
        m = splice(b, len, run_off, field_len(b, run_off), run, 5 + 128, &ml);
        pulse_record t;
        CHECK_OK(pulse_record_parse(m, ml, &t));   /* exactly the limit is fine */
        pulse_record_clear(&t);
        free(m);
        uint8_t bad[5 + 3] = { 1, 3, 0, 0, 0, 'a', '/', 'b' };
        m = splice(b, len, run_off, field_len(b, run_off), bad, sizeof bad, &ml);
        REFUSED(m, ml, PULSE_ERR_FORMAT, "field run: byte 1");
        free(m);
        uint8_t dot[5 + 2] = { 1, 2, 0, 0, 0, '.', '.' };
        m = splice(b, len, run_off, field_len(b, run_off), dot, sizeof dot, &ml);
        REFUSED(m, ml, PULSE_ERR_FORMAT, "field run: byte 0");
        free(m);
        uint8_t empty[5] = { 1, 0, 0, 0, 0 };
        m = splice(b, len, run_off, field_len(b, run_off), empty, sizeof empty, &ml);
        REFUSED(m, ml, PULSE_ERR_FORMAT, "field run: empty");
        free(m);
    }

    /* Integers beyond SQLite's range. */
    memcpy(c, b, len); put64(c + step_off + 5, (uint64_t)INT64_MAX + 1);
    REFUSED(c, len, PULSE_ERR_LIMIT, "field step");
    memcpy(c, b, len); put64(c + sum_off + 5 + 8, UINT64_MAX);
    REFUSED(c, len, PULSE_ERR_LIMIT, "summary.dense_bytes");

    /* Objects: count limits, digests, sizes, roles, tensor names. */
    size_t o0 = obj_off + 5 + 4;   /* first object */
    memcpy(c, b, len); put32(c + obj_off + 5, PULSE_RECORD_MAX_OBJECTS + 1);
    REFUSED(c, len, PULSE_ERR_LIMIT, "objects");
    memcpy(c, b, len); put32(c + obj_off + 5, 4);
    REFUSED(c, len, PULSE_ERR_FORMAT, "cannot fit");
    memcpy(c, b, len); put32(c + obj_off + 5, 1);
    REFUSED(c, len, PULSE_ERR_FORMAT, "after the last object");
    memcpy(c, b, len); memset(c + o0, 0, 32);
    REFUSED(c, len, PULSE_ERR_FORMAT, "object 0: digest is all zero");
    memcpy(c, b, len); put64(c + o0 + 32, 0);
    REFUSED(c, len, PULSE_ERR_FORMAT, "object 0: size 0");
    memcpy(c, b, len); put64(c + o0 + 32, PULSE_RECORD_MAX_OBJECT_SIZE + 1);
    REFUSED(c, len, PULSE_ERR_LIMIT, "object 0: size");
    memcpy(c, b, len); put64(c + o0 + 40, UINT64_MAX);
    REFUSED(c, len, PULSE_ERR_LIMIT, "object 0: byte range");
    memcpy(c, b, len); c[o0 + 57] = 'P';
    REFUSED(c, len, PULSE_ERR_FORMAT, "object 0: role byte 0");
    memcpy(c, b, len); c[o0 + 56] = 40;
    REFUSED(c, len, PULSE_ERR_LIMIT, "object 0: role of 40 bytes");
    memcpy(c, b, len); c[o0 + 56] = 0;
    REFUSED(c, len, PULSE_ERR_FORMAT, "object 0: empty role");
    size_t t0 = o0 + 57 + strlen("patch-chunk");   /* tensor length of object 0 */
    memcpy(c, b, len); c[t0 + 2] = 0x01;
    REFUSED(c, len, PULSE_ERR_FORMAT, "object 0: control byte");
    memcpy(c, b, len); c[t0 + 2] = 0xc0; c[t0 + 3] = 0x80;   /* overlong NUL */
    REFUSED(c, len, PULSE_ERR_FORMAT, "object 0: tensor name not UTF-8");
    memcpy(c, b, len); c[t0 + 2] = 0xff;
    REFUSED(c, len, PULSE_ERR_FORMAT, "object 0: tensor name not UTF-8");
    memcpy(c, b, len); c[t0] = 0x01; c[t0 + 1] = 0x02;    /* 513 bytes */
    REFUSED(c, len, PULSE_ERR_LIMIT, "object 0: tensor name of 513 bytes");
    memcpy(c, b, len); c[t0] = 0xff; c[t0 + 1] = 0x01;    /* 511: runs past the field */
    REFUSED(c, len, PULSE_ERR_FORMAT, "object 0: tensor name runs past");

    /* Kind rules. */
    memcpy(c, b, len); c[6] = PULSE_RECORD_KEYFRAME;
    REFUSED(c, len, PULSE_ERR_FORMAT, "field base");
    memcpy(c, b, len); c[6] = PULSE_RECORD_RECEIPT;
    REFUSED(c, len, PULSE_ERR_FORMAT, "field objects");
    memcpy(c, b, len); memset(c + field_at(b, len, 6) + 5, 0, 32);
    REFUSED(c, len, PULSE_ERR_FORMAT, "field result");

    /* The whole record size. */
    uint8_t *huge = calloc(1, PULSE_RECORD_MAX_BYTES + 1);
    memcpy(huge, b, len);
    REFUSED(huge, PULSE_RECORD_MAX_BYTES + 1, PULSE_ERR_LIMIT, "record of");
    free(huge);

    /* The builder refuses what the parser would. */
    uint8_t zero[32] = { 0 }, d[32];
    fill(d, 32, 5);
    CHECK_ERR(pulse_record_add_object(&r, zero, 10, "keyframe", "", 0, 0), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_record_add_object(&r, d, 0, "keyframe", "", 0, 0), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_record_add_object(&r, d, 10, "Key Frame", "", 0, 0), PULSE_ERR_FORMAT);
    pulse_record bad;
    CHECK_ERR(pulse_record_init(&bad, PULSE_RECORD_KEYFRAME, "a b", 0), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_record_init(&bad, 9, "a", 0), PULSE_ERR_INVALID);
    r.step = UINT64_MAX;
    uint8_t *x = NULL;
    size_t xl;
    CHECK_ERR(pulse_record_encode(&r, &x, &xl), PULSE_ERR_LIMIT);

    free(c);
    free(b);
    pulse_record_clear(&r);
}

static void random_string(char *s, size_t n, const char *alphabet)
{
    size_t a = strlen(alphabet);
    for (size_t i = 0; i < n; i++)
        s[i] = alphabet[prng() % a];
    s[n] = '\0';
}

static void test_canonical_round_trip(void)
{
    static const char run_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    static const char role_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789-";
    static const char tensor_chars[] = "abcxyz.0123_/ \"\\\xc3\xa9";   /* ASCII plus 'é' as two bytes */
    int mismatches = 0, failures = 0;
    for (int iter = 0; iter < 400; iter++) {
        pulse_record r;
        char run[PULSE_RECORD_MAX_RUN + 1];
        size_t rl = 1 + prng() % PULSE_RECORD_MAX_RUN;
        random_string(run, rl, run_chars);
        run[0] = 'r';
        int kind = 1 + (int)(prng() % PULSE_RECORD_KIND_MAX);
        if (pulse_record_init(&r, kind, run, prng() >> 1) != 0) {
            failures++;
            continue;
        }
        r.time = prng() >> 1;
        r.changes = prng() >> 1;
        r.dense_bytes = prng() >> 1;
        r.patch_bytes = prng() >> 1;
        for (int i = 0; i < 32; i++) {
            r.node[i] = (uint8_t)prng();
            r.base[i] = kind == PULSE_RECORD_KEYFRAME ? 0 : (uint8_t)(prng() | 1);
            r.result[i] = kind == PULSE_RECORD_LOCO_SHARD || kind == PULSE_RECORD_LOCO_REDUCED ? 0 : (uint8_t)(prng() | 1);
        }
        for (int i = 0; i < 64; i++)
            r.signature[i] = (uint8_t)prng();
        uint32_t n_obj = kind == PULSE_RECORD_RECEIPT ? 0 : 1 + (uint32_t)(prng() % 20);
        for (uint32_t i = 0; i < n_obj; i++) {
            uint8_t d[32];
            for (int j = 0; j < 32; j++)
                d[j] = (uint8_t)(prng() | 1);
            char role[PULSE_RECORD_MAX_ROLE + 1], tensor[64];
            random_string(role, 1 + prng() % PULSE_RECORD_MAX_ROLE, role_chars);
            /* Whole 2-byte characters only: build from units, never split the 'é'. */
            size_t tl = 0, want = prng() % 40;
            while (tl < want) {
                size_t u = prng() % (sizeof tensor_chars - 2);
                if (tensor_chars[u] == '\xc3' || tensor_chars[u] == '\xa9') {
                    tensor[tl++] = '\xc3';
                    tensor[tl++] = '\xa9';
                } else {
                    tensor[tl++] = tensor_chars[u];
                }
            }
            tensor[tl] = '\0';
            uint64_t off = prng() >> 2, length = prng() >> 2;
            if (pulse_record_add_object(&r, d, 1 + prng() % PULSE_RECORD_MAX_OBJECT_SIZE, role, tensor, off,
                                        length) != 0)
                failures++;
        }
        uint8_t *b1 = NULL, *b2 = NULL;
        size_t l1 = 0, l2 = 0;
        pulse_record p;
        if (pulse_record_encode(&r, &b1, &l1) != 0 || pulse_record_parse(b1, l1, &p) != 0) {
            fprintf(stderr, "iteration %d: %s\n", iter, pulse_last_error());
            failures++;
        } else {
            if (pulse_record_encode(&p, &b2, &l2) != 0 || l1 != l2 || memcmp(b1, b2, l1) != 0)
                mismatches++;
            if (p.step != r.step || p.time != r.time || p.n_objects != r.n_objects || strcmp(p.run, r.run) ||
                memcmp(p.signature, r.signature, 64) || p.patch_bytes != r.patch_bytes)
                mismatches++;
            for (uint32_t i = 0; i < p.n_objects && i < r.n_objects; i++)
                if (strcmp(p.objects[i].tensor, r.objects[i].tensor) || strcmp(p.objects[i].role, r.objects[i].role) ||
                    p.objects[i].size != r.objects[i].size || p.objects[i].range_length != r.objects[i].range_length)
                    mismatches++;
            /* Builder on a parsed record still works (capacity kept). */
            uint8_t d[32];
            fill(d, 32, 77);
            if (kind != PULSE_RECORD_RECEIPT && pulse_record_add_object(&p, d, 5, "extra", NULL, 0, 0) != 0)
                failures++;
            pulse_record_clear(&p);
        }
        free(b1);
        free(b2);
        pulse_record_clear(&r);
    }
    CHECK_EQ_INT(failures, 0);
    CHECK_EQ_INT(mismatches, 0);
}

static void test_render_and_key(void)
{
    pulse_record r;
    make_record(&r, PULSE_RECORD_SYNC_PATCH, 2);
    fill(r.node, 32, 0xa0);
    free(r.objects[1].tensor);
    r.objects[1].tensor = strdup("odd\"name\\");
    char *text = NULL;
    size_t tl = 0;
    FILE *f = open_memstream(&text, &tl);
    pulse_public_key signer = { .comment = "trainer-0" };
    CHECK_OK(pulse_record_render(&r, &signer, PULSE_RENDER_TEXT, f));
    CHECK_OK(pulse_record_render(&r, NULL, PULSE_RENDER_JSON, f));
    fclose(f);
    char id[PULSE_NODE_ID_HEX];
    pulse_node_id_hex(r.node, id);
    CHECK(text && strstr(text, "record sync-patch") && strstr(text, "run-7.b_x") && strstr(text, id));
    CHECK(text && strstr(text, "(trainer-0)") && strstr(text, "2.33% of dense"));
    CHECK(text && strstr(text, "\"kind\":\"sync-patch\"") && strstr(text, "\"tensor\":\"odd\\\"name\\\\\""));
    CHECK(text && strstr(text, "\"signer\":null"));
    free(text);

    char key[256];
    CHECK_OK(pulse_record_key(&r, key, sizeof key));
    char want[256];
    snprintf(want, sizeof want, "records/sync-patch/000000000042/%s", id);
    CHECK(strcmp(key, want) == 0);
    r.kind = PULSE_RECORD_RECEIPT;
    CHECK_OK(pulse_record_key(&r, key, sizeof key));
    snprintf(want, sizeof want, "receipts/%s/000000000042", id);
    CHECK(strcmp(key, want) == 0);
    CHECK_ERR(pulse_record_key(&r, key, 20), PULSE_ERR_LIMIT);
    CHECK_EQ_INT(pulse_record_kind_from_name("loco-shard"), PULSE_RECORD_LOCO_SHARD);
    CHECK_EQ_INT(pulse_record_kind_from_name("nope"), 0);
    pulse_record_clear(&r);
}

/* Kind 6, loco-reduced (appended): like loco-shard, a base and no result, at least one object;
 * its name, its key, and kind 7 still unknown. */
static void test_loco_reduced(void)
{
    pulse_secret_key *k = NULL;
    CHECK_OK(pulse_key_generate(&k));
    pulse_public_key pk = { .comment = "owner" };
    pulse_key_public(k, pk.key);
    pulse_trust *trust = NULL;
    CHECK_OK(pulse_trust_new(&trust));
    CHECK_OK(pulse_trust_add(trust, &pk));
    CHECK(pulse_record_kind_name(PULSE_RECORD_LOCO_REDUCED) &&
          !strcmp(pulse_record_kind_name(PULSE_RECORD_LOCO_REDUCED), "loco-reduced"));
    CHECK_EQ_INT(pulse_record_kind_from_name("loco-reduced"), PULSE_RECORD_LOCO_REDUCED);
    CHECK(pulse_record_kind_name(PULSE_RECORD_KIND_MAX + 1) == NULL);

    pulse_record r, got;
    make_record(&r, PULSE_RECORD_LOCO_REDUCED, 2);
    uint8_t *bytes = NULL;
    size_t len = 0;
    CHECK_OK(pulse_record_sign(&r, k, &bytes, &len));
    const pulse_public_key *signer = NULL;
    CHECK_OK(pulse_record_verify(bytes, len, trust, &signer, &got));
    CHECK(got.kind == PULSE_RECORD_LOCO_REDUCED && got.n_objects == 2);
    pulse_record_clear(&got);
    char key[256], want[256], id[PULSE_NODE_ID_HEX];
    CHECK_OK(pulse_record_key(&r, key, sizeof key));
    pulse_node_id_hex(r.node, id);
    snprintf(want, sizeof want, "records/loco-reduced/000000000042/%s", id);
    CHECK(strcmp(key, want) == 0);
    /* kind 7 (byte 6 of the header, docs/trust.md) in otherwise valid bytes: refused by the parser */
    CHECK(len > 6 && bytes[6] == PULSE_RECORD_LOCO_REDUCED);
    uint8_t *bad = malloc(len);
    CHECK(bad != NULL);
    if (bad) {
        memcpy(bad, bytes, len);
        bad[6] = 7;
        CHECK_ERR(pulse_record_parse(bad, len, &got), PULSE_ERR_FORMAT);
        free(bad);
    }
    free(bytes);

    /* A result state, a missing base, or no objects: refused (kind rules). */
    fill(r.result, 32, 2);
    CHECK_ERR(pulse_record_sign(&r, k, &bytes, &len), PULSE_ERR_FORMAT);
    CHECK(strstr(pulse_last_error(), "loco-reduced") != NULL);
    memset(r.result, 0, 32);
    memset(r.base, 0, 32);
    CHECK_ERR(pulse_record_sign(&r, k, &bytes, &len), PULSE_ERR_FORMAT);
    pulse_record_clear(&r);
    make_record(&r, PULSE_RECORD_LOCO_REDUCED, 0);
    CHECK_ERR(pulse_record_sign(&r, k, &bytes, &len), PULSE_ERR_FORMAT);
    pulse_record_clear(&r);
    pulse_trust_free(&trust);
    pulse_key_free(&k);
}

int main(void)
{
    test_sign_verify_tamper();
    test_strictness();
    test_loco_reduced();
    test_canonical_round_trip();
    test_render_and_key();
    return check_done("test_record");
}
