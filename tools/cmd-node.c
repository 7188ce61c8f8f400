/* SPDX-License-Identifier: Apache-2.0 */
/* pulse node: the long-running nodes, one subverb each (trainer, follow). */
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/cmd-node.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse node <trainer|follow> [options]   (pulse node <subverb> --help for each)\n"
        "\n"
        "  trainer   watch a checkpoint directory and publish each finished checkpoint (docs/node.md)\n"
        "  follow    keep local weights at the newest trusted state, apply in place, write receipts\n");
}

int cmd_node(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return cli_finish_stdout("node");
    }
    if (!strcmp(argv[1], "trainer"))
        return node_trainer_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "follow"))
        return node_follow_main(argc - 1, argv + 1);
    return cli_usage_error("node", "unknown subverb '%s' (trainer or follow)", argv[1]);
}
