/* SPDX-License-Identifier: Apache-2.0 */
/* Signed S3 requests on one libcurl multi handle: concurrency limit, reused connections, retries with full jitter. */
#include "store/s3_http.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "base/clock.h"
#include "base/fail.h"
#include "store/s3_xml.h"

#define ERR_BODY_MAX 65536

int s3_req_init(struct s3_store *s, struct s3_req *r, const char *op, const char *method,
                const char *key, const char *user_key)
{
    memset(r, 0, sizeof *r);
    r->op = op;
    r->user_key = user_key;
    r->method = method;
    r->body_fd = -1;
    r->sink_fd = -1;
    r->expect_len = UINT64_MAX;
    r->range_from = r->range_len = UINT64_MAX;
    memcpy(r->payload_hash, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 65);
    struct buf p = { 0 };
    buf_adds(&p, s->base_path);
    if (key || !*s->base_path)
        buf_addc(&p, '/');
    if (key)
        buf_adds(&p, key);
    r->path = buf_take(&p);
    return r->path ? 0 : pulse_fail(PULSE_ERR_NOMEM, "%s: out of memory", op);
}

void s3_req_range(struct s3_req *r, uint64_t offset, uint64_t length)
{
    if (length == PULSE_TO_END || offset + length - 1 < offset) {
        snprintf(r->range, sizeof r->range, "bytes=%llu-", (unsigned long long)offset);
        length = UINT64_MAX;
    } else {
        snprintf(r->range, sizeof r->range, "bytes=%llu-%llu", (unsigned long long)offset,
                 (unsigned long long)(offset + length - 1));
    }
    r->hdr[r->nhdr++] = (struct sigv4_kv){ "Range", r->range };
    r->range_from = offset;
    r->range_len = length;
}

void s3_req_free(struct s3_req *r)
{
    free(r->path);
    free(r->url);
    buf_free(&r->body_out);
    if (r->slist)
        curl_slist_free_all(r->slist);
    r->path = r->url = NULL;
    r->slist = NULL;
}

/* ---- progress (stderr, only on a TTY unless forced) ---- */

void s3_progress_begin(struct s3_store *s, uint64_t total)
{
    s->prog_total = total;
    s->prog_done = 0;
    pulse_meter_begin(&s->prog_meter, "", s->settings->progress);
}

static void progress_tick(struct s3_store *s)
{
    if (s->prog_total >= (16u << 20))
        pulse_meter_tick(&s->prog_meter, s->prog_done, s->prog_total);
}

void s3_progress_end(struct s3_store *s)
{
    pulse_meter_end(&s->prog_meter);
    s->prog_total = 0;
}

/* ---- libcurl callbacks ---- */

