/* SPDX-License-Identifier: Apache-2.0 */
/* Signed records: building, the canonical v1 binary encoding, its strict parser, signing and verifying. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "base/names.h"
#include "manifest/layout.h"
#include "pulseweights/record.h"

/* Field tags of v1, in the only order they may appear (docs/trust.md). Every field is required
 * exactly once, so an accepted record has one encoding: encode(parse(x)) == x. */
enum {
    TAG_RUN = 1, TAG_STEP = 2, TAG_NODE = 3, TAG_TIME = 4, TAG_BASE = 5, TAG_RESULT = 6,
    TAG_SUMMARY = 7, TAG_OBJECTS = 8, TAG_SIGNATURE = 255,
};
static const uint8_t tag_order[] = { TAG_RUN, TAG_STEP, TAG_NODE, TAG_TIME, TAG_BASE, TAG_RESULT,
                                     TAG_SUMMARY, TAG_OBJECTS, TAG_SIGNATURE };
#define N_TAGS (sizeof tag_order / sizeof tag_order[0])

#define HEADER_BYTES 8u             /* magic 4, version 2, kind 1, flags 1 */
#define FIELD_HEAD 5u               /* tag 1, length 4 */
#define OBJECT_FIXED 59u            /* digest 32, size 8, offset 8, length 8, role len 1, tensor len 2 */

static const char *tag_name(unsigned tag)
{
    switch (tag) {
    case TAG_RUN: return "run";
    case TAG_STEP: return "step";
    case TAG_NODE: return "node";
    case TAG_TIME: return "time";
    case TAG_BASE: return "base";
    case TAG_RESULT: return "result";
    case TAG_SUMMARY: return "summary";
    case TAG_OBJECTS: return "objects";
    case TAG_SIGNATURE: return "signature";
    }
    return NULL;
}

static int tag_index(unsigned tag)
{
    for (size_t i = 0; i < N_TAGS; i++)
        if (tag_order[i] == tag)
            return (int)i;
    return -1;
}

static const char *const kind_names[] = { NULL, "sync-patch", "keyframe", "loco-shard", "loco-result", "receipt",
                                           "loco-reduced" };

PULSE_API const char *pulse_record_kind_name(int kind)
{
    return kind >= 1 && kind <= PULSE_RECORD_KIND_MAX ? kind_names[kind] : NULL;
}

PULSE_API int pulse_record_kind_from_name(const char *name)
{
    for (int k = 1; name && k <= PULSE_RECORD_KIND_MAX; k++)
        if (!strcmp(kind_names[k], name))
            return k;
    return 0;
}

/* ---- validation shared by the builder, the encoder and the parser ---- */

static int all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

/* Run names become path components of bucket keys: the rule lives in base/names.c, shared with
 * every verb and entry point that takes a run. */
_Static_assert(PULSE_NAMES_MAX_RUN == PULSE_RECORD_MAX_RUN, "one limit for run names");

static int check_run(const char *s, size_t n)
{
    return pulse_names_check_run("field run", s, n);
}

static int check_role(uint32_t idx, const char *s, size_t n)
{
    if (n == 0)
        return pulse_fail(PULSE_ERR_FORMAT, "object %u: empty role", idx);
    if (n > PULSE_RECORD_MAX_ROLE)
        return pulse_fail(PULSE_ERR_LIMIT, "object %u: role of %zu bytes, limit %u", idx, n, PULSE_RECORD_MAX_ROLE);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return pulse_fail(PULSE_ERR_FORMAT, "object %u: role byte %zu (0x%02x) not in [a-z0-9-]", idx, i,
                              (unsigned char)c);
    }
    return 0;
}

/* Tensor names: valid UTF-8 (shortest forms, no surrogates) without control characters, so that
 * every rendering (terminal, JSON) is safe and unambiguous. */
