/* SPDX-License-Identifier: Apache-2.0 */
/* pulse synth: write a synthetic RL trajectory of BF16 (or FP16) checkpoints (step-000000 ... step-N). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/clock.h"
#include "base/fail.h"
#include "tools/cli.h"
#include "tools/synth/args.h"
#include "tools/synth/synth.h"
#include "tools/verbs.h"

static const char usage[] =
    "usage: pulse synth --out DIR --steps N [--params 100M | --from CKPT] [--lr 3e-6] [--seed S]\n"
    "                  [--spread B] [--view bf16|fp16] [--threads N]\n"
    "\n"
    "Trains a Llama-shaped model of about --params weights (K/M/B = 10^3/10^6/10^9) with Adam\n"
    "(beta 0.9/0.999, eps 1e-8) on step-to-step correlated synthetic gradients, FP32 master\n"
    "weights, and writes the BF16 view (round to nearest even) after every step:\n"
    "DIR/step-000000.safetensors (initial weights) ... DIR/step-<N>.safetensors.\n"
    "Prints per step the fraction of view values that changed. The output depends only on\n"
    "--params, --lr, --seed (default 1), --spread and --view, never on --threads (default 0 =\n"
    "all cores). --view fp16 writes F16 tensors instead (the same trainer, rounded to FP16 as a\n"
    "fleet that serves FP16 would; default bf16).\n"
    "--spread B draws each matrix's initial magnitudes log-uniform over B binades below its\n"
    "1/sqrt(fan_in) scale, with random signs, as trained vision and conv models spread them\n"
    "(default 0: normal, Llama-like); it is the wide-magnitude case of docs/performance.md.\n"
    "--from CKPT starts from a real checkpoint instead (a .safetensors file, an index or a\n"
    "directory): its F32, BF16 and F16 tensors with their shapes and values are the weights the\n"
    "trainer moves (other dtypes are left out), so a step shows how real weights change.\n";

int cmd_synth(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return cli_finish_stdout("synth");
    }
    synth_opts o;
    synth_opts_default(&o);
    const char *out = NULL, *from = NULL, *v;
    int have_params = 0;
    uint64_t steps = 0;
    int have_steps = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = synth_arg(argc, argv, &i, "--out", &v)) != 0) {
            if (r < 0 || !*v)
                return cli_usage_error("synth", "--out needs a directory");
            if (cli_out_not_stdout("synth", "--out", v))
                return 2;
            out = v;
        } else if ((r = synth_arg(argc, argv, &i, "--steps", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &steps) < 0 || steps > SYNTH_MAX_STEPS)
                return cli_usage_error("synth", "--steps needs a count of at most %u", SYNTH_MAX_STEPS);
            have_steps = 1;
        } else if ((r = synth_arg(argc, argv, &i, "--params", &v)) != 0) {
            if (r < 0 || synth_parse_count(v, &o.params) < 0)
                return cli_usage_error("synth", "--params needs a size such as 1M, 100M or 1B");
            have_params = 1;
        } else if ((r = synth_arg(argc, argv, &i, "--from", &v)) != 0) {
            if (r < 0 || !*v)
                return cli_usage_error("synth", "--from needs a checkpoint");
            from = v;
        } else if ((r = synth_arg(argc, argv, &i, "--lr", &v)) != 0) {
            if (r < 0 || synth_parse_positive(v, 1.0, &o.lr) < 0)
                return cli_usage_error("synth", "--lr needs a number in (0, 1]");
        } else if ((r = synth_arg(argc, argv, &i, "--seed", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &o.seed) < 0)
                return cli_usage_error("synth", "--seed needs a non-negative integer");
        } else if ((r = synth_arg(argc, argv, &i, "--spread", &v)) != 0) {
            if (r < 0 || (strcmp(v, "0") != 0 && synth_parse_positive(v, SYNTH_MAX_SPREAD, &o.spread) < 0))
                return cli_usage_error("synth", "--spread needs a number of binades in [0, %g]", SYNTH_MAX_SPREAD);
        } else if ((r = synth_arg(argc, argv, &i, "--view", &v)) != 0) {
            if (r < 0 || (strcmp(v, "bf16") != 0 && strcmp(v, "fp16") != 0))
                return cli_usage_error("synth", "--view wants bf16 or fp16");
            o.fp16 = !strcmp(v, "fp16");
        } else if ((r = synth_arg(argc, argv, &i, "--threads", &v)) != 0) {
            if (r < 0 || synth_parse_threads(v, &o.threads) < 0)
                return cli_usage_error("synth", "--threads needs a count 0..256 (0 = all cores)");
        } else {
            return cli_usage_error("synth", "unknown argument '%s'", argv[i]);
        }
    }
    if (!out)
        return cli_usage_error("synth", "--out DIR is required");
    if (!have_steps)
        return cli_usage_error("synth", "--steps N is required");
    if (from && (have_params || o.spread > 0))
        return cli_usage_error("synth", "--from takes the model's size and weights from CKPT: no --params or --spread");

    synth_model m;
    int err = from ? synth_model_from(&m, &o, from) : synth_model_init(&m, &o);
    if (err < 0)
        return cli_fail("synth", err, "model");
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        err = pulse_fail_errno(PULSE_ERR_IO, "mkdir %s", out);
        synth_model_free(&m);
        return cli_fail("synth", err, "output directory");
    }
    char **paths = calloc((size_t)steps + 1, sizeof *paths);
    uint64_t *changed = calloc((size_t)steps + 1, sizeof *changed);
    size_t plen = strlen(out) + 40;
    err = paths && changed ? 0 : pulse_fail(PULSE_ERR_NOMEM, "%llu paths", (unsigned long long)steps);
    for (uint64_t k = 0; k <= steps && !err; k++) {
        if (!(paths[k] = malloc(plen)))
            err = pulse_fail(PULSE_ERR_NOMEM, "paths");
        else if (synth_step_path(paths[k], plen, out, k) < 0)
            err = pulse_fail(PULSE_ERR_INVALID, "path too long");
    }
    int rc = 0;
    const char *view = o.fp16 ? "FP16" : "BF16";
    if (!err) {
        if (from)
            printf("model: %llu params in %zu float tensors of %s, %s %.1f MB/step\n",
                   (unsigned long long)m.params, m.ntensors, from, view, (double)m.params * 2 / 1e6);
        else
            printf("model: %llu params (hidden %u, mlp %u, layers %u, vocab %u), %zu tensors, %s %.1f MB/step\n",
                   (unsigned long long)m.params, m.hidden, m.intermediate, m.layers, m.vocab, m.ntensors, view,
                   (double)m.params * 2 / 1e6);
        printf("trainer: Adam lr %g, gradient correlation %.2f, seed %llu\n", o.lr, o.rho,
               (unsigned long long)o.seed);
        double t0 = pulse_monotonic_s();
        err = synth_run(&m, &o, steps, (const char *const *)paths, changed);
        double dt = pulse_monotonic_s() - t0;
        if (!err) {
            printf("step %06d: initial weights -> %s\n", 0, paths[0]);
            for (uint64_t k = 1; k <= steps; k++)
                printf("step %06llu: %6.3f%% of %s values changed (%llu of %llu)\n", (unsigned long long)k,
                       100.0 * (double)changed[k] / (double)m.params, view, (unsigned long long)changed[k],
                       (unsigned long long)m.params);
            printf("wrote %llu checkpoints to %s in %.2f s\n", (unsigned long long)steps + 1, out, dt);
            rc = cli_finish_stdout("synth");
        }
    }
    if (err < 0)
        rc = cli_fail("synth", err, "trajectory");
    if (paths)
        for (uint64_t k = 0; k <= steps; k++)
            free(paths[k]);
    free(paths);
    free(changed);
    synth_model_free(&m);
    return rc;
}
