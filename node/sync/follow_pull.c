/* SPDX-License-Identifier: Apache-2.0 */
/* A pull: from the held state, the chain of verified steps or the keyframe path, whichever is cheaper, and what it skipped. */
#include <stdlib.h>
#include "base/fail.h"
#include "manifest/layout.h"
#include "node/sync/follower.h"

/* Bounds the requests of one pull or poll (a trickling or stalling store cannot hold the
 * follower past it); cleared when it ends, so the node's idle time is not counted. */
static void deadline_begin(pulse_follower *f)
{
    if (f->o.deadline_s > 0)
        pulse_store_set_deadline(f->st, pulse_monotonic_s() + f->o.deadline_s);
}

static void deadline_end(pulse_follower *f)
{
    if (f->o.deadline_s <= 0)
        return;
    char saved[1024];   /* the pull's own error detail outlives the reset */
    snprintf(saved, sizeof saved, "%s", pulse_last_error());
    pulse_store_set_deadline(f->st, 0);
    pulse_fail(0, "%s", saved);
}

static int try_next(pulse_follower *f, const char *rel, const uint8_t *have, size_t have_len, int *applied);
static int pull_listed(pulse_follower *f, size_t *applied, pulse_sync_step *held_out);

int follower_try_next(pulse_follower *f, const char *rel, const uint8_t *record, size_t record_len, double seen_ms,
               int *applied)
{
    deadline_begin(f);
    f->seen_ms = seen_ms;
    int r = try_next(f, rel, record, record_len, applied);
    f->seen_ms = 0;
    deadline_end(f);
    return r;
}

static int try_next(pulse_follower *f, const char *rel, const uint8_t *have, size_t have_len, int *applied)
{
    *applied = 0;
    listed e;
    if (!f->known || !f->have || parse_rel(f->o.trust, rel, &e) != 0 || e.kind != PULSE_RECORD_SYNC_PATCH ||
        e.step <= f->step)
        return 0;
    pulse_record rec;
    uint8_t *bytes = NULL;
    size_t len = 0;
    uint64_t moved = 0;
    int r = fetch_record(f, rel, have, have_len, &rec, &bytes, &len, &moved);
    f->c.bytes_fetched += moved;
    if (r == PULSE_ERR_NOTFOUND) {
        pulse_store_free(bytes);
        return 0;
    }
    if (r) {
        char why[256];
        snprintf(why, sizeof why, "%s", pulse_last_error());
        r = fail_step(r, e.step, rel);
        if (is_verdict(r)) {
            refuse_record(f, rel, bytes, len, NULL, why);
            flush_refusals(f);
        } else if (f->log) {
            follow_log(f, "fetch-failed", "record", rel, "reason", pulse_last_error(), NULL);
        }
        pulse_store_free(bytes);
        return r;
    }
    if (rec.step > f->step && !memcmp(rec.base, f->state, 32)) {
        r = apply_listed(f, rel, &rec, bytes, len, moved);
        *applied = !r;
    }
    pulse_record_clear(&rec);
    pulse_store_free(bytes);
    return r;
}

/* Follows patches chained from (step, state) through the listing: indices into l->v in
 * *path (capacity l->n), their count *n, the bytes of their objects and the step reached.
 * A refused record is skipped (another record may still chain on); a record that could not be
 * fetched (store, network) ends the walk there, its index in *stuck. */
static void walk_chain(pulse_follower *f, listing *l, uint64_t step, const uint8_t state[32], size_t *path,
                       size_t *n, uint64_t *bytes, uint64_t *end, size_t *stuck)
{
    uint8_t cur[32];
    memcpy(cur, state, 32);
    *n = 0;
    *end = step;
    for (size_t i = 0; i < l->n; i++) {
        listed *e = &l->v[i];
        if (e->kind != PULSE_RECORD_SYNC_PATCH || e->step <= *end)
            continue;
        int r = get_listed(f, e);
        if (r && (is_verdict(r) || r == PULSE_ERR_NOTFOUND))
            continue;
        if (r) {
            if (*stuck == SIZE_MAX)
                *stuck = i;
            return;
        }
        if (memcmp(e->rec.base, cur, 32) != 0)
            continue;   /* a gap or another branch; the chain may go on at a later step */
        path[(*n)++] = i;
        for (uint32_t k = 0; k < e->rec.n_objects; k++)
            *bytes += e->rec.objects[k].size;
        memcpy(cur, e->rec.result, 32);
        *end = e->step;
    }
}

