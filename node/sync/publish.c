/* SPDX-License-Identifier: Apache-2.0 */
/* The publisher: diff against the last published state, upload objects, commit a signed record, move the head. */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/durable.h"
#include "base/fail.h"
#include "base/names.h"
#include "manifest/layout.h"
#include "manifest/patch_objects.h"
#include "crypto/sha256.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/patch/patch_changes.h"
#include "node/patch/patch_spans.h"
#include "node/sync/copy_link.h"
#include "node/sync/part_hashes.h"
#include "node/sync/phases.h"
#include "node/sync/publisher.h"
#include "node/sync/stream_upload.h"
#include "node/sync/unsynced.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/manifest.h"
#include "pulseweights/sync.h"

static void updating_path(const pulse_publisher *p, char out[4096]);
static void last_path(const pulse_publisher *p, const uint8_t state[32], char out[4096]);

/* The copy of the head's state (the next diff's base): 1 with its path in out, 0 when there is
 * no head or no copy, or an error. */
static int head_copy(pulse_publisher *p, char out[4096], uint8_t state[32])
{
    uint64_t step;
    int h = pulse_index_head(p->ix, p->run, &step, state);
    if (h == PULSE_ERR_NOTFOUND) {
        pulse_clear_error();
        return 0;
    }
    if (h)
        return h;
    last_path(p, state, out);
    return access(out, F_OK) == 0;
}

/* The copy is updated in place without a sync (node/sync/unsynced.h) unless durable is asked
 * for or the kernel has no boot id to name. */
static int sync_each_publish(const pulse_publisher *p)
{
    return unsynced_sync_each(&p->note, p->o.durable);
}

/* At open: a note from another boot means the copy may hold only some of its updates (the
 * machine restarted before they were written back). It is kept only if it still hashes to its
 * state; otherwise it goes, and the next publish is a keyframe, as after any lost copy. */
static int copy_after_restart(pulse_publisher *p)
{
    char path[4096], work[4096];
    int r = unsynced_open(&p->note, p->state_dir);
    if (r || !p->note.stale)
        return r;
    uint8_t state[32], id[32];
    int have = head_copy(p, path, state);
    if (have < 0)
        return have;
    if (have) {
        pulse_ckpt *c = NULL;
        int whole = pulse_ckpt_open(&c, path, PULSE_CKPT_READ) == 0 && pulse_ckpt_state_id(c, p->o.threads, id) == 0
                    && !memcmp(id, state, 32);
        pulse_ckpt_close(&c);
        pulse_clear_error();
        if (!whole) {
            fprintf(stderr, "pulse: %s no longer holds its state (the machine restarted before it was written back): "
                            "removed; the next publish is a keyframe\n", path);
            if (unlink(path) != 0)
                return pulse_fail_errno(PULSE_ERR_IO, "remove %s", path);
        }
    }
    updating_path(p, work);
    unlink(work);
    return unsynced_settle(&p->note, p->state_dir, NULL);
}

PULSE_API int pulse_publisher_sync(pulse_publisher *p)
{
    if (!p || !p->note.marked)
        return 0;
    char path[4096];
    uint8_t state[32];
    int have = head_copy(p, path, state);
    return have < 0 ? have : unsynced_settle(&p->note, p->state_dir, have ? path : NULL);
}

PULSE_API void pulse_publish_opts_default(pulse_publish_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->values = PULSE_VALUES_ULP;
    o->zstd_level = 0;   /* the codec's default for patches, 3 for keyframes */
}

PULSE_API void pulse_publisher_close(pulse_publisher **pp)
{
    if (!pp || !*pp)
        return;
    pulse_publisher *p = *pp;
    pulse_publisher_sync(p);
    pulse_index_close(&p->ix);
    pulse_key_free(&p->key);
    pulse_store_close(&p->st);
    pulse_store_close(&p->st_up);
    state_dir_close(&p->dir);
    free(p->hashes);
    part_hashes_free(&p->committed);
    free(p->run);
    free(p->state_dir);
    free(p);
    *pp = NULL;
}

