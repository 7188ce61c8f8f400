/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the long-running follower node (pulse node follow): poll heads, apply, hook, receipt, metrics. */
#ifndef PULSE_NODE_DAEMON_FOLLOW_NODE_H
#define PULSE_NODE_DAEMON_FOLLOW_NODE_H

#include "pulseweights/keys.h"

typedef struct node_follow_cfg {
    const char *store_url, *run, *state_dir, *weights_path;
    const pulse_trust *trust;        /* borrowed */
    const char *key_path;            /* NULL: no receipts */
    const char *on_update;           /* NULL: no hook */
    unsigned hook_timeout_ms;        /* 0: default 60000 */
    int hook_after_pull;             /* run the hook once after a pull that applied steps, not per step */
    unsigned poll_ms;                /* 0: default 1000; each wait is jittered by +-25% */
    unsigned max_behind;             /* 0: FOLLOW_DEFAULT_MAX_BEHIND */
    const char *metrics_addr;        /* "127.0.0.1:PORT" or NULL */
    const char *metrics_file;        /* or NULL */
    int once;                        /* catch up once, then exit */
    int durable;                     /* sync the weights after every step */
    int threads;
    uint64_t deadline_s;             /* one pull or poll, every request included; 0: no bound */
    uint64_t max_staleness;          /* seconds; 0: no bound (pulse_stale stays 0) */
    int max_staleness_set;           /* given; else the bound is derived from the run's cadence */
    int keep_untrusted;              /* keep a held state no trusted record produces (warn only) */
} node_follow_cfg;

/* Runs the follower until SIGTERM/SIGINT (or once). Returns 0 on a clean stop; a negative
 * PULSE_ERR_* when it cannot start (store, index, key, metrics address) or, with once, when
 * the catch-up failed. Every event is logged with node_log. */
int node_follow_run(const node_follow_cfg *cfg);

#endif
