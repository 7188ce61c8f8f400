/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: run a loop's iterations on several threads (dynamic scheduling). */
#ifndef PULSE_NODE_PARALLEL_H
#define PULSE_NODE_PARALLEL_H

#include <stddef.h>

/* Number of threads for "0 = all cores": PULSE_THREADS if set, else online CPUs. */
int pulse_default_threads(void);

/* Calls fn(ctx, i) for every i < n on up to `threads` threads (0 = default; the calling
 * thread works too). fn returns 0 or a negative error; after the first error no new
 * iterations start, and the error of the lowest failing i among those run is returned. */
int pulse_parallel_for(size_t n, int threads, int (*fn)(void *ctx, size_t i), void *ctx);

#endif
