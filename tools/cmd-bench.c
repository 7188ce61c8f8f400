/* SPDX-License-Identifier: Apache-2.0 */
/* pulse bench codec: one synthetic step coded by pulse, zstd and xdelta3, and timed against memory speed. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/patch.h"
#include "tools/cli.h"
#include "tools/synth/args.h"
#include "tools/synth/measure.h"
#include "tools/synth/synth.h"
#include "tools/verbs.h"

static const char usage[] =
    "usage: pulse bench codec [--params 100M] [--lr 3e-6] [--seed S] [--step 5] [--repeat 3]\n"
    "                         [--mem-params 25M] [--keep DIR] [--warm]\n"
    "\n"
    "Writes two consecutive checkpoints of the synthetic trainer (pulse synth: OLD = step K-1,\n"
    "NEW = step K, K = --step) and prints in one table: the bytes of NEW coded by zstd -3,\n"
    "zstd --patch-from=OLD, xdelta3 -e -s OLD, pulse abs and pulse ulp patches, and the\n"
    "order-0 entropy bound; the times of pulse diff and pulse apply --in-place on 1 and 2\n"
    "threads (best of --repeat, files in the page cache) against one memcpy of the checkpoint,\n"
    "a streaming read of OLD+NEW and the in-place floor (a byte of every line of the target\n"
    "read and written); and the peak anonymous memory of diff and apply at\n"
    "--mem-params and --params weights. Each target (docs/performance.md) is marked PASS or MISS\n"
    "(informational: the exit status is 0 whenever the measurements ran). A missing external\n"
    "tool shows as \"(not installed)\". Files go to a temporary directory that is removed,\n"
    "or to --keep DIR, where they are kept and reused by the next run with the same options.\n"
    "Every timed run starts from memory: a read of twice the last-level cache goes before it,\n"
    "as a node's diff or apply of a new step finds its data; --warm times them back to back\n"
    "instead (what the cache keeps of the previous run then counts, and on a machine whose\n"
    "cache holds most of a checkpoint pair the baselines gain more than the codec).\n"
    "\n"
    "pulse bench memprobe OLD NEW DIR [context]   (internal: peak RssAnon of diff and apply, one process)\n";

#define VERB "bench"

struct bench {
    synth_opts o;
    uint64_t step, mem_params;
    int repeat;
    const char *dir;
    int keep;
    int warm;   /* --warm: no cache eviction before the timed runs */
};

struct pair {
    char old_path[4096], new_path[4096];
    uint64_t params;
};

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Makes (or, with --keep, reuses) OLD = step K-1 and NEW = step K at `params` weights. */
static int make_pair(const struct bench *b, uint64_t params, struct pair *pp)
{
    synth_opts o = b->o;
    o.params = params;
    synth_model m;
    int err = synth_model_init(&m, &o);
    if (err < 0)
        return err;
    pp->params = m.params;
    snprintf(pp->old_path, sizeof pp->old_path, "%s/p%llu-lr%g-seed%llu-step%llu.safetensors", b->dir,
             (unsigned long long)params, o.lr, (unsigned long long)o.seed, (unsigned long long)b->step - 1);
    snprintf(pp->new_path, sizeof pp->new_path, "%s/p%llu-lr%g-seed%llu-step%llu.safetensors", b->dir,
             (unsigned long long)params, o.lr, (unsigned long long)o.seed, (unsigned long long)b->step);
    if (b->keep && access(pp->old_path, R_OK) == 0 && access(pp->new_path, R_OK) == 0) {
        synth_model_free(&m);
        return 0;
    }
    const char **paths = calloc((size_t)b->step + 1, sizeof *paths);
    if (!paths) {
        synth_model_free(&m);
        return pulse_fail(PULSE_ERR_NOMEM, "paths");
    }
    paths[b->step - 1] = pp->old_path;
    paths[b->step] = pp->new_path;
    double t0 = measure_now();
    err = synth_run(&m, &o, b->step, paths, NULL);
    if (!err)
        fprintf(stderr, "bench: generated %llu-param steps %llu and %llu in %.1f s\n",
                (unsigned long long)m.params, (unsigned long long)b->step - 1,
                (unsigned long long)b->step, measure_now() - t0);
    free(paths);
    synth_model_free(&m);
    return err;
}

static int diff_timed(const pulse_ckpt *a, const pulse_ckpt *b, pulse_value_code code, int threads,
                      const char *out, int repeat, int cold, double *best)
{
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.values = code;
    o.threads = threads;
    *best = 1e30;
    for (int i = 0; i < repeat; i++) {
        unlink(out);   /* a new file each time, as a diff writes one: see codec_timed */
        if (cold)
            measure_cold();
        double t0 = measure_now();
        int err = pulse_patch_diff(a, b, &o, out);
        double dt = measure_now() - t0;
        if (err < 0)
            return err;
        if (dt < *best)
            *best = dt;
    }
    return 0;
}

static int sid_timed(const pulse_ckpt *c, int threads, int cold, double *secs)
{
    uint8_t id[PULSE_STATE_ID_BYTES];
    if (cold)
        measure_cold();
    double t0 = measure_now();
    int err = pulse_ckpt_state_id(c, threads, id);
    *secs = measure_now() - t0;
    return err;
}

/* The parts of diff and apply, measured next to each other in every round so that the
 * differences between them are not skewed by the load of the machine changing in between. */
struct parts {
    double diff, diff_ids;         /* pulse_patch_diff, and the state ids of OLD and NEW */
    double diff_known, diff_known_cpu;   /* pulse_patch_diff with both ids given (wall, CPU) */
    double apply, apply_ids;       /* pulse_patch_apply, and twice the state id of the target */
    double apply_fast, apply_fast_cpu;   /* apply_ex: trusted base id, no result check */
    double verify;                 /* pulse_patch_verify: the decode-and-check pass alone */
    double floor;                  /* measure_touch_lines over the target (1-thread rounds) */
};

static void keep_min(double *best, double t)
{
    if (t < *best)
        *best = t;
}

/* One apply_ex of p to target, timed (wall and CPU) from memory when cold; the best kept. */
static int timed_apply(const pulse_patch *p, pulse_ckpt *target, const pulse_patch_apply_opts *o, int cold,
                       double *best_wall, double *best_cpu)
{
    if (cold)
        measure_cold();
    double c0 = measure_cpu_now(), t0 = measure_now();
    int err = pulse_patch_apply_ex(p, target, o);
    keep_min(best_wall, measure_now() - t0);
    keep_min(best_cpu, measure_cpu_now() - c0);
    return err;
}

