/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal assertion harness for the C tests: count failures, report file:line, exit status. */
#ifndef PULSE_TESTS_CHECK_H
#define PULSE_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond) do { check_count++; if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)

#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); check_count++; \
    if (a_ != b_) { check_failures++; fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", \
    __FILE__, __LINE__, #a, #b, a_, b_); } } while (0)

/* A call returning a pulse error code that must succeed; prints the error detail. */
#define CHECK_OK(expr) do { int r_ = (expr); check_count++; if (r_ != 0) { check_failures++; \
    fprintf(stderr, "%s:%d: %s returned %d (%s: %s)\n", __FILE__, __LINE__, #expr, r_, \
    pulse_strerror(r_), pulse_last_error()); } } while (0)

/* A call that must fail with exactly this code. */
#define CHECK_ERR(expr, code) do { int r_ = (expr); check_count++; if (r_ != (code)) { \
    check_failures++; fprintf(stderr, "%s:%d: %s returned %d, wanted %d (%s)\n", __FILE__, \
    __LINE__, #expr, r_, (int)(code), pulse_last_error()); } } while (0)

/* Ends main(): prints the tally, exit status 0 only when every check passed and some ran. */
static inline int check_done(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return (check_failures || !check_count) ? 1 : 0;
}

#endif
