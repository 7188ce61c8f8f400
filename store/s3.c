/* SPDX-License-Identifier: Apache-2.0 */
/* s3:// backend: the store operations as signed S3 requests (multipart, parallel ranges, lists, presign). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fail.h"
#include "store/backend.h"
#include "store/s3_http.h"
#include "store/s3_xml.h"

#define HASH_CHUNK (256u << 10) /* stays in L2 between the read and the hash */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static struct s3_store *s3_of(pulse_store *st)
{
    return st->impl;
}

static char *full_key(const struct s3_store *s, const char *key)
{
    struct buf b = { 0 };
    buf_adds(&b, s->prefix);
    buf_adds(&b, key);
    return buf_take(&b);
}

static void hex_of(const unsigned char h[32], char out[65])
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = d[h[i] >> 4];
        out[2 * i + 1] = d[h[i] & 15];
    }
    out[64] = 0;
}

/* SHA-256 of [off, off+len) of the source, read in cache-sized chunks into `chunk` (reused by
 * the caller; may be NULL for memory sources). */
static int hash_range(const struct store_src *src, uint64_t off, uint64_t len, unsigned char h[32],
                      unsigned char *chunk, const char *key)
{
    pulse_sha256_ctx hs;
    pulse_sha256_init(&hs);
    if (src->fd < 0) {
        pulse_sha256_update(&hs, (const unsigned char *)src->data + off, (size_t)len);
    } else {
        for (uint64_t done = 0; done < len;) {
            size_t want = len - done < HASH_CHUNK ? (size_t)(len - done) : HASH_CHUNK;
            ssize_t got = pread(src->fd, chunk, want, (off_t)(off + done));
            if (got <= 0)
                return pulse_fail(PULSE_ERR_IO, "put %s: reading the source failed or it shrank", key);
            pulse_sha256_update(&hs, chunk, (size_t)got);
            done += (uint64_t)got;
        }
    }
    pulse_sha256_final(&hs, h);
    return 0;
}

static int hash_range_hex(const struct store_src *src, uint64_t off, uint64_t len, char hex[65],
                          const char *key)
{
    unsigned char h[32];
    unsigned char *chunk = src->fd < 0 ? NULL : malloc(HASH_CHUNK);
    if (src->fd >= 0 && !chunk)
        return pulse_fail(PULSE_ERR_NOMEM, "%s: out of memory", key);
    int rc = hash_range(src, off, len, h, chunk, key);
    free(chunk);
    if (!rc)
        hex_of(h, hex);
    return rc;
}

/* Part payload hashes for a multipart put, computed on worker threads while the main thread
 * hashes the whole object and the first parts already upload: each part is released to the
 * upload loop (ready flag + curl_multi_wakeup) as soon as its hash is known. */
struct part_hasher {
    const struct store_src *src;
    const char *key;
    CURLM *multi;
    uint64_t part, nparts;
    char (*hex)[65];
    int *ready;          /* per part: 0 pending, 1 hashed, -1 failed (atomic) */
    uint64_t next;       /* next part to take (atomic) */
    int stop;            /* set when the upload gave up (atomic) */
};

static void *part_hasher_main(void *arg)
{
    struct part_hasher *ph = arg;
    unsigned char *chunk = ph->src->fd < 0 ? NULL : malloc(HASH_CHUNK);
    for (;;) {
        uint64_t i = __atomic_fetch_add(&ph->next, 1, __ATOMIC_RELAXED);
        if (i >= ph->nparts || __atomic_load_n(&ph->stop, __ATOMIC_RELAXED))
            break;
        uint64_t off = i * ph->part;
        uint64_t len = ph->src->len - off < ph->part ? ph->src->len - off : ph->part;
        unsigned char h[32];
        int ok = (ph->src->fd < 0 || chunk) && !hash_range(ph->src, off, len, h, chunk, ph->key);
        if (ok)
            hex_of(h, ph->hex[i]);
        __atomic_store_n(&ph->ready[i], ok ? 1 : -1, __ATOMIC_RELEASE);
        curl_multi_wakeup(ph->multi);
    }
    free(chunk);
    return NULL;
}

static int hasher_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    /* The main thread hashes the whole object meanwhile; leave it its core. */
    n = n > 1 ? n - 1 : 1;
    return n > 8 ? 8 : (int)n;
}

static void set_body(struct s3_req *r, const struct store_src *src, uint64_t off, uint64_t len)
{
    r->body = src->fd < 0 ? src->data : NULL;
    r->body_fd = src->fd;
    r->body_off = off;
    r->body_len = len;
}

static void info_from(const struct s3_req *r, pulse_object_info *info, int ranged)
{
    memset(info, 0, sizeof *info);
    info->size = ranged && r->total != UINT64_MAX ? r->total : r->content_length;
    info->mtime = r->mtime;
    snprintf(info->etag, sizeof info->etag, "%s", r->etag);
}

static int s3_head(pulse_store *st, const char *key, pulse_object_info *info)
{
    struct s3_store *s = s3_of(st);
    char *fk = full_key(s, key);
    if (!fk)
        return pulse_fail(PULSE_ERR_NOMEM, "head %s: out of memory", key);
    struct s3_req r, *rp = &r;
    int rc = s3_req_init(s, &r, "head", "HEAD", fk, key);
    if (!rc)
        rc = s3_run(s, &rp, 1);
    if (!rc)
        info_from(&r, info, 0);
    s3_req_free(&r);
    free(fk);
    return rc;
}

/* DELETE ?uploadId=ID of key (full key fk): the upload's parts are freed. One already gone is
 * aborted as asked. */
static int send_abort(struct s3_store *s, const char *fk, const char *key, const char *upload_id)
{
    struct s3_req r, *rp = &r;
    int rc = s3_req_init(s, &r, "abort upload", "DELETE", fk, key);
    if (!rc) {
        r.query[0] = (struct sigv4_kv){ "uploadId", upload_id };
        r.nquery = 1;
        r.sink = SINK_BUF;
        r.max = 1 << 20;
        rc = s3_run(s, &rp, 1);
        if (rc == PULSE_ERR_NOTFOUND && r.status == 404)
            rc = 0;
    }
    s3_req_free(&r);
    return rc;
}

