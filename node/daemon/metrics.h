/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a node's metrics (the follower's, or the trainer's) in the Prometheus text exposition format (0.0.4), as a file and over HTTP. */
#ifndef PULSE_NODE_DAEMON_METRICS_H
#define PULSE_NODE_DAEMON_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "node/daemon/phase_hist.h"

typedef struct node_metrics {
    int trainer;                /* a trainer node's: steps published, and its phases; else a follower's */
    uint64_t steps_published, publish_failures, published_step;
    int have_published;
    node_phase_hist phases;     /* pulse_step_phase_seconds */
    uint64_t steps_applied, bytes_fetched, verify_failures, hook_failures, store_retries;
    uint64_t held_step;
    int have_held;
    uint64_t lag_steps;
    double last_step_seconds;   /* 0 until a step is applied */
    int store_behind;           /* the store's newest verified record is older than the held state */
    int untrusted_state;        /* the held state is produced by no record trusted now */
    /* What the age-derived figures below are computed from, at the time they are shown: */
    uint64_t newest_time;       /* publication time of the newest verified record (0: none, or not known) */
    int lagging;                /* that record's step is not held yet */
    uint64_t max_staleness;     /* the staleness bound in seconds (0: none): --max-staleness, or derived */
    int bound_derived;          /* ... from the run's cadence (node/sync/cadence.h): not while lagging */
    /* Filled by node_metrics_age: */
    int have_age;               /* a record verified: its publication time is known */
    double newest_age_seconds;  /* seconds since the newest verified record was published */
    double lag_seconds;         /* that age while lagging, else 0 */
    int stale;                  /* that age is over max_staleness (a derived bound: and not lagging) */
} node_metrics;

/* Fills the age-derived fields of M for the wall-clock time NOW (seconds since the epoch), so a
 * scrape during a long step shows the age as it is then, not as it was when the step began. */
void node_metrics_age(node_metrics *m, int64_t now);

/* The exposition text (NUL-terminated) into buf; PULSE_ERR_LIMIT when cap is too small
 * (NODE_METRICS_TEXT always suffices). */
#define NODE_METRICS_TEXT 32768
int node_metrics_render(const node_metrics *m, char *buf, size_t cap);

/* Writes TEXT to PATH atomically (a new PATH.tmp.XXXXXX, then rename), so a scraper never reads half. */
int node_metrics_write_file(const char *path, const char *text);

/* An HTTP server on its own thread: it answers GET /metrics at once from the last snapshot
 * published, whatever the node's loop is doing (a keyframe restore, a hook, a slow store). */
typedef struct node_metrics_server node_metrics_server;

/* Listens on "ADDR:PORT" (IPv4, e.g. 127.0.0.1:9109) and starts the server thread. */
int node_metrics_listen(node_metrics_server **out, const char *addr_port);

/* Replaces the snapshot the server answers from (cheap: a copy under a mutex). */
void node_metrics_publish(node_metrics_server *s, const node_metrics *m);

/* Stops the server thread, joins it, closes every connection. NULL or *s NULL: nothing. */
void node_metrics_close(node_metrics_server **s);

#endif
