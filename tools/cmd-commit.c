/* SPDX-License-Identifier: Apache-2.0 */
/* pulse commit: one signed record of the whole model for a step its part publishers published. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/names.h"
#include "pulseweights/sync.h"
#include "tools/cli.h"
#include "tools/sync_json.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse commit --store URL --run R --key NAME.key --state DIR --parts N [options]\n"
        "\n"
        "Commits a step of run R that N part publishers (`pulse publish --part I/N`, each its own\n"
        "tensors, the same key) published as runs R.part-I-of-N: waits for every part's record,\n"
        "checks each (signature, step, its tensor hashes, its base against the last commit, no\n"
        "tensor in two parts), then writes one head over the parts' patches (their data stays\n"
        "where the parts put it) and one signed record whose states are the whole model's,\n"
        "computed from the parts' tensor hashes. A step every part published as a keyframe is\n"
        "committed as a keyframe. Nothing is written unless every part is there and checks;\n"
        "the error names the part. Re-running completes the same step (docs/sync.md).\n"
        "\n"
        "  --store URL     file:///dir or s3://bucket/prefix\n"
        "  --run R         run name ([A-Za-z0-9._-])\n"
        "  --key FILE      the trainer's secret key, the one its parts signed with; mode 0600\n"
        "  --state DIR     this committer's state: index.db\n"
        "  --parts N       how many parts (1..4096)\n"
        "  --step N        step number (default: one more than the last committed, 0 first)\n"
        "  --wait S        seconds to wait for the parts' records (default 600)\n"
        "  --json          print one JSON object instead of the line (as pulse publish)\n");
}

int cmd_commit(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("commit");
    }
    pulse_publish_opts o;
    pulse_publish_opts_default(&o);
    int64_t step = -1;
    uint64_t parts = 0;
    double wait_s = 600;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (a[0] != '-' || !a[1])
            return cli_usage_error("commit", "unexpected argument '%s'", a);
        if (i + 1 >= argc)
            return cli_usage_error("commit", "%s needs a value", a);
        const char *val = argv[++i];
        if (!strcmp(a, "--store")) o.store_url = val;
        else if (!strcmp(a, "--run")) o.run = val;
        else if (!strcmp(a, "--key")) o.key_path = val;
        else if (!strcmp(a, "--state")) o.state_dir = val;
        else if (!strcmp(a, "--parts")) {
            if (cli_parse_u64(val, &parts) || parts < 1 || parts > 4096)
                return cli_usage_error("commit", "--parts wants a number from 1 to 4096");
        } else if (!strcmp(a, "--step")) {
            if (cli_parse_u64(val, &v) || v > (uint64_t)INT64_MAX)
                return cli_usage_error("commit", "--step wants a non-negative number");
            step = (int64_t)v;
        } else if (!strcmp(a, "--wait")) {
            char *end = NULL;
            wait_s = strtod(val, &end);
            if (!end || *end || !(wait_s >= 0 && wait_s <= 86400))
                return cli_usage_error("commit", "--wait wants seconds from 0 to 86400");
        } else {
            return cli_usage_error("commit", "unknown option '%s'", a);
        }
    }
    if (!o.store_url || !o.run || !o.key_path || !o.state_dir || !parts)
        return cli_usage_error("commit", "needs --store, --run, --key, --state and --parts");
    if (pulse_check_run(o.run))
        return cli_usage_error("commit", "%s", pulse_last_error());

    pulse_publisher *p = NULL;
    pulse_sync_step s;
    int r = pulse_publisher_open(&p, &o);
    if (r)
        return cli_fail("commit", r, o.store_url);
    r = pulse_publisher_commit(p, (uint32_t)parts, step, wait_s, &s);
    pulse_publisher_close(&p);
    if (r)
        return cli_fail("commit", r, o.run);
    sync_print_published(&s, json);
    return cli_finish_stdout("commit");
}
