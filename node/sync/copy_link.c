/* SPDX-License-Identifier: Apache-2.0 */
/* The publisher's copy of its last published state as a hard link to the published checkpoint file, and the check that it was not written since. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "node/sync/copy_link.h"

static void record_path(const char *dir, char out[4096])
{
    snprintf(out, 4096, "%s/last.link", dir);
}

static int fingerprint(const char *path, const struct stat *sb, char *out, size_t cap)
{
    return snprintf(out, cap, "%s\n%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 ".%09ld\n", path,
                    (uint64_t)sb->st_dev, (uint64_t)sb->st_ino, (uint64_t)sb->st_size, (int64_t)sb->st_mtim.tv_sec,
                    (long)sb->st_mtim.tv_nsec);
}

int copy_link_make(const char *from, const char *to, const char *dir)
{
    char tmp[4200], rec[4096], text[4400];
    /* under the stem the publisher sweeps at open, as the record's own temporary: a publisher
     * killed between the link and its rename leaves nothing behind for good */
    snprintf(tmp, sizeof tmp, "%s/last.link.tmp.copy", dir);
    unlink(tmp);
    if (link(from, tmp) != 0)
        return 1;   /* EXDEV, EPERM, ...: the caller writes a copy */
    struct stat sb;
    int r = stat(tmp, &sb) != 0 ? pulse_fail_errno(PULSE_ERR_IO, "stat %s", tmp) : 0;
    int n = r ? 0 : fingerprint(to, &sb, text, sizeof text);
    record_path(dir, rec);
    char rtmp[4200];
    snprintf(rtmp, sizeof rtmp, "%s.tmp", rec);
    if (!r && (n < 0 || (size_t)n >= sizeof text))
        r = pulse_fail(PULSE_ERR_LIMIT, "copy path too long: %s", to);
    /* the fingerprint first: a copy named for its state is never there without it */
    if (!r)
        r = pulse_replace_file(rec, rtmp, text, (size_t)n, 0);
    if (!r && rename(tmp, to) != 0)
        r = pulse_fail_errno(PULSE_ERR_IO, "rename %s to %s", tmp, to);
    if (r)
        unlink(tmp);
    return r;
}

int copy_link_unchanged(const char *path, const char *dir)
{
    char rec[4096], text[4400], want[4400];
    record_path(dir, rec);
    FILE *f = fopen(rec, "re");
    if (!f)
        return 1;   /* no link made: a copy of this publisher's own */
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    size_t pl = strlen(path);
    if (strncmp(text, path, pl) != 0 || text[pl] != '\n')
        return 1;   /* the link was to another copy, since replaced by one this publisher wrote */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    int m = fingerprint(path, &sb, want, sizeof want);
    return m > 0 && (size_t)m < sizeof want && !strcmp(text, want);
}
