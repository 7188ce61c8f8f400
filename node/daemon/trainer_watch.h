/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the trainer node's scan of its checkpoint directory for finished checkpoints. */
#ifndef PULSE_NODE_DAEMON_TRAINER_WATCH_H
#define PULSE_NODE_DAEMON_TRAINER_WATCH_H

#include <stddef.h>
#include <stdint.h>

/* One checkpoint candidate: a file "<anything>-<N>.safetensors", or a directory "<anything>-<N>"
 * beside a "<anything>-<N>.done" marker. The fingerprint (inode, size, mtime in ns; for a
 * directory those of the directory and its marker) tells whether it changed since the last scan. */
typedef struct watch_entry {
    char *name;          /* file or directory name inside the watched directory (owned) */
    uint64_t step;       /* N, from the name */
    int is_dir;
    uint64_t fp[4];      /* fingerprint */
    int stable;          /* same fingerprint in the previous scan: finished, safe to read */
} watch_entry;

typedef struct watch_set {
    watch_entry *e;
    size_t n, cap;
} watch_set;

/* Parses the step out of NAME ("<anything>-<N>" after stripping SUFFIX, which NAME must end
 * with; SUFFIX may be ""). Returns 0 and *step, or -1 when NAME is not such a name. */
int watch_parse_step(const char *name, const char *suffix, uint64_t *step);

/* Scans DIR into OUT (cleared first), sorted by step then name. An entry is marked stable when
 * PREV (may be NULL) holds the same name with the same fingerprint. Ignores hidden names,
 * *.tmp and anything not matching the patterns. Returns 0 or a negative PULSE_ERR_*. */
int watch_scan(const char *dir, const watch_set *prev, watch_set *out);

void watch_set_clear(watch_set *s);

#endif
