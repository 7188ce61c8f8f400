/* SPDX-License-Identifier: Apache-2.0 */
/* The follower's step journal: a small text file written durably before an in-place apply starts. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "node/sync/journal.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/record.h"

#define JOURNAL_MAGIC "pulse-journal 1"

static int path_in(const char *dir, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return pulse_fail(PULSE_ERR_LIMIT, "state directory path too long: %s", dir);
    return 0;
}

int journal_patch_path(const char *dir, char *out, size_t cap)
{
    return path_in(dir, "journal.patch", out, cap);
}

int journal_data_path(const char *dir, char *out, size_t cap)
{
    return path_in(dir, "journal.data", out, cap);
}

int journal_write(const char *dir, const node_journal *j, int durable)
{
    char path[4096], tmp[4200], b[65], res[65];
    int r = path_in(dir, "journal", path, sizeof path);
    if (r)
        return r;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char text[1024], hd[65];
    int n = snprintf(text, sizeof text, "%s\nphase %s\nkind %s\nstep %" PRIu64 "\nbase %s\nresult %s\nrecord %s\n",
                     JOURNAL_MAGIC, j->phase == JOURNAL_APPLIED ? "applied" : "applying",
                     pulse_record_kind_name(j->kind), j->step, pulse_id_hex(j->base, b),
                     pulse_id_hex(j->result, res), j->rel);
    if (n >= 0 && (size_t)n < sizeof text && j->staged)
        n += snprintf(text + n, sizeof text - (size_t)n, "head %s\n", pulse_id_hex(j->head, hd));
    if (n < 0 || (size_t)n >= sizeof text)
        return pulse_fail(PULSE_ERR_LIMIT, "journal entry too long");
    return pulse_replace_file(path, tmp, text, (size_t)n, durable);
}

int journal_read(const char *dir, node_journal *j, int *found)
{
    char path[4096];
    *found = 0;
    memset(j, 0, sizeof *j);
    int r = path_in(dir, "journal", path, sizeof path);
    if (r)
        return r;
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        return pulse_fail_errno(PULSE_ERR_IO, "open %s", path);
    }
    char text[2048];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char phase[16] = "", kind[32] = "", base[80] = "", result[80] = "", rel[600] = "", head[80] = "";
    char magic[32];
    unsigned long long step;
    int fields = sscanf(text, "%31[^\n]\nphase %15s\nkind %31s\nstep %llu\nbase %79s\nresult %79s\nrecord %599s\n"
                        "head %79s\n", magic, phase, kind, &step, base, result, rel, head);
    int ok = (fields == 7 || fields == 8) && !strcmp(magic, JOURNAL_MAGIC) && strlen(rel) < sizeof j->rel &&
             pulse_id_parse(base, j->base) == 0 && pulse_id_parse(result, j->result) == 0 &&
             (fields == 7 || pulse_id_parse(head, j->head) == 0);
    j->staged = fields == 8;
    j->kind = ok ? pulse_record_kind_from_name(kind) : 0;
    j->phase = !strcmp(phase, "applied") ? JOURNAL_APPLIED : !strcmp(phase, "applying") ? JOURNAL_APPLYING : 0;
    if (!ok || !j->phase || (j->kind != PULSE_RECORD_SYNC_PATCH && j->kind != PULSE_RECORD_KEYFRAME))
        return pulse_fail(PULSE_ERR_FORMAT, "journal %s does not parse; the weights may be torn: remove them and the journal to start from a keyframe", path);
    j->step = step;
    snprintf(j->rel, sizeof j->rel, "%s", rel);
    *found = 1;
    return 0;
}

int journal_clear(const char *dir, int durable)
{
    char path[4096];
    int r = path_in(dir, "journal", path, sizeof path);
    if (!r && unlink(path) != 0 && errno != ENOENT)
        r = pulse_fail_errno(PULSE_ERR_IO, "remove %s", path);
    if (!r)
        r = journal_patch_path(dir, path, sizeof path);
    if (!r && unlink(path) != 0 && errno != ENOENT)
        r = pulse_fail_errno(PULSE_ERR_IO, "remove %s", path);
    return r || !durable ? r : pulse_fsync_dir(dir);
}

void journal_sweep(const char *dir)
{
    /* the journal's, its patch's and the unsynced note's temporaries (a process killed while
     * writing one); and a step's directions file and its temporaries, which builds that kept them
     * (format 6, no longer read) left */
    static const char *const stems[] = { "journal.tmp.", "journal.patch.tmp.", "unsynced.tmp.", "directions" };
    state_dir_sweep(dir, stems, sizeof stems / sizeof stems[0]);
}
