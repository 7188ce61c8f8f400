/* SPDX-License-Identifier: Apache-2.0 */
/* Content-addressed objects: parallel create-if-absent uploads, and bounded, digest-checked downloads (to memory, or mapped from an unlinked temporary). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/checkpoint/filespace.h"
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

int sync_fetch_object_mapped(pulse_store *st, const char *run, const pulse_record_object *o, const char *dir,
                             void **map, uint64_t *moved)
{
    *map = NULL;
    char key[SYNC_KEY_MAX], stem[4096], name[4096];
    int r = sync_object_key(run, o->digest, key);
    if (r)
        return r;
    if (o->size == 0 || o->size > SIZE_MAX)
        return pulse_fail(PULSE_ERR_INVALID, "object %s: cannot map %llu bytes", key, (unsigned long long)o->size);
    snprintf(stem, sizeof stem, "%s/fetch", dir);
    int fd = pulse_create_temp(stem, ".tmp.", 0600, name, sizeof name);
    if (fd < 0)
        return fd;
    unlink(name);   /* open, not named: its blocks go with the last close or the process */
    /* Room for the object before any of it is fetched: a full disk is said at once, not after a
     * download it cannot keep (each poll again). Its size stays 0, so a short object is seen. */
    if (pulse_file_allocate(fd, FALLOC_FL_KEEP_SIZE, o->size) != 0) {
        r = pulse_fail_errno(PULSE_ERR_IO, "object %s: no room for its %llu bytes in %s", key,
                             (unsigned long long)o->size, dir);
        close(fd);
        return r;
    }
    pulse_object_info info;
    /* One byte more than declared: a longer object shows itself without being read whole. */
    r = pulse_store_get_fd(st, key, 0, o->size + 1, fd, &info);
    struct stat sb;
    if (r) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", pulse_last_error());
        r = pulse_fail(r, "object %s: %s", key, detail);
    } else if (fstat(fd, &sb) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "object %s: fstat of its temporary in %s", key, dir);
    /* What came is mapped whole (at most one byte more than declared), then checked as a fetch
     * into memory is: no check reads past the end of the file. */
    const uint64_t got = r ? 0 : (uint64_t)sb.st_size;
    if (!r) {
        *moved += got;
        sync_progress_add(got);
    }
    void *m = MAP_FAILED;
    if (!r && got && (m = mmap(NULL, (size_t)got, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
        r = pulse_fail_errno(PULSE_ERR_IO, "object %s: mapping its temporary in %s", key, dir);
    close(fd);
    if (!r)
        r = object_bytes_check(key, o, m == MAP_FAILED ? NULL : m, got);
    if (r) {
        if (m != MAP_FAILED)
            munmap(m, (size_t)got);
        return r;
    }
    *map = m;
    return 0;
}