/* Keeps the first failure's detail while cleanup requests run. */
static int abort_upload(struct s3_store *s, const char *fk, const char *key, const char *upload_id,
                        int rc)
{
    char saved[300];
    snprintf(saved, sizeof saved, "%s", pulse_last_error());
    send_abort(s, fk, key, upload_id);
    return pulse_fail(rc, "%s", saved);
}

static int s3_list_uploads(pulse_store *st, const char *prefix, pulse_store_upload_fn fn, void *ctx);

struct others {
    struct s3_store *s;
    const char *key, *fk, *mine;   /* mine: this put's own upload id, or NULL */
};

static int abort_other(void *ctx, const char *key, const char *upload_id, int64_t initiated)
{
    struct others *o = ctx;
    (void)initiated;
    if (!strcmp(key, o->key) && (!o->mine || strcmp(upload_id, o->mine)))
        send_abort(o->s, o->fk, o->key, upload_id);
    return 0;
}

/* KEY holds its bytes (PULSE_PUT_CONTENT_ADDRESSED): the other incomplete uploads of exactly that
 * key are aborted, best effort (a failure here never fails the put; the caller's result and its
 * detail are kept). */
static int abort_others(pulse_store *st, struct s3_store *s, const char *key, const char *fk, const char *mine,
                        int rc)
{
    char saved[300];
    snprintf(saved, sizeof saved, "%s", pulse_last_error());
    struct others o = { s, key, fk, mine };
    s3_list_uploads(st, key, abort_other, &o);
    if (rc)
        return pulse_fail(rc, "%s", saved);
    pulse_clear_error();
    return 0;
}

static int multipart_put(pulse_store *st, struct s3_store *s, const char *key, const char *fk,
                         const struct store_src *src, unsigned flags)
{
    uint64_t part = s->settings->part_size;
    uint64_t nparts = (src->len + part - 1) / part;
    if (nparts > 10000) { /* S3's limit on parts */
        part = (src->len + 9999) / 10000;
        nparts = (src->len + part - 1) / part;
    }
    int rc;
    if (flags & PULSE_PUT_IF_ABSENT) {
        /* Cheap early answer; the atomic check is If-None-Match on the completion. */
        pulse_object_info info;
        rc = s3_head(st, key, &info);
        if (!rc) {
            rc = pulse_fail(PULSE_ERR_EXISTS, "put %s: key already exists", key);
            return flags & PULSE_PUT_CONTENT_ADDRESSED ? abort_others(st, s, key, fk, NULL, rc) : rc;
        }
        if (rc != PULSE_ERR_NOTFOUND)
            return rc;
    }
    char (*ph)[65] = calloc(nparts, sizeof *ph);
    int *ready = calloc(nparts, sizeof *ready);
    char (*pn)[24] = calloc(nparts, sizeof *pn);
    struct s3_req *parts = calloc(nparts, sizeof *parts);
    struct s3_req **pp = calloc(nparts, sizeof *pp);
    char *upload_id = NULL;
    struct s3_req init, done;
    memset(&init, 0, sizeof init);
    memset(&done, 0, sizeof done);
    struct buf xml = { 0 };
    struct part_hasher hz = { src, key, s->multi, part, nparts, ph, ready, 0, 0 };
    pthread_t tids[8];
    int nthreads = 0;
    if (!ph || !ready || !pn || !parts || !pp) {
        rc = pulse_fail(PULSE_ERR_NOMEM, "put %s: out of memory", key);
        goto out;
    }
    for (int want = hasher_threads(); nthreads < want; nthreads++)
        if (pthread_create(&tids[nthreads], NULL, part_hasher_main, &hz))
            break;
    if (!nthreads) {
        rc = pulse_fail(PULSE_ERR_NOMEM, "put %s: cannot start a hashing thread", key);
        goto out;
    }
    /* The whole object's digest goes into the metadata of the upload's first request, so it
     * must be known first; the part hashes (the SigV4 payload hashes) are computed beside it. */
    char whole_hex[65];
    if ((rc = hash_range_hex(src, 0, src->len, whole_hex, key)))
        goto out;

    struct s3_req *ip = &init;
    if ((rc = s3_req_init(s, &init, "put (start multipart)", "POST", fk, key)))
        goto out;
    init.query[0] = (struct sigv4_kv){ "uploads", NULL };
    init.nquery = 1;
    init.hdr[0] = (struct sigv4_kv){ "x-amz-meta-pulse-sha256", whole_hex };
    init.nhdr = 1;
    init.sink = SINK_BUF;
    init.max = 1 << 20;
    if ((rc = s3_run(s, &ip, 1)))
        goto out;
    upload_id = xml_tag(init.body_out.data, "UploadId", NULL);
    if (!upload_id || !*upload_id) {
        rc = pulse_fail(PULSE_ERR_SERVER, "put %s: no UploadId in the server's answer", key);
        goto out;
    }
    for (uint64_t i = 0; i < nparts; i++) {
        uint64_t off = i * part, len = src->len - off < part ? src->len - off : part;
        snprintf(pn[i], sizeof pn[i], "%llu", (unsigned long long)(i + 1));
        if ((rc = s3_req_init(s, &parts[i], "put (part)", "PUT", fk, key)))
            goto fail;
        parts[i].query[0] = (struct sigv4_kv){ "partNumber", pn[i] };
        parts[i].query[1] = (struct sigv4_kv){ "uploadId", upload_id };
        parts[i].nquery = 2;
        set_body(&parts[i], src, off, len);
        parts[i].payload_hash_of = ph[i];
        parts[i].ready = &ready[i];
        parts[i].sink = SINK_NONE;
        pp[i] = &parts[i];
    }
    s3_progress_begin(s, src->len);
    rc = s3_run(s, pp, nparts);
    s3_progress_end(s);
    if (rc)
        goto fail;
    buf_adds(&xml, "<CompleteMultipartUpload>");
    for (uint64_t i = 0; i < nparts; i++)
        buf_printf(&xml, "<Part><PartNumber>%s</PartNumber><ETag>\"%s\"</ETag></Part>", pn[i],
                   parts[i].etag);
    buf_adds(&xml, "</CompleteMultipartUpload>");
    if (xml.oom) {
        rc = pulse_fail(PULSE_ERR_NOMEM, "put %s: out of memory", key);
        goto fail;
    }
    struct s3_req *dp = &done;
    if ((rc = s3_req_init(s, &done, "put (complete multipart)", "POST", fk, key)))
        goto fail;
    done.query[0] = (struct sigv4_kv){ "uploadId", upload_id };
    done.nquery = 1;
    done.body = xml.data;
    done.body_len = xml.len;
    sigv4_sha256_hex(xml.data, xml.len, done.payload_hash);
    if (flags & PULSE_PUT_IF_ABSENT) {
        done.hdr[0] = (struct sigv4_kv){ "If-None-Match", "*" };
        done.nhdr = 1;
        done.if_absent = 1;
    }
    done.sink = SINK_BUF;
    done.max = 1 << 20;
    rc = s3_run(s, &dp, 1);
    if (rc == PULSE_ERR_NOTFOUND && done.attempt > 0) {
        /* A completion that succeeded but whose answer was lost: the retry finds no upload.
         * The object is ours when it carries our digest. */
        struct s3_req h, *hp = &h;
        if (!s3_req_init(s, &h, "head", "HEAD", fk, key) && !s3_run(s, &hp, 1) &&
            !strcmp(h.meta_sha, whole_hex))
            rc = 0;
        s3_req_free(&h);
    }
    if (!rc)
        goto done;
fail:
    if (rc == PULSE_ERR_NOTFOUND && (flags & PULSE_PUT_IF_ABSENT)) {
        /* The upload vanished: another writer that found the key present aborted it. The key
         * exists, so what If-None-Match would have answered is the answer. */
        pulse_object_info info;
        char saved[300];
        snprintf(saved, sizeof saved, "%s", pulse_last_error());
        if (s3_head(st, key, &info) == 0)
            rc = pulse_fail(PULSE_ERR_EXISTS, "put %s: key already exists (written by another upload meanwhile)", key);
        else
            pulse_fail(rc, "%s", saved);
    }
    rc = abort_upload(s, fk, key, upload_id, rc);
done:
    if ((!rc || rc == PULSE_ERR_EXISTS) && (flags & PULSE_PUT_CONTENT_ADDRESSED) && (flags & PULSE_PUT_IF_ABSENT))
        rc = abort_others(st, s, key, fk, upload_id, rc);
out:
    __atomic_store_n(&hz.stop, 1, __ATOMIC_RELAXED);
    for (int t = 0; t < nthreads; t++)
        pthread_join(tids[t], NULL);
    for (uint64_t i = 0; parts && i < nparts; i++)
        s3_req_free(&parts[i]);
    s3_req_free(&init);
    s3_req_free(&done);
    buf_free(&xml);
    free(upload_id);
    free(ph);
    free(ready);
    free(pn);
    free(parts);
    free(pp);
    return rc;
}

