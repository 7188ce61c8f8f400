/* SPDX-License-Identifier: Apache-2.0 */
/* Apply-speed benchmark (not a test): decode+scatter of a patch on one core against one memcpy of the checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "node/patch/patch_internal.h"
#include "tools/synth/measure.h"

/* CPU time of the process, not wall time: on a shared, loaded machine the wall clock
 * mostly measures the other tenants. Everything timed runs on one thread. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Puts base's tensor data back into t, so that a write pass decodes against the weights the
 * patch was made from (a context-coded chunk needs them) and each run does the same work. */
static void restore(pulse_ckpt *t, const pulse_ckpt *base)
{
    for (size_t i = 0; i < pulse_ckpt_count(t); i++)
        memcpy(pulse_ckpt_tensor(t, i)->data, pulse_ckpt_tensor(base, i)->data, pulse_ckpt_tensor(t, i)->nbytes);
}

/* Best of `repeat` runs of stmt, each on a restored target, timed as BEST times. */
#define BEST_RESTORED(repeat, best, stmt) do { \
        (best) = 1e30; \
        for (int k_ = 0; k_ < (repeat); k_++) { \
            double one_; \
            restore(t, base); \
            BEST(1, one_, stmt); \
            if (one_ < (best)) (best) = one_; \
        } \
    } while (0)

static int die(const char *what)
{
    fprintf(stderr, "apply_bench: %s: %s\n", what, pulse_last_error());
    return 1;
}

/* Best of `repeat` runs, in seconds, each from memory (measure_cold: a read of twice the
 * last-level cache first), unless PULSE_BENCH_WARM is set. */
