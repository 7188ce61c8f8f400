/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the state directory's record of a running on-update command (the follower node's hook writes it), reaped by the next holder. */
#ifndef PULSE_NODE_SYNC_STALE_HOOK_H
#define PULSE_NODE_SYNC_STALE_HOOK_H

/* STATE_DIR/hook.pgid holds "PGID ID\n" while a node's on-update command runs: its process
 * group and the random id every process it starts carries in its environment as
 * PULSE_HOOK_ID=ID. It lives here, not with the hook, because every holder of a state
 * directory (pulse pull and the bindings too, not only the nodes) reaps it at open. */
#define STALE_HOOK_FILE "hook.pgid"
#define STALE_HOOK_ID_VAR "PULSE_HOOK_ID="
#define STALE_HOOK_PATH_MAX 4200

/* STATE_DIR/hook.pgid into OUT. */
void stale_hook_path(const char *state_dir, char out[STALE_HOOK_PATH_MAX]);

/* Before a node touches the weights: when STATE_DIR/hook.pgid names the command of a node that
 * died while it ran, kills every live process carrying its PULSE_HOOK_ID (its group with them)
 * and waits until none is left, then removes the record. 0 when there was none. The caller
 * holds the state directory's lock, so no live node's command is touched. */
int stale_hook_reap(const char *state_dir);

#endif
