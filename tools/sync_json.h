/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON form of what publish and pull did, for their --json output. */
#ifndef PULSE_TOOLS_SYNC_JSON_H
#define PULSE_TOOLS_SYNC_JSON_H

#include "pulseweights/sync.h"

/* Prints the fields of S, without braces, on stdout: "step":N,"kind":"...","record":"...",
 * "base":"<64 hex>|null","state":"<64 hex>","changes":N,"dense_bytes":N,"object_bytes":N,
 * "bytes":N (bytes moved: uploaded or downloaded). */
void sync_json_step_fields(const pulse_sync_step *s);

#endif
