/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a test hook inside the index's write transactions, for the crash-consistency test. */
#ifndef PULSE_MANIFEST_INDEX_INTERNAL_H
#define PULSE_MANIFEST_INDEX_INTERNAL_H

/* When set, called at named points inside write transactions (e.g. "put-record:after-record-row",
 * between the records row and its objects rows), so a test can kill the process exactly there.
 * NULL in production. Not part of the public API. */
extern void (*pulse_index_test_hook)(const char *point);

#endif
