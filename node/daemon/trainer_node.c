/* SPDX-License-Identifier: Apache-2.0 */
/* The trainer node: scan the checkpoint directory, publish finished checkpoints in step order, retain. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/fail.h"
#include "node/daemon/log.h"
#include "node/daemon/metrics.h"
#include "node/daemon/retention.h"
#include "node/daemon/signals.h"
#include "node/daemon/trainer_node.h"
#include "node/daemon/trainer_watch.h"
#include "manifest/layout.h"
#include "node/sync/phases.h"
#include "pulseweights/keys.h"
#include "pulseweights/manifest.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

void node_trainer_opts_default(node_trainer_opts *o)
{
    memset(o, 0, sizeof *o);
    pulse_publish_opts_default(&o->pub);
    o->keep_keyframes = 2;
    o->commit_wait_s = 600;
    o->orphan_grace_s = 3600;
    o->poll_ms = 1000;
}

/* What the node already did with a checkpoint (by name and fingerprint), so a published,
 * skipped or failed file is not tried again each poll; a changed file is tried again. */
typedef struct handled_set {
    watch_set s;
} handled_set;

static int handled_find(const handled_set *h, const watch_entry *e)
{
    for (size_t i = 0; i < h->s.n; i++)
        if (!strcmp(h->s.e[i].name, e->name))
            return !memcmp(h->s.e[i].fp, e->fp, sizeof e->fp) ? 1 : 0;
    return 0;
}

static int handled_add(handled_set *h, const watch_entry *e)
{
    for (size_t i = 0; i < h->s.n; i++)
        if (!strcmp(h->s.e[i].name, e->name)) {
            memcpy(h->s.e[i].fp, e->fp, sizeof e->fp);
            return 0;
        }
    if (h->s.n == h->s.cap) {
        size_t cap = h->s.cap ? h->s.cap * 2 : 16;
        watch_entry *n = realloc(h->s.e, cap * sizeof *n);
        if (!n)
            return pulse_fail(PULSE_ERR_NOMEM, "trainer: handled list");
        h->s.e = n;
        h->s.cap = cap;
    }
    watch_entry *c = &h->s.e[h->s.n];
    *c = *e;
    c->name = strdup(e->name);
    if (!c->name)
        return pulse_fail(PULSE_ERR_NOMEM, "trainer: handled list");
    h->s.n++;
    return 0;
}

/* Forgets files that are gone, so the set stays as small as the directory over weeks. */
static void handled_prune(handled_set *h, const watch_set *cur)
{
    size_t k = 0;
    for (size_t i = 0; i < h->s.n; i++) {
        int present = 0;
        for (size_t j = 0; j < cur->n && !present; j++)
            present = !strcmp(cur->e[j].name, h->s.e[i].name);
        if (present)
            h->s.e[k++] = h->s.e[i];
        else
            free(h->s.e[i].name);
    }
    h->s.n = k;
}

static double now_ms(void)
{
    return 1e3 * pulse_monotonic_s();
}

static void log_error(const char *what, const char *name, int err)
{
    char msg[600];
    const char *d = pulse_last_error();
    snprintf(msg, sizeof msg, "%s%s%s", pulse_strerror(err), d && *d ? ": " : "", d && *d ? d : "");
    node_log("error", "what", what, "file", name ? name : "", "message", msg, (char *)NULL);
}

typedef struct trainer {
    const node_trainer_opts *o;
    node_metrics m;               /* what --metrics and --metrics-file show */
    node_metrics_server *srv;
    char text[NODE_METRICS_TEXT];
    pulse_publisher *pub;
    pulse_publisher *committer;   /* --commit: the whole run's, in <state>/commit */
    pulse_store *st;       /* retention's own handle (the publisher's is private) */
    uint8_t node[32];
    int have_last;
    uint64_t last_step;
    int transient;         /* the last transient publish failure (--once reports it) */
} trainer;

static void show_metrics(trainer *t)
{
    node_metrics_publish(t->srv, &t->m);
    if (!t->o->metrics_file || node_metrics_render(&t->m, t->text, sizeof t->text) != 0)
        return;
    if (node_metrics_write_file(t->o->metrics_file, t->text) != 0)
        node_log("metrics-failed", "path", t->o->metrics_file, "reason", pulse_last_error(), (char *)NULL);
}

