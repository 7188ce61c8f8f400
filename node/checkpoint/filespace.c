/* SPDX-License-Identifier: Apache-2.0 */
/* Disk space reserved before a file is written: a checkpoint written through a shared map, a fetched object. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/checkpoint/filespace.h"

int pulse_file_allocate(int fd, int mode, uint64_t size)
{
    if (size == 0)
        return 0;
    /* fallocate, not posix_fallocate: where the file system has no fallocate, glibc's
     * posix_fallocate writes a byte into every block, which is slow and not needed when
     * the caller writes every byte anyway. */
    int r;
    do
        r = fallocate(fd, mode, 0, (off_t)size);
    while (r != 0 && errno == EINTR);
    return r != 0 && errno != EOPNOTSUPP && errno != ENOSYS ? -1 : 0;
}

int pulse_file_reserve(int fd, uint64_t size, const char *what)
{
    if (ftruncate(fd, (off_t)size) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "%s: cannot size to %llu bytes", what, (unsigned long long)size);
    if (pulse_file_allocate(fd, 0, size) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "%s: cannot reserve %llu bytes", what, (unsigned long long)size);
    return 0;
}
