/* SPDX-License-Identifier: Apache-2.0 */
/* The per-node SQLite index: schema and migrations, transactional writes, and the chain queries. */
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "manifest/index_internal.h"
#include "pulseweights/manifest.h"

void (*pulse_index_test_hook)(const char *point);

struct pulse_index {
    sqlite3 *db;
    char *path;
};

/* Schema migrations, applied in order inside one transaction each. To change the schema append
 * { N+1, "..." } here and raise PULSE_INDEX_SCHEMA_VERSION; never edit a shipped entry, since
 * databases in the field were made by it. */
static const struct migration {
    int version;
    const char *sql;
} migrations[] = {
    { 1,
      "CREATE TABLE records ("
      "  id INTEGER PRIMARY KEY,"
      "  key TEXT NOT NULL UNIQUE,"
      "  kind TEXT NOT NULL,"
      "  run TEXT NOT NULL,"
      "  step INTEGER NOT NULL CHECK (step >= 0),"
      "  node BLOB NOT NULL CHECK (length(node) = 32),"
      "  base BLOB NOT NULL CHECK (length(base) = 32),"
      "  result BLOB NOT NULL CHECK (length(result) = 32),"
      "  bytes BLOB NOT NULL,"
      "  n_objects INTEGER NOT NULL,"
      "  verified INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (-1, 0, 1)),"
      "  reason TEXT,"
      "  seen_time INTEGER NOT NULL);"
      "CREATE INDEX records_run_step ON records (run, step);"
      "CREATE TABLE objects ("
      "  record_id INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,"
      "  ord INTEGER NOT NULL,"
      "  digest BLOB NOT NULL CHECK (length(digest) = 32),"
      "  size INTEGER NOT NULL CHECK (size > 0),"
      "  role TEXT NOT NULL,"
      "  tensor TEXT NOT NULL,"
      "  range_offset INTEGER NOT NULL,"
      "  range_length INTEGER NOT NULL,"
      "  PRIMARY KEY (record_id, ord));"
      "CREATE INDEX objects_digest ON objects (digest);"
      "CREATE TABLE states ("
      "  record_id INTEGER PRIMARY KEY REFERENCES records (id) ON DELETE CASCADE,"
      "  run TEXT NOT NULL,"
      "  step INTEGER NOT NULL,"
      "  state BLOB NOT NULL CHECK (length(state) = 32));"
      "CREATE INDEX states_run_step ON states (run, step);"
      "CREATE TABLE applied ("
      "  id INTEGER PRIMARY KEY,"
      "  run TEXT NOT NULL,"
      "  step INTEGER NOT NULL,"
      "  state BLOB NOT NULL CHECK (length(state) = 32),"
      "  time INTEGER NOT NULL,"
      "  path TEXT NOT NULL);"
      "CREATE INDEX applied_run ON applied (run, id);"
      "CREATE TABLE trusted_keys ("
      "  key BLOB PRIMARY KEY CHECK (length(key) = 32),"
      "  comment TEXT NOT NULL,"
      "  added_time INTEGER NOT NULL);" },
    /* Verdicts on records refused before they could be stored (unsigned, untrusted, replayed,
     * junk): one small row per key instead of the record's bytes, so junk in a bucket costs the
     * index a row, and the follower need not fetch the same bytes again. */
    { 2,
      "CREATE TABLE refusals ("
      "  key TEXT PRIMARY KEY,"
      "  size INTEGER NOT NULL CHECK (size >= 0),"
      "  etag TEXT NOT NULL,"
      "  digest BLOB NOT NULL CHECK (length(digest) = 32),"
      "  trust BLOB NOT NULL CHECK (length(trust) = 32),"
      "  reason TEXT NOT NULL,"
      "  time INTEGER NOT NULL) WITHOUT ROWID;" },
};
#define N_MIGRATIONS (sizeof migrations / sizeof migrations[0])
_Static_assert(N_MIGRATIONS == PULSE_INDEX_SCHEMA_VERSION, "one migration per schema version");

