/* SPDX-License-Identifier: Apache-2.0 */
/* base/durable: the directory fsynced for a path is the one that holds it, and failures name it. */
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

    unlink(file);
    CHECK(chdir("/") == 0);
    rmdir(dir);
    return check_done("test_durable");
}
