/* SPDX-License-Identifier: Apache-2.0 */
/* pulse publish: publish one checkpoint of a run as a signed patch (or keyframe) in a store. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/names.h"
#include "base/progress.h"
#include "pulseweights/record.h"
#include "pulseweights/sync.h"
#include "tools/cli.h"
#include "tools/sync_json.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse publish --store URL --run R --key NAME.key --state DIR [options] CKPT\n"
        "\n"
        "Publishes CKPT as the next step of run R: the first publish is a keyframe (the whole\n"
        "checkpoint, chunked and compressed); later ones a patch against the last published\n"
        "state kept in DIR. Objects go first, then the signed record (the commit point), then\n"
        "the head. Re-running after a crash completes the same step (docs/sync.md).\n"
        "\n"
        "  --store URL     file:///dir or s3://bucket/prefix\n"
        "  --run R         run name ([A-Za-z0-9._-])\n"
        "  --key FILE      the node's secret key (pulse keygen); mode 0600\n"
        "  --state DIR     this publisher's state: index.db and the last published checkpoint\n"
        "  --step N        step number (default: one more than the last published, 0 first)\n"
        "  --keyframe      also publish a keyframe of this step\n"
        "  --values CODE   ulp (default) or abs\n"
        "  --threads N     threads (default: all cores)\n"
        "  --chunk N       elements per patch chunk (default 1M; K/M suffixes): the unit a follower\n"
        "                  holding slices fetches (docs/serving.md)\n"
        "  --context       context-coded patches (format 5, about 0.7x the bytes): only followers\n"
        "                  that hold the weights decode them (docs/patch-format.md)\n"
        "  --part I/N      CKPT is part I (0..N-1) of a model published by N publishers, each its\n"
        "                  own tensors: published as run R.part-I-of-N with its tensor hashes,\n"
        "                  for `pulse commit` (docs/sync.md \"A trainer in parts\"); needs --step\n"
        "On a terminal, a keyframe's upload shows bytes done, rate and ETA on stderr.\n"
        "\n"
        "  --json          print one JSON object instead of the line: step, kind, record, base and\n"
        "                  state (64 hex digits; base null for a keyframe), changes, dense_bytes,\n"
        "                  object_bytes, bytes (uploaded), already\n");
}

int cmd_publish(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("publish");
    }
    pulse_publish_opts o;
    pulse_publish_opts_default(&o);
    const char *ckpt = NULL;
    int64_t step = -1;
    unsigned flags = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v;
        if (!strcmp(a, "--keyframe")) {
            flags |= PULSE_PUBLISH_KEYFRAME;
            continue;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!strcmp(a, "--context")) {
            o.context = 1;
            continue;
        }
        if (a[0] != '-' || !a[1]) {
            if (ckpt)
                return cli_usage_error("publish", "too many arguments ('%s')", a);
            ckpt = a;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error("publish", "%s needs a value", a);
        const char *val = argv[++i];
        if (!strcmp(a, "--store")) o.store_url = val;
        else if (!strcmp(a, "--run")) o.run = val;
        else if (!strcmp(a, "--key")) o.key_path = val;
        else if (!strcmp(a, "--state")) o.state_dir = val;
        else if (!strcmp(a, "--step")) {
            if (cli_parse_u64(val, &v) || v > (uint64_t)INT64_MAX)
                return cli_usage_error("publish", "--step wants a non-negative number");
            step = (int64_t)v;
        } else if (!strcmp(a, "--values")) {
            if (!strcmp(val, "abs")) o.values = PULSE_VALUES_ABS;
            else if (!strcmp(val, "ulp")) o.values = PULSE_VALUES_ULP;
            else return cli_usage_error("publish", "--values wants abs or ulp, not '%s'", val);
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > 1024)
                return cli_usage_error("publish", "--threads wants a number from 1 to 1024");
            o.threads = (int)v;
        } else if (!strcmp(a, "--part")) {
            if (cli_parse_part(val, &o.part, &o.parts))
                return cli_usage_error("publish", "--part wants I/N with 0 <= I < N <= 4096, not '%s'", val);
        } else if (!strcmp(a, "--chunk")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > PULSE_PATCH_MAX_CHUNK)
                return cli_usage_error("publish", "--chunk wants a number from 1 to %u", PULSE_PATCH_MAX_CHUNK);
            o.chunk_elems = (uint32_t)v;
        } else {
            return cli_usage_error("publish", "unknown option '%s'", a);
        }
    }
    if (!o.store_url || !o.run || !o.key_path || !o.state_dir)
        return cli_usage_error("publish", "needs --store, --run, --key and --state");
    if (pulse_check_run(o.run))
        return cli_usage_error("publish", "%s", pulse_last_error());
    if (!ckpt)
        return cli_usage_error("publish", "needs the checkpoint to publish");
    if (o.parts && step < 0)
        return cli_usage_error("publish", "--part needs --step: every part and the commit name the same step");

    pulse_publisher *p = NULL;
    pulse_sync_step s;
    pulse_meter meter;
    pulse_meter_begin(&meter, "keyframe", -1);   /* on a terminal only */
    o.on_progress = pulse_meter_fn;
    o.progress_ctx = &meter;
    int r = pulse_publisher_open(&p, &o);
    if (r)
        return cli_fail("publish", r, o.store_url);
    r = pulse_publisher_publish(p, ckpt, step, flags, &s);
    pulse_meter_end(&meter);
    if (!r)
        r = pulse_publisher_sync(p);   /* the next publish's base on disk before this returns */
    pulse_publisher_close(&p);
    if (r)
        return cli_fail("publish", r, ckpt);
    sync_print_published(&s, json);
    return cli_finish_stdout("publish");
}
