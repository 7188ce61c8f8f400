/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel table: element-wise jobs of the patch codec and the LoCo gate, one implementation per ISA. */
#ifndef PULSE_KERNELS_H
#define PULSE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* The kernels' one dependency: the CPU features (PULSE_CPU_*, pulse_cpu_flags()) each ISA's
 * init asks for, and PULSE_CPU_MASK. Detection cannot fail, so the kernels still cannot. */
#include "base/cpu.h"

/* The low-precision view a LoCo gate tests visibility in (docs/kernels.md "The gate"). Every
 * view rounds FP32 to nearest, ties to even; BF16 and FP16 overflow to Inf, the FP8 views
 * saturate to their largest finite value (E4M3: 448, E5M2: 57344), like CUDA's __NV_SATFINITE. */
typedef enum pulse_view {
    PULSE_VIEW_BF16 = 0,
    PULSE_VIEW_FP16 = 1,
    PULSE_VIEW_FP8_E4M3 = 2, /* OCP E4M3FN: no Inf, 0x7f/0xff are NaN */
    PULSE_VIEW_FP8_E5M2 = 3,
    PULSE_VIEW_COUNT
} pulse_view;

/* The view's bit pattern of x (low 16 or 8 bits used), the exact rounding every gate uses.
 * NaN gives the view's quiet NaN with x's sign (the gates never convert a NaN). */
uint32_t pulse_view_bits(pulse_view view, float x);

/* gate_check results (kernels know nothing of PULSE_ERR_*; the caller maps them). */
enum {
    PULSE_GATE_OK = 0,
    PULSE_GATE_UNSORTED = -1,   /* a position not strictly above the previous one */
    PULSE_GATE_RANGE = -2,      /* a position >= n */
    PULSE_GATE_NOT_FINITE = -3, /* a value that is NaN or +-Inf */
    PULSE_GATE_INVISIBLE = -4,  /* an entry the gate would have kept back: view(theta - a) == view(theta) */
};

/* Every kernel works on elements of 1, 2 or 4 bytes ("8/16/32"). Positions are uint32
 * indices within one chunk (chunks hold at most 2^32-1 elements). No kernel allocates,
 * none reads or writes outside [0, n) of its arrays, all accept n == 0 and unaligned pointers.
 *
 * To add a kernel: add the pointer here, the _c reference in kernels_c.c, the ISA versions,
 * a case in a family of tests/kernels/ (check_*.c), and a bench line there. */
