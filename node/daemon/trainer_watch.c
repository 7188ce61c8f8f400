/* SPDX-License-Identifier: Apache-2.0 */
/* The trainer node's directory scan: finished checkpoints by name, step and an unchanged fingerprint. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/daemon/log.h"
#include "node/daemon/signals.h"
#include "node/daemon/trainer_watch.h"

#define WATCH_MAX_ENTRIES 1000000u   /* a directory with more candidates is refused, not walked */
#define WATCH_MAX_INNER 100000u      /* names looked at inside one checkpoint directory */
#define WATCH_MAX_DIGITS 18          /* a step fits int64 with room */

static uint64_t digits_value(const char *s, size_t len)
{
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    return v;
}

/* The built-in step names, on NAME less LEN's worth of suffix: "<anything>-<N>",
 * "<anything>_<N>" and "<anything>step<N>" (step12, global_step12). Returns -1 when it is none
 * of them, 1 when the part before N is one that trainers rename into place whole
 * (checkpoint-, global_step_, global_step, step_, step), else 0. */
static int builtin_step(const char *name, size_t n, uint64_t *step)
{
    size_t d = n;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
        d--;
    if (d == n || n - d > WATCH_MAX_DIGITS || d < 2)
        return -1;
    int sep = name[d - 1] == '-' || name[d - 1] == '_';
    int word = d >= 4 && !memcmp(name + d - 4, "step", 4);
    if (!sep && !word)
        return -1;
    *step = digits_value(name + d, n - d);
    static const char *const whole[] = { "checkpoint-", "global_step_", "global_step", "step_", "step" };
    for (size_t i = 0; i < sizeof whole / sizeof *whole; i++)
        if (strlen(whole[i]) == d && !memcmp(name, whole[i], d))
            return 1;
    return 0;
}

int watch_pattern_check(const char *pattern, const char **why)
{
    const char *n = strstr(pattern, "{N}");
    if (strlen(pattern) > 255)
        *why = "is longer than 255 bytes";
    else if (!n || strstr(n + 3, "{N}"))
        *why = "needs exactly one {N} (where the step digits are)";
    else if (strchr(pattern, '/'))
        *why = "names entries of the watched directory itself: no '/'";
    else
        return 0;
    return -1;
}

/* NAME against a --pattern: some maximal run of digits stands for {N}, the text before it
 * matches the glob before {N}, the text after it the glob after. */
static int pattern_step(const char *pattern, const char *name, uint64_t *step)
{
    char pre[256], suf[256], head[256];
    const char *at = strstr(pattern, "{N}");
    size_t pl = (size_t)(at - pattern), nl = strlen(name);
    if (pl >= sizeof pre || nl >= sizeof head)
        return -1;
    memcpy(pre, pattern, pl);
    pre[pl] = 0;
    snprintf(suf, sizeof suf, "%s", at + 3);
    for (size_t i = 0; i < nl;) {
        if (name[i] < '0' || name[i] > '9' || (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')) {
            i++;
            continue;
        }
        size_t j = i;
        while (name[j] >= '0' && name[j] <= '9')
            j++;
        memcpy(head, name, i);
        head[i] = 0;
        if (j - i <= WATCH_MAX_DIGITS && !fnmatch(pre, head, 0) && !fnmatch(suf, name + j, 0)) {
            *step = digits_value(name + i, j - i);
            return 0;
        }
        i = j;
    }
    return -1;
}

void watch_set_clear(watch_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->e[i].name);
    free(s->e);
    memset(s, 0, sizeof *s);
}

static void strings_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void watch_rules_clear(watch_rules *r)
{
    strings_free(r->told, r->ntold);
    r->told = NULL;
    r->ntold = 0;
}

