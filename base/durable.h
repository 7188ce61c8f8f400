/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: replacing a small file whole, and making a rename, create or unlink survive a crash (fsync of the directory that holds the name). */
#ifndef PULSE_BASE_DURABLE_H
#define PULSE_BASE_DURABLE_H

#include <stddef.h>

/* fsync(2) of the directory dir. 0, or PULSE_ERR_IO with the detail
 * "fsync of the directory DIR: <strerror>" (also when dir cannot be opened as a directory). */
int pulse_fsync_dir(const char *dir);

/* pulse_fsync_dir of the directory that holds path: path up to its last '/' ("/" for a name
 * in the root, "." for a name without a '/'). What makes a rename onto path, or its creation
 * or removal, durable once it returns 0. */
int pulse_fsync_parent(const char *path);

/* Replaces path with the n bytes at data, whole or not at all: written to tmp (created or
 * truncated; in path's directory, so that the rename stays on one file system), renamed over
 * path. With durable, tmp is fsynced before the rename and path's directory after it, so that
 * after a crash path holds the old bytes or the new ones. On failure tmp is removed, path is
 * as it was, and the detail names the step ("create/write/fsync TMP", "rename TMP to PATH"). */
int pulse_replace_file(const char *path, const char *tmp, const void *data, size_t n, int durable);

#endif
