/* SPDX-License-Identifier: Apache-2.0 */
/* The audit of a run in a store: every record, signature, chain link, object, orphan and head re-checked. */
#ifndef PULSEWEIGHTS_AUDIT_H
#define PULSEWEIGHTS_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/error.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the audit checks, its output and the request-count formula: docs/trust.md, "Audit". */

#define PULSE_AUDIT_MAX_KEY 256        /* bytes of a key relative to the run */
#define PULSE_AUDIT_MAX_PROBLEM 512    /* bytes of one problem line */

/* How deep to look. */
enum {
    PULSE_AUDIT_RECORDS = 0,  /* list, fetch every record and head, check signatures, keys, chain, heads;
                               * objects only for presence and listed size (what `manifest ls` needs) */
    PULSE_AUDIT_FULL = 1,     /* also download every object: exact size, SHA-256, content checks */
};

/* A content check of one object whose size and digest already matched the record: return 0,
 * or a negative PULSE_ERR_* with pulse_fail detail saying what is wrong (it becomes the problem
 * line). Called once per (record, object) pair naming it, with the whole object in memory. */
typedef int (*pulse_audit_content_fn)(void *ctx, const pulse_record *r, const pulse_record_object *o,
                                      const void *bytes, size_t len);

/* Options; fill with pulse_audit_opts_default. `size` lets the struct grow. */
typedef struct pulse_audit_opts {
    size_t size;
    int level;                        /* PULSE_AUDIT_FULL (default) or PULSE_AUDIT_RECORDS */
    const pulse_trust *trust;         /* keys whose records are valid (borrowed); NULL: nobody's */
    uint64_t memory_bytes;            /* object bytes held in memory per batch (default 256 MiB);
                                       * a larger object streams through a temporary file */
    const char *tmp_dir;              /* for those files (default $TMPDIR, else /tmp) */
    pulse_audit_content_fn check_content;  /* optional, e.g. a patch header's base/result */
    void *content_ctx;
} pulse_audit_opts;

PULSE_API void pulse_audit_opts_default(pulse_audit_opts *o);

/* One record found under the run (records/... or receipts/...). Fields after `parsed` are the
 * record's own (zero when it did not parse). */
typedef struct pulse_audit_entry {
    char key[PULSE_AUDIT_MAX_KEY];    /* relative to the run */
    uint64_t key_step;                /* the step the key names */
    int parsed;                       /* the bytes parsed strictly */
    int trusted;                      /* signed by a key of the trust set, signature verified */
    int valid;                        /* parsed, trusted, content matches the key and the run */
    int problems;                     /* problem lines charged to this record or its objects */
    const pulse_public_key *signer;   /* the trusted key (owned by the trust set) or NULL */
    uint64_t listed_bytes;            /* the record's own size in the store */
    int kind;
    uint64_t step, time, changes, dense_bytes, patch_bytes, object_bytes;
    uint32_t n_objects;
    uint8_t node[PULSE_PUBLIC_KEY_BYTES];
    uint8_t base[PULSE_DIGEST_BYTES], result[PULSE_DIGEST_BYTES];
    uint64_t elements;                /* elements of the checkpoint: the `changes` of the newest
                                       * valid keyframe at or before this step (a keyframe changes
                                       * every element); 0 when there is none */
} pulse_audit_entry;

/* Request-count estimate for the run (formula in docs/trust.md). */
typedef struct pulse_audit_requests {
    uint64_t trainer_puts;            /* every object, record and head move as published */
    uint64_t follower_lists;          /* LIST pages a pull makes (records/keyframe/ + records/sync-patch/) */
    uint64_t follower_gets;           /* GETs of a follower starting from nothing: newest keyframe
                                       * record and chunks, then each later patch record and object */
    uint64_t follower_step_gets;      /* GETs per new step once caught up (head + record + objects),
                                       * averaged over the patch steps, rounded up */
    uint64_t audit_lists, audit_gets; /* what this audit costs */
} pulse_audit_requests;

/* The result of an audit. Owned by the caller: pulse_audit_report_clear. */
typedef struct pulse_audit_report {
    pulse_audit_entry *entries;       /* by step, then key */
    size_t n_entries;
    char **problems;                  /* one line each, no newline */
    size_t n_problems;
    uint64_t keys, key_bytes;         /* everything under the run */
    uint64_t records, record_bytes;   /* records/ and receipts/ */
    uint64_t objects, object_bytes;   /* objects/ */
    uint64_t orphans, orphan_bytes;   /* objects no record names */
    uint64_t heads;
    uint64_t objects_checked, bytes_hashed;   /* PULSE_AUDIT_FULL: objects downloaded and hashed */
    uint64_t dense_total;             /* sum of dense_bytes over valid sync records */
    uint64_t patch_total;             /* sum of object bytes over valid sync records */
    pulse_audit_requests requests;
    int64_t uploads;                  /* incomplete multipart uploads under the run (each also a
                                       * problem); -1: the store has none (file://) */
} pulse_audit_report;

/* Audits everything under "<run>/" in ST. Returns 0 when the audit ran (problems found or not:
 * look at report->n_problems), or a negative error when it could not run (listing failed, out of
 * memory); transfers that fail for one key become problems, not errors. *report is filled
 * either way (cleared first). */
PULSE_API int pulse_audit_run(pulse_store *st, const char *run, const pulse_audit_opts *opts,
                              pulse_audit_report *report);

/* Frees what the report owns and zeroes it; NULL-safe. */
PULSE_API void pulse_audit_report_clear(pulse_audit_report *report);

#ifdef __cplusplus
}
#endif
#endif
