/* SPDX-License-Identifier: Apache-2.0 */
/* The object store: one interface over file:// (a local directory) and s3:// (any S3-compatible server). */
#ifndef PULSEWEIGHTS_STORE_H
#define PULSEWEIGHTS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open store. Not thread-safe: use one handle per thread (handles share nothing). */
typedef struct pulse_store pulse_store;

/* Knobs; fill with pulse_store_default_settings() (which also reads the PULSE_S3_* environment)
 * and change what you need. `size` lets the struct grow: set it to sizeof the struct. */
typedef struct pulse_store_settings {
    size_t size;
    int concurrency;              /* transfers in flight at once (batch, parts, ranges); >= 1 */
    uint64_t multipart_threshold; /* s3: puts at or above this many bytes go multipart */
    uint64_t part_size;           /* s3: multipart part size and parallel-GET range size (>= 5 MiB
                                   * on AWS; any size on RGW and in tests) */
    int retries;                  /* retries after the first attempt, per request */
    long timeout_s;               /* connect timeout, and a transfer below low_speed this long fails */
    long backoff_ms;              /* first backoff ceiling; doubles per retry (full jitter), capped 20 s */
    int progress;                 /* -1: on a TTY (stderr) for long transfers; 0: never; 1: always */
    uint32_t list_page;           /* keys per list request (s3 max-keys), 1..1000 */
    /* Appended fields (older callers' `size` leaves them at their defaults): */
    uint64_t list_max_keys;       /* s3: keys one listing may hold; it may fetch at most
                                   * ceil(list_max_keys / list_page) + 1 pages */
    long request_timeout_s;       /* s3: each attempt of each request ends after this long */
    uint64_t low_speed;           /* s3: bytes/s; a transfer below it for timeout_s fails (0: off) */
} pulse_store_settings;

/* Defaults: concurrency 16, threshold 64 MiB, part 16 MiB, retries 6, timeout 30 s, backoff
 * 200 ms, progress -1, list page 1000, list max keys 1000000, request timeout 600 s, low speed
 * 8 KiB/s; then PULSE_S3_CONCURRENCY, PULSE_S3_MULTIPART_THRESHOLD, PULSE_S3_PART_SIZE,
 * PULSE_S3_RETRIES, PULSE_S3_TIMEOUT, PULSE_S3_BACKOFF_MS, PULSE_S3_LIST_PAGE,
 * PULSE_S3_LIST_MAX_KEYS, PULSE_S3_REQUEST_TIMEOUT, PULSE_S3_LOW_SPEED override (sizes accept
 * K/M/G suffixes). */
PULSE_API void pulse_store_default_settings(pulse_store_settings *s);

/* Opens "file:///abs/dir[/prefix]" or "s3://bucket[/prefix]". Keys are relative to the URL.
 * s3 credentials, region and endpoint come from the AWS environment (see docs/store.md).
 * settings may be NULL (defaults). Returns 0 and *out, or PULSE_ERR_FORMAT (bad URL),
 * PULSE_ERR_INVALID, PULSE_ERR_NOMEM, PULSE_ERR_AUTH (unreadable credentials). */
PULSE_API int pulse_store_open(pulse_store **out, const char *url, const pulse_store_settings *settings);

/* Closes and sets *st to NULL; NULL-safe. */
PULSE_API void pulse_store_close(pulse_store **st);

/* Splits a CLI-style URL (store URL plus key) into a store root and a key, both malloc'd
 * (free with pulse_store_free): "s3://bucket/a/b" -> "s3://bucket" + "a/b";
 * "file:///tmp/x/b" -> "file:///tmp/x" + "b" (the key's directory is the root, so a
 * trailing '/' gives key ""). The key may be "" (a whole bucket or directory). */
PULSE_API int pulse_store_split_url(const char *url, char **root, char **key);

/* Object metadata. etag is the server's ETag without quotes (file://: hex SHA-256). */
typedef struct pulse_object_info {
    uint64_t size;
    int64_t mtime; /* seconds since the epoch, UTC */
    char etag[132];
} pulse_object_info;

