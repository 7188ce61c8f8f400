/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the entry points of `pulse node trainer` and `pulse node follow` (argv as the subverb sees it). */
#ifndef PULSE_NODE_DAEMON_NODE_CLI_H
#define PULSE_NODE_DAEMON_NODE_CLI_H

/* `pulse node trainer ...`: argv[0] is "trainer". Returns the exit status. (node/daemon/trainer_cli.c) */
int node_trainer_main(int argc, char **argv);

/* `pulse node follow ...`: argv[0] is "follow". Returns the exit status. (node/daemon/follower_cli.c)
 * tools/cmd-node.c holds a weak default that says the follower is not built. The strong
 * definition must be compiled INTO the pulse executable (node_cli_sources in
 * node/daemon/meson.build), not into the static library: a linker never extracts an archive
 * member to replace a weak definition it already has, so a library copy would be ignored. */
int node_follow_main(int argc, char **argv);

#endif
