/* SPDX-License-Identifier: Apache-2.0 */
/* Disk space reserved before a file is written: a checkpoint written through a shared map, a fetched object, a mapped temporary. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/durable.h"
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

int pulse_map_new_temp(const char *stem, const char *suffix, mode_t mode, uint64_t size, char *name, size_t cap,
                       void **map)
{
    char own[4200];
    char *path = name ? name : own;
    int fd = pulse_create_temp(stem, suffix, mode, path, name ? cap : sizeof own);
    if (fd < 0)
        return fd;
    if (!name)
        unlink(path);   /* open, not named: its blocks go with the mapping */
    int err = pulse_file_reserve(fd, size, path);
    void *m = MAP_FAILED;
    if (!err && (m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        err = pulse_fail_errno(PULSE_ERR_IO, "%s: mmap", path);
    close(fd);
    if (err) {
        if (name)
            unlink(path);
        return err;
    }
    *map = m;
    return 0;
}