/* Flags of the puts. */
#define PULSE_PUT_IF_ABSENT 1u /* fail with PULSE_ERR_EXISTS when the key exists (atomic) */
/* With PULSE_PUT_IF_ABSENT, for keys that name their bytes (a digest): once a multipart put (s3)
 * finds the key holding them, written or already there, the other incomplete uploads of that key
 * are aborted (a writer killed mid-upload leaves one); each could only end in PULSE_ERR_EXISTS,
 * which is what such a writer then gets. */
#define PULSE_PUT_CONTENT_ADDRESSED 2u

/* Length value meaning "to the end of the object". */
#define PULSE_TO_END UINT64_MAX

/* Keys: 1..1024 bytes of UTF-8, no leading '/', no empty, "." or ".." segments.
 * Every call returns 0 or a negative PULSE_ERR_*; pulse_last_error() names the operation,
 * the key and (s3) the HTTP status. Common codes: PULSE_ERR_NOTFOUND (no such key or bucket),
 * PULSE_ERR_AUTH (signature or key refused), PULSE_ERR_NETWORK / PULSE_ERR_SERVER (after the
 * retry budget), PULSE_ERR_CORRUPT (a body kept failing its digest), PULSE_ERR_IO (file). */

/* Stores len bytes from data under key. With PULSE_PUT_IF_ABSENT: PULSE_ERR_EXISTS if present. */
PULSE_API int pulse_store_put(pulse_store *st, const char *key, const void *data, size_t len,
                              unsigned flags);

/* Stores the file at path, streaming (multipart above the threshold on s3). */
PULSE_API int pulse_store_put_file(pulse_store *st, const char *key, const char *path, unsigned flags);

/* Reads bytes [offset, offset+length) (length PULSE_TO_END: to the end) into a malloc'd
 * buffer (*data, free with pulse_store_free; never NULL on success, even when empty).
 * PULSE_ERR_LIMIT when the result would exceed max_size; PULSE_ERR_INVALID when offset is
 * beyond the end. info (may be NULL) receives the object's metadata. */
PULSE_API int pulse_store_get(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                              size_t max_size, void **data, size_t *len, pulse_object_info *info);

/* Like pulse_store_get, but only when the object's ETag differs from etag:
 * PULSE_ERR_NOT_MODIFIED when it still matches (nothing returned). */
PULSE_API int pulse_store_get_if_none_match(pulse_store *st, const char *key, const char *etag,
                                            size_t max_size, void **data, size_t *len,
                                            pulse_object_info *info);

/* Streams the range to a new file at path (written beside it and renamed into place, so on
 * failure nothing is left there). Large objects are fetched as parallel ranges on s3. */
PULSE_API int pulse_store_get_file(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                                   const char *path, pulse_object_info *info);

/* Writes the range into the open file fd at offsets from 0 (pwrite: fd's own position is not
 * used), as pulse_store_get_file does, but neither syncs nor renames anything: for a caller whose
 * file is a temporary of its own (a follower's fetched step). On failure fd may hold part of the
 * range. */
PULSE_API int pulse_store_get_fd(pulse_store *st, const char *key, uint64_t offset, uint64_t length, int fd,
                                 pulse_object_info *info);

/* One range of pulse_store_get_ranges. */
typedef struct pulse_store_range {
    const char *key;      /* the object */
    uint64_t offset;      /* where the range starts in the object */
    uint64_t length;      /* > 0 */
    uint64_t at;          /* where its bytes go in the file */
    /* Bytes of the range in the file so far, from its start: stored by the store as they land
     * (__atomic release), so another thread may read it (acquire) and use that many bytes while
     * the call runs. A retried attempt starts it again from 0, and writes the same bytes again
     * (an object that changed meanwhile is the caller's to notice: it checks what it fetched). */
    uint64_t done;
    uint64_t object_size; /* out: the whole object's size, as the answer gave it (Content-Range) */
} pulse_store_range;

/* Fetches the n ranges (of one object or several) into fd, each written at its `at`, all at once
 * (s3: up to concurrency in flight, each one GET, no HEAD), counting each range's progress in
 * its `done`: a caller can check and use the first bytes while the rest arrive (a follower
 * decoding a step as it downloads). 0 when every range arrived whole; on failure fd may hold
 * part of them. The store checks no digest: the caller checks the ranges it named. */
PULSE_API int pulse_store_get_ranges(pulse_store *st, pulse_store_range *ranges, size_t n, int fd);

