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
 * Values are quoted/escaped as each format needs; in JSON a value that is a plain decimal
 * number (-?, no leading zero, optional fraction: "12", "0.5") is written as a number, any
 * other text, and the value of a name or id key (name, file, run, node, state, last, ...: see
 * log.c), as a string; a line is written with one write(2), so
 * lines from several threads or processes sharing stderr never interleave. */
void node_log(const char *event, ...) __attribute__((sentinel));

#endif
