/* SPDX-License-Identifier: Apache-2.0 */
/* The follower node's loop: cheap head polls, fast path for the next step, LIST-based catch-up, hook, receipt, metrics. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fail.h"
#include "manifest/layout.h"
#include "node/daemon/follow_node.h"
#include "node/daemon/hook.h"
#include "node/daemon/log.h"
#include "node/daemon/metrics.h"
#include "node/daemon/receipt.h"
#include "node/daemon/head_watch.h"
#include "node/daemon/signals.h"
#include "node/sync/follow_internal.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"
#include "pulseweights/sync.h"


typedef struct node_follower {
    const node_follow_cfg *cfg;
    pulse_follower *f;
    pulse_store *st;               /* heads and receipts (the follower handle has its own) */
    pulse_secret_key *key;
    node_metrics_server *srv;
    uint64_t hook_failures;
    uint64_t bytes_shown;          /* pulse_bytes_fetched_total as last published (it never goes back) */
    head_watch *watch;             /* the trusted nodes' heads, polled */
    char text[NODE_METRICS_TEXT];  /* the exposition written to --metrics-file */
    node_phase_hist hist;          /* the applied steps' phases */
    char weights_abs[4096];        /* PULSE_WEIGHTS for the hook: absolute, as it may cd */
    int stale;                     /* pulse_stale as last logged */
    char failing[512];             /* the failure last logged; "" while pulls succeed */
    int hook_due;                  /* --hook-after pull: steps were applied since the hook last ran */
    char hook_pending[4200];       /* STATE/hook.pending: the due hook outlives a crash */
} node_follower;

static void u64s(char *buf, size_t cap, uint64_t v)
{
    snprintf(buf, cap, "%" PRIu64, v);
}

/* The figures as they stand (called from the loop's thread only: it reads the follow engine). */
static void collect(node_follower *n, node_metrics *m)
{
    const follow_counters *c = follower_counters(n->f);
    *m = (node_metrics){ .steps_applied = c->steps_applied, .bytes_fetched = c->bytes_fetched,
                         .verify_failures = c->verify_failures, .hook_failures = n->hook_failures,
                         .store_retries = c->store_retries, .last_step_seconds = c->last_step_seconds,
                         .store_behind = c->store_behind, .untrusted_state = c->untrusted_state,
                         .max_staleness = n->cfg->max_staleness_set ? n->cfg->max_staleness
                                                                    : cadence_bound(&c->cadence),
                         .bound_derived = !n->cfg->max_staleness_set, .phases = n->hist };
    uint8_t state[32];
    m->have_held = follower_held(n->f, &m->held_step, state) == 0;
    /* Only records that verified count here (follow.c): a forged head or a junk key at a far
     * step moves none of these figures. */
    if (c->have_newest) {
        m->newest_time = c->newest_time;
        if (!m->have_held || c->newest_step > m->held_step) {
            m->lagging = 1;
            m->lag_steps = m->have_held ? c->newest_step - m->held_step : c->newest_step + 1;
        }
    }
    /* A counter never goes back, even past a figure shown mid-step (on_progress). */
    if (m->bytes_fetched < n->bytes_shown)
        m->bytes_fetched = n->bytes_shown;
    n->bytes_shown = m->bytes_fetched;
}

static void update_metrics(node_follower *n)
{
    node_metrics m;
    collect(n, &m);
    node_metrics_publish(n->srv, &m);
    node_metrics_age(&m, (int64_t)time(NULL));
    if (m.stale != n->stale) {
        char a[24], b[24];
        u64s(a, sizeof a, (uint64_t)m.newest_age_seconds);
        u64s(b, sizeof b, m.max_staleness);
        node_log(m.stale ? "stale" : "fresh", "newest_age_s", a, "max_staleness_s", b, "bound",
                 m.bound_derived ? "cadence" : "option", NULL);
        n->stale = m.stale;
    }
    if (!n->cfg->metrics_file || node_metrics_render(&m, n->text, sizeof n->text) != 0)
        return;
    if (node_metrics_write_file(n->cfg->metrics_file, n->text) != 0)
        node_log("metrics-failed", "path", n->cfg->metrics_file, "reason", pulse_last_error(), NULL);
}

