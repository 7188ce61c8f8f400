/* SPDX-License-Identifier: Apache-2.0 */
/* Diff-speed benchmark (not a test): pulse_patch_diff with both state ids given, on one core, against a streaming read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "tools/synth/measure.h"

/* CPU time of the process: on a shared, loaded machine the wall clock mostly measures the
 * other tenants. Everything timed runs on one thread. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall time, for what CPU time cannot show: waiting for the patch's fsync, and threads. */
static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: diff_bench OLD NEW OUT_PATCH [REPEAT [ZSTD_LEVEL [THREADS [context]]]]\n");
        return 2;
    }
    int repeat = argc > 4 ? atoi(argv[4]) : 5;
    pulse_ckpt *a = NULL, *b = NULL;
    uint8_t ia[32], ib[32];
    if (pulse_ckpt_open(&a, argv[1], PULSE_CKPT_READ) || pulse_ckpt_open(&b, argv[2], PULSE_CKPT_READ)
        || pulse_ckpt_state_id(a, 1, ia) || pulse_ckpt_state_id(b, 1, ib)) {
        fprintf(stderr, "diff_bench: %s\n", pulse_last_error());
        return 1;
    }
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.threads = 1;
    o.old_id = ia;
    o.new_id = ib;
    if (argc > 5)
        o.zstd_level = atoi(argv[5]);
    if (argc > 6)
        o.threads = atoi(argv[6]);
    if (argc > 7 && !strcmp(argv[7], "context"))
        o.context = 1;   /* format 5 */
    double t_read = 1e30, t_diff = 1e30, w_diff = 1e30;
    uint64_t bytes = 0, sink = 0;
    int warm = getenv("PULSE_BENCH_WARM") != NULL;   /* else every run starts from memory */
    for (int r = 0; r < repeat; r++) {
        if (!warm)
            measure_cold();
        double t0 = now();
        bytes = 0;
        for (size_t i = 0; i < pulse_ckpt_count(a); i++) {
            const pulse_tensor *x = pulse_ckpt_tensor(a, i), *y = pulse_ckpt_tensor(b, i);
            sink += measure_read2(x->data, x->nbytes, y->data, y->nbytes);
            bytes += x->nbytes + y->nbytes;
        }
        double t = now() - t0;
        t_read = t < t_read ? t : t_read;
    }
    for (int r = 0; r < repeat; r++) {
        unlink(argv[3]);   /* a new file each time (renaming onto one also times freeing its blocks) */
        if (!warm)
            measure_cold();
        double t0 = now(), w0 = wall();
        if (pulse_patch_diff(a, b, &o, argv[3])) {
            fprintf(stderr, "diff_bench: %s\n", pulse_last_error());
            return 1;
        }
        double t = now() - t0, w = wall() - w0;
        t_diff = t < t_diff ? t : t_diff;
        w_diff = w < w_diff ? w : w_diff;
    }
    printf("read %.1f ms (%.2f GB/s)  diff (ids given, level %d, %d thread%s%s) %.1f ms CPU (%.2f GB/s), %.1f ms wall"
           "  ratio %.3f  [%llu]\n",
           t_read * 1e3, (double)bytes / t_read * 1e-9, o.zstd_level, o.threads, o.threads == 1 ? "" : "s",
           o.context ? ", context" : "",
           t_diff * 1e3, (double)bytes / t_diff * 1e-9, w_diff * 1e3, t_read / t_diff,
           (unsigned long long)(sink & 1));
    pulse_ckpt_close(&a);
    pulse_ckpt_close(&b);
    return 0;
}
