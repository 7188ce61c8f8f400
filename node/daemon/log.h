/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the nodes' event log, one line per event, as text or JSON, on stderr. */
#ifndef PULSE_NODE_DAEMON_LOG_H
#define PULSE_NODE_DAEMON_LOG_H

/* Output format of every event line. */
typedef enum { NODE_LOG_TEXT = 0, NODE_LOG_JSON = 1 } node_log_format;

void node_log_set_format(node_log_format f);

/* One event: a name ("published", "applied", "refused", "hook-failed", ...) and fields given
 * as alternating key/value strings, NULL-terminated:
 *   node_log("applied", "step", "12", "bytes", "83110", NULL);
 * text:  2026-11-29T09:10:11Z applied step=12 bytes=83110
 * json:  {"time":"2026-11-29T09:10:11Z","event":"applied","step":12,"bytes":83110}
 * Written by sync_event_line (node/sync/events.h: how values are quoted and typed) in the
 * format set here, as one line with one write(2). */
void node_log(const char *event, ...) __attribute__((sentinel));

/* The same for an event of node/sync (a sync_event_fn: the follower's events, installed by the
 * follower node with follower_on_event), so they come out in this log's format. */
void node_log_event(void *ctx, const char *event, const char *const *kv);

#endif