typedef struct pulse_kernels {
    const char *name;   /* "c", "avx2", "avx512", "neon" (best one filled in) */

    /* find changes: writes the ascending positions i < n where a[i] != b[i] (bitwise) to
     * idx (room for n entries, plus 64 entries of slack that may be scribbled) and returns
     * how many. */
    size_t (*diff8)(const uint8_t *a, const uint8_t *b, size_t n, uint32_t *idx);
    size_t (*diff16)(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx);
    size_t (*diff32)(const uint32_t *a, const uint32_t *b, size_t n, uint32_t *idx);
    /* diff16's count alone: the i < n where a[i] != b[i] (bitwise), nothing written. */
    size_t (*count16)(const uint16_t *a, const uint16_t *b, size_t n);
    /* diff16 that also extracts the changed elements in the same pass: va[j] = a[idx[j]],
     * vb[j] = b[idx[j]] for j < the returned count (the encoder then never touches the
     * chunk again). idx, va and vb each need room for n entries plus 64 of slack. */
    size_t (*diff_extract16)(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx,
                             uint16_t *va, uint16_t *vb);
    /* diff16 for the ulp code, fused with its encoding: the gaps of the changed positions
     * (as gaps_encode computes them) go straight out as LEB128 bytes (the patch's position
     * stream) to leb, and z[j] = zigzag(b - a) at each change (as ulp_encode16). Returns the
     * count; *leb_len gets the gap bytes. leb needs room for 5n bytes plus 64 of slack, z for
     * n entries plus 64; the slack may be scribbled. */
    size_t (*diff_ulp16)(const uint16_t *a, const uint16_t *b, size_t n, uint8_t *leb, size_t *leb_len,
                         uint16_t *z);

    /* The 2-bit symbols of the ulp code of k 16-bit zigzag values (each z >= 1): symbol
     * min(z, 4) - 1, four to a byte from the low bits up, ceil(k/4) bytes to packed (the
     * padding bits zero; room for 64 more bytes of slack); each z >= 4 appends LEB128(z - 4)
     * to esc (room for 3k bytes plus 64 of slack). Counts every z into hist (hist[z] for
     * z < 256, hist[0] for z >= 256; added to, not cleared). Returns the escape bytes. */
    size_t (*ulp_pack2_16)(const uint16_t *z, size_t k, uint8_t *packed, uint8_t *esc, uint32_t hist[256]);

    /* extract: out[j] = src[idx[j]] for j < k. */
    void (*gather8)(const uint8_t *src, const uint32_t *idx, size_t k, uint8_t *out);
    void (*gather16)(const uint16_t *src, const uint32_t *idx, size_t k, uint16_t *out);
    void (*gather32)(const uint32_t *src, const uint32_t *idx, size_t k, uint32_t *out);

    /* apply absolute values: dst[idx[j]] = v[j]. */
    void (*scatter8)(uint8_t *dst, const uint32_t *idx, size_t k, const uint8_t *v);
    void (*scatter16)(uint16_t *dst, const uint32_t *idx, size_t k, const uint16_t *v);
    void (*scatter32)(uint32_t *dst, const uint32_t *idx, size_t k, const uint32_t *v);

    /* ulp encode: out[j] = zigzag(b[idx[j]] - a[idx[j]]), the difference of the bit patterns
     * taken modulo 2^width as a signed number, zigzag-mapped (0,-1,1,-2.. -> 0,1,2,3..). */
    void (*ulp_encode8)(const uint8_t *a, const uint8_t *b, const uint32_t *idx, size_t k, uint8_t *out);
    void (*ulp_encode16)(const uint16_t *a, const uint16_t *b, const uint32_t *idx, size_t k, uint16_t *out);
    void (*ulp_encode32)(const uint32_t *a, const uint32_t *b, const uint32_t *idx, size_t k, uint32_t *out);

    /* ulp apply: dst[idx[j]] += unzigzag(z[j]) modulo 2^width. */
    void (*ulp_apply8)(uint8_t *dst, const uint32_t *idx, size_t k, const uint8_t *z);
    void (*ulp_apply16)(uint16_t *dst, const uint32_t *idx, size_t k, const uint16_t *z);
    void (*ulp_apply32)(uint32_t *dst, const uint32_t *idx, size_t k, const uint32_t *z);

    /* ulp to absolute (the squash of one ulp patch, which a follower journals before its
     * writes): v[j] = base[idx[j]] + unzigzag(z[j]) modulo 2^width. v does not alias z. */
    void (*ulp_to_abs8)(const uint8_t *base, const uint32_t *idx, size_t k, const uint8_t *z, uint8_t *v);
    void (*ulp_to_abs16)(const uint16_t *base, const uint32_t *idx, size_t k, const uint16_t *z, uint16_t *v);
    void (*ulp_to_abs32)(const uint32_t *base, const uint32_t *idx, size_t k, const uint32_t *z, uint32_t *v);

    /* positions <-> gaps: gaps[0] = idx[0], gaps[j] = idx[j] - idx[j-1] - 1 (idx ascending). */
    void (*gaps_encode)(const uint32_t *idx, size_t k, uint32_t *gaps);
    /* inverse prefix sum; returns 0, or -1 when a position would reach `limit` or wrap
     * (the caller refuses the chunk; idx contents are then unspecified). */
    int (*gaps_decode)(const uint32_t *gaps, size_t k, uint32_t limit, uint32_t *idx);

    /* LoCo visibility gate with error feedback, one per view (index by pulse_view). For each
     * i < n, in FP32 with two separate roundings: a = delta[i] + e[i]; x = theta[i] - a.
     * Entry i "changes" when theta[i] or a is NaN/Inf, or view(x) != view(theta[i]) bitwise.
     * Changes: idx[k] = i, val[k] = a, k++, e[i] = +0 (a NaN a is emitted as 0x7fc00000: NaN
     * payloads depend on operand order, which compilers may swap). Else: e[i] = a. Returns k. idx and val
     * need room for n entries; those from the returned k on are scratch (SIMD versions write
     * whole vectors there). delta may be e (a = 2e then); the outputs overlap nothing. Results
     * are bit-identical across ISAs under the default FP environment (round to nearest, no
     * FTZ/DAZ: a caller that sets those gets its own, different bits). */
    size_t (*gate[PULSE_VIEW_COUNT])(const float *theta, const float *delta, float *e, size_t n,
                                     uint32_t *idx, float *val);

    /* Receiver's check of a shard against theta (n elements): positions strictly ascending and
     * < n, values finite, and every (idx[j], val[j]) changes under gate[view] with e = 0, i.e.
     * view(theta[i] - val[j]) != view(theta[i]) or theta[i] not finite. Returns PULSE_GATE_OK,
     * or a PULSE_GATE_* code with *bad = j of the first failing entry (earliest j wins; for one
     * j the order of tests is the order of the codes: unsorted, range, not finite, invisible). */
    int (*gate_check[PULSE_VIEW_COUNT])(const float *theta, size_t n, const uint32_t *idx,
                                        const float *val, size_t k, size_t *bad);

    /* Aggregation: acc[idx[j]] += v[j] for j = 0..k-1 in that order (FP32, one rounding per
     * add; repeated positions add in order; a NaN sum is stored as 0x7fc00000, whatever the
     * operands' payloads, as the gate's NaN). Positions must be < the length of acc (the caller
     * checked them with gate_check). */
    void (*scatter_add_f32)(float *acc, const uint32_t *idx, size_t k, const float *v);

    /* LEB128 gap streams (patch positions): the length r of the run of bytes < 0x80 (gaps
     * coded in one byte) at the start of src[0..n), i.e. the index of the first byte >= 0x80,
     * or n; adds the sum of those r bytes to *sum. Reads no byte at or past n. Apply's check
     * pass: r gaps at once, their positions advance by sum + r. */
    size_t (*leb1_run)(const uint8_t *src, size_t n, uint64_t *sum);

    /* Apply's add of one 16-bit ulp chunk coded with 2-bit symbols, from streams that were
     * checked before (pass 1: patch_leb_check, ulp2_check16) and lie in private memory:
     * gaps = glen bytes holding exactly k LEB128 gaps whose positions stay inside d's chunk;
     * packed = ceil(k/4) bytes of symbols (as ulp_pack2_16 writes them) followed by 4 zero
     * bytes; esc = one LEB128(z - 4) per symbol 3, in order. For the j-th change, at position
     * p_j = p_{j-1} + 1 + gap_j (p_{-1} = -1): d[p_j] += unzigzag(z_j) modulo 2^16, z_j =
     * symbol + 1, or the escape's value + 4. Nothing is checked: other inputs are undefined.
     * Reads no byte of gaps past glen, of packed past the 4 padding bytes, of esc past the
     * last escape. */
    void (*ulp2_add16)(uint16_t *d, const uint8_t *gaps, size_t glen, const uint8_t *packed,
                       const uint8_t *esc, size_t k);

    /* Rice-coded gaps (the position stream's Rice coding, docs/patch-format.md) back to
     * LEB128. src[0..len) holds a remainder plane, k fields of `shift` bits (field j at bit
     * j*shift, LSB first; pulse_rice_rem_bytes(k, shift) bytes, zero padding), then a unary
     * plane: per gap, gap >> shift zero bits then a one bit, LSB first; the k-th one lies in
     * the last byte and the bits after it are zero. Gap j is (quotient << shift) | field j.
     * Writes the k gaps as LEB128 to leb and their bytes to *leb_len. Returns 0, or, checked
     * gap by gap in order as patch_leb_positions does, -1 (the planes end before k gaps), -2
     * (a gap >= 2^32), -4 (a position, previous + gap + 1 from -1 on, reaches limit); after
     * the k gaps, -3 (bytes after the k-th one, or nonzero padding in either plane). leb needs
     * room for pulse_rice_leb_room(k, limit) bytes plus 64 of slack that may be scribbled;
     * *leb_len and leb are unspecified after an error. k >= 1, shift <= 31. Reads no byte at or
     * past len. */
    int (*rice_gaps)(const uint8_t *src, size_t len, size_t k, unsigned shift, uint32_t limit, uint8_t *leb,
                     size_t *leb_len);
    /* The encoder's side: the Rice planes of the k gaps given as LEB128 in leb[0..len) (a valid
     * stream of exactly k gaps, the encoder's own: nothing is checked) at `shift` <= 31, to out;
     * returns their bytes. out needs room for pulse_rice_rem_bytes(k, shift) + (sum of
     * (gap >> shift) + k + 7) / 8 bytes plus 64 of slack that may be scribbled. */
    size_t (*rice_put)(const uint8_t *leb, size_t len, size_t k, unsigned shift, uint8_t *out);

    /* The context coder of format 5 (docs/patch-format.md, "Context-coded chunks"), on a BF16
     * chunk a[0..n) (an F16 chunk's exponents are placed there first, by patch_ctxcode.c).
     * exp(x) = (x >> 7) & 0xFF. ctx_ebase16: the chunk's exponent base, the
     * largest exp(a[i]) minus 15, clamped at 0 (0 when n == 0). */
    unsigned (*ctx_ebase16)(const uint16_t *a, size_t n);
    /* The bands of a (band(x) = min(max(exp(x) - ebase, 0), 15), ebase <= 240) per word w of 64
     * elements (elements 64w..64w+63, nw = ceil(n / 64) words): bit j of plane[5w + k] is bit k
     * of the band of a[64w + j], plane[5w + 4] the valid bits (bits j with 64w + j < n; the
     * other planes are 0 there); wc[16w + b] = the elements of band b in word w; members[b] =
     * those of the whole chunk. When b != NULL also chw[w]: bit j set where a[64w + j] !=
     * b[64w + j] (0 past n). n >= 1. The members of band b in word w are then
     * plane[5w + 4] & AND over k of (bit k of b ? plane[5w + k] : ~plane[5w + k]). When bc !=
     * NULL also the same counts band after band: bc[nw b + w] = wc[16w + b] (a band's counts
     * contiguous, for ctx_select). Returns a's own exponent base (ctx_ebase16(a, n)), so that a
     * decoder given the base in the stream makes the planes and checks it in one pass. */
    unsigned (*ctx_planes16)(const uint16_t *a, const uint16_t *b, size_t n, unsigned ebase, uint64_t *plane,
                             uint8_t *wc, uint8_t *bc, uint32_t members[16], uint64_t *chw);
    /* The positions of band `band`'s members by rank (their index among the band's members in
     * ascending position), from ctx_planes16's plane and the band's counts bc[0..nw) (its bc +
     * nw band) over nw words. rank[0..c) strictly
     * ascending, each below the band's members. invert == 0: pos[j] = the position of member
     * rank[j] for j < c (pos may be rank: each is read before it is written); returns c.
     * invert != 0: the positions of the members whose rank is not listed, ascending, to pos
     * (room for members - c; not rank); returns members - c. */
    size_t (*ctx_select)(const uint64_t *plane, const uint8_t *bc, size_t nw, unsigned band, const uint32_t *rank,
                         size_t c, int invert, uint32_t *pos);
    /* The encoder's side: with ctx_planes16's plane, wc and chw of a (OLD) and b (NEW) over nw
     * words, each change (bit j of chw[w], position i = 64w + j) in ascending position goes to
     * the list of its band (of a[i]): at list slot t = cnt[band]++, gap[off[band] + t] = its rank
     * among the band's members minus the previous listed rank minus 1 (the first: the rank),
     * z[off[band] + t] = zigzag((int16_t)(b[i] - a[i])) (as ulp_encode16). cnt is set here;
     * off[band] + the band's members must fit gap and z (off = the members' prefix sums do).
     * Returns the changes. */
    size_t (*ctx_gaps16)(const uint16_t *a, const uint16_t *b, const uint64_t *plane, const uint8_t *wc,
                         const uint64_t *chw, size_t nw, const uint32_t off[16], uint32_t *gap, uint16_t *z,
                         uint32_t cnt[16]);
} pulse_kernels;

