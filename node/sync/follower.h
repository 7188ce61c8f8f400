/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the follower handle's state and what its files (node/sync/follow*.c) share. */
#ifndef PULSE_NODE_SYNC_FOLLOWER_H
#define PULSE_NODE_SYNC_FOLLOWER_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "node/sync/follow_internal.h"
#include "node/sync/journal.h"
#include "node/sync/late_check.h"
#include "node/sync/slices.h"
#include "node/sync/sync_internal.h"
#include "node/sync/unsynced.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/manifest.h"
#include "pulseweights/record.h"
#include "pulseweights/sync.h"

struct pulse_follower {
    pulse_follow_opts o;
    char *run;
    /* Copies of the caller's strings, which f->o points at: the follower uses them for as long
     * as it is open, and a caller may free or reuse its own after pulse_follower_open. */
    char *store_url, *state_dir, *weights_path;
    pulse_store *st;
    pulse_index *ix;
    /* The state the weights hold, tracked once known: only this handle writes them. */
    int known, have;
    uint64_t step;
    uint8_t state[32];
    int recovered;             /* the journal was looked at */
    int engine;                /* weights held by an engine: on_patch / on_keyframe */
    sync_slices slices;        /* the engine's parts of tensors; none: all of every tensor */
    int stopped;               /* the on_step callback asked to stop */
    unsigned max_behind;
    int log;
    int report;                /* pulse pull: each pull says what it skipped, and a store behind */
    uint64_t behind_newest;    /* while the store is behind: its newest verified step (UINT64_MAX: none) */
    int cadence_seeded;        /* a node read the newest records for the run's cadence (once) */
    sync_event_fn on_event;    /* where events go (NULL: a text line on stderr) */
    void *event_ctx;
    follow_counters c;
    double step_t0;            /* when the step being applied started (monotonic s); 0: none */
    unsynced_note note;        /* the weights file's (node/sync/unsynced.h) */
    state_dir dir;             /* locked while open: one process applies to these weights */
    int keep_untrusted;        /* a held state no trusted record produces is kept (warned), not replaced */
    int suspect;               /* a journal was refused: weights no record produces are lost, not an error */
    uint8_t trust_id[32];      /* SHA-256 of the sorted trusted keys: a refusal holds for this set only */
    /* Refusals found in this pull, stored in one transaction at its end. */
    pulse_index_refusal *pend;
    size_t npend, cappend;
    size_t nlogged, nquiet;    /* refusals logged in this pull, and those past the cap */
    char last_step_refusal[SYNC_KEY_MAX + 512];   /* the last step refusal logged (once, not every poll) */
    apply_phases ph;           /* of the step being applied (its "applied" event) */
    double seen_ms;            /* how long the head poll that brought the record took to see it (0: none) */
    /* The weights file mapped writable, kept from step to step while the file is as this
     * handle left it (its identity, size and times): its pages stay mapped (and, until written
     * back, writable), so a step does not fault every page in again. */
    pulse_ckpt *w;
    struct stat w_stat;
    /* A node's steps on its own last write: the result hashed after the write (late_check.h). */
    int late_checks;
    late_check late;
    char late_rel[SYNC_KEY_MAX];   /* the record of the step being checked late */
};

/* At most this many refused records are logged one by one per pull; the rest in one line. */
#define FOLLOW_LOG_REFUSALS 16

/* One listed record of a trusted node; its key says kind, step and node (checked again
 * against the record's own fields once fetched). */
typedef struct listed {
    int kind;
    uint64_t step;
    uint8_t node[32];
    char rel[SYNC_KEY_MAX];   /* relative to the run */
    uint64_t size;            /* as listed */
    char etag[132];
    /* Filled when fetched (or known refused from the index: fetched, not ok, err set): */
    int fetched, ok, err;
    char why[256];
    pulse_record rec;
    uint8_t *bytes;
    size_t len;
} listed;

typedef struct listing {
    pulse_follower *f;
    const pulse_trust *trust;
    size_t run_len;
    listed *v;
    size_t n, cap;
    /* For saying why there is nothing to start from: every key listed under records/, and the
     * first nodes named by record keys of keys not trusted (names only: nothing verified). */
    size_t keys;
    uint8_t others[8][32];
    size_t nothers;
    /* Keys under records/ that are no record key at all (junk after the node id, a bad step):
     * how many, and the first few, for pulse pull to name. */
    size_t junk;
    char *junk_keys[FOLLOW_LOG_REFUSALS];
} listing;

/* Whether each step ends with a sync of the weights. */
static inline int sync_each_step(const pulse_follower *f)
{
    return unsynced_sync_each(&f->note, f->o.durable);
}

/* The weights are on disk as they are now (synced, or read back whole after a restart). */
static inline int note_settled(pulse_follower *f)
{
    return unsynced_settle(&f->note, f->o.state_dir, NULL);
}

