/* SPDX-License-Identifier: Apache-2.0 */
/* What `pulse bench` measures with: wall clock, external tools, memory baselines, peak anonymous memory. */
#ifndef PULSE_TOOLS_SYNTH_MEASURE_H
#define PULSE_TOOLS_SYNTH_MEASURE_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic wall clock in seconds. */
double measure_now(void);
/* CPU time of this process (all its threads) in seconds: on a shared, loaded machine the
 * time a one-thread run actually computed, where the wall clock also counts the waits. */
double measure_cpu_now(void);

/* Runs argv (argv[0] searched in PATH) with stdin from /dev/null and stderr discarded;
 * stdout goes into out (NUL-terminated, truncated to size) or is discarded when out is NULL.
 * Returns the exit status (128+signal when killed), -1 when the program is not installed,
 * -2 when it could not be started otherwise. *seconds gets the wall time of the run. */
int measure_spawn(char *const argv[], char *out, size_t size, double *seconds);

/* Best wall time of `repeat` memcpy(dst, src, n) calls, back to back. */
double measure_memcpy(void *dst, const void *src, size_t n, int repeat);

/* A streaming read of two arrays side by side (the machine's read bandwidth as a diff sees
 * it): the sum of their 8-byte words, with 32-byte loads where the CPU has AVX2. Callers keep
 * the result so that the reads cannot be optimised away. */
uint64_t measure_read2(const uint8_t *x, size_t nx, const uint8_t *y, size_t ny);

/* Adds delta to the first byte of every 64-byte line of [p, p + n) (volatile accesses, one
 * line after the other): the least traffic any in-place write of scattered changes causes
 * when nearly every line holds one, a read and a write-back of each line. */
void measure_touch_lines(uint8_t *p, size_t n, int delta);

/* best = the least time, on clock(), of `repeat` runs of stmt, each after measure_cold()
 * unless warm: the benchmarks' "best of N from memory". */
#define MEASURE_BEST(repeat, warm, clock, best, stmt) do { \
        (best) = 1e30; \
        for (int r_ = 0; r_ < (repeat); r_++) { \
            if (!(warm)) \
                measure_cold(); \
            double t0_ = clock(); \
            stmt; \
            double t_ = clock() - t0_; \
            if (t_ < (best)) (best) = t_; \
        } \
    } while (0)

/* Bytes of the last-level cache (sysconf, else the largest cache sysfs lists for CPU 0, else
 * 32 MiB). */
size_t measure_llc_bytes(void);
/* Reads a buffer of twice the last-level cache (64 MiB to 2 GiB; allocated and written on the
 * first call, so its lines are clean from then on), so that the run timed next starts from
 * memory, as a node's diff or apply of a new step does. Where the LLC holds most of what a
 * run touches (480 MiB on a Xeon VM measured, against 395 MB for a memcpy of the bench
 * checkpoint), back-to-back repeats otherwise time the cache for some runs and not others:
 * there a repeated memcpy ran in 14 ms warm against 17 ms from memory. */
/* Returns the bytes read, 0 when the buffer could not be allocated (then nothing is evicted). */
size_t measure_cold(void);

/* RssAnon of this process in KiB (/proc/self/status), 0 when unknown. */
uint64_t measure_rss_anon_kb(void);

/* Samples RssAnon every period_us on a thread of its own and keeps the peak: the kernel
 * tracks a high-water mark only for the whole RSS (VmHWM), which counts the mapped
 * checkpoint pages as well and so grows with the model by construction. */
typedef struct measure_sampler measure_sampler;
int measure_sampler_start(measure_sampler **s, unsigned period_us);
/* Stops the thread and returns the peak in KiB (NULL-safe: 0). */
uint64_t measure_sampler_stop(measure_sampler **s);

#endif
