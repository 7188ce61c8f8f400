/* SPDX-License-Identifier: Apache-2.0 */
/* pulse loco: PULSELoCo trainer rounds (init a trainer state, run a round through a store, show the state). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/names.h"
#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"
#include "node/loco/objective.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/loco.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse loco init --state DIR --global INIT.safetensors [--view bf16|fp16|e4m3|e5m2]\n"
        "       pulse loco round --store URL --run R --key K --state DIR --trainers PUB... \\\n"
        "                        --local LOCAL.safetensors [-o NEW.safetensors] [options]\n"
        "       pulse loco show --state DIR\n"
        "       pulse loco bench [--params N] [--local-steps H] [--lr X] [--shard-elems N]\n"
        "       pulse loco sim [--trainers N] [--rounds R] [--local-steps H] [--lr X] [sim options]\n"
        "\n"
        "PULSELoCo (docs/loco.md). init starts a trainer state from an F32 safetensors checkpoint\n"
        "(theta_0; error feedback and momentum zero; round 0). round takes CKPT = theta_local after\n"
        "the H local steps, sends the entries of a = (theta_r - theta_local) + e that change the view,\n"
        "keeps the rest in e, waits for the other trusted trainers, validates their shards, takes\n"
        "the mean in node-id order, applies the outer step and advances the state to round r+1.\n"
        "\n"
        "  --store URL        file:///dir or s3://bucket/prefix\n"
        "  --run R            run name\n"
        "  --key FILE         this trainer's secret key (pulse keygen)\n"
        "  --trainers PUB...  the trainers' .pub files or directories of them (every argument up to\n"
        "                     the next option; self is implied); --trust PATH is one of them\n"
        "  --state DIR        this trainer's state (theta_r, e, momentum, round)\n"
        "  --local CKPT       theta_local (F32, theta_r's tensors)\n"
        "  -o, --out FILE     also write theta_{r+1} (F32) there\n"
        "  --out-view FILE    also write theta_{r+1}'s view (e.g. BF16 for inference) there\n"
        "  --deadline S       seconds to wait for the other trainers (default 300)\n"
        "  --quorum N         trainers needed at the deadline (default: a majority of the last\n"
        "                     round's members, of all trainers in round 0; docs/loco.md)\n"
        "  --outer-lr X       outer learning rate (default 1.0)\n"
        "  --momentum Y       outer momentum (default 0.0; --outer-momentum is the same)\n"
        "  --nesterov         Nesterov momentum\n"
        "  --view V           the state's view (set at init; round refuses another)\n"
        "  --values fp32|bf16 send values as FP32 (default) or rounded to BF16, the remainder kept in e\n"
        "  --local-steps H    only for the printed DDP comparison (H dense gradients per round)\n"
        "  --shard-elems N    elements per shard range (default 1M; receivers accept up to 16M)\n"
        "  --threads N        threads for hashing (default: all cores)\n"
        "  --reduce-scatter   owners sum ranges from everyone, all fetch the sums (same bits; every\n"
        "                     trainer of the round must use it, with the same --shard-elems)\n"
        "  --owner-wait S     reduce-scatter: seconds to wait for the owners' sums (default: --deadline,\n"
        "                     at least 30); a missing owner is left out of the next attempt\n"
        "  --reduce-gate      the reduce-scatter with the gate at the owner: only sums whose mean update\n"
        "                     changes the view are published, the rest goes into the owner's e (needs\n"
        "                     momentum 0; every trainer of the round must use it)\n"
        "  --publish-run RUN  after the round, publish theta_{r+1}'s view as step r+1 of sync run RUN\n"
        "  --publish-store URL  its store (default --store); --publish-state DIR (default STATE/publish)\n"
        "  -v, --verbose      progress on stderr\n"
        "  (init: --from is the same as --global)\n"
        "\n"
        "sim runs N trainers x R rounds x H inner Adam steps in one process on a built-in least-squares\n"
        "objective (weights N(0, 0.02) like an LLM's, rows x cols), PULSELoCo and dense DiLoCo on the\n"
        "same data, and prints the loss per round, entries and bytes per trainer:\n"
        "  --trainers N (3) --rounds R (16) --local-steps H (8) --lr X (inner Adam, 1e-6)\n"
        "  --outer-lr X (1) --momentum Y (0) --nesterov --rows N (64) --cols N (256) --samples N (128)\n"
        "  --init-noise X (5e-4) --label-noise X (1e-3) --seed N (1) --view V (bf16)\n"
        "  --values fp32|bf16 (fp32; bf16 keeps the rounding remainder in e) --shard-elems N (65536)\n"
        "  --forward bf16|fp32 (bf16: gradients at the BF16 weights, FP32 master weights and Adam)\n"
        "  --threads N --store-dir DIR (new directory: PULSELoCo once more through real rounds on a\n"
        "  file:// store in DIR, one thread per trainer; must give the in-memory pass's bits)\n"
        "  --reduce-scatter (the store pass's rounds use the reduce-scatter; prints bytes downloaded)\n"
        "  --reduce-gate (the owner's gate on the mean, in memory and, with --store-dir, in the rounds)\n");
}

static int parse_float(const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || end == s || *end || !(v == v))
        return -1;
    *out = v;
    return 0;
}

/* ---- bench: bytes per trainer, all-gather vs reduce-scatter ------------------------- */