PULSE_API int pulse_publisher_open(pulse_publisher **out, const pulse_publish_opts *opts)
{
    *out = NULL;
    /* A caller built before `durable` was appended passes the shorter size: 0 then. */
    if (!opts || opts->size < offsetof(pulse_publish_opts, durable) || !opts->store_url || !opts->run ||
        !opts->key_path || !opts->state_dir)
        return pulse_fail(PULSE_ERR_INVALID, "publisher needs a store, a run, a key and a state directory");
    int bad = pulse_check_run(opts->run);
    if (bad)
        return bad;
    if (opts->size >= offsetof(pulse_publish_opts, chunk_elems) + sizeof opts->chunk_elems &&
        opts->chunk_elems > PULSE_PATCH_MAX_CHUNK)
        return pulse_fail(PULSE_ERR_INVALID, "publisher chunk size %u elements: at most %u", opts->chunk_elems,
                          PULSE_PATCH_MAX_CHUNK);
    pulse_publisher *p = calloc(1, sizeof *p);
    if (!p)
        return pulse_fail(PULSE_ERR_NOMEM, "publisher");
    memcpy(&p->o, opts, opts->size < sizeof p->o ? opts->size : sizeof p->o);
    p->o.size = sizeof p->o;
    p->dir.fd = -1;
    char part_run[PULSE_RECORD_MAX_RUN + 1];
    if (p->o.parts) {   /* a part publishes as a run of its own, "R.part-I-of-N" (manifest/layout.h) */
        int e = pulse_layout_part_run(part_run, sizeof part_run, opts->run, p->o.part, p->o.parts);
        if (e) {
            free(p);
            return e;
        }
    }
    p->run = strdup(p->o.parts ? part_run : opts->run);
    p->state_dir = strdup(opts->state_dir);
    int r = (!p->run || !p->state_dir) ? pulse_fail(PULSE_ERR_NOMEM, "publisher") : 0;
    /* A run name becomes a key component and a record field: the record's rule decides. */
    pulse_record probe;
    if (!r)
        r = pulse_record_init(&probe, PULSE_RECORD_RECEIPT, opts->run, 0);
    if (!r)
        pulse_record_clear(&probe);
    if (!r)
        r = pulse_key_load_secret(opts->key_path, &p->key);
    if (!r) {
        pulse_key_public(p->key, p->node);
        r = state_dir_open(opts->state_dir, &p->dir);
    }
    if (!r) {
        /* a step's patch (or its temporary), left by a publisher that stopped mid-step: the next
         * step makes it again; the unsynced note's temporary (killed while writing it); and
         * last.dirs with its temporaries, which builds that published patches by direction
         * (format 6, no longer read) kept */
        static const char *const stems[] = { "pending.patch", "unsynced.tmp.", "last.link.tmp.", "last.dirs" };
        state_dir_sweep(opts->state_dir, stems, sizeof stems / sizeof stems[0]);
    }
    if (!r)
        r = pulse_store_open(&p->st, opts->store_url, NULL);
    if (!r)
        r = pulse_store_open(&p->st_up, opts->store_url, NULL);
    if (!r)
        sync_abort_stale_uploads(p->st, p->run, (int64_t)time(NULL));
    if (!r) {
        char path[4096];
        snprintf(path, sizeof path, "%s/index.db", opts->state_dir);
        r = pulse_index_open(&p->ix, path);
    }
    if (!r)
        r = copy_after_restart(p);
    if (r) {
        pulse_publisher_close(&p);
        return r;
    }
    *out = p;
    return 0;
}

/* Where the copy is while it is updated in place: a name no state id can give. */
static void updating_path(const pulse_publisher *p, char out[4096])
{
    snprintf(out, 4096, "%s/last-updating.safetensors", p->state_dir);
}

static void last_path(const pulse_publisher *p, const uint8_t state[32], char out[4096])
{
    char hex[65];
    pulse_id_hex(state, hex);
    snprintf(out, 4096, "%s/last-%s.safetensors", p->state_dir, hex);
}

/* The head names the record and carries it (manifest/layout.h), so a follower that polls the head
 * has the record without fetching it. */
int publisher_move_head(pulse_publisher *p, const char *rel, const uint8_t *bytes, size_t len)
{
    char head_rel[SYNC_KEY_MAX], head[SYNC_KEY_MAX];
    sync_head_rel(p->node, head_rel);
    uint8_t *content = NULL;
    size_t n = 0;
    int r = sync_run_key(p->run, head_rel, head);
    if (!r)
        r = pulse_layout_head_content(&content, &n, rel, (uint64_t)(1e3 * pulse_realtime_s()), bytes, len);
    if (!r)
        r = pulse_store_put(p->st, head, content, n, 0);
    free(content);
    if (!r)
        r = pulse_index_put_record(p->ix, rel, bytes, len, (uint64_t)time(NULL), NULL, NULL);
    if (!r)
        r = pulse_index_mark_verified(p->ix, rel, PULSE_VERDICT_OK, "published by this node");
    return r;
}

static uint64_t dense_bytes_of(const pulse_ckpt *c)
{
    uint64_t n = 0;
    for (size_t i = 0; i < pulse_ckpt_count(c); i++)
        n += pulse_ckpt_tensor(c, i)->nbytes;
    return n;
}

static uint64_t elems_of(const pulse_ckpt *c)
{
    uint64_t n = 0;
    for (size_t i = 0; i < pulse_ckpt_count(c); i++)
        n += pulse_ckpt_tensor(c, i)->nelems;
    return n;
}

static double ms_since(double t0)
{
    return 1e3 * (pulse_monotonic_s() - t0);
}

/* A step's patch between its diff and its record: its data uploaded in parts as the diff wrote
 * it (the upload still going on at the diff's end), the patch mapped read-only, so the head's
 * upload reads page cache the kernel may drop, not a copy in the process's memory, and a
 * publisher's memory does not grow with the step (~290 MB at 1B and lr 3e-5). */
typedef struct step_patch {
    stream_upload *up;
    void *map;
    pulse_patch_stats stats;
    uint8_t result[32];      /* NEW's state id, hashed by the diff as it read NEW */
    ckpt_span *spans;        /* where NEW differs from the base: the copy's update after the record */
    size_t nspans;
} step_patch;

