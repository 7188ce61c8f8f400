/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the follower's note that its weights hold writes the disk may not have yet, named by the boot that made them. */
#ifndef PULSE_NODE_DAEMON_UNSYNCED_H
#define PULSE_NODE_DAEMON_UNSYNCED_H

/* A follower that does not sync its weights after every step (the default, docs/node.md)
 * writes DIR/unsynced, durably, before the first such write: it holds the kernel's boot id.
 * While the machine stays up the page cache is the file, whatever a process crash does; only
 * a restart of the machine can lose writes the kernel had not written back. So a note from
 * another boot says "the weights may be torn across several steps", and one from this boot
 * says nothing. The note goes once the weights are synced (a clean stop, a keyframe restore). */

#define UNSYNCED_BOOT_MAX 64

/* This boot's id (/proc/sys/kernel/random/boot_id, Linux): 0, or PULSE_ERR_NOTFOUND where
 * there is none (then every step is synced instead). */
int unsynced_boot_id(char boot[UNSYNCED_BOOT_MAX]);

/* Writes DIR/unsynced holding BOOT (temporary file, fsync, rename, fsync of DIR). */
int unsynced_mark(const char *dir, const char *boot);

/* Reads DIR/unsynced: *found = 0 when there is none, else its boot id in BOOT. A note that
 * does not parse reads as a boot id of its own ("?"), which matches no boot. */
int unsynced_read(const char *dir, char boot[UNSYNCED_BOOT_MAX], int *found);

/* Removes DIR/unsynced and fsyncs DIR; none there is not an error. */
int unsynced_clear(const char *dir);

#endif
