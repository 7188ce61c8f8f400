/* SPDX-License-Identifier: Apache-2.0 */
/* The verbs of the `pulse` CLI: one cmd-<verb>.c each; a verb's return value is the exit status. */
#ifndef PULSE_TOOLS_VERBS_H
#define PULSE_TOOLS_VERBS_H

/* To add a verb: write tools/cmd-<verb>.c with cmd_<verb>(), declare it here, add a row to
 * the table in tools/pulse.c and the file to tools/meson.build. Every verb answers --help
 * (exit 0, usage on stdout) and reports a failure as one line on stderr, exit non-zero. */
int cmd_diff(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_hash(int argc, char **argv);
int cmd_squash(int argc, char **argv);
int cmd_store(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_publish(int argc, char **argv);
int cmd_commit(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_manifest(int argc, char **argv);
int cmd_node(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_loco(int argc, char **argv);

#endif