struct cb_ctx {
    struct s3_store *s;
    struct s3_req *r;
};

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct s3_req *r = ud;
    size_t n = size * nmemb;
    char line[512];
    size_t l = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, p, l);
    line[l] = 0;
    while (l && (line[l - 1] == '\r' || line[l - 1] == '\n'))
        line[--l] = 0;
    if (!strncmp(line, "HTTP/", 5)) {
        /* A new response (after 100 Continue, or a retry): forget the previous one's headers. */
        r->etag[0] = 0;
        r->meta_sha[0] = 0;
        r->have_length = 0;
        r->mtime = 0;
        r->total = r->range_got = UINT64_MAX;
        return n;
    }
    char *colon = strchr(line, ':');
    if (!colon)
        return n;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (!strcasecmp(line, "etag")) {
        if (*v == '"')
            v++;
        size_t vl = strlen(v);
        if (vl && v[vl - 1] == '"')
            v[--vl] = 0;
        snprintf(r->etag, sizeof r->etag, "%s", v);
    } else if (!strcasecmp(line, "content-length")) {
        r->content_length = strtoull(v, NULL, 10);
        r->have_length = 1;
    } else if (!strcasecmp(line, "content-range")) {
        const char *slash = strrchr(v, '/');
        if (slash && slash[1] != '*')
            r->total = strtoull(slash + 1, NULL, 10);
        if (!strncasecmp(v, "bytes ", 6) && v[6] >= '0' && v[6] <= '9')
            r->range_got = strtoull(v + 6, NULL, 10);
    } else if (!strcasecmp(line, "last-modified")) {
        r->mtime = (int64_t)curl_getdate(v, NULL);
    } else if (!strcasecmp(line, "x-amz-meta-pulse-sha256") && strlen(v) == 64) {
        memcpy(r->meta_sha, v, 65);
    }
    return n;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct cb_ctx *c = ud;
    struct s3_req *r = c->r;
    size_t n = size * nmemb;
    long code = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300) {
        if (r->body_out.len < ERR_BODY_MAX)
            buf_add(&r->body_out, p, n < ERR_BODY_MAX - r->body_out.len ? n : ERR_BODY_MAX - r->body_out.len);
        return n;
    }
    if (r->progress_from_length && r->received == 0 && r->have_length)
        c->s->prog_total = r->content_length;
    if (code == 200 && r->range_from != UINT64_MAX && r->range_from > 0) {
        r->over_limit = 5;   /* the whole object, not the range: not a byte of it is ours */
        return 0;
    }
    if ((r->expect_len != UINT64_MAX && r->received + n > r->expect_len) ||
        (r->range_len != UINT64_MAX && r->received + n > r->range_len)) {
        r->over_limit = 2;
        return 0;
    }
    if (r->sink == SINK_BUF) {
        if (r->received + n > r->max) {
            r->over_limit = 1;
            return 0;
        }
        buf_add(&r->body_out, p, n);
        if (r->body_out.oom) {
            r->over_limit = 4;
            return 0;
        }
    } else if (r->sink == SINK_FD) {
        const char *q = p;
        size_t left = n;
        uint64_t off = r->sink_off + r->received;
        while (left) {
            ssize_t w = pwrite(r->sink_fd, q, left, (off_t)off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                r->over_limit = 3;
                return 0;
            }
            q += w;
            left -= (size_t)w;
            off += (uint64_t)w;
        }
    }
    if (r->verify_sha)
        pulse_sha256_update(&r->hs, p, n);
    /* Release: the bytes are in the file before another thread sees them counted. */
    __atomic_store_n(&r->received, r->received + n, __ATOMIC_RELEASE);
    if (r->received_to)
        __atomic_store_n(r->received_to, r->received, __ATOMIC_RELEASE);
    c->s->prog_done += n;
    return n;
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *ud)
{
    struct cb_ctx *c = ud;
    struct s3_req *r = c->r;
    uint64_t left = r->body_len - r->read_pos;
    size_t n = size * nmemb;
    if (n > left)
        n = (size_t)left;
    if (!n)
        return 0;
    if (r->body) {
        memcpy(p, r->body + r->body_off + r->read_pos, n);
    } else {
        ssize_t got = pread(r->body_fd, p, n, (off_t)(r->body_off + r->read_pos));
        if (got <= 0)
            return CURL_READFUNC_ABORT;
        n = (size_t)got;
    }
    r->read_pos += n;
    c->s->prog_done += n;
    return n;
}

static int on_seek(void *ud, curl_off_t offset, int origin)
{
    struct cb_ctx *c = ud;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > c->r->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    /* Bytes sent again are progress once: the meter forgets those it is about to see twice. */
    uint64_t back = c->r->read_pos - (uint64_t)offset <= c->r->read_pos ? c->r->read_pos - (uint64_t)offset : 0;
    c->s->prog_done -= back <= c->s->prog_done ? back : c->s->prog_done;
    c->r->read_pos = (uint64_t)offset;
    return CURL_SEEKFUNC_OK;
}

/* ---- one attempt ---- */

static int add_header(struct curl_slist **l, const char *name, const char *value)
{
    struct buf b = { 0 };
    buf_printf(&b, "%s: %s", name, value);
    char *s = buf_take(&b);
    if (!s)
        return -1;
    struct curl_slist *n = curl_slist_append(*l, s);
    free(s);
    if (!n)
        return -1;
    *l = n;
    return 0;
}

/* "pulse/VERSION libcurl/VERSION", as botocore names itself and its HTTP library: server logs
 * and bucket policies can tell pulse's requests apart. */
static char ua[80];
static pthread_once_t ua_once = PTHREAD_ONCE_INIT;
static void ua_init(void)
{
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    snprintf(ua, sizeof ua, "pulse/%s libcurl/%s", PULSE_VERSION, v && v->version ? v->version : "unknown");
}

