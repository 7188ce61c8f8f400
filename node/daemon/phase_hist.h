/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a Prometheus histogram of a node's step phases (pulse_step_phase_seconds{phase=...}). */
#ifndef PULSE_NODE_DAEMON_PHASE_HIST_H
#define PULSE_NODE_DAEMON_PHASE_HIST_H

#include <stddef.h>
#include <stdint.h>

#define NODE_PHASES_MAX 8
#define NODE_PHASE_BUCKETS 13   /* the finite upper bounds; +Inf is the count */

typedef struct node_phase_hist {
    size_t n;                                              /* phases */
    const char *name[NODE_PHASES_MAX];                     /* static strings */
    uint64_t le[NODE_PHASES_MAX][NODE_PHASE_BUCKETS];      /* observations <= each bound */
    double sum[NODE_PHASES_MAX];
    uint64_t count[NODE_PHASES_MAX];
} node_phase_hist;

void node_phase_hist_init(node_phase_hist *h, const char *const *names, size_t n);
/* One step's phases, in milliseconds (ms[i] for name[i]). */
void node_phase_hist_add(node_phase_hist *h, const double *ms);
/* Appends the exposition to buf (used bytes *len of cap): PULSE_ERR_LIMIT when it does not fit. */
int node_phase_hist_render(const node_phase_hist *h, char *buf, size_t cap, size_t *len);

#endif
