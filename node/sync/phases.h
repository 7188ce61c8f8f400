/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: where a step's time went, phase by phase, for the nodes' events and metrics (docs/node.md, "Where a step's time goes"). */
#ifndef PULSE_NODE_SYNC_PHASES_H
#define PULSE_NODE_SYNC_PHASES_H

#include "pulseweights/sync.h"

/* A publish, in milliseconds; a phase that did not run is 0. */
typedef struct publish_phases {
    double state_id;   /* a hashing pass of its own (a keyframe, a publish with no copy to diff against) */
    double diff;       /* the diff, NEW's state id hashed in the same scan */
    double upload;     /* the step's objects */
    double record;     /* the signed record, the head, the local index */
    double keep;       /* the copy of the published state brought up to it (after the record) */
    double wait;       /* a commit of parts: until every part's record of the step was there */
} publish_phases;

/* The phases of the last publish of P (zeroed at the start of each). */
const publish_phases *publisher_phases(const pulse_publisher *p);

/* An applied step, in milliseconds; a phase that did not run is 0. */
typedef struct apply_phases {
    double seen;       /* the head's write until this follower read it (two machines' clocks) */
    double fetch;      /* the step's objects downloaded; its chunks checked and staged meanwhile */
    double verify;     /* checking and staging left when the download ended, the result's state id */
    double journal;    /* the step journalled before the first write to the weights */
    double apply;      /* the weights written */
    double check;      /* a result check after the writes (recovery, keyframes), or the wait for the last step's */
    double hook;       /* the on-update command run after the step (--hook-after step) */
    double index;      /* the local index: the record stored and verified, the step marked applied */
} apply_phases;

#endif
