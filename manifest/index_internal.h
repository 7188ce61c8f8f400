/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: how durable the index's commits are, and a test hook inside its write transactions (the crash-consistency test). */
#ifndef PULSE_MANIFEST_INDEX_INTERNAL_H
#define PULSE_MANIFEST_INDEX_INTERNAL_H

/* When set, called at named points inside write transactions (e.g. "put-record:after-record-row",
 * between the records row and its objects rows), so a test can kill the process exactly there.
 * NULL in production. Not part of the public API. */
extern void (*pulse_index_test_hook)(const char *point);

#include "pulseweights/manifest.h"

/* EACH_COMMIT 1 (the default): every commit is on the disk when it returns (SQLite's synchronous
 * FULL), so it outlives a power loss. 0: it outlives the process at once, and the disk at the
 * next checkpoint of the write-ahead log (NORMAL): for an owner that does not sync its weights
 * each step either, and after a restart of the machine checks them whole (a follower's unsynced
 * note), so a commit per step need not wait for the disk. */
int index_sync_each_commit(pulse_index *ix, int each_commit);

#endif
