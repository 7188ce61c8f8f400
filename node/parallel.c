/* SPDX-License-Identifier: Apache-2.0 */
/* A small parallel-for over pthreads: workers take iterations from an atomic counter. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/parallel.h"

#define MAX_THREADS 256

int pulse_default_threads(void)
{
    const char *env = getenv("PULSE_THREADS");
    if (env && *env) {
        long v = strtol(env, NULL, 10);
        if (v >= 1 && v <= MAX_THREADS)
            return (int)v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

struct job {
    size_t n;
    int (*fn)(void *ctx, size_t i);
    void *ctx;
    atomic_size_t next;
    atomic_int failed;
    pthread_mutex_t lock;
    size_t err_index;   /* lowest failing iteration seen; guarded by lock */
    int err;
    char detail[512];   /* its error detail, carried back to the caller's thread */
};

static void *worker(void *arg)
{
    struct job *j = arg;
    for (;;) {
        if (atomic_load_explicit(&j->failed, memory_order_relaxed))
            break;
        size_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->n)
            break;
        int r = j->fn(j->ctx, i);
        if (r < 0) {
            pthread_mutex_lock(&j->lock);
            if (!j->err || i < j->err_index) {
                j->err = r;
                j->err_index = i;
                snprintf(j->detail, sizeof j->detail, "%s", pulse_last_error());
            }
            pthread_mutex_unlock(&j->lock);
            atomic_store(&j->failed, 1);
        }
    }
    return NULL;
}

int pulse_parallel_for(size_t n, int threads, int (*fn)(void *ctx, size_t i), void *ctx)
{
    if (n == 0)
        return 0;
    if (threads <= 0)
        threads = pulse_default_threads();
    if ((size_t)threads > n)
        threads = (int)n;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;

    struct job j = { .n = n, .fn = fn, .ctx = ctx };
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.lock, NULL);

    pthread_t tids[MAX_THREADS];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tids[started], NULL, worker, &j) != 0)
            break;  /* fewer threads is still correct: the caller's thread does the rest */
        started++;
    }
    worker(&j);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    pthread_mutex_destroy(&j.lock);

    if (j.err)
        return pulse_fail(j.err, "%s", j.detail);
    return 0;
}
