/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the heads a follower node polls, read by overlapping conditional GETs (node/daemon/head_watch.c). */
#ifndef PULSE_NODE_DAEMON_HEAD_WATCH_H
#define PULSE_NODE_DAEMON_HEAD_WATCH_H

#include <stddef.h>

#include "pulseweights/manifest.h"

typedef struct head_watch head_watch;

/* Starts polling the heads of RUN's trusted nodes in the store at URL: a conditional GET started
 * every POLL_MS (+-25%, so that many followers do not poll in lockstep), each on a thread of its
 * own while the ones before it still wait for their answers, so that a head written is seen
 * about half a round trip plus half a poll later, whatever the round trip. */
int head_watch_start(head_watch **out, const char *url, const char *run, const pulse_trust *trust,
                     unsigned poll_ms);

/* What the watch saw: a head changed since the last taken (the newest of them), or a failure. */
typedef struct head_seen {
    size_t node;          /* the trusted key whose head it is (pulse_trust_get) */
    void *data;           /* the head's content (free with pulse_store_free); NULL for a failure */
    size_t len;
    char error[512];      /* the failure's detail ("" for a head) */
    char key[700];        /* the head's store key */
} head_seen;

/* Waits up to TIMEOUT_MS for what the watch saw: 1 with it in *out, 0 when nothing came. */
int head_watch_next(head_watch *w, unsigned timeout_ms, head_seen *out);
void head_watch_stop(head_watch **w);

#endif