static void fingerprint(const struct stat *st, uint64_t fp[2])
{
    fp[0] = (uint64_t)st->st_ino ^ ((uint64_t)st->st_size << 20);
    fp[1] = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* Fingerprints what sits at the top of directory NAME (each name's inode, size, mtime; added
 * up, so the order readdir gives does not matter) into fp[2..3], and counts the weights there:
 * *.safetensors and *.safetensors.index.json regular files. A shard still being written
 * changes the fingerprint, so a directory filled in place is read only once it stood still
 * for a poll. Subdirectories are not looked into. Returns the count, or -1. */
static long dir_contents(int dfd, const char *name, uint64_t fp[4])
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    long weights = 0;
    size_t seen = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && seen++ < WATCH_MAX_INNER) {
        const char *s = de->d_name;
        struct stat st;
        if (!strcmp(s, ".") || !strcmp(s, "..") || fstatat(dirfd(d), s, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        uint64_t h = 1469598103934665603ull, f[2];
        for (const unsigned char *p = (const unsigned char *)s; *p; p++)
            h = (h ^ *p) * 1099511628211ull;
        fingerprint(&st, f);
        fp[2] += mix(h ^ f[0]);
        fp[3] += mix(h ^ f[1]);
        size_t l = strlen(s);
        if (S_ISREG(st.st_mode) && s[0] != '.' &&
            ((l > 12 && !strcmp(s + l - 12, ".safetensors")) ||
             (l > 23 && !strcmp(s + l - 23, ".safetensors.index.json"))))
            weights++;
    }
    closedir(d);
    return weights;
}

static uint64_t ctime_ns(const struct stat *st)
{
    return (uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec;
}

static int push(watch_set *s, const char *name, uint64_t step, int is_dir, const uint64_t fp[4], uint64_t changed)
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
    e->changed_ns = changed;
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

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names ignored in this scan; each is logged unless the previous scan ignored it too. */
typedef struct ignored_list {
    char **v;
    size_t n, cap;
} ignored_list;

static int ignore(ignored_list *l, const watch_rules *rules, const char *name, const char *why)
{
    if (l->n == l->cap) {
        if (l->cap >= WATCH_MAX_ENTRIES)
            return 0;   /* the log is a courtesy: past this many, names go untold */
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return pulse_fail(PULSE_ERR_NOMEM, "watch list");
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(name)))
        return pulse_fail(PULSE_ERR_NOMEM, "watch list");
    l->n++;
    if (!rules->told || !bsearch(&name, rules->told, rules->ntold, sizeof *rules->told, by_str))
        node_log("ignored", "name", name, "reason", why, (char *)NULL);
    return 0;
}

static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t l = strlen(suffix);
    return n >= l && !memcmp(s + n - l, suffix, l);
}

/* One name of the watched directory: a checkpoint pushed to OUT, silence (a .done marker), or
 * a reason to ignore it in *why. */
static int classify(int dfd, const watch_rules *rules, const char *name, watch_set *out, const char **why)
{
    size_t n = strlen(name);
    struct stat st, mk;
    uint64_t step, fp[4] = { 0 };
    *why = NULL;
    if (name[0] == '.') {
        *why = "a hidden name";
        return 0;
    }
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return 0;   /* gone since readdir */
    int is_dir = S_ISDIR(st.st_mode);
    if (!is_dir && !S_ISREG(st.st_mode)) {
        *why = "neither a regular file nor a directory (links are not followed)";
        return 0;
    }
    if (!strncmp(name, "tmp-", 4) || ends_with(name, n, ".tmp")) {
        *why = "a temporary name (tmp-*, *.tmp): a checkpoint counts once renamed to its final name";
        return 0;
    }
    if (!is_dir && ends_with(name, n, ".done"))
        return 0;   /* the marker of a directory checkpoint, looked at with it */
    int whole;
    if (rules->pattern) {
        if (pattern_step(rules->pattern, name, &step)) {
            *why = "does not match --pattern";
            return 0;
        }
        whole = 1;
    } else if (is_dir) {
        whole = builtin_step(name, n, &step);
    } else if (ends_with(name, n, ".safetensors")) {
        whole = builtin_step(name, n - 12, &step);
    } else {
        *why = builtin_step(name, n, &step) < 0 ? "no step number in the name and not a .safetensors file"
                                                : "not a .safetensors file";
        return 0;
    }
    if (whole < 0) {
        *why = "no step number in the name (<anything>-<N>, _<N>, step<N>; or give --pattern)";
        return 0;
    }
    fingerprint(&st, fp);
    if (!is_dir)
        return push(out, name, step, 0, fp, ctime_ns(&st));
    char marker[512];
    if (n + 6 <= sizeof marker) {
        memcpy(marker, name, n);
        memcpy(marker + n, ".done", 6);
        if (fstatat(dfd, marker, &mk, 0) == 0) {
            fingerprint(&mk, fp + 2);
            return push(out, name, step, 1, fp, ctime_ns(&mk) > ctime_ns(&st) ? ctime_ns(&mk) : ctime_ns(&st));
        }
    }
    if (!whole) {
        *why = "a directory '<anything>-<N>' counts once its marker '<name>.done' exists";
        return 0;
    }
    long w = dir_contents(dfd, name, fp);
    if (w <= 0) {
        *why = w < 0 ? "cannot read the directory"
                     : "no *.safetensors or *.safetensors.index.json at the top of the directory "
                       "(subdirectories are not searched)";
        return 0;
    }
    return push(out, name, step, 1, fp, ctime_ns(&st));
}

