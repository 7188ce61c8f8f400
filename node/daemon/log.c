/* SPDX-License-Identifier: Apache-2.0 */
/* The nodes' event log: one line per event, as text or JSON, written whole with one write(2). */
#include <stdarg.h>

#include "node/daemon/log.h"
#include "node/sync/events.h"

static node_log_format log_format = NODE_LOG_TEXT;

void node_log_set_format(node_log_format f)
{
    log_format = f;
}

void node_log_event(void *ctx, const char *event, const char *const *kv)
{
    (void)ctx;
    sync_event_line(log_format == NODE_LOG_JSON, event, kv);
}

void node_log(const char *event, ...)
{
    const char *kv[SYNC_EVENT_KV_MAX + 1];
    va_list ap;
    va_start(ap, event);
    sync_event_kv(kv, ap);
    va_end(ap);
    node_log_event(NULL, event, kv);
}