/* The newest listed record that verifies (fetched from the newest down; those fetched already
 * are not fetched again): 1 and its index, 0 when none does, -1 when a fetch failed first. */
static int newest_verified(pulse_follower *f, listing *l, size_t *at)
{
    for (size_t i = l->n; i-- > 0;) {
        int r = get_listed(f, &l->v[i]);
        if (!r) {
            *at = i;
            return 1;
        }
        if (!is_verdict(r) && r != PULSE_ERR_NOTFOUND) {
            *at = i;
            return -1;
        }
    }
    pulse_clear_error();
    return 0;
}

/* A follower node derives its staleness bound from the publication times of the run's newest
 * records (node/sync/cadence.h); one that starts at the head has seen too few of them, so a few
 * more of the newest listed records are read, once (best effort: a failure only ends it). */
static void seed_cadence(pulse_follower *f, listing *l)
{
    for (size_t i = l->n, tries = 0; i-- > 0 && f->c.cadence.n < CADENCE_MIN_RECORDS && tries < 2 * CADENCE_MIN_RECORDS;) {
        if (l->v[i].kind != PULSE_RECORD_SYNC_PATCH)
            continue;
        tries++;
        int r = get_listed(f, &l->v[i]);
        if (r && !is_verdict(r) && r != PULSE_ERR_NOTFOUND)
            break;
    }
    pulse_clear_error();
}

/* A store whose newest verified record is older than the state held (an old snapshot, a
 * restored bucket, a replica behind): nothing of it is applied; said once when it starts. */
static void store_behind(pulse_follower *f, int behind, uint64_t newest, int have_newest)
{
    if (behind == f->c.store_behind)
        return;
    f->c.store_behind = behind;
    f->behind_newest = have_newest ? newest : UINT64_MAX;
    if (!f->log)
        return;
    char h[24], nw[24];
    u64s(h, sizeof h, f->step);
    u64s(nw, sizeof nw, newest);
    if (behind)
        follow_log(f, "store-behind", "held", h, "newest", have_newest ? nw : "none", NULL);
    else
        follow_log(f, "store-caught-up", "held", h, "newest", nw, NULL);
}

/* The pull could not reach NEWEST from REACHED: the first record after REACHED that was refused
 * or does not follow from the state reached is named, with its reason. */
static int chain_stuck(pulse_follower *f, listing *l, uint64_t reached, uint64_t newest)
{
    for (size_t i = 0; i < l->n; i++) {
        listed *e = &l->v[i];
        if (e->kind != PULSE_RECORD_SYNC_PATCH || e->step <= reached || e->step > newest || !e->fetched)
            continue;
        if (!e->ok)
            return pulse_fail(e->err, "%s", e->why);
        pulse_fail(PULSE_ERR_MISMATCH, "its base is not the state these weights hold (step %" PRIu64 ")", reached);
        int r = fail_step(PULSE_ERR_MISMATCH, e->step, e->rel);
        refuse_step(f, r, e->rel);
        return r;
    }
    char nw[24];
    u64s(nw, sizeof nw, newest);
    return pulse_fail(PULSE_ERR_MISMATCH, "run %s: no verified path from step %" PRIu64 " to step %s", f->run,
                      reached, nw);
}

PULSE_API int pulse_follower_pull(pulse_follower *f, size_t *applied, pulse_sync_step *held_out)
{
    deadline_begin(f);
    int r = pull_listed(f, applied, held_out);
    deadline_end(f);
    return r;
}

/* Weights to start and no trusted keyframe: says which of the usual mistakes it looks like
 * (a wrong store URL, prefix or run; the wrong --trust; a run with no keyframe yet). */
