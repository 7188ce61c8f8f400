/* SPDX-License-Identifier: Apache-2.0 */
/* pulse loco: PULSELoCo trainer rounds (init a trainer state, run a round through a store, show the state). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/loco.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse loco init --state DIR --from CKPT [--view bf16|fp16|e4m3|e5m2]\n"
        "       pulse loco round --store URL --run R --key K --trust PUB|DIR [--trust ...] --state DIR\n"
        "                        --local CKPT [options]\n"
        "       pulse loco show --state DIR\n"
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
        "  --trust PATH       a trainer's .pub or a directory of them (repeatable; self is implied)\n"
        "  --state DIR        this trainer's state (theta_r, e, momentum, round)\n"
        "  --local CKPT       theta_local (F32, theta_r's tensors)\n"
        "  -o, --out FILE     also write theta_{r+1} (F32) there\n"
        "  --out-view FILE    also write theta_{r+1}'s view (e.g. BF16 for inference) there\n"
        "  --deadline S       seconds to wait for the other trainers (default 300)\n"
        "  --quorum N         trainers needed at the deadline (default: all)\n"
        "  --outer-lr X       outer learning rate (default 1.0)\n"
        "  --momentum Y       outer momentum (default 0.0; --outer-momentum is the same)\n"
        "  --nesterov         Nesterov momentum\n"
        "  --view V           the state's view (set at init; round refuses another)\n"
        "  --local-steps H    only for the printed DDP comparison (H dense gradients per round)\n"
        "  --shard-elems N    elements per shard range (default 1M; receivers accept up to 16M)\n"
        "  --threads N        threads for hashing (default: all cores)\n"
        "  -v, --verbose      progress on stderr\n");
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

int cmd_loco(int argc, char **argv)
{
    if (argc < 2 || cli_wants_help(argc, argv)) {
        if (argc < 2)
            return cli_usage_error("loco", "needs init, round or show");
        usage(stdout);
        return cli_finish_stdout("loco");
    }
    const char *sub = argv[1];
    if (strcmp(sub, "init") && strcmp(sub, "round") && strcmp(sub, "show"))
        return cli_usage_error("loco", "unknown subcommand '%s' (init, round or show)", sub);
    pulse_loco_round_opts o;
    pulse_loco_round_default_opts(&o);
    const char **trust = calloc((size_t)argc, sizeof *trust);
    if (!trust)
        return cli_fail("loco", PULSE_ERR_NOMEM, "arguments");
    const char *from = NULL;
    int view = -1;
    uint64_t steps = 0;
    int rc = 0;
    for (int i = 2; i < argc && !rc; i++) {
        const char *a = argv[i];
        double d;
        uint64_t v;
        if (!strcmp(a, "--nesterov")) { o.nesterov = 1; continue; }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { o.verbose = 1; continue; }
        if (i + 1 >= argc) { rc = cli_usage_error("loco", "%s needs a value", a); break; }
        const char *val = argv[++i];
        if (!strcmp(a, "--store")) o.store_url = val;
        else if (!strcmp(a, "--run")) o.run = val;
        else if (!strcmp(a, "--key")) o.key_path = val;
        else if (!strcmp(a, "--trust") || !strcmp(a, "--trainers")) trust[o.n_trust++] = val;
        else if (!strcmp(a, "--state")) o.state_dir = val;
        else if (!strcmp(a, "--local")) o.local_path = val;
        else if (!strcmp(a, "--from") || !strcmp(a, "--global")) from = val;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o.out_path = val;
        else if (!strcmp(a, "--out-view")) o.out_view_path = val;
        else if (!strcmp(a, "--view")) {
            if ((view = pulse_loco_view_from_name(val)) < 0)
                rc = cli_usage_error("loco", "--view wants bf16, fp16, e4m3 or e5m2, not '%s'", val);
        } else if (!strcmp(a, "--deadline")) {
            if (parse_float(val, &d) || d < 0 || d > 1e7)
                rc = cli_usage_error("loco", "--deadline wants seconds (0 to 1e7)");
            o.deadline_s = d;
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
    if (!strcmp(sub, "show")) {
        rc = o.state_dir ? do_show(o.state_dir) : cli_usage_error("loco", "show needs --state");
        goto out;
    }
    if (!strcmp(sub, "init")) {
        if (!o.state_dir || !from) {
            rc = cli_usage_error("loco", "init needs --state and --from");
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
    pulse_loco_report rep;
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
    printf("); %u of %u trainers included%s, %u excluded; uploaded %" PRIu64 " downloaded %" PRIu64
           " bytes; theta_{r+1} %s %.16s; %u result(s) compared equal\n",
           rep.included, rep.trainers, rep.self_included ? "" : " (not this one: a folded back into e)", rep.excluded,
           rep.uploaded, rep.downloaded, pulse_loco_view_name(sview), pulse_id_hex(rep.result, hex),
           rep.results_compared);
    if (r) {
        rc = cli_fail("loco", r, "result mismatch");
        goto out;
    }
    rc = cli_finish_stdout("loco");
out:
    free(trust);
    return rc;
}
