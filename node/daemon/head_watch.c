/* SPDX-License-Identifier: Apache-2.0 */
/* A follower node's heads, polled by conditional GETs started a poll apart, several in flight when the round trip is longer than the poll. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fail.h"
#include "manifest/layout.h"
#include "node/daemon/head_watch.h"
#include "pulseweights/keys.h"
#include "pulseweights/store.h"

/* At most this many polls in flight: a poll of 20 ms covers a 160 ms round trip. */
#define WATCHERS 8

typedef struct head_slot {
    char key[700];
    char etag[132];       /* of the newest head kept: the next polls' If-None-Match */
    uint64_t seq;         /* the start that read it: an answer to an earlier start is older */
    void *data;           /* not yet taken; NULL when taken */
    size_t len;
} head_slot;

struct head_watch {
    char *url;
    size_t n;
    head_slot *slot;
    unsigned poll_ms;
    pthread_t tid[WATCHERS];
    int threads;
    pthread_mutex_t lock;
    pthread_cond_t seen;       /* a head or a failure for the loop */
    pthread_cond_t tick;       /* the next start is due, or stop */
    int stop;
    double next_start;         /* monotonic seconds */
    uint64_t starts;
    unsigned rng;
    char error[512], error_key[700];   /* the failure not yet taken; "" none */
};

static void timespec_at(struct timespec *ts, double t)
{
    /* t on the monotonic clock, as the condition variables are set to wait on */
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
}

static double jittered(head_watch *w)
{
    unsigned base = w->poll_ms ? w->poll_ms : 1000;
    return 1e-3 * (base - base / 4 + (unsigned)(rand_r(&w->rng) % (base / 2 + 1)));
}

/* One poll: a conditional GET of every head, each answer kept when it is newer than the kept. */
static void poll_once(head_watch *w, pulse_store *st, uint64_t seq)
{
    for (size_t i = 0; i < w->n; i++) {
        char etag[132];
        pthread_mutex_lock(&w->lock);
        snprintf(etag, sizeof etag, "%s", w->slot[i].etag);
        pthread_mutex_unlock(&w->lock);
        void *data = NULL;
        size_t len = 0;
        pulse_object_info info;
        int r = pulse_store_get_if_none_match(st, w->slot[i].key, etag[0] ? etag : NULL, PULSE_LAYOUT_HEAD_MAX,
                                              &data, &len, &info);
        if (r == PULSE_ERR_NOT_MODIFIED || r == PULSE_ERR_NOTFOUND)
            continue;
        pthread_mutex_lock(&w->lock);
        if (r) {
            snprintf(w->error, sizeof w->error, "%s", pulse_last_error());
            snprintf(w->error_key, sizeof w->error_key, "%s", w->slot[i].key);
            pthread_cond_signal(&w->seen);
        } else if (seq > w->slot[i].seq && strcmp(info.etag, w->slot[i].etag)) {
            head_slot *s = &w->slot[i];
            s->seq = seq;
            snprintf(s->etag, sizeof s->etag, "%s", info.etag);
            pulse_store_free(s->data);
            s->data = data;
            s->len = len;
            data = NULL;
            pthread_cond_signal(&w->seen);
        }
        pthread_mutex_unlock(&w->lock);
        pulse_store_free(data);
    }
}

static void *watcher(void *arg)
{
    head_watch *w = arg;
    pulse_store *st = NULL;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        double now = pulse_monotonic_s();
        if (now < w->next_start) {
            struct timespec ts;
            timespec_at(&ts, w->next_start);
            pthread_cond_timedwait(&w->tick, &w->lock, &ts);
            continue;
        }
        w->next_start = now + jittered(w);
        uint64_t seq = ++w->starts;
        pthread_cond_signal(&w->tick);   /* an idle watcher waits for the new next start */
        pthread_mutex_unlock(&w->lock);
        int r = st ? 0 : pulse_store_open(&st, w->url, NULL);
        if (!r)
            poll_once(w, st, seq);
        pthread_mutex_lock(&w->lock);
        if (r) {
            snprintf(w->error, sizeof w->error, "%s", pulse_last_error());
            snprintf(w->error_key, sizeof w->error_key, "%s", w->url);
            pthread_cond_signal(&w->seen);
        }
    }
    pthread_mutex_unlock(&w->lock);
    pulse_store_close(&st);
    return NULL;
}

int head_watch_start(head_watch **out, const char *url, const char *run, const pulse_trust *trust,
                     unsigned poll_ms)
{
    *out = NULL;
    head_watch *w = calloc(1, sizeof *w);
    size_t n = pulse_trust_count(trust);
    if (!w || !(w->slot = calloc(n ? n : 1, sizeof *w->slot)) || !(w->url = strdup(url))) {
        if (w)
            free(w->slot);
        free(w);
        return pulse_fail(PULSE_ERR_NOMEM, "head watch");
    }
    w->n = n;
    w->poll_ms = poll_ms;
    w->rng = (unsigned)time(NULL) ^ (unsigned)getpid();
    for (size_t i = 0; i < n; i++) {
        char rel[100];
        if (pulse_layout_head(rel, sizeof rel, pulse_trust_get(trust, i)->key) ||
            pulse_layout_join(w->slot[i].key, sizeof w->slot[i].key, run, rel)) {
            int r = pulse_fail(PULSE_ERR_LIMIT, "the head of trusted key %zu: its key is too long", i);
            free(w->url);
            free(w->slot);
            free(w);
            return r;
        }
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->seen, &ca);
    pthread_cond_init(&w->tick, &ca);
    pthread_condattr_destroy(&ca);
    w->next_start = pulse_monotonic_s();
    for (; w->threads < WATCHERS; w->threads++)
        if (pthread_create(&w->tid[w->threads], NULL, watcher, w) != 0)
            break;
    if (!w->threads) {
        head_watch_stop(&w);
        return pulse_fail(PULSE_ERR_NOMEM, "head watch: no thread");
    }
    *out = w;
    return 0;
}

int head_watch_next(head_watch *w, unsigned timeout_ms, head_seen *out)
{
    memset(out, 0, sizeof *out);
    struct timespec ts;
    timespec_at(&ts, pulse_monotonic_s() + 1e-3 * timeout_ms);
    pthread_mutex_lock(&w->lock);
    int got = 0;
    for (;;) {
        for (size_t i = 0; i < w->n && !got; i++)
            if (w->slot[i].data) {
                out->node = i;
                out->data = w->slot[i].data;
                out->len = w->slot[i].len;
                snprintf(out->key, sizeof out->key, "%s", w->slot[i].key);
                w->slot[i].data = NULL;
                got = 1;
            }
        if (!got && w->error[0]) {
            snprintf(out->error, sizeof out->error, "%s", w->error);
            snprintf(out->key, sizeof out->key, "%s", w->error_key);
            w->error[0] = '\0';
            got = 1;
        }
        if (got || pthread_cond_timedwait(&w->seen, &w->lock, &ts) != 0)
            break;
    }
    pthread_mutex_unlock(&w->lock);
    return got;
}

void head_watch_stop(head_watch **pw)
{
    head_watch *w = *pw;
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_broadcast(&w->tick);
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < w->threads; i++)
        pthread_join(w->tid[i], NULL);
    for (size_t i = 0; i < w->n; i++)
        pulse_store_free(w->slot[i].data);
    pthread_cond_destroy(&w->seen);
    pthread_cond_destroy(&w->tick);
    pthread_mutex_destroy(&w->lock);
    free(w->slot);
    free(w->url);
    free(w);
    *pw = NULL;
}