static int check_tensor(uint32_t idx, const uint8_t *s, size_t n)
{
    if (n > PULSE_RECORD_MAX_TENSOR)
        return pulse_fail(PULSE_ERR_LIMIT, "object %u: tensor name of %zu bytes, limit %u", idx, n,
                          PULSE_RECORD_MAX_TENSOR);
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f)
                return pulse_fail(PULSE_ERR_FORMAT, "object %u: control byte in tensor name at %zu", idx, i);
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return pulse_fail(PULSE_ERR_FORMAT, "object %u: tensor name not UTF-8 at byte %zu", idx, i);
        }
        if (n - i < len)
            return pulse_fail(PULSE_ERR_FORMAT, "object %u: tensor name not UTF-8 at byte %zu", idx, i);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return pulse_fail(PULSE_ERR_FORMAT, "object %u: tensor name not UTF-8 at byte %zu", idx, i);
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return pulse_fail(PULSE_ERR_FORMAT, "object %u: tensor name not UTF-8 at byte %zu", idx, i);
        i += len;
    }
    return 0;
}

static int check_u64(const char *field, uint64_t v)
{
    if (v > PULSE_RECORD_MAX_U64)
        return pulse_fail(PULSE_ERR_LIMIT, "field %s: %llu is beyond %llu", field, (unsigned long long)v,
                          (unsigned long long)PULSE_RECORD_MAX_U64);
    return 0;
}

static int check_object_numbers(uint32_t idx, const pulse_record_object *o)
{
    if (all_zero(o->digest, sizeof o->digest))
        return pulse_fail(PULSE_ERR_FORMAT, "object %u: digest is all zero", idx);
    if (o->size == 0)
        return pulse_fail(PULSE_ERR_FORMAT, "object %u: size 0 (an empty object is never published)", idx);
    if (o->size > PULSE_RECORD_MAX_OBJECT_SIZE)
        return pulse_fail(PULSE_ERR_LIMIT, "object %u: size %llu beyond the limit %llu", idx,
                          (unsigned long long)o->size, (unsigned long long)PULSE_RECORD_MAX_OBJECT_SIZE);
    if (o->range_offset > PULSE_RECORD_MAX_U64 || o->range_length > PULSE_RECORD_MAX_U64 - o->range_offset)
        return pulse_fail(PULSE_ERR_LIMIT, "object %u: byte range beyond %llu", idx,
                          (unsigned long long)PULSE_RECORD_MAX_U64);
    return 0;
}

/* What each kind must and must not carry (docs/trust.md, "Kind rules"). */
static int check_kind_rules(const pulse_record *r)
{
    int base = !all_zero(r->base, sizeof r->base), result = !all_zero(r->result, sizeof r->result);
    const char *name = pulse_record_kind_name(r->kind);
    switch (r->kind) {
    case PULSE_RECORD_SYNC_PATCH:
    case PULSE_RECORD_LOCO_RESULT:
        if (!base || !result)
            return pulse_fail(PULSE_ERR_FORMAT, "field %s: a %s record needs a base and a result state",
                              base ? "result" : "base", name);
        break;
    case PULSE_RECORD_KEYFRAME:
        if (base)
            return pulse_fail(PULSE_ERR_FORMAT, "field base: a keyframe has no base state (must be zero)");
        if (!result)
            return pulse_fail(PULSE_ERR_FORMAT, "field result: a keyframe needs its result state");
        break;
    case PULSE_RECORD_LOCO_SHARD:
        if (!base)
            return pulse_fail(PULSE_ERR_FORMAT, "field base: a loco-shard needs the round's start state");
        if (result)
            return pulse_fail(PULSE_ERR_FORMAT, "field result: a loco-shard has no result state (must be zero)");
        break;
    case PULSE_RECORD_LOCO_REDUCED:
        if (!base)
            return pulse_fail(PULSE_ERR_FORMAT, "field base: a loco-reduced record needs the round's start state");
        if (result)
            return pulse_fail(PULSE_ERR_FORMAT, "field result: a loco-reduced record has no result state (must be zero)");
        break;
    case PULSE_RECORD_RECEIPT:
        if (!result)
            return pulse_fail(PULSE_ERR_FORMAT, "field result: a receipt names the state held");
        if (r->n_objects)
            return pulse_fail(PULSE_ERR_FORMAT, "field objects: a receipt names no objects");
        break;
    default:
        return pulse_fail(PULSE_ERR_FORMAT, "kind %u unknown", r->kind);
    }
    if (r->kind != PULSE_RECORD_RECEIPT && r->kind != PULSE_RECORD_LOCO_RESULT && r->n_objects == 0)
        return pulse_fail(PULSE_ERR_FORMAT, "field objects: a %s record names at least one object", name);
    return 0;
}

