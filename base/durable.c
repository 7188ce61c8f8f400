/* SPDX-License-Identifier: Apache-2.0 */
/* fsync of a directory, so that the names in it (renames, creations, removals) reach the disk. */
#include <fcntl.h>
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