static int s3_put(pulse_store *st, const char *key, const struct store_src *src, unsigned flags)
{
    struct s3_store *s = s3_of(st);
    char *fk = full_key(s, key);
    if (!fk)
        return pulse_fail(PULSE_ERR_NOMEM, "put %s: out of memory", key);
    int rc;
    if (src->len >= s->settings->multipart_threshold) {
        rc = multipart_put(st, s, key, fk, src, flags);
        free(fk);
        return rc;
    }
    struct s3_req r, *rp = &r;
    rc = s3_req_init(s, &r, "put", "PUT", fk, key);
    if (!rc)
        rc = hash_range_hex(src, 0, src->len, r.payload_hash, key);
    if (!rc) {
        set_body(&r, src, 0, src->len);
        /* The payload hash doubles as the stored digest that gets verify against. */
        r.hdr[r.nhdr++] = (struct sigv4_kv){ "x-amz-meta-pulse-sha256", r.payload_hash };
        if (flags & PULSE_PUT_IF_ABSENT) {
            r.hdr[r.nhdr++] = (struct sigv4_kv){ "If-None-Match", "*" };
            r.if_absent = 1;
        }
        r.sink = SINK_BUF;
        r.max = 1 << 20;
        s3_progress_begin(s, src->len);
        rc = s3_run(s, &rp, 1);
        s3_progress_end(s);
    }
    s3_req_free(&r);
    free(fk);
    return rc;
}

/* Verifies a parallel ranged download while it runs: hashes the output file from the start up
 * to the contiguous prefix already written (whole ranges done, plus what the lowest range in
 * flight has received), so that at the end only the tail is left to hash. */
struct follow_hasher {
    int fd;
    const struct s3_req *rs;
    uint64_t part, nparts, n;
    int stop;                  /* atomic: 1 = the download ended (finish the rest), 2 = give up */
    int rc;                    /* 0, or PULSE_ERR_IO reading the file back */
    unsigned char digest[32];
};

static uint64_t written_prefix(const struct follow_hasher *f, uint64_t *cur, uint64_t *base)
{
    while (*cur < f->nparts) {
        uint64_t len = f->n - *base < f->part ? f->n - *base : f->part;
        uint64_t got = __atomic_load_n(&f->rs[*cur].received, __ATOMIC_ACQUIRE);
        if (got < len)
            return *base + got;
        *base += len; /* a range once complete may be re-fetched, but with the same bytes (If-Match) */
        (*cur)++;
    }
    return f->n;
}

static void *follow_hasher_main(void *arg)
{
    struct follow_hasher *f = arg;
    pulse_sha256_ctx hs;
    pulse_sha256_init(&hs);
    unsigned char *chunk = malloc(HASH_CHUNK);
    uint64_t pos = 0, cur = 0, base = 0;
    f->rc = chunk ? 0 : PULSE_ERR_NOMEM;
    while (!f->rc && pos < f->n) {
        int stop = __atomic_load_n(&f->stop, __ATOMIC_ACQUIRE);
        if (stop == 2)
            break;
        /* After the download the whole file is there; before, only the written prefix. */
        uint64_t upto = stop ? f->n : written_prefix(f, &cur, &base);
        if (upto - pos < HASH_CHUNK && upto < f->n && !stop) {
            struct timespec ts = { 0, 2000000 };
            nanosleep(&ts, NULL);
            continue;
        }
        while (pos < upto) {
            size_t want = upto - pos < HASH_CHUNK ? (size_t)(upto - pos) : HASH_CHUNK;
            ssize_t got = pread(f->fd, chunk, want, (off_t)pos);
            if (got <= 0) {
                f->rc = PULSE_ERR_IO;
                break;
            }
            pulse_sha256_update(&hs, chunk, (size_t)got);
            pos += (uint64_t)got;
        }
    }
    pulse_sha256_final(&hs, f->digest);
    free(chunk);
    return NULL;
}

