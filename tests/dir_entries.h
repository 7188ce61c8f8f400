/* SPDX-License-Identifier: Apache-2.0 */
/* What a C test sees of a directory: how many entries it holds, to check that nothing was left there. */
#ifndef PULSE_TESTS_DIR_ENTRIES_H
#define PULSE_TESTS_DIR_ENTRIES_H

#include <dirent.h>
#include <string.h>

/* The entries of dir but . and .. (-1: it cannot be read). */
static inline int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

#endif
