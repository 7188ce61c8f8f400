/* SPDX-License-Identifier: Apache-2.0 */
/* The result state id of a step hashed after its write, on a thread at SCHED_IDLE, and the verdict waited for before the next write. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* SCHED_IDLE */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "base/fail.h"
#include "node/sync/late_check.h"

static void *check_main(void *arg)
{
    late_check *lc = arg;
    /* idle cycles only: the threads of the next step (and everything else on the machine) come
     * first; the pool pulse_ckpt_state_id starts inherits the policy */
    struct sched_param sp = { 0 };
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    char h1[65], h2[65];
    int r = pulse_ckpt_state_id(lc->w, lc->threads, lc->got);
    if (!r && memcmp(lc->got, lc->want, 32) != 0)
        r = pulse_fail(PULSE_ERR_CORRUPT, "after step %llu the weights are state %.16s.., not its result %.16s..",
                       (unsigned long long)lc->step, pulse_id_hex(lc->got, h1), pulse_id_hex(lc->want, h2));
    lc->verdict = r;
    snprintf(lc->detail, sizeof lc->detail, "%s", r ? pulse_last_error() : "");
    atomic_store(&lc->done, 1);
    return NULL;
}

int late_check_start(late_check *lc, const pulse_ckpt *w, const uint8_t want[32], uint64_t step, int threads)
{
    lc->w = w;
    memcpy(lc->want, want, 32);
    lc->step = step;
    lc->threads = threads;
    lc->verdict = 0;
    lc->detail[0] = '\0';
    atomic_store(&lc->done, 0);
    if (pthread_create(&lc->tid, NULL, check_main, lc) != 0)
        return pulse_fail(PULSE_ERR_NOMEM, "cannot start the result check of step %llu", (unsigned long long)step);
    lc->running = 1;
    return 0;
}

int late_check_ended(const late_check *lc)
{
    return !lc->running || atomic_load(&lc->done);
}

int late_check_wait(late_check *lc, uint64_t *step)
{
    if (!lc->running)
        return 0;
    pthread_join(lc->tid, NULL);
    lc->running = 0;
    if (step)
        *step = lc->step;
    return lc->verdict ? pulse_fail(lc->verdict, "%s", lc->detail) : 0;
}
