/* SPDX-License-Identifier: Apache-2.0 */
/* Lists an s3:// URL under pulse_store_set_deadline (for tests/s3/deadline.sh): prints the result and the seconds it took. */
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "pulseweights/store.h"

static int count(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)key;
    (void)info;
    ++*(long *)ctx;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: deadline_client s3://bucket[/prefix] SECONDS (from now; 0: none; -1: passed)\n");
        return 2;
    }
    pulse_store *st = NULL;
    if (pulse_store_open(&st, argv[1], NULL)) {
        fprintf(stderr, "open: %s\n", pulse_last_error());
        return 2;
    }
    double secs = atof(argv[2]), t0 = pulse_monotonic_s();
    double at = secs > 0 ? t0 + secs : secs < 0 ? t0 - 1 : 0;
    if (pulse_store_set_deadline(st, at)) {
        fprintf(stderr, "set deadline: %s\n", pulse_last_error());
        return 2;
    }
    long n = 0;
    int rc = pulse_store_list(st, "", NULL, count, &n);
    printf("rc=%d keys=%ld took=%.1f\n", rc, n, pulse_monotonic_s() - t0);
    if (rc)
        printf("error: %s\n", pulse_last_error());
    /* A cleared deadline lets the handle work again. */
    if (rc && secs < 0 && pulse_store_set_deadline(st, 0) == 0)
        printf("after clearing: rc=%d\n", pulse_store_list(st, "", NULL, count, &n));
    pulse_store_close(&st);
    return rc ? 1 : 0;
}
