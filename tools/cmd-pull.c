/* SPDX-License-Identifier: Apache-2.0 */
/* pulse pull: bring a local weights file to the newest published state of a run, verified step by step. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/names.h"
#include "base/progress.h"
#include "node/sync/follow_internal.h"
#include "pulseweights/record.h"
#include "pulseweights/sync.h"
#include "tools/cli.h"
#include "tools/sync_json.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse pull --store URL --run R --trust PUB|DIR [--trust ...] --state DIR --weights FILE\n"
        "                  [--threads N] [--deadline S]\n"
        "\n"
        "Brings FILE to the newest state published for run R by a trusted key: from the newest\n"
        "keyframe when FILE does not exist, then every patch in chain order. Each step is verified\n"
        "(signature, chain, no rollback, object sizes and digests, the whole patch) before FILE is\n"
        "touched, and the result state id is checked after; FILE is synced to disk before the\n"
        "command returns. Prints one line per applied step.\n"
        "\n"
        "On stderr it names what it skipped (the run still ends with exit 0): each record that does\n"
        "not verify (`refused record=KEY reason=...`, the first 16, then `refused-more count=N`), each\n"
        "key under records/ that is no record key (`ignored key=KEY`), and a store whose newest\n"
        "verified record is older than the state FILE holds (`store-behind held=H newest=N`: a\n"
        "restored snapshot or a replica behind; nothing is rolled back).\n"
        "\n"
        "  --store URL     file:///dir or s3://bucket/prefix\n"
        "  --run R         run name\n"
        "  --trust P       a .pub file or a directory of them (repeatable)\n"
        "  --state DIR     this follower's state (index.db, the step journal)\n"
        "  --weights FILE  the local checkpoint to keep current\n"
        "  --threads N     threads (default: all cores)\n"
        "  --deadline S    give up after S seconds, every request and retry included (default 3600;\n"
        "                  0: no bound); the weights stay at the last step applied\n"
        "  --json          print one JSON object at the end instead of the lines: weights, step,\n"
        "                  state (64 hex digits), applied (count), bytes (fetched in all), and\n"
        "                  steps: one object per applied step (as pulse publish --json prints)\n"
        "\n"
        "On a terminal, each step's download shows bytes done, rate and ETA on stderr.\n"
        "\n"
        "Each step's patch is fetched into DIR/fetch.data (kept, and written over by the next\n"
        "step), so DIR needs room for the largest patch.\n");
}

/* The progress meter of the step in hand, ended before its line. */
static pulse_meter meter;

/* --json: the applied steps, printed once the pull is over. */
struct step_list {
    pulse_sync_step *v;
    size_t n, cap;
};

static int keep_step(void *ctx, const pulse_sync_step *s)
{
    struct step_list *l = ctx;
    pulse_meter_end(&meter);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        pulse_sync_step *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;   /* stops the pull: the JSON could not say what it did */
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *s;
    return 0;
}

static void print_json(const char *weights, const pulse_sync_step *held, size_t applied, const struct step_list *l)
{
    char hex[65];
    uint64_t bytes = 0;
    for (size_t i = 0; i < l->n; i++)
        bytes += l->v[i].moved_bytes;
    printf("{\"weights\":");
    cli_json_str(weights);
    printf(",\"step\":%" PRIu64 ",\"state\":\"%s\",\"applied\":%zu,\"bytes\":%" PRIu64 ",\"steps\":[",
           held->step, pulse_id_hex(held->result, hex), applied, bytes);
    for (size_t i = 0; i < l->n; i++) {
        printf(i ? ",{" : "{");
        sync_json_step_fields(&l->v[i]);
        putchar('}');
    }
    printf("]}\n");
}

static int print_step(void *ctx, const pulse_sync_step *s)
{
    (void)ctx;
    pulse_meter_end(&meter);
    char hex[65];
    printf("step %" PRIu64 ": applied %s, %" PRIu64 " changes, %" PRIu64 " bytes fetched for %" PRIu64
           " dense (%.2f%%), state %.16s\n",
           s->step, pulse_record_kind_name(s->kind), s->changes, s->moved_bytes, s->dense_bytes,
           s->dense_bytes ? 100.0 * (double)s->moved_bytes / (double)s->dense_bytes : 0.0,
           pulse_id_hex(s->result, hex));
    fflush(stdout);
    return 0;
}

int cmd_pull(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("pull");
    }
    pulse_follow_opts o;
    pulse_follow_opts_default(&o);
    o.deadline_s = 3600;
    pulse_trust *trust = NULL;
    int r = pulse_trust_new(&trust);
    if (r)
        return cli_fail("pull", r, "trust set");
    int ntrust = 0, rc = 0, json = 0;
    struct step_list steps = { 0 };
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        uint64_t v;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (i + 1 >= argc) {
            rc = cli_usage_error("pull", a[0] == '-' ? "%s needs a value" : "unexpected argument '%s'", a);
            break;
        }
        const char *val = argv[++i];
        if (!strcmp(a, "--store")) o.store_url = val;
        else if (!strcmp(a, "--run")) o.run = val;
        else if (!strcmp(a, "--state")) o.state_dir = val;
        else if (!strcmp(a, "--weights")) o.weights_path = val;
        else if (!strcmp(a, "--trust")) {
            if ((r = pulse_trust_load(trust, val)) != 0)
                rc = cli_fail("pull", r, val);
            ntrust++;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_u64(val, &v) || v < 1 || v > 1024)
                rc = cli_usage_error("pull", "--threads wants a number from 1 to 1024");
            else
                o.threads = (int)v;
        } else if (!strcmp(a, "--deadline")) {
            if (cli_parse_u64(val, &v) || v > 1000000000)
                rc = cli_usage_error("pull", "--deadline wants seconds from 0 to 1000000000");
            else
                o.deadline_s = (double)v;
        } else {
            rc = cli_usage_error("pull", "unknown %s '%s'", a[0] == '-' ? "option" : "argument", a);
        }
    }
    if (!rc && (!o.store_url || !o.run || !ntrust || !o.state_dir || !o.weights_path))
        rc = cli_usage_error("pull", "needs --store, --run, --trust, --state and --weights");
    if (!rc && pulse_check_run(o.run))
        rc = cli_usage_error("pull", "%s", pulse_last_error());
    if (rc) {
        pulse_trust_free(&trust);
        return rc;
    }
    o.trust = trust;
    o.on_step = json ? keep_step : print_step;
    o.ctx = &steps;
    pulse_meter_begin(&meter, "fetched", -1);   /* on a terminal only */
    o.on_progress = pulse_meter_fn;
    o.progress_ctx = &meter;
    pulse_follower *f = NULL;
    size_t applied = 0;
    pulse_sync_step held;
    r = pulse_follower_open(&f, &o);
    if (!r) {
        follower_report_pulls(f);
        r = pulse_follower_pull(f, &applied, &held);
    }
    if (!r)
        r = pulse_follower_sync(f);   /* FILE on disk before this says so */
    pulse_follower_close(&f);
    pulse_meter_end(&meter);
    pulse_trust_free(&trust);
    if (r) {
        free(steps.v);
        return cli_fail("pull", r, o.weights_path);
    }
    char hex[65];
    if (json) {
        print_json(o.weights_path, &held, applied, &steps);
        free(steps.v);
        return cli_finish_stdout("pull");
    }
    printf("%s: at step %" PRIu64 ", state %.16s (%zu step%s applied)\n", o.weights_path, held.step,
           pulse_id_hex(held.result, hex), applied, applied == 1 ? "" : "s");
    return cli_finish_stdout("pull");
}
