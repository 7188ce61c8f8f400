/* SPDX-License-Identifier: Apache-2.0 */
/* A node's state directory: created private, refused when others could write it, locked for one process at a time. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC, flock */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/sync/stale_hook.h"
#include "node/sync/sync_internal.h"

int sync_mkdir(const char *dir)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s", dir);
    if (n < 0 || (size_t)n >= sizeof path)
        return pulse_fail(PULSE_ERR_LIMIT, "directory name too long: %.64s...", dir);
    /* Each missing parent first, as `mkdir -p`: a state directory named deeper than what exists.
     * Whatever this creates is private to the user (the umask can only take bits away). */
    for (char *c = path + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return pulse_fail_errno(PULSE_ERR_IO, "cannot create directory %s", path);
        *c = '/';
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot create directory %s", dir);
    return 0;
}

/* The pid the holder wrote into the lock file (0 when unreadable: it may be writing it). */
static long holder_pid(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    return pid > 0 && (*end == '\n' || *end == '\0') ? pid : 0;
}

/* What a node reads from its state directory (journal, index, the copy of the last state)
 * decides what it applies or publishes: one that another user could write into is as good
 * as theirs. */
static int state_dir_check_fd(int dfd, const char *dir)
{
    struct stat st;
    if (fstat(dfd, &st) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot stat state directory %s", dir);
    if (st.st_uid != geteuid())
        return pulse_fail(PULSE_ERR_INVALID, "state directory %s is owned by uid %lu, not by this user (uid %lu)",
                          dir, (unsigned long)st.st_uid, (unsigned long)geteuid());
    if (st.st_mode & 022)
        return pulse_fail(PULSE_ERR_INVALID, "state directory %s has mode %04o: group or others can write it "
                          "(run chmod 700 %s)", dir, (unsigned)(st.st_mode & 07777), dir);
    return 0;
}

int state_dir_check(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "cannot open state directory %s",
                                dir);
    int r = state_dir_check_fd(dfd, dir);
    close(dfd);
    return r;
}

int state_dir_open(const char *dir, state_dir *out)
{
    out->fd = -1;
    int r = sync_mkdir(dir);
    if (r)
        return r;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot open state directory %s", dir);
    if ((r = state_dir_check_fd(dfd, dir)) != 0) {
        close(dfd);
        return r;
    }
    /* The lock file itself: never followed through a link, never passed to a hook's exec. */
    int fd = openat(dfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    int saved = errno;
    close(dfd);
    if (fd < 0) {
        errno = saved;
        return pulse_fail_errno(PULSE_ERR_IO, "cannot open %s/lock", dir);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        saved = errno;
        long pid = saved == EWOULDBLOCK ? holder_pid(fd) : 0;
        close(fd);
        if (saved != EWOULDBLOCK) {
            errno = saved;
            return pulse_fail_errno(PULSE_ERR_IO, "cannot lock %s/lock", dir);
        }
        if (pid)
            return pulse_fail(PULSE_ERR_EXISTS, "state directory %s is in use by another pulse process (pid %ld)",
                              dir, pid);
        return pulse_fail(PULSE_ERR_EXISTS, "state directory %s is in use by another pulse process", dir);
    }
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
        r = pulse_fail_errno(PULSE_ERR_IO, "cannot write %s/lock", dir);
        close(fd);
        return r;
    }
    out->fd = fd;
    /* A hook of a node that died on this directory may still be reading the weights. */
    if ((r = stale_hook_reap(dir)) != 0) {
        state_dir_close(out);
        return r;
    }
    return 0;
}

void state_dir_close(state_dir *d)
{
    /* The file stays (removing it would race with a next holder that opened it already);
     * closing releases the lock. */
    if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
}

/* Directory FD's entry NAME, a directory: its entries (files: no deeper), then itself. */
static void remove_flat_dir(int fd, const char *name)
{
    int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *sd = sub >= 0 ? fdopendir(sub) : NULL;
    if (!sd) {
        if (sub >= 0)
            close(sub);
        return;
    }
    for (struct dirent *f; (f = readdir(sd)) != NULL;)
        if (strcmp(f->d_name, ".") && strcmp(f->d_name, ".."))
            (void)unlinkat(sub, f->d_name, 0);
    closedir(sd);
    (void)unlinkat(fd, name, AT_REMOVEDIR);
}

void state_dir_sweep(const char *dir, const char *const *stems, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    int fd = dirfd(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        for (size_t i = 0; i < n; i++)
            if (!strncmp(e->d_name, stems[i], strlen(stems[i]))) {
                if (unlinkat(fd, e->d_name, 0) != 0 && (errno == EISDIR || errno == EPERM))
                    remove_flat_dir(fd, e->d_name);
                break;
            }
    closedir(d);
}
