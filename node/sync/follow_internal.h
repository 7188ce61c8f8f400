/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: what the long-running follower node (node/daemon/follow_node.c) needs beyond pulse_follower_pull. */
#ifndef PULSE_NODE_SYNC_FOLLOW_INTERNAL_H
#define PULSE_NODE_SYNC_FOLLOW_INTERNAL_H

#include <stdint.h>

#include "node/sync/cadence.h"
#include "node/sync/events.h"
#include "node/sync/phases.h"
#include "pulseweights/sync.h"

/* Counters kept by a follower handle since it was opened. */
typedef struct follow_counters {
    uint64_t steps_applied;
    uint64_t bytes_fetched;        /* records and objects */
    uint64_t verify_failures;      /* records or steps refused */
    uint64_t store_retries;        /* requests the store repeated (pulse_store_retries) */
    uint64_t newest_step;          /* newest step of a record that verified (never a key name or a head) */
    uint64_t newest_time;          /* its record's publication time (0: not known) */
    int have_newest;
    int store_behind;              /* the store's newest verified record is older than the held state */
    int untrusted_state;           /* the held state is produced by no record trusted now */
    double last_step_seconds;      /* the last step applied: its verified record to the weights holding it */
    record_cadence cadence;        /* the publication times of the newest verified steps */
} follow_counters;

#define FOLLOW_DEFAULT_MAX_BEHIND 8u

/* Daemon settings: MAX_BEHIND steps beyond which (or with a broken chain) a catch-up compares
 * the keyframe path with the patch chain by bytes; LOG_EVENTS: one event per step, refusal,
 * catch-up or fetch failure (pulse pull stays quiet); KEEP_UNTRUSTED: a held state no trusted record produces is kept
 * with a warning instead of being replaced from the newest trusted keyframe. */
void follower_configure(pulse_follower *f, unsigned max_behind, int log_events, int keep_untrusted);

/* pulse pull: each pull that succeeds writes on stderr the listed records it skipped (refused
 * now or before: `refused`, the first 16, then `refused-more count=N`), the keys under records/
 * that are no record key (`ignored`, `ignored-more`), and `store-behind` when the store's newest
 * verified record is older than the state held (a failed pull says only its error). Without it
 * (the bindings) a pull says none of these. */
void follower_report_pulls(pulse_follower *f);

/* Where this handle's events go: FN(CTX, ...) for each (the follower node's log). Without one
 * (pulse pull, the bindings) the events logged whatever LOG_EVENTS says (untrusted-state,
 * journal-refused) are written as text lines on stderr. */
void follower_on_event(pulse_follower *f, sync_event_fn fn, void *ctx);

/* The counters, the store's retry count brought up to date. */
const follow_counters *follower_counters(pulse_follower *f);

/* The phases of the step being applied or applied last (node/sync/phases.h); from on_step, the
 * node adds its hook's time (--hook-after step), which the step's "applied" event then carries. */
const apply_phases *follower_phases(const pulse_follower *f);
void follower_set_hook_ms(pulse_follower *f, double ms);

/* The result check of the last step, made after its write (a node's steps on its own last write,
 * docs/trust.md): waited for (WAIT) or only looked at; a check that failed is logged
 * (result-mismatch) and counted, and makes the weights unknown (hashed again at the next pull, and
 * replaced from the newest keyframe). 0, or that failure. */
int follower_settle_check(pulse_follower *f, int wait);

/* The state held (after the first pull or recovery): 0, or PULSE_ERR_NOTFOUND. */
int follower_held(const pulse_follower *f, uint64_t *step, uint8_t state[32]);

/* Finishes a step interrupted by a crash, from the journal in the state directory (pull does
 * this first too). Idempotent; *did (may be NULL) says whether there was one. */
int follower_recover(pulse_follower *f, int *did);


/* Fast path of a head poll: the sync-patch record at REL (relative to the run), as the head
 * carried it (RECORD, RECORD_LEN bytes) or else fetched, applied when it verifies, is newer than
 * the held state and chains on it. *applied = 1 then; *applied = 0 (and 0 returned) when it does
 * not chain or is not there, so the caller catches up with pulse_follower_pull. SEEN_MS: how long
 * after the head was written the poll read it (the step's "seen" phase). Errors are those of a
 * refused or failed step. */
int follower_try_next(pulse_follower *f, const char *rel, const uint8_t *record, size_t record_len, double seen_ms,
                      int *applied);

#endif
