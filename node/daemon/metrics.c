/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus text exposition of the follower's counters: rendered, written atomically, served over HTTP/1.0. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "node/daemon/metrics.h"
#include "node/daemon/signals.h"

struct node_metrics_server {
    int fd;
};

int node_metrics_render(const node_metrics *m, char *buf, size_t cap)
{
    int n = snprintf(buf, cap,
        "# HELP pulse_steps_applied_total Steps applied to the local weights.\n"
        "# TYPE pulse_steps_applied_total counter\n"
        "pulse_steps_applied_total %" PRIu64 "\n"
        "# HELP pulse_held_step Step of the state the weights hold (-1: none yet).\n"
        "# TYPE pulse_held_step gauge\n"
        "pulse_held_step %lld\n"
        "# HELP pulse_lag_steps Newest published step seen minus the held step.\n"
        "# TYPE pulse_lag_steps gauge\n"
        "pulse_lag_steps %" PRIu64 "\n"
        "# HELP pulse_lag_seconds Seconds since the newest step seen was published, while it is not held (0 when current).\n"
        "# TYPE pulse_lag_seconds gauge\n"
        "pulse_lag_seconds %.3f\n"
        "# HELP pulse_bytes_fetched_total Bytes downloaded from the store (records and objects).\n"
        "# TYPE pulse_bytes_fetched_total counter\n"
        "pulse_bytes_fetched_total %" PRIu64 "\n"
        "# HELP pulse_verify_failures_total Records or steps refused by verification.\n"
        "# TYPE pulse_verify_failures_total counter\n"
        "pulse_verify_failures_total %" PRIu64 "\n"
        "# HELP pulse_hook_failures_total On-update commands that failed or timed out.\n"
        "# TYPE pulse_hook_failures_total counter\n"
        "pulse_hook_failures_total %" PRIu64 "\n"
        "# HELP pulse_store_retries_total Store requests repeated after a transient failure (5xx, SlowDown, resets, timeouts).\n"
        "# TYPE pulse_store_retries_total counter\n"
        "pulse_store_retries_total %" PRIu64 "\n"
        "# HELP pulse_last_step_seconds Seconds the last applied step took, from its verified record to the weights holding it.\n"
        "# TYPE pulse_last_step_seconds gauge\n"
        "pulse_last_step_seconds %.3f\n"
        "# HELP pulse_newest_record_age_seconds Seconds since the newest verified record was published (-1: none verified yet).\n"
        "# TYPE pulse_newest_record_age_seconds gauge\n"
        "pulse_newest_record_age_seconds %.3f\n"
        "# HELP pulse_stale 1 when the newest verified record is older than --max-staleness.\n"
        "# TYPE pulse_stale gauge\n"
        "pulse_stale %d\n"
        "# HELP pulse_store_behind 1 when the store's newest verified record is older than the held state.\n"
        "# TYPE pulse_store_behind gauge\n"
        "pulse_store_behind %d\n"
        "# HELP pulse_untrusted_state 1 when the held state is produced by no record of a trusted key.\n"
        "# TYPE pulse_untrusted_state gauge\n"
        "pulse_untrusted_state %d\n",
        m->steps_applied, m->have_held ? (long long)m->held_step : -1LL, m->lag_steps, m->lag_seconds,
        m->bytes_fetched, m->verify_failures, m->hook_failures, m->store_retries, m->last_step_seconds,
        m->have_age ? m->newest_age_seconds : -1.0, m->stale ? 1 : 0, m->store_behind ? 1 : 0,
        m->untrusted_state ? 1 : 0);
    if (n < 0 || (size_t)n >= cap)
        return pulse_fail(PULSE_ERR_LIMIT, "metrics text");
    return 0;
}

int node_metrics_write_file(const char *path, const char *text)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return pulse_fail(PULSE_ERR_LIMIT, "metrics path too long");
    /* not durable: a scraper reads it while the node runs; after a crash the next write redoes it */
    return pulse_replace_file(path, tmp, text, strlen(text), 0);
}

int node_metrics_listen(node_metrics_server **out, const char *addr_port)
{
    *out = NULL;
    char host[64];
    unsigned port = 0;
    const char *colon = strrchr(addr_port, ':');
    if (!colon || (size_t)(colon - addr_port) >= sizeof host || sscanf(colon + 1, "%u", &port) != 1 || port > 65535)
        return pulse_fail(PULSE_ERR_INVALID, "metrics address %s: want ADDR:PORT", addr_port);
    memcpy(host, addr_port, (size_t)(colon - addr_port));
    host[colon - addr_port] = '\0';
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return pulse_fail(PULSE_ERR_INVALID, "metrics address %s: not an IPv4 address", addr_port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return pulse_fail_errno(PULSE_ERR_IO, "socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 8) != 0) {
        int r = pulse_fail_errno(PULSE_ERR_IO, "metrics listen on %s", addr_port);
        close(fd);
        return r;
    }
    node_metrics_server *s = malloc(sizeof *s);
    if (!s) {
        close(fd);
        return pulse_fail(PULSE_ERR_NOMEM, "metrics server");
    }
    s->fd = fd;
    *out = s;
    return 0;
}

/* One connection: read the request head (a scraper sends a few hundred bytes), answer, close.
 * A client that sends nothing within 200 ms is dropped, so the node never stalls on it. */
static void answer(int c, const char *text)
{
    char req[2048];
    size_t got = 0;
    struct pollfd p = { .fd = c, .events = POLLIN };
    while (got < sizeof req - 1 && poll(&p, 1, 200) == 1) {
        ssize_t n = read(c, req + got, sizeof req - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    char head[256];
    size_t len = strlen(text);
    int ok = got >= 4 && !strncmp(req, "GET ", 4);
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.0 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      ok ? "200 OK" : "405 Method Not Allowed", ok ? len : (size_t)0);
    /* The socket is blocking with a send timeout: the text is a few KiB. */
    struct timeval tv = { 1, 0 };
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (write(c, head, (size_t)hn) == hn && ok) {
        size_t off = 0;
        while (off < len) {
            ssize_t n = write(c, text + off, len - off);
            if (n <= 0)
                break;
            off += (size_t)n;
        }
    }
    close(c);
}

void node_metrics_serve(node_metrics_server *s, const char *text, unsigned wait_ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long spent = (long)(t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (spent >= (long)wait_ms || node_stop_requested())
            return;
        long left = (long)wait_ms - spent;
        struct pollfd p = { .fd = s->fd, .events = POLLIN };
        if (poll(&p, 1, (int)(left < 50 ? left : 50)) != 1)
            continue;
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            continue;
        int fl = fcntl(c, F_GETFL);
        if (fl >= 0)
            fcntl(c, F_SETFL, fl & ~O_NONBLOCK);
        answer(c, text);
    }
}

void node_metrics_close(node_metrics_server **s)
{
    if (!s || !*s)
        return;
    close((*s)->fd);
    free(*s);
    *s = NULL;
}
