/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the trainer node, which publishes every finished checkpoint of a watched directory. */
#ifndef PULSE_NODE_DAEMON_TRAINER_NODE_H
#define PULSE_NODE_DAEMON_TRAINER_NODE_H

#include <stdint.h>

#include "pulseweights/sync.h"

typedef struct node_trainer_opts {
    pulse_publish_opts pub;      /* store, run, key, state directory, values, threads */
    const char *watch_dir;       /* where the trainer writes checkpoints */
    const char *pattern;         /* NULL: the built-in checkpoint names; else a glob with {N} */
    uint64_t keyframe_every;     /* a keyframe when step % N == 0; 0: only the first publish */
    unsigned keep_keyframes;     /* retention: newest M keyframes and the chain after them; 0: keep all */
    uint64_t orphan_grace_s;     /* retention: unnamed objects younger than this are left alone */
    unsigned poll_ms;            /* between scans; a checkpoint must look the same in two scans */
    int once;                    /* scan twice (poll_ms apart), publish what is finished, return */
    const char *metrics_addr;    /* "ADDR:PORT" to serve metrics on, or NULL */
    const char *metrics_file;    /* written after each publish, or NULL */
    /* With pub.parts: this node publishes its part of each step; with commit also, it then commits
     * the step (pulse_publisher_commit, waiting up to commit_wait_s for the other parts) from the
     * state directory <pub.state_dir>/commit. */
    int commit;
    double commit_wait_s;
} node_trainer_opts;

void node_trainer_opts_default(node_trainer_opts *o);

/* Runs the node until SIGTERM/SIGINT (node_signals_install) or, with once, after one round.
 * Per checkpoint: published, skipped or error, one log line each; an error on one checkpoint
 * never stops the node. A checkpoint refused for what it is (malformed, conflicting) is not
 * tried again until it changes; one that failed for the store or the machine (network, server,
 * credentials, I/O) is tried again next poll, and nothing after it is published meanwhile
 * (with once: the node returns that error). Returns 0, or a negative PULSE_ERR_* when the node cannot run at all
 * (store, key, state directory, watched directory unreadable at start). */
int node_trainer_run(const node_trainer_opts *o);

#endif
