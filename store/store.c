/* SPDX-License-Identifier: Apache-2.0 */
/* Store front end: URL parsing, settings, and the public calls that check their arguments and
 * dispatch to a backend. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fail.h"
#include "store/backend.h"

static int env_u64(const char *name, uint64_t *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return 0;
    uint64_t mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024ull * 1024 * 1024, end++;
    if (*end || (mul > 1 && v > UINT64_MAX / mul))
        return 0;
    *out = v * mul;
    return 1;
}

void pulse_store_default_settings(pulse_store_settings *s)
{
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    s->concurrency = 16;
    s->multipart_threshold = 64ull << 20;
    s->part_size = 16ull << 20;
    s->retries = 6;
    s->timeout_s = 30;
    s->backoff_ms = 200;
    s->progress = -1;
    s->list_page = 1000;
    s->list_max_keys = 1000000;
    s->request_timeout_s = 600;
    s->low_speed = 8192;
    uint64_t v;
    if (env_u64("PULSE_S3_CONCURRENCY", &v) && v >= 1 && v <= 256)
        s->concurrency = (int)v;
    if (env_u64("PULSE_S3_MULTIPART_THRESHOLD", &v) && v >= 1)
        s->multipart_threshold = v;
    if (env_u64("PULSE_S3_PART_SIZE", &v) && v >= 1 && v <= (5ull << 30))
        s->part_size = v;
    if (env_u64("PULSE_S3_RETRIES", &v) && v <= 100)
        s->retries = (int)v;
    if (env_u64("PULSE_S3_TIMEOUT", &v) && v >= 1 && v <= 86400)
        s->timeout_s = (long)v;
    if (env_u64("PULSE_S3_BACKOFF_MS", &v) && v <= 60000)
        s->backoff_ms = (long)v;
    if (env_u64("PULSE_S3_LIST_PAGE", &v) && v >= 1 && v <= 1000)
        s->list_page = (uint32_t)v;
    if (env_u64("PULSE_S3_LIST_MAX_KEYS", &v) && v >= 1 && v <= (1ull << 40))
        s->list_max_keys = v;
    if (env_u64("PULSE_S3_REQUEST_TIMEOUT", &v) && v >= 1 && v <= 604800)
        s->request_timeout_s = (long)v;
    if (env_u64("PULSE_S3_LOW_SPEED", &v) && v <= (1ull << 40))
        s->low_speed = v;
}

int pulse_store_open(pulse_store **out, const char *url, const pulse_store_settings *settings)
{
    pulse_clear_error();
    if (!out || !url)
        return pulse_fail(PULSE_ERR_INVALID, "store open: no URL");
    *out = NULL;
    pulse_store *st = calloc(1, sizeof *st);
    if (!st)
        return pulse_fail(PULSE_ERR_NOMEM, "store open: out of memory");
    pulse_store_default_settings(&st->settings);
    if (settings) {
        size_t n = settings->size < sizeof st->settings ? settings->size : sizeof st->settings;
        memcpy(&st->settings, settings, n);
        st->settings.size = sizeof st->settings;
    }
    pulse_store_settings *s = &st->settings;
    if (s->concurrency < 1 || s->concurrency > 256 || s->part_size < 1 || s->retries < 0 ||
        s->timeout_s < 1 || s->backoff_ms < 0 || s->list_page < 1 || s->list_page > 1000 ||
        s->multipart_threshold < 1 || s->list_max_keys < 1 || s->list_max_keys > (1ull << 40) || s->request_timeout_s < 1 ||
        s->request_timeout_s > 604800 || s->low_speed > (1ull << 40)) {
        free(st);
        return pulse_fail(PULSE_ERR_INVALID, "store open: settings out of range");
    }
    int rc;
    if (!strncmp(url, "file://", 7)) {
        rc = store_file_open(st, url + 7);
    } else if (!strncmp(url, "s3://", 5)) {
        rc = store_s3_open(st, url + 5);
    } else {
        free(st);
        return pulse_fail(PULSE_ERR_FORMAT, "store URL '%s': expected file:///path or s3://bucket",
                          url);
    }
    if (rc) {
        free(st);
        return rc;
    }
    *out = st;
    return 0;
}

void pulse_store_close(pulse_store **st)
{
    if (!st || !*st)
        return;
    (*st)->ops->close(*st);
    free(*st);
    *st = NULL;
}

int pulse_store_set_deadline(pulse_store *st, double monotonic_s)
{
    pulse_clear_error();
    if (!st)
        return pulse_fail(PULSE_ERR_INVALID, "set deadline: no store");
    if (!isfinite(monotonic_s) || monotonic_s < 0)
        return pulse_fail(PULSE_ERR_INVALID, "set deadline: %g is not a time on CLOCK_MONOTONIC", monotonic_s);
    st->deadline.at = monotonic_s;
    st->deadline.span = monotonic_s ? monotonic_s - pulse_monotonic_s() : 0;
    return 0;
}

uint64_t pulse_store_retries(const pulse_store *st)
{
    return st ? st->retries : 0;
}

void pulse_store_free(void *p)
{
    free(p);
}

int pulse_store_split_url(const char *url, char **root, char **key)
{
    pulse_clear_error();
    *root = *key = NULL;
    const char *rest, *slash;
    size_t root_len;
    if (!strncmp(url, "file://", 7)) {
        rest = url + 7;
        if (rest[0] != '/')
            return pulse_fail(PULSE_ERR_FORMAT, "'%s': file URLs need an absolute path (file:///...)",
                              url);
        /* The root is the key's directory, so nothing above it is ever touched (delete
         * removes emptied directories up to the root). */
        slash = strrchr(rest, '/');
        root_len = (size_t)(slash - url);
        if (slash == rest)
            root_len++; /* "file:///" */
    } else if (!strncmp(url, "s3://", 5)) {
        rest = url + 5;
        slash = strchr(rest, '/');
        if (slash == rest || !*rest)
            return pulse_fail(PULSE_ERR_FORMAT, "'%s': no bucket name", url);
        root_len = slash ? (size_t)(slash - url) : strlen(url);
    } else {
        return pulse_fail(PULSE_ERR_FORMAT, "'%s': expected s3://bucket/key or file:///path", url);
    }
    *root = strndup(url, root_len);
    *key = strdup(slash ? slash + 1 : "");
    if (!*root || !*key) {
        free(*root);
        free(*key);
        *root = *key = NULL;
        return pulse_fail(PULSE_ERR_NOMEM, "split URL: out of memory");
    }
    return 0;
}

