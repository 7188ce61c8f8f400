/* SPDX-License-Identifier: Apache-2.0 */
/* What a C test sees of a directory: how many entries it holds, and their names. */
#ifndef PULSE_TESTS_DIR_ENTRIES_H
#define PULSE_TESTS_DIR_ENTRIES_H

#include <dirent.h>
#include <stdio.h>
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

/* Up to cap names in dir, . and .. and other hidden ones left out, in the order readdir gives
 * them; 0 when it cannot be read. */
static inline int dir_names(const char *dir, char names[][300], int cap)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && n < cap && (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            snprintf(names[n++], 300, "%s", e->d_name);
    if (d)
        closedir(d);
    return n;
}

#endif
