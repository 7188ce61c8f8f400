/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the vtable every store backend fills, and the handle the front end shares with them. */
#ifndef PULSE_STORE_BACKEND_H
#define PULSE_STORE_BACKEND_H

#include <stdint.h>

#include "pulseweights/store.h"

/* Where a put reads from: memory (fd < 0) or an open file of `len` bytes. */
struct store_src {
    const void *data;
    uint64_t len;
    int fd;
};

/* Where a get writes: an open file written at offsets from 0 (fd >= 0), or a malloc'd
 * buffer of at most max bytes returned in *data / *len. */
struct store_dst {
    int fd;
    size_t max;
    void **data;
    size_t *len;
};

struct store_ops {
    int (*put)(pulse_store *st, const char *key, const struct store_src *src, unsigned flags);
    /* if_none_match: NULL, or an ETag; a match returns PULSE_ERR_NOT_MODIFIED. */
    int (*get)(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
               const char *if_none_match, const struct store_dst *dst, pulse_object_info *info);
    int (*head)(pulse_store *st, const char *key, pulse_object_info *info);
    /* pulse_store_get_ranges, arguments checked. */
    int (*get_ranges)(pulse_store *st, pulse_store_range *r, size_t n, int fd);
    int (*del)(pulse_store *st, const char *key);
    int (*list)(pulse_store *st, const char *prefix, const char *start_after,
                pulse_store_list_fn fn, void *ctx);
    int (*presign)(pulse_store *st, const char *key, unsigned long expires, char **url);
    /* Optional (NULL: the store has no multipart uploads, PULSE_ERR_UNSUPPORTED). */
    int (*list_uploads)(pulse_store *st, const char *prefix, pulse_store_upload_fn fn, void *ctx);
    int (*abort_upload)(pulse_store *st, const char *key, const char *upload_id);
    /* Optional: NULL runs the transfers one after another through put/get. Keys and
     * descriptors are already validated. */
    int (*batch)(pulse_store *st, pulse_transfer *x, size_t n);
    void (*close)(pulse_store *st);
};

/* A caller's deadline for a whole operation (pulse_store_set_deadline). */
struct store_deadline {
    double at;     /* seconds on CLOCK_MONOTONIC; 0: none */
    double span;   /* seconds from when it was set to `at`, for the error line */
};

/* 0 while st's deadline (if any) has not passed, else PULSE_ERR_NETWORK with the one line
 * every deadline failure uses: "OP WHO: the deadline of N s for this operation passed". */
int store_deadline_check(const struct store_deadline *d, const char *op, const char *who);

struct pulse_store {
    const struct store_ops *ops;
    pulse_store_settings settings;
    void *impl;
    uint64_t retries;   /* requests repeated after a transient failure (s3) */
    struct store_deadline deadline;
};

/* Backend constructors: `rest` is the URL after the scheme's "://". */
int store_file_open(pulse_store *st, const char *rest);
int store_s3_open(pulse_store *st, const char *rest);

/* Shared with the backends (store/backend.c): 0 when key is acceptable (see store.h), else PULSE_ERR_INVALID. */
int store_check_key(const char *op, const char *key);

/* Prefix check used by list (prefix may be "" and may end in '/'). */
int store_check_prefix(const char *prefix);

/* The put and get behind pulse_store_put, _put_file, _get_file and _get_fd (store/backend.c), less the
 * clearing of the last error: the public calls and a backend's batch both run these, so a
 * backend never calls back into the public API. */
int store_put_data(pulse_store *st, const char *key, const void *data, size_t len, unsigned flags);
int store_put_path(pulse_store *st, const char *key, const char *path, unsigned flags);
int store_get_path(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                   const char *path, pulse_object_info *info);
int store_get_fd(pulse_store *st, const char *key, uint64_t offset, uint64_t length, int fd,
                 pulse_object_info *info);

#endif