static void retain(trainer *t)
{
    if (!t->o->keep_keyframes)
        return;
    node_retention_stats rs;
    node_signals_hold(1);
    int r = node_retention_run(t->st, t->o->pub.run, t->o->pub.parts, t->node, t->o->keep_keyframes,
                               t->o->orphan_grace_s, &rs);
    node_signals_hold(0);
    if (r) {
        log_error("retention", NULL, r);
        return;
    }
    if (!rs.records_deleted && !rs.objects_deleted)
        return;
    char a[24], b[24], c[24], d[24];
    snprintf(a, sizeof a, "%" PRIu64, rs.oldest_kept_keyframe);
    snprintf(b, sizeof b, "%zu", rs.records_deleted);
    snprintf(c, sizeof c, "%zu", rs.objects_deleted);
    snprintf(d, sizeof d, "%" PRIu64, rs.object_bytes_deleted);
    node_log("retained", "oldest_keyframe", a, "records_deleted", b, "objects_deleted", c, "bytes_deleted", d,
             (char *)NULL);
}

static int is_transient(int err)
{
    return err == PULSE_ERR_NETWORK || err == PULSE_ERR_SERVER || err == PULSE_ERR_AUTH || err == PULSE_ERR_IO ||
           err == PULSE_ERR_NOMEM || err == PULSE_ERR_PRECONDITION;
}

/* --commit: the step this node just published its part of, committed once every part is there.
 * A part still missing after the wait (or the store failing) is tried again next poll; a refusal
 * for what the parts are (forged, overlapping, another base) is logged and not retried. Returns 1
 * to try again. */
static int commit_step(trainer *t, const watch_entry *e)
{
    pulse_sync_step s;
    char step_s[24], ms[24], wait_ms[24], objb[24], hex[65];
    snprintf(step_s, sizeof step_s, "%" PRIu64, e->step);
    double t0 = now_ms();
    node_signals_hold(1);
    int r = pulse_publisher_commit(t->committer, t->o->pub.parts, (int64_t)e->step, t->o->commit_wait_s, &s);
    node_signals_hold(0);
    if (r) {
        log_error("commit", e->name, r);
        t->m.publish_failures++;
        show_metrics(t);
        if (is_transient(r) || r == PULSE_ERR_NOTFOUND) {
            t->transient = r;
            return 1;
        }
        return 0;
    }
    snprintf(ms, sizeof ms, "%.0f", now_ms() - t0);
    snprintf(wait_ms, sizeof wait_ms, "%.1f", publisher_phases(t->committer)->wait);
    snprintf(objb, sizeof objb, "%" PRIu64, s.object_bytes);
    node_log(s.already ? "skipped" : "committed", "step", step_s, "kind", pulse_record_kind_name(s.kind), "ms", ms,
             "wait_ms", wait_ms, "objects", objb, "state", pulse_id_hex(s.result, hex), "record",
             s.record_key, (char *)NULL);
    retain(t);   /* the run's and its parts' records: the committer's, who knows the steps all hold */
    return 0;
}

/* Returns 0 when E is handled (published, skipped, or refused for good), 1 when it must be
 * tried again at the next poll (a transient failure). */