static const char *user_agent(void)
{
    pthread_once(&ua_once, ua_init);
    return ua;
}

static int start(struct s3_store *s, struct s3_req *r)
{
    /* Fresh results for this attempt; the body buffer keeps its memory. What the last attempt
     * moved leaves the progress line's count, so a retried transfer never shows more than all. */
    uint64_t moved = r->received + r->read_pos;
    s->prog_done -= moved <= s->prog_done ? moved : s->prog_done;
    r->status = 0;
    r->body_out.len = 0;
    if (r->body_out.data)
        r->body_out.data[0] = 0;
    __atomic_store_n(&r->received, 0, __ATOMIC_RELEASE);
    if (r->received_to)
        __atomic_store_n(r->received_to, 0, __ATOMIC_RELEASE);
    r->read_pos = 0;
    if (r->payload_hash_of)
        memcpy(r->payload_hash, r->payload_hash_of, 65);
    r->over_limit = 0;
    r->deadline_cut = 0;
    r->etag[0] = r->meta_sha[0] = 0;
    r->have_length = 0;
    r->total = r->range_got = UINT64_MAX;
    pulse_sha256_init(&r->hs);
    if (r->slist) {
        curl_slist_free_all(r->slist);
        r->slist = NULL;
    }
    free(r->url);
    r->url = NULL;

    char date[17];
    sigv4_amz_date((long long)time(NULL), date);
    struct sigv4_kv h[S3_MAX_HEADERS + 3];
    size_t nh = 0;
    h[nh++] = (struct sigv4_kv){ "host", s->host };
    h[nh++] = (struct sigv4_kv){ "x-amz-date", date };
    h[nh++] = (struct sigv4_kv){ "x-amz-content-sha256", r->payload_hash };
    for (int i = 0; i < r->nhdr; i++)
        h[nh++] = r->hdr[i];
    struct curl_slist *l = NULL;
    int bad = 0;
    for (size_t i = 0; i < nh; i++)
        bad |= add_header(&l, h[i].name, h[i].value);
    if (s->cfg.access_key) {
        struct sigv4_credentials cred = { s->cfg.access_key, s->cfg.secret_key,
                                          s->cfg.session_token, s->cfg.region, "s3" };
        struct sigv4_request sr = {
            .method = r->method, .path = r->path, .normalize_path = 0, .query = r->query,
            .nquery = (size_t)r->nquery, .headers = h, .nheaders = nh,
            .payload_hash = r->payload_hash,
        };
        struct sigv4_signature sig;
        int rc = sigv4_sign(&sr, &cred, date, &sig);
        if (rc) {
            curl_slist_free_all(l);
            return rc;
        }
        bad |= add_header(&l, "Authorization", sig.authorization);
        sigv4_signature_free(&sig);
        if (s->cfg.session_token)
            bad |= add_header(&l, "x-amz-security-token", s->cfg.session_token);
    }
    /* No 100-continue round trip, and nothing unsigned that a proxy could mistake. */
    struct curl_slist *t = curl_slist_append(l, "Expect:");
    if (t) l = t; else bad = 1;
    if (!strcmp(r->method, "POST")) {
        /* CompleteMultipartUpload's body is XML. CreateMultipartUpload has no body, and the
         * Content-Type it carries becomes the object's (as a single PUT's does): send none, as
         * a PUT does, and not libcurl's form type for a POST either. */
        t = curl_slist_append(l, r->body_len ? "Content-Type: application/xml" : "Content-Type:");
        if (t) l = t; else bad = 1;
    }
    r->slist = l;

    struct buf u = { 0 };
    buf_adds(&u, s->origin);
    sigv4_uri_encode(&u, r->path, strlen(r->path), 1);
    for (int i = 0; i < r->nquery; i++) {
        buf_addc(&u, i ? '&' : '?');
        sigv4_uri_encode(&u, r->query[i].name, strlen(r->query[i].name), 0);
        if (r->query[i].value) {
            buf_addc(&u, '=');
            sigv4_uri_encode(&u, r->query[i].value, strlen(r->query[i].value), 0);
        }
    }
    r->url = buf_take(&u);
    if (bad || !r->url)
        return pulse_fail(PULSE_ERR_NOMEM, "%s: out of memory", r->op);

    CURL *e = s->npool ? s->pool[--s->npool] : curl_easy_init();
    if (!e)
        return pulse_fail(PULSE_ERR_NOMEM, "%s: curl_easy_init failed", r->op);
    curl_easy_reset(e);
    r->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->slist);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, user_agent());
    if (s->cfg.ca_bundle)
        curl_easy_setopt(e, CURLOPT_CAINFO, s->cfg.ca_bundle);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    r->curl_err[0] = 0;
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_err);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, s->settings->timeout_s);
    /* A server that trickles (or streams without end) must not hold a request for hours: a
     * floor on the speed, and an end to every attempt, at the handle's deadline at the latest. */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, (long)s->settings->low_speed);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, s->settings->timeout_s);
    double limit_ms = (double)s->settings->request_timeout_s * 1000.0;
    if (s->deadline->at) {
        double left_ms = (s->deadline->at - pulse_monotonic_s()) * 1000.0;
        if (left_ms < limit_ms) {
            limit_ms = left_ms < 1.0 ? 1.0 : left_ms;
            r->deadline_cut = 1;   /* a timeout of this attempt is the deadline */
        }
    }
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)limit_ms);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL);
    /* Fewer, larger reads, writes and socket calls than libcurl's 16 KiB / 64 KiB defaults. */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, S3_RECV_BUFFER);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, S3_SEND_BUFFER);
    if (!strcmp(r->method, "HEAD")) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(r->method, "PUT")) {
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    } else if (!strcmp(r->method, "POST")) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "GET")) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    }
    return 0;
}

