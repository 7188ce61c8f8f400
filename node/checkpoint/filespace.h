/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: sizing a checkpoint file that is about to be written through a shared map, with its disk space reserved. */
#ifndef PULSE_CKPT_FILESPACE_H
#define PULSE_CKPT_FILESPACE_H

#include <stdint.h>

/* Makes fd exactly `size` bytes with the blocks for all of them allocated, so that a full
 * disk fails here with PULSE_ERR_IO ("No space left on device") instead of killing the
 * process with SIGBUS at the first store into a hole of the map. Where the file system
 * cannot allocate ahead (no fallocate), it falls back to ftruncate alone. `what` names the
 * file in the error. Returns 0 or a negative pulse error. */
int pulse_file_reserve(int fd, uint64_t size, const char *what);

#endif