static int publish_entry(trainer *t, const watch_entry *e)
{
    char step_s[24], last_s[24];
    snprintf(step_s, sizeof step_s, "%" PRIu64, e->step);
    snprintf(last_s, sizeof last_s, "%" PRIu64, t->last_step);
    if (t->have_last && e->step < t->last_step) {
        node_log("skipped", "step", step_s, "file", e->name, "reason", "older than the last published step",
                 "last", last_s, (char *)NULL);
        return 0;
    }
    if (e->step > (uint64_t)INT64_MAX)
        return 0;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", t->o->watch_dir, e->name) >= (int)sizeof path) {
        node_log("error", "what", "publish", "file", e->name, "message", "path too long", (char *)NULL);
        return 0;
    }
    unsigned flags = 0;
    /* The last published step again (a restart): published without the keyframe flag, which
     * the publisher answers "already published" and rewrites the head (crash completion). */
    if (t->o->keyframe_every && e->step % t->o->keyframe_every == 0 && !(t->have_last && e->step == t->last_step))
        flags |= PULSE_PUBLISH_KEYFRAME;
    pulse_sync_step s;
    double t0 = now_ms();
    /* how long the checkpoint stood finished before this node took it (scans, the stability wait) */
    double detect = 1e3 * pulse_realtime_s() - (double)e->changed_ns / 1e6;
    /* SIGTERM waits for the publish: an interrupted store call would only fail the step. */
    node_signals_hold(1);
    int r = pulse_publisher_publish(t->pub, path, (int64_t)e->step, flags, &s);
    node_signals_hold(0);
    if (r) {
        log_error("publish", e->name, r);
        t->m.publish_failures++;
        show_metrics(t);
        /* The store or the machine failing is not the checkpoint's fault: try it again next
         * poll, and publish nothing after it meanwhile (that would leave it behind for good). */
        if (is_transient(r)) {
            t->transient = r;
            return 1;
        }
        return 0;
    }
    char ms[24], moved[24], objb[24], dense[24], hex[65];
    snprintf(ms, sizeof ms, "%.0f", now_ms() - t0);
    if (s.already) {
        snprintf(last_s, sizeof last_s, "%" PRIu64, s.step);
        node_log("skipped", "step", step_s, "file", e->name, "reason", "state already published", "last", last_s,
                 "state", pulse_id_hex(s.result, hex), (char *)NULL);
        return t->committer ? commit_step(t, e) : 0;
    }
    snprintf(moved, sizeof moved, "%" PRIu64, s.moved_bytes);
    snprintf(objb, sizeof objb, "%" PRIu64, s.object_bytes);
    snprintf(dense, sizeof dense, "%" PRIu64, s.dense_bytes);
    const char *kind = pulse_record_kind_name(s.kind);
    if (s.kind == PULSE_RECORD_SYNC_PATCH && (flags & PULSE_PUBLISH_KEYFRAME))
        kind = "sync-patch+keyframe";
    const publish_phases *ph = publisher_phases(t->pub);
    char pm[6][24];
    const double pv[6] = { detect > 0 ? detect : 0, ph->state_id, ph->diff, ph->upload, ph->record, ph->keep };
    for (int i = 0; i < 6; i++)
        snprintf(pm[i], sizeof pm[i], "%.1f", pv[i]);
    node_log("published", "step", step_s, "kind", kind, "bytes", moved, "objects", objb, "dense", dense, "ms", ms,
             "detect_ms", pm[0], "state_id_ms", pm[1], "diff_ms", pm[2], "upload_ms", pm[3], "record_ms", pm[4],
             "keep_ms", pm[5], "file", e->name, "state", pulse_id_hex(s.result, hex), "record", s.record_key,
             (char *)NULL);
    t->have_last = 1;
    t->last_step = s.step;
    t->m.steps_published++;
    t->m.have_published = 1;
    t->m.published_step = s.step;
    node_phase_hist_add(&t->m.phases, pv);
    show_metrics(t);
    if (!t->o->pub.parts)
        retain(t);
    return t->committer ? commit_step(t, e) : 0;
}

