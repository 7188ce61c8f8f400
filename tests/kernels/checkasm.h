/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel test harness shared by the family files: inputs, guarded and canaried buffers, the check tally, the family table. */
#ifndef PULSE_TESTS_KERNELS_CHECKASM_H
#define PULSE_TESTS_KERNELS_CHECKASM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "node/kernels/kernels.h"

/* ---------- inputs ---------- */

/* One xorshift stream for the whole run: the families draw from it in table order, so a full
 * run sees the same inputs whichever file a check lives in. */
extern uint64_t checkasm_rng;

static inline uint64_t rnd(void)
{
    checkasm_rng ^= checkasm_rng << 13;
    checkasm_rng ^= checkasm_rng >> 7;
    checkasm_rng ^= checkasm_rng << 17;
    return checkasm_rng;
}

/* Array lengths every family walks: each vector width's multiples, their neighbours, long tails. */
extern const size_t checkasm_lengths[];
extern const size_t checkasm_lengths_count;

enum { SLACK = 64 }; /* idx slack granted by the diff contract */

/* ---------- memory with traps ---------- */

/* An input array ending exactly where a PROT_NONE page begins: any read past n faults. */
typedef struct { void *map; size_t map_size; } guarded;
void *guard_alloc(guarded *g, size_t bytes);
void guard_free(guarded *g);

/* An output array with canary bytes before and after: any write outside [0, bytes) shows. */
void *canary_alloc(size_t bytes);
int canary_intact(const void *data, size_t bytes);
void canary_free(void *data);

/* ---------- the tally ---------- */

extern int checkasm_count, checkasm_failures;

/* What the failing check was running on, printed with the failure. */
extern const char *cur_isa;
extern size_t cur_n;
extern const char *cur_pattern;
extern int cur_placement;

#define CHECK(cond) do { checkasm_count++; if (!(cond)) { checkasm_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)

#define FAILED_AT(what) fprintf(stderr, "  %s %s: n=%zu pattern=%s placement=%d\n", cur_isa, what, \
    cur_n, cur_pattern, cur_placement)

#define CHECK_SAME(cond, what) do { int ok_ = (cond); CHECK(ok_); if (!ok_) FAILED_AT(what); } while (0)

/* ---------- --bench ---------- */

extern size_t bench_bytes; /* array size of the timed runs (--bench-bytes) */
double checkasm_now(void);

/* ---------- the families ---------- */

/* Checks the table t against the reference r (t == r: the reference against itself, which
 * proves the harness and runs the reference-only checks). */
typedef void (*checkasm_check_fn)(const pulse_kernels *t, const pulse_kernels *r);
typedef void (*checkasm_bench_fn)(const pulse_kernels *t);

void checkasm_check_diff(const pulse_kernels *t, const pulse_kernels *r);
void checkasm_check_apply(const pulse_kernels *t, const pulse_kernels *r);
void checkasm_check_rice(const pulse_kernels *t, const pulse_kernels *r);
void checkasm_check_pack(const pulse_kernels *t, const pulse_kernels *r);
void checkasm_check_gate(const pulse_kernels *t, const pulse_kernels *r);
void checkasm_bench_diff(const pulse_kernels *t);
void checkasm_bench_gate(const pulse_kernels *t);
void checkasm_check_ctx(const pulse_kernels *t, const pulse_kernels *r);
void checkasm_bench_ctx(const pulse_kernels *t);

/* check_apply.c's checks that need a diff's real positions: the diff family runs them on every
 * 16-bit case. */
void check_gaps(const pulse_kernels *t, const pulse_kernels *r, const uint32_t *idx, size_t k,
                uint32_t limit);
void check_ulp2_add16(const pulse_kernels *t, const pulse_kernels *r, const uint16_t *a,
                      const uint16_t *b, size_t n, const uint32_t *idx, size_t k);

#endif