int pulse_store_put(pulse_store *st, const char *key, const void *data, size_t len, unsigned flags)
{
    pulse_clear_error();
    if (!st || (!data && len))
        return pulse_fail(PULSE_ERR_INVALID, "put: no store or no data");
    return store_put_data(st, key, data, len, flags);
}

int pulse_store_put_file(pulse_store *st, const char *key, const char *path, unsigned flags)
{
    pulse_clear_error();
    if (!st || !path)
        return pulse_fail(PULSE_ERR_INVALID, "put: no store or no file");
    return store_put_path(st, key, path, flags);
}

static int get_mem(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                   const char *etag, size_t max_size, void **data, size_t *len,
                   pulse_object_info *info)
{
    pulse_clear_error();
    if (!st || !data || !len)
        return pulse_fail(PULSE_ERR_INVALID, "get: missing argument");
    *data = NULL;
    *len = 0;
    int rc = store_check_key("get", key);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "get", key);
    if (rc)
        return rc;
    pulse_object_info tmp;
    struct store_dst dst = { -1, max_size, data, len };
    rc = st->ops->get(st, key, offset, length, etag, &dst, info ? info : &tmp);
    if (rc) {
        free(*data);
        *data = NULL;
        *len = 0;
    }
    return rc;
}

int pulse_store_get(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                    size_t max_size, void **data, size_t *len, pulse_object_info *info)
{
    return get_mem(st, key, offset, length, NULL, max_size, data, len, info);
}

int pulse_store_get_if_none_match(pulse_store *st, const char *key, const char *etag,
                                  size_t max_size, void **data, size_t *len,
                                  pulse_object_info *info)
{
    if (!etag || !*etag)
        return get_mem(st, key, 0, PULSE_TO_END, NULL, max_size, data, len, info);
    return get_mem(st, key, 0, PULSE_TO_END, etag, max_size, data, len, info);
}

int pulse_store_get_file(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                         const char *path, pulse_object_info *info)
{
    pulse_clear_error();
    if (!st || !path || !*path)
        return pulse_fail(PULSE_ERR_INVALID, "get: no output file");
    return store_get_path(st, key, offset, length, path, info);
}

int pulse_store_get_fd(pulse_store *st, const char *key, uint64_t offset, uint64_t length, int fd,
                       pulse_object_info *info)
{
    pulse_clear_error();
    return store_get_fd(st, key, offset, length, fd, info);
}

int pulse_store_get_ranges(pulse_store *st, pulse_store_range *ranges, size_t n, int fd)
{
    pulse_clear_error();
    if (!st || fd < 0 || (n && !ranges))
        return pulse_fail(PULSE_ERR_INVALID, "get: no store, no output file or no ranges");
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        __atomic_store_n(&ranges[i].done, 0, __ATOMIC_RELEASE);
        ranges[i].object_size = 0;
        rc = store_check_key("get", ranges[i].key);
        if (!rc && (!ranges[i].length || ranges[i].offset > UINT64_MAX - ranges[i].length ||
                    ranges[i].at > UINT64_MAX - ranges[i].length))
            rc = pulse_fail(PULSE_ERR_INVALID, "get %s: range %zu is empty or past 2^64", ranges[i].key, i);
    }
    if (!rc && n)
        rc = store_deadline_check(&st->deadline, "get", ranges[0].key);
    return rc || !n ? rc : st->ops->get_ranges(st, ranges, n, fd);
}

