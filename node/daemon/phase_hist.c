/* SPDX-License-Identifier: Apache-2.0 */
/* The step-phase histogram: observations by phase into fixed buckets, rendered in the Prometheus text format. */
#include <stdio.h>
#include <string.h>

#include "base/fail.h"
#include "node/daemon/phase_hist.h"

/* Seconds: from a phase that is nothing (an index write) to one that is the step (a 7B keyframe). */
static const double bounds[NODE_PHASE_BUCKETS] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                   1, 2.5, 5, 10 };
static const char *const bound_text[NODE_PHASE_BUCKETS] = { "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                                                            "0.1", "0.25", "0.5", "1", "2.5", "5", "10" };

void node_phase_hist_init(node_phase_hist *h, const char *const *names, size_t n)
{
    memset(h, 0, sizeof *h);
    h->n = n < NODE_PHASES_MAX ? n : NODE_PHASES_MAX;
    for (size_t i = 0; i < h->n; i++)
        h->name[i] = names[i];
}

void node_phase_hist_add(node_phase_hist *h, const double *ms)
{
    for (size_t i = 0; i < h->n; i++) {
        double s = ms[i] > 0 ? ms[i] / 1e3 : 0;
        for (size_t b = 0; b < NODE_PHASE_BUCKETS; b++)
            h->le[i][b] += s <= bounds[b];
        h->sum[i] += s;
        h->count[i]++;
    }
}

static int put(size_t cap, size_t *len, int n)
{
    if (n < 0 || (size_t)n >= cap - *len)
        return pulse_fail(PULSE_ERR_LIMIT, "metrics text");
    *len += (size_t)n;
    return 0;
}

int node_phase_hist_render(const node_phase_hist *h, char *buf, size_t cap, size_t *len)
{
    int r = put(cap, len, snprintf(buf + *len, cap - *len,
        "# HELP pulse_step_phase_seconds Where each step's time went, by phase (docs/node.md, \"Where a step's time goes\").\n"
        "# TYPE pulse_step_phase_seconds histogram\n"));
    for (size_t i = 0; !r && i < h->n; i++) {
        for (size_t b = 0; !r && b < NODE_PHASE_BUCKETS; b++)
            r = put(cap, len, snprintf(buf + *len, cap - *len,
                    "pulse_step_phase_seconds_bucket{phase=\"%s\",le=\"%s\"} %llu\n", h->name[i], bound_text[b],
                    (unsigned long long)h->le[i][b]));
        if (!r)
            r = put(cap, len, snprintf(buf + *len, cap - *len,
                    "pulse_step_phase_seconds_bucket{phase=\"%s\",le=\"+Inf\"} %llu\n"
                    "pulse_step_phase_seconds_sum{phase=\"%s\"} %.6f\n"
                    "pulse_step_phase_seconds_count{phase=\"%s\"} %llu\n", h->name[i],
                    (unsigned long long)h->count[i], h->name[i], h->sum[i], h->name[i],
                    (unsigned long long)h->count[i]));
    }
    return r;
}
