/* SPDX-License-Identifier: Apache-2.0 */
/* What publish, commit and pull did, as their output line or --json object. */
#ifndef PULSE_TOOLS_SYNC_JSON_H
#define PULSE_TOOLS_SYNC_JSON_H

#include "pulseweights/sync.h"

/* Prints the fields of S, without braces, on stdout: "step":N,"kind":"...","record":"...",
 * "base":"<64 hex>|null","state":"<64 hex>","changes":N,"dense_bytes":N,"object_bytes":N,
 * "bytes":N (bytes moved: uploaded or downloaded). */
void sync_json_step_fields(const pulse_sync_step *s);

/* What publish and commit print for S on stdout: one line, or with JSON one object (the fields
 * above and "already"). */
void sync_print_published(const pulse_sync_step *s, int json);

#endif
