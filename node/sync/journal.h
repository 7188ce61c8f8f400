/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the follower's step journal in its state directory, which makes an interrupted in-place apply recoverable. */
#ifndef PULSE_NODE_SYNC_JOURNAL_H
#define PULSE_NODE_SYNC_JOURNAL_H

#include <stdint.h>

/* Phases of a journalled step. The journal file exists from before the first byte of the
 * weights is written until the step's hook and receipt are done:
 *   APPLYING: DIR/journal.patch holds the step as an ABSOLUTE patch (base -> result); the
 *             weights may be torn. Re-applying it without the base check is idempotent: every
 *             position it names gets its final value, no other position was ever written.
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
} node_journal;

/* DIR/journal.patch (the absolute patch of an APPLYING sync-patch step). */
int journal_patch_path(const char *dir, char *out, size_t cap);

/* Writes DIR/journal atomically and durably (temporary file, fsync, rename, fsync of DIR). */
int journal_write(const char *dir, const node_journal *j);

/* Reads DIR/journal: *found = 0 when there is none; a journal that does not parse is an error
 * (PULSE_ERR_FORMAT) rather than silently ignored, since the weights may be torn. */
int journal_read(const char *dir, node_journal *j, int *found);

/* Removes the temporaries a killed process left, of a journal patch (the squash writes the patch
 * as it codes it, so one may be as large as the patch), and the directions files of earlier
 * builds: best effort, at start, under the state directory's lock, so that no live writer's
 * temporary is among them. */
void journal_sweep(const char *dir);

/* Removes the journal, then its patch, then fsyncs DIR. */
int journal_clear(const char *dir);

#endif
