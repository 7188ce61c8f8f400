/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper: runs a publisher's sweep of stale multipart uploads (sync_abort_stale_uploads) as if the clock read SECONDS later, and prints how many it aborted. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "node/sync/sync_internal.h"
#include "pulseweights/store.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fputs("usage: stale_uploads STORE-URL RUN SECONDS-AHEAD\n", stderr);
        return 2;
    }
    pulse_store *st = NULL;
    int r = pulse_store_open(&st, argv[1], NULL);
    if (r) {
        fprintf(stderr, "stale_uploads: %s: %s\n", argv[1], pulse_last_error());
        return 1;
    }
    printf("%u\n", sync_abort_stale_uploads(st, argv[2], (int64_t)time(NULL) + atoll(argv[3])));
    pulse_store_close(&st);
    return 0;
}