static int nothing_to_start(pulse_follower *f, const listing *l)
{
    const char *url = f->o.store_url;
    size_t ul = strlen(url);
    const char *sep = ul && url[ul - 1] == '/' ? "" : "/";
    if (l->n)
        return pulse_fail(PULSE_ERR_NOTFOUND, "run %s has no keyframe from a trusted key to start from "
                          "(%zu records of trusted keys listed, none a keyframe that verifies)", f->run, l->n);
    if (l->nothers) {
        char found[8 * 18 + 8] = "";
        size_t used = 0;
        for (size_t i = 0; i < l->nothers; i++) {
            char hex[65];
            pulse_id_hex(l->others[i], hex);
            used += (size_t)snprintf(found + used, sizeof found - used, "%s%.16s", i ? ", " : "", hex);
        }
        return pulse_fail(PULSE_ERR_NOTFOUND, "records exist under %s%s%s/ but none signed by a trusted key (found: %s%s)",
                          url, sep, f->run, found, l->nothers == sizeof l->others / sizeof l->others[0] ? ", ..." : "");
    }
    if (l->keys)
        return pulse_fail(PULSE_ERR_NOTFOUND, "no records under %s%s%s/: %zu keys under records/, none a record key",
                          url, sep, f->run, l->keys);
    return pulse_fail(PULSE_ERR_NOTFOUND, "no records under %s%s%s/ (check the store URL, its prefix and the run name)",
                      url, sep, f->run);
}

/* The reason of a refused listed record, without the "step N: KEY: " its detail starts with. */
static const char *listed_reason(const listed *e)
{
    char pre[SYNC_KEY_MAX + 48];
    int n = snprintf(pre, sizeof pre, "step %" PRIu64 ": %s: ", e->step, e->rel);
    return n > 0 && !strncmp(e->why, pre, (size_t)n) ? e->why + n : e->why;
}

/* pulse pull, once it succeeded (a failure is its one error line): what this pull skipped,
 * whether judged now or in an earlier pull (the node logs a refusal once; a one-shot pull says it
 * every time), one line per key, the first 16 of each kind, then a count; and a store behind. */
static void say_skipped(pulse_follower *f, const listing *l)
{
    char n[24];
    if (f->c.store_behind && f->have) {
        char h[24];
        u64s(h, sizeof h, f->step);
        u64s(n, sizeof n, f->behind_newest);
        follow_log(f, "store-behind", "held", h, "newest", f->behind_newest == UINT64_MAX ? "none" : n, NULL);
    }
    size_t refused = 0;
    for (size_t i = 0; i < l->n; i++) {
        const listed *e = &l->v[i];
        if (!e->fetched || e->ok || !is_verdict(e->err))
            continue;
        if (refused++ < FOLLOW_LOG_REFUSALS)
            follow_log(f, "refused", "record", e->rel, "reason", listed_reason(e), NULL);
    }
    if (refused > FOLLOW_LOG_REFUSALS) {
        u64s(n, sizeof n, refused - FOLLOW_LOG_REFUSALS);
        follow_log(f, "refused-more", "count", n, NULL);
    }
    for (size_t i = 0; i < l->junk && i < FOLLOW_LOG_REFUSALS; i++)
        follow_log(f, "ignored", "key", l->junk_keys[i] ? l->junk_keys[i] : "?", "reason", "not a record key", NULL);
    if (l->junk > FOLLOW_LOG_REFUSALS) {
        u64s(n, sizeof n, l->junk - FOLLOW_LOG_REFUSALS);
        follow_log(f, "ignored-more", "count", n, NULL);
    }
}

