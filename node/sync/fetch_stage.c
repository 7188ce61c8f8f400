/* SPDX-License-Identifier: Apache-2.0 */
/* A step's patch fetched as parallel ranges into the state directory's fetch.data, each chunk staged against the weights as soon as its bytes are in. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/durable.h"
#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/checkpoint/filespace.h"
#include "node/patch/patch_stage.h"
#include "node/parallel.h"
#include "node/sync/fetch_stage.h"
#include "manifest/patch_objects.h"
#include "node/sync/sync_internal.h"

/* Ranges of about a sixteenth of the patch (one concurrent wave of the store's default 16), at
 * least FETCH_RANGE_MIN: a range is one stream staged in order, so several let every worker
 * stage while the bytes arrive, and none is so small that its round trip outweighs its bytes. */
#define FETCH_RANGES 16
#define FETCH_RANGE_MIN ((uint64_t)4 << 20)

typedef struct fetch_job {
    const pulse_record_object *head_obj;   /* NULL: a record of older publishers */
    const pulse_record *rec;
    const char *key;                       /* the first object's (for the head's errors) */
    uint64_t size;                         /* the patch's */
    const uint8_t *map;
    pulse_store_range *rg;
    size_t nrg;
    const pulse_ckpt *target;
    int jfd, threads, hash;
    pthread_mutex_t lock;        /* guards head, st's creation, next[] */
    pulse_patch *head;
    patch_stage *_Atomic st;     /* set once the head is checked and the stage open */
    size_t *next, *end;          /* per range: the next chunk to stage starting in it, and past its last,
                                    as places in data order (patch_stage_chunk_by_offset) */
    atomic_size_t staged;
    atomic_int fetched;          /* 0 downloading, 1 every byte in, -1 the download failed */
    atomic_int failed;
    int err;                     /* the first failure, its detail below (under lock) */
    char detail[512];
} fetch_job;

static void fail_job(fetch_job *j, int err)
{
    pthread_mutex_lock(&j->lock);
    if (!j->err) {
        j->err = err;
        snprintf(j->detail, sizeof j->detail, "%s", pulse_last_error());
    }
    pthread_mutex_unlock(&j->lock);
    atomic_store(&j->failed, 1);
}

/* Bytes [a, b) of the object are all in the file. */
static int have(const fetch_job *j, uint64_t a, uint64_t b)
{
    for (size_t i = 0; i < j->nrg && a < b; i++) {
        const pulse_store_range *r = &j->rg[i];
        if (a >= r->at + r->length || b <= r->at)
            continue;
        if (a < r->at)
            return 0;   /* ranges are in patch order: the bytes before this one are in none */
        uint64_t upto = r->at + __atomic_load_n(&r->done, __ATOMIC_ACQUIRE);
        uint64_t need = b < r->at + r->length ? b : r->at + r->length;
        if (upto < need)
            return 0;
        a = need;
    }
    return a >= b;
}

/* Where the k-th coded chunk in data order starts in the patch. */
static uint64_t nth_at(const patch_stage *st, size_t k)
{
    return patch_stage_chunk_at(st, patch_stage_chunk_by_offset(st, k));
}

/* Once the head's bytes are in: checked against the record (the head object's digest, or for a
 * record without one the whole object's at the end), opened, and the stage made (under lock). */
static int open_head(fetch_job *j)
{
    uint64_t head_len = j->head_obj ? j->head_obj->size : 0;
    if (!head_len) {   /* its length is in the header: table + header + digest */
        if (!have(j, 0, 104))
            return 0;
        uint64_t table = 0;
        for (int i = 7; i >= 0; i--)
            table = table << 8 | j->map[88 + i];
        head_len = table > j->size ? j->size + 1 : 104 + table + 32;
    }
    if (head_len > j->size)
        return pulse_fail(PULSE_ERR_FORMAT, "the patch's head (%llu bytes) is longer than the patch",
                          (unsigned long long)head_len);
    if (!have(j, 0, head_len))
        return 0;
    if (j->head_obj) {
        uint8_t d[32];
        pulse_sha256(j->map, (size_t)head_len, d);
        if (memcmp(d, j->head_obj->digest, 32) != 0)
            return pulse_fail(PULSE_ERR_CORRUPT, "object %s: SHA-256 does not match: its head is not the one the "
                              "record names", j->key);
    }
    int r = pulse_patch_open_head(&j->head, j->map, (size_t)head_len, j->size);
    if (!r && (memcmp(pulse_patch_base_id(j->head), j->rec->base, 32) ||
               memcmp(pulse_patch_result_id(j->head), j->rec->result, 32)))
        r = pulse_fail(PULSE_ERR_MISMATCH, "the patch's own state ids differ from the record's");
    patch_stage *st = NULL;
    if (!r)
        r = patch_stage_open(&st, j->head, j->target, j->jfd, j->threads, j->hash);
    size_t n = st ? patch_stage_chunks(st) : 0;
    for (size_t i = 0; !r && i < j->nrg; i++) {   /* the chunks starting in each range, in data order */
        size_t lo = i ? j->end[i - 1] : 0, k = lo;
        while (k < n && nth_at(st, k) < j->rg[i].at + j->rg[i].length)
            k++;
        j->next[i] = lo;
        j->end[i] = k;
    }
    if (r) {   /* closed here: another worker, or the caller, may try the head again after this */
        patch_stage_close(&st);
        pulse_patch_close(&j->head);
        return r;
    }
    atomic_store(&j->st, st);
    return 1;
}