static int parallel_get(struct s3_store *s, const char *key, const char *fk, uint64_t offset,
                        uint64_t n, const pulse_object_info *info, const char *meta_sha, int fd)
{
    uint64_t part = s->settings->part_size;
    uint64_t nparts = (n + part - 1) / part;
    struct s3_req *rs = calloc(nparts, sizeof *rs);
    struct s3_req **rp = calloc(nparts, sizeof *rp);
    char etag[140];
    snprintf(etag, sizeof etag, "\"%s\"", info->etag);
    int rc = 0;
    if (!rs || !rp) {
        rc = pulse_fail(PULSE_ERR_NOMEM, "get %s: out of memory", key);
        goto out;
    }
    for (uint64_t i = 0; i < nparts; i++) {
        uint64_t off = i * part, len = n - off < part ? n - off : part;
        if ((rc = s3_req_init(s, &rs[i], "get (range)", "GET", fk, key)))
            goto out;
        s3_req_range(&rs[i], offset + off, len);
        /* Every range from the same version of the object. */
        if (info->etag[0])
            rs[i].hdr[rs[i].nhdr++] = (struct sigv4_kv){ "If-Match", etag };
        rs[i].sink = SINK_FD;
        rs[i].sink_fd = fd;
        rs[i].sink_off = off;
        rs[i].expect_len = len;
        rp[i] = &rs[i];
    }
    /* Whole objects with a stored digest are verified by a thread following the download. */
    struct follow_hasher fh = { fd, rs, part, nparts, n, 0, 0, { 0 } };
    pthread_t tid;
    int following = offset == 0 && meta_sha[0] && !pthread_create(&tid, NULL, follow_hasher_main, &fh);
    s3_progress_begin(s, n);
    rc = s3_run(s, rp, nparts);
    s3_progress_end(s);
    if (rc == PULSE_ERR_PRECONDITION)
        rc = pulse_fail(PULSE_ERR_PRECONDITION, "get %s: the object changed during the download", key);
    if (following) {
        __atomic_store_n(&fh.stop, rc ? 2 : 1, __ATOMIC_RELEASE);
        pthread_join(tid, NULL);
        if (!rc && fh.rc)
            rc = pulse_fail(fh.rc, "get %s: reading the output back to verify it failed", key);
        char hex[65];
        hex_of(fh.digest, hex);
        if (!rc && strcmp(hex, meta_sha))
            rc = pulse_fail(PULSE_ERR_CORRUPT, "get %s: downloaded bytes fail the object's SHA-256", key);
    } else if (!rc && offset == 0 && meta_sha[0]) {
        char hex[65];
        struct store_src whole = { NULL, n, fd };
        if (!(rc = hash_range_hex(&whole, 0, n, hex, key)) && strcmp(hex, meta_sha))
            rc = pulse_fail(PULSE_ERR_CORRUPT, "get %s: downloaded bytes fail the object's SHA-256", key);
    }
out:
    for (uint64_t i = 0; rs && i < nparts; i++)
        s3_req_free(&rs[i]);
    free(rs);
    free(rp);
    return rc;
}

static int s3_get_ranges(pulse_store *st, pulse_store_range *x, size_t n, int fd)
{
    struct s3_store *s = s3_of(st);
    struct s3_req *rs = calloc(n, sizeof *rs);
    struct s3_req **rp = calloc(n, sizeof *rp);
    char **fks = calloc(n, sizeof *fks);
    int rc = 0;
    uint64_t total = 0;
    if (!rs || !rp || !fks)
        rc = pulse_fail(PULSE_ERR_NOMEM, "get: out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        if (!(fks[i] = full_key(s, x[i].key))) {
            rc = pulse_fail(PULSE_ERR_NOMEM, "get %s: out of memory", x[i].key);
            break;
        }
        if ((rc = s3_req_init(s, &rs[i], "get (range)", "GET", fks[i], x[i].key)))
            break;
        s3_req_range(&rs[i], x[i].offset, x[i].length);
        rs[i].sink = SINK_FD;
        rs[i].sink_fd = fd;
        rs[i].sink_off = x[i].at;
        rs[i].expect_len = x[i].length;
        rs[i].received_to = &x[i].done;
        rp[i] = &rs[i];
        total += x[i].length;
    }
    if (!rc) {
        s3_progress_begin(s, total);
        rc = s3_run(s, rp, n);
        s3_progress_end(s);
    }
    for (size_t i = 0; !rc && i < n; i++) {
        pulse_object_info info;
        info_from(&rs[i], &info, 1);
        x[i].object_size = info.size;
    }
    for (size_t i = 0; rs && i < n; i++)
        s3_req_free(&rs[i]);
    for (size_t i = 0; fks && i < n; i++)
        free(fks[i]);
    free(rs);
    free(rp);
    free(fks);
    return rc;
}

/* Whether n bytes into a file come as parallel ranged GETs rather than one. */
static int parallel_worth(const struct s3_store *s, uint64_t n)
{
    return n >= s->settings->multipart_threshold && n > s->settings->part_size;
}