/* Every SQL failure names the step and SQLite's own message. */
static int sql_fail(pulse_index *ix, const char *step, int rc)
{
    int err = PULSE_ERR_IO;
    int primary = rc & 0xff;
    if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)
        err = PULSE_ERR_CORRUPT;
    else if (primary == SQLITE_NOMEM)
        err = PULSE_ERR_NOMEM;
    else if (primary == SQLITE_CONSTRAINT)
        err = PULSE_ERR_INVALID;
    /* An I/O error's cause (a full disk: SQLite says only "disk I/O error") is the OS error
     * SQLite saw last. */
    int os = ix->db && (primary == SQLITE_IOERR || primary == SQLITE_FULL) ? sqlite3_system_errno(ix->db) : 0;
    if (os)
        return pulse_fail(err, "index %s: %s: %s (%s)", ix->path, step, sqlite3_errmsg(ix->db), strerror(os));
    return pulse_fail(err, "index %s: %s: %s", ix->path, step, ix->db ? sqlite3_errmsg(ix->db) : sqlite3_errstr(rc));
}

static int exec(pulse_index *ix, const char *step, const char *sql)
{
    int rc = sqlite3_exec(ix->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : sql_fail(ix, step, rc);
}

static int prepare(pulse_index *ix, const char *step, const char *sql, sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v2(ix->db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? 0 : sql_fail(ix, step, rc);
}

/* Runs a statement that returns no rows, then finalizes it. */
static int step_done(pulse_index *ix, const char *step, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    int err = rc == SQLITE_DONE ? 0 : sql_fail(ix, step, rc);
    sqlite3_finalize(st);
    return err;
}

/* Writers take the lock up front (IMMEDIATE) so two processes never deadlock upgrading a read lock. */
static int begin(pulse_index *ix)
{
    return exec(ix, "begin transaction", "BEGIN IMMEDIATE");
}

static int commit(pulse_index *ix)
{
    return exec(ix, "commit", "COMMIT");
}

static void rollback(pulse_index *ix)
{
    if (!sqlite3_get_autocommit(ix->db))
        sqlite3_exec(ix->db, "ROLLBACK", NULL, NULL, NULL);
}

static int user_version(pulse_index *ix, int *v)
{
    sqlite3_stmt *st;
    int err = prepare(ix, "read user_version", "PRAGMA user_version", &st);
    if (err)
        return err;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *v = sqlite3_column_int(st, 0);
    else
        err = sql_fail(ix, "read user_version", rc);
    sqlite3_finalize(st);
    return err;
}

static int migrate(pulse_index *ix)
{
    int v, err = user_version(ix, &v);
    if (err)
        return err;
    if (v > PULSE_INDEX_SCHEMA_VERSION)
        return pulse_fail(PULSE_ERR_UNSUPPORTED, "index %s: schema v%d is newer than this build's v%d",
                          ix->path, v, PULSE_INDEX_SCHEMA_VERSION);
    for (size_t i = 0; i < N_MIGRATIONS; i++) {
        if (migrations[i].version <= v)
            continue;
        if ((err = begin(ix)))
            return err;
        /* Another process may have migrated while we waited for the lock: read it again inside. */
        int now;
        err = user_version(ix, &now);
        if (!err && now < migrations[i].version) {
            char set[64];
            snprintf(set, sizeof set, "PRAGMA user_version = %d", migrations[i].version);
            err = exec(ix, "schema migration", migrations[i].sql);
            if (!err)
                err = exec(ix, "set user_version", set);
        }
        if (!err)
            err = commit(ix);
        if (err) {
            rollback(ix);
            return err;
        }
        v = migrations[i].version;
    }
    return 0;
}

/* Runs a pragma that answers one text row and checks the answer. */
static int pragma_expect(pulse_index *ix, const char *sql, const char *want)
{
    sqlite3_stmt *st;
    int err = prepare(ix, sql, sql, &st);
    if (err)
        return err;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
        err = sql_fail(ix, sql, rc);
    else if (strcmp((const char *)sqlite3_column_text(st, 0), want) != 0)
        err = pulse_fail(PULSE_ERR_UNSUPPORTED, "index %s: %s answered '%s', want '%s'", ix->path, sql,
                         (const char *)sqlite3_column_text(st, 0), want);
    sqlite3_finalize(st);
    return err;
}

PULSE_API void pulse_index_close(pulse_index **ix)
{
    if (!ix || !*ix)
        return;
    sqlite3_close_v2((*ix)->db);
    free((*ix)->path);
    free(*ix);
    *ix = NULL;
}

int index_sync_each_commit(pulse_index *ix, int each_commit)
{
    return exec(ix, "set synchronous", each_commit ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
}

PULSE_API int pulse_index_open(pulse_index **out, const char *path)
{
    if (!out || !path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_open: NULL argument");
    *out = NULL;
    pulse_index *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->path = strdup(path))) {
        free(ix);
        return pulse_fail(PULSE_ERR_NOMEM, "index handle");
    }
    int rc = sqlite3_open_v2(path, &ix->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    int err = rc == SQLITE_OK ? 0 : sql_fail(ix, "open", rc);
    if (!err) {
        sqlite3_extended_result_codes(ix->db, 1);
        sqlite3_busy_timeout(ix->db, PULSE_INDEX_BUSY_TIMEOUT_MS);
        err = pragma_expect(ix, "PRAGMA journal_mode = WAL", "wal");
    }
    if (!err) err = exec(ix, "set foreign_keys", "PRAGMA foreign_keys = ON");
    if (!err) err = pragma_expect(ix, "PRAGMA foreign_keys", "1");
    /* FULL: a step journaled before apply must survive a power cut, not only a process crash. */
    if (!err) err = exec(ix, "set synchronous", "PRAGMA synchronous = FULL");
    if (!err) err = migrate(ix);
    if (err) {
        pulse_index_close(&ix);
        return err;
    }
    *out = ix;
    return 0;
}

PULSE_API int pulse_index_schema_version(pulse_index *ix, int *version)
{
    if (!ix || !version)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_schema_version: NULL argument");
    return user_version(ix, version);
}

static int check_key(const char *key)
{
    if (!key || !*key)
        return pulse_fail(PULSE_ERR_INVALID, "index: empty record key");
    if (strlen(key) > PULSE_INDEX_MAX_KEY)
        return pulse_fail(PULSE_ERR_LIMIT, "index: record key longer than %d bytes", PULSE_INDEX_MAX_KEY);
    return 0;
}

static int check_time(uint64_t t)
{
    if (t > (uint64_t)INT64_MAX)
        return pulse_fail(PULSE_ERR_LIMIT, "index: time %llu beyond SQLite's integers", (unsigned long long)t);
    return 0;
}

/* Looks KEY up: 0 and *id when present (bytes compared with BYTES when given: *same set),
 * PULSE_ERR_NOTFOUND when absent. */
static int find_record(pulse_index *ix, const char *key, const uint8_t *bytes, size_t len, int64_t *id,
                       int *same)
{
    sqlite3_stmt *st;
    int err = prepare(ix, "select record by key", "SELECT id, bytes FROM records WHERE key = ?1", &st);
    if (err)
        return err;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        if (same) {
            const void *have = sqlite3_column_blob(st, 1);
            size_t have_len = (size_t)sqlite3_column_bytes(st, 1);
            *same = have_len == len && (len == 0 || memcmp(have, bytes, len) == 0);
        }
    } else if (rc == SQLITE_DONE) {
        err = PULSE_ERR_NOTFOUND;
    } else {
        err = sql_fail(ix, "select record by key", rc);
    }
    sqlite3_finalize(st);
    return err;
}

static int insert_objects(pulse_index *ix, int64_t id, const pulse_record *r)
{
    sqlite3_stmt *st;
    int err = prepare(ix, "insert object",
                      "INSERT INTO objects (record_id, ord, digest, size, role, tensor, range_offset, range_length)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", &st);
    for (uint32_t i = 0; !err && i < r->n_objects; i++) {
        const pulse_record_object *o = &r->objects[i];
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, i);
        sqlite3_bind_blob(st, 3, o->digest, sizeof o->digest, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)o->size);
        sqlite3_bind_text(st, 5, o->role, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, o->tensor, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 7, (sqlite3_int64)o->range_offset);
        sqlite3_bind_int64(st, 8, (sqlite3_int64)o->range_length);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            err = sql_fail(ix, "insert object", rc);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return err;
}

PULSE_API int pulse_index_put_record(pulse_index *ix, const char *key, const uint8_t *bytes, size_t len,
                                     uint64_t seen_time, int64_t *record_id, int *inserted)
{
    if (!ix || !bytes)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_put_record: NULL argument");
    int err = check_key(key);
    if (!err) err = check_time(seen_time);
    if (err)
        return err;
    if (inserted)
        *inserted = 0;
    pulse_record r;
    if ((err = pulse_record_parse(bytes, len, &r)))
        return err;
    if ((err = begin(ix))) {
        pulse_record_clear(&r);
        return err;
    }
    int64_t id = 0;
    int same = 0;
    err = find_record(ix, key, bytes, len, &id, &same);
    if (err == 0) {
        /* Present: identical bytes are a harmless repeat, anything else is a conflict worth stopping on. */
        if (!same)
            err = pulse_fail(PULSE_ERR_EXISTS, "index: %s already holds a different record", key);
        rollback(ix);
        pulse_record_clear(&r);
        if (!err && record_id)
            *record_id = id;
        return err;
    }
    if (err != PULSE_ERR_NOTFOUND)
        goto fail;
    sqlite3_stmt *st;
    if ((err = prepare(ix, "insert record",
                       "INSERT INTO records (key, kind, run, step, node, base, result, bytes, n_objects, seen_time)"
                       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)", &st)))
        goto fail;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, pulse_record_kind_name(r.kind), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r.run, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)r.step);
    sqlite3_bind_blob(st, 5, r.node, sizeof r.node, SQLITE_STATIC);
    sqlite3_bind_blob(st, 6, r.base, sizeof r.base, SQLITE_STATIC);
    sqlite3_bind_blob(st, 7, r.result, sizeof r.result, SQLITE_STATIC);
    sqlite3_bind_blob(st, 8, bytes, (int)len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, r.n_objects);
    sqlite3_bind_int64(st, 10, (sqlite3_int64)seen_time);
    if ((err = step_done(ix, "insert record", st)))
        goto fail;
    id = sqlite3_last_insert_rowid(ix->db);
    if (pulse_index_test_hook)
        pulse_index_test_hook("put-record:after-record-row");
    if ((err = insert_objects(ix, id, &r)))
        goto fail;
    if ((err = commit(ix)))
        goto fail;
    pulse_record_clear(&r);
    if (record_id)
        *record_id = id;
    if (inserted)
        *inserted = 1;
    return 0;
fail:
    rollback(ix);
    pulse_record_clear(&r);
    return err;
}

PULSE_API int pulse_index_mark_verified(pulse_index *ix, const char *key, int verdict, const char *reason)
{
    if (!ix)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_mark_verified: NULL index");
    int err = check_key(key);
    if (err)
        return err;
    if (verdict < PULSE_VERDICT_REFUSED || verdict > PULSE_VERDICT_OK)
        return pulse_fail(PULSE_ERR_INVALID, "index: verdict %d unknown", verdict);
    if ((err = begin(ix)))
        return err;
    sqlite3_stmt *st;
    if ((err = prepare(ix, "update verdict", "UPDATE records SET verified = ?1, reason = ?2 WHERE key = ?3", &st)))
        goto fail;
    sqlite3_bind_int(st, 1, verdict);
    if (reason)
        sqlite3_bind_text(st, 2, reason, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, key, -1, SQLITE_STATIC);
    if ((err = step_done(ix, "update verdict", st)))
        goto fail;
    if (sqlite3_changes(ix->db) == 0) {
        err = pulse_fail(PULSE_ERR_NOTFOUND, "index: no record %s", key);
        goto fail;
    }
    /* The chain holds only verified records that produce a state; a refusal takes one out. */
    const char *sql = verdict == PULSE_VERDICT_OK
        ? "INSERT OR IGNORE INTO states (record_id, run, step, state)"
          " SELECT id, run, step, result FROM records WHERE key = ?1"
          " AND kind IN ('sync-patch', 'keyframe', 'loco-result')"
        : "DELETE FROM states WHERE record_id = (SELECT id FROM records WHERE key = ?1)";
    if ((err = prepare(ix, "update states", sql, &st)))
        goto fail;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if ((err = step_done(ix, "update states", st)) || (err = commit(ix)))
        goto fail;
    return 0;
fail:
    rollback(ix);
    return err;
}

PULSE_API int pulse_index_mark_applied(pulse_index *ix, const char *run, uint64_t step,
                                       const uint8_t state[PULSE_DIGEST_BYTES], uint64_t time,
                                       const char *local_path)
{
    if (!ix || !run || !state || !local_path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_mark_applied: NULL argument");
    if (strlen(local_path) > PULSE_INDEX_MAX_PATH)
        return pulse_fail(PULSE_ERR_LIMIT, "index: path longer than %d bytes", PULSE_INDEX_MAX_PATH);
    int err = check_time(time);
    if (!err && step > (uint64_t)INT64_MAX)
        err = pulse_fail(PULSE_ERR_LIMIT, "index: step %llu beyond SQLite's integers", (unsigned long long)step);
    if (err || (err = begin(ix)))
        return err;
    sqlite3_stmt *st;
    if (!(err = prepare(ix, "insert applied",
                        "INSERT INTO applied (run, step, state, time, path) VALUES (?1, ?2, ?3, ?4, ?5)", &st))) {
        sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)step);
        sqlite3_bind_blob(st, 3, state, PULSE_DIGEST_BYTES, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)time);
        sqlite3_bind_text(st, 5, local_path, -1, SQLITE_STATIC);
        err = step_done(ix, "insert applied", st);
    }
    if (!err)
        err = commit(ix);
    if (err)
        rollback(ix);
    return err;
}

