/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus text exposition of a node's counters and step phases: rendered, written atomically, served over HTTP/1.0 from a thread. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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

/* Connections served at once. When all are taken, a new one replaces the oldest: a client that
 * connects and sends nothing (or trickles) cannot keep a scraper out. */
#define METRICS_CONNS 16
/* A request head is a few hundred bytes (Prometheus sends about 250); a longer one is refused. */
#define METRICS_REQ_MAX 2048
/* A connection whose request head is not complete within this is closed unanswered. */
#define METRICS_READ_MS 10000

typedef struct metrics_conn {
    int fd;                     /* -1: free */
    int64_t deadline_ms;        /* monotonic: when it is closed if its head is still incomplete */
    size_t got;
    char req[METRICS_REQ_MAX];
} metrics_conn;

struct node_metrics_server {
    int fd;                     /* the listening socket */
    int wake[2];                /* a byte on wake[1] stops the thread */
    pthread_t thread;
    pthread_mutex_t mu;         /* guards snap: the node's loop publishes, the thread reads */
    node_metrics snap;
    /* The thread's own: fixed, so a connection costs no allocation. */
    metrics_conn conn[METRICS_CONNS];
    char text[NODE_METRICS_TEXT];
    char out[NODE_METRICS_TEXT + 512];
};

void node_metrics_age(node_metrics *m, int64_t now)
{
    m->have_age = m->newest_time != 0;
    int64_t age = m->have_age ? now - (int64_t)m->newest_time : 0;
    if (age < 0)
        age = 0;
    m->newest_age_seconds = (double)age;
    m->lag_seconds = m->have_age && m->lagging ? (double)age : 0.0;
    /* A derived bound waits while the follower catches up: a long restore must not read as a
     * store that stopped. */
    m->stale = m->have_age && m->max_staleness && (uint64_t)age > m->max_staleness &&
               !(m->bound_derived && m->lagging);
}

/* A trainer node's: what it published, and where its publishes' time went. */
static int render_trainer(const node_metrics *m, char *buf, size_t cap)
{
    int n = snprintf(buf, cap,
        "# HELP pulse_steps_published_total Steps published (patches and keyframes; a step already published again not counted).\n"
        "# TYPE pulse_steps_published_total counter\n"
        "pulse_steps_published_total %" PRIu64 "\n"
        "# HELP pulse_publish_failures_total Publishes that failed (each retry counted).\n"
        "# TYPE pulse_publish_failures_total counter\n"
        "pulse_publish_failures_total %" PRIu64 "\n"
        "# HELP pulse_published_step The last step published (-1: none yet).\n"
        "# TYPE pulse_published_step gauge\n"
        "pulse_published_step %lld\n",
        m->steps_published, m->publish_failures, m->have_published ? (long long)m->published_step : -1LL);
    size_t len = n > 0 ? (size_t)n : 0;
    if (n < 0 || (size_t)n >= cap)
        return pulse_fail(PULSE_ERR_LIMIT, "metrics text");
    return node_phase_hist_render(&m->phases, buf, cap, &len);
}

int node_metrics_render(const node_metrics *m, char *buf, size_t cap)
{
    if (m->trainer)
        return render_trainer(m, buf, cap);
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
        "# HELP pulse_stale 1 when the newest verified record is older than the staleness bound.\n"
        "# TYPE pulse_stale gauge\n"
        "pulse_stale %d\n"
        "# HELP pulse_staleness_bound_seconds The staleness bound in force: --max-staleness, or 4 median intervals of the run's records (0: none).\n"
        "# TYPE pulse_staleness_bound_seconds gauge\n"
        "pulse_staleness_bound_seconds %" PRIu64 "\n"
        "# HELP pulse_store_behind 1 when the store's newest verified record is older than the held state.\n"
        "# TYPE pulse_store_behind gauge\n"
        "pulse_store_behind %d\n"
        "# HELP pulse_untrusted_state 1 when the held state is produced by no record of a trusted key.\n"
        "# TYPE pulse_untrusted_state gauge\n"
        "pulse_untrusted_state %d\n",
        m->steps_applied, m->have_held ? (long long)m->held_step : -1LL, m->lag_steps, m->lag_seconds,
        m->bytes_fetched, m->verify_failures, m->hook_failures, m->store_retries, m->last_step_seconds,
        m->have_age ? m->newest_age_seconds : -1.0, m->stale ? 1 : 0, m->max_staleness, m->store_behind ? 1 : 0,
        m->untrusted_state ? 1 : 0);
    if (n < 0 || (size_t)n >= cap)
        return pulse_fail(PULSE_ERR_LIMIT, "metrics text");
    size_t len = (size_t)n;
    return node_phase_hist_render(&m->phases, buf, cap, &len);
}

