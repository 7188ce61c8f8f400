/* SPDX-License-Identifier: Apache-2.0 */
/* The follower's note of weights written since their last sync, with the boot id that wrote them. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "node/daemon/unsynced.h"

#define UNSYNCED_MAGIC "pulse-unsynced 1 boot "

static int note_path(const char *dir, const char *suffix, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/unsynced%s", dir, suffix);
    if (n < 0 || (size_t)n >= cap)
        return pulse_fail(PULSE_ERR_LIMIT, "state directory path too long: %s", dir);
    return 0;
}

/* One line of at most UNSYNCED_BOOT_MAX - 1 characters from path, without its newline. */
static int read_line(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(out, (int)cap, f) != NULL;
    fclose(f);
    if (!ok)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

int unsynced_boot_id(char boot[UNSYNCED_BOOT_MAX])
{
    if (read_line("/proc/sys/kernel/random/boot_id", boot, UNSYNCED_BOOT_MAX) != 0 || !boot[0])
        return pulse_fail(PULSE_ERR_NOTFOUND, "no boot id (/proc/sys/kernel/random/boot_id)");
    return 0;
}

int unsynced_mark(const char *dir, const char *boot)
{
    char path[4096], tmp[4200], text[UNSYNCED_BOOT_MAX + 64];
    int r = note_path(dir, "", path, sizeof path);
    if (!r)
        r = note_path(dir, ".tmp", tmp, sizeof tmp);
    if (r)
        return r;
    int n = snprintf(text, sizeof text, "%s%s\n", UNSYNCED_MAGIC, boot);
    return pulse_replace_file(path, tmp, text, (size_t)n, 1);
}

int unsynced_read(const char *dir, char boot[UNSYNCED_BOOT_MAX], int *found)
{
    char path[4096], line[UNSYNCED_BOOT_MAX + 64];
    *found = 0;
    int r = note_path(dir, "", path, sizeof path);
    if (r)
        return r;
    if (access(path, F_OK) != 0) {
        if (errno == ENOENT)
            return 0;
        return pulse_fail_errno(PULSE_ERR_IO, "%s", path);
    }
    *found = 1;
    size_t m = strlen(UNSYNCED_MAGIC);
    if (read_line(path, line, sizeof line) != 0 || strncmp(line, UNSYNCED_MAGIC, m) != 0 || !line[m]
        || strlen(line + m) >= UNSYNCED_BOOT_MAX)
        snprintf(boot, UNSYNCED_BOOT_MAX, "?");
    else
        snprintf(boot, UNSYNCED_BOOT_MAX, "%s", line + m);
    return 0;
}

int unsynced_clear(const char *dir)
{
    char path[4096];
    int r = note_path(dir, "", path, sizeof path);
    if (!r && unlink(path) != 0) {
        if (errno == ENOENT)
            return 0;
        r = pulse_fail_errno(PULSE_ERR_IO, "remove %s", path);
    }
    return r ? r : pulse_fsync_dir(dir);
}