static int warm;
#define BEST(repeat, best, stmt) MEASURE_BEST(repeat, warm, now, best, stmt)

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: apply_bench BASE PATCH SCRATCH_COPY [REPEAT [profile]]\n"
                        "(make BASE and a patch with: ratio_bench OLD NEW 100000000; pulse diff OLD NEW -o P)\n");
        return 2;
    }
    int repeat = argc > 4 ? atoi(argv[4]) : 5;
    warm = getenv("PULSE_BENCH_WARM") != NULL;
    /* "profile" (5th argument): only pass 1 (no cache) `repeat` times, then pass 2 from the
     * cache as often when a 6th argument is given, for perf. */
    int profile = argc > 5 && !strcmp(argv[5], "profile");
    pulse_ckpt *base = NULL, *t = NULL;
    pulse_patch *p = NULL;
    if (pulse_ckpt_open(&base, argv[1], 0))
        return die(argv[1]);
    if (pulse_patch_open(&p, argv[2]))
        return die(argv[2]);
    if (pulse_ckpt_create_like(&t, argv[3], base) || pulse_ckpt_commit(t))
        return die(argv[3]);
    restore(t, base);
    if (profile) {
        int e = 0;
        for (int r = 0; r < repeat; r++)
            e |= patch_run_chunks(p, NULL, 0, 1);
        patch_cache c;
        e |= patch_cache_open(&c, p);
        e |= patch_run_pass1(p, base, 1, &c);
        for (int r = 0; r < repeat && argc > 6; r++) {
            restore(t, base);
            e |= patch_run_pass2(p, t, 1, &c);
        }
        patch_cache_close(&c);
        return e ? die("run") : 0;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < pulse_ckpt_count(t); i++)
        bytes += pulse_ckpt_tensor(t, i)->nbytes;
    uint8_t *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst)
        return 1;
    memset(src, 1, bytes);
    memset(dst, 2, bytes);   /* both faulted in before timing */
    double t_memcpy, t_decode, t_check, t_cached, t_scatter, t_scatter_dg, t_fast, t_hash;
    BEST(repeat, t_memcpy, memcpy(dst, src, bytes); src[bytes / 2] ^= dst[bytes / 3]);
    int err = 0;
    /* Pass 1 as pulse_patch_verify runs it (no cache), then as the apply runs it: filling
     * the capped cache (emptied before each run), and pass 2 adding from that cache. */
    BEST(repeat, t_decode, err |= patch_run_chunks(p, NULL, 0, 1));
    patch_cache cache;
    err |= patch_cache_open(&cache, p);
    BEST(repeat, t_check, atomic_store(&cache.used, 0);
         if (cache.nent) memset(cache.ent, 0, cache.nent * sizeof *cache.ent);
         err |= patch_run_pass1(p, base, 1, &cache));
    size_t kept = 0;
    for (size_t i = 0; i < cache.nent; i++)
        kept += cache.ent[i].cached;
    /* Pass 2 on the mapped target, put back to BASE before each run (untimed). */
    BEST_RESTORED(repeat, t_cached, err |= patch_run_pass2(p, t, 1, &cache));
    size_t cache_bytes = atomic_load(&cache.used);
    patch_cache_close(&cache);
    BEST_RESTORED(repeat, t_scatter, err |= patch_run_checked_chunks(p, t, 1));
    BEST_RESTORED(repeat, t_scatter_dg, err |= patch_run_chunks(p, t, 1, 1));
    pulse_patch_apply_opts o;
    pulse_patch_apply_opts_default(&o);
    o.threads = 1;
    o.trust_base_id = pulse_patch_base_id(p);
    o.skip_result_check = 1;
    BEST_RESTORED(repeat, t_fast, err |= pulse_patch_apply_ex(p, t, &o));
    uint8_t id[32];
    BEST(repeat, t_hash, err |= pulse_ckpt_state_id(t, 1, id));
    if (err)
        return die("run");
    pulse_patch_stats st;
    pulse_patch_info(p, 0, &st);
    printf("checkpoint %zu bytes, %llu changes (%.2f%%), patch %llu bytes, 1 thread, CPU time, best of %d%s, kernels %s\n",
           bytes, (unsigned long long)st.changes, 100.0 * (double)st.changes / (double)st.nelems,
           (unsigned long long)st.file_bytes, repeat,
           warm ? " back to back" : " from memory", pulse_kernels_get()->name);
    printf("memcpy                      %8.2f ms  %6.2f GB/s\n", 1e3 * t_memcpy, (double)bytes / t_memcpy / 1e9);
    printf("check pass, no cache        %8.2f ms  %6.3f x memcpy  (pulse_patch_verify)\n", 1e3 * t_decode,
           t_decode / t_memcpy);
    printf("check pass, filling cache   %8.2f ms  %6.3f x memcpy  (%zu of %zu chunks kept, %.1f MiB)\n",
           1e3 * t_check, t_check / t_memcpy, kept, p->nchunks, (double)cache_bytes / 1048576.0);
    printf("write pass from the cache   %8.2f ms  %6.3f x memcpy\n", 1e3 * t_cached, t_cached / t_memcpy);
    printf("  passes 1 + 2 (sum)        %8.2f ms  %6.3f x memcpy\n", 1e3 * (t_check + t_cached),
           (t_check + t_cached) / t_memcpy);
    printf("write pass, no cache        %8.2f ms  %6.3f x memcpy  (read, digest, decode again)\n", 1e3 * t_scatter,
           t_scatter / t_memcpy);
    printf("  unfused, digests checked  %8.2f ms  %6.3f x memcpy\n", 1e3 * t_scatter_dg, t_scatter_dg / t_memcpy);
    printf("apply_ex trusted, no check  %8.2f ms  %6.3f x memcpy  (passes 1 + 2, as the CLI's)\n", 1e3 * t_fast,
           t_fast / t_memcpy);
    printf("state id (safe apply adds 2)%8.2f ms  %6.3f x memcpy\n", 1e3 * t_hash, t_hash / t_memcpy);
    free(src);
    free(dst);
    pulse_patch_close(&p);
    pulse_ckpt_close(&t);
    pulse_ckpt_close(&base);
    remove(argv[3]);
    return 0;
}
