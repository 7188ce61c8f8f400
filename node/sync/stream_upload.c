/* SPDX-License-Identifier: Apache-2.0 */
/* A patch's data uploaded in parts by a thread of its own while the diff is still writing it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/env_bytes.h"
#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/sync/stream_upload.h"
#include "node/sync/sync_internal.h"

/* The first part is small, so the upload starts while the diff has barely begun; parts then
 * double, so a large patch is few requests (each costs the store a round trip and a commit).
 * A part ends where one of the diff's jobs ended, so it holds whole chunks: an audit checks each
 * part's chunks against the head's digests without the parts beside it. */
#define PART_FIRST (2ull << 20)
#define PART_MAX (32ull << 20)
/* Parts sent side by side when the thread has fallen behind the diff (the store's own
 * parallelism, not one request's, is what then keeps the link full). */
#define PARTS_AT_ONCE 4
/* Once the diff is done, what is left goes as up to PARTS_AT_ONCE parts side by side (of at least
 * this size, the store's per-request cost against its bytes), with the head among them. */
#define TAIL_PART_MIN (1ull << 20)
/* The head and the objects that go beside it (a part's tensor hashes). */
#define TAIL_MAX 2

struct stream_upload {
    pulse_store *st;
    char run[SYNC_KEY_MAX];
    pthread_t thread;
    int running;                  /* the thread is not yet joined */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int fd;                       /* the patch file, dup'ed at the first report; -1 before */
    uint64_t data_start;
    uint64_t ready;               /* data bytes in the file */
    uint64_t *cuts;               /* every size ready has had: where a job's chunks end */
    size_t ncuts, cuts_cap, next_cut;   /* next_cut: the first cut beyond sent */
    uint64_t end;                 /* the data's size, UINT64_MAX until the diff is done */
    uint64_t jobs_done, jobs;     /* the diff's jobs the data ready covers, of all (0: not told) */
    int stop;                     /* the diff failed: nothing more is sent */
    int err;                      /* the first failure, its detail below */
    char detail[512];
    uint64_t sent, part_len, moved;
    sync_blob *tail;              /* the patch's head and what goes with it, sent beside the last */
    size_t ntail;                 /* parts, their digests filled in (set at finish) */
    int tail_sent;
    upload_part *parts;
    size_t n, cap;
};

static void fail_locked(stream_upload *su, int err, const char *detail)
{
    if (!su->err) {
        su->err = err;
        snprintf(su->detail, sizeof su->detail, "%s", detail);
    }
    su->stop = 1;
}

/* How many parts, of what sizes, to send now: each ending on the last cut within its size (or
 * the first beyond it), a part's worth of bytes while the diff goes on, the tail too once it is
 * done. 0 when there is nothing to send yet. */
static size_t next_batch(stream_upload *su, uint64_t len[PARTS_AT_ONCE])
{
    uint64_t at = su->sent, part = su->part_len;
    size_t k = 0, c = su->next_cut;
    const int tail = su->end != UINT64_MAX;
    if (tail) {
        uint64_t even = (su->end - at + PARTS_AT_ONCE - 1) / PARTS_AT_ONCE;
        if (even < TAIL_PART_MIN)
            even = TAIL_PART_MIN;
        if (even < part)
            part = even;
    }
    /* While the diff goes on, no part larger than what is still to come (estimated from the data
     * per job so far): parts shrink towards the end, so what is left to send once it is done is
     * about a small part, not a large one half filled. */
    uint64_t cap = PART_MAX;
    if (!tail && su->jobs_done && su->jobs > su->jobs_done) {
        cap = su->ready / su->jobs_done * (su->jobs - su->jobs_done);
        cap = cap < TAIL_PART_MIN ? TAIL_PART_MIN : cap > PART_MAX ? PART_MAX : cap;
    }
    if (part > cap)
        part = cap;
    while (k < PARTS_AT_ONCE && c < su->ncuts) {
        if (su->ready - at < part && su->end == UINT64_MAX)
            break;
        size_t e = c;
        while (e + 1 < su->ncuts && su->cuts[e + 1] - at <= part)
            e++;
        len[k++] = su->cuts[e] - at;
        at = su->cuts[e];
        c = e + 1;
        if (part < cap && !tail)
            part = part * 2 < cap ? part * 2 : cap;
    }
    return k;
}

