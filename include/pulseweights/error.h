/* SPDX-License-Identifier: Apache-2.0 */
/* Error codes shared by every pulse API, and the thread-local detail of the last failure. */
#ifndef PULSEWEIGHTS_ERROR_H
#define PULSEWEIGHTS_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PULSE_API __attribute__((visibility("default")))
#else
#define PULSE_API
#endif

/* Every function that can fail returns 0 or one of these (negative).
 * Append only: values are never renumbered or reused. */
enum pulse_err {
    PULSE_OK = 0,
    PULSE_ERR_INVALID = -1,      /* bad argument or usage */
    PULSE_ERR_NOMEM = -2,        /* allocation failed */
    PULSE_ERR_IO = -3,           /* a file system call failed (see detail for errno) */
    PULSE_ERR_FORMAT = -4,       /* malformed input: checkpoint, patch, record, URL */
    PULSE_ERR_CORRUPT = -5,      /* a digest or state id did not match the bytes */
    PULSE_ERR_MISMATCH = -6,     /* input for another base, or tensor layout differs */
    PULSE_ERR_LIMIT = -7,        /* a declared size or count is beyond the limits */
    PULSE_ERR_NOTFOUND = -8,     /* no such object, key, tensor or file */
    PULSE_ERR_EXISTS = -9,       /* create-if-absent found the key already there */
    PULSE_ERR_AUTH = -10,        /* credentials or signature refused */
    PULSE_ERR_NETWORK = -11,     /* connection failed, reset or timed out (after retries) */
    PULSE_ERR_SERVER = -12,      /* the server kept answering with errors (after retries) */
    PULSE_ERR_UNSUPPORTED = -13, /* a feature this build or this input does not support */
    PULSE_ERR_NOT_MODIFIED = -14,/* conditional get: the object still has the given ETag */
    PULSE_ERR_PRECONDITION = -15,/* the server refused a conditional request (412) */
};

/* Static text for an error code; never NULL ("unknown error" for unknown codes). */
PULSE_API const char *pulse_strerror(int err);

/* Detail of the last failure on the calling thread: which tensor, which offset, which
 * HTTP status. Valid until the next pulse call on this thread; "" when none. */
PULSE_API const char *pulse_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
