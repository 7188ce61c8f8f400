/* SPDX-License-Identifier: Apache-2.0 */
/* The result state id of a step hashed after its write, on idle cycles (lifted and helped when the next step waits), and the verdict waited for before the next write. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* SCHED_IDLE, gettid */
#endif
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/sync/late_check.h"

/* Whether this process may lift a thread out of SCHED_IDLE again (CAP_SYS_NICE, approximated by
 * root, or an RLIMIT_NICE that allows nice 0). */
static int may_lift(void)
{
    struct rlimit rl;
    return geteuid() == 0 || (getrlimit(RLIMIT_NICE, &rl) == 0 && rl.rlim_cur >= 20);
}

/* Claims runs of state chunks until none is left. */
static void hash_runs(late_check *lc)
{
    for (;;) {
        uint64_t g = atomic_fetch_add(&lc->next, CKPT_CHUNKS_A_RUN);
        if (g >= lc->ids.total)
            return;
        uint64_t left = lc->ids.total - g;
        ckpt_chunk_ids_hash_run(&lc->ids, g, left < CKPT_CHUNKS_A_RUN ? (size_t)left : CKPT_CHUNKS_A_RUN);
    }
}

static void *worker(void *arg)
{
    late_worker *a = arg;
    late_check *lc = a->lc;
    /* Idle cycles only: the threads of the next step (and everything else on the machine) come
     * first. A process that could not lift the workers again when the next step waits takes nice
     * 10 instead: a tenth of a busy core's share, never starved. */
    struct sched_param sp = { 0 };
    if (lc->lift)
        (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    else
        (void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
    atomic_store(&lc->ktid[a->i], gettid());
    hash_runs(lc);
    atomic_fetch_sub(&lc->working, 1);
    return NULL;
}

int late_check_start(late_check *lc, const pulse_ckpt *w, const uint8_t want[32], uint64_t step, int threads)
{
    memcpy(lc->want, want, 32);
    lc->step = step;
    lc->lift = may_lift();
    int r = ckpt_chunk_ids_open(&lc->ids, w);
    if (r)
        return r;
    size_t n = threads > 0 ? (size_t)threads : (size_t)pulse_default_threads();
    if (n > LATE_CHECK_THREADS_MAX)
        n = LATE_CHECK_THREADS_MAX;
    atomic_store(&lc->next, 0);
    atomic_store(&lc->working, (int)n);
    lc->nthreads = 0;
    for (size_t i = 0; i < n; i++) {
        atomic_store(&lc->ktid[i], 0);
        lc->arg[i] = (late_worker){ lc, i };
        if (pthread_create(&lc->tid[i], NULL, worker, &lc->arg[i]) != 0) {
            atomic_fetch_sub(&lc->working, (int)(n - i));   /* the waiter hashes what they would have */
            break;
        }
        lc->nthreads++;
    }
    lc->running = 1;
    return 0;
}

int late_check_ended(const late_check *lc)
{
    return !lc->running || atomic_load(&lc->working) == 0;
}

int late_check_wait(late_check *lc, uint64_t *step)
{
    if (!lc->running)
        return 0;
    /* A machine with no idle cycles (an engine, another job on every core) would starve the
     * workers, and the next step waits for them: they are lifted to the normal policy, and the
     * waiter hashes what is left beside them, so the wait is bounded by a fair share. */
    if (atomic_load(&lc->working) > 0) {
        struct sched_param sp = { 0 };
        for (size_t i = 0; lc->lift && i < lc->nthreads; i++) {
            pid_t t = atomic_load(&lc->ktid[i]);
            if (t > 0)
                (void)sched_setscheduler(t, SCHED_OTHER, &sp);
        }
        hash_runs(lc);
    }
    for (size_t i = 0; i < lc->nthreads; i++)
        pthread_join(lc->tid[i], NULL);
    lc->running = 0;
    if (step)
        *step = lc->step;
    uint8_t got[32];
    ckpt_chunk_ids_state(&lc->ids, got, NULL);
    ckpt_chunk_ids_close(&lc->ids);
    if (memcmp(got, lc->want, 32) == 0)
        return 0;
    char h1[65], h2[65];
    return pulse_fail(PULSE_ERR_CORRUPT, "after step %llu the weights are state %.16s.., not its result %.16s..",
                      (unsigned long long)lc->step, pulse_id_hex(got, h1), pulse_id_hex(lc->want, h2));
}
