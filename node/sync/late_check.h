/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a step's result state id checked after its write, on idle cycles, for a follower whose base is its own last write (node/sync/late_check.c). */
#ifndef PULSE_NODE_SYNC_LATE_CHECK_H
#define PULSE_NODE_SYNC_LATE_CHECK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "pulseweights/checkpoint.h"

typedef struct late_check {
    pthread_t tid;
    int running;                 /* a check was started and not waited for */
    atomic_int done;             /* it ended (its verdict below is set) */
    const pulse_ckpt *w;
    uint8_t want[32], got[32];
    uint64_t step;
    int threads;
    int lift;                    /* at SCHED_IDLE, lifted to the normal policy when waited for */
    int verdict;                 /* 0: the weights are the step's result; else the error */
    char detail[300];
} late_check;

/* Hashes W (the state id, on THREADS threads at SCHED_IDLE: cycles no other thread wants) and
 * compares it with WANT, the result of STEP, on a thread of its own. W must stay mapped, and
 * unwritten, until late_check_wait. */
int late_check_start(late_check *lc, const pulse_ckpt *w, const uint8_t want[32], uint64_t step, int threads);
/* Whether a started check has ended (late_check_wait then does not block). */
int late_check_ended(const late_check *lc);
/* Waits for the check started, if any: 0 when none or it passed; else its error (the detail set:
 * PULSE_ERR_CORRUPT when the weights are another state), *step the step it checked. */
int late_check_wait(late_check *lc, uint64_t *step);

#endif