/* The callbacks need the store too; one context per request lives beside the engine loop. */
static void set_callbacks(CURL *e, struct cb_ctx *c)
{
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, c);
    curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(e, CURLOPT_SEEKDATA, c);
}

static const char *who(const struct s3_store *s, const struct s3_req *r)
{
    return r->user_key ? r->user_key : s->bucket;
}

static void fail_final(struct s3_req *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail_final(struct s3_req *r, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
    r->result = err;
    r->done = 1;
}

#define IGNORED_RANGE "%s %s: the server ignored the Range header (HTTP 200 with the whole object)"

/* Decides what an attempt's outcome means: success, final failure, or another try. */
static void finish(struct s3_store *s, struct s3_req *r, CURLcode cc)
{
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
    long st = r->status;
    const char *k = who(s, r);
    int transient_err = 0;
    char why[200] = "";
    char *code = NULL;

    if (cc != CURLE_OK) {
        if (r->over_limit == 1)
            return fail_final(r, PULSE_ERR_LIMIT, "%s %s: object is larger than the limit of %zu bytes",
                              r->op, k, r->max);
        if (r->over_limit == 3)
            return fail_final(r, PULSE_ERR_IO, "%s %s: writing the output failed", r->op, k);
        if (r->over_limit == 4)
            return fail_final(r, PULSE_ERR_NOMEM, "%s %s: out of memory", r->op, k);
        if (r->over_limit == 5)
            return fail_final(r, PULSE_ERR_SERVER, IGNORED_RANGE, r->op, k);
        if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
            cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_SSL_ISSUER_ERROR || cc == CURLE_SSL_CRL_BADFILE ||
            cc == CURLE_SSL_PINNEDPUBKEYNOTMATCH)
            /* A certificate that fails now fails on every retry: say so at once, in libcurl's
             * words (which check failed), and which CA bundle it was checked against. */
            return fail_final(r, PULSE_ERR_NETWORK, "%s %s: TLS certificate problem (not retried): %.150s "
                              "[CA bundle: %.90s]", r->op, k, r->curl_err[0] ? r->curl_err : curl_easy_strerror(cc),
                              s->cfg.ca_bundle ? s->cfg.ca_bundle : "libcurl's default");
        transient_err = r->over_limit == 2 ? PULSE_ERR_CORRUPT : PULSE_ERR_NETWORK;
        /* libcurl's buffer says which limit cut a timeout ("Operation too slow. Less than N
         * bytes/sec ...", "Operation timed out after N ms ..."); its strerror only "Timeout". */
        snprintf(why, sizeof why, "%.190s", r->over_limit == 2 ? "server sent more bytes than the range"
                                        : r->curl_err[0] ? r->curl_err : curl_easy_strerror(cc));
    } else if (st >= 200 && st < 300) {
        int head = !strcmp(r->method, "HEAD");
        /* A 200 carries the whole object: for a range from 0 that is what was asked (the range
         * covers it, or the body was cut above), for a range from anywhere else the wrong bytes. */
        if (r->range_from != UINT64_MAX && r->range_from > 0 && st == 200)
            return fail_final(r, PULSE_ERR_SERVER, IGNORED_RANGE, r->op, k);
        /* A 206 must say which bytes it carries, and they must be the ones asked for. */
        if (r->range_from != UINT64_MAX && st == 206 && r->range_got == UINT64_MAX)
            return fail_final(r, PULSE_ERR_SERVER, "%s %s: a partial answer (HTTP 206) without a readable "
                              "Content-Range", r->op, k);
        if (r->range_from != UINT64_MAX && st == 206 && r->range_got != r->range_from)
            return fail_final(r, PULSE_ERR_SERVER, "%s %s: asked for bytes from %llu, the answer's Content-Range "
                              "starts at %llu", r->op, k, (unsigned long long)r->range_from,
                              (unsigned long long)r->range_got);
        int whole = r->range_from == UINT64_MAX || st == 200 || (r->range_from == 0 && r->total == r->received);
        if (r->expect_len != UINT64_MAX && r->received != r->expect_len) {
            transient_err = PULSE_ERR_CORRUPT;
            snprintf(why, sizeof why, "body of %llu bytes, expected %llu",
                     (unsigned long long)r->received, (unsigned long long)r->expect_len);
        } else if (!head && r->have_length && r->received != r->content_length &&
                   r->sink != SINK_NONE) {
            transient_err = PULSE_ERR_CORRUPT;
            snprintf(why, sizeof why, "body of %llu bytes, Content-Length %llu",
                     (unsigned long long)r->received, (unsigned long long)r->content_length);
        } else if (r->verify_sha && r->meta_sha[0] && whole) {
            unsigned char h[32];
            char hex[65];
            pulse_sha256_final(&r->hs, h);
            static const char d[] = "0123456789abcdef";
            for (int i = 0; i < 32; i++) {
                hex[2 * i] = d[h[i] >> 4];
                hex[2 * i + 1] = d[h[i] & 15];
            }
            hex[64] = 0;
            if (strcmp(hex, r->meta_sha)) {
                transient_err = PULSE_ERR_CORRUPT;
                snprintf(why, sizeof why, "body fails its SHA-256");
            }
        }
        if (!transient_err && !strcmp(r->method, "POST") && r->body_out.data &&
            strstr(r->body_out.data, "<Error>")) {
            /* CompleteMultipartUpload can answer 200 and fail in the body. */
            code = xml_tag(r->body_out.data, "Code", NULL);
            if (code && (!strcmp(code, "InternalError") || !strcmp(code, "SlowDown"))) {
                transient_err = PULSE_ERR_SERVER;
                snprintf(why, sizeof why, "HTTP %ld %s", st, code);
            } else {
                fail_final(r, PULSE_ERR_SERVER, "%s %s: HTTP %ld %s", r->op, k, st,
                           code ? code : "error in body");
                free(code);
                return;
            }
        }
        if (!transient_err) {
            free(code);
            r->done = 1;
            r->result = 0;
            return;
        }
    } else {
        code = xml_tag(r->body_out.data, "Code", NULL);
        const char *c = code ? code : "";
        const char *sep = code ? " " : "";
        if (st == 304) {
            fail_final(r, PULSE_ERR_NOT_MODIFIED, "%s %s: not modified (HTTP 304)", r->op, k);
        } else if (st == 412) {
            fail_final(r, r->if_absent ? PULSE_ERR_EXISTS : PULSE_ERR_PRECONDITION,
                       "%s %s: %s (HTTP 412%s%s)", r->op, k,
                       r->if_absent ? "key already exists" : "precondition failed", sep, c);
        } else if (st == 500 || st == 502 || st == 503 || st == 504 || st == 429 ||
                   !strcmp(c, "SlowDown") || !strcmp(c, "RequestTimeout") ||
                   (st == 409 && r->if_absent)) {
            transient_err = PULSE_ERR_SERVER;
            snprintf(why, sizeof why, "HTTP %ld%s%s", st, sep, c);
        } else if (st == 401 || !strcmp(c, "SignatureDoesNotMatch") || !strcmp(c, "InvalidAccessKeyId") ||
                   !strcmp(c, "RequestTimeTooSkewed") || !strcmp(c, "ExpiredToken") ||
                   !strcmp(c, "InvalidToken") || !strcmp(c, "TokenRefreshRequired")) {
            /* The server did not accept who we said we are. */
            fail_final(r, PULSE_ERR_AUTH, "%s %s: credentials refused (HTTP %ld%s%s)", r->op, k, st, sep, c);
        } else if (st == 403 && (!strcmp(c, "AccessDenied") || (!code && !strcmp(r->method, "HEAD")))) {
            /* It did, and the bucket's policy (or ACL) refuses this action to them; a HEAD answer
             * has no body to say so, and S3 answers a refused HEAD with a bare 403. */
            fail_final(r, PULSE_ERR_AUTH, "access denied by the bucket's policy or ACL: %s may not %s %s "
                       "(HTTP 403%s%s)", s->cfg.access_key ? "these credentials" : "anonymous requests",
                       r->op, k, sep, c);
        } else if (st == 403) {
            fail_final(r, PULSE_ERR_AUTH, "%s %s: access refused (HTTP %ld%s%s)", r->op, k, st, sep, c);
        } else if (st == 404) {
            if (!strcmp(c, "NoSuchBucket"))
                fail_final(r, PULSE_ERR_NOTFOUND, "%s %s: bucket '%s' does not exist (HTTP 404 %s)",
                           r->op, k, s->bucket, c);
            else if (!strcmp(c, "NoSuchUpload"))
                fail_final(r, PULSE_ERR_NOTFOUND, "%s %s: multipart upload vanished (HTTP 404 %s)",
                           r->op, k, c);
            else
                fail_final(r, PULSE_ERR_NOTFOUND, "%s %s: no such key%s (HTTP 404%s%s)", r->op, k,
                           code ? "" : " or bucket", sep, c);
        } else if (st == 416) {
            fail_final(r, PULSE_ERR_INVALID, "%s %s: range outside the object (HTTP 416)", r->op, k);
        } else if (st == 400) {
            fail_final(r, PULSE_ERR_INVALID, "%s %s: request refused (HTTP 400%s%s)", r->op, k, sep, c);
        } else {
            fail_final(r, PULSE_ERR_SERVER, "%s %s: HTTP %ld%s%s", r->op, k, st, sep, c);
        }
        if (r->done) {
            free(code);
            return;
        }
    }
    free(code);
    if ((r->deadline_cut && cc == CURLE_OPERATION_TIMEDOUT) || store_deadline_check(s->deadline, r->op, k)) {
        if (r->deadline_cut && cc == CURLE_OPERATION_TIMEDOUT)
            pulse_fail(PULSE_ERR_NETWORK, "%s %s: the deadline of %.3g s for this operation passed", r->op, k,
                       s->deadline->span > 0 ? s->deadline->span : 0.0);
        /* The attempt was cut by the deadline, or failed after it: no retry starts. */
        fail_final(r, PULSE_ERR_NETWORK, "%s (the last attempt: %s)", pulse_last_error(), why);
        return;
    }
    if (r->attempt < s->settings->retries) {
        /* Full jitter: uniform in [0, min(cap, base * 2^attempt)). */
        double ceil_ms = (double)s->settings->backoff_ms;
        for (int i = 0; i < r->attempt && ceil_ms < 20000.0; i++)
            ceil_ms *= 2;
        if (ceil_ms > 20000.0)
            ceil_ms = 20000.0;
        uint32_t span = (uint32_t)ceil_ms + 1;
        r->next_at = pulse_monotonic_s() + (double)randombytes_uniform(span) / 1000.0;
        if (s->deadline->at && r->next_at >= s->deadline->at) {
            /* Waiting out the backoff would already pass the deadline. */
            fail_final(r, PULSE_ERR_NETWORK, "%s %s: the deadline of %.3g s for this operation passes "
                       "before a retry could start (the last attempt: %s)", r->op, k,
                       s->deadline->span > 0 ? s->deadline->span : 0.0, why);
            return;
        }
        r->attempt++;
        if (s->retries)
            (*s->retries)++;
        return;
    }
    fail_final(r, transient_err, "%s %s: %s (after %d attempts)", r->op, k, why, r->attempt + 1);
}

