/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper: a fresh temporary directory per test program, removed (with its files) at the end. */
#ifndef PULSE_TESTS_MANIFEST_TMPDIR_H
#define PULSE_TESTS_MANIFEST_TMPDIR_H

#include <stddef.h>

/* Creates the directory (once) and returns its path. Exits the program if it cannot. */
const char *test_tmpdir(void);
/* OUT = tmpdir + "/" + NAME. */
void test_path(char *out, size_t cap, const char *name);
/* Removes the directory tree (best effort). */
void test_tmpdir_remove(void);

#endif
