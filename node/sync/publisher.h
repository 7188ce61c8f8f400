/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the publisher's handle, shared by the publish of a step (publish.c) and the commit of a step published in parts (commit_parts.c). */
#ifndef PULSE_NODE_SYNC_PUBLISHER_H
#define PULSE_NODE_SYNC_PUBLISHER_H

#include <stdint.h>

#include "node/sync/part_hashes.h"
#include "node/sync/phases.h"
#include "node/sync/sync_internal.h"
#include "node/sync/unsynced.h"
#include "pulseweights/manifest.h"
#include "pulseweights/sync.h"

struct pulse_publisher {
    pulse_publish_opts o;
    char *run, *state_dir;     /* run: the part run "R.part-I-of-N" when o.parts is set */
    pulse_store *st;
    pulse_store *st_up;        /* the patch's data, uploaded by a thread of its own during the diff */
    pulse_secret_key *key;
    uint8_t node[32];
    pulse_index *ix;
    unsynced_note note;        /* the copy of the last state's (node/sync/unsynced.h) */
    state_dir dir;             /* locked while open: one process publishes from this state */
    publish_phases phases;     /* of the last publish */
    uint8_t (*hashes)[32];     /* a part's tensor hashes of the step in hand (o.parts set) */
    part_hashes committed;     /* a committer's: the model's tensor hashes at its last commit, */
    uint8_t committed_state[32];   /* of this state (n 0: none kept), so the next needs no GET */
};

/* The head moved to the record REL (it carries the record's BYTES), the record indexed as this
 * node's. */
int publisher_move_head(pulse_publisher *p, const char *rel, const uint8_t *bytes, size_t len);

/* Before publishing STEP (STATE): the node's head in the store must name this publisher's last
 * record or this very step's (publish.c). */
int publisher_check_head(pulse_publisher *p, int have_last, uint64_t last_step, const uint8_t last_state[32],
                         uint64_t step, const uint8_t state[32]);
/* The same judged on a GET of the head made already (publisher_head_key): R its result, DATA and
 * LEN its bytes (taken, freed here); a committer fetches it beside the parts' records. */
int publisher_check_head_got(pulse_publisher *p, int r, void *data, size_t len, int have_last, uint64_t last_step,
                             const uint8_t last_state[32], uint64_t step, const uint8_t state[32]);
int publisher_head_key(const pulse_publisher *p, char key[SYNC_KEY_MAX]);

#endif