PULSE_API int pulse_store_head(pulse_store *st, const char *key, pulse_object_info *info);

/* Deletes key. PULSE_ERR_NOTFOUND on file:// when absent; s3 servers answer success. */
PULSE_API int pulse_store_delete(pulse_store *st, const char *key);

/* Called per key in bytewise order; a non-zero return stops the listing and is returned. */
typedef int (*pulse_store_list_fn)(void *ctx, const char *key, const pulse_object_info *info);

/* Lists keys starting with prefix ("" for all) and greater than start_after (NULL for none),
 * fetching pages of settings.list_page keys. */
PULSE_API int pulse_store_list(pulse_store *st, const char *prefix, const char *start_after,
                               pulse_store_list_fn fn, void *ctx);

/* Incomplete multipart uploads (s3): begun, neither completed nor aborted. Their parts are
 * stored and billed, and no listing of objects shows them. FN is called per upload under PREFIX,
 * in the server's order, with its key, its upload id and when it began (seconds since the epoch,
 * UTC; 0 when the server did not say); a non-zero return stops the listing and is returned.
 * PULSE_ERR_UNSUPPORTED on file:// (it has no multipart uploads). */
typedef int (*pulse_store_upload_fn)(void *ctx, const char *key, const char *upload_id, int64_t initiated);
PULSE_API int pulse_store_list_uploads(pulse_store *st, const char *prefix, pulse_store_upload_fn fn, void *ctx);

/* Aborts one incomplete multipart upload (its parts are freed). An upload already gone counts as
 * aborted. PULSE_ERR_UNSUPPORTED on file://. */
PULSE_API int pulse_store_abort_upload(pulse_store *st, const char *key, const char *upload_id);

/* A presigned GET URL for key valid expires_s seconds (1..604800); *url is malloc'd.
 * PULSE_ERR_UNSUPPORTED on file://, PULSE_ERR_AUTH without credentials. */
PULSE_API int pulse_store_presign(pulse_store *st, const char *key, unsigned long expires_s, char **url);

/* Many transfers at once (s3: up to settings.concurrency in flight over reused connections). */
enum pulse_transfer_op { PULSE_XFER_GET = 1, PULSE_XFER_PUT = 2 };

typedef struct pulse_transfer {
    int op;               /* PULSE_XFER_GET or PULSE_XFER_PUT */
    const char *key;
    const char *path;     /* a file to read (put) or write (get); NULL: memory */
    const void *data;     /* put from memory */
    size_t len;           /* put: bytes at data; get: bytes returned in out */
    uint64_t offset;      /* get: range start */
    uint64_t length;      /* get: range length or PULSE_TO_END */
    size_t max_size;      /* get to memory: limit */
    unsigned flags;       /* put: PULSE_PUT_IF_ABSENT */
    void *out;            /* get to memory: malloc'd result (free with pulse_store_free) */
    int result;           /* 0 or PULSE_ERR_* for this transfer */
    char detail[256];     /* pulse_last_error() text for this transfer's failure */
} pulse_transfer;

/* Runs every transfer; each gets its own result. Returns 0 when all succeeded, else the
 * first failed transfer's result (and its detail as the last error). */
PULSE_API int pulse_store_batch(pulse_store *st, pulse_transfer *xfers, size_t n);

/* Retries this handle has made since it was opened (each repeated request counts once; 0 on
 * file://). For metrics: a rising count means a flaky link or an overloaded server. */
PULSE_API uint64_t pulse_store_retries(const pulse_store *st);

/* Sets a deadline for everything this handle does from now on, as seconds on CLOCK_MONOTONIC
 * (clock_gettime; base/clock.h's pulse_monotonic_s), e.g. pulse_monotonic_s() + 300 around a
 * whole pull; 0 clears it. After it, every call (and every request and retry inside one)
 * fails at once with PULSE_ERR_NETWORK, "... the deadline of N s for this operation passed";
 * an attempt in flight is cut when it comes, and no retry starts (or waits) past it. It stays
 * until changed: clear it when the operation is over. PULSE_ERR_INVALID for a negative or
 * non-finite value. */
PULSE_API int pulse_store_set_deadline(pulse_store *st, double monotonic_s);

/* Frees what the store returned (buffers, URLs, split strings); NULL-safe. */
PULSE_API void pulse_store_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