int s3_run(struct s3_store *s, struct s3_req **reqs, size_t n)
{
    struct cb_ctx *ctx = calloc(n ? n : 1, sizeof *ctx);
    if (!ctx)
        return pulse_fail(PULSE_ERR_NOMEM, "s3: out of memory");
    for (size_t i = 0; i < n; i++) {
        reqs[i]->attempt = 0;
        reqs[i]->done = 0;
        reqs[i]->active = 0;
        reqs[i]->result = 0;
        reqs[i]->next_at = 0;
        ctx[i].s = s;
        ctx[i].r = reqs[i];
    }
    size_t ndone = 0, next = 0;
    int active = 0;
    while (ndone < n) {
        double t = pulse_monotonic_s();
        double soonest = -1;
        int gated = 0; /* a request waits for another thread (its payload hash) */
        /* Start what may start; scanning from `next` keeps a large batch linear. */
        for (size_t i = next; i < n && active < s->settings->concurrency; i++) {
            struct s3_req *r = reqs[i];
            if (r->done || r->active)
                continue;
            if (r->next_at > t) {
                if (soonest < 0 || r->next_at < soonest)
                    soonest = r->next_at;
                continue;
            }
            if (r->ready) {
                int ready = __atomic_load_n(r->ready, __ATOMIC_ACQUIRE);
                if (ready < 0) {
                    fail_final(r, PULSE_ERR_IO, "%s %s: reading the source failed or it shrank",
                               r->op, who(s, r));
                    ndone++;
                    continue;
                }
                if (!ready) {
                    gated = 1;
                    continue;
                }
            }
            int rc = store_deadline_check(s->deadline, r->op, who(s, r));
            if (!rc)
                rc = start(s, r);
            if (rc) {
                fail_final(r, rc, "%s", pulse_last_error());
                ndone++;
                continue;
            }
            set_callbacks(r->easy, &ctx[i]);
            if (curl_multi_add_handle(s->multi, r->easy) != CURLM_OK) {
                fail_final(r, PULSE_ERR_NOMEM, "%s %s: curl_multi_add_handle failed", r->op, who(s, r));
                ndone++;
                continue;
            }
            r->active = 1;
            active++;
        }
        while (next < n && reqs[next]->done)
            next++;
        if (ndone >= n)
            break;
        if (!active) {
            /* Everything left waits for its backoff. */
            for (size_t i = next; i < n; i++)
                if (!reqs[i]->done && (soonest < 0 || reqs[i]->next_at < soonest))
                    soonest = reqs[i]->next_at;
            double wait = soonest - pulse_monotonic_s();
            if (gated)
                wait = 0.001; /* a hashing thread will release it soon */
            if (wait > 0) {
                struct timespec ts = { (time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9) };
                nanosleep(&ts, NULL);
            }
            continue;
        }
        int running = 0;
        curl_multi_perform(s->multi, &running);
        CURLMsg *m;
        int q;
        while ((m = curl_multi_info_read(s->multi, &q))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct s3_req *r = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            CURLcode cc = m->data.result;
            curl_multi_remove_handle(s->multi, m->easy_handle);
            r->active = 0;
            active--;
            finish(s, r, cc);
            /* r (and its error buffer) may be gone by the time the pooled handle is reused. */
            curl_easy_setopt(r->easy, CURLOPT_ERRORBUFFER, NULL);
            if (s->npool < S3_POOL)
                s->pool[s->npool++] = r->easy;
            else
                curl_easy_cleanup(r->easy);
            r->easy = NULL;
            if (r->done)
                ndone++;
        }
        progress_tick(s);
        if (active)
            curl_multi_poll(s->multi, NULL, 0, 50, NULL);
    }
    free(ctx);
    for (size_t i = 0; i < n; i++)
        if (reqs[i]->result)
            return pulse_fail(reqs[i]->result, "%s", reqs[i]->detail);
    return 0;
}
