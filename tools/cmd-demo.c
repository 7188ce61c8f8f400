/* SPDX-License-Identifier: Apache-2.0 */
/* pulse demo: a synthetic trajectory, diffed step by step and replayed in place onto a copy of step 0. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fail.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/patch.h"
#include "tools/cli.h"
#include "tools/synth/args.h"
#include "tools/synth/synth.h"
#include "tools/verbs.h"

static const char usage[] =
    "usage: pulse demo [--dir DIR] [--params 20M] [--steps 5] [--seed S] [--threads N]\n"
    "\n"
    "Generates a small synthetic RL trajectory (pulse synth), writes the ulp patch between each\n"
    "pair of consecutive checkpoints (pulse diff), applies each patch in place to a copy of step 0\n"
    "(pulse apply --in-place) and checks that the copy's state id equals the real next\n"
    "checkpoint's (pulse hash) and its bytes are the same. Prints per step what moved and how\n"
    "long it took. Exits 1 if any step is not bit-identical. Without --dir it works in a\n"
    "temporary directory that it removes; with --dir the files are kept there.\n";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct demo {
    synth_model m;
    synth_opts o;
    uint64_t steps;
    const char *dir;
    char **paths;        /* step-k.safetensors, k = 0..steps */
    uint64_t *changed;
};

/* Tensor data equal byte for byte (the state ids say so too; this does not rely on them). */
static int same_bytes(const pulse_ckpt *a, const pulse_ckpt *b)
{
    if (pulse_ckpt_count(a) != pulse_ckpt_count(b))
        return 0;
    for (size_t i = 0; i < pulse_ckpt_count(a); i++) {
        const pulse_tensor *x = pulse_ckpt_tensor(a, i), *y = pulse_ckpt_tensor(b, i);
        if (strcmp(x->name, y->name) || x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes))
            return 0;
    }
    return 1;
}

/* One step: diff k-1 -> k, apply to the replica, compare with the real step k. */
static int demo_step(struct demo *d, uint64_t k, pulse_ckpt *replica, int *identical,
                     uint64_t *dense_sum, uint64_t *patch_sum)
{
    pulse_ckpt *old = NULL, *new = NULL;
    pulse_patch *p = NULL;
    char patch_path[4096];
    snprintf(patch_path, sizeof patch_path, "%s/step-%06llu.patch", d->dir, (unsigned long long)k);
    int err = pulse_ckpt_open(&old, d->paths[k - 1], PULSE_CKPT_READ);
    if (!err)
        err = pulse_ckpt_open(&new, d->paths[k], PULSE_CKPT_READ);
    pulse_diff_opts dopt;
    pulse_diff_opts_default(&dopt);
    dopt.values = PULSE_VALUES_ULP;
    dopt.threads = d->o.threads;
    double t0 = now_s(), t_diff = 0, t_apply = 0;
    if (!err)
        err = pulse_patch_diff(old, new, &dopt, patch_path);
    t_diff = now_s() - t0;
    if (!err)
        err = pulse_patch_open(&p, patch_path);
    pulse_patch_stats st;
    if (!err)
        err = pulse_patch_info(p, 0, &st);
    if (!err) {
        t0 = now_s();
        err = pulse_patch_apply(p, replica, d->o.threads);
        t_apply = now_s() - t0;
    }
    uint8_t got[PULSE_STATE_ID_BYTES], want[PULSE_STATE_ID_BYTES];
    if (!err)
        err = pulse_ckpt_state_id(replica, d->o.threads, got);
    if (!err)
        err = pulse_ckpt_state_id(new, d->o.threads, want);
    if (!err) {
        struct stat sb;
        uint64_t dense = stat(d->paths[k], &sb) == 0 ? (uint64_t)sb.st_size : st.dense_bytes;
        *identical = !memcmp(got, want, sizeof got) && same_bytes(replica, new);
        *dense_sum += dense;
        *patch_sum += st.file_bytes;
        printf("step %llu: %6.3f%% BF16 changed, dense %8.2f MB, patch %7.3f MB (ulp), %6.1fx smaller, "
               "diff %7.1f ms, apply %7.1f ms, bit-identical: %s\n",
               (unsigned long long)k, 100.0 * (double)st.changes / (double)st.nelems, (double)dense / 1e6,
               (double)st.file_bytes / 1e6, (double)dense / (double)st.file_bytes, t_diff * 1e3,
               t_apply * 1e3, *identical ? "yes" : "NO");
        fflush(stdout);
    }
    pulse_patch_close(&p);
    pulse_ckpt_close(&old);
    pulse_ckpt_close(&new);
    return err;
}

static void remove_tree(struct demo *d, const char *replica)
{
    char path[4096];
    for (uint64_t k = 0; k <= d->steps; k++) {
        if (d->paths[k])
            unlink(d->paths[k]);
        snprintf(path, sizeof path, "%s/step-%06llu.patch", d->dir, (unsigned long long)k);
        unlink(path);
    }
    if (replica)
        unlink(replica);
    rmdir(d->dir);
}

