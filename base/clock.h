/* SPDX-License-Identifier: Apache-2.0 */
/* The clocks: seconds on CLOCK_MONOTONIC for durations (wall-clock steps do not move it), and the wall clock for times other machines compare. */
#ifndef PULSE_BASE_CLOCK_H
#define PULSE_BASE_CLOCK_H

#include <time.h>

static inline double pulse_monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Unix time in seconds with its fraction: for a time another machine reads (a head's write time,
 * which a follower compares with its own clock), never for a duration. */
static inline double pulse_realtime_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