/* A chunk whose bytes are all in and that no worker has taken, or SIZE_MAX. */
static size_t pick(fetch_job *j, patch_stage *st, size_t from)
{
    size_t k = SIZE_MAX;
    pthread_mutex_lock(&j->lock);
    for (size_t t = 0; t < j->nrg && k == SIZE_MAX; t++) {
        size_t i = (from + t) % j->nrg;
        if (j->next[i] >= j->end[i])
            continue;
        size_t c = patch_stage_chunk_by_offset(st, j->next[i]);
        uint64_t a = patch_stage_chunk_at(st, c);
        if (have(j, a, a + patch_stage_chunk_len(st, c))) {
            k = c;
            j->next[i]++;
        }
    }
    pthread_mutex_unlock(&j->lock);
    return k;
}

static void pause_briefly(void)
{
    struct timespec ts = { 0, 200000 };   /* 0.2 ms: a chunk takes ~1 ms to stage */
    nanosleep(&ts, NULL);
}

typedef struct worker_arg {
    fetch_job *j;
    size_t id;
} worker_arg;

static void *worker(void *arg)
{
    fetch_job *j = ((worker_arg *)arg)->j;
    size_t id = ((worker_arg *)arg)->id;
    while (!atomic_load(&j->failed)) {
        patch_stage *st = atomic_load(&j->st);
        if (!st) {
            int r = 0;
            pthread_mutex_lock(&j->lock);
            if (!atomic_load(&j->st))
                r = open_head(j);
            pthread_mutex_unlock(&j->lock);
            if (r < 0) {
                fail_job(j, r);
                break;
            }
            if (r == 0) {
                if (atomic_load(&j->fetched))
                    break;   /* the download ended (failed) before the head came */
                pause_briefly();
            }
            continue;
        }
        size_t k = pick(j, st, id);
        if (k != SIZE_MAX) {
            int r = patch_stage_chunk(st, k, j->map + patch_stage_chunk_at(st, k));
            if (r)
                fail_job(j, r);
            else
                atomic_fetch_add(&j->staged, 1);
            continue;
        }
        if (atomic_load(&j->staged) == patch_stage_chunks(st))
            break;   /* the untouched state chunks left are the finish's */
        if (patch_stage_hash_untouched(st))
            continue;
        if (atomic_load(&j->fetched) < 0)
            break;
        pause_briefly();
    }
    return NULL;
}

