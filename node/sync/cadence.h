/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a run's cadence (the publication times of its newest verified records) and the staleness bound derived from it. */
#ifndef PULSE_NODE_SYNC_CADENCE_H
#define PULSE_NODE_SYNC_CADENCE_H

#include <stddef.h>
#include <stdint.h>

#define CADENCE_RECORDS 16u     /* newest distinct steps kept */
#define CADENCE_MIN_RECORDS 5u  /* steps seen (4 intervals) before a bound is derived */
#define CADENCE_FACTOR 4u       /* the bound: this many median intervals... */
#define CADENCE_FLOOR_S 10u     /* ...and never less than this (times are whole seconds) */

/* The newest steps seen, ascending, each with its record's publication time (unix seconds). */
typedef struct record_cadence {
    uint64_t step[CADENCE_RECORDS], time[CADENCE_RECORDS];
    size_t n;
} record_cadence;

/* Notes a verified record: STEP published at TIME. A step already kept, or older than every kept
 * one when all slots are full, changes nothing; a record without a time (0) is not noted. */
void cadence_note(record_cadence *c, uint64_t step, uint64_t time);

/* The age in seconds past which the newest verified record is stale: CADENCE_FACTOR times the
 * median interval between consecutive kept steps, at least CADENCE_FLOOR_S; 0 (no bound) while
 * fewer than CADENCE_MIN_RECORDS steps are kept. */
uint64_t cadence_bound(const record_cadence *c);

#endif