/* Per round: diff OLD NEW (as the CLI: hashing both), the state ids of both, diff with the
 * ids given, apply fwd to target (in OLD's state), its state id, verify, rev back with the
 * shortcuts, fwd and rev again with the shortcuts (trusted base, no result check). Keeps the
 * diff parts of the round with the fastest diff and the apply parts of the round with the
 * fastest apply; the shortcut rows are the best of their own. */
static int codec_timed(const pulse_ckpt *old, const pulse_ckpt *new, const char *patch_path,
                       pulse_patch *fwd, pulse_patch *rev, pulse_ckpt *target, int threads, int repeat,
                       int cold, struct parts *best)
{
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.values = PULSE_VALUES_ULP;
    o.threads = threads;
    best->diff = best->apply = best->diff_known = best->diff_known_cpu = 1e30;
    best->apply_fast = best->apply_fast_cpu = best->floor = 1e30;
    uint8_t id_old[PULSE_STATE_ID_BYTES], id_new[PULSE_STATE_ID_BYTES];
    int err = pulse_ckpt_state_id(old, 0, id_old);
    if (!err)
        err = pulse_ckpt_state_id(new, 0, id_new);
    if (err < 0)
        return err;
    pulse_diff_opts known = o;
    known.old_id = id_old;
    known.new_id = id_new;
    pulse_patch_apply_opts fast_fwd, fast_rev;
    pulse_patch_apply_opts_default(&fast_fwd);
    fast_fwd.threads = threads;
    fast_fwd.skip_result_check = 1;
    fast_rev = fast_fwd;
    fast_fwd.trust_base_id = id_old;
    fast_rev.trust_base_id = id_new;
    for (int r = 0; r < repeat; r++) {
        /* Each diff writes a new file, as a trainer's does (one patch per step): renaming onto the
         * previous round's patch would also time the freeing of its blocks, ~1.1 ms per MiB on the
         * ext4 VMs measured, which is the cost of deleting a file, not of diffing. */
        unlink(patch_path);
        if (cold)
            measure_cold();
        double t0 = measure_now(), a = 0, b2 = 0, c = 0, d = 0, e = 0;
        err = pulse_patch_diff(old, new, &o, patch_path);
        double diff = measure_now() - t0;
        if (!err)
            err = sid_timed(old, threads, cold, &a);
        if (!err)
            err = sid_timed(new, threads, cold, &b2);
        if (!err) {
            unlink(patch_path);
            if (cold)
                measure_cold();
            double c0 = measure_cpu_now();
            t0 = measure_now();
            err = pulse_patch_diff(old, new, &known, patch_path);
            keep_min(&best->diff_known, measure_now() - t0);
            keep_min(&best->diff_known_cpu, measure_cpu_now() - c0);
        }
        if (!err) {
            if (cold)
                measure_cold();
            t0 = measure_now();
            err = pulse_patch_apply(fwd, target, threads);
            c = measure_now() - t0;
        }
        if (!err)
            err = sid_timed(target, threads, cold, &d);
        if (!err) {
            if (cold)
                measure_cold();
            t0 = measure_now();
            err = pulse_patch_verify(fwd, NULL, threads);
            e = measure_now() - t0;
        }
        if (!err)
            err = pulse_patch_apply_ex(rev, target, &fast_rev);
        if (!err)
            err = timed_apply(fwd, target, &fast_fwd, cold, &best->apply_fast, &best->apply_fast_cpu);
        if (!err)
            err = pulse_patch_apply_ex(rev, target, &fast_rev);
        /* The in-place floor: +1 then -1 on a byte of every line leaves the target as it was. */
        for (int sign = 1; !err && threads == 1 && sign >= -1; sign -= 2) {
            if (cold)
                measure_cold();
            t0 = measure_now();
            for (size_t i = 0; i < pulse_ckpt_count(target); i++)
                measure_touch_lines(pulse_ckpt_tensor(target, i)->data, pulse_ckpt_tensor(target, i)->nbytes, sign);
            keep_min(&best->floor, measure_now() - t0);
        }
        if (err < 0)
            return err;
        if (diff < best->diff) {
            best->diff = diff;
            best->diff_ids = a + b2;
        }
        if (c < best->apply) {
            best->apply = c;
            best->apply_ids = 2 * d;
            best->verify = e;
        }
    }
    /* The target must be back in OLD's state, bit for bit. */
    uint8_t id[PULSE_STATE_ID_BYTES];
    if ((err = pulse_ckpt_state_id(target, 0, id)) != 0)
        return err;
    if (memcmp(id, id_old, sizeof id) != 0)
        return pulse_fail(PULSE_ERR_CORRUPT, "bench target did not return to OLD's state");
    return 0;
}

/* The context-coded patch (format 5) of the same step: its diff with both ids given and its
 * apply with a trusted base and no result check, 1 thread, as the targets read the default
 * patch's; a reverse context patch takes the target back each round. */
struct ctx_parts {
    double diff_known, diff_known_cpu, apply_fast, apply_fast_cpu;
    uint64_t stream_bytes, file_bytes;
};

static int context_timed(const pulse_ckpt *old, const pulse_ckpt *new, const char *fwd_path, const char *rev_path,
                         pulse_ckpt *target, int repeat, int cold, struct ctx_parts *best)
{
    uint8_t id_old[PULSE_STATE_ID_BYTES], id_new[PULSE_STATE_ID_BYTES];
    int err = pulse_ckpt_state_id(old, 0, id_old);
    if (!err)
        err = pulse_ckpt_state_id(new, 0, id_new);
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.threads = 1;
    o.context = 1;
    pulse_diff_opts r = o;
    o.old_id = r.new_id = id_old;
    o.new_id = r.old_id = id_new;
    best->diff_known = best->diff_known_cpu = best->apply_fast = best->apply_fast_cpu = 1e30;
    if (!err)
        err = pulse_patch_diff(new, old, &r, rev_path);
    pulse_patch *fwd = NULL, *rev = NULL;
    pulse_patch_apply_opts fast_fwd, fast_rev;
    pulse_patch_apply_opts_default(&fast_fwd);
    fast_fwd.threads = 1;
    fast_fwd.skip_result_check = 1;
    fast_rev = fast_fwd;
    fast_fwd.trust_base_id = id_old;
    fast_rev.trust_base_id = id_new;
    for (int k = 0; !err && k < repeat; k++) {
        unlink(fwd_path);
        if (cold)
            measure_cold();
        double c0 = measure_cpu_now(), t0 = measure_now();
        err = pulse_patch_diff(old, new, &o, fwd_path);
        keep_min(&best->diff_known, measure_now() - t0);
        keep_min(&best->diff_known_cpu, measure_cpu_now() - c0);
        if (!err && !fwd && !(err = pulse_patch_open(&fwd, fwd_path)))
            err = pulse_patch_open(&rev, rev_path);
        if (!err)
            err = timed_apply(fwd, target, &fast_fwd, cold, &best->apply_fast, &best->apply_fast_cpu);
        if (!err)
            err = pulse_patch_apply_ex(rev, target, &fast_rev);
    }
    pulse_patch_stats st;
    if (!err && !(err = pulse_patch_info(fwd, 0, &st))) {
        best->stream_bytes = st.pos_bytes + st.val_bytes;
        best->file_bytes = st.file_bytes;
    }
    pulse_patch_close(&fwd);
    pulse_patch_close(&rev);
    unlink(rev_path);
    uint8_t id[PULSE_STATE_ID_BYTES];
    if (!err && !(err = pulse_ckpt_state_id(target, 0, id)) && memcmp(id, id_old, sizeof id) != 0)
        err = pulse_fail(PULSE_ERR_CORRUPT, "bench target did not return to OLD's state (context patches)");
    return err;
}

