/* SPDX-License-Identifier: Apache-2.0 */
/* The staleness bound a follower derives from the run's cadence: no bound over the first records, 4 median intervals with a floor, the 16 newest steps kept. */
#include <stdint.h>

#include "check.h"
#include "node/sync/cadence.h"

int main(void)
{
    record_cadence c = { 0 };
    /* The first four records: no bound, whatever their times. */
    for (uint64_t s = 0; s < 4; s++)
        cadence_note(&c, s, 1000 + 60 * s);
    CHECK_EQ_INT(cadence_bound(&c), 0);
    /* The fifth: intervals 60, 60, 60, 60 -> 240 s. A step seen again, a record without a time,
     * change nothing. */
    cadence_note(&c, 4, 1240);
    cadence_note(&c, 2, 5000);
    cadence_note(&c, 5, 0);
    CHECK_EQ_INT(c.n, 5);
    CHECK_EQ_INT(cadence_bound(&c), 240);
    /* One long pause (an evaluation, a keyframe catch-up) does not move the median. */
    cadence_note(&c, 5, 1240 + 3600);
    CHECK_EQ_INT(cadence_bound(&c), 240);
    /* Records seen out of order (newest first, as a listing is walked) sort by step. */
    record_cadence d = { 0 };
    for (uint64_t s = 10; s-- > 0;)
        cadence_note(&d, s, 500 + 30 * s);
    CHECK_EQ_INT(d.n, 10);
    CHECK_EQ_INT(cadence_bound(&d), 120);
    /* A fast run (several records a second, whole-second times): the floor. */
    record_cadence f = { 0 };
    for (uint64_t s = 0; s < 8; s++)
        cadence_note(&f, s, 700 + s / 3);
    CHECK_EQ_INT(cadence_bound(&f), CADENCE_FLOOR_S);
    /* Only the 16 newest steps are kept: the older cadence (600 s) leaves, the newer (20 s) rules. */
    record_cadence g = { 0 };
    uint64_t t = 0;
    for (uint64_t s = 0; s < 40; s++) {
        t += s < 20 ? 600 : 20;
        cadence_note(&g, s, t);
    }
    CHECK_EQ_INT(g.n, CADENCE_RECORDS);
    CHECK_EQ_INT(g.step[0], 24);
    CHECK_EQ_INT(g.step[CADENCE_RECORDS - 1], 39);
    CHECK_EQ_INT(cadence_bound(&g), 80);
    cadence_note(&g, 3, 1);   /* older than every step kept: not noted */
    CHECK_EQ_INT(g.step[0], 24);
    return check_done("sync-cadence");
}
