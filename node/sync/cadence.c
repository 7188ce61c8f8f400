/* SPDX-License-Identifier: Apache-2.0 */
/* The staleness bound a follower derives from the cadence of the run's verified records. */
#include <stdlib.h>
#include <string.h>

#include "node/sync/cadence.h"

void cadence_note(record_cadence *c, uint64_t step, uint64_t time)
{
    if (!time)
        return;
    size_t at = 0;
    while (at < c->n && c->step[at] < step)
        at++;
    if (at < c->n && c->step[at] == step)
        return;
    if (c->n == CADENCE_RECORDS) {
        if (at == 0)
            return;   /* older than every step kept */
        c->n--;   /* the oldest makes room */
        memmove(c->step, c->step + 1, c->n * sizeof *c->step);
        memmove(c->time, c->time + 1, c->n * sizeof *c->time);
        at--;
    }
    memmove(c->step + at + 1, c->step + at, (c->n - at) * sizeof *c->step);
    memmove(c->time + at + 1, c->time + at, (c->n - at) * sizeof *c->time);
    c->step[at] = step;
    c->time[at] = time;
    c->n++;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

uint64_t cadence_bound(const record_cadence *c)
{
    if (c->n < CADENCE_MIN_RECORDS)
        return 0;
    uint64_t gap[CADENCE_RECORDS];
    size_t k = 0;
    for (size_t i = 1; i < c->n; i++)   /* a clock that went back counts as no gap */
        gap[k++] = c->time[i] > c->time[i - 1] ? c->time[i] - c->time[i - 1] : 0;
    qsort(gap, k, sizeof *gap, by_value);
    uint64_t median = k % 2 ? gap[k / 2] : (gap[k / 2 - 1] + gap[k / 2]) / 2;
    uint64_t bound = median > UINT64_MAX / CADENCE_FACTOR ? UINT64_MAX : CADENCE_FACTOR * median;
    return bound < CADENCE_FLOOR_S ? CADENCE_FLOOR_S : bound;
}