PULSE_API int pulse_record_check(const pulse_record *r)
{
    if (!r || !r->run || (r->n_objects && !r->objects))
        return pulse_fail(PULSE_ERR_INVALID, "record: NULL field");
    if (r->version != PULSE_RECORD_VERSION)
        return pulse_fail(PULSE_ERR_FORMAT, "version %u unknown (this build reads %u)", r->version,
                          PULSE_RECORD_VERSION);
    int err = check_run(r->run, strlen(r->run));
    if (!err) err = check_u64("step", r->step);
    if (!err) err = check_u64("time", r->time);
    if (!err) err = check_u64("summary.changes", r->changes);
    if (!err) err = check_u64("summary.dense_bytes", r->dense_bytes);
    if (!err) err = check_u64("summary.patch_bytes", r->patch_bytes);
    if (!err && r->n_objects > PULSE_RECORD_MAX_OBJECTS)
        err = pulse_fail(PULSE_ERR_LIMIT, "field objects: %u objects, limit %u", r->n_objects,
                         PULSE_RECORD_MAX_OBJECTS);
    for (uint32_t i = 0; !err && i < r->n_objects; i++) {
        const pulse_record_object *o = &r->objects[i];
        if (!o->role || !o->tensor)
            return pulse_fail(PULSE_ERR_INVALID, "object %u: NULL role or tensor", i);
        err = check_object_numbers(i, o);
        if (!err) err = check_role(i, o->role, strlen(o->role));
        if (!err) err = check_tensor(i, (const uint8_t *)o->tensor, strlen(o->tensor));
    }
    if (!err)
        err = check_kind_rules(r);
    return err;
}

/* ---- building ---- */

PULSE_API int pulse_record_init(pulse_record *r, int kind, const char *run, uint64_t step)
{
    if (!r || !run)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_init: NULL argument");
    memset(r, 0, sizeof *r);
    if (!pulse_record_kind_name(kind))
        return pulse_fail(PULSE_ERR_INVALID, "record kind %d unknown", kind);
    int err = check_run(run, strlen(run));
    if (err)
        return err;
    if (!(r->run = strdup(run)))
        return pulse_fail(PULSE_ERR_NOMEM, "record run");
    r->version = PULSE_RECORD_VERSION;
    r->kind = (uint8_t)kind;
    r->step = step;
    return 0;
}