/* --- The memory probe (a child process per model size) ---------------------------- */

/* Peak RssAnon of one diff (format 4, or 5 with context) of a -> b to `patch`, sampled. */
static int probe_diff(const pulse_ckpt *a, const pulse_ckpt *b, int context, const char *patch, uint64_t *kb)
{
    measure_sampler *s = NULL;
    if (measure_sampler_start(&s, 500) < 0)
        return pulse_fail(PULSE_ERR_NOMEM, "sampler thread");
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.context = context;
    int err = pulse_patch_diff(a, b, &o, patch);
    *kb = measure_sampler_stop(&s);
    /* Hand the heap freed by the diff (its encoded chunks) back to the kernel, so that the
     * apply's peak is the apply's own and not what the allocator kept from the diff. */
    malloc_trim(0);
    return err;
}

/* Peak RssAnon of applying `patch` to a fresh copy of a at `target`, with the pass-1 cache
 * (as the CLI runs it) or without (what streaming by chunk needs). */
static int probe_apply(const pulse_ckpt *a, const char *patch, const char *target, int cached, uint64_t *kb)
{
    if (cached)
        unsetenv("PULSE_APPLY_CACHE");
    else
        setenv("PULSE_APPLY_CACHE", "0", 1);
    pulse_ckpt *t = NULL;
    pulse_patch *p = NULL;
    measure_sampler *s = NULL;
    int err = pulse_ckpt_create_like(&t, target, a);
    if (!err)
        err = pulse_ckpt_commit(t);
    if (!err && measure_sampler_start(&s, 500) < 0)
        err = pulse_fail(PULSE_ERR_NOMEM, "sampler thread");
    if (!err)
        err = pulse_patch_open(&p, patch);
    if (!err)
        err = pulse_patch_apply(p, t, 0);
    uint64_t peak = measure_sampler_stop(&s);
    if (!err)
        *kb = peak;
    pulse_patch_close(&p);
    pulse_ckpt_close(&t);
    unsetenv("PULSE_APPLY_CACHE");
    return err;
}

/* Prints the peak RssAnon (KiB) at start, of the diff, and of the apply with and without its
 * cache (0 with context), each after the one before it in this process; of the context-coded
 * patch (format 5) when context is set (a process of its own: the apply keeps its arena for
 * the next apply, which would count in the next diff's peak). */
static int memprobe(const char *old_path, const char *new_path, const char *dir, int context)
{
    char patch[4096], target[4096];
    snprintf(patch, sizeof patch, "%s/memprobe.patch", dir);
    snprintf(target, sizeof target, "%s/memprobe-target.safetensors", dir);
    pulse_ckpt *a = NULL, *b = NULL;
    uint64_t kb[4] = { measure_rss_anon_kb(), 0, 0, 0 };
    int err = pulse_ckpt_open(&a, old_path, PULSE_CKPT_READ);
    if (!err)
        err = pulse_ckpt_open(&b, new_path, PULSE_CKPT_READ);
    if (!err)
        err = probe_diff(a, b, context, patch, &kb[1]);
    if (!err && !context)   /* the table has no column for the context patch without its cache */
        err = probe_apply(a, patch, target, 0, &kb[3]);
    if (!err)
        err = probe_apply(a, patch, target, 1, &kb[2]);
    pulse_ckpt_close(&a);
    pulse_ckpt_close(&b);
    unlink(patch);
    unlink(target);
    if (err < 0)
        return cli_fail(VERB, err, "memprobe");
    printf("%llu %llu %llu %llu\n", (unsigned long long)kb[0], (unsigned long long)kb[1],
           (unsigned long long)kb[2], (unsigned long long)kb[3]);
    return cli_finish_stdout(VERB);
}

/* Runs the probe in a fresh process so that nothing of this one's heap counts: kb[0..4) of
 * the patch (format 4), kb[4..6) the context-coded patch's diff and apply (format 5). */
