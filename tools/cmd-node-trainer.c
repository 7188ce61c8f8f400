/* SPDX-License-Identifier: Apache-2.0 */
/* pulse node trainer: argument parsing for the trainer node (node/daemon/trainer_node.c does the work). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/names.h"
#include "node/daemon/log.h"
#include "node/daemon/signals.h"
#include "node/daemon/trainer_node.h"
#include "node/daemon/trainer_watch.h"
#include "tools/cli.h"
#include "tools/cmd-node.h"

#define VERB "node trainer"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse node trainer --store URL --run R --key NAME.key --state DIR --watch CKPT_DIR [options]\n"
        "\n"
        "Publishes each checkpoint the trainer finishes writing in CKPT_DIR, in step order, as a\n"
        "signed patch against the previous one (docs/node.md, \"Which files are checkpoints\").\n"
        "Recognised (step N), when renamed into CKPT_DIR or once unchanged between two scans: files\n"
        "'<anything>-<N>.safetensors',\n"
        "'<anything>_<N>.safetensors', 'step<N>.safetensors'; directories 'checkpoint-<N>' (Hugging\n"
        "Face), 'global_step_<N>', 'global_step<N>' (verl, DeepSpeed), 'step_<N>', 'step<N>' holding\n"
        "*.safetensors or a *.safetensors.index.json at their top; any '<anything>-<N>' directory\n"
        "beside a '<anything>-<N>.done' marker. tmp-*, *.tmp and hidden names are never complete.\n"
        "Every other name is ignored and logged once ('ignored', with the reason).\n"
        "SIGTERM/SIGINT: finish the current publish, exit 0.\n"
        "\n"
        "  --store URL            file:///dir or s3://bucket/prefix\n"
        "  --run R                run name ([A-Za-z0-9._-])\n"
        "  --key FILE             the node's secret key (pulse keygen); mode 0600\n"
        "  --state DIR            the publisher's state: index.db and the last published checkpoint\n"
        "  --watch DIR            the directory the trainer writes checkpoints into\n"
        "  --pattern GLOB         checkpoints are exactly the files or directories matching GLOB\n"
        "                         (fnmatch: * ? [..]) with one {N} where the step digits are, e.g.\n"
        "                         'ckpt_{N}.safetensors' or 'epoch*-step{N}' (replaces the names above)\n"
        "  --keyframe-every N     also publish a keyframe when step %% N == 0 (default: first only)\n"
        "  --keep-keyframes M     retention: keep the newest M keyframes and the chain after the\n"
        "                         oldest of them; delete this node's older records and unneeded\n"
        "                         objects (default 2; 0 keeps everything)\n"
        "  --poll-ms T            milliseconds between scans (default 1000)\n"
        "  --once                 scan twice (T apart), publish what is finished, exit\n"
        "  --durable              sync the copy of the last published state (the next diff's\n"
        "                         base) after every publish (default: at stop; after a machine\n"
        "                         restart, a copy the disk kept only in part is replaced by a keyframe)\n"
        "  --values CODE          ulp (default) or abs\n"
        "  --context              context-coded patches (format 5, about 0.7x the bytes): only\n"
        "                         followers that hold the weights decode them\n"
        "  --threads N            threads (default: all cores)\n"
        "  --metrics A:P          serve Prometheus metrics over HTTP on A:P (e.g. 127.0.0.1:9108):\n"
        "                         steps published, failures, pulse_step_phase_seconds by phase\n"
        "  --metrics-file PATH    write the metrics to PATH (atomically) after each publish\n"
        "  --part I/N             the checkpoints are part I (0..N-1) of a model published by N\n"
        "                         nodes, each its own tensors (docs/sync.md \"A trainer in parts\")\n"
        "  --commit               with --part: also commit each step once every part published it\n"
        "                         (state in DIR/commit); one node of the N does, and its\n"
        "                         --keep-keyframes keeps the run and its parts' runs\n"
        "  --commit-wait S        seconds a commit waits for the other parts (default 600); a part\n"
        "                         still missing is tried again at the next poll\n"
        "  --log FORMAT           text (default) or json: one line per event on stderr\n");
}

int node_trainer_main(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout(VERB);
    }
    node_trainer_opts o;
    node_trainer_opts_default(&o);
    int keep_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v;
        if (!strcmp(a, "--durable")) {
            o.pub.durable = 1;
            continue;
        }
        if (!strcmp(a, "--context")) {
            o.pub.context = 1;
            continue;
        }
        if (!strcmp(a, "--commit")) {
            o.commit = 1;
            continue;
        }
        if (!strcmp(a, "--once")) {
            o.once = 1;
            continue;
        }
        if (a[0] != '-' || !a[1])
            return cli_usage_error(VERB, "unexpected argument '%s'", a);
        if (i + 1 >= argc)
            return cli_usage_error(VERB, "%s needs a value", a);
        const char *val = argv[++i];
        if (!strcmp(a, "--store")) o.pub.store_url = val;
        else if (!strcmp(a, "--run")) o.pub.run = val;
        else if (!strcmp(a, "--key")) o.pub.key_path = val;
        else if (!strcmp(a, "--state")) o.pub.state_dir = val;
        else if (!strcmp(a, "--watch")) o.watch_dir = val;
        else if (!strcmp(a, "--metrics")) o.metrics_addr = val;
        else if (!strcmp(a, "--metrics-file")) o.metrics_file = val;
        else if (!strcmp(a, "--part")) {
            if (cli_parse_part(val, &o.pub.part, &o.pub.parts))
                return cli_usage_error(VERB, "--part wants I/N with 0 <= I < N <= 4096, not '%s'", val);
        } else if (!strcmp(a, "--commit-wait")) {
            char *end = NULL;
            o.commit_wait_s = strtod(val, &end);
            if (!end || *end || !(o.commit_wait_s >= 0 && o.commit_wait_s <= 86400))
                return cli_usage_error(VERB, "--commit-wait wants seconds from 0 to 86400");
        }
        else if (!strcmp(a, "--pattern")) {
            const char *why;
            if (watch_pattern_check(val, &why))
                return cli_usage_error(VERB, "--pattern '%s' %s", val, why);
            o.pattern = val;
        }
        else if (!strcmp(a, "--keyframe-every")) {
            if (cli_parse_u64(val, &v) || v < 1)
                return cli_usage_error(VERB, "--keyframe-every wants a number of steps >= 1");
            o.keyframe_every = v;
        } else if (!strcmp(a, "--keep-keyframes")) {
            if (cli_parse_u64(val, &v) || v > 1000000)
                return cli_usage_error(VERB, "--keep-keyframes wants a number from 0 to 1000000");
            o.keep_keyframes = (unsigned)v;
            keep_set = 1;
        } else if (!strcmp(a, "--poll-ms")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > 86400000)
                return cli_usage_error(VERB, "--poll-ms wants milliseconds from 1 to 86400000");
            o.poll_ms = (unsigned)v;
        } else if (!strcmp(a, "--values")) {
            if (!strcmp(val, "abs")) o.pub.values = PULSE_VALUES_ABS;
            else if (!strcmp(val, "ulp")) o.pub.values = PULSE_VALUES_ULP;
            else return cli_usage_error(VERB, "--values wants abs or ulp, not '%s'", val);
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > 1024)
                return cli_usage_error(VERB, "--threads wants a number from 1 to 1024");
            o.pub.threads = (int)v;
        } else if (!strcmp(a, "--log")) {
            if (!strcmp(val, "json")) node_log_set_format(NODE_LOG_JSON);
            else if (!strcmp(val, "text")) node_log_set_format(NODE_LOG_TEXT);
            else return cli_usage_error(VERB, "--log wants json or text, not '%s'", val);
        } else {
            return cli_usage_error(VERB, "unknown option '%s'", a);
        }
    }
    if (!o.pub.store_url || !o.pub.run || !o.pub.key_path || !o.pub.state_dir || !o.watch_dir)
        return cli_usage_error(VERB, "needs --store, --run, --key, --state and --watch");
    if (pulse_check_run(o.pub.run))
        return cli_usage_error(VERB, "%s", pulse_last_error());
    if (o.commit && !o.pub.parts)
        return cli_usage_error(VERB, "--commit goes with --part (the node that commits the parts' steps)");
    if (o.pub.parts && !o.commit && keep_set && o.keep_keyframes)
        return cli_usage_error(VERB, "--keep-keyframes: the committing node (--commit) keeps a run in parts; "
                                     "give it there, and 0 or nothing here");
    if (o.pub.parts && !o.commit)
        o.keep_keyframes = 0;   /* a part's own retention would delete objects its siblings' records name */
    node_signals_install();
    int r = node_trainer_run(&o);
    if (r)
        return cli_fail(VERB, r, "trainer node");
    return 0;
}