static uint64_t bench_rng;
static double bench_uniform(void)
{
    bench_rng ^= bench_rng << 13;
    bench_rng ^= bench_rng >> 7;
    bench_rng ^= bench_rng << 17;
    return (double)(bench_rng >> 11) * (1.0 / 9007199254740992.0);
}
static double bench_gauss(void)
{
    double u = bench_uniform(), v = bench_uniform();
    return sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

/* One synthetic round per trainer count: the real gate on theta ~ N(0, 0.02) with H Adam-like steps
 * (a drift shared by all trainers plus one of their own, unit-clipped, times lr), the real shard
 * codec, and the reduced shards a reduce-scatter owner would publish (union of positions, sums in
 * node order, same codec). Nothing goes through a store: the figures are the bytes each would move. */
static int do_bench(uint64_t params, uint64_t steps, double lr, uint32_t cut)
{
    const pulse_kernels *kt = pulse_kernels_get();
    size_t n = (size_t)params, nr = (n + cut - 1) / cut;
    float *theta = malloc(n * 4), *delta = malloc((size_t)cut * 4), *e = malloc((size_t)cut * 4),
          *acc = malloc((size_t)cut * 4), *val = malloc((size_t)cut * 4), *rval = malloc((size_t)cut * 4);
    uint32_t *idx = malloc((size_t)cut * 4), *ridx = malloc((size_t)cut * 4);
    uint8_t *mark = malloc(cut);
    double *shared = malloc((size_t)cut * sizeof *shared);
    if (!theta || !delta || !e || !acc || !val || !rval || !idx || !ridx || !mark || !shared)
        return cli_fail("loco", PULSE_ERR_NOMEM, "bench");
    bench_rng = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++)
        theta[i] = (float)(0.02 * bench_gauss());
    printf("params %zu, H %" PRIu64 ", lr %g, view bf16, shards of %u elements; bytes per trainer per round\n", n,
           steps, lr, cut);
    printf("%8s %10s %9s %12s %8s %14s %14s %8s %14s\n", "trainers", "entries", "dense%", "shard-bytes", "B/entry",
           "allgather-down", "redscat-down", "ratio", "diloco-dense");
    static const unsigned counts[] = { 2, 4, 8 };
    for (size_t ci = 0; ci < 3; ci++) {
        unsigned T = counts[ci];
        uint64_t entries = 0, shard_bytes = 0, own_down = 0, reduced_bytes = 0;
        for (size_t rg = 0; rg < nr; rg++) {
            size_t off = rg * cut, len = n - off < cut ? n - off : cut;
            unsigned owner = (unsigned)(rg % T);
            uint64_t range_bytes = 0, owner_bytes = 0;
            memset(acc, 0, len * 4);
            memset(mark, 0, len);
            bench_rng = 0x1234567ull + rg;
            for (size_t i = 0; i < len; i++)
                shared[i] = bench_uniform() - 0.5;
            for (unsigned k = 0; k < T; k++) {
                bench_rng = (0xabcdef12345ull + rg) * (k + 3);
                for (size_t i = 0; i < len; i++) {
                    double drift = shared[i] + bench_uniform() - 0.5, u = 0;
                    for (uint64_t s = 0; s < steps; s++) {
                        double x = drift + 0.5 * bench_gauss();
                        u += x > 1 ? 1 : x < -1 ? -1 : x;
                    }
                    delta[i] = (float)(lr * u);
                    e[i] = 0.0f;
                }
                size_t kk = kt->gate[PULSE_VIEW_BF16](theta + off, delta, e, len, idx, val);
                uint8_t *obj = NULL;
                size_t ol = 0;
                int r = loco_shard_encode(PULSE_LOCO_VIEW_BF16, off, (uint32_t)len, idx, val, (uint32_t)kk, &obj, &ol);
                free(obj);
                if (r)
                    return cli_fail("loco", r, "bench");
                entries += kk;
                range_bytes += ol;
                if (k == owner)
                    owner_bytes = ol;
                kt->scatter_add_f32(acc, idx, kk, val);
                for (size_t j = 0; j < kk; j++)
                    mark[idx[j]] = 1;
            }
            shard_bytes += range_bytes;
            /* the owner downloads the other trainers' shards of its range */
            own_down += range_bytes - owner_bytes;
            size_t rk = 0;
            for (size_t i = 0; i < len; i++)
                if (mark[i]) {
                    ridx[rk] = (uint32_t)i;
                    rval[rk++] = acc[i];
                }
            uint8_t *obj = NULL;
            size_t ol = 0;
            int r = loco_shard_encode(PULSE_LOCO_VIEW_BF16, off, (uint32_t)len, ridx, rval, (uint32_t)rk, &obj, &ol);
            free(obj);
            if (r)
                return cli_fail("loco", r, "bench");
            reduced_bytes += ol;
        }
        /* Per trainer, averaged: all-gather fetches the T-1 other trainers' shards; reduce-scatter
         * fetches the others' shards of the ranges it owns (1/T of them) plus the reduced shards of
         * the ranges the T-1 others own. */
        double per = (double)shard_bytes / T, ag = per * (T - 1),
               rs = (double)own_down / T + (double)reduced_bytes * (T - 1) / T;
        printf("%8u %10.0f %9.3f %12.0f %8.2f %14.0f %14.0f %8.2f %14.0f\n", T, (double)entries / T,
               100.0 * (double)entries / T / (double)n, per, entries ? (double)shard_bytes / (double)entries : 0.0, ag,
               rs, ag / rs, 4.0 * (double)n * (T - 1));
    }
    free(theta); free(delta); free(e); free(acc); free(val); free(rval); free(idx); free(ridx); free(mark);
    free(shared);
    return cli_finish_stdout("loco");
}

