/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper for follow*.sh: lists a follower index's applied rows, and verifies a receipt file. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"

/* "STEP STATE-HEX" per applied row of RUN, in the order they were appended. */
static int applied(const char *db_path, const char *run)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT step, state FROM applied WHERE run = ?1 ORDER BY id", -1, &q, NULL) != SQLITE_OK) {
        fprintf(stderr, "follow_check: %s: %s\n", db_path, db ? sqlite3_errmsg(db) : "cannot open");
        sqlite3_close(db);
        return 1;
    }
    sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW) {
        char hex[65];
        if (sqlite3_column_bytes(q, 1) != 32)
            continue;
        printf("%lld %s\n", (long long)sqlite3_column_int64(q, 0), pulse_id_hex(sqlite3_column_blob(q, 1), hex));
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    return 0;
}

/* "receipt STEP STATE-HEX" when FILE is a receipt signed by the key in PUB. */
static int receipt(const char *file, const char *pub)
{
    FILE *f = fopen(file, "rb");
    static uint8_t buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    pulse_trust *t = NULL;
    pulse_record rec;
    int r = pulse_trust_new(&t);
    if (!r)
        r = pulse_trust_load(t, pub);
    if (!r)
        r = pulse_record_verify(buf, n, t, NULL, &rec);
    pulse_trust_free(&t);
    if (r) {
        fprintf(stderr, "follow_check: %s: %s: %s\n", file, pulse_strerror(r), pulse_last_error());
        return 1;
    }
    char hex[65];
    int ok = rec.kind == PULSE_RECORD_RECEIPT;
    if (ok)
        printf("receipt %llu %s\n", (unsigned long long)rec.step, pulse_id_hex(rec.result, hex));
    pulse_record_clear(&rec);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "applied"))
        return applied(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "receipt"))
        return receipt(argv[2], argv[3]);
    fprintf(stderr, "usage: follow_check applied INDEX.db RUN | follow_check receipt FILE PUB\n");
    return 2;
}
