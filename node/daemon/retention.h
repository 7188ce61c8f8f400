/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the trainer node's chain-aware retention of its records and the objects they name. */
#ifndef PULSE_NODE_DAEMON_RETENTION_H
#define PULSE_NODE_DAEMON_RETENTION_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/store.h"

typedef struct node_retention_stats {
    size_t keyframes_kept;          /* this node's keyframes left (at most keep_keyframes) */
    uint64_t oldest_kept_keyframe;  /* its step, when keyframes_kept > 0 */
    size_t records_deleted, objects_deleted;
    size_t records_skipped;         /* keys under NODE's id whose content is not NODE's record there */
    uint64_t object_bytes_deleted;
} node_retention_stats;

/* One pass over run RUN for the node NODE (its public key), and with PARTS > 0 over its part runs
 * RUN.part-I-of-PARTS too (a trainer in parts: their objects lie under RUN's, and their records
 * go by the same steps as RUN's; the keyframes counted are RUN's): keeps NODE's newest KEEP_KEYFRAMES
 * (>= 1) keyframe records and every record of NODE after the oldest of them; deletes NODE's
 * older keyframe records and its sync-patch records up to and including that keyframe's step
 * (that patch starts from a state before the chain), then the objects they named that no record
 * still present (of any node) names, plus objects named by no record whose mtime is more than
 * ORPHAN_GRACE_S seconds old (leftovers of a crash; younger ones may be a publish in flight).
 * Records go before objects so a reader never finds a record whose objects are gone.
 * Only records that verify under NODE's key, carry run RUN and are filed under the key their
 * content gives are counted or deleted: anything else under NODE's id is skipped (logged once
 * per process) and left alone. Does nothing (no GETs) while NODE has at most KEEP_KEYFRAMES
 * keyframe keys. If a remaining record cannot be read, no object is deleted and the error is
 * returned; bytes that do not parse as a record name no object. */
int node_retention_run(pulse_store *st, const char *run, uint32_t parts, const uint8_t node[32],
                       unsigned keep_keyframes, uint64_t orphan_grace_s, node_retention_stats *out);

#endif