static int s3_get(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                  const char *if_none_match, const struct store_dst *dst, pulse_object_info *info)
{
    struct s3_store *s = s3_of(st);
    char *fk = full_key(s, key);
    if (!fk)
        return pulse_fail(PULSE_ERR_NOMEM, "get %s: out of memory", key);
    int rc = 0;
    uint64_t expect = UINT64_MAX;
    /* A range that one GET fetches whatever the object's size goes without a HEAD first (a
     * round trip less for every fetch of a known size; the answer's Content-Range gives the
     * size). To a file, a range of unknown extent asks first, so that a large object comes
     * as parallel ranges. */
    int one_get = length != PULSE_TO_END && !parallel_worth(s, length);
    /* The stored digest is checked where the caller asked for the whole object; a range it
     * names is its own to check (a follower checks size + 1 bytes against its record). */
    const int whole_asked = offset == 0 && length == PULSE_TO_END;
    if (dst->fd >= 0 && !if_none_match && !one_get) {
        struct s3_req h, *hp = &h;
        rc = s3_req_init(s, &h, "get", "HEAD", fk, key);
        if (!rc)
            rc = s3_run(s, &hp, 1);
        char meta[65];
        memcpy(meta, h.meta_sha, sizeof meta);
        if (!rc)
            info_from(&h, info, 0);
        s3_req_free(&h);
        if (rc)
            goto out;
        if (offset > info->size || (offset == info->size && offset > 0)) {
            rc = pulse_fail(PULSE_ERR_INVALID, "get %s: range starts at %llu, object has %llu bytes",
                            key, (unsigned long long)offset, (unsigned long long)info->size);
            goto out;
        }
        uint64_t n = info->size - offset < length ? info->size - offset : length;
        if (parallel_worth(s, n)) {
            rc = parallel_get(s, key, fk, offset, n, info, whole_asked ? meta : "", dst->fd);
            goto out;
        }
        if (n == 0)
            goto out; /* empty object or empty range: nothing to fetch */
        expect = n;
        length = n;
    }
    struct s3_req r, *rp = &r;
    char inm[140];
    if ((rc = s3_req_init(s, &r, "get", "GET", fk, key)))
        goto out;
    int ranged = offset > 0 || length != PULSE_TO_END;
    if (ranged && expect == UINT64_MAX && length != PULSE_TO_END && length == 0) {
        /* An empty range: nothing to fetch, but the key must exist. */
        s3_req_free(&r);
        rc = s3_head(st, key, info);
        if (!rc && dst->fd < 0) {
            *dst->data = malloc(1);
            *dst->len = 0;
            rc = *dst->data ? 0 : pulse_fail(PULSE_ERR_NOMEM, "get %s: out of memory", key);
        }
        goto out;
    }
    if (ranged)
        s3_req_range(&r, offset, length);
    if (if_none_match) {
        snprintf(inm, sizeof inm, "\"%s\"", if_none_match);
        r.hdr[r.nhdr++] = (struct sigv4_kv){ "If-None-Match", inm };
    }
    r.verify_sha = whole_asked;
    r.expect_len = expect;
    if (dst->fd >= 0) {
        r.sink = SINK_FD;
        r.sink_fd = dst->fd;
    } else {
        r.sink = SINK_BUF;
        r.max = dst->max;
    }
    r.progress_from_length = expect == UINT64_MAX && dst->fd >= 0;
    s3_progress_begin(s, expect != UINT64_MAX ? expect : 0);
    rc = s3_run(s, &rp, 1);
    s3_progress_end(s);
    if (rc == PULSE_ERR_INVALID && r.status == 416) {
        /* S3 answers 416 to a range starting at or past the end, and to any Range on an empty
         * object (from 0, an empty answer for us); the object's size tells which. */
        rc = s3_head(st, key, info);
        if (!rc && (offset > 0 || info->size != 0))
            rc = pulse_fail(PULSE_ERR_INVALID, "get %s: range starts at %llu, object has %llu bytes", key,
                            (unsigned long long)offset, (unsigned long long)info->size);
        if (!rc && dst->fd < 0) {
            *dst->data = malloc(1);
            *dst->len = 0;
            if (!*dst->data)
                rc = pulse_fail(PULSE_ERR_NOMEM, "get %s: out of memory", key);
        }
        s3_req_free(&r);
        goto out;
    }
    if (!rc) {
        if (dst->fd < 0) {
            char *data = buf_take(&r.body_out);
            if (!data)
                data = malloc(1);
            if (!data) {
                rc = pulse_fail(PULSE_ERR_NOMEM, "get %s: out of memory", key);
            } else {
                *dst->data = data;
                *dst->len = (size_t)r.received;
            }
        }
        if (expect == UINT64_MAX || dst->fd < 0)
            info_from(&r, info, ranged);
    }
    s3_req_free(&r);
out:
    free(fk);
    return rc;
}

static int s3_del(pulse_store *st, const char *key)
{
    struct s3_store *s = s3_of(st);
    char *fk = full_key(s, key);
    if (!fk)
        return pulse_fail(PULSE_ERR_NOMEM, "delete %s: out of memory", key);
    struct s3_req r, *rp = &r;
    int rc = s3_req_init(s, &r, "delete", "DELETE", fk, key);
    r.sink = SINK_BUF;
    r.max = 1 << 20;
    if (!rc)
        rc = s3_run(s, &rp, 1);
    s3_req_free(&r);
    free(fk);
    return rc;
}

/* The continuation tokens one listing has been given, as keyed 64-bit hashes (the server
 * cannot aim collisions at a key it never sees): a token seen twice is a loop. */
struct token_set {
    uint64_t *slot;   /* 0: empty */
    size_t cap, n;
    unsigned char key[crypto_shorthash_KEYBYTES];
};

/* 1 when token was new (now added), 0 when seen before, -1 when out of memory. */
static int token_add(struct token_set *t, const char *token)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        uint64_t *slot = calloc(cap, sizeof *slot);
        if (!slot)
            return -1;
        for (size_t i = 0; i < t->cap; i++)
            for (size_t j = t->slot[i] & (cap - 1); t->slot[i]; j = (j + 1) & (cap - 1))
                if (!slot[j]) {
                    slot[j] = t->slot[i];
                    break;
                }
        free(t->slot);
        t->slot = slot;
        t->cap = cap;
    }
    unsigned char h[crypto_shorthash_BYTES];
    crypto_shorthash(h, (const unsigned char *)token, strlen(token), t->key);
    uint64_t v;
    memcpy(&v, h, sizeof v);
    v |= 1; /* never 0, the empty mark */
    size_t j = v & (t->cap - 1);
    for (; t->slot[j]; j = (j + 1) & (t->cap - 1))
        if (t->slot[j] == v)
            return 0;
    t->slot[j] = v;
    t->n++;
    return 1;
}

