/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim (LD_PRELOAD): when the patch writer creates its temporary (open with O_EXCL), copy a byte range of one file into another first, as a trainer rewriting NEW between the diff's plan and its coding would. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <dlfcn.h>

#define SHIM_EXPORT __attribute__((visibility("default")))  /* the build hides symbols by default */

SHIM_EXPORT int open64(const char *path, int flags, ...);

static int (*real_open64)(const char *, int, ...);

/* Resolved once at load, before any thread of the program runs. */
__attribute__((constructor)) static void find_real_open(void)
{
    real_open64 = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open64");
}

/* $PULSE_CHANGE_FROM bytes [$PULSE_CHANGE_AT, + $PULSE_CHANGE_LEN) into $PULSE_CHANGE_TO, once. */
static void change_once(void)
{
    static int done;
    const char *from = getenv("PULSE_CHANGE_FROM"), *to = getenv("PULSE_CHANGE_TO");
    const char *at = getenv("PULSE_CHANGE_AT"), *len = getenv("PULSE_CHANGE_LEN");
    if (done || !from || !to || !at || !len)
        return;
    done = 1;
    off_t off = (off_t)strtoll(at, NULL, 10);
    size_t n = (size_t)strtoull(len, NULL, 10);
    char *buf = malloc(n ? n : 1);
    int src = real_open64(from, O_RDONLY), dst = real_open64(to, O_WRONLY);
    if (buf && src >= 0 && dst >= 0 && pread(src, buf, n, off) == (ssize_t)n)
        (void)!pwrite(dst, buf, n, off);
    if (src >= 0)
        close(src);
    if (dst >= 0)
        close(dst);
    free(buf);
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if ((flags & O_EXCL) && strstr(path, ".tmp."))
        change_once();
    return real_open64(path, flags, mode);
}