static void add_cut(stream_upload *su, uint64_t at)
{
    if (su->ncuts == su->cuts_cap) {
        size_t cap = su->cuts_cap ? su->cuts_cap * 2 : 256;
        uint64_t *nc = realloc(su->cuts, cap * sizeof *nc);
        if (!nc) {
            fail_locked(su, PULSE_ERR_NOMEM, "the patch's upload: out of memory");
            return;
        }
        su->cuts = nc;
        su->cuts_cap = cap;
    }
    su->cuts[su->ncuts++] = at;
}

/* Sends K parts from su->sent on (the file's bytes, mapped: they are in the page cache the diff
 * just wrote them to) and keeps their digests. Called without the lock. */
static int send_parts(stream_upload *su, const uint64_t *len, size_t k, uint64_t *moved)
{
    uint64_t total = 0;
    for (size_t i = 0; i < k; i++)
        total += len[i];
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    const uint64_t from = su->data_start + su->sent, base = from & ~(page - 1);
    const size_t map_len = (size_t)(from + total - base);
    uint8_t *map = mmap(NULL, map_len, PROT_READ, MAP_SHARED, su->fd, (off_t)base);
    if (map == MAP_FAILED)
        return pulse_fail_errno(PULSE_ERR_IO, "mapping the patch's data for its upload");
    sync_blob blob[PARTS_AT_ONCE + TAIL_MAX];
    const void *data[PARTS_AT_ONCE + TAIL_MAX];
    size_t dlen[PARTS_AT_ONCE + TAIL_MAX];
    uint8_t digest[PARTS_AT_ONCE + TAIL_MAX][32];
    const uint8_t *p = map + (from - base);
    for (size_t i = 0; i < k; i++) {
        blob[i] = (sync_blob){ .data = p, .len = (size_t)len[i] };
        p += len[i];
    }
    /* the last parts: the head and its company go beside them (read under the lock: set by finish) */
    pthread_mutex_lock(&su->lock);
    const size_t with = su->tail && su->end != UINT64_MAX && su->sent + total == su->end ? su->ntail : 0;
    pthread_mutex_unlock(&su->lock);
    for (size_t i = 0; i < with; i++)
        blob[k + i] = (sync_blob){ .data = su->tail[i].data, .len = su->tail[i].len };
    for (size_t i = 0; i < k + with; i++) {
        data[i] = blob[i].data;
        dlen[i] = blob[i].len;
    }
    pulse_sha256_many(k + with, data, dlen, digest);   /* side by side: four at a time on SHA-NI */
    for (size_t i = 0; i < k + with; i++)
        memcpy(blob[i].digest, digest[i], 32);
    int r = sync_put_objects(su->st, su->run, blob, k + with, moved);
    munmap(map, map_len);
    if (r)
        return r;
    for (size_t i = 0; i < with; i++)
        memcpy(su->tail[i].digest, blob[k + i].digest, 32);
    su->tail_sent = with > 0;
    if (su->n + k > su->cap) {
        size_t cap = su->cap ? su->cap * 2 : 16;
        while (cap < su->n + k)
            cap *= 2;
        upload_part *np = realloc(su->parts, cap * sizeof *np);
        if (!np)
            return pulse_fail(PULSE_ERR_NOMEM, "the patch's %zu parts", cap);
        su->parts = np;
        su->cap = cap;
    }
    uint64_t off = su->sent;
    for (size_t i = 0; i < k; i++) {
        upload_part *u = &su->parts[su->n++];
        memcpy(u->digest, blob[i].digest, 32);
        u->off = off;
        u->len = len[i];
        off += len[i];
    }
    return 0;
}

static void *upload_main(void *arg)
{
    stream_upload *su = arg;
    pthread_mutex_lock(&su->lock);
    for (;;) {
        uint64_t len[PARTS_AT_ONCE];
        size_t k = 0;
        while (!su->stop && !(k = next_batch(su, len)) && !(su->end != UINT64_MAX && su->sent == su->end))
            pthread_cond_wait(&su->wake, &su->lock);
        if (su->stop || !k)
            break;
        pthread_mutex_unlock(&su->lock);
        uint64_t moved = 0;
        int r = send_parts(su, len, k, &moved);   /* only this thread touches parts and sent */
        pthread_mutex_lock(&su->lock);
        if (r) {
            fail_locked(su, r, pulse_last_error());
            break;
        }
        su->moved += moved;
        for (size_t i = 0; i < k; i++) {
            su->sent += len[i];
            if (su->part_len < PART_MAX)
                su->part_len *= 2;
        }
        while (su->next_cut < su->ncuts && su->cuts[su->next_cut] <= su->sent)
            su->next_cut++;
    }
    pthread_mutex_unlock(&su->lock);
    return NULL;
}

