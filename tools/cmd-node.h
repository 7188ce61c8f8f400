/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the entry points of `pulse node trainer` and `pulse node follow` (argv as the subverb sees it). */
#ifndef PULSE_TOOLS_CMD_NODE_H
#define PULSE_TOOLS_CMD_NODE_H

/* `pulse node trainer ...`: argv[0] is "trainer". Returns the exit status. (tools/cmd-node-trainer.c) */
int node_trainer_main(int argc, char **argv);

/* `pulse node follow ...`: argv[0] is "follow". Returns the exit status. (tools/cmd-node-follow.c) */
int node_follow_main(int argc, char **argv);

#endif
