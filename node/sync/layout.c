/* SPDX-License-Identifier: Apache-2.0 */
/* Bucket keys of a run (docs/sync.md): objects/<digest>, records/..., heads/sync/<node>. */
#include <stdio.h>

#include "base/fail.h"
#include "base/names.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/keys.h"

int sync_run_key(const char *run, const char *rel, char out[SYNC_KEY_MAX])
{
    int r = pulse_check_run(run);   /* the run is a key segment: never "..", never "x/y" */
    if (r)
        return r;
    int n = snprintf(out, SYNC_KEY_MAX, "%s/%s", run, rel);
    if (n < 0 || n >= SYNC_KEY_MAX)
        return pulse_fail(PULSE_ERR_LIMIT, "key too long: %s/%s", run, rel);
    return 0;
}

int sync_object_key(const char *run, const uint8_t digest[32], char out[SYNC_KEY_MAX])
{
    char hex[65];
    pulse_hex_encode(digest, 32, hex);
    char rel[80];
    snprintf(rel, sizeof rel, "objects/%s", hex);
    return sync_run_key(run, rel, out);
}

void sync_head_rel(const uint8_t node[32], char out[SYNC_KEY_MAX])
{
    char hex[PULSE_NODE_ID_HEX];
    pulse_node_id_hex(node, hex);
    snprintf(out, SYNC_KEY_MAX, "heads/sync/%s", hex);
}