void watch_notify_open(watch_notify *w, const char *dir)
{
    memset(w, 0, sizeof *w);
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd >= 0 && inotify_add_watch(w->fd, dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE) < 0) {
        close(w->fd);
        w->fd = -1;
    }
}

static void notify_add(watch_notify *w, const char *name)
{
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->moved[i], name))
            return;
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        char **v = cap <= WATCH_MAX_ENTRIES ? realloc(w->moved, cap * sizeof *v) : NULL;
        if (!v)
            return;   /* the name then waits for the stability rule */
        w->moved = v;
        w->cap = cap;
    }
    if ((w->moved[w->n] = strdup(name)) != NULL)
        w->n++;
}

int watch_notify_wait(watch_notify *w, unsigned ms)
{
    if (w->fd < 0)
        return node_sleep_ms(ms) ? -1 : 0;
    int changed = 0;
    for (;;) {
        /* everything queued: names renamed in are kept, the rest only wakes the scan */
        char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n;
        while ((n = read(w->fd, buf, sizeof buf)) > 0) {
            for (char *p = buf; p < buf + n;) {
                const struct inotify_event *e = (const struct inotify_event *)(void *)p;
                if ((e->mask & IN_MOVED_TO) && e->len)
                    notify_add(w, e->name);
                changed = 1;
                p += sizeof *e + e->len;
            }
        }
        if (changed || node_stop_requested() || ms == 0)
            break;
        unsigned slice = ms < 50 ? ms : 50;   /* the stop flag is looked at between slices */
        struct pollfd pf = { .fd = w->fd, .events = POLLIN };
        poll(&pf, 1, (int)slice);
        ms -= slice;
    }
    return node_stop_requested() ? -1 : changed;
}

void watch_notify_clear(watch_notify *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->moved[i]);
    w->n = 0;
}

void watch_notify_close(watch_notify *w)
{
    watch_notify_clear(w);
    free(w->moved);
    if (w->fd >= 0)
        close(w->fd);
    memset(w, 0, sizeof *w);
    w->fd = -1;
}

int watch_scan(const char *dir, watch_rules *rules, const watch_set *prev, const watch_notify *moved,
               watch_set *out)
{
    watch_set_clear(out);
    DIR *d = opendir(dir);
    if (!d)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot read the watched directory %s", dir);
    int dfd = dirfd(d), r = 0;
    ignored_list ign = { 0 };
    struct dirent *de;
    while (!r && (errno = 0, de = readdir(d)) != NULL) {
        const char *why;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        r = classify(dfd, rules, de->d_name, out, &why);
        if (!r && why)
            r = ignore(&ign, rules, de->d_name, why);
    }
    if (!r && errno)
        r = pulse_fail_errno(PULSE_ERR_IO, "cannot read the watched directory %s", dir);
    closedir(d);
    if (r) {
        strings_free(ign.v, ign.n);
        watch_set_clear(out);
        return r;
    }
    /* Remember what was told while it stays; a name that goes and comes back is told again. */
    if (ign.n)
        qsort(ign.v, ign.n, sizeof *ign.v, by_str);
    strings_free(rules->told, rules->ntold);
    rules->told = ign.v;
    rules->ntold = ign.n;
    qsort(out->e, out->n, sizeof *out->e, by_step);
    for (size_t i = 0; prev && i < out->n; i++)
        for (size_t j = 0; j < prev->n; j++)
            if (!strcmp(prev->e[j].name, out->e[i].name)) {
                out->e[i].stable = !memcmp(prev->e[j].fp, out->e[i].fp, sizeof out->e[i].fp);
                break;
            }
    for (size_t i = 0; moved && i < out->n; i++)
        for (size_t j = 0; j < moved->n && !out->e[i].stable; j++)
            out->e[i].stable = !strcmp(moved->moved[j], out->e[i].name);
    return 0;
}
