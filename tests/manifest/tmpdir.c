/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper: a fresh temporary directory per test program, removed (with its files) at the end. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tmpdir.h"

static char dir[256];

const char *test_tmpdir(void)
{
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/pulse-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return dir;
}

void test_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", test_tmpdir(), name);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

void test_tmpdir_remove(void)
{
    if (dir[0])
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