int sync_fetch_stage(pulse_store *store, const char *run, const pulse_record *rec, const char *dir,
                     const pulse_ckpt *target, int jfd, int threads, int hash, sync_staged *out, uint64_t *moved)
{
    memset(out, 0, sizeof *out);
    patch_objects po;
    int r = patch_objects_of(rec, &po);
    if (r)
        return r;
    char (*keys)[SYNC_KEY_MAX] = calloc(po.n, sizeof *keys), name[4096];
    if (!keys)
        r = pulse_fail(PULSE_ERR_NOMEM, "patch objects");
    for (size_t i = 0; !r && i < po.n; i++)
        r = sync_object_key(run, po.ext[i].obj->digest, keys[i]);
    const uint64_t size = po.bytes;
    if (!r && (size == 0 || size > SIZE_MAX))
        r = pulse_fail(PULSE_ERR_INVALID, "object %s: cannot map a patch of %llu bytes", keys[0],
                       (unsigned long long)size);
    /* One file, written over step after step: its pages are in the page cache already, and
     * writing over them costs a copy, where new pages cost ~15x that. What it held before is
     * never read: a chunk is read only once its range says its bytes came. */
    snprintf(name, sizeof name, "%s/fetch.data", dir);
    int fd = r ? -1 : open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (!r && fd < 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "open %s", name);
    /* room for the whole patch before any of it is fetched: a full disk is said at once, not
     * after a download it cannot keep (each poll again) */
    if (!r && pulse_file_allocate(fd, 0, size) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "object %s: no room for its %llu bytes in %s", keys[0],
                             (unsigned long long)size, dir);
    else if (!r && ftruncate(fd, (off_t)size) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "object %s: sizing %s", keys[0], name);
    void *map = MAP_FAILED;
    if (!r && (map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
        r = pulse_fail_errno(PULSE_ERR_IO, "mapping the fetched patch in %s", dir);
    fetch_job j = { .rec = rec, .key = keys ? keys[0] : "", .size = size, .map = map, .target = target, .jfd = jfd,
                    .hash = hash, .threads = threads > 0 ? threads : pulse_default_threads(), .head_obj = po.head };
    uint64_t each = (size + FETCH_RANGES - 1) / FETCH_RANGES;
    if (each < FETCH_RANGE_MIN)
        each = FETCH_RANGE_MIN;
    for (size_t i = 0; !r && i < po.n; i++)
        j.nrg += (size_t)((po.ext[i].obj->size + each - 1) / each);
    pthread_mutex_init(&j.lock, NULL);
    atomic_init(&j.st, NULL);
    atomic_init(&j.staged, 0);
    atomic_init(&j.fetched, 0);
    atomic_init(&j.failed, 0);
    if (!r && (!(j.rg = calloc(j.nrg, sizeof *j.rg)) || !(j.next = calloc(j.nrg, sizeof *j.next)) ||
               !(j.end = calloc(j.nrg, sizeof *j.end))))
        r = pulse_fail(PULSE_ERR_NOMEM, "fetch ranges");
    size_t *owner = r ? NULL : calloc(j.nrg, sizeof *owner);   /* the extent of each range */
    if (!r && !owner)
        r = pulse_fail(PULSE_ERR_NOMEM, "fetch ranges");
    for (size_t i = 0, k = 0; !r && i < po.n; i++)
        for (uint64_t off = 0; off < po.ext[i].obj->size; off += each, k++) {
            uint64_t left = po.ext[i].obj->size - off;
            j.rg[k] = (pulse_store_range){ .key = keys[i], .offset = off, .length = left < each ? left : each,
                                           .at = po.ext[i].at + off };
            owner[k] = i;
        }
    pthread_t tid[64];
    worker_arg wa[64];
    size_t nw = 0;
    for (; !r && nw < (size_t)j.threads && nw < 64; nw++) {
        wa[nw] = (worker_arg){ &j, nw };
        if (pthread_create(&tid[nw], NULL, worker, &wa[nw]) != 0)
            break;
    }
    if (!r && !nw)
        r = pulse_fail(PULSE_ERR_NOMEM, "cannot start a staging thread");
    double t0 = pulse_monotonic_s();
    if (!r) {
        r = pulse_store_get_ranges(store, j.rg, j.nrg, fd);
        if (r) {
            char d[512];
            snprintf(d, sizeof d, "%s", pulse_last_error());
            r = pulse_fail(r, "%s", d);
        }
        for (size_t k = 0; !r && k < j.nrg; k++) {
            /* the bytes the record names are there, but the object is not the one it names */
            const pulse_record_object *o = po.ext[owner[k]].obj;
            if (j.rg[k].object_size != o->size)
                r = pulse_fail(PULSE_ERR_CORRUPT, "object %s: %s than the %llu bytes the record declares",
                               keys[owner[k]], j.rg[k].object_size > o->size ? "longer" : "shorter",
                               (unsigned long long)o->size);
        }
    }
    out->fetch_ms = 1e3 * (pulse_monotonic_s() - t0);
    t0 = pulse_monotonic_s();   /* from here: the staging the download did not hide */
    atomic_store(&j.fetched, r ? -1 : 1);
    if (r)
        atomic_store(&j.failed, 1);
    for (size_t i = 0; i < nw; i++)
        pthread_join(tid[i], NULL);
    if (!r) {
        *moved += size;
        sync_progress_add(size);
    }
    if (!r && j.err)
        r = pulse_fail(j.err, "%s", j.detail);
    patch_stage *st = atomic_load(&j.st);
    if (!r && !st) {   /* the workers stopped before the head (no chunk at all came as bytes) */
        pthread_mutex_lock(&j.lock);
        int h = open_head(&j);
        pthread_mutex_unlock(&j.lock);
        r = h < 0 ? h : h == 0 ? pulse_fail(PULSE_ERR_FORMAT, "the patch has no whole head") : 0;
        st = atomic_load(&j.st);
    }
    /* chunks left (none, unless the workers stopped early) */
    for (size_t k = 0; !r && st && atomic_load(&j.staged) < patch_stage_chunks(st) && k < j.nrg; k++)
        while (!r && j.next[k] < j.end[k]) {
            size_t c = patch_stage_chunk_by_offset(st, j.next[k]++);
            r = patch_stage_chunk(st, c, j.map + patch_stage_chunk_at(st, c));
            if (!r)
                atomic_fetch_add(&j.staged, 1);
        }
    if (!r && !j.head_obj) {
        /* no head digest in the record: the whole patch's, before the result counts */
        uint8_t d[32];
        pulse_sha256(map, (size_t)size, d);
        if (memcmp(d, po.ext[0].obj->digest, 32) != 0)
            r = pulse_fail(PULSE_ERR_CORRUPT, "object %s: SHA-256 does not match its digest", keys[0]);
    }
    if (!r)
        r = patch_stage_finish(st, threads, out->result);
    out->verify_ms = 1e3 * (pulse_monotonic_s() - t0);
    if (!r && j.head_obj)
        memcpy(out->head_digest, j.head_obj->digest, 32);
    else if (!r)
        pulse_sha256(map, (size_t)pulse_patch_head_bytes(j.head), out->head_digest);
    if (r) {
        patch_stage_close(&st);
        pulse_patch_close(&j.head);
    } else {
        out->stage = st;
        out->head = j.head;
    }
    if (map != MAP_FAILED)
        munmap(map, (size_t)size);
    if (r && fd >= 0)
        unlink(name);   /* scratch: a failed step gives its room back */
    if (fd >= 0)
        close(fd);
    pthread_mutex_destroy(&j.lock);
    free(j.rg);
    free(j.next);
    free(j.end);
    free(owner);
    free(keys);
    patch_objects_free(&po);
    return r;
}

int sync_fetch_patch_file(pulse_store *store, const char *run, const pulse_record *rec, const char *dir, void **map,
                          uint64_t *len, uint64_t *moved)
{
    *map = NULL;
    *len = 0;
    patch_objects po;
    int r = patch_objects_of(rec, &po);
    if (r)
        return r;
    char (*keys)[SYNC_KEY_MAX] = calloc(po.n, sizeof *keys), name[4096];
    pulse_store_range *rg = calloc(po.n, sizeof *rg);
    if (!keys || !rg)
        r = pulse_fail(PULSE_ERR_NOMEM, "patch objects");
    for (size_t i = 0; !r && i < po.n; i++) {
        r = sync_object_key(run, po.ext[i].obj->digest, keys[i]);
        rg[i] = (pulse_store_range){ .key = keys[i], .offset = 0, .length = po.ext[i].obj->size, .at = po.ext[i].at };
    }
    if (!r && (po.bytes == 0 || po.bytes > SIZE_MAX))
        r = pulse_fail(PULSE_ERR_INVALID, "object %s: cannot map a patch of %llu bytes", keys[0],
                       (unsigned long long)po.bytes);
    snprintf(name, sizeof name, "%s/fetch.data", dir);
    int fd = r ? -1 : open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (!r && fd < 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "open %s", name);
    if (!r && pulse_file_allocate(fd, 0, po.bytes) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "object %s: no room for its %llu bytes in %s", keys[0],
                             (unsigned long long)po.bytes, dir);
    else if (!r && ftruncate(fd, (off_t)po.bytes) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "object %s: sizing %s", keys[0], name);
    if (!r)
        r = pulse_store_get_ranges(store, rg, po.n, fd);
    uint8_t *m = MAP_FAILED;
    if (!r && (m = mmap(NULL, (size_t)po.bytes, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
        r = pulse_fail_errno(PULSE_ERR_IO, "mapping the fetched patch in %s", dir);
    for (size_t i = 0; !r && i < po.n; i++) {
        /* each object is the one its record names: its size, then its SHA-256 */
        const pulse_record_object *o = po.ext[i].obj;
        uint8_t d[32];
        if (rg[i].object_size != o->size) {
            r = pulse_fail(PULSE_ERR_CORRUPT, "object %s: %s than the %llu bytes the record declares", keys[i],
                           rg[i].object_size > o->size ? "longer" : "shorter", (unsigned long long)o->size);
            break;
        }
        pulse_sha256(m + po.ext[i].at, (size_t)o->size, d);
        if (memcmp(d, o->digest, 32) != 0)
            r = pulse_fail(PULSE_ERR_CORRUPT, "object %s: SHA-256 does not match its digest", keys[i]);
    }
    if (!r) {
        *moved += po.bytes;
        sync_progress_add(po.bytes);
        *map = m;
        *len = po.bytes;
    } else if (m != MAP_FAILED) {
        munmap(m, (size_t)po.bytes);
    }
    if (fd >= 0)
        close(fd);
    if (r && fd >= 0)
        unlink(name);
    free(keys);
    free(rg);
    patch_objects_free(&po);
    return r;
}

void sync_staged_close(sync_staged *s)
{
    patch_stage_close(&s->stage);
    pulse_patch_close(&s->head);
}