/* As a step's objects arrive (inside a pull): the bytes so far, for the HTTP server only (the
 * engine adds them to its counter when the step ends). */
static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)total;
    node_follower *n = ctx;
    if (!n->srv)
        return;
    node_metrics m;
    collect(n, &m);
    uint64_t during = follower_counters(n->f)->bytes_fetched + done;
    if (during > m.bytes_fetched)
        m.bytes_fetched = n->bytes_shown = during;
    node_metrics_publish(n->srv, &m);
}

/* The on-update command for the state STEP/RESULT; a failure is logged and counted, never
 * stops the node. */
static void run_hook(node_follower *n, uint64_t step, const uint8_t result[32])
{
    const node_follow_cfg *cfg = n->cfg;
    char st[24], hex[65], e_step[48], e_state[96], e_weights[4200], e_run[200], why[128];
    u64s(st, sizeof st, step);
    pulse_id_hex(result, hex);
    snprintf(e_step, sizeof e_step, "PULSE_STEP=%s", st);
    snprintf(e_state, sizeof e_state, "PULSE_STATE=%s", hex);
    snprintf(e_weights, sizeof e_weights, "PULSE_WEIGHTS=%s", n->weights_abs);
    snprintf(e_run, sizeof e_run, "PULSE_RUN=%s", cfg->run);
    const char *env[] = { e_step, e_state, e_weights, e_run };
    if (node_hook_run(cfg->on_update, env, 4, cfg->hook_timeout_ms ? cfg->hook_timeout_ms : 60000,
                      cfg->state_dir, why, sizeof why) != 0) {
        n->hook_failures++;
        node_log("hook-failed", "step", st, "reason", why, NULL);
    } else {
        node_log("hook", "step", st, "status", "ok", NULL);
    }
}

/* --hook-after pull: the hook of the newest state, once the pull that applied steps is over
 * (a reload endpoint reads the whole file: once per catch-up, not once per step). The marker
 * is written before the step's journal goes (on_step), so a crash between the step and its
 * hook still runs the hook at the next start. */
static void run_due_hook(node_follower *n)
{
    uint64_t step;
    uint8_t state[32];
    if (!n->hook_due || follower_held(n->f, &step, state) != 0)
        return;
    update_metrics(n);
    run_hook(n, step, state);
    n->hook_due = 0;
    unlink(n->hook_pending);
}

/* After each applied step (also one finished from the journal after a crash): the hook (or,
 * with --hook-after pull, its marker), then the receipt. Neither failing stops the node. */
