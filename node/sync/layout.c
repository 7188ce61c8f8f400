/* SPDX-License-Identifier: Apache-2.0 */
/* Bucket keys of a run for the publisher and follower, made by the layout's owner (manifest/layout.c). */
#include "manifest/layout.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/keys.h"

int sync_run_key(const char *run, const char *rel, char out[SYNC_KEY_MAX])
{
    return pulse_layout_join(out, SYNC_KEY_MAX, run, rel);
}

int sync_object_key(const char *run, const uint8_t digest[32], char out[SYNC_KEY_MAX])
{
    return pulse_layout_object_key(out, SYNC_KEY_MAX, run, digest);
}

void sync_head_rel(const uint8_t node[32], char out[SYNC_KEY_MAX])
{
    pulse_layout_head(out, SYNC_KEY_MAX, node);   /* 75 bytes: always fits */
}