/* A listing asks page after page while the server says there is more. A broken or hostile
 * server could say so forever (a new token each time, or two in turn) or send a page that is
 * no listing at all; each page is checked (s3_list_page), each token must be new, and the
 * pages are bounded by what list_max_keys keys need. */
static int s3_list(pulse_store *st, const char *prefix, const char *start_after,
                   pulse_store_list_fn fn, void *ctx)
{
    struct s3_store *s = s3_of(st);
    char *fp = full_key(s, prefix), *fsa = start_after ? full_key(s, start_after) : NULL;
    char page[16];
    snprintf(page, sizeof page, "%u", (unsigned)s->settings->list_page);
    uint64_t max_pages = (s->settings->list_max_keys + s->settings->list_page - 1) / s->settings->list_page + 1;
    struct buf w = { 0 };
    buf_printf(&w, "s3://%s/%s at %s", s->bucket, fp ? fp : "", s->origin);
    struct s3_list_state ls = { .what = w.data ? w.data : s->bucket, .prefix = fp, .strip = strlen(s->prefix),
                                .max_keys = s->settings->list_max_keys, .last = fsa };
    struct token_set seen = { 0 };
    randombytes_buf(seen.key, sizeof seen.key);
    char *token = NULL;
    uint64_t pages = 0;
    int rc = (!fp || (start_after && !fsa) || w.oom) ? pulse_fail(PULSE_ERR_NOMEM, "list: out of memory") : 0;
    while (!rc) {
        if (++pages > max_pages) {
            rc = pulse_fail(PULSE_ERR_LIMIT, "list %s: the server still says there is more after %llu pages "
                            "(%llu keys); PULSE_S3_LIST_MAX_KEYS=%llu bounds a listing", ls.what,
                            (unsigned long long)max_pages, (unsigned long long)ls.keys,
                            (unsigned long long)s->settings->list_max_keys);
            break;
        }
        struct s3_req r, *rp = &r;
        if ((rc = s3_req_init(s, &r, "list", "GET", NULL, NULL)))
            break;
        r.query[r.nquery++] = (struct sigv4_kv){ "list-type", "2" };
        r.query[r.nquery++] = (struct sigv4_kv){ "prefix", fp };
        r.query[r.nquery++] = (struct sigv4_kv){ "max-keys", page };
        if (token)
            r.query[r.nquery++] = (struct sigv4_kv){ "continuation-token", token };
        else if (fsa)
            r.query[r.nquery++] = (struct sigv4_kv){ "start-after", fsa };
        r.sink = SINK_BUF;
        r.max = 64u << 20;
        rc = s3_run(s, &rp, 1);
        char *next = NULL;
        if (!rc)
            rc = s3_list_page(r.body_out.data ? r.body_out.data : "", r.body_out.data ? r.body_out.len : 0, &ls,
                              fn, ctx, &next);
        int fresh = !rc && next ? token_add(&seen, next) : 1;
        if (fresh < 0)
            rc = pulse_fail(PULSE_ERR_NOMEM, "list: out of memory");
        else if (!fresh)
            rc = pulse_fail(PULSE_ERR_SERVER, "list %s: the server gave continuation token '%.40s' a second "
                            "time after %llu pages (a loop)", ls.what, next, (unsigned long long)pages);
        free(token);
        token = rc ? NULL : next;
        if (rc)
            free(next);
        s3_req_free(&r);
        if (!token)
            break;
    }
    free(token);
    free(seen.slot);
    free(fp);
    free(ls.last); /* fsa, or the last key listed */
    buf_free(&w);
    return rc;
}

/* ListMultipartUploads, page after page (bounded as a listing is): each page is read whole and
 * checked (s3_uploads_page), every upload must lie under the prefix, and the markers must move
 * on, else a server could keep a pass going forever. */
static int s3_list_uploads(pulse_store *st, const char *prefix, pulse_store_upload_fn fn, void *ctx)
{
    struct s3_store *s = s3_of(st);
    char *fp = full_key(s, prefix);
    char page[16];
    snprintf(page, sizeof page, "%u", (unsigned)s->settings->list_page);
    uint64_t max_pages = (s->settings->list_max_keys + s->settings->list_page - 1) / s->settings->list_page + 1;
    struct buf w = { 0 };
    buf_printf(&w, "s3://%s/%s at %s", s->bucket, fp ? fp : "", s->origin);
    int rc = (!fp || w.oom) ? pulse_fail(PULSE_ERR_NOMEM, "list uploads: out of memory") : 0;
    size_t plen = fp ? strlen(fp) : 0, strip = strlen(s->prefix);
    char *key_marker = NULL, *id_marker = NULL;
    uint64_t pages = 0, seen = 0;
    while (!rc) {
        if (++pages > max_pages) {
            rc = pulse_fail(PULSE_ERR_LIMIT, "list uploads %s: the server still says there is more after %llu pages",
                            w.data, (unsigned long long)max_pages);
            break;
        }
        struct s3_req r, *rp = &r;
        if ((rc = s3_req_init(s, &r, "list uploads", "GET", NULL, NULL)))
            break;
        r.query[r.nquery++] = (struct sigv4_kv){ "uploads", NULL };
        r.query[r.nquery++] = (struct sigv4_kv){ "prefix", fp };
        r.query[r.nquery++] = (struct sigv4_kv){ "max-uploads", page };
        if (key_marker) {
            r.query[r.nquery++] = (struct sigv4_kv){ "key-marker", key_marker };
            r.query[r.nquery++] = (struct sigv4_kv){ "upload-id-marker", id_marker };
        }
        r.sink = SINK_BUF;
        r.max = 64u << 20;
        rc = s3_run(s, &rp, 1);
        struct s3_upload *v = NULL;
        size_t n = 0;
        char *nk = NULL, *ni = NULL;
        if (!rc)
            rc = s3_uploads_page(r.body_out.data ? r.body_out.data : "", r.body_out.data ? r.body_out.len : 0, w.data,
                                 &v, &n, &nk, &ni);
        for (size_t i = 0; !rc && i < n; i++)
            if (strncmp(v[i].key, fp, plen))
                rc = pulse_fail(PULSE_ERR_SERVER, "list uploads %s: upload of '%.200s' is outside the prefix asked for",
                                w.data, v[i].key);
        if (!rc && nk && key_marker && (strcmp(nk, key_marker) < 0 || (!strcmp(nk, key_marker) && !strcmp(ni, id_marker))))
            rc = pulse_fail(PULSE_ERR_SERVER, "list uploads %s: the next markers do not move on (a loop)", w.data);
        if (!rc && (seen += n) > s->settings->list_max_keys)
            rc = pulse_fail(PULSE_ERR_LIMIT, "list uploads %s: more than %llu uploads (PULSE_S3_LIST_MAX_KEYS)", w.data,
                            (unsigned long long)s->settings->list_max_keys);
        s3_req_free(&r);   /* before FN, which may make requests of its own (an abort) */
        for (size_t i = 0; !rc && i < n; i++)
            rc = fn(ctx, v[i].key + strip, v[i].upload_id, v[i].initiated);
        s3_uploads_free(v, n);
        free(key_marker);
        free(id_marker);
        key_marker = rc ? NULL : nk;
        id_marker = rc ? NULL : ni;
        if (rc) {
            free(nk);
            free(ni);
        }
        if (!key_marker)
            break;
    }
    free(key_marker);
    free(id_marker);
    free(fp);
    buf_free(&w);
    return rc;
}