PULSE_API int pulse_index_get_record(pulse_index *ix, const char *key, uint8_t **bytes, size_t *len, int *verdict)
{
    if (!ix || !bytes || !len)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_get_record: NULL argument");
    int err = check_key(key);
    sqlite3_stmt *st;
    if (err || (err = prepare(ix, "select record", "SELECT bytes, verified FROM records WHERE key = ?1", &st)))
        return err;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        size_t n = (size_t)sqlite3_column_bytes(st, 0);
        uint8_t *copy = malloc(n ? n : 1);
        if (!copy) {
            err = pulse_fail(PULSE_ERR_NOMEM, "record bytes");
        } else {
            if (n)
                memcpy(copy, sqlite3_column_blob(st, 0), n);
            *bytes = copy;
            *len = n;
            if (verdict)
                *verdict = sqlite3_column_int(st, 1);
        }
    } else if (rc == SQLITE_DONE) {
        err = pulse_fail(PULSE_ERR_NOTFOUND, "index: no record %s", key);
    } else {
        err = sql_fail(ix, "select record", rc);
    }
    sqlite3_finalize(st);
    return err;
}

static void copy_blob(sqlite3_stmt *st, int col, uint8_t *dst, size_t n)
{
    memset(dst, 0, n);
    if ((size_t)sqlite3_column_bytes(st, col) == n)
        memcpy(dst, sqlite3_column_blob(st, col), n);
}