static int pull_listed(pulse_follower *f, size_t *applied, pulse_sync_step *held_out)
{
    pulse_clear_error();
    /* a check that failed makes the weights unknown: this pull then hashes them */
    if (follower_settle_check(f, 0) != 0)
        pulse_clear_error();
    listing l = { 0 };
    uint64_t before = f->c.steps_applied;
    f->stopped = 0;
    int r = f->recovered ? 0 : follower_recover(f, NULL);
    if (!r)
        r = list_records(f, &l);
    if (!r && !f->known)
        r = held_state(f, &l);
    size_t *chain = NULL, *kpath = NULL;
    if (!r && l.n && (!(chain = calloc(l.n, sizeof *chain)) || !(kpath = calloc(l.n, sizeof *kpath))))
        r = pulse_fail(PULSE_ERR_NOMEM, "record listing");
    size_t stuck = SIZE_MAX;
    if (!r && l.n) {
        /* The patch chain from the held state (it fetches every newer sync-patch record). */
        uint64_t chain_bytes = 0, chain_end = 0;
        size_t nchain = 0;
        if (f->have)
            walk_chain(f, &l, f->step, f->state, chain, &nchain, &chain_bytes, &chain_end, &stuck);
        /* Lag, catch-up and freshness go by the newest record that verifies, never by a key
         * name: junk at step 10^12 moves nothing. */
        size_t nv = 0;
        int have_newest = stuck == SIZE_MAX ? newest_verified(f, &l, &nv) : -1;
        if (have_newest < 0 && stuck == SIZE_MAX)
            stuck = nv;
        uint64_t newest = have_newest > 0 ? l.v[nv].step : 0;
        if (have_newest > 0 && f->log && !f->cadence_seeded) {
            seed_cadence(f, &l);
            f->cadence_seeded = 1;
        }
        if (f->have && have_newest >= 0)
            store_behind(f, have_newest == 0 || newest < f->step, newest, have_newest > 0);
        int ahead = have_newest > 0 && (!f->have || newest > f->step);
        int behind_far = !f->have || (ahead && (newest - f->step > f->max_behind || chain_end < newest));
        /* The newest keyframe that verifies and the chain after it. */
        size_t nk = 0, kf = 0;
        int have_kf = 0;
        uint64_t kf_bytes = 0, kf_end = 0;
        for (size_t i = l.n; stuck == SIZE_MAX && behind_far && i-- > 0;) {
            listed *e = &l.v[i];
            if (e->kind != PULSE_RECORD_KEYFRAME || (f->have && e->step <= f->step))
                continue;
            int g = get_listed(f, e);
            if (g && (is_verdict(g) || g == PULSE_ERR_NOTFOUND))
                continue;   /* refused: an older keyframe may do */
            if (g) {
                stuck = i;
                break;
            }
            kf = i;
            have_kf = 1;
            for (uint32_t k = 0; k < e->rec.n_objects; k++)
                kf_bytes += e->rec.objects[k].size;
            walk_chain(f, &l, e->step, e->rec.result, kpath, &nk, &kf_bytes, &kf_end, &stuck);
            break;
        }
        int use_kf = have_kf && (!f->have || kf_end > chain_end || (kf_end == chain_end && kf_bytes < chain_bytes));
        if (f->log && behind_far && (ahead || !f->have) && stuck == SIZE_MAX) {
            char b1[24], b2[24], b3[24], b4[24];
            u64s(b1, sizeof b1, f->have ? newest - f->step : newest + 1);
            u64s(b2, sizeof b2, chain_bytes);
            u64s(b3, sizeof b3, have_kf ? kf_bytes : 0);
            u64s(b4, sizeof b4, use_kf ? kf_end : chain_end);
            follow_log(f, "catch-up", "path", use_kf ? "keyframe" : "chain",
                     "reason", !f->have ? "no-weights" : chain_end < newest ? "chain-broken" : "behind",
                     "behind", b1, "chain_bytes", f->have ? b2 : "none", "keyframe_bytes", have_kf ? b3 : "none",
                     "to_step", b4, NULL);
        }
        if (!f->have && !have_kf && stuck == SIZE_MAX)
            r = nothing_to_start(f, &l);
        if (!r && use_kf) {
            listed *e = &l.v[kf];
            r = apply_listed(f, e->rel, &e->rec, e->bytes, e->len, e->len);
        }
        size_t *path = use_kf ? kpath : chain;
        size_t np = use_kf ? nk : nchain;
        for (size_t i = 0; !r && i < np; i++) {
            listed *e = &l.v[path[i]];
            r = apply_listed(f, e->rel, &e->rec, e->bytes, e->len, e->len);
        }
        /* Every verified step that could be applied was. A record that could not be fetched
         * ends the pull with its error (tried again next time); a chain that cannot reach the
         * newest verified record names the first record in the way. */
        if (!r && stuck != SIZE_MAX)
            r = pulse_fail(l.v[stuck].err ? l.v[stuck].err : PULSE_ERR_IO, "%s", l.v[stuck].why);
        else if (!r && ahead && f->have && f->step < newest)
            r = chain_stuck(f, &l, f->step, newest);
    } else if (!r && !f->have) {
        r = nothing_to_start(f, &l);
    } else if (!r && f->have) {
        store_behind(f, 1, 0, 0);   /* the store lists no record of the run at all */
    }
    flush_refusals(f);
    if (f->report && !r)
        say_skipped(f, &l);
    free(chain);
    free(kpath);
    listing_free(&l);
    if (applied)
        *applied = (size_t)(f->c.steps_applied - before);
    if (held_out) {
        memset(held_out, 0, sizeof *held_out);
        if (f->known && f->have) {
            held_out->step = f->step;
            memcpy(held_out->result, f->state, 32);
        }
    }
    return r;
}
