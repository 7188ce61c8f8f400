/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the SQLite index: schema/migrations, idempotent inserts, conflicts, queries, crash consistency. */
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "manifest/index_internal.h"
#include "pulseweights/manifest.h"
#include "tmpdir.h"

static pulse_secret_key *key;

static void state_of(uint64_t step, uint8_t out[32])
{
    for (int i = 0; i < 32; i++)
        out[i] = (uint8_t)(step * 13 + (uint64_t)i + 1);
}

/* Signed bytes of step STEP: a keyframe at 0, then patches chained state(step-1) -> state(step). */
static uint8_t *make(uint64_t step, uint32_t n_obj, uint64_t changes, size_t *len, char *key_out)
{
    pulse_record r;
    int kind = step == 0 ? PULSE_RECORD_KEYFRAME : PULSE_RECORD_SYNC_PATCH;
    CHECK_OK(pulse_record_init(&r, kind, "run1", step));
    r.time = 1764400000 + step;
    if (step)
        state_of(step - 1, r.base);
    state_of(step, r.result);
    r.changes = changes;
    for (uint32_t i = 0; i < n_obj; i++) {
        uint8_t d[32];
        memset(d, (int)(i + 1), 32);
        d[0] = (uint8_t)step;
        CHECK_OK(pulse_record_add_object(&r, d, 100 + i, step ? "patch-chunk" : "keyframe-chunk", "w", 0, 0));
    }
    uint8_t *b = NULL;
    CHECK_OK(pulse_record_sign(&r, key, &b, len));
    CHECK_OK(pulse_record_key(&r, key_out, PULSE_INDEX_MAX_KEY));
    pulse_record_clear(&r);
    return b;
}