PULSE_API int pulse_index_head(pulse_index *ix, const char *run, uint64_t *step, uint8_t state[PULSE_DIGEST_BYTES])
{
    if (!ix || !run || !step || !state)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_head: NULL argument");
    sqlite3_stmt *st;
    int err = prepare(ix, "select head", "SELECT step, state FROM states WHERE run = ?1"
                      " ORDER BY step DESC, record_id DESC LIMIT 1", &st);
    if (err)
        return err;
    sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *step = (uint64_t)sqlite3_column_int64(st, 0);
        copy_blob(st, 1, state, PULSE_DIGEST_BYTES);
    } else if (rc == SQLITE_DONE) {
        err = pulse_fail(PULSE_ERR_NOTFOUND, "index: run %s has no verified state", run);
    } else {
        err = sql_fail(ix, "select head", rc);
    }
    sqlite3_finalize(st);
    return err;
}

PULSE_API int pulse_index_chain(pulse_index *ix, const char *run, uint64_t from_step,
                                pulse_index_link **links, size_t *n)
{
    if (!ix || !run || !links || !n)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_chain: NULL argument");
    *links = NULL;
    *n = 0;
    if (from_step > (uint64_t)INT64_MAX)
        return 0;
    sqlite3_stmt *st;
    int err = prepare(ix, "select chain",
                      "SELECT r.step, r.kind, r.base, r.result, r.node, r.key FROM states s"
                      " JOIN records r ON r.id = s.record_id WHERE s.run = ?1 AND s.step >= ?2"
                      " ORDER BY s.step, r.id", &st);
    if (err)
        return err;
    sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)from_step);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            pulse_index_link *grown = realloc(*links, cap * sizeof *grown);
            if (!grown) {
                err = pulse_fail(PULSE_ERR_NOMEM, "index chain");
                break;
            }
            *links = grown;
        }
        pulse_index_link *l = &(*links)[(*n)++];
        l->step = (uint64_t)sqlite3_column_int64(st, 0);
        l->kind = pulse_record_kind_from_name((const char *)sqlite3_column_text(st, 1));
        copy_blob(st, 2, l->base, sizeof l->base);
        copy_blob(st, 3, l->result, sizeof l->result);
        copy_blob(st, 4, l->node, sizeof l->node);
        snprintf(l->key, sizeof l->key, "%s", (const char *)sqlite3_column_text(st, 5));
    }
    if (!err && rc != SQLITE_DONE)
        err = sql_fail(ix, "select chain", rc);
    sqlite3_finalize(st);
    if (err) {
        free(*links);
        *links = NULL;
        *n = 0;
    }
    return err;
}