static int do_show(const char *dir)
{
    uint64_t round = 0;
    uint8_t id[32];
    int view = 0;
    int r = pulse_loco_state_round(dir, &round, id, &view);
    if (r)
        return cli_fail("loco", r, dir);
    char hex[65];
    printf("round %" PRIu64 " view %s view-state %s\n", round, pulse_loco_view_name(view), pulse_id_hex(id, hex));
    return cli_finish_stdout("loco");
}

/* pulse loco sim: the built-in objective, PULSELoCo against dense DiLoCo (node/loco/sim.c). */
static int do_sim(int argc, char **argv)
{
    loco_sim_cfg c = {
        .obj = { .rows = 64, .cols = 256, .samples = 128, .trainers = 3, .init_noise = 5e-4, .label_noise = 1e-3,
                 .seed = 1 },
        .rounds = 16, .inner_steps = 8, .inner_lr = 1e-6f, .outer_lr = 1.0f, .momentum = 0.0f,
        .view = PULSE_LOCO_VIEW_BF16, .shard_elems = 65536, .bf16_forward = 1,
    };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        double d = 0;
        uint64_t v = 0;
        if (!strcmp(a, "--nesterov")) { c.nesterov = 1; continue; }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { c.quiet = 1; continue; }
        if (!strcmp(a, "--reduce-scatter")) { c.reduce_scatter = 1; continue; }
        if (!strcmp(a, "--reduce-gate")) { c.reduce_scatter = c.reduce_gate = 1; continue; }
        if (i + 1 >= argc)
            return cli_usage_error("loco", "%s needs a value", a);
        const char *val = argv[++i];
        int bad_u = cli_parse_u64(val, &v) != 0, bad_f = parse_float(val, &d) != 0;
        if (!strcmp(a, "--trainers") || !strcmp(a, "--rounds") || !strcmp(a, "--local-steps") ||
            !strcmp(a, "--rows") || !strcmp(a, "--cols") || !strcmp(a, "--samples") || !strcmp(a, "--shard-elems") ||
            !strcmp(a, "--threads")) {
            if (bad_u || v < 1 || v > 65536)
                return cli_usage_error("loco", "%s wants a number from 1 to 65536", a);
            if (!strcmp(a, "--trainers")) c.obj.trainers = (unsigned)v;
            else if (!strcmp(a, "--rounds")) c.rounds = (unsigned)v;
            else if (!strcmp(a, "--local-steps")) c.inner_steps = (unsigned)v;
            else if (!strcmp(a, "--rows")) c.obj.rows = (uint32_t)v;
            else if (!strcmp(a, "--cols")) c.obj.cols = (uint32_t)v;
            else if (!strcmp(a, "--samples")) c.obj.samples = (uint32_t)v;
            else if (!strcmp(a, "--shard-elems")) c.shard_elems = (uint32_t)v;
            else c.threads = (int)v;
        } else if (!strcmp(a, "--seed")) {
            if (bad_u)
                return cli_usage_error("loco", "--seed wants a number");
            c.obj.seed = v;
        } else if (!strcmp(a, "--lr") || !strcmp(a, "--outer-lr") || !strcmp(a, "--init-noise") ||
                   !strcmp(a, "--label-noise")) {
            if (bad_f || !(d >= 0) || d > 10)
                return cli_usage_error("loco", "%s wants a number from 0 to 10", a);
            if (!strcmp(a, "--lr")) c.inner_lr = (float)d;
            else if (!strcmp(a, "--outer-lr")) c.outer_lr = (float)d;
            else if (!strcmp(a, "--init-noise")) c.obj.init_noise = d;
            else c.obj.label_noise = d;
        } else if (!strcmp(a, "--momentum") || !strcmp(a, "--outer-momentum")) {
            if (bad_f || !(d >= 0) || d >= 1)
                return cli_usage_error("loco", "%s wants a number in [0, 1)", a);
            c.momentum = (float)d;
        } else if (!strcmp(a, "--view")) {
            if ((c.view = pulse_loco_view_from_name(val)) < 0)
                return cli_usage_error("loco", "--view wants bf16, fp16, e4m3 or e5m2, not '%s'", val);
        } else if (!strcmp(a, "--forward")) {
            if (strcmp(val, "fp32") && strcmp(val, "bf16"))
                return cli_usage_error("loco", "--forward wants fp32 or bf16, not '%s'", val);
            c.bf16_forward = !strcmp(val, "bf16");
        } else if (!strcmp(a, "--store-dir")) {
            c.store_dir = val;
        } else if (!strcmp(a, "--values")) {
            if (strcmp(val, "fp32") && strcmp(val, "bf16"))
                return cli_usage_error("loco", "--values wants fp32 or bf16, not '%s'", val);
            c.bf16_values = !strcmp(val, "bf16");
        } else {
            return cli_usage_error("loco", "sim: unknown option '%s'", a);
        }
    }
    printf("sim: %u trainers x %u rounds x %u Adam steps (lr %g), W %u x %u (%" PRIu64 " params), %u samples each,"
           " outer lr %g momentum %g%s, view %s, values %s, forward %s%s\n",
           c.obj.trainers, c.rounds, c.inner_steps, (double)c.inner_lr, c.obj.rows, c.obj.cols,
           (uint64_t)c.obj.rows * c.obj.cols, c.obj.samples, (double)c.outer_lr, (double)c.momentum,
           c.nesterov ? " (Nesterov)" : "", pulse_loco_view_name(c.view), c.bf16_values ? "bf16" : "fp32",
           c.bf16_forward ? "bf16" : "fp32", c.reduce_gate ? ", reduce-gate (the owners' gate on the mean)" : "");
    loco_sim_result res;
    int r = loco_sim_run(&c, &res);
    if (r)
        return cli_fail("loco", r, "sim");
    double dense = res.dense_bytes_per_round;
    printf("final loss: loco %.6e diloco %.6e init %.6e; loco/diloco - 1 = %+.3f%%\n", res.loss_loco, res.loss_dense,
           res.loss0, 100.0 * (res.loss_loco / res.loss_dense - 1.0));
    printf("final loss of the bf16 weights: loco %.6e diloco %.6e init %.6e; loco/diloco - 1 = %+.3f%%\n",
           res.loss16_loco, res.loss16_dense, res.loss16_0, 100.0 * (res.loss16_loco / res.loss16_dense - 1.0));
    printf("bytes per trainer per round: loco %.0f (%.0f entries, %.3f%% dense, %.2f B/entry), diloco %.0f (%.1fx"
           " more), ddp %.0f (%u x dense, %.1fx more)\n",
           res.shard_bytes_per_round, res.sent_per_round, 100.0 * res.sent_per_round / (dense / 4.0),
           res.sent_per_round > 0 ? res.shard_bytes_per_round / res.sent_per_round : 0.0, dense,
           res.shard_bytes_per_round > 0 ? dense / res.shard_bytes_per_round : 0.0, dense * c.inner_steps,
           c.inner_steps, res.shard_bytes_per_round > 0 ? dense * c.inner_steps / res.shard_bytes_per_round : 0.0);
    if (res.store_ran)
        printf("through the store (%s): %s theta_{r+1} as in memory every round, %.0f shard bytes per trainer and"
               " round\n", c.store_dir, res.store_same ? "the same" : "NOT the same", res.store_shard_bytes_per_round);
    if (res.store_ran)
        printf("downloaded per trainer and round (%s): %.0f bytes on average, %.0f at most\n",
               c.reduce_gate ? "reduce-gate" : c.reduce_scatter ? "reduce-scatter" : "all-gather",
               res.store_down_per_round, res.store_down_max);
    if (c.reduce_gate)
        printf("reduce-gate: %.0f of %.0f summed entries per round published (%.1f%%), the rest withheld in the "
               "owners' e\n", res.rg_published_per_round, res.rg_published_per_round + res.rg_withheld_per_round,
               res.rg_published_per_round + res.rg_withheld_per_round > 0
                   ? 100.0 * res.rg_published_per_round / (res.rg_published_per_round + res.rg_withheld_per_round)
                   : 0.0);
    if (res.store_ran && !res.store_same)
        return cli_fail("loco", PULSE_ERR_MISMATCH, "sim: the rounds through the store differ from the in-memory pass");
    return cli_finish_stdout("loco");
}