static long long sql_count(const char *db_path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

static int sql_text_is(const char *db_path, const char *sql, const char *want)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    int ok = 0;
    if (sqlite3_open(db_path, &db) == SQLITE_OK && sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        ok = sqlite3_step(st) == SQLITE_ROW && !strcmp((const char *)sqlite3_column_text(st, 0), want);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return ok;
}

static void test_basics(const char *path)
{
    pulse_index *ix = NULL;
    CHECK_OK(pulse_index_open(&ix, path));
    int v = 0;
    CHECK_OK(pulse_index_schema_version(ix, &v));
    CHECK_EQ_INT(v, PULSE_INDEX_SCHEMA_VERSION);
    CHECK(sql_text_is(path, "PRAGMA journal_mode", "wal"));

    char keys[4][PULSE_INDEX_MAX_KEY + 1];
    uint8_t *bytes[4];
    size_t lens[4];
    for (uint64_t s = 0; s < 4; s++)
        bytes[s] = make(s, 3 + (uint32_t)s, 10 * s, &lens[s], keys[s]);

    int64_t id = 0;
    int inserted = -1;
    for (int s = 0; s < 4; s++) {
        CHECK_OK(pulse_index_put_record(ix, keys[s], bytes[s], lens[s], 1000, &id, &inserted));
        CHECK_EQ_INT(inserted, 1);
    }
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM records"), 4);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM objects"), 3 + 4 + 5 + 6);

    /* Identical bytes again: a no-op that returns the same row. */
    int64_t id2 = 0;
    CHECK_OK(pulse_index_put_record(ix, keys[3], bytes[3], lens[3], 2000, &id2, &inserted));
    CHECK_EQ_INT(inserted, 0);
    CHECK_EQ_INT(id2, id);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM objects"), 18);
    CHECK_EQ_INT(sql_count(path, "SELECT seen_time FROM records WHERE step = 3"), 1000);

    /* Different bytes under the same key: refused, nothing changed. */
    char other_key[PULSE_INDEX_MAX_KEY + 1];
    size_t other_len;
    uint8_t *other = make(3, 2, 999, &other_len, other_key);
    CHECK(strcmp(other_key, keys[3]) == 0);
    CHECK_ERR(pulse_index_put_record(ix, keys[3], other, other_len, 3000, NULL, NULL), PULSE_ERR_EXISTS);
    CHECK(strstr(pulse_last_error(), keys[3]) != NULL);
    uint8_t *got = NULL;
    size_t got_len = 0;
    int verdict = 5;
    CHECK_OK(pulse_index_get_record(ix, keys[3], &got, &got_len, &verdict));
    CHECK(got_len == lens[3] && got && memcmp(got, bytes[3], got_len) == 0);
    CHECK_EQ_INT(verdict, PULSE_VERDICT_UNKNOWN);
    free(got);
    free(other);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM objects"), 18);

    /* Bytes that do not parse are never stored. */
    uint8_t junk[10] = "PLSRjunk!";
    CHECK_ERR(pulse_index_put_record(ix, "records/x", junk, sizeof junk, 1, NULL, NULL), PULSE_ERR_FORMAT);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM records"), 4);

    /* Verdicts build the chain; head follows the newest verified state. */
    uint64_t step;
    uint8_t state[32], want[32];
    CHECK_ERR(pulse_index_head(ix, "run1", &step, state), PULSE_ERR_NOTFOUND);
    for (int s = 0; s < 4; s++)
        CHECK_OK(pulse_index_mark_verified(ix, keys[s], PULSE_VERDICT_OK, NULL));
    CHECK_OK(pulse_index_head(ix, "run1", &step, state));
    state_of(3, want);
    CHECK_EQ_INT(step, 3);
    CHECK(memcmp(state, want, 32) == 0);
    CHECK_OK(pulse_index_mark_verified(ix, keys[3], PULSE_VERDICT_REFUSED, "signature does not verify"));
    CHECK_OK(pulse_index_head(ix, "run1", &step, state));
    CHECK_EQ_INT(step, 2);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM records WHERE verified = -1 AND "
                                 "reason = 'signature does not verify'"), 1);
    CHECK_ERR(pulse_index_mark_verified(ix, "records/none", PULSE_VERDICT_OK, NULL), PULSE_ERR_NOTFOUND);
    CHECK_ERR(pulse_index_head(ix, "other-run", &step, state), PULSE_ERR_NOTFOUND);

    pulse_index_link *links = NULL;
    size_t n = 0;
    CHECK_OK(pulse_index_chain(ix, "run1", 0, &links, &n));
    CHECK_EQ_INT(n, 3);
    int chained = n == 3;
    for (size_t i = 0; chained && i < n; i++) {
        uint8_t b[32] = { 0 }, res[32];
        if (i)
            state_of(i - 1, b);
        state_of(i, res);
        chained = links[i].step == i && !memcmp(links[i].base, b, 32) && !memcmp(links[i].result, res, 32) &&
                  !strcmp(links[i].key, keys[i]) &&
                  links[i].kind == (i ? PULSE_RECORD_SYNC_PATCH : PULSE_RECORD_KEYFRAME);
    }
    CHECK(chained);
    free(links);
    CHECK_OK(pulse_index_chain(ix, "run1", 2, &links, &n));
    CHECK(n == 1 && links[0].step == 2);
    free(links);

    /* Applied journal. */
    pulse_index_applied ap;
    CHECK_ERR(pulse_index_last_applied(ix, "run1", &ap), PULSE_ERR_NOTFOUND);
    state_of(1, want);
    CHECK_OK(pulse_index_mark_applied(ix, "run1", 1, want, 5000, "/srv/w.safetensors"));
    state_of(2, want);
    CHECK_OK(pulse_index_mark_applied(ix, "run1", 2, want, 5001, "/srv/w.safetensors"));
    CHECK_OK(pulse_index_last_applied(ix, "run1", &ap));
    CHECK(ap.step == 2 && ap.time == 5001 && !memcmp(ap.state, want, 32) && !strcmp(ap.path, "/srv/w.safetensors"));

    /* Trusted keys. */
    pulse_public_key pk = { .comment = "trainer" };
    pulse_key_public(key, pk.key);
    CHECK_OK(pulse_index_trust_key(ix, &pk, 1));
    CHECK_OK(pulse_index_trust_key(ix, &pk, 2));
    pulse_trust *t = NULL;
    CHECK_OK(pulse_trust_new(&t));
    CHECK_OK(pulse_index_load_trusted(ix, t));
    CHECK_EQ_INT(pulse_trust_count(t), 1);
    CHECK(pulse_trust_find(t, pk.key) != NULL);
    pulse_trust_free(&t);
    pulse_index_close(&ix);
    CHECK(ix == NULL);

    /* Reopen: same schema version, same data, no second migration. */
    CHECK_OK(pulse_index_open(&ix, path));
    CHECK_OK(pulse_index_schema_version(ix, &v));
    CHECK_EQ_INT(v, PULSE_INDEX_SCHEMA_VERSION);
    CHECK_OK(pulse_index_head(ix, "run1", &step, state));
    CHECK_EQ_INT(step, 2);
    pulse_index_close(&ix);
    CHECK_EQ_INT(sql_count(path, "PRAGMA user_version"), PULSE_INDEX_SCHEMA_VERSION);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'"), 1);
    for (int s = 0; s < 4; s++)
        free(bytes[s]);
}

static void test_versions(void)
{
    char path[512];
    test_path(path, sizeof path, "future.db");
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    pulse_index *ix = NULL;
    CHECK_ERR(pulse_index_open(&ix, path), PULSE_ERR_UNSUPPORTED);
    CHECK(strstr(pulse_last_error(), "v99") != NULL);
    CHECK(ix == NULL);

    /* Not a database at all. */
    test_path(path, sizeof path, "junk.db");
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("this is not an SQLite database, not even close, and it is long enough to have a header\n", f);
        fclose(f);
    }
    CHECK_ERR(pulse_index_open(&ix, path), PULSE_ERR_CORRUPT);
    CHECK(strstr(pulse_last_error(), "junk.db") != NULL);
}

