/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a node's note that a file it keeps holds writes the disk may not have yet, named by the boot that made them. */
#ifndef PULSE_NODE_SYNC_UNSYNCED_H
#define PULSE_NODE_SYNC_UNSYNCED_H

/* A follower's weights and a publisher's copy of its last state are written without a sync
 * after every step (the default, docs/node.md). Before the first such write the node writes
 * DIR/unsynced, durably: it holds the kernel's boot id. While the machine stays up the page
 * cache is the file, whatever a process crash does; only a restart of the machine can lose
 * writes the kernel had not written back. So a note from another boot says "the file may be
 * torn across several steps", and one from this boot says nothing. The note goes once the
 * file is synced (a clean stop, a keyframe restore) or found whole after a restart. */

#define UNSYNCED_BOOT_MAX 64

typedef struct unsynced_note {
    char boot[UNSYNCED_BOOT_MAX];   /* this boot's id; "" where there is none (every write synced) */
    int marked;                     /* DIR/unsynced names this boot: writes may not be on disk yet */
    int stale;                      /* it names another boot (or does not parse): check the file */
} unsynced_note;

/* This boot's id (/proc/sys/kernel/random/boot_id, Linux) and what DIR/unsynced says. */
int unsynced_open(unsynced_note *n, const char *dir);

/* Whether every write is to be synced at once: asked for (durable), or no boot id to name. */
int unsynced_sync_each(const unsynced_note *n, int durable);

/* Before a write that will not be synced at once: the note naming this boot, durably (once). */
int unsynced_before_write(unsynced_note *n, const char *dir, int durable);

/* The file is on disk as it is now: PATH (may be NULL: already synced, or read back whole)
 * is fdatasynced when the note names this boot, then the note is removed (temporary name,
 * fsync of DIR). 0 with nothing to do when there is no note. */
int unsynced_settle(unsynced_note *n, const char *dir, const char *path);

#endif
