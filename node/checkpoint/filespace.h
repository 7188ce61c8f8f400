/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: disk space reserved before a file is written (a checkpoint through a shared map, a fetched object, a mapped temporary). */
#ifndef PULSE_CKPT_FILESPACE_H
#define PULSE_CKPT_FILESPACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Makes fd exactly `size` bytes with the blocks for all of them allocated, so that a full
 * disk fails here with PULSE_ERR_IO ("No space left on device") instead of killing the
 * process with SIGBUS at the first store into a hole of the map. Where the file system
 * cannot allocate ahead (no fallocate), it falls back to ftruncate alone. `what` names the
 * file in the error. Returns 0 or a negative pulse error. */
int pulse_file_reserve(int fd, uint64_t size, const char *what);

/* fallocate(fd, mode, 0, size), retried when interrupted: 0 also where the file system cannot
 * allocate ahead (nothing is reserved then), else -1 with errno set (ENOSPC: no room). mode
 * FALLOC_FL_KEEP_SIZE reserves the blocks and leaves the file's size as it is. */
int pulse_file_allocate(int fd, int mode, uint64_t size);

/* A new file beside stem (pulse_create_temp(stem, suffix, mode)), `size` bytes (> 0) reserved as
 * pulse_file_reserve reserves them, mapped read-write and shared in *map: memory whose bytes are
 * page cache, not the process's. With name, the file's path is written there (cap bytes) and
 * the file stays; with name NULL it is unlinked at once, its blocks going with the mapping.
 * Returns 0, or a negative pulse error with nothing mapped and no file left. */
int pulse_map_new_temp(const char *stem, const char *suffix, mode_t mode, uint64_t size, char *name, size_t cap,
                       void **map);

#endif
