/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the trainer node's scan of its checkpoint directory for finished checkpoints. */
#ifndef PULSE_NODE_DAEMON_TRAINER_WATCH_H
#define PULSE_NODE_DAEMON_TRAINER_WATCH_H

#include <stddef.h>
#include <stdint.h>

/* One checkpoint candidate (docs/node.md, "Which files are checkpoints"): a .safetensors file
 * with a step in its name, or a directory holding weights at its top level. The fingerprint
 * (inode, size, mtime in ns of the entry; for a directory also of its .done marker, or of
 * every name at its top level) tells whether it changed since the last scan. */
typedef struct watch_entry {
    char *name;          /* file or directory name inside the watched directory (owned) */
    uint64_t step;       /* N, from the name */
    int is_dir;
    uint64_t fp[4];      /* fingerprint */
    int stable;          /* same fingerprint in the previous scan: finished, safe to read */
    uint64_t changed_ns; /* unix ns of its last change (ctime: a rename into place counts; for a
                          * directory, the newer of its own and its .done marker's) */
} watch_entry;

typedef struct watch_set {
    watch_entry *e;
    size_t n, cap;
} watch_set;

/* What the scan recognises, and the names it has already logged as ignored (each is logged
 * once while it stays in the directory). Zero-initialise; pattern NULL: the built-in names. */
typedef struct watch_rules {
    const char *pattern; /* --pattern: a glob with one {N} for the step digits */
    char **told;         /* sorted, owned */
    size_t ntold;
} watch_rules;

/* Checks a --pattern: exactly one "{N}", no '/', at most 255 bytes. Returns 0, or -1 with a
 * reason in *why. */
int watch_pattern_check(const char *pattern, const char **why);

/* Names renamed into the watched directory since the last scan, from inotify: a checkpoint a
 * trainer renames into place is whole when it appears, so it need not stand still for a second
 * scan. Where inotify is not there (fd -1: an old kernel, a network file system) the scan's
 * stability rule alone decides. */
typedef struct watch_notify {
    int fd;
    char **moved;        /* owned */
    size_t n, cap;
} watch_notify;
void watch_notify_open(watch_notify *w, const char *dir);
/* Waits up to MS for the directory to change (returns 1 at once when it does, collecting the
 * names renamed into it), or until the node is asked to stop (returns -1); 0 when the time ran
 * out. Without inotify it sleeps MS. */
int watch_notify_wait(watch_notify *w, unsigned ms);
void watch_notify_clear(watch_notify *w);   /* forgets the names collected */
void watch_notify_close(watch_notify *w);

/* Scans DIR into OUT (cleared first), sorted by step then name. An entry is marked stable when
 * PREV (may be NULL) holds the same name with the same fingerprint, or when MOVED (may be NULL)
 * saw it renamed into the directory. Every other name is ignored, and logged (node_log
 * "ignored", name and reason) the first time RULES sees it. Returns 0 or a negative PULSE_ERR_*. */
int watch_scan(const char *dir, watch_rules *rules, const watch_set *prev, const watch_notify *moved,
               watch_set *out);

void watch_set_clear(watch_set *s);
void watch_rules_clear(watch_rules *r);

#endif