int node_trainer_run(const node_trainer_opts *o)
{
    trainer t = { .o = o, .m = { .trainer = 1 } };
    static const char *const phase_names[] = { "detect", "state_id", "diff", "upload", "record", "keep" };
    node_phase_hist_init(&t.m.phases, phase_names, sizeof phase_names / sizeof *phase_names);
    watch_set prev = { 0 }, cur = { 0 };
    watch_notify notify = { .fd = -1 };
    watch_rules rules = { .pattern = o->pattern };
    handled_set done = { { 0 } };
    pulse_secret_key *key = NULL;
    pulse_index *ix = NULL;

    int r = o->metrics_addr ? node_metrics_listen(&t.srv, o->metrics_addr) : 0;
    if (!r)
        r = pulse_publisher_open(&t.pub, &o->pub);
    char run[PULSE_RECORD_MAX_RUN + 1];   /* the run this node's own records are of (a part's) */
    snprintf(run, sizeof run, "%s", o->pub.run);
    if (!r && o->pub.parts)
        r = pulse_layout_part_run(run, sizeof run, o->pub.run, o->pub.part, o->pub.parts);
    if (!r && o->commit) {
        pulse_publish_opts c = o->pub;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/commit", o->pub.state_dir);
        c.state_dir = dir;
        c.part = c.parts = 0;
        r = pulse_publisher_open(&t.committer, &c);
    }
    if (!r)
        r = pulse_key_load_secret(o->pub.key_path, &key);
    if (!r) {
        pulse_key_public(key, t.node);
        pulse_key_free(&key);
        r = pulse_store_open(&t.st, o->pub.store_url, NULL);
    }
    if (!r) {
        /* The last published step, so older checkpoints left in the directory are skipped. */
        char path[4096];
        uint8_t state[32];
        snprintf(path, sizeof path, "%s/index.db", o->pub.state_dir);
        r = pulse_index_open(&ix, path);
        int h = r ? r : pulse_index_head(ix, run, &t.last_step, state);
        if (!r && h == 0)
            t.have_last = 1;
        else if (!r && h != PULSE_ERR_NOTFOUND)
            r = h;
        pulse_index_close(&ix);
    }
    if (r)
        goto out;
    t.m.have_published = t.have_last;
    t.m.published_step = t.last_step;
    show_metrics(&t);
    char node_hex[PULSE_NODE_ID_HEX], last_s[24];
    pulse_node_id_hex(t.node, node_hex);
    snprintf(last_s, sizeof last_s, "%" PRIu64, t.last_step);
    /* Names renamed into the directory from "started" on count as whole when they appear
     * (watch_notify); after it, the first scan logs the names it ignores. */
    watch_notify_open(&notify, o->watch_dir);
    node_log("started", "role", "trainer", "node", node_hex, "run", o->pub.run, "watch", o->watch_dir, "last",
             t.have_last ? last_s : "none", (char *)NULL);
    if ((r = watch_scan(o->watch_dir, &rules, NULL, NULL, &prev)) != 0)
        goto out;

    int scans = 1;
    double prev_at = now_ms();
    while (!node_stop_requested()) {
        if (watch_notify_wait(&notify, o->poll_ms) < 0)
            break;
        /* A scan woken by a change may come right after the last: "unchanged between two scans"
         * then compares with a scan at least a poll old, never a moment ago (a file written in
         * place may stand still for a moment). Names renamed in need no comparison. */
        int timed = now_ms() - prev_at >= o->poll_ms;
        int s = watch_scan(o->watch_dir, &rules, timed ? &prev : NULL, &notify, &cur);
        watch_notify_clear(&notify);
        if (s) {
            /* The directory may come back (remounted, recreated): log and poll again. */
            log_error("scan", o->watch_dir, s);
            if (o->once)
                break;
            continue;
        }
        scans += timed;   /* --once: two scans a poll apart, however many changes woke it between */
        for (size_t i = 0; i < cur.n && !node_stop_requested(); i++) {
            watch_entry *e = &cur.e[i];
            if (handled_find(&done, e))
                continue;
            if (!e->stable && t.have_last && e->step <= t.last_step)
                continue;   /* behind the last published step: skipped once whole, blocks nothing */
            if (!e->stable)
                break;   /* in step order: a later checkpoint waits for this one to be whole */
            if (publish_entry(&t, e))
                break;
            if ((s = handled_add(&done, e)) != 0) {
                r = s;
                goto out;
            }
        }
        if (timed) {
            handled_prune(&done, &cur);
            watch_set tmp = prev;
            prev = cur;
            cur = tmp;
            prev_at = now_ms();
        }
        if (o->once && scans >= 2) {
            r = t.transient;   /* --once: a step left unpublished is a failure of the run */
            break;
        }
        t.transient = 0;
    }
    if (pulse_publisher_sync(t.pub) != 0)
        node_log("sync-failed", "reason", pulse_last_error(), (char *)NULL);
    node_log("stopped", "role", "trainer", "node", node_hex, (char *)NULL);
out:
    node_metrics_close(&t.srv);
    watch_notify_close(&notify);
    watch_set_clear(&prev);
    watch_set_clear(&cur);
    watch_set_clear(&done.s);
    watch_rules_clear(&rules);
    pulse_store_close(&t.st);
    pulse_publisher_close(&t.pub);
    pulse_publisher_close(&t.committer);
    return r;
}
