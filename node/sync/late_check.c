/* SPDX-License-Identifier: Apache-2.0 */
/* The result state id of a step hashed after its write, on idle cycles (lifted to a fair share when the next step waits), and the verdict waited for before the next write. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* SCHED_IDLE */
#endif
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/sync/late_check.h"

/* Whether this process may lift a thread out of SCHED_IDLE again (CAP_SYS_NICE, approximated by
 * root, or an RLIMIT_NICE that allows nice 0). */
static int may_lift(void)
{
    struct rlimit rl;
    return geteuid() == 0 || (getrlimit(RLIMIT_NICE, &rl) == 0 && rl.rlim_cur >= 20);
}

static void *check_main(void *arg)
{
    late_check *lc = arg;
    /* Idle cycles only: the threads of the next step (and everything else on the machine) come
     * first; the pool pulse_ckpt_state_id starts inherits the policy and the nice value. A
     * process that could not lift it again when the next step waits (late_check_wait) takes
     * nice 10 instead: a tenth of a busy core's share, never starved. */
    struct sched_param sp = { 0 };
    if (lc->lift)
        (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    else
        (void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
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
    lc->lift = may_lift();
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

/* A machine with no idle cycles (an engine, another job on every core) would starve an idle
 * check, and the next step waits for it: the waiter lifts the check's threads, the only ones of
 * this process at SCHED_IDLE, to the normal policy, so the wait is bounded by a fair share. */
static void lift_idle_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return;
    struct sched_param sp = { 0 };
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        pid_t tid = (pid_t)strtol(e->d_name, NULL, 10);
        if (tid > 0 && sched_getscheduler(tid) == SCHED_IDLE)
            (void)sched_setscheduler(tid, SCHED_OTHER, &sp);
    }
    closedir(d);
}

int late_check_wait(late_check *lc, uint64_t *step)
{
    if (!lc->running)
        return 0;
    if (lc->lift && !atomic_load(&lc->done))
        lift_idle_threads();
    pthread_join(lc->tid, NULL);
    lc->running = 0;
    if (step)
        *step = lc->step;
    return lc->verdict ? pulse_fail(lc->verdict, "%s", lc->detail) : 0;
}
