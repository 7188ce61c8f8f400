/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: new temporaries that follow no symlink, replacing a small file whole, and making a rename, create or unlink survive a crash (fsync of the directory that holds the name). */
#ifndef PULSE_BASE_DURABLE_H
#define PULSE_BASE_DURABLE_H

#include <stddef.h>
#include <sys/types.h>

/* fsync(2) of the directory dir. 0, or PULSE_ERR_IO with the detail
 * "fsync of the directory DIR: <strerror>" (also when dir cannot be opened as a directory). */
int pulse_fsync_dir(const char *dir);

/* pulse_fsync_dir of the directory that holds path: path up to its last '/' ("/" for a name
 * in the root, "." for a name without a '/'). What makes a rename onto path, or its creation
 * or removal, durable once it returns 0. */
int pulse_fsync_parent(const char *path);

/* Creates a new file named STEM SUFFIX XXXXXX (six random letters and digits), relative to dirfd
 * (AT_FDCWD: as open(2) would), with O_CREAT|O_EXCL|O_NOFOLLOW, mode (less the umask), opened
 * read-write and close-on-exec. Whatever already holds a name (a file, a symlink planted by
 * someone who can write the directory) is never opened, truncated or followed: another name is
 * drawn instead. Every temporary of the tree is made here. Returns the descriptor (>= 0) and the
 * name in out[cap] (as given: relative to dirfd when stem is), or a negative PULSE_ERR_*: IO with
 * the detail "create STEM SUFFIXXXXXXX: <strerror>", LIMIT when the name does not fit in cap. */
int pulse_create_temp_at(int dirfd, const char *stem, const char *suffix, mode_t mode, char *out, size_t cap);
int pulse_create_temp(const char *stem, const char *suffix, mode_t mode, char *out, size_t cap);

/* The same for a directory (mkdir(2), which never follows a symlink): 0 and the name in out. */
int pulse_create_temp_dir(const char *stem, const char *suffix, mode_t mode, char *out, size_t cap);

/* Replaces path with the n bytes at data, whole or not at all: written to a new temporary
 * pulse_create_temp(tmp, ".") (so TMP.XXXXXX; tmp must be in path's directory, so that the
 * rename stays on one file system), renamed over path. With durable, the temporary is fsynced
 * before the rename and path's directory after it, so that after a crash path holds the old
 * bytes or the new ones. On failure the temporary is removed, path is as it was, and the detail
 * names the step ("create/write/fsync TMP...", "rename TMP... to PATH"). */
int pulse_replace_file(const char *path, const char *tmp, const void *data, size_t n, int durable);

#endif
