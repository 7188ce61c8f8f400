/* SPDX-License-Identifier: Apache-2.0 */
/* pulse status: every node of a run, trainer heads and follower receipts, with lag. */
#include <stdio.h>

#include "tools/cli.h"
#include "tools/verbs.h"

int cmd_status(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "pulse status: not built yet\n");
    return 1;
}