PULSE_API int pulse_index_last_applied(pulse_index *ix, const char *run, pulse_index_applied *out)
{
    if (!ix || !run || !out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_last_applied: NULL argument");
    sqlite3_stmt *st;
    int err = prepare(ix, "select last applied", "SELECT step, state, time, path FROM applied WHERE run = ?1"
                      " ORDER BY id DESC LIMIT 1", &st);
    if (err)
        return err;
    sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        out->step = (uint64_t)sqlite3_column_int64(st, 0);
        copy_blob(st, 1, out->state, sizeof out->state);
        out->time = (uint64_t)sqlite3_column_int64(st, 2);
        snprintf(out->path, sizeof out->path, "%s", (const char *)sqlite3_column_text(st, 3));
    } else if (rc == SQLITE_DONE) {
        err = pulse_fail(PULSE_ERR_NOTFOUND, "index: nothing of run %s applied yet", run);
    } else {
        err = sql_fail(ix, "select last applied", rc);
    }
    sqlite3_finalize(st);
    return err;
}

PULSE_API int pulse_index_trust_key(pulse_index *ix, const pulse_public_key *key, uint64_t time)
{
    if (!ix || !key)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_trust_key: NULL argument");
    int err = check_time(time);
    if (err || (err = begin(ix)))
        return err;
    sqlite3_stmt *st;
    if (!(err = prepare(ix, "insert trusted key",
                        "INSERT INTO trusted_keys (key, comment, added_time) VALUES (?1, ?2, ?3)"
                        " ON CONFLICT (key) DO UPDATE SET comment = excluded.comment", &st))) {
        sqlite3_bind_blob(st, 1, key->key, sizeof key->key, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, key->comment, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)time);
        err = step_done(ix, "insert trusted key", st);
    }
    if (!err)
        err = commit(ix);
    if (err)
        rollback(ix);
    return err;
}

