/* SPDX-License-Identifier: Apache-2.0 */
/* Signed records: what one node published for one step, in a canonical binary encoding (docs/trust.md). */
#ifndef PULSEWEIGHTS_RECORD_H
#define PULSEWEIGHTS_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pulseweights/error.h"
#include "pulseweights/keys.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PULSE_RECORD_MAGIC "PLSR"
#define PULSE_RECORD_VERSION 1
#define PULSE_DIGEST_BYTES 32

/* Limits: the parser refuses anything beyond them (PULSE_ERR_LIMIT) before allocating for it. */
#define PULSE_RECORD_MAX_BYTES (16u << 20)         /* a whole encoded record */
#define PULSE_RECORD_MAX_OBJECTS 65536u
#define PULSE_RECORD_MAX_RUN 128u                  /* bytes of the run name: [A-Za-z0-9._-] */
#define PULSE_RECORD_MAX_ROLE 32u                  /* bytes of an object's role: [a-z0-9-] */
#define PULSE_RECORD_MAX_TENSOR 512u               /* bytes of an object's tensor name (UTF-8) */
#define PULSE_RECORD_MAX_OBJECT_SIZE (UINT64_C(1) << 40)  /* bytes of one object */
#define PULSE_RECORD_MAX_U64 ((uint64_t)INT64_MAX) /* every other integer: fits SQLite's INTEGER */

/* Kinds. Values are part of the encoding: append only. */
typedef enum pulse_record_kind {
    PULSE_RECORD_SYNC_PATCH = 1,   /* base -> result patch of a sync run */
    PULSE_RECORD_KEYFRAME = 2,     /* the full checkpoint at result (base all zero) */
    PULSE_RECORD_LOCO_SHARD = 3,   /* one trainer's sparse pseudo-gradient for the round starting at base */
    PULSE_RECORD_LOCO_RESULT = 4,  /* the aggregated round: base -> result */
    PULSE_RECORD_RECEIPT = 5,      /* "node holds result at step"; names no objects */
    PULSE_RECORD_LOCO_REDUCED = 6, /* a reduce-scatter owner's summed shards of its ranges, round starting at base */
} pulse_record_kind;
#define PULSE_RECORD_KIND_MAX 6

/* One object the record names. role: what the bytes are ("patch-chunk", "keyframe-chunk",
 * "loco-shard", ...); tensor: the tensor it covers, or "" for whole-checkpoint objects;
 * range_offset/range_length: the byte range of the target (tensor or checkpoint) that it
 * covers, 0/0 when not applicable. Strings are owned by the record. */
typedef struct pulse_record_object {
    uint8_t digest[PULSE_DIGEST_BYTES];   /* SHA-256 of the object's bytes; never all zero */
    uint64_t size;                        /* exact byte count; 1..PULSE_RECORD_MAX_OBJECT_SIZE */
    char *role;
    char *tensor;
    uint64_t range_offset, range_length;
} pulse_record_object;

/* A record in memory. Build one with pulse_record_init + pulse_record_add_object, or get one from
 * pulse_record_parse; release with pulse_record_clear. State ids are all zero when not applicable. */
typedef struct pulse_record {
    uint16_t version;                     /* PULSE_RECORD_VERSION */
    uint8_t kind;                         /* pulse_record_kind */
    char *run;                            /* owned */
    uint64_t step;
    uint8_t node[PULSE_PUBLIC_KEY_BYTES]; /* the signer's public key */
    uint64_t time;                        /* unix seconds at publication */
    uint8_t base[PULSE_DIGEST_BYTES];
    uint8_t result[PULSE_DIGEST_BYTES];
    uint64_t changes, dense_bytes, patch_bytes;   /* summary figures */
    uint32_t n_objects;
    pulse_record_object *objects;         /* owned */
    uint32_t objects_cap;                 /* private: allocated length of objects */
    uint8_t signature[PULSE_SIGNATURE_BYTES];
} pulse_record;

/* "sync-patch", "keyframe", "loco-shard", "loco-result", "receipt", "loco-reduced"; NULL for an unknown kind.
 * These names are also the <kind> of the bucket keys (DESIGN.md §4). */
PULSE_API const char *pulse_record_kind_name(int kind);
/* The kind named NAME, or 0 when none. */
PULSE_API int pulse_record_kind_from_name(const char *name);

/* Starts a record: version, kind, a copy of RUN, step; everything else zero. */
PULSE_API int pulse_record_init(pulse_record *r, int kind, const char *run, uint64_t step);
/* Appends an object (copies ROLE and TENSOR; TENSOR may be NULL for ""). */
PULSE_API int pulse_record_add_object(pulse_record *r, const uint8_t digest[PULSE_DIGEST_BYTES], uint64_t size,
                                      const char *role, const char *tensor,
                                      uint64_t range_offset, uint64_t range_length);
/* Frees what R owns and zeroes it; NULL-safe. */
PULSE_API void pulse_record_clear(pulse_record *r);

/* Checks R against every rule the parser applies (limits, strings, kind rules). */
PULSE_API int pulse_record_check(const pulse_record *r);

/* Encodes R including its signature. *out is malloc'ed, owned by the caller. */
PULSE_API int pulse_record_encode(const pulse_record *r, uint8_t **out, size_t *len);
/* Sets R's node to K's public key, encodes it, signs the bytes and stores the signature in R;
 * *out receives the complete signed record (malloc'ed). This is what gets published. */
PULSE_API int pulse_record_sign(pulse_record *r, const pulse_secret_key *k, uint8_t **out, size_t *len);

/* Strict parse of untrusted bytes (no signature check). Refused with PULSE_ERR_FORMAT or
 * PULSE_ERR_LIMIT and a detail naming the field. On success *r owns its strings (pulse_record_clear);
 * on failure *r is cleared. Every accepted input re-encodes to the same bytes. */
PULSE_API int pulse_record_parse(const uint8_t *bytes, size_t len, pulse_record *r);

/* Parses BYTES and checks the signature: the record's node must be in TRUST and have signed
 * exactly the bytes before the signature. Returns 0 and sets *signer (may be NULL) to the trusted
 * key; PULSE_ERR_AUTH when the node is not trusted or the signature does not verify; the parse
 * errors otherwise. R (may be NULL) receives the parsed record on success. */
PULSE_API int pulse_record_verify(const uint8_t *bytes, size_t len, const pulse_trust *trust,
                                  const pulse_public_key **signer, pulse_record *r);

/* The record's bucket key relative to the run prefix: records/<kind>/<step:012>/<node-hex>, or
 * receipts/<node-hex>/<step:012> for a receipt (DESIGN.md §4). */
PULSE_API int pulse_record_key(const pulse_record *r, char *out, size_t cap);

/* Human-readable (PULSE_RENDER_TEXT) or JSON (PULSE_RENDER_JSON, one object and a newline) form.
 * SIGNER (may be NULL) is the trusted key that signed it, printed as its comment. */
enum { PULSE_RENDER_TEXT = 0, PULSE_RENDER_JSON = 1 };
PULSE_API int pulse_record_render(const pulse_record *r, const pulse_public_key *signer, int format, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
