/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the context coder of format 5, a BF16 or F16 ulp chunk's changes coded by the exponent band of each old value. */
#ifndef PULSE_NODE_PATCH_CTXCODE_H
#define PULSE_NODE_PATCH_CTXCODE_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/checkpoint.h"

/* The first byte of a context-coded chunk's position stream (format 5 only; the Rice codings
 * stop at 1 + 31 = 32): 64 plus flags. PATCH_CTX_TWO_STATES: the value stream's rANS symbols
 * alternate between two states (the decoder's two dependency chains run side by side) instead
 * of running on one. PATCH_CTX_COUNT_TABLES: each band's symbol table is written as the set of
 * its symbols and their counts (a few bytes) instead of 20 frequencies (20-40 bytes). The first
 * format-5 writers wrote 64, the next 65, then 66 and 67; writers now add PATCH_CTX_SIGN_SYMBOLS
 * where a band needs it (74, 75). */
#define PATCH_POS_CONTEXT 64u
#define PATCH_CTX_TWO_STATES 1u
#define PATCH_CTX_COUNT_TABLES 2u
/* PATCH_CTX_PREV_DIRS: format 6's values coded by the direction of the step before the base,
 * which this build no longer reads: a chunk with it is refused (PULSE_ERR_UNSUPPORTED). */
#define PATCH_CTX_PREV_DIRS 4u
/* PATCH_CTX_SIGN_SYMBOLS (with count tables only): each band with a value mode says how its
 * changes' direction bits are coded: raw, or as rANS symbols of whether the bit pattern falls
 * (its magnitude shrinks) under the band's own frequency. Where a step moves small weights by
 * many ulps, most of them grow away from zero, so a fall bit costs well under one. Writers set it
 * where a band's choice needs it. */
#define PATCH_CTX_SIGN_SYMBOLS 8u
#define PATCH_POS_CONTEXT2 (PATCH_POS_CONTEXT | PATCH_CTX_TWO_STATES)
#define PATCH_POS_CONTEXT_LAST \
    (PATCH_POS_CONTEXT | PATCH_CTX_TWO_STATES | PATCH_CTX_COUNT_TABLES | PATCH_CTX_PREV_DIRS | PATCH_CTX_SIGN_SYMBOLS)

static inline int patch_pos_is_context(uint8_t coding)
{
    return coding >= PATCH_POS_CONTEXT && coding <= PATCH_POS_CONTEXT_LAST;
}
/* Exponent bands: band(old) = min(max(exp(old) - ebase, 0), PATCH_CTX_BANDS - 1), where
 * exp(old) = (old >> 7) & 0xFF for BF16, (old >> 10) & 0x1F for F16, and ebase is written in the
 * chunk. */
#define PATCH_CTX_BANDS 16u

/* Per-thread working memory for chunks of up to chunk_elems elements (allocated once). */
typedef struct patch_ctx_scratch patch_ctx_scratch;
patch_ctx_scratch *patch_ctx_scratch_new(uint32_t chunk_elems);
void patch_ctx_scratch_free(patch_ctx_scratch *s);

/* Bytes that the position and value streams of any chunk of n elements with k changes fit in
 * together (the encoder's output capacity). */
size_t patch_ctx_bound(uint32_t n, size_t k);

/* The dtypes whose chunks the context coder takes: PULSE_DT_BF16 and PULSE_DT_F16. An F16
 * chunk's values have no predicted mode (its arithmetic is BF16's); decoders refuse one. */
static inline int patch_ctx_dtype_ok(pulse_dtype dt)
{
    return dt == PULSE_DT_BF16 || dt == PULSE_DT_F16;
}

/* Encodes the k > 0 differing elements of old[0..n) -> neu[0..n) (bit patterns of dtype dt, n <=
 * the scratch's chunk_elems) at out (cap >= patch_ctx_bound(n, k)): the position stream (first byte
 * PATCH_POS_CONTEXT | PATCH_CTX_COUNT_TABLES, | PATCH_CTX_TWO_STATES from 256 changes,
 * | PATCH_CTX_SIGN_SYMBOLS where a value-mode band codes falls; each flag left out after
 * patch_ctx_one_state / patch_ctx_freq_tables / patch_ctx_raw_signs),
 * then the value stream right after it. *pos_len, *val_len: their lengths.
 * 0, or PULSE_ERR_INVALID when k is not the number of differing elements or dt is not one the
 * coder takes. */
int patch_ctx_encode(patch_ctx_scratch *s, pulse_dtype dt, const uint16_t *old, const uint16_t *neu, uint32_t n,
                     size_t k, uint8_t *out, size_t cap, uint32_t *pos_len, uint32_t *val_len);

/* Makes s's encoder write one rANS state, as the first format-5 writers did, or two again from
 * 256 changes (one_state 0): for tests of what older patches hold. */
void patch_ctx_one_state(patch_ctx_scratch *s, int one_state);

/* Makes s's encoder write each band's table as 20 frequencies, as the writers before count
 * tables did, or as counts again (freq_tables 0): for tests of what older patches hold. */
void patch_ctx_freq_tables(patch_ctx_scratch *s, int freq_tables);

/* Makes s's encoder write the direction bits of a band with a value mode as raw bits, as the
 * writers before PATCH_CTX_SIGN_SYMBOLS did, or as symbols again (raw_signs 0): for tests of what
 * older patches hold. */
void patch_ctx_raw_signs(patch_ctx_scratch *s, int raw_signs);

/* Decodes a context-coded chunk of dtype dt against its base old[0..n): exactly k changes, their
 * positions in idx[0..k) (each < n, all distinct; in band order, not ascending) and zigzag ulp
 * differences z[0..k) (each >= 1), so that new[idx[j]] = old[idx[j]] + unzigzag(z[j]) mod 2^16.
 * Every field is checked (lengths fill each stream exactly, counts add up to k, padding bits
 * zero, the encoding is the only one of these changes at the written parameters); a failure is
 * PULSE_ERR_FORMAT naming the tensor, the chunk and the stream ("position" or "value"),
 * PULSE_ERR_UNSUPPORTED for a first byte outside PATCH_POS_CONTEXT..PATCH_POS_CONTEXT_LAST or
 * with PATCH_CTX_PREV_DIRS. Nothing else is written. */
int patch_ctx_decode(patch_ctx_scratch *s, pulse_dtype dt, const uint16_t *old, uint32_t n, const uint8_t *pos,
                     size_t pos_len, const uint8_t *val, size_t val_len, size_t k, uint32_t *idx, uint16_t *z,
                     const char *tensor, uint64_t chunk);

/* Every check of patch_ctx_decode against the base, at less cost: a band's positions are
 * found only where its values need their old ones (its predicted mode), into idx (scratch:
 * nothing is returned there, z is not written). What the apply's first pass makes of a chunk
 * it cannot keep, which its second pass decodes again. */
int patch_ctx_check_base(patch_ctx_scratch *s, pulse_dtype dt, const uint16_t *old, uint32_t n, const uint8_t *pos,
                         size_t pos_len, const uint8_t *val, size_t val_len, size_t k, uint32_t *idx, uint16_t *z,
                         const char *tensor, uint64_t chunk);

/* The checks that need no base: the band headers and tables parse, their lengths fill both
 * streams exactly, and the band counts add up to k. What pulse_patch_verify can say of a
 * context-coded chunk without the weights it was coded against. Same errors as decode. */
int patch_ctx_check(pulse_dtype dt, const uint8_t *pos, size_t pos_len, const uint8_t *val, size_t val_len,
                    size_t k, uint32_t n, const char *tensor, uint64_t chunk);

#endif