static int on_step(void *ctx, const pulse_sync_step *s)
{
    node_follower *n = ctx;
    const node_follow_cfg *cfg = n->cfg;
    char st[24], hex[65];
    update_metrics(n);   /* the step shows while its hook runs */
    u64s(st, sizeof st, s->step);
    pulse_id_hex(s->result, hex);
    if (cfg->on_update && cfg->hook_after_pull) {
        if (!n->hook_due) {
            int fd = open(n->hook_pending, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (fd < 0)
                node_log("hook-failed", "step", st, "reason", "cannot write STATE/hook.pending", NULL);
            else
                close(fd);
        }
        n->hook_due = 1;
    } else if (cfg->on_update) {
        double t0 = pulse_monotonic_s();
        run_hook(n, s->step, s->result);
        follower_set_hook_ms(n->f, 1e3 * (pulse_monotonic_s() - t0));
    }
    const apply_phases *ph = follower_phases(n->f);
    if (ph->fetch > 0 || ph->apply > 0) {   /* a step applied now, not one finished from the journal */
        const double ms[] = { ph->seen, ph->fetch, ph->verify, ph->journal, ph->apply, ph->check, ph->hook, ph->index };
        node_phase_hist_add(&n->hist, ms);
    }
    if (n->key) {
        if (node_receipt_write(n->st, cfg->run, n->key, s->step, s->result, NULL) != 0)
            node_log("receipt-failed", "step", st, "reason", pulse_last_error(), NULL);
        else
            node_log("receipt", "step", st, "state", hex, NULL);
    }
    update_metrics(n);
    return node_stop_requested();   /* SIGTERM: stop after this step, which is complete */
}

/* What the newest head of trusted key H->node says, for the fast path: 1 when a catch-up (LIST)
 * is needed, 0 when it names nothing newer or the next step applied; errors are logged. */
static int head_says(node_follower *n, const head_seen *h)
{
    const char *key = h->key;
    /* The newest record's key relative to the run, and the record itself (manifest/layout.h).
     * Only a hint: the record is verified like any other, and an older step never rolls the
     * weights back. */
    char rel[600], steps[16];
    uint64_t written_ms;
    const uint8_t *carried;
    size_t carried_len;
    int kind;
    uint64_t step, held;
    uint8_t named[32], state[32];
    if (pulse_layout_parse_head_content(h->data, h->len, rel, sizeof rel, &written_ms, &carried, &carried_len) ||
        pulse_layout_parse_record(rel, &kind, &step, named) || kind == PULSE_RECORD_RECEIPT) {
        node_log("head-invalid", "key", key, NULL);
        return 0;
    }
    /* how long after the head's write this poll read it: the clocks of two machines */
    double seen = written_ms ? 1e3 * pulse_realtime_s() - (double)written_ms : 0;
    snprintf(steps, sizeof steps, "%012" PRIu64, step);
    if (follower_held(n->f, &held, state) != 0)
        return 1;
    if (step < held) {
        /* A head moved back (a restored bucket, a replay): verified records decide, so this
         * changes nothing; it is worth a line for the operator. */
        char hs[24];
        u64s(hs, sizeof hs, held);
        node_log("head-stale", "head", key, "step", steps, "held", hs, NULL);
        return 0;
    }
    if (step == held)
        return 0;
    /* The step's sync-patch record, without listing: the one the head carries, or (a head
     * naming a keyframe record, or an older head without a record) fetched by its key.
     * Applied when it chains on the held state, whatever steps lie between. */
    char prel[700];
    int applied = 0, r = 0, own = kind == PULSE_RECORD_SYNC_PATCH && carried_len;
    if (own)
        snprintf(prel, sizeof prel, "%s", rel);
    else
        r = pulse_layout_record(prel, sizeof prel, PULSE_RECORD_SYNC_PATCH, step,
                                pulse_trust_get(n->cfg->trust, h->node)->key);
    if (!r)
        r = follower_try_next(n->f, prel, own ? carried : NULL, own ? carried_len : 0, seen > 0 ? seen : 0,
                              &applied);
    if (r && !node_stop_requested())
        node_log("step-failed", "record", prel, "reason", pulse_last_error(), NULL);
    return !applied;
}

/* A failure is logged when it starts or changes, not at every poll that meets it again; its
 * end is logged once too. */
static void failure_state(node_follower *n, const char *event, int r)
{
    if (!r) {
        if (n->failing[0])
            node_log("catch-up-ok", "after", n->failing, NULL);
        n->failing[0] = '\0';
        return;
    }
    if (node_stop_requested() || !strcmp(n->failing, pulse_last_error()))
        return;
    snprintf(n->failing, sizeof n->failing, "%s", pulse_last_error());
    node_log(event, "reason", n->failing, NULL);
}

static int catch_up(node_follower *n)
{
    size_t applied = 0;
    pulse_sync_step held;
    int r = pulse_follower_pull(n->f, &applied, &held);
    failure_state(n, "catch-up-failed", r);
    run_due_hook(n);
    update_metrics(n);
    return r;
}

int node_follow_run(const node_follow_cfg *cfg)
{
    node_follower n = { .cfg = cfg };
    static const char *const phase_names[] = { "seen", "fetch", "verify", "journal", "apply", "check", "hook",
                                               "index" };
    node_phase_hist_init(&n.hist, phase_names, sizeof phase_names / sizeof *phase_names);
    pulse_follow_opts o;
    pulse_follow_opts_default(&o);
    o.store_url = cfg->store_url;
    o.run = cfg->run;
    o.trust = cfg->trust;
    o.state_dir = cfg->state_dir;
    o.weights_path = cfg->weights_path;
    o.threads = cfg->threads;
    o.durable = cfg->durable;
    o.deadline_s = (double)cfg->deadline_s;
    o.on_step = on_step;
    o.ctx = &n;
    o.on_progress = on_progress;
    o.progress_ctx = &n;
    node_signals_install();
    int r = 0;
    char cwd[2048];
    if (cfg->weights_path[0] == '/' || !getcwd(cwd, sizeof cwd))
        snprintf(n.weights_abs, sizeof n.weights_abs, "%s", cfg->weights_path);
    else
        snprintf(n.weights_abs, sizeof n.weights_abs, "%s/%s", cwd, cfg->weights_path);
    if (cfg->key_path)
        r = pulse_key_load_secret(cfg->key_path, &n.key);
    if (!r)
        r = pulse_store_open(&n.st, cfg->store_url, NULL);
    if (!r && cfg->metrics_addr)
        r = node_metrics_listen(&n.srv, cfg->metrics_addr);
    if (!r)
        r = pulse_follower_open(&n.f, &o);
    if (r) {
        node_log("start-failed", "reason", pulse_last_error(), NULL);
        goto out;
    }
    follower_configure(n.f, cfg->max_behind ? cfg->max_behind : FOLLOW_DEFAULT_MAX_BEHIND, 1, cfg->keep_untrusted);
    follower_on_event(n.f, node_log_event, NULL);
    snprintf(n.hook_pending, sizeof n.hook_pending, "%s/hook.pending", cfg->state_dir);
    if (cfg->on_update && cfg->hook_after_pull && access(n.hook_pending, F_OK) == 0)
        n.hook_due = 1;   /* the node stopped between a step and its hook */
    node_log("started", "run", cfg->run, "weights", cfg->weights_path, NULL);
    update_metrics(&n);
    /* At start: finish an interrupted step, LIST, catch up. */
    int cr = catch_up(&n);
    if (cfg->once) {
        r = node_stop_requested() ? 0 : cr;
        goto out;
    }
    /* the heads, watched from here on */
    const unsigned poll_ms = cfg->poll_ms ? cfg->poll_ms : 1000;
    if ((r = head_watch_start(&n.watch, cfg->store_url, cfg->run, cfg->trust, poll_ms)) != 0) {
        node_log("start-failed", "reason", pulse_last_error(), NULL);
        goto out;
    }
    while (!node_stop_requested()) {
        head_seen h;
        int got = head_watch_next(n.watch, poll_ms, &h);
        if (node_stop_requested()) {
            pulse_store_free(h.data);
            break;
        }
        /* A failed catch-up (store down, a bad record) is retried every poll, heads or not; so is
         * one after the last step's result check failed (the weights are hashed again). */
        int need = follower_settle_check(n.f, 0) != 0;
        if (got && !h.data)
            node_log("store-error", "key", h.key, "reason", h.error, NULL);
        else if (got)
            need = head_says(&n, &h) || need;
        pulse_store_free(h.data);
        need = need || cr != 0;
        run_due_hook(&n);   /* after the fast path's step */
        if (need && !node_stop_requested())
            cr = catch_up(&n);
        update_metrics(&n);
    }
out:
    if (n.f) {
        uint64_t step;
        uint8_t state[32];
        char st[24] = "none", hex[65] = "none";
        if (follower_held(n.f, &step, state) == 0) {
            u64s(st, sizeof st, step);
            pulse_id_hex(state, hex);
        }
        if (pulse_follower_sync(n.f) != 0)
            node_log("sync-failed", "reason", pulse_last_error(), NULL);
        update_metrics(&n);
        node_log("stopped", "step", st, "state", hex, NULL);
    }
    head_watch_stop(&n.watch);
    pulse_follower_close(&n.f);
    node_metrics_close(&n.srv);
    pulse_store_close(&n.st);
    pulse_key_free(&n.key);
    return r;
}
