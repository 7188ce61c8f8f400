/* SPDX-License-Identifier: Apache-2.0 */
/* pulse node trainer: argument parsing for the trainer node (node/daemon/trainer.c does the work). */
#include <stdio.h>

#include "node/daemon/node_cli.h"

int node_trainer_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "pulse node trainer: not built yet\n");
    return 1;
}