PULSE_API int pulse_index_load_trusted(pulse_index *ix, pulse_trust *t)
{
    if (!ix || !t)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_load_trusted: NULL argument");
    sqlite3_stmt *st;
    int err = prepare(ix, "select trusted keys", "SELECT key, comment FROM trusted_keys ORDER BY key", &st);
    if (err)
        return err;
    int rc = SQLITE_DONE;
    while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        pulse_public_key k;
        memset(&k, 0, sizeof k);
        if (sqlite3_column_bytes(st, 0) != PULSE_PUBLIC_KEY_BYTES) {
            err = pulse_fail(PULSE_ERR_CORRUPT, "index %s: trusted key of wrong length", ix->path);
            break;
        }
        copy_blob(st, 0, k.key, sizeof k.key);
        snprintf(k.comment, sizeof k.comment, "%s", (const char *)sqlite3_column_text(st, 1));
        err = pulse_trust_add(t, &k);
    }
    if (!err && rc != SQLITE_DONE)
        err = sql_fail(ix, "select trusted keys", rc);
    sqlite3_finalize(st);
    return err;
}

PULSE_API int pulse_index_put_refusals(pulse_index *ix, const pulse_index_refusal *v, size_t n)
{
    if (!ix || (n && !v))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_put_refusals: NULL argument");
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int err = check_key(v[i].key);
        if (!err)
            err = check_time(v[i].time);
        if (!err && v[i].size > (uint64_t)INT64_MAX)
            err = pulse_fail(PULSE_ERR_LIMIT, "index: size beyond SQLite's integers");
        if (err)
            return err;
    }
    int err = begin(ix);
    if (err)
        return err;
    sqlite3_stmt *st;
    if ((err = prepare(ix, "upsert refusal",
                       "INSERT INTO refusals (key, size, etag, digest, trust, reason, time)"
                       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (key) DO UPDATE SET"
                       " size = excluded.size, etag = excluded.etag, digest = excluded.digest,"
                       " trust = excluded.trust, reason = excluded.reason, time = excluded.time", &st))) {
        rollback(ix);
        return err;
    }
    for (size_t i = 0; !err && i < n; i++) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        sqlite3_bind_text(st, 1, v[i].key, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)v[i].size);
        sqlite3_bind_text(st, 3, v[i].etag, -1, SQLITE_STATIC);
        sqlite3_bind_blob(st, 4, v[i].digest, PULSE_DIGEST_BYTES, SQLITE_STATIC);
        sqlite3_bind_blob(st, 5, v[i].trust, PULSE_DIGEST_BYTES, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, v[i].reason, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 7, (sqlite3_int64)v[i].time);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            err = sql_fail(ix, "upsert refusal", rc);
    }
    sqlite3_finalize(st);
    if (!err)
        err = commit(ix);
    if (err)
        rollback(ix);
    return err;
}