static inline void u64s(char *buf, size_t cap, uint64_t v)
{
    snprintf(buf, cap, "%" PRIu64, v);
}

static inline double ms_since(double t0)
{
    return 1e3 * (pulse_monotonic_s() - t0);
}

/* Weights in caller memory, or held by an engine: no file, so no journal and no unsynced note. */
static inline int in_memory(const pulse_follower *f)
{
    return f->o.weights != NULL || f->engine;
}

/* follow.c */
/* One event of this handle: to the sink its owner installed, else as a text line on stderr. */
__attribute__((sentinel)) void follow_log(const pulse_follower *f, const char *event, ...);

/* follow_records.c */
/* "PREFIX: <the current detail>" (the detail is copied first: it is the buffer written). */
int fail_prefixed(int r, const char *prefix);
/* "step N: REL: <the current detail>", the line a refused or failed step is named by. */
int fail_step(int r, uint64_t step, const char *rel);
/* Parses records/<kind>/<step:012>/<node-hex>; 0 when it is a sync-patch or keyframe record
 * of a trusted node, -2 when it is one of a node not trusted (e->node set), else -1. */
int parse_rel(const pulse_trust *trust, const char *rel, listed *e);
/* Lists the run's records of trusted nodes into L, by step (junk and untrusted keys counted). */
int list_records(pulse_follower *f, listing *l);
/* Frees what L holds (records, their bytes, the junk keys kept). */
void listing_free(listing *l);
/* Fetches and verifies one record: strict parse, trusted signature, and the key it was
 * found under must be what the record says it is (a record copied under another step's
 * key is a replay). */
int fetch_record(pulse_follower *f, const char *rel, const uint8_t *have, size_t have_len, pulse_record *rec,
                 uint8_t **bytes, size_t *len, uint64_t *moved);
/* Errors that say something about the record or its objects. Anything else (network, server,
 * local I/O, an interrupted transfer, memory) is not a verdict: the record is tried again later. */
int is_verdict(int r);
/* Stores the refusals found (one transaction) and logs how many went unlogged. The caller's
 * error, if any, is kept. */
void flush_refusals(pulse_follower *f);
/* A record refused before it was indexed (it does not verify under this trust set, or its key
 * is not what it says): the index keeps the verdict (key, size, SHA-256 of the bytes, reason),
 * never the bytes, so junk costs a row; the same bytes refused again are neither logged nor
 * counted again. LEN: the bytes fetched (the listed size when the fetch refused them). */
void refuse_record(pulse_follower *f, const char *rel, const uint8_t *bytes, size_t len, const char *etag,
                   const char *why);
/* A verified record whose step failed (its objects, its base): the index's row says refused
 * (it leaves the chain of states); logged and counted once while the reason stays the same. */
void refuse_step(pulse_follower *f, int r, const char *rel);
/* Fetches a listed record once and verifies it. A refusal is stored, counted and kept (e->err):
 * the record is skipped; a pull that cannot get past it names it. */
int get_listed(pulse_follower *f, listed *e);

/* follow_held.c */
/* The weights as events name them: their path, or "(engine)" / "(memory)". */
const char *weights_name(const pulse_follower *f);
/* The weights' state id, hashed on the handle's threads (the file, or the tensors in memory). */
int hash_weights(pulse_follower *f, uint8_t state[32]);
/* Weights written without a sync before the machine restarted, and not whole now: the disk
 * kept only some of the writes. They are no one's state, so the newest keyframe replaces them
 * (temporary file and rename), as if they were missing; the note stays until it has. */
void weights_lost(pulse_follower *f, const char *why);
/* The index says the weights hold STEP/STATE, but no trusted record produces that state (its
 * signer's key was taken out of the trust set): said loudly; by default the state is treated
 * as none, so the newest trusted keyframe replaces it, unless the caller keeps it. */
void untrusted_state(pulse_follower *f, uint64_t step, const uint8_t state[32]);
/* The state the weights hold: hashed once, then its step from the index (or, for weights
 * this index did not write, from the newest trusted record that produces exactly it). */
int held_state(pulse_follower *f, listing *l);
/* The weights file open writable: the mapping of the last step when the file is still as this
 * handle left it (1), else opened afresh (0). */
int weights_mapped(pulse_follower *f);
/* The mapping let go of, once no check reads it. */
void weights_unmap(pulse_follower *f);
/* After this handle wrote the weights: what they look like now, for the next step's mapping. */
void weights_written(pulse_follower *f);

/* follow_apply.c */
/* After the weights reached the step's result: the applied row (once: a recovery may find
 * it already there), the journal's APPLIED phase, the caller's callback (hook, receipt), and
 * the journal removed. */
int finish_step(pulse_follower *f, const node_journal *j, const pulse_sync_step *s);
/* Applies one verified record: indexed first, refused with its reason on failure. */
int apply_listed(pulse_follower *f, const char *rel, const pulse_record *rec, const uint8_t *bytes,
                 size_t len, uint64_t moved);

#endif
