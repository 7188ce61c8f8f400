/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: an event of node/sync as a name and key/value strings, written as one line on stderr, text or JSON. */
#ifndef PULSE_NODE_SYNC_EVENTS_H
#define PULSE_NODE_SYNC_EVENTS_H

#include <stdarg.h>
#include <stddef.h>

/* Most key/value strings one event carries (keys and values together). */
#define SYNC_EVENT_KV_MAX 32

/* Where an event goes: its name ("applied", "refused", ...) and KV, alternating key and value
 * strings, NULL-terminated. The long-running follower node installs one (its log's format,
 * text or JSON); without one the line is written as text (sync_event_line). */
typedef void (*sync_event_fn)(void *ctx, const char *event, const char *const *kv);

/* Collects the key/value strings of AP (NULL-terminated, a NULL value read as "") into KV,
 * at most SYNC_EVENT_KV_MAX of them, and terminates KV with NULL. */
void sync_event_kv(const char *kv[SYNC_EVENT_KV_MAX + 1], va_list ap);

/* Writes one event to stderr with one write(2), so lines from several threads or processes
 * sharing stderr never interleave:
 *   text:  2026-11-29T09:10:11Z applied step=12 bytes=83110
 *   json:  {"time":"2026-11-29T09:10:11Z","event":"applied","step":12,"bytes":83110}
 * Values are quoted/escaped as each format needs; in JSON a value that is a plain decimal
 * number (-?, no leading zero, optional fraction: "12", "0.5") is written as a number, any
 * other text, and the value of a name or id key (name, file, run, node, state, last, ...: see
 * events.c), as a string. */
void sync_event_line(int json, const char *event, const char *const *kv);

#endif