PULSE_API int pulse_record_add_object(pulse_record *r, const uint8_t digest[PULSE_DIGEST_BYTES], uint64_t size,
                                      const char *role, const char *tensor,
                                      uint64_t range_offset, uint64_t range_length)
{
    if (!r || !digest || !role)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_add_object: NULL argument");
    if (r->n_objects >= PULSE_RECORD_MAX_OBJECTS)
        return pulse_fail(PULSE_ERR_LIMIT, "field objects: more than %u objects", PULSE_RECORD_MAX_OBJECTS);
    if (!tensor)
        tensor = "";
    pulse_record_object o = { .size = size, .range_offset = range_offset, .range_length = range_length };
    memcpy(o.digest, digest, sizeof o.digest);
    int err = check_object_numbers(r->n_objects, &o);
    if (!err) err = check_role(r->n_objects, role, strlen(role));
    if (!err) err = check_tensor(r->n_objects, (const uint8_t *)tensor, strlen(tensor));
    if (err)
        return err;
    if (r->n_objects == r->objects_cap) {
        size_t cap = r->objects_cap ? 2 * (size_t)r->objects_cap : 8;
        if (cap > PULSE_RECORD_MAX_OBJECTS)
            cap = PULSE_RECORD_MAX_OBJECTS;
        pulse_record_object *grown = realloc(r->objects, cap * sizeof *grown);
        if (!grown)
            return pulse_fail(PULSE_ERR_NOMEM, "record objects");
        r->objects = grown;
        r->objects_cap = (uint32_t)cap;
    }
    o.role = strdup(role);
    o.tensor = strdup(tensor);
    if (!o.role || !o.tensor) {
        free(o.role);
        free(o.tensor);
        return pulse_fail(PULSE_ERR_NOMEM, "record object strings");
    }
    r->objects[r->n_objects++] = o;
    return 0;
}

PULSE_API void pulse_record_clear(pulse_record *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; r->objects && i < r->n_objects; i++) {
        free(r->objects[i].role);
        free(r->objects[i].tensor);
    }
    free(r->objects);
    free(r->run);
    memset(r, 0, sizeof *r);
}

/* ---- encoding ---- */

static uint8_t *put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    return p + 2;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}

static uint8_t *put_bytes(uint8_t *p, const void *src, size_t n)
{
    memcpy(p, src, n);
    return p + n;
}

static uint8_t *put_field(uint8_t *p, uint8_t tag, size_t len)
{
    *p++ = tag;
    return put_u32(p, (uint32_t)len);
}

static size_t objects_value_len(const pulse_record *r)
{
    size_t n = 4;
    for (uint32_t i = 0; i < r->n_objects; i++)
        n += OBJECT_FIXED + strlen(r->objects[i].role) + strlen(r->objects[i].tensor);
    return n;
}

/* Encodes R; with SIGNED == 0 stops before the signature field (the bytes that are signed). */
static int encode(const pulse_record *r, int with_signature, uint8_t **out, size_t *len)
{
    int err = pulse_record_check(r);
    if (err)
        return err;
    size_t run_len = strlen(r->run), obj_len = objects_value_len(r);
    size_t total = HEADER_BYTES + FIELD_HEAD * 8 + run_len + 8 + 32 + 8 + 32 + 32 + 24 + obj_len;
    if (with_signature)
        total += FIELD_HEAD + PULSE_SIGNATURE_BYTES;
    if (total > PULSE_RECORD_MAX_BYTES)
        return pulse_fail(PULSE_ERR_LIMIT, "record of %zu bytes, limit %u", total, PULSE_RECORD_MAX_BYTES);
    uint8_t *buf = malloc(total), *p = buf;
    if (!buf)
        return pulse_fail(PULSE_ERR_NOMEM, "record encoding");
    p = put_bytes(p, PULSE_RECORD_MAGIC, 4);
    p = put_u16(p, r->version);
    *p++ = r->kind;
    *p++ = 0;   /* flags: none defined in v1 */
    p = put_field(p, TAG_RUN, run_len);
    p = put_bytes(p, r->run, run_len);
    p = put_u64(put_field(p, TAG_STEP, 8), r->step);
    p = put_bytes(put_field(p, TAG_NODE, 32), r->node, 32);
    p = put_u64(put_field(p, TAG_TIME, 8), r->time);
    p = put_bytes(put_field(p, TAG_BASE, 32), r->base, 32);
    p = put_bytes(put_field(p, TAG_RESULT, 32), r->result, 32);
    p = put_field(p, TAG_SUMMARY, 24);
    p = put_u64(put_u64(put_u64(p, r->changes), r->dense_bytes), r->patch_bytes);
    p = put_u32(put_field(p, TAG_OBJECTS, obj_len), r->n_objects);
    for (uint32_t i = 0; i < r->n_objects; i++) {
        const pulse_record_object *o = &r->objects[i];
        size_t rl = strlen(o->role), tl = strlen(o->tensor);
        p = put_bytes(p, o->digest, 32);
        p = put_u64(p, o->size);
        p = put_u64(p, o->range_offset);
        p = put_u64(p, o->range_length);
        *p++ = (uint8_t)rl;
        p = put_bytes(p, o->role, rl);
        p = put_u16(p, (uint16_t)tl);
        p = put_bytes(p, o->tensor, tl);
    }
    if (with_signature)
        p = put_bytes(put_field(p, TAG_SIGNATURE, PULSE_SIGNATURE_BYTES), r->signature, PULSE_SIGNATURE_BYTES);
    if ((size_t)(p - buf) != total) {   /* a bug here would break canonicity: never ship it silently */
        free(buf);
        return pulse_fail(PULSE_ERR_INVALID, "record encoder size mismatch (%zu vs %zu)", (size_t)(p - buf), total);
    }
    *out = buf;
    *len = total;
    return 0;
}

