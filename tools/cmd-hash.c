/* SPDX-License-Identifier: Apache-2.0 */
/* pulse hash: placeholder until its owner lands it. */
#include <stdio.h>
#include "tools/cli.h"
#include "tools/verbs.h"

int cmd_hash(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "pulse hash: not built yet\n");
    return 1;
}
