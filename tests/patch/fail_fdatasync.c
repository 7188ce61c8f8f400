/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim (LD_PRELOAD): every fdatasync fails with EIO, as a disk that lost a write reports it (fsync is left alone), and each pwrite takes 2 ms longer, so a patch's chunks arrive while its flusher runs. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define SHIM_EXPORT __attribute__((visibility("default")))  /* the build hides symbols by default */

SHIM_EXPORT int fdatasync(int fd);
SHIM_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off);

/* Each call appends one byte to $PULSE_FDATASYNC_LOG when set: the test's proof that the
 * flusher ran during the writes. */
int fdatasync(int fd)
{
    (void)fd;
    const char *log = getenv("PULSE_FDATASYNC_LOG");
    if (log) {
        int l = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (l >= 0) {
            (void)!write(l, "s", 1);
            close(l);
        }
    }
    errno = EIO;
    return -1;
}

static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);

/* Resolved once at load, before any thread of the program runs. */
__attribute__((constructor)) static void find_real_pwrite(void)
{
    real_pwrite = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    struct timespec pause = { 0, 2000000 };
    nanosleep(&pause, NULL);
    return real_pwrite(fd, buf, n, off);
}
