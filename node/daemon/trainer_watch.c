/* SPDX-License-Identifier: Apache-2.0 */
/* The trainer node's directory scan: finished checkpoints by name, step and an unchanged fingerprint. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fail.h"
#include "node/daemon/trainer_watch.h"

#define WATCH_MAX_ENTRIES 1000000u   /* a directory with more candidates is refused, not walked */

int watch_parse_step(const char *name, const char *suffix, uint64_t *step)
{
    size_t n = strlen(name), sl = strlen(suffix);
    if (n <= sl || strcmp(name + n - sl, suffix) != 0)
        return -1;
    n -= sl;
    size_t d = n;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
        d--;
    /* Digits, preceded by '-', at most 18 of them (fits int64 with room): anything else is
     * not a checkpoint name ("step-3.tmp", "model.safetensors", "-5"). */
    if (d == n || d < 2 || name[d - 1] != '-' || n - d > 18)
        return -1;
    uint64_t v = 0;
    for (size_t i = d; i < n; i++)
        v = v * 10 + (uint64_t)(name[i] - '0');
    *step = v;
    return 0;
}

void watch_set_clear(watch_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->e[i].name);
    free(s->e);
    memset(s, 0, sizeof *s);
}

static void fingerprint(const struct stat *st, uint64_t fp[2])
{
    fp[0] = (uint64_t)st->st_ino ^ ((uint64_t)st->st_size << 20);
    fp[1] = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

static int push(watch_set *s, const char *name, uint64_t step, int is_dir, const uint64_t fp[4])
{
    if (s->n == s->cap) {
        if (s->cap >= WATCH_MAX_ENTRIES)
            return pulse_fail(PULSE_ERR_LIMIT, "more than %u checkpoints in the watched directory",
                              WATCH_MAX_ENTRIES);
        size_t cap = s->cap ? s->cap * 2 : 16;
        watch_entry *e = realloc(s->e, cap * sizeof *e);
        if (!e)
            return pulse_fail(PULSE_ERR_NOMEM, "watch list");
        s->e = e;
        s->cap = cap;
    }
    watch_entry *e = &s->e[s->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name)
        return pulse_fail(PULSE_ERR_NOMEM, "watch list");
    e->step = step;
    e->is_dir = is_dir;
    memcpy(e->fp, fp, sizeof e->fp);
    s->n++;
    return 0;
}

static int by_step(const void *a, const void *b)
{
    const watch_entry *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

int watch_scan(const char *dir, const watch_set *prev, watch_set *out)
{
    watch_set_clear(out);
    DIR *d = opendir(dir);
    if (!d)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot read the watched directory %s", dir);
    int dfd = dirfd(d), r = 0;
    struct dirent *de;
    while (!r && (errno = 0, de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (name[0] == '.')
            continue;
        uint64_t step, fp[4] = { 0 };
        struct stat st, mk;
        if (!watch_parse_step(name, ".safetensors", &step)) {
            if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
                continue;
            fingerprint(&st, fp);
            r = push(out, name, step, 0, fp);
        } else if (!watch_parse_step(name, "", &step)) {
            /* A sharded checkpoint: a directory, complete once its "<name>.done" marker exists. */
            char marker[512];
            if (strlen(name) + 6 > sizeof marker)
                continue;
            strcpy(marker, name);
            strcat(marker, ".done");
            if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
                fstatat(dfd, marker, &mk, 0) != 0)
                continue;
            fingerprint(&st, fp);
            fingerprint(&mk, fp + 2);
            r = push(out, name, step, 1, fp);
        }
    }
    if (!r && errno)
        r = pulse_fail_errno(PULSE_ERR_IO, "cannot read the watched directory %s", dir);
    closedir(d);
    if (r) {
        watch_set_clear(out);
        return r;
    }
    qsort(out->e, out->n, sizeof *out->e, by_step);
    for (size_t i = 0; prev && i < out->n; i++)
        for (size_t j = 0; j < prev->n; j++)
            if (!strcmp(prev->e[j].name, out->e[i].name)) {
                out->e[i].stable = !memcmp(prev->e[j].fp, out->e[i].fp, sizeof out->e[i].fp);
                break;
            }
    return 0;
}
