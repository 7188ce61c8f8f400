/* SPDX-License-Identifier: Apache-2.0 */
/* Whole-file replacement through a temporary and a rename, and fsync of a directory so that the names in it reach the disk. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"

int pulse_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = fd < 0 || fsync(fd) != 0 ? pulse_fail_errno(PULSE_ERR_IO, "fsync of the directory %s", dir) : 0;
    if (fd >= 0)
        close(fd);
    return r;
}

int pulse_fsync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return pulse_fsync_dir(".");
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    char *dir = strndup(path, len);
    if (!dir)
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    int r = pulse_fsync_dir(dir);
    free(dir);
    return r;
}

int pulse_replace_file(const char *path, const char *tmp, const void *data, size_t n, int durable)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return pulse_fail_errno(PULSE_ERR_IO, "create %s", tmp);
    int r = 0;
    for (size_t done = 0; !r && done < n;) {
        ssize_t w = write(fd, (const char *)data + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            r = pulse_fail_errno(PULSE_ERR_IO, "write %s", tmp);
        else
            done += (size_t)w;
    }
    if (!r && durable && fsync(fd) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "fsync %s", tmp);
    if (close(fd) != 0 && !r)
        r = pulse_fail_errno(PULSE_ERR_IO, "write %s", tmp);   /* a deferred write error */
    if (!r && rename(tmp, path) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "rename %s to %s", tmp, path);
    if (r) {
        unlink(tmp);
        return r;
    }
    return durable ? pulse_fsync_parent(path) : 0;
}
