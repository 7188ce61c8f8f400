/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: making a rename, create or unlink survive a crash, by an fsync of the directory that holds the name. */
#ifndef PULSE_BASE_DURABLE_H
#define PULSE_BASE_DURABLE_H

/* fsync(2) of the directory dir. 0, or PULSE_ERR_IO with the detail
 * "fsync of the directory DIR: <strerror>" (also when dir cannot be opened as a directory). */
int pulse_fsync_dir(const char *dir);

/* pulse_fsync_dir of the directory that holds path: path up to its last '/' ("/" for a name
 * in the root, "." for a name without a '/'). What makes a rename onto path, or its creation
 * or removal, durable once it returns 0. */
int pulse_fsync_parent(const char *path);

#endif