PULSE_API int pulse_record_encode(const pulse_record *r, uint8_t **out, size_t *len)
{
    if (!out || !len)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_encode: NULL output");
    return encode(r, 1, out, len);
}

PULSE_API int pulse_record_sign(pulse_record *r, const pulse_secret_key *k, uint8_t **out, size_t *len)
{
    if (!r || !k || !out || !len)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_sign: NULL argument");
    pulse_key_public(k, r->node);
    uint8_t *bytes;
    size_t n;
    int err = encode(r, 1, &bytes, &n);
    if (err)
        return err;
    /* The signature covers every byte before the signature field's tag. */
    size_t signed_len = n - FIELD_HEAD - PULSE_SIGNATURE_BYTES;
    if ((err = pulse_sign(k, bytes, signed_len, r->signature))) {
        free(bytes);
        return err;
    }
    memcpy(bytes + n - PULSE_SIGNATURE_BYTES, r->signature, PULSE_SIGNATURE_BYTES);
    *out = bytes;
    *len = n;
    return 0;
}

/* ---- parsing ---- */

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int parse_u64(const char *field, const uint8_t *p, uint64_t *out)
{
    *out = get_u64(p);
    return check_u64(field, *out);
}

static char *dup_bytes(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

static int parse_objects(const uint8_t *v, size_t len, pulse_record *r)
{
    if (len < 4)
        return pulse_fail(PULSE_ERR_FORMAT, "field objects: %zu bytes, too short for a count", len);
    uint32_t count = get_u32(v);
    if (count > PULSE_RECORD_MAX_OBJECTS)
        return pulse_fail(PULSE_ERR_LIMIT, "field objects: %u objects, limit %u", count, PULSE_RECORD_MAX_OBJECTS);
    /* Bound the allocation by what the bytes can actually hold before making it. */
    if ((uint64_t)count * OBJECT_FIXED > len - 4)
        return pulse_fail(PULSE_ERR_FORMAT, "field objects: %u objects cannot fit in %zu bytes", count, len - 4);
    if (count && !(r->objects = calloc(count, sizeof *r->objects)))
        return pulse_fail(PULSE_ERR_NOMEM, "record objects");
    r->objects_cap = count;
    size_t pos = 4;
    for (uint32_t i = 0; i < count; i++) {
        pulse_record_object *o = &r->objects[i];
        r->n_objects = i + 1;   /* so that clear() frees what this one gets */
        if (len - pos < OBJECT_FIXED)
            return pulse_fail(PULSE_ERR_FORMAT, "object %u: truncated", i);
        memcpy(o->digest, v + pos, 32);
        o->size = get_u64(v + pos + 32);
        o->range_offset = get_u64(v + pos + 40);
        o->range_length = get_u64(v + pos + 48);
        size_t rl = v[pos + 56];
        pos += 57;
        int err = check_object_numbers(i, o);
        if (err)
            return err;
        if (len - pos < rl + 2)
            return pulse_fail(PULSE_ERR_FORMAT, "object %u: role runs past the field", i);
        if ((err = check_role(i, (const char *)v + pos, rl)))
            return err;
        o->role = dup_bytes(v + pos, rl);
        pos += rl;
        size_t tl = get_u16(v + pos);
        pos += 2;
        if (tl > PULSE_RECORD_MAX_TENSOR)
            return pulse_fail(PULSE_ERR_LIMIT, "object %u: tensor name of %zu bytes, limit %u", i, tl,
                              PULSE_RECORD_MAX_TENSOR);
        if (len - pos < tl)
            return pulse_fail(PULSE_ERR_FORMAT, "object %u: tensor name runs past the field", i);
        if ((err = check_tensor(i, v + pos, tl)))
            return err;
        o->tensor = dup_bytes(v + pos, tl);
        pos += tl;
        if (!o->role || !o->tensor)
            return pulse_fail(PULSE_ERR_NOMEM, "record object strings");
    }
    if (pos != len)
        return pulse_fail(PULSE_ERR_FORMAT, "field objects: %zu bytes after the last object", len - pos);
    return 0;
}

static int fixed_len(unsigned tag)
{
    switch (tag) {
    case TAG_STEP: case TAG_TIME: return 8;
    case TAG_NODE: case TAG_BASE: case TAG_RESULT: return 32;
    case TAG_SUMMARY: return 24;
    case TAG_SIGNATURE: return PULSE_SIGNATURE_BYTES;
    }
    return -1;
}

static int parse_field(unsigned tag, const uint8_t *v, size_t len, pulse_record *r)
{
    int want = fixed_len(tag);
    if (want >= 0 && len != (size_t)want)
        return pulse_fail(PULSE_ERR_FORMAT, "field %s: %zu bytes, want %d", tag_name(tag), len, want);
    switch (tag) {
    case TAG_RUN: {
        int err = check_run((const char *)v, len);
        if (err)
            return err;
        return (r->run = dup_bytes(v, len)) ? 0 : pulse_fail(PULSE_ERR_NOMEM, "record run");
    }
    case TAG_STEP: return parse_u64("step", v, &r->step);
    case TAG_NODE: memcpy(r->node, v, 32); return 0;
    case TAG_TIME: return parse_u64("time", v, &r->time);
    case TAG_BASE: memcpy(r->base, v, 32); return 0;
    case TAG_RESULT: memcpy(r->result, v, 32); return 0;
    case TAG_SUMMARY: {
        int err = parse_u64("summary.changes", v, &r->changes);
        if (!err) err = parse_u64("summary.dense_bytes", v + 8, &r->dense_bytes);
        if (!err) err = parse_u64("summary.patch_bytes", v + 16, &r->patch_bytes);
        return err;
    }
    case TAG_OBJECTS: return parse_objects(v, len, r);
    case TAG_SIGNATURE: memcpy(r->signature, v, PULSE_SIGNATURE_BYTES); return 0;
    }
    return pulse_fail(PULSE_ERR_FORMAT, "field tag %u unknown", tag);
}

static int parse(const uint8_t *b, size_t len, pulse_record *r)
{
    if (len > PULSE_RECORD_MAX_BYTES)
        return pulse_fail(PULSE_ERR_LIMIT, "record of %zu bytes, limit %u", len, PULSE_RECORD_MAX_BYTES);
    if (len < HEADER_BYTES || memcmp(b, PULSE_RECORD_MAGIC, 4) != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "header: not a pulse record (magic)");
    r->version = get_u16(b + 4);
    if (r->version != PULSE_RECORD_VERSION)
        return pulse_fail(PULSE_ERR_FORMAT, "header: version %u unknown (this build reads %u)", r->version,
                          PULSE_RECORD_VERSION);
    r->kind = b[6];
    if (!pulse_record_kind_name(r->kind))
        return pulse_fail(PULSE_ERR_FORMAT, "header: kind %u unknown", r->kind);
    if (b[7] != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "header: flags 0x%02x set (none defined in v%u)", b[7],
                          PULSE_RECORD_VERSION);
    size_t pos = HEADER_BYTES;
    int last = -1;   /* index in tag_order of the previous field */
    while (pos < len) {
        if (last == (int)N_TAGS - 1)
            return pulse_fail(PULSE_ERR_FORMAT, "%zu trailing bytes after the signature", len - pos);
        if (len - pos < FIELD_HEAD)
            return pulse_fail(PULSE_ERR_FORMAT, "truncated field header at offset %zu", pos);
        unsigned tag = b[pos];
        size_t flen = get_u32(b + pos + 1);
        int idx = tag_index(tag);
        if (idx < 0)
            return pulse_fail(PULSE_ERR_FORMAT, "unknown field tag %u at offset %zu", tag, pos);
        if (idx == last)
            return pulse_fail(PULSE_ERR_FORMAT, "field %s: duplicate", tag_name(tag));
        if (idx < last)
            return pulse_fail(PULSE_ERR_FORMAT, "field %s: out of order (after %s)", tag_name(tag),
                              tag_name(tag_order[last]));
        if (idx != last + 1)
            return pulse_fail(PULSE_ERR_FORMAT, "field %s: missing", tag_name(tag_order[last + 1]));
        pos += FIELD_HEAD;
        if (flen > len - pos)
            return pulse_fail(PULSE_ERR_FORMAT, "field %s: length %zu runs past the end (%zu left)",
                              tag_name(tag), flen, len - pos);
        int err = parse_field(tag, b + pos, flen, r);
        if (err)
            return err;
        pos += flen;
        last = idx;
    }
    if (last != (int)N_TAGS - 1)
        return pulse_fail(PULSE_ERR_FORMAT, "field %s: missing (record truncated)", tag_name(tag_order[last + 1]));
    return check_kind_rules(r);
}

PULSE_API int pulse_record_parse(const uint8_t *bytes, size_t len, pulse_record *r)
{
    if (!r || (!bytes && len))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_parse: NULL argument");
    memset(r, 0, sizeof *r);
    int err = parse(bytes, len, r);
    if (err)
        pulse_record_clear(r);
    return err;
}

PULSE_API int pulse_record_verify(const uint8_t *bytes, size_t len, const pulse_trust *trust,
                                  const pulse_public_key **signer, pulse_record *out)
{
    if (!trust)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_verify: no trust set");
    pulse_record r;
    int err = pulse_record_parse(bytes, len, &r);
    if (err)
        return err;
    const pulse_public_key *key = pulse_trust_find(trust, r.node);
    char id[PULSE_NODE_ID_HEX];
    pulse_node_id_hex(r.node, id);
    if (!key) {
        err = pulse_fail(PULSE_ERR_AUTH, "%s step %llu: node %s is not a trusted key",
                         pulse_record_kind_name(r.kind), (unsigned long long)r.step, id);
    } else if (pulse_verify(key->key, bytes, len - FIELD_HEAD - PULSE_SIGNATURE_BYTES, r.signature) != 0) {
        err = pulse_fail(PULSE_ERR_AUTH, "%s step %llu: signature by %s (%s) does not verify",
                         pulse_record_kind_name(r.kind), (unsigned long long)r.step, id, key->comment);
    }
    if (err || !out)
        pulse_record_clear(&r);
    else
        *out = r;
    if (!err && signer)
        *signer = key;
    return err;
}

PULSE_API int pulse_record_key(const pulse_record *r, char *out, size_t cap)
{
    if (!r || !out || !pulse_record_kind_name(r->kind))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_key: bad record");
    if (pulse_layout_record(out, cap, r->kind, r->step, r->node))
        return pulse_fail(PULSE_ERR_LIMIT, "record key longer than %zu bytes", cap);
    return 0;
}