int node_metrics_write_file(const char *path, const char *text)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return pulse_fail(PULSE_ERR_LIMIT, "metrics path too long");
    /* not durable: a scraper reads it while the node runs; after a crash the next write redoes it */
    return pulse_replace_file(path, tmp, text, strlen(text), 0);
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void drop(metrics_conn *c)
{
    close(c->fd);
    c->fd = -1;
    c->got = 0;
}

/* Sends what fits at once and closes. The answer is a few KiB, under any socket's send buffer,
 * so a client that does not read costs nothing: the thread never waits on one. */
static void send_and_drop(metrics_conn *c, const char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    /* What the client sent beyond the head (a body, the rest of a refused head) is read and
     * discarded, as far as it has arrived: closing with unread bytes would reset the connection,
     * and a reset may destroy the answer before the client reads it. */
    shutdown(c->fd, SHUT_WR);
    for (int i = 0; i < 32 && recv(c->fd, c->req, sizeof c->req, 0) > 0; i++)
        ;
    drop(c);
}

static void reply(node_metrics_server *s, metrics_conn *c, const char *status, const char *extra)
{
    int n = snprintf(s->out, sizeof s->out,
                     "HTTP/1.0 %s\r\nContent-Type: text/plain; charset=utf-8\r\n%sContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s\n",
                     status, extra, strlen(status) + 1, status);
    send_and_drop(c, s->out, n > 0 && (size_t)n < sizeof s->out ? (size_t)n : 0);
}

/* A complete request head: only "GET /metrics" (a query string allowed) gets the text. */
static void answer(node_metrics_server *s, metrics_conn *c)
{
    const char *q = c->req;
    if (strncmp(q, "GET ", 4) != 0) {
        reply(s, c, "405 Method Not Allowed", "Allow: GET\r\n");
        return;
    }
    q += 4;
    size_t plen = strcspn(q, " ?\r\n");
    if (plen != 8 || strncmp(q, "/metrics", 8) != 0) {
        reply(s, c, "404 Not Found", "");
        return;
    }
    node_metrics m;
    pthread_mutex_lock(&s->mu);
    m = s->snap;
    pthread_mutex_unlock(&s->mu);
    node_metrics_age(&m, (int64_t)time(NULL));
    if (node_metrics_render(&m, s->text, sizeof s->text) != 0) {
        reply(s, c, "500 Internal Server Error", "");
        return;
    }
    size_t len = strlen(s->text);
    int n = snprintf(s->out, sizeof s->out,
                     "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", len, s->text);
    if (n < 0 || (size_t)n >= sizeof s->out) {
        reply(s, c, "500 Internal Server Error", "");
        return;
    }
    send_and_drop(c, s->out, (size_t)n);
}

/* Reads what arrived; answers once the head is complete (one request per connection). */
static void on_readable(node_metrics_server *s, metrics_conn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->req + c->got, sizeof c->req - 1 - c->got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            drop(c);    /* closed, or reset, before a whole request */
            return;
        }
        c->got += (size_t)n;
        c->req[c->got] = '\0';
        if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
            answer(s, c);
            return;
        }
        if (c->got == sizeof c->req - 1) {
            reply(s, c, "431 Request Header Fields Too Large", "");
            return;
        }
    }
}