/* Bytes of the remainder plane of k Rice fields of `shift` bits. */
static inline size_t pulse_rice_rem_bytes(size_t k, unsigned shift)
{
    return (k * shift + 7) / 8;
}

/* The most LEB128 bytes k gaps whose positions stay below limit can take: one each, and one
 * more for each gap of 2^7, 2^14, 2^21 and 2^28 or more (a gap g needs g + 1 of the limit). */
static inline size_t pulse_rice_leb_room(size_t k, uint32_t limit)
{
    size_t n = k;
    for (unsigned b = 7; b <= 28; b += 7) {
        size_t most = limit / (((size_t)1 << b) + 1);
        n += most < k ? most : k;
    }
    return n;
}

/* The best table for this CPU (honouring PULSE_CPU_MASK), filled once; never NULL. */
const pulse_kernels *pulse_kernels_get(void);

/* Tables for tests and benchmarks: the reference and each ISA this build has. Each init
 * fills only what it implements over an existing table (start from _c). Returns 0 when
 * the ISA is compiled in AND the CPU has it, -1 otherwise (table left unchanged). */
void pulse_kernels_init_c(pulse_kernels *k);
int pulse_kernels_init_avx2(pulse_kernels *k);
int pulse_kernels_init_avx512(pulse_kernels *k);
int pulse_kernels_init_neon(pulse_kernels *k);

#endif
