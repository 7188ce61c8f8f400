/* SPDX-License-Identifier: Apache-2.0 */
/* Content-addressed objects: parallel create-if-absent uploads, and bounded, digest-checked downloads to memory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/keys.h"

static _Thread_local struct {
    void (*fn)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
    uint64_t done, total;
} progress;

void sync_progress_begin(void (*fn)(void *ctx, uint64_t done, uint64_t total), void *ctx, uint64_t total)
{
    progress.fn = fn;
    progress.ctx = ctx;
    progress.done = 0;
    progress.total = total;
}

void sync_progress_total(uint64_t total)
{
    progress.done = 0;
    progress.total = total;
}

void sync_progress_add(uint64_t n)
{
    progress.done += n;
    if (progress.fn)
        progress.fn(progress.ctx, progress.done, progress.total);
}

void sync_progress_end(void)
{
    progress.fn = NULL;
    progress.ctx = NULL;
}

int sync_put_objects(pulse_store *st, const char *run, const sync_blob *blobs, size_t n,
                     uint64_t *moved)
{
    if (n == 0)
        return 0;
    pulse_transfer *x = calloc(n, sizeof *x);
    char (*keys)[SYNC_KEY_MAX] = calloc(n, sizeof *keys);
    int r = (!x || !keys) ? pulse_fail(PULSE_ERR_NOMEM, "upload of %zu objects", n) : 0;
    for (size_t i = 0; !r && i < n; i++) {
        r = sync_object_key(run, blobs[i].digest, keys[i]);
        x[i] = (pulse_transfer){ .op = PULSE_XFER_PUT, .key = keys[i], .data = blobs[i].data,
                                 .len = blobs[i].len, .flags = PULSE_PUT_IF_ABSENT | PULSE_PUT_CONTENT_ADDRESSED };
    }
    if (!r) {
        pulse_store_batch(st, x, n);
        /* An object already present under its digest holds these bytes: not an error. */
        for (size_t i = 0; i < n && !r; i++) {
            if (x[i].result == 0)
                *moved += blobs[i].len;
            else if (x[i].result != PULSE_ERR_EXISTS)
                r = pulse_fail(x[i].result, "upload of %s: %s", keys[i], x[i].detail);
        }
    }
    free(x);
    free(keys);
    return r;
}

/* The fetched bytes of object o are the ones its record names: its size, then its SHA-256. */
static int object_bytes_check(const char *key, const pulse_record_object *o, const void *bytes, uint64_t len)
{
    if (len != o->size)
        return pulse_fail(PULSE_ERR_CORRUPT, "object %s: %s than the %llu bytes the record declares", key,
                          len > o->size ? "longer" : "shorter", (unsigned long long)o->size);
    uint8_t d[32];
    pulse_sha256(bytes, (size_t)len, d);
    if (memcmp(d, o->digest, 32) != 0)
        return pulse_fail(PULSE_ERR_CORRUPT, "object %s: SHA-256 does not match its digest", key);
    return 0;
}

int sync_fetch_objects(pulse_store *st, const char *run, const pulse_record_object *o, size_t n,
                       void **data, uint64_t *moved)
{
    if (n == 0)
        return 0;
    pulse_transfer *x = calloc(n, sizeof *x);
    char (*keys)[SYNC_KEY_MAX] = calloc(n, sizeof *keys);
    int r = (!x || !keys) ? pulse_fail(PULSE_ERR_NOMEM, "download of %zu objects", n) : 0;
    for (size_t i = 0; !r && i < n; i++) {
        r = sync_object_key(run, o[i].digest, keys[i]);
        /* One byte more than declared: a longer object shows itself without being read whole. */
        x[i] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = keys[i], .offset = 0,
                                 .length = o[i].size + 1, .max_size = (size_t)o[i].size + 1 };
    }
    if (!r) {
        pulse_store_batch(st, x, n);
        for (size_t i = 0; i < n && !r; i++) {
            if (x[i].result != 0) {
                r = pulse_fail(x[i].result, "object %s: %s", keys[i], x[i].detail);
                break;
            }
            *moved += x[i].len;
            sync_progress_add(x[i].len);
            r = object_bytes_check(keys[i], &o[i], x[i].out, x[i].len);
        }
    }
    for (size_t i = 0; x && i < n; i++) {
        if (r)
            pulse_store_free(x[i].out);
        else
            data[i] = x[i].out;
    }
    free(x);
    free(keys);
    return r;
}

