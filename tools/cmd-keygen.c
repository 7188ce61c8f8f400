/* SPDX-License-Identifier: Apache-2.0 */
/* pulse keygen: placeholder until its owner lands it. */
#include <stdio.h>
#include "tools/cli.h"
#include "tools/verbs.h"

int cmd_keygen(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "pulse keygen: not built yet\n");
    return 1;
}