static int s3_abort_upload(pulse_store *st, const char *key, const char *upload_id)
{
    struct s3_store *s = s3_of(st);
    char *fk = full_key(s, key);
    if (!fk)
        return pulse_fail(PULSE_ERR_NOMEM, "abort upload %s: out of memory", key);
    int rc = send_abort(s, fk, key, upload_id);
    free(fk);
    return rc;
}

static int s3_presign(pulse_store *st, const char *key, unsigned long expires, char **url)
{
    struct s3_store *s = s3_of(st);
    if (!s->cfg.access_key)
        return pulse_fail(PULSE_ERR_AUTH, "presign %s: no credentials to sign with", key);
    char *fk = full_key(s, key);
    struct buf path = { 0 }, u = { 0 };
    buf_adds(&path, s->base_path);
    buf_addc(&path, '/');
    buf_adds(&path, fk ? fk : "");
    free(fk);
    if (path.oom)
        return pulse_fail(PULSE_ERR_NOMEM, "presign: out of memory");
    char date[17];
    sigv4_amz_date((long long)time(NULL), date);
    struct sigv4_credentials c = { s->cfg.access_key, s->cfg.secret_key, s->cfg.session_token,
                                   s->cfg.region, "s3" };
    char *q = NULL;
    int rc = sigv4_presign_query("GET", path.data, s->host, &c, date, expires, &q);
    if (!rc) {
        buf_adds(&u, s->origin);
        sigv4_uri_encode(&u, path.data, path.len, 1);
        buf_addc(&u, '?');
        buf_adds(&u, q);
        *url = buf_take(&u);
        if (!*url)
            rc = pulse_fail(PULSE_ERR_NOMEM, "presign: out of memory");
    }
    free(q);
    buf_free(&path);
    return rc;
}

/* Small puts and gets to memory run side by side on the multi handle; the rest (files,
 * multipart) go one at a time, each parallel inside. */
static int s3_batch(pulse_store *st, pulse_transfer *x, size_t n)
{
    struct s3_store *s = s3_of(st);
    struct s3_req *rs = calloc(n ? n : 1, sizeof *rs);
    struct s3_req **rp = calloc(n ? n : 1, sizeof *rp);
    char **fks = calloc(n ? n : 1, sizeof *fks);
    size_t *map = calloc(n ? n : 1, sizeof *map);
    if (!rs || !rp || !fks || !map) {
        free(rs); free(rp); free(fks); free(map);
        return pulse_fail(PULSE_ERR_NOMEM, "batch: out of memory");
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        pulse_transfer *t = &x[i];
        if (t->result)
            continue;
        int simple = (t->op == PULSE_XFER_GET && !t->path) ||
                     (t->op == PULSE_XFER_PUT && !t->path && t->len < s->settings->multipart_threshold);
        if (!simple) {
            int rc;
            if (t->op == PULSE_XFER_PUT)
                rc = t->path ? store_put_path(st, t->key, t->path, t->flags)
                             : store_put_data(st, t->key, t->data, t->len, t->flags);
            else
                rc = store_get_path(st, t->key, t->offset, t->length, t->path, NULL);
            t->result = rc;
            snprintf(t->detail, sizeof t->detail, "%s", rc ? pulse_last_error() : "");
            continue;
        }
        struct s3_req *r = &rs[m];
        fks[m] = full_key(s, t->key);
        int rc = fks[m] ? s3_req_init(s, r, t->op == PULSE_XFER_PUT ? "put" : "get",
                                      t->op == PULSE_XFER_PUT ? "PUT" : "GET", fks[m], t->key)
                        : PULSE_ERR_NOMEM;
        if (rc) {
            t->result = rc;
            snprintf(t->detail, sizeof t->detail, "%s: out of memory", t->key);
            continue;
        }
        if (t->op == PULSE_XFER_PUT) {
            r->body = t->data ? t->data : "";
            r->body_len = t->len;
            sigv4_sha256_hex(r->body, t->len, r->payload_hash);
            r->hdr[r->nhdr++] = (struct sigv4_kv){ "x-amz-meta-pulse-sha256", r->payload_hash };
            if (t->flags & PULSE_PUT_IF_ABSENT) {
                r->hdr[r->nhdr++] = (struct sigv4_kv){ "If-None-Match", "*" };
                r->if_absent = 1;
            }
            r->sink = SINK_BUF;
            r->max = 1 << 20;
        } else {
            if (t->offset > 0 || t->length != PULSE_TO_END)
                s3_req_range(r, t->offset, t->length ? t->length : PULSE_TO_END);
            r->verify_sha = t->offset == 0 && (t->length == PULSE_TO_END || t->length == 0);   /* as s3_get */
            r->sink = SINK_BUF;
            r->max = t->max_size;
        }
        rp[m] = r;
        map[m] = i;
        m++;
    }
    if (m)
        s3_run(s, rp, m);
    for (size_t j = 0; j < m; j++) {
        pulse_transfer *t = &x[map[j]];
        struct s3_req *r = rp[j];
        t->result = r->result;
        snprintf(t->detail, sizeof t->detail, "%.250s", r->result ? r->detail : "");
        if (!r->result && t->op == PULSE_XFER_GET) {
            t->len = (size_t)r->received;
            t->out = buf_take(&r->body_out);
            if (!t->out)
                t->out = malloc(1);
            if (!t->out) {
                t->result = PULSE_ERR_NOMEM;
                snprintf(t->detail, sizeof t->detail, "get %s: out of memory", t->key);
            }
        }
        s3_req_free(r);
        free(fks[j]);
    }
    free(rs); free(rp); free(fks); free(map);
    return 0;
}

