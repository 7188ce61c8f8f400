/* SPDX-License-Identifier: Apache-2.0 */
/* pulse synth: placeholder until its owner lands it. */
#include <stdio.h>
#include "tools/cli.h"
#include "tools/verbs.h"

int cmd_synth(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "pulse synth: not built yet\n");
    return 1;
}
