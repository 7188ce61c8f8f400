/* SPDX-License-Identifier: Apache-2.0 */
/* base/durable: the directory fsynced for a path is the one that holds it, a replaced file is whole or untouched, and failures name what failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "check.h"

/* The call fails with PULSE_ERR_IO and its detail is "fsync of the directory DIR: ...". */
static void check_names(int r, const char *dir)
{
    char want[256];
    snprintf(want, sizeof want, "fsync of the directory %s: ", dir);
    CHECK_EQ_INT(r, PULSE_ERR_IO);
    CHECK(strncmp(pulse_last_error(), want, strlen(want)) == 0);
    if (strncmp(pulse_last_error(), want, strlen(want)) != 0)
        fprintf(stderr, "  detail: %s\n  wanted: %s...\n", pulse_last_error(), want);
}

/* The bytes of a file (at most cap), or -1. */
static long read_all(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return (long)n;
}

int main(void)
{
    char tmpl[] = "/tmp/pulse-durable-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir)
        return check_done("test_durable");
    char file[64], sub[64], path[192], deeper[128];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);

    CHECK_OK(pulse_fsync_dir(dir));
    CHECK_OK(pulse_fsync_parent(file));                 /* dir */
    CHECK_OK(pulse_fsync_parent("/name-in-the-root"));  /* "/" */
    CHECK(chdir(dir) == 0);
    CHECK_OK(pulse_fsync_parent("plain"));              /* "." */

    /* The parent is a regular file: refused, naming exactly the parent. */
    snprintf(path, sizeof path, "%s/x", file);
    check_names(pulse_fsync_parent(path), file);
    snprintf(path, sizeof path, "%s/", file);           /* a trailing slash: the name up to it */
    check_names(pulse_fsync_parent(path), file);
    snprintf(sub, sizeof sub, "%s/missing", dir);
    snprintf(path, sizeof path, "%s/deeper/name", sub);
    snprintf(deeper, sizeof deeper, "%s/deeper", sub);
    check_names(pulse_fsync_parent(path), deeper);
    check_names(pulse_fsync_dir(file), file);
    check_names(pulse_fsync_dir(sub), sub);

    /* pulse_replace_file: new and existing targets, durable or not; the temporary is gone. */
    char tmp[96], got[64];
    snprintf(tmp, sizeof tmp, "%s/plain.tmp", dir);
    for (int durable = 0; durable < 2; durable++) {
        CHECK_OK(pulse_replace_file(file, tmp, "first", 5, durable));
        CHECK(read_all(file, got, sizeof got) == 5 && !memcmp(got, "first", 5));
        CHECK_OK(pulse_replace_file(file, tmp, "second!", 7, durable));
        CHECK(read_all(file, got, sizeof got) == 7 && !memcmp(got, "second!", 7));
        CHECK(access(tmp, F_OK) != 0);
    }
    /* The temporary cannot be created: path untouched, the detail names the temporary. */
    snprintf(path, sizeof path, "%s/x.tmp", sub);
    CHECK_ERR(pulse_replace_file(file, path, "third", 5, 1), PULSE_ERR_IO);
    CHECK(strstr(pulse_last_error(), "create") && strstr(pulse_last_error(), path));
    CHECK(read_all(file, got, sizeof got) == 7 && !memcmp(got, "second!", 7));
    /* The rename fails (the target is a non-empty directory): it stays, the temporary goes. */
    char target[96], inner[128];
    snprintf(target, sizeof target, "%s/adir", dir);
    snprintf(inner, sizeof inner, "%s/keep", target);
    CHECK(mkdir(target, 0755) == 0);
    FILE *k = fopen(inner, "w");
    CHECK(k != NULL);
    if (k)
        fclose(k);
    CHECK_ERR(pulse_replace_file(target, tmp, "data", 4, 1), PULSE_ERR_IO);
    CHECK(strstr(pulse_last_error(), "rename") && strstr(pulse_last_error(), target));
    CHECK(access(tmp, F_OK) != 0 && access(inner, F_OK) == 0);
    unlink(inner);
    rmdir(target);

    unlink(file);
    CHECK(chdir("/") == 0);
    rmdir(dir);
    return check_done("test_durable");
}
