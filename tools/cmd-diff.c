/* SPDX-License-Identifier: Apache-2.0 */
/* pulse diff: placeholder until its owner lands it. */
#include <stdio.h>
#include "tools/cli.h"
#include "tools/verbs.h"

int cmd_diff(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "pulse diff: not built yet\n");
    return 1;
}
