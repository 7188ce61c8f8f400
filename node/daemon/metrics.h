/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the follower's metrics in the Prometheus text exposition format (0.0.4), as a file and over HTTP. */
#ifndef PULSE_NODE_DAEMON_METRICS_H
#define PULSE_NODE_DAEMON_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct node_metrics {
    uint64_t steps_applied, bytes_fetched, verify_failures, hook_failures, store_retries;
    uint64_t held_step;
    int have_held;
    uint64_t lag_steps;
    double lag_seconds;
    double last_step_seconds;   /* 0 until a step is applied */
    int have_age;               /* a record verified: its publication time is known */
    double newest_age_seconds;  /* seconds since the newest verified record was published */
    int stale;                  /* that age is over --max-staleness */
    int store_behind;           /* the store's newest verified record is older than the held state */
    int untrusted_state;        /* the held state is produced by no record trusted now */
} node_metrics;

/* The exposition text (NUL-terminated) into buf; PULSE_ERR_LIMIT when cap is too small. */
int node_metrics_render(const node_metrics *m, char *buf, size_t cap);

/* Writes TEXT to PATH atomically (a new PATH.tmp.XXXXXX, then rename), so a scraper never reads half. */
int node_metrics_write_file(const char *path, const char *text);

/* A tiny single-threaded HTTP server answering every request with the metrics text. */
typedef struct node_metrics_server node_metrics_server;

/* Listens on "ADDR:PORT" (IPv4, e.g. 127.0.0.1:9109). */
int node_metrics_listen(node_metrics_server **out, const char *addr_port);

/* Answers the connections that arrive within wait_ms (returns early when the stop flag of
 * node/daemon/signals.h is raised). */
void node_metrics_serve(node_metrics_server *s, const char *text, unsigned wait_ms);

void node_metrics_close(node_metrics_server **s);

#endif
