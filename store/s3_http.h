/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: signed S3 requests run many at once on one libcurl multi handle, with retries. */
#ifndef PULSE_STORE_S3_HTTP_H
#define PULSE_STORE_S3_HTTP_H

#include <curl/curl.h>
#include <sodium.h>
#include <stdint.h>

#include "base/progress.h"
#include "crypto/sha256.h"
#include "pulseweights/store.h"
#include "store/backend.h"
#include "store/buf.h"
#include "store/s3_config.h"
#include "store/sigv4.h"

#define S3_MAX_QUERY 6
#define S3_MAX_HEADERS 6
#define S3_POOL 256
#define S3_RECV_BUFFER (512L << 10)
#define S3_SEND_BUFFER (1024L << 10)

struct s3_store {
    struct s3_config cfg;
    const pulse_store_settings *settings;
    uint64_t *retries;  /* the handle's counter (pulse_store_retries) */
    const struct store_deadline *deadline; /* the handle's (pulse_store_set_deadline) */
    char *bucket;
    char *prefix;      /* "" or ending in '/' */
    char *origin;      /* scheme://host[:port] */
    char *host;        /* Host header value */
    char *base_path;   /* "/bucket" (path style) or "" (virtual-hosted) */
    CURLM *multi;
    CURL *pool[S3_POOL];
    int npool;
    /* Progress of the current operation (bytes moved of total). */
    uint64_t prog_total, prog_done;
    pulse_meter prog_meter;
};

enum s3_sink { SINK_NONE, SINK_BUF, SINK_FD };

struct s3_req {
    /* What to send. */
    const char *op;          /* "get", "put", ... for details */
    const char *user_key;    /* the key as the caller named it, for details (may be NULL) */
    const char *method;
    char *path;              /* raw path: base_path + "/" + full key (malloc'd) */
    struct sigv4_kv query[S3_MAX_QUERY];
    int nquery;
    struct sigv4_kv hdr[S3_MAX_HEADERS]; /* extra signed headers */
    int nhdr;
    const char *body;        /* memory body, or NULL with body_fd >= 0, or no body */
    int body_fd;
    uint64_t body_off, body_len;
    char payload_hash[65];
    const char *payload_hash_of; /* copied into payload_hash at start, once *ready says so */
    const int *ready;        /* NULL, or a flag set (atomically) by another thread: 0 not yet,
                              * 1 may start, -1 failed (reading the source) */
    int if_absent;           /* 412 means EXISTS */
    /* Where the 2xx body goes. */
    enum s3_sink sink;
    size_t max;              /* SINK_BUF limit */
    int sink_fd;
    uint64_t sink_off;
    uint64_t expect_len;     /* exact body length wanted, or UINT64_MAX */
    int verify_sha;          /* check the body against x-amz-meta-pulse-sha256 when present and
                              * the body is the whole object (a range from 0 answered whole) */
    uint64_t range_from;     /* the Range sent (s3_req_range): first byte, or UINT64_MAX: none */
    uint64_t range_len;      /* its length, or UINT64_MAX: to the end */
    char range[64];          /* the Range header's value */
    int progress_from_length; /* the 2xx answer's Content-Length is the progress line's total */

    /* Results. */
    long status;
    struct buf body_out;     /* SINK_BUF body, or the error body (bounded) */
    uint64_t received;       /* stored atomically: a verifier thread follows it */
    uint64_t *received_to;   /* NULL, or the caller's copy of received (pulse_store_range.done) */
    uint64_t content_length;
    uint64_t total;          /* object size from Content-Range, or UINT64_MAX */
    uint64_t range_got;      /* the first byte Content-Range says the body starts at, or UINT64_MAX */
    int have_length;
    char etag[132];
    char meta_sha[65];
    int64_t mtime;
    int result;
    char detail[300];

    /* Engine state. */
    int attempt, active, done, over_limit;
    int deadline_cut;        /* this attempt's time limit is the handle's deadline */
    double next_at;
    uint64_t read_pos;
    CURL *easy;
    struct curl_slist *slist;
    char *url;
    char curl_err[CURL_ERROR_SIZE]; /* libcurl's own words for a failed attempt */
    pulse_sha256_ctx hs;
};

/* Initialises r for `method` on full key `key` (NULL: the bucket itself). */
int s3_req_init(struct s3_store *s, struct s3_req *r, const char *op, const char *method,
                const char *key, const char *user_key);
void s3_req_free(struct s3_req *r);

/* Asks for bytes [offset, offset + length) (PULSE_TO_END: to the end) with a Range header. A
 * body longer than the range, or a 200 with the whole object for a range that does not start
 * at 0, is refused rather than taken for the range. */
void s3_req_range(struct s3_req *r, uint64_t offset, uint64_t length);

/* Runs the requests, at most settings->concurrency at once; each gets its own result. Each
 * attempt ends after settings->request_timeout_s, or at the handle's deadline when that comes
 * first; past the deadline no attempt or retry starts (PULSE_ERR_NETWORK naming it).
 * Returns 0 when all succeeded, else the first failure (its detail as the last error). */
int s3_run(struct s3_store *s, struct s3_req **reqs, size_t n);

void s3_progress_begin(struct s3_store *s, uint64_t total);
void s3_progress_end(struct s3_store *s);

#endif
