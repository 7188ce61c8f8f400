/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the follower's step journal in its state directory, which makes an interrupted in-place apply recoverable. */
#ifndef PULSE_NODE_SYNC_JOURNAL_H
#define PULSE_NODE_SYNC_JOURNAL_H

#include <stdint.h>

/* Phases of a journalled step. The journal file exists from before the first byte of the
 * weights is written until the step's hook and receipt are done:
 *   APPLYING: DIR/journal.data holds the staged step (node/patch/patch_stage.h: the patch's head,
 *             and per chunk the positions it changes and their new values), whose head has the
 *             SHA-256 in `head`; the weights may be torn. Replaying it is idempotent: every
 *             position gets its final value, no other position was ever written. (A journal of
 *             an earlier version names no head: DIR/journal.patch then holds the step as an
 *             ABSOLUTE patch, applied again the same way.)
 *             For a keyframe step no patch is kept (restore is temp + rename): the weights hold
 *             either the old state or the result.
 *   APPLIED:  the weights hold the result and the index says so; the hook and receipt of the
 *             step may not have run yet. */
enum { JOURNAL_APPLYING = 1, JOURNAL_APPLIED = 2 };

typedef struct node_journal {
    int phase;
    int kind;                  /* PULSE_RECORD_SYNC_PATCH or PULSE_RECORD_KEYFRAME */
    uint64_t step;
    uint8_t base[32], result[32];
    char rel[512];             /* the record's key relative to the run */
    int staged;                /* the step is in DIR/journal.data, its patch head's SHA-256 in head */
    uint8_t head[32];
} node_journal;

/* DIR/journal.patch (the absolute patch of an APPLYING sync-patch step of an earlier version). */
int journal_patch_path(const char *dir, char *out, size_t cap);
/* DIR/journal.data (a staged step; the file is kept between steps, its pages reused). */
int journal_data_path(const char *dir, char *out, size_t cap);

/* Writes DIR/journal atomically (temporary file, rename); DURABLE: with an fsync of the file
 * and of DIR, so that it outlives a power loss, not only the process. A node that does not sync
 * each step does not need that: after a restart of the machine its weights are checked whole
 * anyway (node/sync/unsynced.h). */
int journal_write(const char *dir, const node_journal *j, int durable);

/* Reads DIR/journal: *found = 0 when there is none; a journal that does not parse is an error
 * (PULSE_ERR_FORMAT) rather than silently ignored, since the weights may be torn. */
int journal_read(const char *dir, node_journal *j, int *found);

/* Removes the temporaries a killed process left, of a journal patch (the squash writes the patch
 * as it codes it, so one may be as large as the patch), and the directions files of earlier
 * builds: best effort, at start, under the state directory's lock, so that no live writer's
 * temporary is among them. */
void journal_sweep(const char *dir);

/* Removes the journal, then its patch (an earlier version's), then (DURABLE) fsyncs DIR. */
int journal_clear(const char *dir, int durable);

#endif
