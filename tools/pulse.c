/* SPDX-License-Identifier: Apache-2.0 */
/* The `pulse` command: a table of verbs, one file each (tools/cmd-<verb>.c). */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "tools/cli.h"
#include "tools/verbs.h"

struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct verb verbs[] = {
    { "diff",    cmd_diff,    "write the sparse patch that turns one checkpoint into the next" },
    { "apply",   cmd_apply,   "apply a patch to a checkpoint (to a new file or in place), verified" },
    { "inspect", cmd_inspect, "show what a patch holds: changes, density, bytes per stream" },
    { "hash",    cmd_hash,    "print the state id of a checkpoint" },
    { "squash",  cmd_squash,  "compose consecutive patches into one" },
    { "store",   cmd_store,   "list, put, get, remove and presign objects in a store" },
    { "synth",   cmd_synth,   "write a synthetic RL trajectory of BF16 checkpoints" },
    { "bench",   cmd_bench,   "measure the codec against zstd, xdelta3 and memory bandwidth" },
    { "demo",    cmd_demo,    "run the demo: synthetic trajectory, diff and apply, what moved" },
    { "publish", cmd_publish, "publish a checkpoint as a signed patch or keyframe in a store" },
    { "commit",  cmd_commit,  "commit a step its part publishers published, as one record" },
    { "pull",    cmd_pull,    "bring local weights to the newest published state, verified" },
    { "keygen",  cmd_keygen,  "make an Ed25519 key pair: NAME.key (secret) and NAME.pub" },
    { "manifest", cmd_manifest, "list, show and audit the signed records and objects of a run" },
    { "node",    cmd_node,    "run a long-lived node: trainer (publish each checkpoint) or follow" },
    { "status",  cmd_status,  "show every node of a run: trainer heads, follower receipts and lag" },
    { "loco",    cmd_loco,    "PULSELoCo trainer rounds: gate, shards, fixed-order mean, outer step" },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: pulse <verb> [options]   (pulse <verb> --help for each)\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-8s %s\n", verbs[i].name, verbs[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return cli_finish_stdout("help");
    }
    if (!strcmp(argv[1], "--version")) {
        printf("pulse %s\n", PULSE_VERSION);
        return cli_finish_stdout("version");
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(argv[1], verbs[i].name))
            return verbs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "pulse: unknown verb '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