/* Takes every pending connection: a free slot, else the oldest one's. */
static void on_accept(node_metrics_server *s, int64_t now)
{
    for (;;) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return;     /* EAGAIN; or out of descriptors: retried at the next wake-up */
        }
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
            close(fd);
            continue;
        }
        metrics_conn *slot = NULL;
        for (size_t i = 0; i < METRICS_CONNS && !slot; i++)
            if (s->conn[i].fd < 0)
                slot = &s->conn[i];
        if (!slot) {
            slot = &s->conn[0];
            for (size_t i = 1; i < METRICS_CONNS; i++)
                if (s->conn[i].deadline_ms < slot->deadline_ms)
                    slot = &s->conn[i];
            drop(slot);
        }
        slot->fd = fd;
        slot->got = 0;
        slot->deadline_ms = now + METRICS_READ_MS;
    }
}

static void *serve(void *arg)
{
    node_metrics_server *s = arg;
    struct pollfd p[2 + METRICS_CONNS];
    metrics_conn *of[2 + METRICS_CONNS];
    for (;;) {
        int64_t now = mono_ms(), next = -1;
        nfds_t n = 0;
        p[n++] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
        p[n++] = (struct pollfd){ .fd = s->fd, .events = POLLIN };
        for (size_t i = 0; i < METRICS_CONNS; i++) {
            metrics_conn *c = &s->conn[i];
            if (c->fd < 0)
                continue;
            if (c->deadline_ms <= now) {
                drop(c);
                continue;
            }
            if (next < 0 || c->deadline_ms < next)
                next = c->deadline_ms;
            of[n] = c;
            p[n++] = (struct pollfd){ .fd = c->fd, .events = POLLIN };
        }
        int r = poll(p, n, next < 0 ? -1 : (int)(next - now));
        if (r < 0 && errno != EINTR)
            poll(NULL, 0, 100);     /* ENOMEM: try again, without spinning */
        if (r <= 0)
            continue;
        if (p[0].revents)
            break;
        for (nfds_t i = 2; i < n; i++)
            if (p[i].revents)
                on_readable(s, of[i]);
        if (p[1].revents & POLLIN)
            on_accept(s, mono_ms());
    }
    return NULL;
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
    node_metrics_server *s = calloc(1, sizeof *s);
    if (!s)
        return pulse_fail(PULSE_ERR_NOMEM, "metrics server");
    s->wake[0] = s->wake[1] = -1;
    for (size_t i = 0; i < METRICS_CONNS; i++)
        s->conn[i].fd = -1;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->fd < 0) {
        int r = pulse_fail_errno(PULSE_ERR_IO, "socket");
        free(s);
        return r;
    }
    int one = 1;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int r = 0;
    if (bind(s->fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(s->fd, 16) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "metrics listen on %s", addr_port);
    if (!r && (pipe(s->wake) != 0 || fcntl(s->wake[0], F_SETFD, FD_CLOEXEC) != 0 ||
               fcntl(s->wake[1], F_SETFD, FD_CLOEXEC) != 0))
        r = pulse_fail_errno(PULSE_ERR_IO, "metrics server pipe");
    if (!r && (errno = pthread_mutex_init(&s->mu, NULL)) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "metrics server mutex");
    if (!r) {
        /* The thread takes no SIGTERM/SIGINT: they must reach the node's loop, whose blocking
         * calls they interrupt. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        errno = pthread_create(&s->thread, NULL, serve, s);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (errno != 0) {
            r = pulse_fail_errno(PULSE_ERR_IO, "metrics server thread");
            pthread_mutex_destroy(&s->mu);
        }
    }
    if (r) {
        close(s->fd);
        if (s->wake[0] >= 0)
            close(s->wake[0]);
        if (s->wake[1] >= 0)
            close(s->wake[1]);
        free(s);
        return r;
    }
    *out = s;
    return 0;
}

void node_metrics_publish(node_metrics_server *s, const node_metrics *m)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->snap = *m;
    pthread_mutex_unlock(&s->mu);
}

void node_metrics_close(node_metrics_server **s)
{
    if (!s || !*s)
        return;
    node_metrics_server *m = *s;
    ssize_t w;
    do
        w = write(m->wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(m->thread, NULL);
    for (size_t i = 0; i < METRICS_CONNS; i++)
        if (m->conn[i].fd >= 0)
            close(m->conn[i].fd);
    close(m->fd);
    close(m->wake[0]);
    close(m->wake[1]);
    pthread_mutex_destroy(&m->mu);
    free(m);
    *s = NULL;
}
