/* SPDX-License-Identifier: Apache-2.0 */
/* A publisher's start: incomplete multipart uploads of its run's objects begun long ago (a writer killed mid-upload) are aborted. */
#include <stdio.h>

#include "base/fail.h"
#include "manifest/layout.h"
#include "node/sync/sync_internal.h"

struct sweep {
    pulse_store *st;
    int64_t before;
    unsigned aborted;
};

static int on_upload(void *ctx, const char *key, const char *upload_id, int64_t initiated)
{
    struct sweep *w = ctx;
    /* An upload whose start the server did not say may be live: left alone. */
    if (initiated && initiated < w->before && pulse_store_abort_upload(w->st, key, upload_id) == 0)
        w->aborted++;
    return 0;
}

unsigned sync_abort_stale_uploads(pulse_store *st, const char *run, int64_t now)
{
    char rel[16], prefix[SYNC_KEY_MAX];
    struct sweep w = { st, now - SYNC_STALE_UPLOAD_S, 0 };
    if (pulse_layout_object(rel, sizeof rel, NULL) == 0 && sync_run_key(run, rel, prefix) == 0)
        pulse_store_list_uploads(st, prefix, on_upload, &w);   /* file:// has none; a refusal only ends it */
    pulse_clear_error();
    return w.aborted;
}
