/* SPDX-License-Identifier: Apache-2.0 */
/* The per-node SQLite index: records seen and their verdicts, objects, the chain of states, what was applied. */
#ifndef PULSEWEIGHTS_MANIFEST_H
#define PULSEWEIGHTS_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/error.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PULSE_INDEX_SCHEMA_VERSION 2      /* PRAGMA user_version this build creates and reads */
#define PULSE_INDEX_BUSY_TIMEOUT_MS 5000  /* how long a writer waits for another process's lock */
#define PULSE_INDEX_MAX_KEY 512           /* bytes of a record's bucket key */
#define PULSE_INDEX_MAX_PATH 4096         /* bytes of an applied row's local path */

/* An open index. One handle per thread; several processes may share the file (WAL). */
typedef struct pulse_index pulse_index;

/* Verdicts of a record. */
enum { PULSE_VERDICT_REFUSED = -1, PULSE_VERDICT_UNKNOWN = 0, PULSE_VERDICT_OK = 1 };

/* Opens or creates the database at PATH (WAL, busy timeout, foreign keys on, synchronous=FULL)
 * and migrates its schema to PULSE_INDEX_SCHEMA_VERSION. A database from a newer build is refused
 * with PULSE_ERR_UNSUPPORTED. *out owned by the caller (pulse_index_close). */
PULSE_API int pulse_index_open(pulse_index **out, const char *path);
/* Closes; NULL-safe; clears the pointer. */
PULSE_API void pulse_index_close(pulse_index **ix);
/* The schema version of the open database (its PRAGMA user_version). */
PULSE_API int pulse_index_schema_version(pulse_index *ix, int *version);

/* Stores a record seen under bucket key KEY: the exact BYTES (parsed strictly, not verified) and one
 * objects row per object, in one transaction. Storing identical bytes again under the same key
 * is a no-op (*inserted = 0); different bytes under a stored key: PULSE_ERR_EXISTS, nothing
 * changed. RECORD_ID and INSERTED may be NULL. The verdict starts PULSE_VERDICT_UNKNOWN. */
PULSE_API int pulse_index_put_record(pulse_index *ix, const char *key, const uint8_t *bytes, size_t len,
                                     uint64_t seen_time, int64_t *record_id, int *inserted);

/* Records the verdict on KEY with a reason (NULL for none). PULSE_VERDICT_OK on a record that
 * produces a state (sync-patch, keyframe, loco-result) adds it to the chain of states;
 * PULSE_VERDICT_REFUSED takes it out again. PULSE_ERR_NOTFOUND when KEY was never stored. */
PULSE_API int pulse_index_mark_verified(pulse_index *ix, const char *key, int verdict, const char *reason);

/* Appends "STATE reached at STEP of RUN, in file LOCAL_PATH, at TIME" to the applied journal. */
PULSE_API int pulse_index_mark_applied(pulse_index *ix, const char *run, uint64_t step,
                                       const uint8_t state[PULSE_DIGEST_BYTES], uint64_t time,
                                       const char *local_path);

/* The bytes and verdict of the record stored under KEY. *bytes malloc'ed, owned by the caller. */
PULSE_API int pulse_index_get_record(pulse_index *ix, const char *key, uint8_t **bytes, size_t *len,
                                     int *verdict);

/* Newest verified state of RUN: its step and state id. PULSE_ERR_NOTFOUND when RUN has none. */
PULSE_API int pulse_index_head(pulse_index *ix, const char *run, uint64_t *step,
                               uint8_t state[PULSE_DIGEST_BYTES]);

/* One link of the chain of verified states. */
typedef struct pulse_index_link {
    uint64_t step;
    int kind;                              /* pulse_record_kind */
    uint8_t base[PULSE_DIGEST_BYTES], result[PULSE_DIGEST_BYTES];
    uint8_t node[PULSE_PUBLIC_KEY_BYTES];
    char key[PULSE_INDEX_MAX_KEY + 1];
} pulse_index_link;

/* Verified states of RUN with step >= FROM_STEP (0: the whole chain), ordered by step.
 * *links malloc'ed (free() it); *n may be 0. */
PULSE_API int pulse_index_chain(pulse_index *ix, const char *run, uint64_t from_step,
                                pulse_index_link **links, size_t *n);

/* The newest applied row of RUN. PULSE_ERR_NOTFOUND when nothing was applied. */
typedef struct pulse_index_applied {
    uint64_t step, time;
    uint8_t state[PULSE_DIGEST_BYTES];
    char path[PULSE_INDEX_MAX_PATH + 1];
} pulse_index_applied;
PULSE_API int pulse_index_last_applied(pulse_index *ix, const char *run, pulse_index_applied *out);

/* Trusted keys kept in the index (what the node was told to trust, for the audit trail). */
PULSE_API int pulse_index_trust_key(pulse_index *ix, const pulse_public_key *key, uint64_t time);
/* Adds every key of the trusted_keys table to T. */
PULSE_API int pulse_index_load_trusted(pulse_index *ix, pulse_trust *t);

/* A record refused before it was stored (it does not verify, or its key is not what it says):
 * its verdict without its bytes. KEY is the bucket key; SIZE and ETAG as listed; DIGEST the
 * SHA-256 of the bytes fetched; TRUST the SHA-256 of the trust set that refused it (another
 * set may accept it); REASON without the key (the row has it). */
typedef struct pulse_index_refusal {
    char key[PULSE_INDEX_MAX_KEY + 1];
    uint64_t size, time;
    char etag[132];
    uint8_t digest[PULSE_DIGEST_BYTES], trust[PULSE_DIGEST_BYTES];
    char reason[256];
} pulse_index_refusal;
/* Stores N refusals in one transaction, one row per key (a key refused again replaces its row). */
PULSE_API int pulse_index_put_refusals(pulse_index *ix, const pulse_index_refusal *v, size_t n);
/* The refusal stored for KEY; PULSE_ERR_NOTFOUND when none. */
PULSE_API int pulse_index_get_refusal(pulse_index *ix, const char *key, pulse_index_refusal *out);

#ifdef __cplusplus
}
#endif
#endif