static int run_memprobe(const struct pair *pp, const char *dir, uint64_t kb[6])
{
    for (int context = 0; context < 2; context++) {
        char *argv[] = { "/proc/self/exe", "bench", "memprobe", (char *)pp->old_path, (char *)pp->new_path,
                         (char *)dir, context ? "context" : NULL, NULL };
        char out[256];
        double dt;
        int rc = measure_spawn(argv, out, sizeof out, &dt);
        unsigned long long v[4];
        if (rc != 0 || sscanf(out, "%llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3]) != 4)
            return pulse_fail(PULSE_ERR_IO, "memory probe of %s%s exited with %d", pp->new_path,
                              context ? " (context-coded)" : "", rc);
        if (context) {
            kb[4] = v[1];
            kb[5] = v[2];
        } else {
            for (int i = 0; i < 4; i++)
                kb[i] = v[i];
        }
    }
    return 0;
}

/* --- Output ------------------------------------------------------------------------ */

/* The fixed cap of apply's pass-1 cache (PATCH_CACHE_CAP in node/patch/patch_internal.h). */
#define CACHE_CAP_MIB 64u

static const char *verdict(int pass)
{
    return pass ? "PASS" : "MISS";
}

static void print_bytes_row(const char *label, int64_t bytes, uint64_t dense, double bound, double secs)
{
    if (bytes < 0) {
        printf("  %-58s %16s\n", label, bytes == -1 ? "(not installed)" : "(failed)");
        return;
    }
    printf("  %-58s %14llu  %7.3f%%  %7.2fx", label, (unsigned long long)bytes,
           100.0 * (double)bytes / (double)dense, bound > 0 ? (double)bytes / bound : 0.0);
    if (secs > 0)
        printf("  %8.2f s", secs);
    printf("\n");
}

/* Whether a derived time is within 2x of the same quantity measured directly (and > 0). */
static int plausible(double derived, double measured)
{
    return derived > 0 && measured > 0 && derived < 2 * measured && measured < 2 * derived;
}

/* A row of 1- and 2-thread times; a derived time that came out <= 0 (the machine's load
 * changed within the round) is shown as noise rather than as a number. */
static void print_time_row(const char *label, const double t[2])
{
    char a[32], b[32], sp[32] = "";
    for (int k = 0; k < 2; k++)
        snprintf(k ? b : a, 32, t[k] > 0 ? "%.1f" : "(noise)", t[k] * 1e3);
    if (t[0] > 0 && t[1] > 0)
        snprintf(sp, sizeof sp, "%8.2fx", t[0] / t[1]);
    printf("  %-58s %12s %12s %s\n", label, a, b, sp);
}

/* zstd / xdelta3: size of their output, -1 when not installed, -2 when they failed. */
static int64_t run_tool(char *const argv[], const char *out, double *secs)
{
    unlink(out);
    int rc = measure_spawn(argv, NULL, 0, secs);
    if (rc == -1 || rc == 127)
        return -1;
    if (rc != 0)
        return -2;
    int64_t n = (int64_t)file_size(out);
    unlink(out);
    return n;
}

static int bench_codec(struct bench *b)
{
    struct pair big, small;
    int err = make_pair(b, b->o.params, &big);
    if (!err)
        err = make_pair(b, b->mem_params, &small);
    if (err < 0)
        return cli_fail(VERB, err, "generating checkpoints");

    char p_ulp[4200], p_abs[4200], p_rev[4200], p_ctx[4200], p_ctx_rev[4200], target[4200], tool_out[4200];
    snprintf(p_ctx, sizeof p_ctx, "%s/new.context.patch", b->dir);
    snprintf(p_ctx_rev, sizeof p_ctx_rev, "%s/rev.context.patch", b->dir);
    snprintf(p_ulp, sizeof p_ulp, "%s/new.ulp.patch", b->dir);
    snprintf(p_abs, sizeof p_abs, "%s/new.abs.patch", b->dir);
    snprintf(p_rev, sizeof p_rev, "%s/rev.ulp.patch", b->dir);
    snprintf(target, sizeof target, "%s/target.safetensors", b->dir);
    snprintf(tool_out, sizeof tool_out, "%s/tool.out", b->dir);

    pulse_ckpt *old = NULL, *new = NULL, *tgt = NULL;
    pulse_patch *fwd = NULL, *rev = NULL;
    pulse_patch_stats st_ulp = { 0 }, st_abs = { 0 };
    pulse_patch_context cx_ulp = { 0 };   /* the step's bound with the old exponents as context */
    double t_diff[2] = { 0 }, t_apply[2] = { 0 }, t_verify[2] = { 0 }, t_abs = 0, t_memcpy = 0, t_read = 0;
    double c_memcpy = 1e30, c_read = 1e30;   /* CPU time of the baselines */
    double w_memcpy = 0;                      /* memcpy back to back, caches warm (informational) */
    /* The eviction buffer first (its pages written once): without it the runs are back to back. */
    size_t evict_bytes = b->warm ? 0 : measure_cold();
    int cold = evict_bytes > 0;
    int threads2 = 2;
    uint64_t old_bytes = file_size(big.old_path), new_bytes = file_size(big.new_path);
    uint64_t sink = 0;

    err = pulse_ckpt_open(&old, big.old_path, PULSE_CKPT_READ);
    if (!err)
        err = pulse_ckpt_open(&new, big.new_path, PULSE_CKPT_READ);

    /* Baselines first, which also brings both files into the page cache and the mappings. */
    if (!err) {
        uint8_t *src = malloc(new_bytes ? new_bytes : 1), *dst = malloc(new_bytes ? new_bytes : 1);
        int fd = open(big.new_path, O_RDONLY | O_CLOEXEC);
        size_t got = 0;
        while (fd >= 0 && src && got < new_bytes) {
            ssize_t n = pread(fd, src + got, new_bytes - got, (off_t)got);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        if (fd >= 0)
            close(fd);
        if (!src || !dst || got != new_bytes) {
            err = pulse_fail(PULSE_ERR_IO, "reading %s for the memcpy baseline", big.new_path);
        } else {
            memset(dst, 1, new_bytes);   /* fault the pages in before timing */
            /* Wall and CPU time of the same copies (on this kind of VM a copy right after a
             * run of back-to-back ones was seen faster from memory too), then back to back. */
            t_memcpy = 1e30;
            for (int r = 0; r < b->repeat + 2; r++) {
                if (cold)
                    measure_cold();
                double t0 = measure_now(), c0 = measure_cpu_now();
                memcpy(dst, src, new_bytes);
                keep_min(&c_memcpy, measure_cpu_now() - c0);
                keep_min(&t_memcpy, measure_now() - t0);
                sink += dst[r % new_bytes];
            }
            w_memcpy = measure_memcpy(dst, src, new_bytes, b->repeat + 2);
        }
        free(src);
        free(dst);
        /* The streaming read goes over the tensor data as diff sees it: the mappings. */
        double best = 1e30;
        for (int r = 0; r < b->repeat + 2 && !err; r++) {
            if (cold)
                measure_cold();
            double t = measure_now(), c0 = measure_cpu_now();
            for (size_t i = 0; i < pulse_ckpt_count(old); i++) {
                const pulse_tensor *x = pulse_ckpt_tensor(old, i), *y = pulse_ckpt_tensor(new, i);
                sink += measure_read2(x->data, x->nbytes, y->data, y->nbytes);
            }
            keep_min(&c_read, measure_cpu_now() - c0);
            t = measure_now() - t;
            if (t < best)
                best = t;
        }
        t_read = best;
    }
    uint64_t data_bytes = 0;   /* tensor bytes of one checkpoint */
    for (size_t i = 0; !err && i < pulse_ckpt_count(new); i++)
        data_bytes += pulse_ckpt_tensor(new, i)->nbytes;

    /* Untimed first: the patches the timed rounds apply, and the abs patch for its size. */
    double t_unused = 0;
    if (!err)
        err = diff_timed(old, new, PULSE_VALUES_ULP, 0, p_ulp, 1, 0, &t_unused);
    if (!err)
        err = diff_timed(new, old, PULSE_VALUES_ULP, 0, p_rev, 1, 0, &t_unused);
    if (!err)
        err = diff_timed(old, new, PULSE_VALUES_ABS, 1, p_abs, 1, cold, &t_abs);
    if (!err)
        err = pulse_patch_open(&fwd, p_ulp);
    if (!err)
        err = pulse_patch_info(fwd, 1, &st_ulp);
    if (!err)
        err = pulse_patch_context_bound(fwd, old, 0, &cx_ulp, NULL);
    if (!err) {
        pulse_patch *a = NULL;
        err = pulse_patch_open(&a, p_abs);
        if (!err)
            err = pulse_patch_info(a, 0, &st_abs);
        pulse_patch_close(&a);
    }
    if (!err)
        err = pulse_patch_open(&rev, p_rev);
    if (!err)
        err = pulse_ckpt_create_like(&tgt, target, old);
    if (!err)
        err = pulse_ckpt_commit(tgt);
    struct parts pt[2];
    if (!err) {
        fprintf(stderr, "bench: timing pulse diff and apply --in-place on 1 thread\n");
        err = codec_timed(old, new, p_ulp, fwd, rev, tgt, 1, b->repeat, cold, &pt[0]);
    }
    if (!err) {
        fprintf(stderr, "bench: timing pulse diff and apply --in-place on %d threads\n", threads2);
        err = codec_timed(old, new, p_ulp, fwd, rev, tgt, threads2, b->repeat, cold, &pt[1]);
    }
    struct ctx_parts cp = { 0 };
    if (!err) {
        fprintf(stderr, "bench: timing the context-coded patch (format 5) on 1 thread\n");
        err = context_timed(old, new, p_ctx, p_ctx_rev, tgt, b->repeat, cold, &cp);
    }
    for (int k = 0; k < 2 && !err; k++) {
        t_diff[k] = pt[k].diff;
        t_apply[k] = pt[k].apply;
        t_verify[k] = pt[k].verify;
    }
    pulse_ckpt_close(&tgt);
    pulse_patch_close(&fwd);
    pulse_patch_close(&rev);
    pulse_ckpt_close(&old);
    pulse_ckpt_close(&new);
    unlink(target);
    unlink(p_rev);
    if (err < 0)
        return cli_fail(VERB, err, "pulse codec");

    uint64_t mem_small[6] = { 0 }, mem_big[6] = { 0 };
    fprintf(stderr, "bench: peak anonymous memory at two model sizes\n");
    if ((err = run_memprobe(&small, b->dir, mem_small)) < 0 || (err = run_memprobe(&big, b->dir, mem_big)) < 0)
        return cli_fail(VERB, err, "memory probe");

    /* External tools, with the flags they need to see all of OLD: zstd's window must cover
     * OLD for --patch-from (--long=log2), xdelta3's source window likewise (-B, max 2 GiB). */
    fprintf(stderr, "bench: running zstd and xdelta3\n");
    unsigned wlog = 10;
    while (wlog < 31 && (1ull << wlog) < old_bytes)
        wlog++;
    uint64_t xb = 1ull << 20;
    while (xb < old_bytes && xb < (1ull << 31))
        xb <<= 1;
    char long_opt[32], patch_from[4200], xb_opt[32];
    snprintf(long_opt, sizeof long_opt, "--long=%u", wlog);
    snprintf(patch_from, sizeof patch_from, "--patch-from=%s", big.old_path);
    snprintf(xb_opt, sizeof xb_opt, "%llu", (unsigned long long)xb);
    char *zstd3[] = { "zstd", "-3", "-q", "-f", big.new_path, "-o", tool_out, NULL };
    char *zpatch[] = { "zstd", "-3", "-q", "-f", long_opt, patch_from, big.new_path, "-o", tool_out, NULL };
    char *xd[] = { "xdelta3", "-e", "-f", "-B", xb_opt, "-s", big.old_path, big.new_path, tool_out, NULL };
    double s_z = 0, s_zp = 0, s_xd = 0;
    int64_t b_z = run_tool(zstd3, tool_out, &s_z);
    int64_t b_zp = run_tool(zpatch, tool_out, &s_zp);
    int64_t b_xd = run_tool(xd, tool_out, &s_xd);

    double bound = st_ulp.entropy_bits / 8.0;
    double gbs = 1e-9;
    double rw = (double)(old_bytes + new_bytes);   /* what a diff has to read */
    printf("pulse bench codec: %llu params (BF16 %.1f MB per checkpoint), step %llu -> %llu of Adam at lr %g, seed %llu\n",
           (unsigned long long)big.params, (double)new_bytes / 1e6, (unsigned long long)b->step - 1,
           (unsigned long long)b->step, b->o.lr, (unsigned long long)b->o.seed);
    printf("changed: %llu of %llu BF16 values (%.3f%%); %d CPUs online; best of %d runs, files in the page cache\n",
           (unsigned long long)st_ulp.changes, (unsigned long long)st_ulp.nelems,
           100.0 * (double)st_ulp.changes / (double)st_ulp.nelems, pulse_default_threads(), b->repeat);
    if (cold)
        printf("each timed run starts from memory: %.0f MiB read before it (the last-level cache: %.0f MiB)\n\n",
               (double)evict_bytes / 1048576.0, (double)measure_llc_bytes() / 1048576.0);
    else
        printf("%s: timed runs back to back, what the cache keeps of the previous run counts\n\n",
               b->warm ? "--warm" : "no memory for the eviction buffer");

    printf("  %-58s %14s  %8s  %8s  %10s\n", "bytes", "bytes", "% dense", "x bound", "time");
    print_bytes_row("dense (NEW file)", (int64_t)new_bytes, new_bytes, bound, 0);
    print_bytes_row("zstd -3 NEW", b_z, new_bytes, bound, s_z);
    char label[128], cap[24];
    snprintf(label, sizeof label, "zstd -3 %s --patch-from=OLD NEW", long_opt);
    print_bytes_row(label, b_zp, new_bytes, bound, s_zp);
    snprintf(label, sizeof label, "xdelta3 -e -B %s -s OLD NEW", xb_opt);
    print_bytes_row(label, b_xd, new_bytes, bound, s_xd);
    print_bytes_row("pulse diff --values abs (1 thread)", (int64_t)st_abs.file_bytes, new_bytes, bound, t_abs);
    print_bytes_row("pulse diff --values ulp (1 thread)", (int64_t)st_ulp.file_bytes, new_bytes, bound, t_diff[0]);
    print_bytes_row("pulse diff --context (1 thread, state ids given)", (int64_t)cp.file_bytes, new_bytes, bound,
                    cp.diff_known);
    printf("  %-58s %14.0f  %7.3f%%  %7.2fx\n", "order-0 entropy bound of the ulp symbols (gaps+values)",
           bound, 100.0 * bound / (double)new_bytes, 1.0);

    /* pulse_patch_apply = state id of the base + a pass that decodes and checks every chunk
     * + a pass that decodes and writes + state id of the result. The library has no switch
     * to leave the ids out, so those rows are the measured total minus the measured parts. */
    double diff_ex[2] = { t_diff[0] - pt[0].diff_ids, t_diff[1] - pt[1].diff_ids };
    double apply_ex[2] = { t_apply[0] - pt[0].apply_ids, t_apply[1] - pt[1].apply_ids };
    double scatter[2] = { apply_ex[0] - t_verify[0], apply_ex[1] - t_verify[1] };
    printf("\n  %-58s %12s %12s %9s\n", "times (ms; GB/s over the bytes named)", "1 thread", "2 threads", "speedup");
    print_time_row("pulse diff (ulp), incl. both state ids", t_diff);
    printf("  %-58s %12.2f %12.2f\n", "  GB/s over OLD+NEW", rw * gbs / t_diff[0], rw * gbs / t_diff[1]);
    print_time_row("  state ids of OLD and NEW (measured in the same round)", (double[2]){ pt[0].diff_ids, pt[1].diff_ids });
    print_time_row("  diff excl. the state ids (derived)", diff_ex);
    print_time_row("pulse diff (ulp), both state ids given (opts old_id/new_id)",
                   (double[2]){ pt[0].diff_known, pt[1].diff_known });
    printf("  %-58s %12.1f %12s   (%.2f GB/s over OLD+NEW)\n", "  same, CPU time of the 1-thread run",
           pt[0].diff_known_cpu * 1e3, "", rw * gbs / pt[0].diff_known_cpu);
    print_time_row("pulse apply --in-place, incl. base+result state ids", t_apply);
    print_time_row("pulse apply, trusted base id, no result check (apply_ex)",
                   (double[2]){ pt[0].apply_fast, pt[1].apply_fast });
    printf("  %-58s %12.1f\n", "  same, CPU time of the 1-thread run", pt[0].apply_fast_cpu * 1e3);
    print_time_row("  2 x state id of the target (same round)", (double[2]){ pt[0].apply_ids, pt[1].apply_ids });
    print_time_row("  apply excl. the state ids (derived)", apply_ex);
    print_time_row("    of which the check pass (pulse_patch_verify)", t_verify);
    print_time_row("    of which the write pass (decode+scatter, derived)", scatter);
    printf("  %-58s %12.1f %12s   (%.2f GB/s)\n", "in-place floor: a byte of every target line read+written",
           pt[0].floor * 1e3, "", (double)data_bytes * gbs / pt[0].floor);
    printf("  %-58s %12.1f %12s   (%.2f GB/s)\n", "memcpy of the checkpoint file bytes", t_memcpy * 1e3, "",
           (double)new_bytes * gbs / t_memcpy);
    printf("  %-58s %12.1f %12s   (%.2f GB/s)\n", "  same, CPU time", c_memcpy * 1e3, "",
           (double)new_bytes * gbs / c_memcpy);
    if (cold)
        printf("  %-58s %12.1f %12s   (%.2f GB/s)\n", "  same, back to back (caches warm; informational)",
               w_memcpy * 1e3, "", (double)new_bytes * gbs / w_memcpy);
    printf("  %-58s %12.1f %12s   (%.2f GB/s)\n", "streaming read of OLD+NEW tensor data, side by side",
           t_read * 1e3, "", 2.0 * (double)data_bytes * gbs / t_read);
    printf("  %-58s %12.1f %12s   (%.2f GB/s)\n", "  same, CPU time", c_read * 1e3, "",
           2.0 * (double)data_bytes * gbs / c_read);
    printf("\n  %-46s %10s %10s %10s %10s %10s %10s\n", "peak anonymous memory (RssAnon, MiB)", "at start",
           "diff", "apply", "no cache", "ctx diff", "ctx apply");
    const struct pair *probed[2] = { &small, &big };
    const uint64_t *mem_of[2] = { mem_small, mem_big };
    for (int i = 0; i < 2; i++) {
        snprintf(label, sizeof label, "%llu params", (unsigned long long)probed[i]->params);
        printf("  %-46s", label);
        for (int j = 0; j < 6; j++)
            printf(" %10.1f", mem_of[i][j] / 1024.0);
        printf("\n");
    }
    printf("  (apply's pass-1 cache holds decompressed chunk streams, or a context-coded chunk's\n"
           "   decoded changes, up to a fixed cap of %u MiB; \"no cache\" is the same apply with\n"
           "   PULSE_APPLY_CACHE=0; \"ctx\": the context-coded patch, --context, format 5)\n", CACHE_CAP_MIB);

    double read_bw = 2.0 * (double)data_bytes / t_read;
    double r_bound = (double)st_ulp.file_bytes / bound;
    double r_xd = b_xd > 0 ? (double)st_ulp.file_bytes / (double)b_xd : NAN;
    double r_diff = rw / t_diff[0] / read_bw, r_diff_ex = rw / diff_ex[0] / read_bw;
    double r_apply = apply_ex[0] / t_memcpy, r_apply_full = t_apply[0] / t_memcpy;
    double r_scatter = scatter[0] / t_memcpy;
    double sp_diff = t_diff[0] / t_diff[1], sp_apply = t_apply[0] / t_apply[1];
    double read_bw_cpu = 2.0 * (double)data_bytes / c_read;
    double r_known = rw / pt[0].diff_known / read_bw, r_known_cpu = rw / pt[0].diff_known_cpu / read_bw_cpu;
    double r_fast = pt[0].apply_fast / t_memcpy, r_fast_cpu = pt[0].apply_fast_cpu / c_memcpy;
    double sp_known = pt[0].diff_known / pt[1].diff_known, sp_fast = pt[0].apply_fast / pt[1].apply_fast;
    /* "Independent of model size": the larger model may not need more than 25% (+2 MiB of
     * sampling noise) over what the smaller one needed, for the diff and the apply without
     * its cache; the cache adds at most its fixed cap, whatever the model. */
    int mem_ok = mem_big[1] <= mem_small[1] * 5 / 4 + 2048 && mem_big[3] <= mem_small[3] * 5 / 4 + 2048
                 && mem_big[2] <= mem_big[3] + CACHE_CAP_MIB * 1024u + 2048;
    /* The context-coded patch's likewise: its diff flat, its apply at most the cache's cap
     * (the decoded changes it holds) above the smaller model's. */
    int ctx_mem_ok = mem_big[4] <= mem_small[4] * 5 / 4 + 2048
                     && mem_big[5] <= mem_small[5] * 5 / 4 + CACHE_CAP_MIB * 1024u + 2048;
    printf("\n  %-58s %12s %12s %6s\n", "targets (docs/performance.md)", "measured", "target", "");
    printf("  %-58s %12.3f %12s %6s\n", "ulp patch bytes / entropy bound", r_bound, "<= 1.10", verdict(r_bound <= 1.10));
    /* What a next format could reach: the coded streams against the order-0 floor, and the
     * bound with each old value's exponent as context against it (`pulse inspect --base`). */
    double floor0 = cx_ulp.gap_bits + cx_ulp.ulp_bits;
    printf("  %-58s %12.3f %12s %6s\n", "patch / order-0 floor (position + value streams)",
           floor0 > 0 ? 8.0 * (double)(cx_ulp.pos_bytes + cx_ulp.val_bytes) / floor0 : NAN, "", "info");
    printf("  %-58s %12.3f %12s %6s\n", "context bound / order-0 floor (old exponents as context)",
           floor0 > 0 ? (cx_ulp.flag_bits + cx_ulp.ulp_ctx_bits) / floor0 : NAN, "", "info");
    double r_ctx = floor0 > 0 ? 8.0 * (double)cp.stream_bytes / floor0 : NAN;
    printf("  %-58s %12.3f %12s %6s\n", "context-coded patch (--context) / order-0 floor", r_ctx, "<= 0.75",
           verdict(r_ctx <= 0.75));
    double r_ctx_diff = rw / cp.diff_known / read_bw, r_ctx_apply = cp.apply_fast / t_memcpy;
    printf("  %-58s %12.3f %12s %6s\n", "  its diff 1-thread GB/s / streaming-read GB/s, ids given", r_ctx_diff,
           ">= 0.50", verdict(r_ctx_diff >= 0.5));
    printf("  %-58s %12.3f %12s %6s\n", "    same, CPU time vs CPU time", rw / cp.diff_known_cpu / read_bw_cpu,
           ">= 0.50", verdict(rw / cp.diff_known_cpu / read_bw_cpu >= 0.5));
    printf("  %-58s %12.3f %12s %6s\n", "  its apply 1-thread, trusted base, no result check / memcpy", r_ctx_apply,
           "<= 1.50", verdict(r_ctx_apply <= 1.5));
    printf("  %-58s %12.3f %12s %6s\n", "    same, CPU time vs CPU time", cp.apply_fast_cpu / c_memcpy, "<= 1.50",
           verdict(cp.apply_fast_cpu / c_memcpy <= 1.5));
    if (b_xd > 0)
        printf("  %-58s %12.3f %12s %6s\n", "ulp patch bytes / xdelta3 bytes", r_xd, "<= 0.25", verdict(r_xd <= 0.25));
    else
        printf("  %-58s %12s %12s %6s\n", "ulp patch bytes / xdelta3 bytes", "-", "<= 0.25", "n/a");
    /* The diff and apply targets are about the codec, so they are read with the state ids known,
     * as a node runs them (docs/performance.md, "How the diff and apply targets are read"); the
     * CLI forms, which also hash whole checkpoints with SHA-256, are shown without a verdict. */
    printf("  %-58s %12.3f %12s %6s\n", "diff 1-thread GB/s / streaming-read GB/s, state ids given", r_known,
           ">= 0.50", verdict(r_known >= 0.5));
    printf("  %-58s %12.3f %12s %6s\n", "  same, CPU time vs CPU time", r_known_cpu, ">= 0.50",
           verdict(r_known_cpu >= 0.5));
    /* A derived time is a difference of two measured ones; where it lands far (over 2x) from the
     * same quantity measured directly, the load changed within the round: no verdict. */
    printf("  %-58s %12.3f %12s %6s\n", "  same, the CLI form minus its state ids (derived)", r_diff_ex, ">= 0.50",
           plausible(diff_ex[0], pt[0].diff_known) ? verdict(r_diff_ex >= 0.5) : "noise");
    printf("  %-58s %12.3f %12s %6s\n", "  the CLI form, hashing both checkpoints (informational)", r_diff, "", "info");
    printf("  %-58s %12.3f %12s %6s\n", "apply 1-thread, trusted base, no result check / memcpy", r_fast, "<= 1.50",
           verdict(r_fast <= 1.5));
    printf("  %-58s %12.3f %12s %6s\n", "  same, CPU time vs CPU time", r_fast_cpu, "<= 1.50",
           verdict(r_fast_cpu <= 1.5));
    printf("  %-58s %12.3f %12s %6s\n", "  apply 1-thread time excl. state ids (derived) / memcpy", r_apply, "<= 1.50",
           plausible(apply_ex[0], pt[0].apply_fast) ? verdict(r_apply <= 1.5) : "noise");
    printf("  %-58s %12.3f %12s %6s\n", "  same, the write pass alone (derived)", r_scatter, "<= 1.50",
           plausible(apply_ex[0], pt[0].apply_fast) && r_scatter > 0 ? verdict(r_scatter <= 1.5) : "noise");
    printf("  %-58s %12.3f %12s %6s\n", "  the CLI form, hashing the target twice (informational)", r_apply_full,
           "", "info");
    printf("  %-58s %12.3f %12s %6s\n", "  apply / (in-place floor + check pass) (informational)",
           pt[0].apply_fast / (pt[0].floor + t_verify[0]), "", "info");
    printf("  %-58s %12.2f %12s %6s\n", "diff speedup 2 threads vs 1", sp_diff, ">= 1.70", verdict(sp_diff >= 1.7));
    printf("  %-58s %12.2f %12s %6s\n", "  same, state ids given", sp_known, ">= 1.70", verdict(sp_known >= 1.7));
    printf("  %-58s %12.2f %12s %6s\n", "apply speedup 2 threads vs 1", sp_apply, ">= 1.70", verdict(sp_apply >= 1.7));
    printf("  %-58s %12.2f %12s %6s\n", "  same, trusted base, no result check", sp_fast, ">= 1.70",
           verdict(sp_fast >= 1.7));
    snprintf(label, sizeof label, "peak anon MiB, diff/apply/no cache, %.1fM (%.1fM: %.0f/%.0f/%.0f)",
             (double)big.params / 1e6, (double)small.params / 1e6, mem_small[1] / 1024.0,
             mem_small[2] / 1024.0, mem_small[3] / 1024.0);
    char mem[40];
    snprintf(mem, sizeof mem, "%.0f/%.0f/%.0f", mem_big[1] / 1024.0, mem_big[2] / 1024.0, mem_big[3] / 1024.0);
    snprintf(cap, sizeof cap, "flat+%uM", CACHE_CAP_MIB);
    printf("  %-58s %12s %12s %6s\n", label, mem, cap, verdict(mem_ok));
    snprintf(label, sizeof label, "  same, context-coded diff/apply, %.1fM (%.1fM: %.0f/%.0f)",
             (double)big.params / 1e6, (double)small.params / 1e6, mem_small[4] / 1024.0, mem_small[5] / 1024.0);
    snprintf(mem, sizeof mem, "%.0f/%.0f", mem_big[4] / 1024.0, mem_big[5] / 1024.0);
    printf("  %-58s %12s %12s %6s\n", label, mem, cap, verdict(ctx_mem_ok));
    printf("\nThe diff and apply targets are read with the state ids known, as a node runs them; the CLI\n"
           "forms also compute state ids (SHA-256 over whole checkpoints) and are shown for information.\n"
           "Rows marked derived are differences of measured times. Timings on a shared machine are noisy:\n"
           "compare the ratios within one run.\n");
    if (!b->keep) {
        unlink(p_ulp);
        unlink(p_abs);
        unlink(p_ctx);
    }
    if (sink == 42)   /* keeps the streaming read's sum alive */
        fprintf(stderr, "bench: (checksum %llu)\n", (unsigned long long)sink);
    return cli_finish_stdout(VERB);
}

static void remove_generated(const struct bench *b)
{
    /* Only the files this run made, then the (then empty) temporary directory. */
    char path[4200];
    static const char *const names[] = { "new.ulp.patch", "new.abs.patch", "rev.ulp.patch",
                                         "target.safetensors", "tool.out", "memprobe.patch",
                                         "memprobe-target.safetensors" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", b->dir, names[i]);
        unlink(path);
    }
    uint64_t sizes[2] = { b->o.params, b->mem_params };
    for (int s = 0; s < 2; s++)
        for (uint64_t k = b->step - 1; k <= b->step; k++) {
            snprintf(path, sizeof path, "%s/p%llu-lr%g-seed%llu-step%llu.safetensors", b->dir,
                     (unsigned long long)sizes[s], b->o.lr, (unsigned long long)b->o.seed,
                     (unsigned long long)k);
            unlink(path);
        }
    rmdir(b->dir);
}

int cmd_bench(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return cli_finish_stdout(VERB);
    }
    if (argc < 2)
        return cli_usage_error(VERB, "which benchmark? (codec)");
    if (!strcmp(argv[1], "memprobe")) {
        if (argc != 5 && !(argc == 6 && !strcmp(argv[5], "context")))
            return cli_usage_error(VERB, "memprobe needs OLD NEW DIR [context]");
        return memprobe(argv[2], argv[3], argv[4], argc == 6);
    }
    if (strcmp(argv[1], "codec"))
        return cli_usage_error(VERB, "unknown benchmark '%s' (codec)", argv[1]);

    struct bench b = { .step = 5, .repeat = 3, .mem_params = 25000000u };
    synth_opts_default(&b.o);
    const char *v;
    int mem_given = 0;
    for (int i = 2; i < argc; i++) {
        int r;
        uint64_t n;
        if ((r = synth_arg(argc, argv, &i, "--params", &v)) != 0) {
            if (r < 0 || synth_parse_count(v, &b.o.params) < 0)
                return cli_usage_error(VERB, "--params needs a size such as 100M or 1B");
        } else if ((r = synth_arg(argc, argv, &i, "--mem-params", &v)) != 0) {
            if (r < 0 || synth_parse_count(v, &b.mem_params) < 0)
                return cli_usage_error(VERB, "--mem-params needs a size such as 25M");
            mem_given = 1;
        } else if ((r = synth_arg(argc, argv, &i, "--lr", &v)) != 0) {
            if (r < 0 || synth_parse_positive(v, 1.0, &b.o.lr) < 0)
                return cli_usage_error(VERB, "--lr needs a number in (0, 1]");
        } else if ((r = synth_arg(argc, argv, &i, "--seed", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &b.o.seed) < 0)
                return cli_usage_error(VERB, "--seed needs a non-negative integer");
        } else if ((r = synth_arg(argc, argv, &i, "--step", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &b.step) < 0 || b.step < 1 || b.step > 1000)
                return cli_usage_error(VERB, "--step needs a step 1..1000");
        } else if ((r = synth_arg(argc, argv, &i, "--repeat", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &n) < 0 || n < 1 || n > 100)
                return cli_usage_error(VERB, "--repeat needs a count 1..100");
            b.repeat = (int)n;
        } else if (!strcmp(argv[i], "--warm")) {
            b.warm = 1;
        } else if ((r = synth_arg(argc, argv, &i, "--keep", &v)) != 0) {
            if (r < 0 || !*v)
                return cli_usage_error(VERB, "--keep needs a directory");
            b.dir = v;
            b.keep = 1;
        } else {
            return cli_usage_error(VERB, "unknown argument '%s'", argv[i]);
        }
    }
    if (!mem_given)
        b.mem_params = b.o.params / 4 > SYNTH_MIN_PARAMS ? b.o.params / 4 : SYNTH_MIN_PARAMS;
    static char tmp[4096];
    if (b.keep) {
        if (mkdir(b.dir, 0777) != 0 && errno != EEXIST)
            return cli_fail(VERB, pulse_fail_errno(PULSE_ERR_IO, "mkdir %s", b.dir), "--keep directory");
    } else {
        const char *td = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/pulse-bench-XXXXXX", td && *td ? td : "/tmp");
        if (!mkdtemp(tmp))
            return cli_fail(VERB, pulse_fail_errno(PULSE_ERR_IO, "mkdtemp %s", tmp), "work directory");
        b.dir = tmp;
    }
    int rc = bench_codec(&b);
    if (!b.keep)
        remove_generated(&b);
    return rc;
}
