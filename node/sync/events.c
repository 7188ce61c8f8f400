/* SPDX-License-Identifier: Apache-2.0 */
/* node/sync's events as lines: key/value strings collected, formatted as text or JSON, written whole with one write(2). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "node/sync/events.h"

void sync_event_kv(const char *kv[SYNC_EVENT_KV_MAX + 1], va_list ap)
{
    size_t n = 0;
    for (;;) {
        const char *k = va_arg(ap, const char *);
        if (!k)
            break;
        const char *v = va_arg(ap, const char *);
        if (n + 2 > SYNC_EVENT_KV_MAX)
            continue;   /* the rest is read to its NULL, not kept: the line had no room for it anyway */
        kv[n++] = k;
        kv[n++] = v ? v : "";
    }
    kv[n] = NULL;
}

/* A JSON number as written by hand: an optional '-', an integer part without leading zeros, an
 * optional fraction. Anything else ("000000000002", "1e5", "0x1f", "") stays a string, so a
 * value that only looks numeric keeps its exact text. */
static int plain_number(const char *s)
{
    const char *p = s + (*s == '-');
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == '\0' && p - s <= 40;
}

/* Keys whose values are names or ids: text even when they happen to be all digits (a run, a
 * file or a record called "2024"), so each key keeps one JSON type. */
static int text_key(const char *k)
{
    static const char *const keys[] = { "name", "file", "path", "record", "key", "head", "weights", "watch",
                                        "run", "node", "state", "reason", "message", "what", "kind", "role",
                                        "action", "phase", "status", "last" };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(k, keys[i]))
            return 1;
    return 0;
}

/* Appends s to buf (at *n, capacity cap) escaped for JSON, or quoted for text when it holds
 * spaces, quotes or control bytes, so one event is always one parseable line. */
static void put_value(char *buf, size_t *n, size_t cap, const char *s, int json)
{
    int quote = json || s[0] == '\0' || strpbrk(s, " \"=\t\n\r\\") != NULL;
    if (quote && *n < cap)
        buf[(*n)++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p && *n + 8 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            buf[(*n)++] = '\\';
            buf[(*n)++] = (char)*p;
        } else if (*p < 0x20) {
            *n += (size_t)snprintf(buf + *n, cap - *n, "\\u%04x", *p);
        } else {
            buf[(*n)++] = (char)*p;
        }
    }
    if (quote && *n < cap)
        buf[(*n)++] = '"';
}

void sync_event_line(int json, const char *event, const char *const *kv)
{
    char buf[4096];
    size_t n = 0, cap = sizeof buf - 2;
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (json)
        n += (size_t)snprintf(buf, cap, "{\"time\":\"%s\",\"event\":", ts);
    else
        n += (size_t)snprintf(buf, cap, "%s %s", ts, event);
    if (json)
        put_value(buf, &n, cap, event, 1);

    for (size_t i = 0; kv[i] && kv[i + 1]; i += 2) {
        const char *k = kv[i], *v = kv[i + 1];
        if (n + 4 >= cap)
            continue;
        buf[n++] = json ? ',' : ' ';
        if (json)
            put_value(buf, &n, cap, k, 1), buf[n++] = ':';
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s=", k);
        if (json && plain_number(v) && !text_key(k))
            n += (size_t)snprintf(buf + n, cap - n, "%s", v);
        else
            put_value(buf, &n, cap, v, json);
    }
    if (n > cap)
        n = cap;
    if (json)
        buf[n++] = '}';
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, n);
    (void)w;   /* nowhere to report a failed log write */
}
