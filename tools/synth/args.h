/* SPDX-License-Identifier: Apache-2.0 */
/* Option parsing shared by the verbs built on the synthetic trainer (synth, bench, demo). */
#ifndef PULSE_TOOLS_SYNTH_ARGS_H
#define PULSE_TOOLS_SYNTH_ARGS_H

#include <stdint.h>

/* When argv[*i] is NAME ("--out DIR") or NAME=VALUE ("--out=DIR"), points *val at the value
 * (advancing *i past it in the first form) and returns 1; returns -1 when the value is
 * missing, 0 when argv[*i] is something else. */
int synth_arg(int argc, char **argv, int *i, const char *name, const char **val);

/* A parameter count: digits with an optional K, M, B or G suffix in powers of 1000
 * (100M = 10^8, 1B = 10^9), as model sizes are spoken. 0 or -1. */
int synth_parse_count(const char *s, uint64_t *out);

/* A finite number in (0, max]: a learning rate, a fraction. 0 or -1. */
int synth_parse_positive(const char *s, double max, double *out);

/* A thread count 0..256 (0 = all cores). 0 or -1. */
int synth_parse_threads(const char *s, int *out);

#endif