int stream_upload_start(stream_upload **out, pulse_store *st, const char *run)
{
    *out = NULL;
    stream_upload *su = calloc(1, sizeof *su);
    if (!su)
        return pulse_fail(PULSE_ERR_NOMEM, "patch upload");
    su->st = st;
    snprintf(su->run, sizeof su->run, "%s", run);
    su->fd = -1;
    su->end = UINT64_MAX;
    /* PULSE_UPLOAD_PART lowers the first part's size, so that tests cut small patches in parts */
    su->part_len = pulse_env_bytes("PULSE_UPLOAD_PART", PART_FIRST, PART_MAX);
    if (!su->part_len)
        su->part_len = 1;
    pthread_mutex_init(&su->lock, NULL);
    pthread_cond_init(&su->wake, NULL);
    if ((errno = pthread_create(&su->thread, NULL, upload_main, su)) != 0) {
        int r = pulse_fail_errno(PULSE_ERR_IO, "starting the patch's upload");
        pthread_cond_destroy(&su->wake);
        pthread_mutex_destroy(&su->lock);
        free(su);
        return r;
    }
    su->running = 1;
    *out = su;
    return 0;
}

void stream_upload_on_progress(void *ctx, uint64_t done, uint64_t total)
{
    stream_upload *su = ctx;
    pthread_mutex_lock(&su->lock);
    su->jobs_done = done;
    su->jobs = total;
    pthread_mutex_unlock(&su->lock);
}

void stream_upload_on_data(void *ctx, int fd, uint64_t data_start, uint64_t bytes)
{
    stream_upload *su = ctx;
    pthread_mutex_lock(&su->lock);
    if (su->fd < 0 && !su->stop) {
        if ((su->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
            fail_locked(su, PULSE_ERR_IO, "reading the patch for its upload: cannot duplicate its descriptor");
        su->data_start = data_start;
    }
    if (bytes > su->ready)
        add_cut(su, bytes);
    su->ready = bytes;
    pthread_cond_signal(&su->wake);
    pthread_mutex_unlock(&su->lock);
}

int stream_upload_finish(stream_upload *su, uint64_t data_len, sync_blob *tail, size_t ntail,
                         const upload_part **parts, size_t *n, uint64_t *moved)
{
    if (ntail < 1 || ntail > TAIL_MAX)
        return pulse_fail(PULSE_ERR_INVALID, "stream_upload_finish: %zu objects beside the parts", ntail);
    pthread_mutex_lock(&su->lock);
    if (data_len == UINT64_MAX)
        su->stop = 1;
    else if (su->ready != data_len)
        fail_locked(su, PULSE_ERR_INVALID, "the diff reported fewer of the patch's data bytes than it wrote");
    else
        su->end = data_len;
    su->tail = tail;
    su->ntail = ntail;
    pthread_cond_signal(&su->wake);
    pthread_mutex_unlock(&su->lock);
    pthread_join(su->thread, NULL);
    su->running = 0;
    if (!su->err && !su->stop && !su->tail_sent) {
        /* no part was left for the head to go with (all sent before the diff ended, or none) */
        for (size_t i = 0; i < ntail; i++)
            pulse_sha256(tail[i].data, tail[i].len, tail[i].digest);
        int r = sync_put_objects(su->st, su->run, tail, ntail, &su->moved);
        if (r)
            fail_locked(su, r, pulse_last_error());
    }
    *moved += su->moved;
    if (su->err)
        return pulse_fail(su->err, "%s", su->detail);
    if (su->stop)
        return 0;
    *parts = su->parts;
    *n = su->n;
    return 0;
}

void stream_upload_free(stream_upload **p)
{
    stream_upload *su = *p;
    if (!su)
        return;
    if (su->running) {
        pthread_mutex_lock(&su->lock);
        su->stop = 1;
        pthread_cond_signal(&su->wake);
        pthread_mutex_unlock(&su->lock);
        pthread_join(su->thread, NULL);
    }
    if (su->fd >= 0)
        close(su->fd);
    pthread_cond_destroy(&su->wake);
    pthread_mutex_destroy(&su->lock);
    free(su->parts);
    free(su->cuts);
    free(su);
    *p = NULL;
}