PULSE_API int pulse_index_get_refusal(pulse_index *ix, const char *key, pulse_index_refusal *out)
{
    if (!ix || !out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_index_get_refusal: NULL argument");
    int err = check_key(key);
    sqlite3_stmt *st;
    if (err || (err = prepare(ix, "select refusal",
                              "SELECT size, etag, digest, trust, reason, time FROM refusals WHERE key = ?1", &st)))
        return err;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        memset(out, 0, sizeof *out);
        snprintf(out->key, sizeof out->key, "%s", key);
        out->size = (uint64_t)sqlite3_column_int64(st, 0);
        snprintf(out->etag, sizeof out->etag, "%s", (const char *)sqlite3_column_text(st, 1));
        copy_blob(st, 2, out->digest, sizeof out->digest);
        copy_blob(st, 3, out->trust, sizeof out->trust);
        snprintf(out->reason, sizeof out->reason, "%s", (const char *)sqlite3_column_text(st, 4));
        out->time = (uint64_t)sqlite3_column_int64(st, 5);
    } else if (rc == SQLITE_DONE) {
        err = pulse_fail(PULSE_ERR_NOTFOUND, "index: no refusal of %s", key);
    } else {
        err = sql_fail(ix, "select refusal", rc);
    }
    sqlite3_finalize(st);
    return err;
}