int cmd_loco(int argc, char **argv)
{
    if (argc < 2 || cli_wants_help(argc, argv)) {
        if (argc < 2)
            return cli_usage_error("loco", "needs init, round, show, bench or sim");
        usage(stdout);
        return cli_finish_stdout("loco");
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "sim"))
        return do_sim(argc, argv);
    if (strcmp(sub, "init") && strcmp(sub, "round") && strcmp(sub, "show") && strcmp(sub, "bench"))
        return cli_usage_error("loco", "unknown subcommand '%s' (init, round, show, bench or sim)", sub);
    pulse_loco_round_opts o;
    pulse_loco_round_default_opts(&o);
    const char **trust = calloc((size_t)argc, sizeof *trust);
    if (!trust)
        return cli_fail("loco", PULSE_ERR_NOMEM, "arguments");
    const char *from = NULL;
    int view = -1;
    uint64_t steps = 0, params = 4u << 20;
    double bench_lr = 1e-6;
    int rc = 0;
    for (int i = 2; i < argc && !rc; i++) {
        const char *a = argv[i];
        double d;
        uint64_t v;
        if (!strcmp(a, "--nesterov")) { o.nesterov = 1; continue; }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { o.verbose = 1; continue; }
        if (!strcmp(a, "--reduce-scatter")) { o.reduce_scatter = 1; continue; }
        if (!strcmp(a, "--reduce-gate")) { o.reduce_scatter = o.reduce_gate = 1; continue; }
        if (i + 1 >= argc) { rc = cli_usage_error("loco", "%s needs a value", a); break; }
        const char *val = argv[++i];
        if (!strcmp(a, "--store")) o.store_url = val;
        else if (!strcmp(a, "--publish-run")) o.publish_run = val;
        else if (!strcmp(a, "--publish-store")) o.publish_store = val;
        else if (!strcmp(a, "--publish-state")) o.publish_state = val;
        else if (!strcmp(a, "--run")) o.run = val;
        else if (!strcmp(a, "--key")) o.key_path = val;
        else if (!strcmp(a, "--trust")) trust[o.n_trust++] = val;
        else if (!strcmp(a, "--trainers")) {
            trust[o.n_trust++] = val;
            while (i + 1 < argc && argv[i + 1][0] != '-')
                trust[o.n_trust++] = argv[++i];
        }
        else if (!strcmp(a, "--state")) o.state_dir = val;
        else if (!strcmp(a, "--local")) o.local_path = val;
        else if (!strcmp(a, "--from") || !strcmp(a, "--global")) from = val;
        else if ((!strcmp(a, "-o") || !strcmp(a, "--out") || !strcmp(a, "--out-view")) &&
                 cli_out_not_stdout("loco", a, val))
            rc = 2;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o.out_path = val;
        else if (!strcmp(a, "--out-view")) o.out_view_path = val;
        else if (!strcmp(a, "--values")) {
            if (strcmp(val, "fp32") && strcmp(val, "bf16"))
                rc = cli_usage_error("loco", "--values wants fp32 or bf16, not '%s'", val ? val : "");
            o.bf16_values = !strcmp(val, "bf16");
        }
        else if (!strcmp(a, "--view")) {
            if ((view = pulse_loco_view_from_name(val)) < 0)
                rc = cli_usage_error("loco", "--view wants bf16, fp16, e4m3 or e5m2, not '%s'", val);
        } else if (!strcmp(a, "--deadline")) {
            if (parse_float(val, &d) || d < 0 || d > 1e7)
                rc = cli_usage_error("loco", "--deadline wants seconds (0 to 1e7)");
            o.deadline_s = d;
        } else if (!strcmp(a, "--owner-wait")) {
            if (parse_float(val, &d) || d <= 0 || d > 1e7)
                rc = cli_usage_error("loco", "--owner-wait wants seconds (above 0, to 1e7)");
            o.owner_wait_s = d;
        } else if (!strcmp(a, "--quorum")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > 4096)
                rc = cli_usage_error("loco", "--quorum wants a number from 1 to 4096");
            o.quorum = (unsigned)v;
        } else if (!strcmp(a, "--outer-lr")) {
            if (parse_float(val, &d) || d < 0 || d > 1e6)
                rc = cli_usage_error("loco", "--outer-lr wants a number from 0 to 1e6");
            o.outer_lr = (float)d;
        } else if (!strcmp(a, "--momentum") || !strcmp(a, "--outer-momentum")) {
            if (parse_float(val, &d) || d < 0 || d >= 1)
                rc = cli_usage_error("loco", "--momentum wants a number in [0, 1)");
            o.momentum = (float)d;
        } else if (!strcmp(a, "--local-steps")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > 1000000)
                rc = cli_usage_error("loco", "--local-steps wants a number from 1 to 1000000");
            steps = v;
        } else if (!strcmp(a, "--params")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > (1ull << 32))
                rc = cli_usage_error("loco", "--params wants a number from 1 to 4G");
            params = v;
        } else if (!strcmp(a, "--lr")) {
            if (parse_float(val, &d) || d <= 0 || d > 1)
                rc = cli_usage_error("loco", "--lr wants a number in (0, 1]");
            bench_lr = d;
        } else if (!strcmp(a, "--shard-elems")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > (1u << 24))
                rc = cli_usage_error("loco", "--shard-elems wants a number from 1 to 16M");
            o.shard_elems = (uint32_t)v;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > 1024)
                rc = cli_usage_error("loco", "--threads wants a number from 1 to 1024");
            o.threads = (int)v;
        } else {
            rc = cli_usage_error("loco", "unknown option '%s'", a);
        }
    }
    o.trust_paths = trust;
    if (rc)
        goto out;
    if (!strcmp(sub, "bench")) {
        rc = do_bench(params, steps ? steps : 8, bench_lr, o.shard_elems ? o.shard_elems : LOCO_SHARD_ELEMS);
        goto out;
    }
    if (!strcmp(sub, "show")) {
        rc = o.state_dir ? do_show(o.state_dir) : cli_usage_error("loco", "show needs --state");
        goto out;
    }
    if (!strcmp(sub, "init")) {
        if (!o.state_dir || !from) {
            rc = cli_usage_error("loco", "init needs --state and --global (or --from)");
            goto out;
        }
        int r = pulse_loco_init(o.state_dir, from, view < 0 ? PULSE_LOCO_VIEW_BF16 : view);
        if (r) {
            rc = cli_fail("loco", r, o.state_dir);
            goto out;
        }
        printf("round 0: state in %s from %s\n", o.state_dir, from);
        rc = cli_finish_stdout("loco");
        goto out;
    }
    if (!o.store_url || !o.run || !o.key_path || !o.state_dir || !o.local_path) {
        rc = cli_usage_error("loco", "round needs --store, --run, --key, --state and --local");
        goto out;
    }
    if (pulse_check_run(o.run) || (o.publish_run && pulse_check_run(o.publish_run))) {
        rc = cli_usage_error("loco", "%s", pulse_last_error());
        goto out;
    }
    uint64_t cur = 0;
    uint8_t id[32];
    int sview = 0;
    int r = pulse_loco_state_round(o.state_dir, &cur, id, &sview);
    if (r) {
        rc = cli_fail("loco", r, o.state_dir);
        goto out;
    }
    if (view >= 0 && view != sview) {
        rc = cli_usage_error("loco", "the state in %s gates in %s, not %s", o.state_dir, pulse_loco_view_name(sview),
                             pulse_loco_view_name(view));
        goto out;
    }
    if ((o.publish_store || o.publish_state) && !o.publish_run) {
        rc = cli_usage_error("loco", "--publish-store and --publish-state go with --publish-run");
        goto out;
    }
    pulse_loco_report rep;
    pulse_loco_round_extra x;
    o.extra = &x;
    r = pulse_loco_round(&o, &rep);
    if (r && !(r == PULSE_ERR_MISMATCH && rep.results_mismatched)) {
        rc = cli_fail("loco", r, "round");
        goto out;
    }
    char hex[65];
    double dense = 4.0 * (double)rep.params;
    printf("round %" PRIu64 ": sent %" PRIu64 " of %" PRIu64 " entries (%.3f%% dense), %" PRIu64
           " shard bytes (%.2f per entry, %.2f%% of DiLoCo's %.0f dense FP32 bytes, %.1fx less",
           rep.round, rep.sent, rep.params, rep.params ? 100.0 * (double)rep.sent / (double)rep.params : 0.0,
           rep.shard_bytes, rep.sent ? (double)rep.shard_bytes / (double)rep.sent : 0.0,
           dense > 0 ? 100.0 * (double)rep.shard_bytes / dense : 0.0, dense,
           rep.shard_bytes ? dense / (double)rep.shard_bytes : 0.0);
    if (steps)
        printf(", %.1fx less than DDP's %" PRIu64 " x dense", rep.shard_bytes ? dense * (double)steps / (double)rep.shard_bytes : 0.0,
               steps);
    printf("); %u of %u trainers included%s, %u excluded%s; uploaded %" PRIu64 " downloaded %" PRIu64
           " bytes; theta_{r+1} %s %.16s; %u result(s) compared equal\n",
           rep.included, rep.trainers, rep.self_included ? "" : " (not this one: a folded back into e)", rep.excluded,
           rep.adopted ? " (members adopted from an earlier result)" : "",
           rep.uploaded, rep.downloaded, pulse_loco_view_name(sview), pulse_id_hex(rep.result, hex),
           rep.results_compared);
    if (o.reduce_scatter)
        printf("round %" PRIu64 ": reduce-scatter attempt %u, %u vetoed, owned %u ranges (%" PRIu64
               " reduced bytes published), downloaded %" PRIu64 " bytes\n",
               rep.round, x.rs_attempt, x.vetoed, x.rs_owned, x.rs_reduced_bytes, rep.downloaded);
    if (o.reduce_gate)
        printf("round %" PRIu64 ": reduce-gate: of the owned sums %" PRIu64 " published, %" PRIu64
               " withheld into e\n", rep.round, x.rg_published, x.rg_withheld);
    if (x.published)
        printf("round %" PRIu64 ": published theta_%" PRIu64 "'s view as step %" PRIu64 " of run %s (%" PRIu64
               " bytes%s)\n", rep.round, x.published_step, x.published_step, o.publish_run, x.publish_bytes,
               x.publish_already ? ", already there" : "");
    if (r) {
        rc = cli_fail("loco", r, "result mismatch");
        goto out;
    }
    rc = cli_finish_stdout("loco");
out:
    free(trust);
    return rc;
}