int cmd_demo(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return cli_finish_stdout("demo");
    }
    struct demo d = { .steps = 5 };
    synth_opts_default(&d.o);
    d.o.params = 20000000u;
    const char *v;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = synth_arg(argc, argv, &i, "--dir", &v)) != 0) {
            if (r < 0 || !*v)
                return cli_usage_error("demo", "--dir needs a directory");
            d.dir = v;
        } else if ((r = synth_arg(argc, argv, &i, "--steps", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &d.steps) < 0 || d.steps < 1 || d.steps > 1000)
                return cli_usage_error("demo", "--steps needs a count 1..1000");
        } else if ((r = synth_arg(argc, argv, &i, "--params", &v)) != 0) {
            if (r < 0 || synth_parse_count(v, &d.o.params) < 0)
                return cli_usage_error("demo", "--params needs a size such as 1M or 20M");
        } else if ((r = synth_arg(argc, argv, &i, "--seed", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &d.o.seed) < 0)
                return cli_usage_error("demo", "--seed needs a non-negative integer");
        } else if ((r = synth_arg(argc, argv, &i, "--threads", &v)) != 0) {
            if (r < 0 || synth_parse_threads(v, &d.o.threads) < 0)
                return cli_usage_error("demo", "--threads needs a count 0..256 (0 = all cores)");
        } else {
            return cli_usage_error("demo", "unknown argument '%s'", argv[i]);
        }
    }
    int err = synth_model_init(&d.m, &d.o);
    if (err < 0)
        return cli_fail("demo", err, "model");

    char tmpl[] = "/tmp/pulse-demo-XXXXXX";
    int keep = d.dir != NULL;
    if (!keep) {
        const char *tmpdir = getenv("TMPDIR");
        static char buf[4096];
        snprintf(buf, sizeof buf, "%s/pulse-demo-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
        d.dir = mkdtemp(buf) ? buf : mkdtemp(tmpl);
        if (!d.dir) {
            synth_model_free(&d.m);
            return cli_fail("demo", pulse_fail_errno(PULSE_ERR_IO, "mkdtemp"), "work directory");
        }
    } else if (mkdir(d.dir, 0777) != 0 && errno != EEXIST) {
        synth_model_free(&d.m);
        return cli_fail("demo", pulse_fail_errno(PULSE_ERR_IO, "mkdir %s", d.dir), "work directory");
    }
    size_t plen = strlen(d.dir) + 40;
    d.paths = calloc((size_t)d.steps + 1, sizeof *d.paths);
    d.changed = calloc((size_t)d.steps + 1, sizeof *d.changed);
    char *replica_path = malloc(plen);
    if (!d.paths || !d.changed || !replica_path)
        err = pulse_fail(PULSE_ERR_NOMEM, "demo tables");
    for (uint64_t k = 0; k <= d.steps && !err; k++)
        if (!(d.paths[k] = malloc(plen)) || synth_step_path(d.paths[k], plen, d.dir, k) < 0)
            err = pulse_fail(PULSE_ERR_NOMEM, "demo paths");
    if (!err)
        snprintf(replica_path, plen, "%s/replica.safetensors", d.dir);

    int rc = 0, all_identical = 1;
    uint64_t dense_sum = 0, patch_sum = 0;
    pulse_ckpt *step0 = NULL, *replica = NULL;
    if (!err) {
        printf("pulse demo: Llama-shaped model, %llu params (%u layers, hidden %u), %llu steps of Adam at lr %g, in %s\n",
               (unsigned long long)d.m.params, d.m.layers, d.m.hidden, (unsigned long long)d.steps,
               d.o.lr, d.dir);
        fflush(stdout);
        double t0 = now_s();
        err = synth_run(&d.m, &d.o, d.steps, (const char *const *)d.paths, d.changed);
        if (!err)
            printf("trainer: wrote %llu BF16 checkpoints in %.2f s\n", (unsigned long long)d.steps + 1,
                   now_s() - t0);
    }
    /* The replica: a byte copy of step 0 that every patch is then applied to, in place. */
    if (!err)
        err = pulse_ckpt_open(&step0, d.paths[0], PULSE_CKPT_READ);
    if (!err)
        err = pulse_ckpt_create_like(&replica, replica_path, step0);
    if (!err)
        err = pulse_ckpt_commit(replica);
    pulse_ckpt_close(&step0);
    for (uint64_t k = 1; k <= d.steps && !err; k++) {
        int identical = 0;
        err = demo_step(&d, k, replica, &identical, &dense_sum, &patch_sum);
        if (!err && !identical)
            all_identical = 0;
    }
    pulse_ckpt_close(&replica);
    if (!err) {
        printf("total: %.2f MB of dense checkpoints sent as %.3f MB of patches (%.1fx smaller); %s\n",
               (double)dense_sum / 1e6, (double)patch_sum / 1e6,
               patch_sum ? (double)dense_sum / (double)patch_sum : 0.0,
               all_identical ? "every step bit-identical" : "SOME STEPS DIFFER");
        if (keep)
            printf("files kept in %s\n", d.dir);
        rc = cli_finish_stdout("demo");
        if (!all_identical) {
            fprintf(stderr, "pulse demo: a replayed checkpoint differs from the real one\n");
            rc = 1;
        }
    } else {
        rc = cli_fail("demo", err, "demo");
    }
    if (!keep && d.paths)
        remove_tree(&d, replica_path);
    if (d.paths)
        for (uint64_t k = 0; k <= d.steps; k++)
            free(d.paths[k]);
    free(d.paths);
    free(d.changed);
    free(replica_path);
    synth_model_free(&d.m);
    return rc;
}
