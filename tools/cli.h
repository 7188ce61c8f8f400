/* SPDX-License-Identifier: Apache-2.0 */
/* Shared conventions of the CLI verbs: one-line errors, --help detection, number parsing. */
#ifndef PULSE_TOOLS_CLI_H
#define PULSE_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/patch.h"

/* Prints "pulse VERB: WHAT: <strerror(err)>[: <detail>]" on stderr and returns the exit
 * status for err (1 for every library error; 2 is kept for usage errors). */
int cli_fail(const char *verb, int err, const char *what);

/* Prints "pulse VERB: MESSAGE" (printf format) and "try 'pulse VERB --help'" on stderr;
 * returns 2. */
int cli_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "-" as an output path that must be a file (written beside and renamed, or a directory):
 * prints a one-line error and returns 2; any other VAL: returns 0. */
int cli_out_not_stdout(const char *verb, const char *opt, const char *val);

/* True when argv holds -h or --help. */
int cli_wants_help(int argc, char **argv);

/* Parses a non-negative integer with an optional K/M/G suffix (powers of 1024);
 * returns 0, or -1 when the text is not one. */
int cli_parse_u64(const char *s, uint64_t *out);
/* "I/N", a part of a model published in parts: 0 <= I < N <= 4096. 0, or -1. */
int cli_parse_part(const char *s, uint32_t *part, uint32_t *parts);

/* Flushes and checks stdout; returns 0 or prints an error and returns 1 (git's rule:
 * a verb that could not write its output failed). */
int cli_finish_stdout(const char *verb);

/* Prints s on stdout as a JSON string (quoted; '"', '\\' and control bytes escaped). */
void cli_json_str(const char *s);

/* How `diff` and `inspect` count a patch's changes: out of the elements of its element-wise
 * tensors (this sum), with the changed bytes of OPAQUE tensors, replaced a whole chunk at a
 * time, told apart by cli_opaque_note: " and N changed byte(s) in opaque tensors", or "". */
uint64_t cli_patch_elementwise(const pulse_patch *p);
void cli_opaque_note(char *buf, size_t cap, uint64_t opaque_changes);

#endif
