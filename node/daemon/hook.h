/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the follower's on-update command, run through /bin/sh with a timeout, never outliving the node. */
#ifndef PULSE_NODE_DAEMON_HOOK_H
#define PULSE_NODE_DAEMON_HOOK_H

#include <stddef.h>

/* Runs `/bin/sh -c CMD` with ENV ("NAME=value" strings, n of them) and PULSE_HOOK_ID (a fresh
 * random id) added to the environment, in its own process group, and waits up to timeout_ms
 * (0: no limit). A command still running then is killed with its whole group (SIGKILL). The
 * shell gets SIGKILL when the node dies (PR_SET_PDEATHSIG); with STATE_DIR (may be NULL) its
 * group and id are recorded in STATE_DIR/hook.pgid while it runs, so that the next node on that
 * directory kills what the shell started (stale_hook_reap, node/sync/stale_hook.h). Returns 0 when it exited 0;
 * otherwise -1 and WHY says what happened ("exit 3", "signal 9", "timeout after 5000 ms",
 * "fork: ..."). A stop signal to the node does not cut the command short: the step is finished
 * first. */
int node_hook_run(const char *cmd, const char *const *env, size_t n, unsigned timeout_ms, const char *state_dir,
                  char *why, size_t cap);

#endif
