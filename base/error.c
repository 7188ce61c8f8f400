/* SPDX-License-Identifier: Apache-2.0 */
/* Error code texts and the per-thread detail string behind pulse_last_error(). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/fail.h"

static _Thread_local char last_error[512];

PULSE_API const char *pulse_strerror(int err)
{
    switch (err) {
    case PULSE_OK: return "success";
    case PULSE_ERR_INVALID: return "invalid argument";
    case PULSE_ERR_NOMEM: return "out of memory";
    case PULSE_ERR_IO: return "I/O error";
    case PULSE_ERR_FORMAT: return "malformed input";
    case PULSE_ERR_CORRUPT: return "data corrupt (digest mismatch)";
    case PULSE_ERR_MISMATCH: return "does not match the base";
    case PULSE_ERR_LIMIT: return "size or count beyond limits";
    case PULSE_ERR_NOTFOUND: return "not found";
    case PULSE_ERR_EXISTS: return "already exists";
    case PULSE_ERR_AUTH: return "authentication refused";
    case PULSE_ERR_NETWORK: return "network error";
    case PULSE_ERR_SERVER: return "server error";
    case PULSE_ERR_UNSUPPORTED: return "not supported";
    case PULSE_ERR_NOT_MODIFIED: return "not modified";
    case PULSE_ERR_PRECONDITION: return "precondition failed";
    }
    return "unknown error";
}

PULSE_API const char *pulse_last_error(void)
{
    return last_error;
}

void pulse_clear_error(void)
{
    last_error[0] = '\0';
}

/* Formats into a scratch buffer first: callers may pass pulse_last_error() itself as an
 * argument to prefix context ("step 4: %s"), and vsnprintf must not write what it reads. */
static int vfail(int err, int with_errno, const char *fmt, va_list ap)
{
    int saved = errno;
    char buf[sizeof last_error];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (with_errno && n >= 0 && (size_t)n < sizeof buf)
        snprintf(buf + n, sizeof buf - (size_t)n, ": %s", strerror(saved));
    memcpy(last_error, buf, sizeof buf);
    errno = saved;
    return err;
}

int pulse_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(err, 0, fmt, ap);
    va_end(ap);
    return err;
}

int pulse_fail_errno(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(err, 1, fmt, ap);
    va_end(ap);
    return err;
}