int pulse_store_head(pulse_store *st, const char *key, pulse_object_info *info)
{
    pulse_clear_error();
    pulse_object_info tmp;
    if (!st)
        return pulse_fail(PULSE_ERR_INVALID, "head: no store");
    int rc = store_check_key("head", key);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "head", key);
    return rc ? rc : st->ops->head(st, key, info ? info : &tmp);
}

int pulse_store_delete(pulse_store *st, const char *key)
{
    pulse_clear_error();
    if (!st)
        return pulse_fail(PULSE_ERR_INVALID, "delete: no store");
    int rc = store_check_key("delete", key);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "delete", key);
    return rc ? rc : st->ops->del(st, key);
}

int pulse_store_list(pulse_store *st, const char *prefix, const char *start_after,
                     pulse_store_list_fn fn, void *ctx)
{
    pulse_clear_error();
    if (!st || !fn)
        return pulse_fail(PULSE_ERR_INVALID, "list: no store or callback");
    if (!prefix)
        prefix = "";
    int rc = store_check_prefix(prefix);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "list", *prefix ? prefix : "(all keys)");
    if (rc)
        return rc;
    if (start_after && !*start_after)
        start_after = NULL;
    return st->ops->list(st, prefix, start_after, fn, ctx);
}

int pulse_store_list_uploads(pulse_store *st, const char *prefix, pulse_store_upload_fn fn, void *ctx)
{
    pulse_clear_error();
    if (!st || !fn)
        return pulse_fail(PULSE_ERR_INVALID, "list uploads: no store or callback");
    if (!prefix)
        prefix = "";
    int rc = store_check_prefix(prefix);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "list uploads", *prefix ? prefix : "(all keys)");
    if (!rc && !st->ops->list_uploads)
        rc = pulse_fail(PULSE_ERR_UNSUPPORTED, "list uploads: this store has no multipart uploads");
    return rc ? rc : st->ops->list_uploads(st, prefix, fn, ctx);
}

int pulse_store_abort_upload(pulse_store *st, const char *key, const char *upload_id)
{
    pulse_clear_error();
    if (!st || !upload_id || !*upload_id)
        return pulse_fail(PULSE_ERR_INVALID, "abort upload: no store or no upload id");
    int rc = store_check_key("abort upload", key);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "abort upload", key);
    if (!rc && !st->ops->abort_upload)
        rc = pulse_fail(PULSE_ERR_UNSUPPORTED, "abort upload %s: this store has no multipart uploads", key);
    return rc ? rc : st->ops->abort_upload(st, key, upload_id);
}

int pulse_store_presign(pulse_store *st, const char *key, unsigned long expires_s, char **url)
{
    pulse_clear_error();
    if (!st || !url)
        return pulse_fail(PULSE_ERR_INVALID, "presign: missing argument");
    *url = NULL;
    int rc = store_check_key("presign", key);
    return rc ? rc : st->ops->presign(st, key, expires_s, url);
}

static void record(pulse_transfer *x, int rc)
{
    x->result = rc;
    snprintf(x->detail, sizeof x->detail, "%s", rc ? pulse_last_error() : "");
}

int pulse_store_batch(pulse_store *st, pulse_transfer *xfers, size_t n)
{
    pulse_clear_error();
    if (!st || (!xfers && n))
        return pulse_fail(PULSE_ERR_INVALID, "batch: missing argument");
    for (size_t i = 0; i < n; i++) {
        pulse_transfer *x = &xfers[i];
        x->out = NULL;
        x->result = 0;
        x->detail[0] = 0;
        int rc = store_check_key(x->op == PULSE_XFER_PUT ? "put" : "get", x->key);
        if (!rc && x->op != PULSE_XFER_GET && x->op != PULSE_XFER_PUT)
            rc = pulse_fail(PULSE_ERR_INVALID, "batch: transfer %zu has no operation", i);
        if (!rc && x->op == PULSE_XFER_PUT && !x->path && !x->data && x->len)
            rc = pulse_fail(PULSE_ERR_INVALID, "batch: put %s has no data", x->key);
        if (rc)
            record(x, rc); /* the backends skip transfers that already have a result */
    }
    if (st->ops->batch) {
        st->ops->batch(st, xfers, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            pulse_transfer *x = &xfers[i];
            int rc;
            if (x->result)
                continue;
            if (x->op == PULSE_XFER_PUT) {
                rc = x->path ? pulse_store_put_file(st, x->key, x->path, x->flags)
                             : pulse_store_put(st, x->key, x->data, x->len, x->flags);
            } else if (x->path) {
                rc = pulse_store_get_file(st, x->key, x->offset, x->length, x->path, NULL);
            } else {
                size_t len = 0;
                rc = pulse_store_get(st, x->key, x->offset, x->length, x->max_size, &x->out,
                                     &len, NULL);
                x->len = len;
            }
            record(x, rc);
        }
    }
    for (size_t i = 0; i < n; i++)
        if (xfers[i].result) {
            pulse_fail(xfers[i].result, "%s", xfers[i].detail);
            return xfers[i].result;
        }
    pulse_clear_error();
    return 0;
}
