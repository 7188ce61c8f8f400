/* SPDX-License-Identifier: Apache-2.0 */
/* pulse node follow: argument parsing for the follower node (node/daemon/follow_node.c does the work). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/names.h"
#include "node/daemon/follow_node.h"
#include "node/daemon/log.h"
#include "tools/cli.h"
#include "tools/cmd-node.h"

#define VERB "node follow"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse node follow --store URL --run R --trust PUB|DIR [--trust ...] --state DIR --weights FILE\n"
        "                         [--key K] [--on-update CMD] [--hook-after step|pull] [--poll-ms T]\n"
        "                         [--metrics ADDR:PORT]\n"
        "                         [--metrics-file PATH] [--once] [--durable] [--log text|json]\n"
        "                         [--max-staleness S] [--keep-untrusted] [--deadline S]\n"
        "\n"
        "Keeps FILE at the newest state published for run R by a trusted key, for as long as it\n"
        "runs: polls each trusted node's head with a conditional GET, verifies every record, applies\n"
        "each step in place through a journal (kill -9 at any moment is recovered on restart), runs\n"
        "the on-update command and writes a signed receipt. Far behind or with the chain broken, it\n"
        "catches up by the cheaper of the newest keyframe or the patch chain. SIGTERM stops it after\n"
        "the current step (exit 0). One log line per event on stderr (docs/node.md).\n"
        "\n"
        "  --store URL          file:///dir or s3://bucket/prefix\n"
        "  --run R              run name\n"
        "  --trust P            a .pub file or a directory of them (repeatable)\n"
        "  --state DIR          this follower's state: index.db and the step journal\n"
        "  --weights FILE       the local checkpoint to keep current\n"
        "  --key K              this node's secret key: write receipts to <run>/receipts/<node>/\n"
        "  --on-update CMD      run by /bin/sh after each step, with PULSE_STEP, PULSE_STATE (hex),\n"
        "                       PULSE_WEIGHTS and PULSE_RUN in its environment\n"
        "  --hook-after WHEN    step (default): the command runs after every applied step; pull:\n"
        "                       once after a catch-up or poll that applied steps, for the newest\n"
        "                       (an engine's reload endpoint: one reload, not one per step)\n"
        "  --hook-timeout-ms T  kill the command after T ms (default 60000)\n"
        "  --poll-ms T          head poll interval, jittered +-25%% (default 1000)\n"
        "  --max-behind N       beyond N steps behind, compare keyframe and chain by bytes (default 8)\n"
        "  --metrics A:P        serve Prometheus metrics over HTTP on A:P (e.g. 127.0.0.1:9109)\n"
        "  --metrics-file PATH  write the metrics to PATH (atomically) after each event\n"
        "  --once               catch up once, then exit\n"
        "  --durable            sync FILE to disk after every step (default: at stop and after\n"
        "                       each keyframe; after a machine restart, weights the disk kept only\n"
        "                       in part are replaced from the newest keyframe)\n"
        "  --max-staleness S    pulse_stale is 1 (and logged once) while the newest verified record\n"
        "                       was published more than S seconds ago; 0: no bound. Default: 4\n"
        "                       median intervals between the run's newest records (at least 10 s),\n"
        "                       from its 5th record on, and not while this node catches up\n"
        "  --keep-untrusted     keep weights whose state no trusted record produces (a key taken out\n"
        "                       of --trust), with a warning; default: replace them from the newest\n"
        "                       trusted keyframe (docs/trust.md)\n"
        "  --deadline S         a pull or poll gives up after S seconds, every request and retry\n"
        "                       included (default 3600; 0: no bound); the next poll starts afresh\n"
        "  --log FORMAT         text (default) or json\n"
        "  --threads N          threads (default: all cores)\n"
        "\n"
        "Each step's patch is fetched into fetch.data in the state directory (kept, and written\n"
        "over by the next step), so the directory needs room for the largest patch.\n");
}

static int parse_u32(const char *val, uint64_t lo, uint64_t hi, unsigned *out)
{
    uint64_t v;
    if (cli_parse_u64(val, &v) || v < lo || v > hi)
        return -1;
    *out = (unsigned)v;
    return 0;
}

int node_follow_main(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout(VERB);
    }
    node_follow_cfg c = { 0 };
    c.deadline_s = 3600;
    pulse_trust *trust = NULL;
    int r = pulse_trust_new(&trust);
    if (r)
        return cli_fail(VERB, r, "trust set");
    int ntrust = 0, rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--once")) {
            c.once = 1;
            continue;
        }
        if (!strcmp(a, "--durable")) {
            c.durable = 1;
            continue;
        }
        if (!strcmp(a, "--keep-untrusted")) {
            c.keep_untrusted = 1;
            continue;
        }
        if (i + 1 >= argc) {
            rc = cli_usage_error(VERB, a[0] == '-' ? "%s needs a value" : "unexpected argument '%s'", a);
            break;
        }
        const char *val = argv[++i];
        unsigned u = 0;
        if (!strcmp(a, "--store")) c.store_url = val;
        else if (!strcmp(a, "--run")) c.run = val;
        else if (!strcmp(a, "--state")) c.state_dir = val;
        else if (!strcmp(a, "--weights")) c.weights_path = val;
        else if (!strcmp(a, "--key")) c.key_path = val;
        else if (!strcmp(a, "--on-update")) c.on_update = val;
        else if (!strcmp(a, "--hook-after")) {
            if (!strcmp(val, "pull"))
                c.hook_after_pull = 1;
            else if (strcmp(val, "step"))
                rc = cli_usage_error(VERB, "--hook-after wants step or pull");
        }
        else if (!strcmp(a, "--metrics")) c.metrics_addr = val;
        else if (!strcmp(a, "--metrics-file")) c.metrics_file = val;
        else if (!strcmp(a, "--trust")) {
            if ((r = pulse_trust_load(trust, val)) != 0)
                rc = cli_fail(VERB, r, val);
            ntrust++;
        } else if (!strcmp(a, "--log")) {
            if (!strcmp(val, "json"))
                node_log_set_format(NODE_LOG_JSON);
            else if (!strcmp(val, "text"))
                node_log_set_format(NODE_LOG_TEXT);
            else
                rc = cli_usage_error(VERB, "--log wants text or json");
        } else if (!strcmp(a, "--poll-ms")) {
            if (parse_u32(val, 10, 3600000, &u))
                rc = cli_usage_error(VERB, "--poll-ms wants a number from 10 to 3600000");
            c.poll_ms = u;
        } else if (!strcmp(a, "--hook-timeout-ms")) {
            if (parse_u32(val, 1, 86400000, &u))
                rc = cli_usage_error(VERB, "--hook-timeout-ms wants a number from 1 to 86400000");
            c.hook_timeout_ms = u;
        } else if (!strcmp(a, "--max-behind")) {
            if (parse_u32(val, 1, 1000000, &u))
                rc = cli_usage_error(VERB, "--max-behind wants a number from 1 to 1000000");
            c.max_behind = u;
        } else if (!strcmp(a, "--max-staleness")) {
            uint64_t v;
            if (cli_parse_u64(val, &v) || v > 100ull * 365 * 86400)
                rc = cli_usage_error(VERB, "--max-staleness wants seconds from 0 (off) to 3153600000");
            c.max_staleness = v;
            c.max_staleness_set = 1;
        } else if (!strcmp(a, "--deadline")) {
            uint64_t v;
            if (cli_parse_u64(val, &v) || v > 1000000000)
                rc = cli_usage_error(VERB, "--deadline wants seconds from 0 to 1000000000");
            c.deadline_s = v;
        } else if (!strcmp(a, "--threads")) {
            if (parse_u32(val, 1, 1024, &u))
                rc = cli_usage_error(VERB, "--threads wants a number from 1 to 1024");
            c.threads = (int)u;
        } else {
            rc = cli_usage_error(VERB, "unknown %s '%s'", a[0] == '-' ? "option" : "argument", a);
        }
    }
    if (!rc && (!c.store_url || !c.run || !ntrust || !c.state_dir || !c.weights_path))
        rc = cli_usage_error(VERB, "needs --store, --run, --trust, --state and --weights");
    if (!rc && pulse_check_run(c.run))
        rc = cli_usage_error(VERB, "%s", pulse_last_error());
    if (rc) {
        pulse_trust_free(&trust);
        return rc;
    }
    c.trust = trust;
    r = node_follow_run(&c);
    pulse_trust_free(&trust);
    if (r)
        return cli_fail(VERB, r, c.weights_path);
    return 0;
}
