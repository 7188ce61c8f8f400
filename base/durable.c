/* SPDX-License-Identifier: Apache-2.0 */
/* Temporaries under fresh names that follow no symlink, whole-file replacement through one and a rename, and fsync of a directory so that the names in it reach the disk. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
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

#define TEMP_RANDOM 6
#define TEMP_TRIES 100

/* Six name bytes from the kernel's generator; a clock-and-counter mix where it has none, which is
 * enough because O_EXCL, not the name, is what keeps the file ours. */
static void random_name(char out[TEMP_RANDOM])
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static _Thread_local unsigned long long counter;
    unsigned char b[TEMP_RANDOM];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long x = ((unsigned long long)ts.tv_nsec << 20) ^ (unsigned long long)ts.tv_sec ^
                               ((unsigned long long)getpid() << 40) ^ (++counter * 0x9e3779b97f4a7c15ull);
        for (size_t i = 0; i < sizeof b; i++, x >>= 8)
            b[i] = (unsigned char)x;
    }
    for (size_t i = 0; i < TEMP_RANDOM; i++)
        out[i] = alphabet[b[i] % (sizeof alphabet - 1)];
}

/* Draws names until make() creates one (it returns >= 0) or fails other than with EEXIST. */
static int create_unique(const char *stem, const char *suffix, char *out, size_t cap,
                         int (*make)(const char *name, void *ctx), void *ctx)
{
    int len = snprintf(out, cap, "%s%sXXXXXX", stem, suffix);
    if (len < 0 || (size_t)len >= cap)
        return pulse_fail(PULSE_ERR_LIMIT, "create %s%sXXXXXX: name too long", stem, suffix);
    for (int tries = 0; tries < TEMP_TRIES; tries++) {
        random_name(out + len - TEMP_RANDOM);
        int r = make(out, ctx);
        if (r >= 0)
            return r;
        if (errno != EEXIST)
            break;
    }
    int e = errno;
    memcpy(out + len - TEMP_RANDOM, "XXXXXX", TEMP_RANDOM);
    errno = e;
    return pulse_fail_errno(PULSE_ERR_IO, "create %s", out);
}

struct make_at {
    int dirfd;
    mode_t mode;
};

static int make_file(const char *name, void *ctx)
{
    const struct make_at *m = ctx;
    int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    /* open(2) itself where it can: tests interpose it to act at the moment a temporary appears. */
    return m->dirfd == AT_FDCWD ? open(name, flags, m->mode) : openat(m->dirfd, name, flags, m->mode);
}

static int make_dir(const char *name, void *ctx)
{
    const struct make_at *m = ctx;
    return mkdirat(m->dirfd, name, m->mode);
}

int pulse_create_temp_at(int dirfd, const char *stem, const char *suffix, mode_t mode, char *out, size_t cap)
{
    struct make_at m = { dirfd, mode };
    return create_unique(stem, suffix, out, cap, make_file, &m);
}

int pulse_create_temp(const char *stem, const char *suffix, mode_t mode, char *out, size_t cap)
{
    return pulse_create_temp_at(AT_FDCWD, stem, suffix, mode, out, cap);
}

int pulse_create_temp_dir(const char *stem, const char *suffix, mode_t mode, char *out, size_t cap)
{
    struct make_at m = { AT_FDCWD, mode };
    int r = create_unique(stem, suffix, out, cap, make_dir, &m);
    return r < 0 ? r : 0;
}

int pulse_replace_file(const char *path, const char *tmp_stem, const void *data, size_t n, int durable)
{
    size_t cap = strlen(tmp_stem) + 16;
    char *tmp = malloc(cap);
    if (!tmp)
        return pulse_fail(PULSE_ERR_NOMEM, "create %s", tmp_stem);
    int fd = pulse_create_temp(tmp_stem, ".", 0644, tmp, cap);
    if (fd < 0) {
        free(tmp);
        return fd;
    }
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
    if (r)
        unlink(tmp);
    free(tmp);
    if (r)
        return r;
    return durable ? pulse_fsync_parent(path) : 0;
}
