/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: record the detail of a failure and return its code in one statement. */
#ifndef PULSE_BASE_FAIL_H
#define PULSE_BASE_FAIL_H

#include "pulseweights/error.h"

/* Sets the thread-local detail (printf format) and returns err, so that callers write
 * `return pulse_fail(PULSE_ERR_FORMAT, "tensor %s: shape mismatch", name);`.
 * The detail should name what was wrong; it must never contain secrets. */
int pulse_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like pulse_fail, appending ": strerror(errno)" for the current errno. */
int pulse_fail_errno(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the detail (used by entry points before doing work). */
void pulse_clear_error(void);

#endif
