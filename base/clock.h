/* SPDX-License-Identifier: Apache-2.0 */
/* The one clock for durations: seconds on CLOCK_MONOTONIC, which wall-clock steps do not move. */
#ifndef PULSE_BASE_CLOCK_H
#define PULSE_BASE_CLOCK_H

#include <time.h>

static inline double pulse_monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
