/* SPDX-License-Identifier: Apache-2.0 */
/* A node's note of a file written since its last sync, with the boot id that wrote it. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "node/sync/unsynced.h"

#define UNSYNCED_MAGIC "pulse-unsynced 1 boot "

static int note_path(const char *dir, const char *suffix, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/unsynced%s", dir, suffix);
    if (n < 0 || (size_t)n >= cap)
        return pulse_fail(PULSE_ERR_LIMIT, "state directory path too long: %s", dir);
    return 0;
}

/* The first line of path, without its newline: 0, -ENOENT when there is no such file, or -1. */
static int read_line(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? -ENOENT : -1;
    int ok = fgets(out, (int)cap, f) != NULL;
    fclose(f);
    if (!ok)
        out[0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

int unsynced_open(unsynced_note *n, const char *dir)
{
    char path[4096], line[UNSYNCED_BOOT_MAX + 64];
    memset(n, 0, sizeof *n);
    if (read_line("/proc/sys/kernel/random/boot_id", n->boot, sizeof n->boot) != 0)
        n->boot[0] = '\0';
    int r = note_path(dir, "", path, sizeof path);
    if (r)
        return r;
    int got = read_line(path, line, sizeof line);
    if (got == -ENOENT)
        return 0;
    if (got != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "%s", path);
    size_t m = strlen(UNSYNCED_MAGIC);
    n->marked = n->boot[0] && !strncmp(line, UNSYNCED_MAGIC, m) && !strcmp(line + m, n->boot);
    n->stale = !n->marked;
    return 0;
}

int unsynced_sync_each(const unsynced_note *n, int durable)
{
    return durable || !n->boot[0];
}

int unsynced_before_write(unsynced_note *n, const char *dir, int durable)
{
    if (unsynced_sync_each(n, durable) || n->marked)
        return 0;
    char path[4096], tmp[4200], text[UNSYNCED_BOOT_MAX + 64];
    int r = note_path(dir, "", path, sizeof path);
    if (!r)
        r = note_path(dir, ".tmp", tmp, sizeof tmp);
    if (r)
        return r;
    int len = snprintf(text, sizeof text, "%s%s\n", UNSYNCED_MAGIC, n->boot);
    r = pulse_replace_file(path, tmp, text, (size_t)len, 1);
    n->marked = !r;
    return r;
}

int unsynced_settle(unsynced_note *n, const char *dir, const char *path)
{
    if (!n->marked && !n->stale)
        return 0;
    if (path && n->marked) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return pulse_fail_errno(PULSE_ERR_IO, "%s", path);
        int r = fdatasync(fd) != 0 ? pulse_fail_errno(PULSE_ERR_IO, "%s: fdatasync", path) : 0;
        close(fd);
        if (r)
            return r;
    }
    char note[4096];
    int r = note_path(dir, "", note, sizeof note);
    if (!r && unlink(note) != 0 && errno != ENOENT)
        r = pulse_fail_errno(PULSE_ERR_IO, "remove %s", note);
    if (!r)
        r = pulse_fsync_dir(dir);
    if (!r)
        n->marked = n->stale = 0;
    return r;
}
