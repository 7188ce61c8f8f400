/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a step's patch fetched and staged against the weights at once (node/sync/fetch_stage.c). */
#ifndef PULSE_NODE_SYNC_FETCH_STAGE_H
#define PULSE_NODE_SYNC_FETCH_STAGE_H

#include <stdint.h>

#include "node/patch/patch_stage.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

/* A staged step, ready to be written (patch_stage_write). */
typedef struct sync_staged {
    patch_stage *stage;
    pulse_patch *head;           /* the patch's head, which the stage reads */
    uint8_t result[32];          /* the state id the weights will hold once written */
    uint8_t head_digest[32];     /* SHA-256 of the patch's head: what the journal's replay checks */
    double fetch_ms, verify_ms;  /* the download (chunks staged meanwhile); what was left after it */
} sync_staged;

/* Fetches REC's patch (its first object) as parallel ranges into an unlinked temporary in DIR and
 * stages each chunk against TARGET (in the record's base state, only read here) as soon as its
 * bytes are in, on THREADS workers, the journal's parts into JFD (patch_stage_open; HASH 0: no
 * result id, the caller checks it after the write). The patch's
 * head is checked against the record's head object first (for a record without one, the whole
 * patch against its digest before the result counts). Adds the bytes fetched to *moved. On
 * success OUT holds the stage and its result id, which the caller compares with the record's
 * before writing; on failure nothing is held and TARGET is as it was. */
int sync_fetch_stage(pulse_store *store, const char *run, const pulse_record *rec, const char *dir,
                     const pulse_ckpt *target, int jfd, int threads, int hash, sync_staged *out, uint64_t *moved);
void sync_staged_close(sync_staged *s);

/* REC's patch whole (an engine's step): its objects fetched into DIR/fetch.data at their places
 * in the patch, each checked against its size and SHA-256, and the patch mapped read-only in
 * *map (*len bytes; munmap, or hand to patch_open_map_take). Nothing is returned on failure. */
int sync_fetch_patch_file(pulse_store *store, const char *run, const pulse_record *rec, const char *dir, void **map,
                          uint64_t *len, uint64_t *moved);

#endif