static void step_patch_free(step_patch *sp)
{
    stream_upload_free(&sp->up);
    if (sp->map)
        munmap(sp->map, (size_t)sp->stats.file_bytes);
    free(sp->spans);
    memset(sp, 0, sizeof *sp);
}

/* The step's changes handed in (pulse_publisher_publish_changes), C then only their layout. */
typedef struct step_changes {
    const pulse_tensor_changes *t;
    size_t n;
} step_changes;

/* The patch from last (state BASE) to c, into *sp: their diff, or made of CHG's lists (LAST
 * NULL). NEW's state id is RESULT when known, else hashed by the diff in its own scan. */
static int diff_mapped(pulse_publisher *p, const pulse_ckpt *last, const pulse_ckpt *c, const step_changes *chg,
                       const uint8_t base[32], const uint8_t *result, step_patch *sp)
{
    /* The file is mapped, uploaded and deleted: the uploaded object is the durable copy, and
     * a publisher that stops before the record is written diffs again, so no fsync. */
    char path[4096];
    snprintf(path, sizeof path, "%s/pending.patch", p->state_dir);
    memset(sp, 0, sizeof *sp);
    int r = stream_upload_start(&sp->up, p->st_up, p->run);
    if (r)
        return r;
    pulse_diff_opts d;
    pulse_diff_opts_default(&d);
    d.values = p->o.values;
    d.threads = p->o.threads;
    d.old_id = base;
    d.new_id = result;
    d.new_id_out = sp->result;
    d.new_tensor_hashes_out = p->o.parts ? (uint8_t *)p->hashes : NULL;
    d.scratch = 1;
    if (p->o.zstd_level > 0)
        d.zstd_level = p->o.zstd_level;
    if (p->o.chunk_elems)
        d.chunk_elems = p->o.chunk_elems;
    d.context = p->o.context && p->o.values == PULSE_VALUES_ULP;
    d.on_data = stream_upload_on_data;
    d.on_data_progress = stream_upload_on_progress;
    d.data_ctx = sp->up;
    r = chg ? patch_from_changes(c, chg->t, chg->n, &d, base, result, path) : pulse_patch_diff(last, c, &d, path);
    if (!r && result)
        memcpy(sp->result, result, 32);
    pulse_patch *patch = NULL;
    if (!r)
        r = pulse_patch_open(&patch, path);
    if (!r)
        r = pulse_patch_info(patch, 0, &sp->stats);
    if (!r)
        r = patch_changed_spans(patch, &sp->spans, &sp->nspans);
    pulse_patch_close(&patch);

    int fd = r ? -1 : open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (!r && (fd < 0 || fstat(fd, &sb) != 0))
        r = pulse_fail_errno(PULSE_ERR_IO, "%s", path);
    else if (!r && (uint64_t)sb.st_size != sp->stats.file_bytes)
        r = pulse_fail(PULSE_ERR_IO, "%s: %lld bytes, the patch written has %llu", path, (long long)sb.st_size,
                       (unsigned long long)sp->stats.file_bytes);
    if (!r) {
        void *m = mmap(NULL, (size_t)sp->stats.file_bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            r = pulse_fail_errno(PULSE_ERR_IO, "mapping %s", path);
        else
            sp->map = m;
    }
    if (fd >= 0)
        close(fd);
    /* kept: the next step's patch is written over it, in pages already there (patch_file_create) */
    if (r)
        step_patch_free(sp);
    return r;
}

/* A part's tensor hashes (of C, hashed by this publish) as an object's bytes (*bytes, *len,
 * malloc'ed): its record names it last, and the committer combines them into the whole model's
 * state ids. */
static int tensor_hashes_bytes(const pulse_publisher *p, const pulse_ckpt *c, uint8_t **bytes, size_t *len)
{
    size_t n = pulse_ckpt_count(c);
    const char **names = calloc(n ? n : 1, sizeof *names);
    if (!names)
        return pulse_fail(PULSE_ERR_NOMEM, "tensor names");
    for (size_t i = 0; i < n; i++)
        names[i] = pulse_ckpt_tensor(c, i)->name;
    int r = part_hashes_encode(n, names, (const uint8_t(*)[32])p->hashes, bytes, len);
    free(names);
    return r;
}

static int add_tensor_hashes_object(pulse_record *rec, const sync_blob *b)
{
    rec->patch_bytes += b->len;   /* the sum of the record's objects */
    return pulse_record_add_object(rec, b->digest, b->len, PULSE_ROLE_TENSOR_HASHES, "", 0, 0);
}

/* The step's patch (diffed already, its data uploading, in sp): the rest of its data, then its
 * head, an object of its own so that the record's digest of it binds the chunk table: a follower
 * holding part of each tensor checks the table, then fetches only its chunks by range. A part's
 * tensor hashes go in the same batch as the head. */
static int publish_patch(pulse_publisher *p, const pulse_ckpt *c, pulse_record *rec, pulse_sync_step *s,
                         step_patch *sp)
{
    const uint64_t head_len = sp->stats.header_bytes;
    const upload_part *parts = NULL;
    size_t n = 0, ntail = 1;
    sync_blob tail[2] = { { .data = sp->map, .len = (size_t)head_len } };
    uint8_t *hashes = NULL;
    int r = 0;
    if (p->o.parts) {
        r = tensor_hashes_bytes(p, c, &hashes, &tail[1].len);
        tail[1].data = hashes;
        ntail = 2;
    }
    double t0 = pulse_monotonic_s();
    if (!r)
        r = stream_upload_finish(sp->up, sp->stats.file_bytes - head_len, tail, ntail, &parts, &n, &s->moved_bytes);
    p->phases.upload += ms_since(t0);
    if (!r)
        r = pulse_record_add_object(rec, tail[0].digest, head_len, PULSE_ROLE_PATCH_INDEX, "", 0, head_len);
    for (size_t i = 0; !r && i < n; i++)
        r = pulse_record_add_object(rec, parts[i].digest, parts[i].len, PULSE_ROLE_PATCH_DATA, "",
                                    head_len + parts[i].off, parts[i].len);
    if (!r) {
        rec->changes = sp->stats.changes + sp->stats.opaque_changes;
        rec->patch_bytes = sp->stats.file_bytes;
    }
    if (!r && ntail == 2)
        r = add_tensor_hashes_object(rec, &tail[1]);
    free(hashes);
    return r;
}

/* A keyframe part's tensor hashes, in a request of their own after the keyframe's chunks. */
static int put_tensor_hashes(pulse_publisher *p, const pulse_ckpt *c, pulse_record *rec, uint64_t *moved)
{
    uint8_t *bytes = NULL;
    sync_blob b = { 0 };
    int r = tensor_hashes_bytes(p, c, &bytes, &b.len);
    b.data = bytes;
    if (!r) {
        pulse_sha256(bytes, b.len, b.digest);
        r = sync_put_objects(p->st, p->run, &b, 1, moved);
    }
    if (!r)
        r = add_tensor_hashes_object(rec, &b);
    free(bytes);
    return r;
}

static int publish_one(pulse_publisher *p, int kind, const uint8_t last_state[32], const pulse_ckpt *c,
                       const uint8_t state[32], uint64_t step, pulse_sync_step *s, step_patch *sp)
{
    pulse_record rec;
    int r = pulse_record_init(&rec, kind, p->run, step);
    if (r)
        return r;
    rec.time = (uint64_t)time(NULL);
    memcpy(rec.result, state, 32);
    rec.dense_bytes = dense_bytes_of(c);
    if (kind == PULSE_RECORD_SYNC_PATCH) {
        memcpy(rec.base, last_state, 32);
        r = publish_patch(p, c, &rec, s, sp);
    } else {
        double t0 = pulse_monotonic_s();
        r = sync_keyframe_publish(p->st, p->run, c, p->o.threads, p->o.zstd_level > 0 ? p->o.zstd_level : 3,
                                  &rec, &s->moved_bytes);
        p->phases.upload += ms_since(t0);
        rec.changes = elems_of(c);
        for (uint32_t i = 0; i < rec.n_objects; i++)
            rec.patch_bytes += rec.objects[i].size;
        if (!r && p->o.parts)
            r = put_tensor_hashes(p, c, &rec, &s->moved_bytes);
    }
    uint8_t *bytes = NULL;
    size_t len = 0;
    char rel[SYNC_KEY_MAX];
    double t0 = pulse_monotonic_s();
    if (!r)
        r = sync_commit_record(p->st, p->run, p->key, &rec, sync_same_transition, rel, &bytes, &len,
                               &s->moved_bytes);
    if (!r)
        r = publisher_move_head(p, rel, bytes, len);
    p->phases.record += ms_since(t0);
    if (!r)
        sync_step_from_record(s, &rec, rel);
    free(bytes);
    pulse_record_clear(&rec);
    return r;
}

/* Whether REC (verified as this node's) is what this publisher itself left: a record of its last
 * state (the step's patch or keyframe), or this very step, STEP to STATE, written by a run of
 * this publish that stopped after moving the head and before indexing. */
static int head_is_own_progress(const pulse_record *rec, int have_last, uint64_t last_step,
                                const uint8_t last_state[32], uint64_t step, const uint8_t state[32])
{
    if (have_last && rec->step == last_step && !memcmp(rec->result, last_state, 32))
        return 1;
    if (rec->step != step || memcmp(rec->result, state, 32))
        return 0;
    return rec->kind == PULSE_RECORD_KEYFRAME ||
           (rec->kind == PULSE_RECORD_SYNC_PATCH && have_last && !memcmp(rec->base, last_state, 32));
}

int publisher_head_key(const pulse_publisher *p, char key[SYNC_KEY_MAX])
{
    char head_rel[SYNC_KEY_MAX];
    sync_head_rel(p->node, head_rel);
    return sync_run_key(p->run, head_rel, key);
}

/* The store's record chain is the single truth: before publishing STEP (STATE), the node's head
 * must name this publisher's last record (what its index says it published last), or the record
 * of this very step. A head naming another record of this node that verifies under its key
 * means another process publishes with the same key (split brain): going on would leave
 * followers on states neither chain holds, so the publish is refused and nothing is written.
 * A head that is missing, unreadable as a key or names no record of this node is no evidence
 * of anything (anyone may write it) and is overwritten by this publish. Costs one GET of the
 * head, and one of the record it names when that is not in the index. */
int publisher_check_head(pulse_publisher *p, int have_last, uint64_t last_step, const uint8_t last_state[32],
                         uint64_t step, const uint8_t state[32])
{
    char head[SYNC_KEY_MAX];
    int r = publisher_head_key(p, head);
    void *data = NULL;
    size_t len = 0;
    if (!r)
        r = pulse_store_get(p->st, head, 0, PULSE_TO_END, PULSE_LAYOUT_HEAD_MAX, &data, &len, NULL);
    return publisher_check_head_got(p, r, data, len, have_last, last_step, last_state, step, state);
}

int publisher_check_head_got(pulse_publisher *p, int r, void *data, size_t len, int have_last, uint64_t last_step,
                             const uint8_t last_state[32], uint64_t step, const uint8_t state[32])
{
    char rel[SYNC_KEY_MAX], key[SYNC_KEY_MAX];
    if (r)
        pulse_store_free(data);
    if (r == PULSE_ERR_NOTFOUND || r == PULSE_ERR_LIMIT) {
        pulse_clear_error();
        return 0;
    }
    if (r)
        return r;
    uint64_t ms;
    const uint8_t *rb;
    size_t rl;
    int usable = pulse_layout_parse_head_content(data, len, rel, sizeof rel, &ms, &rb, &rl) == 0;
    pulse_store_free(data);
    if (!usable || sync_run_key(p->run, rel, key)) {
        pulse_clear_error();
        return 0;
    }

    if (have_last) {   /* the usual case: the head names a record this publisher indexed */
        pulse_index_link *links = NULL;
        size_t n = 0;
        r = pulse_index_chain(p->ix, p->run, last_step, &links, &n);
        int known = 0;
        for (size_t i = 0; !r && i < n && !known; i++)
            known = links[i].step == last_step && !strcmp(links[i].key, rel);
        free(links);
        if (r || known)
            return r;
    }

    data = NULL;
    r = pulse_store_get(p->st, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &len, NULL);
    if (r == PULSE_ERR_NOTFOUND || r == PULSE_ERR_LIMIT) {
        pulse_clear_error();
        return 0;
    }
    if (r)
        return r;
    pulse_trust *self = NULL;
    pulse_public_key pub = { 0 };
    memcpy(pub.key, p->node, 32);
    pulse_record rec = { 0 };
    char want[SYNC_KEY_MAX];
    int own = 0;
    r = pulse_trust_new(&self);
    if (!r)
        r = pulse_trust_add(self, &pub);
    if (!r && !pulse_record_verify(data, len, self, NULL, &rec))
        own = !strcmp(rec.run, p->run) && !pulse_record_key(&rec, want, sizeof want) && !strcmp(want, rel);
    pulse_store_free(data);
    pulse_trust_free(&self);
    if (!r && own && !head_is_own_progress(&rec, have_last, last_step, last_state, step, state)) {
        char hex[65];
        if (have_last)
            r = pulse_fail(PULSE_ERR_EXISTS, "%s in the store is not this publisher's last record (step %llu, state "
                           "%.16s...): another publisher with the same key?", rel, (unsigned long long)last_step,
                           pulse_id_hex(last_state, hex));
        else
            r = pulse_fail(PULSE_ERR_EXISTS, "%s in the store is not this publisher's last record (%s has "
                           "published nothing): another publisher with the same key?", rel, p->state_dir);
    }
    pulse_record_clear(&rec);
    if (!r)
        pulse_clear_error();
    return r;
}

/* Whether this node's keyframe record of STEP is in the store (*err set on a store failure). */
static int keyframe_exists(pulse_publisher *p, uint64_t step, int *err)
{
    pulse_record probe;
    char rel[SYNC_KEY_MAX], key[SYNC_KEY_MAX];
    pulse_object_info info;
    *err = pulse_record_init(&probe, PULSE_RECORD_KEYFRAME, p->run, step);
    if (*err)
        return 0;
    memcpy(probe.node, p->node, 32);
    *err = pulse_record_key(&probe, rel, sizeof rel);
    pulse_record_clear(&probe);
    if (!*err)
        *err = sync_run_key(p->run, rel, key);
    if (!*err)
        *err = pulse_store_head(p->st, key, &info);
    if (*err == PULSE_ERR_NOTFOUND) {
        *err = 0;
        return 0;
    }
    return *err == 0;
}

/* The previous copy OLD_PATH brought to C's bytes in place, then renamed to PATH: only the spans
 * the step's diff found changed are looked at (SPANS, NSPANS), and in them only the blocks that
 * differ are written. It is first renamed to a name no head can match, so a crash midway leaves no
 * file claiming a state it does not hold: the next publish then finds no copy of the head and
 * publishes a keyframe, as after any lost copy. Returns 1, with nothing changed, where C's layout
 * is not the copy's (or the copy is sharded): then copy. */
static int update_last(pulse_publisher *p, const pulse_ckpt *c, const char *old_path, const char *path,
                       const ckpt_span *spans, size_t nspans)
{
    pulse_ckpt *last = NULL;
    if (pulse_ckpt_open(&last, old_path, PULSE_CKPT_WRITE) != 0) {
        pulse_clear_error();
        return 1;
    }
    int r = 1;
    if (pulse_ckpt_nfiles(last) == 1 && !strcmp(pulse_ckpt_file_path(last, 0), old_path)) {
        char work[4096];
        updating_path(p, work);
        if ((r = unsynced_before_write(&p->note, p->state_dir, p->o.durable)) != 0) {
            /* nothing written */
        } else if (rename(old_path, work) != 0) {
            r = pulse_fail_errno(PULSE_ERR_IO, "rename %s to %s", old_path, work);
        } else if ((r = ckpt_update_from(last, c, spans, nspans, p->o.threads, NULL)) == PULSE_ERR_MISMATCH) {
            /* nothing was written: the copy gets its name back, and the caller copies */
            pulse_clear_error();
            r = rename(work, old_path) != 0 ? pulse_fail_errno(PULSE_ERR_IO, "rename %s to %s", work, old_path) : 1;
        } else if (!r && !(r = sync_each_publish(p) ? pulse_ckpt_sync(last) : 0)) {
            r = ckpt_rename_durable(work, path);
        }
    }
    pulse_ckpt_close(&last);
    return r;
}

/* Keeps a copy of what was published as the next diff's base, named by its state id so a
 * crash between the index and this copy is noticed (the name would not match the head).
 * SNAP, when given, is C itself: an uncommitted single-file copy of tensors in memory, which
 * is committed under that name instead of being copied once more. Otherwise the previous copy
 * is updated in place where the step's patch (SP) says where (update_last). */
static int keep_last(pulse_publisher *p, const pulse_ckpt *c, pulse_ckpt *snap, const uint8_t state[32],
                     const char *old_path, const step_patch *sp)
{
    char path[4096];
    last_path(p, state, path);
    if (old_path && !strcmp(old_path, path))
        return 0;
    int r;
    if (!snap && !old_path && access(path, F_OK) == 0)
        return 0;   /* the copy of this very state is there (a step published again) */
    char work[4096];   /* what a crash during an update left, if anything */
    updating_path(p, work);
    /* The published file itself, linked: no byte of it written again (trainers write a new file
     * a step, never into an old one; copy_link_unchanged catches one that does). */
    if (!old_path)
        unlink(work);
    /* a file the trainer may not have synced: after a restart of the machine the copy is hashed
     * before it is trusted, as one this publisher wrote (node/sync/unsynced.h) */
    if (!snap && pulse_ckpt_nfiles(c) == 1 && (r = unsynced_before_write(&p->note, p->state_dir, p->o.durable)) != 0)
        return r;
    if (!snap && pulse_ckpt_nfiles(c) == 1 &&
        (r = copy_link_make(pulse_ckpt_file_path(c, 0), path, p->state_dir)) != 1) {
        if (!r && sync_each_publish(p)) {
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            r = fd < 0 || fsync(fd) != 0 ? pulse_fail_errno(PULSE_ERR_IO, "fsync %s", path) : pulse_fsync_parent(path);
            if (fd >= 0)
                close(fd);
        }
        if (!r && old_path)
            unlink(old_path);
        return r;
    }
    char lrec[4096];   /* a copy this publisher writes is no link */
    snprintf(lrec, sizeof lrec, "%s/last.link", p->state_dir);
    unlink(lrec);
    if (!snap && old_path && sp && (r = update_last(p, c, old_path, path, sp->spans, sp->nspans)) != 1)
        return r;
    unlink(work);
    if (snap) {
        char *final = strdup(path);
        if (!final)
            return pulse_fail(PULSE_ERR_NOMEM, "path");
        free(snap->final_path);
        snap->final_path = final;
        r = pulse_ckpt_commit(snap);
    } else {
        pulse_ckpt *copy = NULL;
        r = pulse_ckpt_create_like(&copy, path, c);
        if (!r)
            r = pulse_ckpt_commit(copy);
        pulse_ckpt_close(&copy);
    }
    if (!r && old_path)
        unlink(old_path);
    return r;
}

/* After a step published from its changes, a copy of an earlier state (a keyframe's) is no
 * longer the head's: removed, so that a later publish from the tensors makes a keyframe rather
 * than diff against it. */
static void drop_copy(pulse_publisher *p, const uint8_t state[32])
{
    char path[4096];
    last_path(p, state, path);
    unlink(path);
    snprintf(path, sizeof path, "%s/last.link", p->state_dir);
    unlink(path);
}

/* Tensors in memory are first copied into one file in the state directory (uncommitted, so a
 * failure leaves nothing): the keyframe is cut from a file, and the copy becomes the next
 * diff's base, so memory is read once and the state published is the one copied even if the
 * caller's buffers change afterwards. */
static int snapshot(pulse_publisher *p, const pulse_ckpt *c, pulse_ckpt **out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/snapshot.safetensors", p->state_dir);
    return sync_copy_to_file(c, path, out);
}

const publish_phases *publisher_phases(const pulse_publisher *p)
{
    return &p->phases;
}

/* One publish of C, a checkpoint with files (SNAP: C is the uncommitted copy of tensors in memory).
 * With a copy of the last published state to diff against, C is read once: the diff hashes it for
 * its state id as it compares it, and the copy is brought up to it afterwards from the spans the
 * diff found changed. Without one, C is hashed first (the keyframe reads it again anyway). With
 * CHG, C is only the layout of the changes handed in: no tensor is read, no copy kept. */
static int publish_files(pulse_publisher *p, const pulse_ckpt *c, pulse_ckpt *snap, const step_changes *chg,
                         int64_t step, unsigned flags, pulse_sync_step *out)
{
    pulse_sync_step s = { 0 };
    pulse_ckpt *last = NULL;
    uint8_t state[32], last_state[32];
    uint64_t last_step = 0;
    char lpath[4096] = "";
    int have_last = 0;
    step_patch sp = { 0 };
    int diffed = 0;
    memset(&p->phases, 0, sizeof p->phases);

    int r = 0;
    if (p->o.parts || chg) {
        uint8_t (*hs)[32] = realloc(p->hashes, (pulse_ckpt_count(c) ? pulse_ckpt_count(c) : 1) * 32);
        if (!hs)
            return pulse_fail(PULSE_ERR_NOMEM, "tensor hashes");
        p->hashes = hs;
        if (p->o.parts && step < 0)
            return pulse_fail(PULSE_ERR_INVALID, "a part publishes a given step (the committer's), not the next one");
    }
    int h = pulse_index_head(p->ix, p->run, &last_step, last_state);
    if (h == 0)
        have_last = 1;
    else if (h != PULSE_ERR_NOTFOUND)
        r = h;
    /* A part whose tensors did not change still publishes its step (a patch of no changes): the
     * committer needs every part's record of every step. */
    const int part_moves_on = p->o.parts && have_last && (uint64_t)step > last_step;
    if (!r && chg) {   /* changes against the head: no copy of it is read, none kept */
        if (!have_last)
            r = pulse_fail(PULSE_ERR_INVALID, "%s has published nothing to %s: its first step is published from "
                           "the tensors (a keyframe)", p->state_dir, p->run);
        else if (flags & PULSE_PUBLISH_KEYFRAME)
            r = pulse_fail(PULSE_ERR_INVALID, "a keyframe is cut from the tensors, not from their changes");
        for (size_t i = 0; !r && i < chg->n; i++)
            memcpy(p->hashes[i], chg->t[i].hash, 32);
        if (!r)
            ckpt_state_of_hashes(chg->n, (const uint8_t(*)[32])p->hashes, state);
        double t0 = pulse_monotonic_s();
        if (!r && (memcmp(state, last_state, 32) || part_moves_on))
            r = diff_mapped(p, NULL, c, chg, last_state, state, &sp);
        p->phases.diff = ms_since(t0);
        diffed = !r;
    }
    if (!r && have_last && !chg) {
        last_path(p, last_state, lpath);
        if (access(lpath, F_OK) == 0) {
            r = pulse_ckpt_open(&last, lpath, PULSE_CKPT_READ);
            if (!r && !copy_link_unchanged(lpath, p->state_dir)) {
                /* the trainer's file, linked as the copy, was written since: only its hash says
                 * whether it is still the state its name says */
                uint8_t id[32];
                r = pulse_ckpt_state_id(last, p->o.threads, id);
                if (!r && memcmp(id, last_state, 32) != 0) {
                    fprintf(stderr, "pulse: %s was written since it was published: removed; the next publish is a "
                                    "keyframe\n", lpath);
                    pulse_ckpt_close(&last);
                    unlink(lpath);
                }
            }
        }
        if (!r && last) {
            double t0 = pulse_monotonic_s();
            if (!r)
                r = diff_mapped(p, last, c, NULL, last_state, NULL, &sp);
            p->phases.diff = ms_since(t0);
            if (!r) {
                diffed = 1;
                memcpy(state, sp.result, 32);
            }
        }
    }
    if (!r && !diffed) {
        double t0 = pulse_monotonic_s();
        r = ckpt_state_id_tensors(c, p->o.threads, state, p->o.parts ? (uint8_t *)p->hashes : NULL);
        p->phases.state_id = ms_since(t0);
    }
    if (!r && have_last && !memcmp(state, last_state, 32) && !part_moves_on) {
        /* Already published: make sure the head says so (a crash may have come before it),
         * unless another publisher of this key has gone on from there. */
        pulse_index_link *links = NULL;
        size_t n = 0;
        r = publisher_check_head(p, have_last, last_step, last_state, last_step, state);
        if (!r)
            r = pulse_index_chain(p->ix, p->run, last_step, &links, &n);
        if (!r && n) {
            uint8_t *bytes = NULL;
            size_t len = 0;
            int verdict;
            r = pulse_index_get_record(p->ix, links[n - 1].key, &bytes, &len, &verdict);
            if (!r)
                r = publisher_move_head(p, links[n - 1].key, bytes, len);
            snprintf(s.record_key, sizeof s.record_key, "%s", links[n - 1].key);
            s.kind = links[n - 1].kind;
            free(bytes);
        }
        free(links);
        s.already = 1;
        s.step = last_step;
        memcpy(s.result, state, 32);
        /* A crash between this step's patch record and its keyframe record: finish the keyframe. */
        if (!r && (flags & PULSE_PUBLISH_KEYFRAME) && !keyframe_exists(p, last_step, &r) && !r) {
            pulse_sync_step k = { 0 };
            r = publish_one(p, PULSE_RECORD_KEYFRAME, NULL, c, state, last_step, &k, NULL);
            if (!r) {
                s = k;
                s.already = 0;
            }
        }
        if (!r && !chg)
            r = keep_last(p, c, snap, state, NULL, NULL);
        goto done;
    }
    if (!r) {
        if (step < 0)
            step = have_last ? (int64_t)last_step + 1 : 0;
        if (have_last && (uint64_t)step <= last_step)
            r = pulse_fail(PULSE_ERR_INVALID, "step %lld is not after the last published step %llu",
                           (long long)step, (unsigned long long)last_step);
    }
    if (!r)
        r = publisher_check_head(p, have_last, last_step, last_state, (uint64_t)step, state);
    if (!r && have_last && !diffed) {
        fprintf(stderr, "pulse: %s is missing: publishing step %lld as a keyframe only\n", lpath, (long long)step);
        have_last = 0;
        lpath[0] = '\0';
    }
    if (!r && have_last)
        r = publish_one(p, PULSE_RECORD_SYNC_PATCH, last_state, c, state, (uint64_t)step, &s, &sp);
    if (!r && (!have_last || (flags & PULSE_PUBLISH_KEYFRAME))) {
        pulse_sync_step k = { 0 };
        k.moved_bytes = s.moved_bytes;
        r = publish_one(p, PULSE_RECORD_KEYFRAME, NULL, c, state, (uint64_t)step, &k, NULL);
        if (!r && !have_last)
            s = k;
        else if (!r)
            s.moved_bytes = k.moved_bytes;
    }
    pulse_ckpt_close(&last);
    if (!r && chg) {
        drop_copy(p, last_state);
    } else if (!r) {
        double t0 = pulse_monotonic_s();
        r = keep_last(p, c, snap, state, lpath[0] ? lpath : NULL, diffed ? &sp : NULL);
        p->phases.keep = ms_since(t0);
    }
done:
    pulse_ckpt_close(&last);
    step_patch_free(&sp);
    if (!r && out)
        *out = s;
    return r;
}

PULSE_API int pulse_publisher_publish_ckpt(pulse_publisher *p, const pulse_ckpt *c, int64_t step,
                                           unsigned flags, pulse_sync_step *out)
{
    pulse_clear_error();
    if (!p || !c)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_publisher_publish_ckpt: no publisher or no checkpoint");
    sync_progress_begin(p->o.on_progress, p->o.progress_ctx, 0);
    int r;
    char lpath[4096];
    uint8_t head_state[32];
    /* Tensors in memory are read in place where a copy of the last state is there to diff
     * against and no keyframe is due (one read of the tensors, as for a file): the copy is then
     * brought up to them from the spans the diff found. A keyframe is cut from one file, and a
     * first publish makes the copy: those go through a snapshot. */
    int direct = pulse_ckpt_nfiles(c) > 0 ||
                 (!(flags & PULSE_PUBLISH_KEYFRAME) && head_copy(p, lpath, head_state) == 1);
    pulse_clear_error();
    if (direct) {
        r = publish_files(p, c, NULL, NULL, step, flags, out);
    } else {
        pulse_ckpt *snap = NULL;
        r = snapshot(p, c, &snap);
        if (!r)
            r = publish_files(p, snap, snap, NULL, step, flags, out);
        pulse_ckpt_close(&snap);   /* removes the copy when it was not kept */
    }
    sync_progress_end();
    return r;
}

PULSE_API int pulse_publisher_publish(pulse_publisher *p, const char *ckpt_path, int64_t step,
                                      unsigned flags, pulse_sync_step *out)
{
    pulse_clear_error();
    if (!p || !ckpt_path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_publisher_publish: no publisher or no checkpoint path");
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_open(&c, ckpt_path, PULSE_CKPT_READ);
    if (!r)
        r = pulse_publisher_publish_ckpt(p, c, step, flags, out);
    pulse_ckpt_close(&c);
    return r;
}

PULSE_API int pulse_publisher_publish_changes(pulse_publisher *p, const pulse_tensor_changes *t, size_t n, int64_t step,
                                              pulse_sync_step *out)
{
    pulse_clear_error();
    if (!p || (n && !t))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_publisher_publish_changes: no publisher or no changes");
    pulse_ckpt *layout = NULL;
    int r = patch_changes_layout(t, n, &layout);
    if (!r) {
        step_changes chg = { .t = t, .n = n };
        sync_progress_begin(p->o.on_progress, p->o.progress_ctx, 0);
        r = publish_files(p, layout, NULL, &chg, step, 0, out);
        sync_progress_end();
    }
    pulse_ckpt_close(&layout);
    return r;
}
