/* SPDX-License-Identifier: Apache-2.0 */
/* The nodes' stop flag: SIGTERM/SIGINT set it; node_sleep_ms wakes early when it is set. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "node/daemon/signals.h"

/* An atomic, not a volatile sig_atomic_t: the signal lands on whichever thread it finds (a head
 * watcher, a store's), and the main loop reads the flag from another; a lock-free atomic is both
 * safe in a handler and a defined cross-thread write. */
static atomic_int stop_flag;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the stop flag is set in a signal handler");

static void on_stop_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_flag, 1);
}

void node_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocked call returns EINTR so the node sees the flag */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int node_stop_requested(void)
{
    return atomic_load(&stop_flag) != 0;
}

void node_stop_request(void)
{
    atomic_store(&stop_flag, 1);
}

void node_signals_hold(int hold)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(hold ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

int node_sleep_ms(unsigned ms)
{
    /* Sleep in slices of at most 50 ms: a signal that lands between the flag check and
     * nanosleep would otherwise be missed for the whole interval. */
    while (ms > 0 && !stop_flag) {
        unsigned slice = ms < 50 ? ms : 50;
        struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)slice * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_flag)
            ;
        ms -= slice;
    }
    return atomic_load(&stop_flag) != 0;
}