static void s3_close(pulse_store *st)
{
    struct s3_store *s = s3_of(st);
    if (!s)
        return;
    for (int i = 0; i < s->npool; i++)
        curl_easy_cleanup(s->pool[i]);
    if (s->multi)
        curl_multi_cleanup(s->multi);
    s3_config_free(&s->cfg);
    free(s->bucket);
    free(s->prefix);
    free(s->origin);
    free(s->host);
    free(s->base_path);
    free(s);
    st->impl = NULL;
}

static const struct store_ops s3_ops = {
    .put = s3_put, .get = s3_get, .get_ranges = s3_get_ranges, .head = s3_head, .del = s3_del, .list = s3_list,
    .presign = s3_presign, .list_uploads = s3_list_uploads, .abort_upload = s3_abort_upload,
    .batch = s3_batch, .close = s3_close,
};

int store_s3_open(pulse_store *st, const char *rest)
{
    const char *slash = strchr(rest, '/');
    size_t blen = slash ? (size_t)(slash - rest) : strlen(rest);
    if (blen < 1 || blen > 255)
        return pulse_fail(PULSE_ERR_FORMAT, "s3 URL: no bucket name");
    for (size_t i = 0; i < blen; i++) {
        char c = rest[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_'))
            return pulse_fail(PULSE_ERR_FORMAT, "s3 URL: bad character in the bucket name");
    }
    const char *prefix = slash ? slash + 1 : "";
    if (*prefix && store_check_prefix(prefix))
        return PULSE_ERR_FORMAT;
    if (sodium_init() < 0)
        return pulse_fail(PULSE_ERR_INVALID, "s3: libsodium failed to initialise");
    pthread_once(&curl_once, curl_init_once);
    struct s3_store *s = calloc(1, sizeof *s);
    if (!s)
        return pulse_fail(PULSE_ERR_NOMEM, "s3: out of memory");
    int rc = s3_config_load(&s->cfg);
    if (rc) {
        free(s);
        return rc;
    }
    s->settings = &st->settings;
    s->retries = &st->retries;
    s->deadline = &st->deadline;
    s->bucket = strndup(rest, blen);
    struct buf p = { 0 }, o = { 0 }, h = { 0 }, b = { 0 };
    buf_adds(&p, prefix);
    if (*prefix && prefix[strlen(prefix) - 1] != '/')
        buf_addc(&p, '/');
    s->prefix = buf_take(&p);
    if (s->cfg.endpoint && s->cfg.addressing == S3_ADDR_VIRTUAL) {
        /* addressing_style = virtual: the bucket is a name under the endpoint's host. */
        const char *hs = strstr(s->cfg.endpoint, "://") + 3;
        const char *pe = strchr(hs, '/');
        size_t hl = pe ? (size_t)(pe - hs) : strlen(hs);
        buf_add(&o, s->cfg.endpoint, (size_t)(hs - s->cfg.endpoint));
        buf_printf(&o, "%.*s.%.*s", (int)blen, rest, (int)hl, hs);
        buf_printf(&h, "%.*s.%.*s", (int)blen, rest, (int)hl, hs);
        if (pe)
            buf_adds(&b, pe);
        else
            buf_adds(&b, "");
    } else if (s->cfg.endpoint) {
        /* Custom endpoints (MinIO, RGW, R2): path-style addressing unless the profile says
         * addressing_style = virtual. */
        const char *hs = strstr(s->cfg.endpoint, "://") + 3;
        const char *pe = strchr(hs, '/');
        size_t hl = pe ? (size_t)(pe - hs) : strlen(hs);
        buf_add(&o, s->cfg.endpoint, (size_t)(hs - s->cfg.endpoint) + hl);
        buf_add(&h, hs, hl);
        if (pe)
            buf_adds(&b, pe);
        buf_addc(&b, '/');
        buf_add(&b, rest, blen);
    } else if (!memchr(rest, '.', blen) && s->cfg.addressing != S3_ADDR_PATH) {
        buf_printf(&o, "https://%.*s.s3.%s.amazonaws.com", (int)blen, rest, s->cfg.region);
        buf_printf(&h, "%.*s.s3.%s.amazonaws.com", (int)blen, rest, s->cfg.region);
        buf_adds(&b, "");
    } else {
        /* Dotted bucket names break TLS with virtual hosts: path style on AWS too. */
        buf_printf(&o, "https://s3.%s.amazonaws.com", s->cfg.region);
        buf_printf(&h, "s3.%s.amazonaws.com", s->cfg.region);
        buf_printf(&b, "/%.*s", (int)blen, rest);
    }
    s->origin = buf_take(&o);
    s->host = buf_take(&h);
    s->base_path = buf_take(&b);
    s->multi = curl_multi_init();
    st->impl = s;
    st->ops = &s3_ops;
    if (!s->bucket || !s->prefix || !s->origin || !s->host || !s->base_path || !s->multi) {
        s3_close(st);
        return pulse_fail(PULSE_ERR_NOMEM, "s3: out of memory");
    }
    curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, (long)st->settings.concurrency + 4);
    return 0;
}
