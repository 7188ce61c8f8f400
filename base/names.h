/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the rules for run names and store keys, in one place for the record format, the stores, the node and the CLI. */
#ifndef PULSE_BASE_NAMES_H
#define PULSE_BASE_NAMES_H

#include <stddef.h>

/* Longest run name (PULSE_RECORD_MAX_RUN) and key (bytes). */
#define PULSE_NAMES_MAX_RUN 128u
#define PULSE_NAMES_MAX_KEY 1024u

/* The run-name rule of the record format (docs/trust.md): 1..128 bytes of [A-Za-z0-9._-], the
 * first a letter or digit. A run name becomes one bucket key component and one local path
 * component, so this rule is what keeps "..", "x/y" and "a b" out of both. s[0..n) need not be
 * NUL-terminated. 0, or PULSE_ERR_FORMAT (PULSE_ERR_LIMIT when too long) with the detail
 * "WHAT: <why>" (e.g. "WHAT: byte 1 (0x2f) not allowed (...)"). */
int pulse_names_check_run(const char *what, const char *s, size_t n);

/* pulse_names_check_run of a NUL-terminated run name (NULL is refused), the detail reading
 * `run "NAME": <why>` with NAME escaped for a terminal. What every verb and entry point that
 * takes a run calls before touching a store or a file. */
int pulse_check_run(const char *run);

/* Store keys: 1..1024 bytes, no leading '/', no empty, "." or ".." segments, no control byte
 * (below 0x20, or 0x7f). 0, or PULSE_ERR_INVALID with the detail `key "KEY": <why>`. */
int pulse_check_key(const char *key);

/* A list prefix: "" (everything), or a key, or a key followed by '/'. Same errors, with
 * `prefix "PREFIX": <why>`. */
int pulse_check_key_prefix(const char *prefix);

#endif