/* The child stops inside the transaction, between the records row and its objects rows. */
static int hook_fd = -1;
/* Refusals: one row per key, replaced when the bytes change; no record row, no bytes. */
static void test_refusals(void)
{
    char path[512];
    test_path(path, sizeof path, "refusals.db");
    pulse_index *ix = NULL;
    CHECK_OK(pulse_index_open(&ix, path));
    pulse_index_refusal v[2], got;
    memset(v, 0, sizeof v);
    snprintf(v[0].key, sizeof v[0].key, "r/records/sync-patch/000000000007/%064d", 0);
    snprintf(v[1].key, sizeof v[1].key, "r/records/sync-patch/000000000008/%064d", 0);
    for (int i = 0; i < 2; i++) {
        v[i].size = 10 + (uint64_t)i;
        snprintf(v[i].etag, sizeof v[i].etag, "etag%d", i);
        memset(v[i].digest, i + 1, 32);
        memset(v[i].trust, 9, 32);
        snprintf(v[i].reason, sizeof v[i].reason, "reason %d", i);
        v[i].time = 100;
    }
    CHECK_OK(pulse_index_put_refusals(ix, v, 2));
    CHECK_OK(pulse_index_get_refusal(ix, v[1].key, &got));
    CHECK_EQ_INT(got.size, 11);
    CHECK(!strcmp(got.etag, "etag1") && !strcmp(got.reason, "reason 1") && !memcmp(got.digest, v[1].digest, 32));
    v[1].size = 12;
    memset(v[1].digest, 7, 32);
    CHECK_OK(pulse_index_put_refusals(ix, &v[1], 1));
    CHECK_OK(pulse_index_get_refusal(ix, v[1].key, &got));
    CHECK_EQ_INT(got.size, 12);
    CHECK(!memcmp(got.digest, v[1].digest, 32));
    CHECK_ERR(pulse_index_get_refusal(ix, "r/records/none", &got), PULSE_ERR_NOTFOUND);
    pulse_index_close(&ix);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM refusals"), 2);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM records"), 0);
}

static void stop_here(const char *point)
{
    if (strcmp(point, "put-record:after-record-row") != 0)
        return;
    if (write(hook_fd, "x", 1) != 1)
        _exit(3);
    for (;;)
        pause();
}

static void test_crash(void)
{
    char path[512];
    test_path(path, sizeof path, "crash.db");
    char k0[PULSE_INDEX_MAX_KEY + 1], k1[PULSE_INDEX_MAX_KEY + 1];
    size_t l0, l1;
    uint8_t *b0 = make(0, 4, 0, &l0, k0), *b1 = make(1, 200, 7, &l1, k1);

    pulse_index *ix = NULL;
    CHECK_OK(pulse_index_open(&ix, path));
    CHECK_OK(pulse_index_put_record(ix, k0, b0, l0, 1, NULL, NULL));
    pulse_index_close(&ix);   /* no SQLite handle may cross fork() */

    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        hook_fd = fds[1];
        pulse_index_test_hook = stop_here;
        pulse_index *cix = NULL;
        if (pulse_index_open(&cix, path) != 0)
            _exit(2);
        pulse_index_put_record(cix, k1, b1, l1, 2, NULL, NULL);
        _exit(4);   /* the hook never returns */
    }
    close(fds[1]);
    char c = 0;
    CHECK(read(fds[0], &c, 1) == 1 && c == 'x');   /* the child is inside the transaction now */
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    /* All or nothing: the half-written record is absent, the committed one whole, the file sound. */
    CHECK_OK(pulse_index_open(&ix, path));
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'"), 1);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM records"), 1);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM objects"), 4);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM records r WHERE n_objects != "
                                 "(SELECT count(*) FROM objects o WHERE o.record_id = r.id)"), 0);
    /* And the interrupted insert can simply be done again. */
    int inserted = 0;
    CHECK_OK(pulse_index_put_record(ix, k1, b1, l1, 3, NULL, &inserted));
    CHECK_EQ_INT(inserted, 1);
    CHECK_EQ_INT(sql_count(path, "SELECT count(*) FROM objects"), 204);
    pulse_index_close(&ix);
    free(b0);
    free(b1);
}

int main(void)
{
    CHECK_OK(pulse_key_generate(&key));
    char path[512];
    test_path(path, sizeof path, "index.db");
    test_basics(path);
    test_versions();
    test_refusals();
    test_crash();
    pulse_key_free(&key);
    test_tmpdir_remove();
    return check_done("test_index");
}
