/* SPDX-License-Identifier: Apache-2.0 */
/* The context coder of format 5: a BF16 or F16 chunk's changed positions as Rice gaps among the members of each old value's exponent band, its ulp differences as static rANS symbols with one table per band (docs/patch-format.md). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "base/leb128.h"
#include "node/kernels/kernels.h"
#include "node/patch/patch_ctxcode.h"
#include "node/patch/patch_ctxvalue.h"

/* The 64-bit loads of bytes below (bit planes, bit readers) read them in memory order. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "patch_ctxcode.c assumes a little-endian target"
#endif

#define NB PATCH_CTX_BANDS
#define NSYM 20u                /* z = 1..7 as 0..6, then 7 + bitlen(z) - 4 for bitlen 4..16 */
#define NDIRECT 7u
#define TAB_BITS 10u
#define TAB_TOTAL (1u << TAB_BITS)
#define RANS_L (1u << 23)       /* the state's lower bound; states live in [RANS_L, RANS_L << 8) */
#define CTX_TWO_STATES_MIN 256u /* changes from which a chunk's values take two rANS states */
#define MAX_S 24u               /* largest Rice parameter */
#define HEAD_MAX (2u + NB * (1u + 2u * 5u)) /* longest position stream header */
/* a head of a band's values is at most its value mode and centre (1 + 3), its table, of
 * frequencies (20 x <= 2) or of counts (a set of <= 3 bytes and 19 counts of <= 5), and its
 * direction coding (<= 5); BAND_VALUE_HEAD_MAX is larger because the bound decides which small
 * chunks a diff context-codes at all, so it stays what patches have been written with */
#define COUNT_TABLE_MAX (3u + (NSYM - 1u) * 5u)
#define BAND_VALUE_HEAD_MAX (5u + 2u * COUNT_TABLE_MAX)

enum { MODE_NONE = 0, MODE_CHANGED = 1, MODE_UNCHANGED = 2, MODE_REFUSED = 3 };
/* A band's value mode: what its symbols code. VM_DIFF z itself; VM_CENTRED |d| around the
 * band's centre C with d's sign as a raw bit (an update of nearly one size moves every member
 * of an exponent by nearly the same ulps); VM_PRED the new value's distance in BF16 steps from
 * old -+ L (L the BF16 value C), the step's direction as a raw bit (the same update as a value,
 * which also predicts weights smaller than it, far in ulps from where they started). */
enum { VM_DIFF = 0, VM_CENTRED = 1, VM_PRED = 2 };
/* How a value-mode band codes its changes' direction bits: raw (in the escape bits), or as rANS
 * symbols of whether each falls (its bit pattern goes down). */
enum { SD_RAW = 0, SD_FALL = 1 };
#define HEAD_VMODE 0x80u        /* a band header's bit 7: the band's table starts with its value mode */
#define VM_CENTRED_MAX 16384u   /* so that zigzag(|d| - C) + 1 stays below 2^16 */
#define VM_PRED_MAX 0x7F7Fu     /* C: a positive finite BF16 value */
#define SAMPLE_MAX 8192u        /* changes of a band the encoder weighs its value modes on */

struct patch_ctx_scratch {
    uint32_t cap;               /* chunk_elems */
    uint64_t *plane;            /* per 64 elements: the band's 4 bit planes, then the valid bits */
    uint8_t *wc;                /* per 64 elements: each band's members there (wcount) */
    uint8_t *bc;                /* the same band after band (the decoder's ctx_select) */
    uint32_t *rank;             /* one band's listed member indices (cap / 2 + 1): the decoder's
                                 * unchanged ones, the encoder's unchanged gaps */
    /* The encoder's, allocated on its first use (a decoding thread never needs them). */
    uint64_t *chw;              /* per 64 elements: the changed bits */
    uint32_t *gap;              /* the changed members' gaps, band after band (cap) */
    uint16_t *vz;               /* z in decode order (cap), then the symbols' values */
    uint8_t *rbuf;              /* the rANS bytes, written backwards (3 cap + 16) */
    uint32_t *samp;             /* the value modes' sample of a band (3 SAMPLE_MAX) */
    uint16_t *key;              /* an F16 chunk's exponents where BF16 has its own (cap), on first use */
    int one_state;              /* write one rANS state, for tests */
    int freq_tables;            /* write frequency tables, for tests */
    int raw_signs;              /* write a value mode's direction bits raw, for tests */
};

/* ---- small helpers ------------------------------------------------------------------- */

static int ctx_fail(int err, const char *tensor, uint64_t chunk, const char *stream, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int ctx_fail(int err, const char *tensor, uint64_t chunk, const char *stream, const char *fmt, ...)
{
    char what[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pulse_fail(err, "tensor %s chunk %llu: %s stream: %s", tensor ? tensor : "?",
                      (unsigned long long)chunk, stream, what);
}

/* A LEB128 value in its shortest form (so that one chunk has one coding): 0, or -1 when the
 * bytes end first, -2 when it does not fit 32 bits or is not the shortest. */
static int leb_read(const uint8_t *p, size_t len, size_t *at, uint32_t *v)
{
    size_t start = *at;
    int r = pulse_leb_get(p, len, at, v);
    if (r)
        return r;
    if (*at - start > 1 && p[*at - 1] == 0)
        return -2;
    return 0;
}

static inline unsigned exp_of(uint16_t v)
{
    return (v >> 7) & 0xFFu;
}

static inline unsigned band_of(uint16_t v, unsigned ebase)
{
    unsigned e = exp_of(v), b = e > ebase ? e - ebase : 0;
    return b > NB - 1 ? NB - 1 : b;
}

static inline uint16_t zigzag_d(int16_t d)
{
    return (uint16_t)(((uint16_t)d << 1) ^ (uint16_t)(d >> 15));
}

static inline uint16_t zigzag(uint16_t old, uint16_t neu)
{
    return zigzag_d((int16_t)(uint16_t)(neu - old));
}

/* x >= 0 to 2x, x < 0 to -2x - 1, and back */
static inline uint32_t zigzag32(int32_t x)
{
    return x >= 0 ? 2u * (uint32_t)x : 2u * (uint32_t)(-x) - 1u;
}

/* d (mod 2^16) of a zigzag z */
static inline uint16_t unzigzag_z(uint16_t z)
{
    return (uint16_t)((z >> 1) ^ (0u - (z & 1u)));
}

static inline int32_t unzigzag32(uint32_t u)
{
    return (int32_t)(u >> 1) ^ -(int32_t)(u & 1u);
}

static inline unsigned bitlen16(uint16_t z)
{
    return 32u - (unsigned)__builtin_clz((unsigned)z);
}

static inline unsigned zsym(uint16_t z)
{
    return z <= NDIRECT ? z - 1u : NDIRECT + bitlen16(z) - 4u;
}

/* ---- bit reader (LSB first), bounded --------------------------------------------------- */

typedef struct bitrd {
    const uint8_t *p, *end;
    uint64_t acc;               /* the next n bits; nothing above them */
    unsigned n;
} bitrd;

static inline void br_fill(bitrd *r)
{
    if (r->end - r->p >= 8) {
        uint64_t v;
        memcpy(&v, r->p, 8);
        unsigned take = (63 - r->n) >> 3;
        r->acc |= (v & ((1ull << (8 * take)) - 1)) << r->n;
        r->p += take;
        r->n += 8 * take;
    } else {
        while (r->n <= 56 && r->p < r->end) {
            r->acc |= (uint64_t)*r->p++ << r->n;
            r->n += 8;
        }
    }
}

/* One Rice value: 0, or -1 when the stream ends inside it. */
static inline int br_rice(bitrd *r, unsigned s, uint64_t *g)
{
    uint64_t q = 0;
    for (;;) {
        if (r->n < 57)
            br_fill(r);
        if (r->acc) {
            unsigned t = (unsigned)__builtin_ctzll(r->acc);
            q += t;
            r->acc >>= t;
            r->acc >>= 1;
            r->n -= t + 1;
            break;
        }
        if (r->n == 0)
            return -1;
        q += r->n;
        r->n = 0;
    }
    uint64_t low = 0;
    if (s) {
        if (r->n < s)
            br_fill(r);
        if (r->n < s)
            return -1;
        low = r->acc & ((1ull << s) - 1);
        r->acc >>= s;
        r->n -= s;
    }
    *g = (q << s) | low;
    return 0;
}

/* nb (<= 32) raw bits: 0, or -1 when the stream ends first. */
static inline int br_bits(bitrd *r, unsigned nb, uint32_t *v)
{
    if (r->n < nb)
        br_fill(r);
    if (r->n < nb)
        return -1;
    *v = (uint32_t)(r->acc & ((1ull << nb) - 1));
    r->acc >>= nb;
    r->n -= nb;
    return 0;
}

/* Everything read, the stream exactly ceil(bits / 8) bytes long and its padding zero. */
static inline int br_done(const bitrd *r)
{
    return r->p == r->end && r->n < 8 && r->acc == 0;
}

/* ---- bit writer (LSB first), bounded ---------------------------------------------------- */

typedef struct bitwr {
    uint8_t *p, *end;
    uint64_t acc;
    unsigned n;
    int over;                   /* a byte did not fit */
} bitwr;

static inline void bw_put(bitwr *w, uint64_t v, unsigned nb) /* nb <= 32 */
{
    w->acc |= v << w->n;
    w->n += nb;
    while (w->n >= 8) {
        if (w->p < w->end)
            *w->p++ = (uint8_t)w->acc;
        else
            w->over = 1;
        w->acc >>= 8;
        w->n -= 8;
    }
}

static void bw_flush(bitwr *w)
{
    if (w->n)
        bw_put(w, 0, 8 - w->n);
}

static inline void bw_rice(bitwr *w, uint32_t g, unsigned s)
{
    uint32_t q = g >> s;
    while (q >= 32) {
        bw_put(w, 0, 32);
        q -= 32;
    }
    bw_put(w, 1ull << q, q + 1);
    if (s)
        bw_put(w, g & ((1u << s) - 1), s);
}

/* ---- scratch ---------------------------------------------------------------------------- */

patch_ctx_scratch *patch_ctx_scratch_new(uint32_t chunk_elems)
{
    if (!chunk_elems) {
        pulse_fail(PULSE_ERR_INVALID, "context coder: chunk of 0 elements");
        return NULL;
    }
    patch_ctx_scratch *s = calloc(1, sizeof *s);
    if (!s) {
        pulse_fail(PULSE_ERR_NOMEM, "context coder scratch");
        return NULL;
    }
    s->cap = chunk_elems;
    size_t nw = ((size_t)chunk_elems + 63) / 64;
    s->plane = malloc(nw * 5 * sizeof *s->plane);
    s->wc = malloc(nw * 16);
    s->bc = malloc(nw * 16);
    s->rank = malloc(((size_t)chunk_elems / 2 + 1) * sizeof *s->rank);
    if (!s->plane || !s->wc || !s->bc || !s->rank) {
        free(s->plane);
        free(s->wc);
        free(s->bc);
        free(s->rank);
        free(s);
        pulse_fail(PULSE_ERR_NOMEM, "context coder scratch (%u elements)", chunk_elems);
        return NULL;
    }
    return s;
}

void patch_ctx_scratch_free(patch_ctx_scratch *s)
{
    if (!s)
        return;
    free(s->plane);
    free(s->wc);
    free(s->bc);
    free(s->rank);
    free(s->chw);
    free(s->gap);
    free(s->vz);
    free(s->rbuf);
    free(s->samp);
    free(s->key);
    free(s);
}

void patch_ctx_one_state(patch_ctx_scratch *s, int one_state)
{
    s->one_state = one_state != 0;
}

void patch_ctx_freq_tables(patch_ctx_scratch *s, int freq_tables)
{
    s->freq_tables = freq_tables != 0;
}

void patch_ctx_raw_signs(patch_ctx_scratch *s, int raw_signs)
{
    s->raw_signs = raw_signs != 0;
}

static int scratch_encoder(patch_ctx_scratch *s)
{
    if (s->rbuf)
        return 0;
    size_t cap = s->cap;
    s->chw = malloc((cap + 63) / 64 * sizeof *s->chw);
    s->gap = malloc(cap * sizeof *s->gap);
    s->vz = malloc(cap * sizeof *s->vz);
    s->rbuf = malloc(3 * cap + 16);
    s->samp = malloc(3 * SAMPLE_MAX * sizeof *s->samp);
    if (!s->chw || !s->gap || !s->vz || !s->rbuf || !s->samp) {
        free(s->chw);
        free(s->gap);
        free(s->vz);
        free(s->rbuf);
        free(s->samp);
        s->samp = NULL;
        s->chw = NULL;
        s->gap = NULL;
        s->vz = NULL;
        s->rbuf = NULL;
        return pulse_fail(PULSE_ERR_NOMEM, "context coder scratch (%u elements)", s->cap);
    }
    return 0;
}

/* ---- bound -------------------------------------------------------------------------------- */

/* Rice: a band's G gaps summing to S (<= n) cost at most G (log2(S / G) + 3) + S / 2^24 bits at
 * s* = min(24, floor(log2(S / G))), which the encoder always tries (and at most 2G when S < G);
 * over <= 16 bands with G <= k gaps in all that is at most k (log2(16 n / k) + 3) + n / 2^24.
 * rANS: a symbol of frequency f grows the state by at most (1024 / f)(1 + 2^-13) (the state
 * divided by f is >= 2^13 when it is coded), so the bytes out are at most (10k + k / 4096) / 8,
 * plus the 4-byte state, for one symbol a change; twice that where a direction bit is a symbol
 * too (falls, in a band with a value mode). A sign and escape bits: at most 16 bits a change. Value modes: at most 4
 * bytes a band. */
size_t patch_ctx_bound(uint32_t n, size_t k)
{
    if (k > n)
        k = n;
    if (k == 0)
        k = 1;
    double kd = (double)k;
    double rice_bits = kd * (log2(16.0 * (double)n / kd) + 3.0);
    size_t pos = HEAD_MAX + (size_t)(rice_bits / 8.0) + ((size_t)n >> 27) + NB + 16;
    size_t val = NB * BAND_VALUE_HEAD_MAX + 5 + 8 + (20 * k + k / 2048) / 8 + 2 + (16 * k + 7) / 8 + 16;
    return pos + val;
}

/* Whether a step up in bit-pattern terms is a fall in value terms: for a negative old value
 * (sign bit set) when old_for_value is it (the predicted mode's direction bit is a value's). */
static inline int up_falls(uint16_t old_for_value)
{
    return (old_for_value & 0x8000u) != 0;
}

/* The frequency (of TAB_TOTAL) of a direction bit that falls, for r falling of c: 0 or TAB_TOTAL
 * when none or all do (the other then never decodes), else r / c scaled, kept in [1, TAB_TOTAL). */
static uint16_t fall_freq(uint32_t r, uint32_t c)
{
    if (r == 0 || r == c)
        return r ? TAB_TOTAL : 0;
    uint64_t f = ((uint64_t)r << TAB_BITS) / c;
    return (uint16_t)(f < 1 ? 1 : f > TAB_TOTAL - 1 ? TAB_TOTAL - 1 : f);
}

/* Frequencies of a band's symbols scaled to sum TAB_TOTAL, each seen symbol at least 1: the
 * encoder's table, and the decoder's from a count table (the same integer steps both sides). */
static void norm_freq(const uint32_t *cnt, uint16_t *f)
{
    uint64_t tot = 0;
    for (unsigned y = 0; y < NSYM; y++)
        tot += cnt[y];
    int sum = 0;
    unsigned best = 0;
    for (unsigned y = 0; y < NSYM; y++) {
        uint32_t v = cnt[y] ? (uint32_t)(((uint64_t)cnt[y] << TAB_BITS) / tot) : 0;
        if (cnt[y] && !v)
            v = 1;
        f[y] = (uint16_t)v;
        sum += (int)v;
        if (cnt[y] > cnt[best])
            best = y;
    }
    /* rounding: the rest to the most frequent symbol; an excess (the minimum of 1 for rare
     * symbols, at most NSYM) taken from the largest, which stays far above 1 */
    if (sum < (int)TAB_TOTAL)
        f[best] = (uint16_t)(f[best] + (TAB_TOTAL - (unsigned)sum));
    while (sum > (int)TAB_TOTAL) {
        unsigned big = 0;
        for (unsigned y = 1; y < NSYM; y++)
            if (f[y] > f[big])
                big = y;
        f[big]--;
        sum--;
    }
}

/* ---- the parsed streams (shared by check and decode) --------------------------------------- */

typedef struct ctx_head {
    unsigned ebase;
    uint8_t mode[NB], s[NB];
    uint32_t c[NB], len[NB];
    size_t rice_at;             /* where the Rice streams start in pos */
    uint8_t vm[NB];             /* value mode (VM_*) */
    uint32_t vc[NB];            /* its centre C (VM_CENTRED, VM_PRED) */
    uint16_t freq[NB][NSYM];
    unsigned states;            /* rANS states: 1, or 2 (PATCH_CTX_TWO_STATES) */
    int counts;                 /* count tables (PATCH_CTX_COUNT_TABLES) */
    uint8_t sdir[NB];           /* a band with a value mode: how its direction bits are coded (SD_*) */
    uint16_t fall[NB];          /* sdir SD_FALL: the frequency (of TAB_TOTAL) of its direction bits
                                 * that fall */
    size_t rans_at, rans_len;   /* in val */
    size_t esc_at;              /* the escape bits: val[esc_at .. val_len) */
} ctx_head;

#define PFAIL(...) ctx_fail(PULSE_ERR_FORMAT, tensor, chunk, "position", __VA_ARGS__)
#define VFAIL(...) ctx_fail(PULSE_ERR_FORMAT, tensor, chunk, "value", __VA_ARGS__)

/* A frequency table: 20 LEB128 frequencies summing to TAB_TOTAL. */
static int parse_freqs(const uint8_t *val, size_t val_len, size_t *at, unsigned b, uint16_t *freq,
                       const char *tensor, uint64_t chunk)
{
    uint32_t tot = 0;
    for (unsigned y = 0; y < NSYM; y++) {
        uint32_t f;
        int r = leb_read(val, val_len, at, &f);
        if (r)
            return VFAIL("band %u: table %s", b, r == -1 ? "truncated" : "malformed");
        if (f > TAB_TOTAL)
            return VFAIL("band %u: frequency %u above %u", b, f, TAB_TOTAL);
        freq[y] = (uint16_t)f;
        tot += f;
    }
    if (tot != TAB_TOTAL)
        return VFAIL("band %u: frequencies add up to %u, not %u", b, tot, TAB_TOTAL);
    return 0;
}

/* A count table of a band of c changes: the set of its symbols (LEB128, bit y = symbol y, not
 * empty), then for each of them but the last, ascending, LEB128 its count - 1; the last one's
 * count is c minus theirs, which must leave it at least 1. The frequencies are norm_freq's of
 * the counts. */
static int parse_counts(const uint8_t *val, size_t val_len, size_t *at, unsigned b, uint32_t c, uint16_t *freq,
                        const char *tensor, uint64_t chunk)
{
    uint32_t set;
    int r = leb_read(val, val_len, at, &set);
    if (r)
        return VFAIL("band %u: symbol set %s", b, r == -1 ? "truncated" : "malformed");
    if (!set || set >> NSYM)
        return VFAIL("band %u: symbol set %#x empty or past the %u symbols", b, set, NSYM);
    unsigned last = 31u - (unsigned)__builtin_clz(set);
    uint32_t cnt[NSYM] = {0};
    uint64_t sum = 0;
    for (unsigned y = 0; y < last; y++) {
        if (!(set >> y & 1u))
            continue;
        uint32_t v;
        r = leb_read(val, val_len, at, &v);
        if (r)
            return VFAIL("band %u: symbol %u's count %s", b, y, r == -1 ? "truncated" : "malformed");
        sum += (uint64_t)v + 1;
        if (sum >= c)
            return VFAIL("band %u: symbol counts add up to %llu or more of its %u changes before symbol %u", b,
                         (unsigned long long)sum, c, last);
        cnt[y] = v + 1;
    }
    cnt[last] = c - (uint32_t)sum;
    norm_freq(cnt, freq);
    return 0;
}

static int parse_head(pulse_dtype dt, const uint8_t *pos, size_t pos_len, const uint8_t *val,
                      size_t val_len, size_t k, uint32_t n, ctx_head *h, const char *tensor, uint64_t chunk)
{
    if (!patch_ctx_dtype_ok(dt))
        return PFAIL("context coding on a chunk of dtype %d", (int)dt);
    if (!pos || pos_len < 1)
        return PFAIL("empty");
    if (!patch_pos_is_context(pos[0]))
        return ctx_fail(PULSE_ERR_UNSUPPORTED, tensor, chunk, "position",
                        "coding byte %u is not the context coder's (%u..%u)", pos[0], PATCH_POS_CONTEXT,
                        PATCH_POS_CONTEXT_LAST);
    h->states = pos[0] & PATCH_CTX_TWO_STATES ? 2 : 1;
    h->counts = (pos[0] & PATCH_CTX_COUNT_TABLES) != 0;
    const int signs = (pos[0] & PATCH_CTX_SIGN_SYMBOLS) != 0;
    if (pos[0] & PATCH_CTX_PREV_DIRS)
        return ctx_fail(PULSE_ERR_UNSUPPORTED, tensor, chunk, "position",
                        "coding byte %u codes values by the previous step's directions (format 6), which is "
                        "no longer read", pos[0]);
    if (signs && !h->counts)
        return PFAIL("coding byte %u: sign symbols without count tables", pos[0]);
    if (n == 0 || k == 0 || k > n)
        return PFAIL("%zu changes in a chunk of %u elements", k, n);
    if (pos_len < 2)
        return PFAIL("ends before its exponent base");
    h->ebase = pos[1];
    if (h->ebase > 255 - (NB - 1))
        return PFAIL("exponent base %u above %u", h->ebase, 255 - (NB - 1));
    size_t at = 2;
    uint64_t sum_c = 0, sum_len = 0;
    for (unsigned b = 0; b < NB; b++) {
        if (at >= pos_len)
            return PFAIL("ends in the header of band %u", b);
        uint8_t v = pos[at++];
        h->mode[b] = v & 3u;
        h->s[b] = (uint8_t)((v >> 2) & 31u);
        h->vm[b] = (v & HEAD_VMODE) ? 0xFF : VM_DIFF;   /* read with the tables */
        h->c[b] = h->len[b] = 0;
        if (h->mode[b] == MODE_REFUSED)
            return PFAIL("band %u: mode 3", b);
        if (h->s[b] > MAX_S)
            return PFAIL("band %u: Rice parameter %u above %u", b, h->s[b], MAX_S);
        if (h->mode[b] == MODE_NONE) {
            if (h->s[b] || h->vm[b])
                return PFAIL("band %u: %s with no change", b, h->s[b] ? "a Rice parameter" : "a value mode");
            continue;
        }
        int r = leb_read(pos, pos_len, &at, &h->c[b]);
        if (r)
            return PFAIL("band %u: change count %s", b, r == -1 ? "truncated" : "malformed");
        if (h->c[b] == 0 || h->c[b] > n)
            return PFAIL("band %u: %u changes in a chunk of %u elements", b, h->c[b], n);
        r = leb_read(pos, pos_len, &at, &h->len[b]);
        if (r)
            return PFAIL("band %u: stream length %s", b, r == -1 ? "truncated" : "malformed");
        sum_c += h->c[b];
        sum_len += h->len[b];
    }
    if (sum_len != pos_len - at)
        return PFAIL("Rice streams of %llu bytes in the %zu bytes after the header",
                     (unsigned long long)sum_len, pos_len - at);
    if (sum_c != k)
        return PFAIL("band counts add up to %llu changes, not %zu", (unsigned long long)sum_c, k);
    h->rice_at = at;

    if (!val)
        val_len = 0;
    at = 0;
    for (unsigned b = 0; b < NB; b++) {
        if (h->mode[b] == MODE_NONE)
            continue;
        if (h->vm[b]) {
            if (at >= val_len)
                return VFAIL("band %u: ends before its value mode", b);
            uint8_t vm = val[at++];
            if (vm != VM_CENTRED && vm != VM_PRED)
                return VFAIL("band %u: value mode %u", b, vm);
            if (vm == VM_PRED && dt != PULSE_DT_BF16)
                return VFAIL("band %u: predicted value mode in an F16 chunk (BF16 only)", b);
            int r = leb_read(val, val_len, &at, &h->vc[b]);
            if (r)
                return VFAIL("band %u: centre %s", b, r == -1 ? "truncated" : "malformed");
            uint32_t cmax = vm == VM_CENTRED ? VM_CENTRED_MAX : VM_PRED_MAX;
            if (h->vc[b] < 1 || h->vc[b] > cmax)
                return VFAIL("band %u: centre %u outside [1, %u]", b, h->vc[b], cmax);
            h->vm[b] = vm;
        }
        int r = h->counts ? parse_counts(val, val_len, &at, b, h->c[b], h->freq[b], tensor, chunk)
                          : parse_freqs(val, val_len, &at, b, h->freq[b], tensor, chunk);
        if (r)
            return r;
        h->fall[b] = 0;
        h->sdir[b] = SD_RAW;
        if (signs && h->vm[b]) {
            /* the direction bits: 0 (raw) or 2r + 1 (r of them fall); 2r + 2 was format 6's (r
             * turning from the previous direction) */
            uint32_t t;
            if ((r = leb_read(val, val_len, &at, &t)) != 0)
                return VFAIL("band %u: direction coding %s", b, r == -1 ? "truncated" : "malformed");
            if (t && !(t & 1u))
                return VFAIL("band %u: turning directions without the previous directions", b);
            h->sdir[b] = t ? SD_FALL : SD_RAW;
            if (t)
                t = (t - 1) / 2;
            if (t > h->c[b])
                return VFAIL("band %u: %u falling directions of its %u changes", b, t, h->c[b]);
            h->fall[b] = fall_freq(t, h->c[b]);
        }
    }
    uint32_t R;
    int r = leb_read(val, val_len, &at, &R);
    if (r)
        return VFAIL("rANS length %s", r == -1 ? "truncated" : "malformed");
    if (R < 4 * h->states || R > val_len - at)
        return VFAIL("rANS stream of %u bytes in the %zu bytes left", R, val_len - at);
    h->rans_at = at;
    h->rans_len = R;
    h->esc_at = at + R;
    return 0;
}

/* The value stream past its tables: the k symbols of the bands in order (rANS), their sign and
 * escape bits, and that all end exactly. With old and idx (the changes' positions in decode
 * order) z[] receives the differences; without them (no base) the streams are only checked. */
static int decode_values(const ctx_head *h, const uint8_t *val, size_t val_len, const uint16_t *old,
                         const uint32_t *idx, uint16_t *z, const char *tensor, uint64_t chunk)
{
    const uint8_t *rp = val + h->rans_at, *rend = rp + h->rans_len;
    /* x decodes this change, x2 the next (two states: they alternate, each change's step
     * waiting only for the one two changes back; one state: x2 stays at RANS_L, unused) */
    uint32_t x = 0, x2 = RANS_L;
    for (unsigned q = 0; q < h->states; q++) {
        uint32_t v = (uint32_t)rp[0] | (uint32_t)rp[1] << 8 | (uint32_t)rp[2] << 16 | (uint32_t)rp[3] << 24;
        rp += 4;
        if (v < RANS_L || v >= RANS_L << 8)
            return VFAIL("rANS state %u out of range", v);
        if (q)
            x2 = v;
        else
            x = v;
    }
    const int swap = h->states == 2;
    bitrd esc = {val + h->esc_at, val + val_len, 0, 0};
    size_t j = 0;
    for (unsigned b = 0; b < NB; b++) {
        if (h->mode[b] == MODE_NONE)
            continue;
        const unsigned vm = h->vm[b], sd = h->sdir[b];   /* sd is SD_RAW where vm is not */
        const uint32_t C = h->vc[b];
        const double L = vm == VM_PRED ? ctx_bf16_value((uint16_t)C) : 0;
        uint8_t slot[TAB_TOTAL];
        uint16_t cum[NSYM];
        const uint16_t *f = h->freq[b];
        unsigned c = 0;
        for (unsigned y = 0; y < NSYM; y++) {
            cum[y] = (uint16_t)c;
            memset(slot + c, (int)y, f[y]);
            c += f[y];
        }
        for (uint32_t t = 0; t < h->c[b]; t++) {
            uint32_t sl = x & (TAB_TOTAL - 1);
            unsigned y = slot[sl];
            x = f[y] * (x >> TAB_BITS) + sl - cum[y];
            while (x < RANS_L) {
                if (rp >= rend)
                    return VFAIL("rANS stream ends at change %zu", j);
                x = x << 8 | *rp++;
            }
            uint32_t sg = 0;
            /* the sign is known unless it is a value's fall and the old value is not held */
            int sg_known = 1;
            if (sd == SD_FALL) {
                /* the direction bit, a symbol on the same state: whether it falls (in value terms
                 * for the predicted mode) */
                const uint32_t ft = h->fall[b], f0 = TAB_TOTAL - ft, s2 = x & (TAB_TOTAL - 1);
                const uint32_t falls = s2 >= f0;
                x = (falls ? ft : f0) * (x >> TAB_BITS) + s2 - (falls ? f0 : 0);
                while (x < RANS_L) {
                    if (rp >= rend)
                        return VFAIL("rANS stream ends at change %zu", j);
                    x = x << 8 | *rp++;
                }
                sg_known = vm != VM_PRED || (old && idx);
                if (sg_known)
                    sg = falls ^ (vm == VM_PRED && up_falls(old[idx[j]]) ? 1u : 0u);
            }
            if (swap) {
                const uint32_t t2 = x;
                x = x2;
                x2 = t2;
            }
            if (vm && sd == SD_RAW && br_bits(&esc, 1, &sg))
                return VFAIL("sign bits end at change %zu", j);
            uint32_t u;
            if (y < NDIRECT) {
                u = y + 1;
            } else {
                unsigned L = y - NDIRECT + 4;
                uint32_t low;
                if (br_bits(&esc, L - 1, &low))
                    return VFAIL("escape bits end at change %zu", j);
                u = (1u << (L - 1)) | low;
            }
            uint16_t zz = (uint16_t)u;
            if (vm == VM_CENTRED) {
                /* |d| in [1, 32768], and 32768 only as -32768 */
                int32_t v = (int32_t)C + unzigzag32(u - 1);
                if (v < 1 || v > 32768 || (v == 32768 && !sg && sg_known))
                    return VFAIL("band %u: change %zu is %c%d ulps", b, j, sg ? '-' : '+', v);
                zz = zigzag_d((int16_t)(sg ? -v : v));
            } else if (vm == VM_PRED && old) {
                /* u <= 65535: the distance is within +-32767 steps of the prediction */
                uint16_t ov = old[idx[j]], p = ctx_predict(ov, sg, L);
                uint16_t nv = ctx_key16((uint16_t)(ctx_key16(p) + (uint16_t)unzigzag32(u - 1)));
                if (nv == ov)
                    return VFAIL("band %u: change %zu equals its old value", b, j);
                if (ctx_step_down(ov, nv) != sg)
                    return VFAIL("band %u: change %zu steps %s, its direction bit says %s", b, j,
                                 sg ? "up" : "down", sg ? "down" : "up");
                zz = zigzag(ov, nv);
            }
            if (z)
                z[j] = zz;
            j++;
        }
    }
    if (x != RANS_L || x2 != RANS_L)
        return VFAIL("rANS final state %u, not %u", x != RANS_L ? x : x2, RANS_L);
    if (rp != rend)
        return VFAIL("%zu rANS bytes left after the last change", (size_t)(rend - rp));
    if (!br_done(&esc))
        return VFAIL("escape bits do not end with the last change (%zu bytes left, padding %s)",
                     (size_t)(esc.end - esc.p) + esc.n / 8, esc.acc ? "not zero" : "zero");
    return 0;
}

/* Rice streams of the bands that code changed members, without the base: their gaps read,
 * each index below n, the stream ending exactly. */
static int check_rice(const ctx_head *h, const uint8_t *pos, uint32_t n, const char *tensor, uint64_t chunk)
{
    const uint8_t *p = pos + h->rice_at;
    for (unsigned b = 0; b < NB; b++) {
        const uint8_t *q = p;
        p += h->len[b];
        if (h->mode[b] != MODE_CHANGED)
            continue;
        bitrd r = {q, q + h->len[b], 0, 0};
        uint64_t id = 0;
        for (uint32_t j = 0; j < h->c[b]; j++) {
            uint64_t g;
            if (br_rice(&r, h->s[b], &g))
                return PFAIL("band %u: Rice stream ends at gap %u of %u", b, j, h->c[b]);
            id = j ? id + g + 1 : g;
            if (id >= n)
                return PFAIL("band %u: member %llu past the chunk's %u elements", b, (unsigned long long)id, n);
        }
        if (!br_done(&r))
            return PFAIL("band %u: Rice stream does not end with its last gap", b);
    }
    return 0;
}

int patch_ctx_check(pulse_dtype dt, const uint8_t *pos, size_t pos_len, const uint8_t *val, size_t val_len,
                    size_t k, uint32_t n, const char *tensor, uint64_t chunk)
{
    ctx_head h;
    int err = parse_head(dt, pos, pos_len, val, val_len, k, n, &h, tensor, chunk);
    if (!err)
        err = check_rice(&h, pos, n, tensor, chunk);
    if (!err)
        err = decode_values(&h, val, val_len, NULL, NULL, NULL, tensor, chunk);
    return err;
}

/* ---- decode ------------------------------------------------------------------------------- */

/* What the band kernels read for the chunk old[0..n): BF16 patterns themselves, and for F16 the
 * 5-bit exponents placed where BF16 keeps its 8 ((x >> 7) & 0xFF), so that one set of kernels
 * makes both dtypes' bands. NULL (failure set) without memory for them. */
static const uint16_t *band_source(patch_ctx_scratch *s, pulse_dtype dt, const uint16_t *old, uint32_t n)
{
    if (dt == PULSE_DT_BF16)
        return old;
    if (!s->key && !(s->key = malloc((size_t)s->cap * sizeof *s->key))) {
        pulse_fail(PULSE_ERR_NOMEM, "context coder scratch (%u elements)", s->cap);
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        s->key[i] = (uint16_t)((old[i] >> 10 & 0x1Fu) << 7);
    return s->key;
}

/* patch_ctx_decode, and with light set patch_ctx_check_base: a band's listed ranks, checked
 * strictly ascending and below its members, leave no select that can fail, so positions are
 * found only where a value needs its old one (a predicted band's, into idx at their place). */
static int ctx_decode(patch_ctx_scratch *s, pulse_dtype dt, const uint16_t *old, uint32_t n, const uint8_t *pos,
                      size_t pos_len, const uint8_t *val, size_t val_len, size_t k, uint32_t *idx, uint16_t *z,
                      int light, const char *tensor, uint64_t chunk)
{
    if (!s || !old || !idx || !z || n > s->cap)
        return ctx_fail(PULSE_ERR_INVALID, tensor, chunk, "position", "chunk of %u elements, scratch for %u",
                        n, s ? s->cap : 0);
    ctx_head h;
    int err = parse_head(dt, pos, pos_len, val, val_len, k, n, &h, tensor, chunk);
    if (err)
        return err;
    const pulse_kernels *K = pulse_kernels_get();
    const uint16_t *src = band_source(s, dt, old, n);
    if (!src)
        return PULSE_ERR_NOMEM;
    /* the planes at the stream's base, the base's own found in the same pass and compared */
    uint32_t m[NB];
    unsigned eb = K->ctx_planes16(src, NULL, n, h.ebase, s->plane, s->wc, s->bc, m, NULL);
    if (h.ebase != eb)
        return PFAIL("exponent base %u, the base's is %u", h.ebase, eb);
    uint32_t nw = (n + 63) / 64;
    size_t out = 0;
    const uint8_t *p = pos + h.rice_at;
    for (unsigned b = 0; b < NB; b++) {
        const uint8_t *q = p;
        p += h.len[b];
        if (h.mode[b] == MODE_NONE)
            continue;
        uint32_t c = h.c[b], mb = m[b];
        if (c > mb)
            return PFAIL("band %u: %u changes among its %u members", b, c, mb);
        int want = 2 * (uint64_t)c > mb ? MODE_UNCHANGED : MODE_CHANGED;
        if (h.mode[b] != want)
            return PFAIL("band %u: mode %u for %u changes among %u members", b, h.mode[b], c, mb);
        bitrd r = {q, q + h.len[b], 0, 0};
        unsigned sp = h.s[b];
        /* the listed members' indices (mode 1: straight into idx, which the walk turns into
         * positions in place), then the band's walk in the kernel */
        const int place = !light || h.vm[b] == VM_PRED;
        uint32_t G = want == MODE_CHANGED ? c : mb - c, *rk = want == MODE_CHANGED && place ? idx + out : s->rank;
        /* id + 1 of the previous listed member: the first gap is the index itself */
        uint64_t next = 0;
        const uint64_t smask = (1ull << sp) - 1;
        for (uint32_t j = 0; j < G; j++) {
            uint64_t g;
            if (r.n < 57)
                br_fill(&r);
            /* the whole code in the bits held (nearly always): its unary run and low bits at once */
            unsigned t = r.acc ? (unsigned)__builtin_ctzll(r.acc) : 64;
            if (t + 1 + sp <= r.n) {
                g = ((uint64_t)t << sp) | ((r.acc >> t >> 1) & smask);
                r.acc = r.acc >> t >> 1 >> sp;
                r.n -= t + 1 + sp;
            } else if (br_rice(&r, sp, &g)) {
                return PFAIL("band %u: Rice stream ends at gap %u of %u", b, j, G);
            }
            uint64_t id = next + g;
            if (id >= mb)
                return PFAIL("band %u: member %llu of %u", b, (unsigned long long)id, mb);
            rk[j] = (uint32_t)id;
            next = id + 1;
        }
        if (place)
            out += K->ctx_select(s->plane, s->bc + (size_t)nw * b, nw, b, rk, G, want == MODE_UNCHANGED, idx + out);
        else
            out += c;
        if (!br_done(&r))
            return PFAIL("band %u: Rice stream does not end with its last gap", b);
    }
    /* out == k: each band gave exactly its count (mode 2: its members less the G listed), and
     * the counts add up to k (parse_head) */
    return decode_values(&h, val, val_len, old, idx, light ? NULL : z, tensor, chunk);
}

int patch_ctx_decode(patch_ctx_scratch *s, pulse_dtype dt, const uint16_t *old, uint32_t n, const uint8_t *pos,
                     size_t pos_len, const uint8_t *val, size_t val_len, size_t k, uint32_t *idx, uint16_t *z,
                     const char *tensor, uint64_t chunk)
{
    return ctx_decode(s, dt, old, n, pos, pos_len, val, val_len, k, idx, z, 0, tensor, chunk);
}

int patch_ctx_check_base(patch_ctx_scratch *s, pulse_dtype dt, const uint16_t *old, uint32_t n, const uint8_t *pos,
                         size_t pos_len, const uint8_t *val, size_t val_len, size_t k, uint32_t *idx, uint16_t *z,
                         const char *tensor, uint64_t chunk)
{
    return ctx_decode(s, dt, old, n, pos, pos_len, val, val_len, k, idx, z, 1, tensor, chunk);
}

/* ---- encode ------------------------------------------------------------------------------- */

/* The Rice parameter of G gaps: the cheapest of s* - 1, s*, s* + 1 (s* as in the bound). */
static unsigned rice_param(const uint32_t *g, uint32_t G, uint64_t *bits_out)
{
    uint64_t S = 0;
    for (uint32_t i = 0; i < G; i++)
        S += g[i];
    unsigned st = 0;
    if (G && S >= G) {
        uint64_t r = S / G;
        st = 63u - (unsigned)__builtin_clzll(r);
        if (st > MAX_S)
            st = MAX_S;
    }
    unsigned lo = st ? st - 1 : 0, hi = st < MAX_S ? st + 1 : MAX_S;
    uint64_t q[3] = {0, 0, 0};
    for (uint32_t i = 0; i < G; i++)
        for (unsigned t = lo; t <= hi; t++)
            q[t - lo] += g[i] >> t;
    unsigned best = st;
    uint64_t bb = UINT64_MAX;
    for (unsigned t = lo; t <= hi; t++) {
        uint64_t bits = (uint64_t)G * (t + 1) + q[t - lo];
        if (bits < bb) {
            bb = bits;
            best = t;
        }
    }
    *bits_out = G ? bb : 0;
    return G ? best : 0;
}

/* Bits of c symbols with these counts under their own order-0 code (what the band's table costs
 * them, within rounding). */
static double sym_bits(const uint32_t *cnt, uint32_t c)
{
    double bits = 0;
    for (unsigned y = 0; y < NSYM; y++)
        if (cnt[y])
            bits += cnt[y] * log2((double)c / cnt[y]);
    return bits;
}

/* The median (the lower one of an even count) of the fields (g[i] >> sh) & mask, mask <= 0xFFFF:
 * a histogram of their high bytes, then one of the low bytes inside the median's. */
static uint32_t median16(const uint32_t *g, uint32_t c, unsigned sh, uint32_t mask)
{
    uint32_t hi[256] = {0}, lo[256] = {0};
    for (uint32_t i = 0; i < c; i++)
        hi[(g[i] >> sh & mask) >> 8]++;
    uint32_t want = (c + 1) / 2, below = 0;
    unsigned H = 0;
    while (below + hi[H] < want)
        below += hi[H++];
    for (uint32_t i = 0; i < c; i++) {
        uint32_t v = g[i] >> sh & mask;
        if (v >> 8 == H)
            lo[v & 0xFFu]++;
    }
    unsigned L = 0;
    while (below + lo[L] < want)
        below += lo[L++];
    return H << 8 | L;
}

/* The order-0 bits of the values u[0..c): their symbols' entropy and escape bits. */
static double u_bits(const uint32_t *u, uint32_t c)
{
    uint32_t cnt[NSYM] = {0};
    uint64_t raw = 0;
    for (uint32_t i = 0; i < c; i++) {
        if (u[i] > NDIRECT) {
            unsigned L = 32 - (unsigned)__builtin_clz(u[i]);
            cnt[NDIRECT + L - 4]++;
            raw += L - 1;
        } else {
            cnt[u[i] - 1]++;
        }
    }
    return sym_bits(cnt, c) + (double)raw;
}

static double mode_header_bits(uint32_t C)
{
    return 8.0 * (1 + (C < 128 ? 1 : C < 16384 ? 2 : 3));
}

/* Bits of S direction bits as symbols of whether they fall, fell of S, under their own frequency
 * and with their count. */
static double sign_bits(uint32_t fell, uint32_t S)
{
    uint32_t kept = S - fell;
    return (fell ? fell * log2((double)S / fell) : 0) + (kept ? kept * log2((double)S / kept) : 0) + 8.0;
}

/* A VM_PRED value: u of the new value nv from old value ov, its direction in *t; 0 when the
 * distance is 32768 steps (no symbol codes it). */
static inline uint32_t pred_u(uint16_t ov, uint16_t nv, double L, uint32_t *t)
{
    *t = ctx_step_down(ov, nv);
    uint16_t p = ctx_predict(ov, *t, L);
    int16_t r = (int16_t)(uint16_t)(ctx_key16(nv) - ctx_key16(p));
    return r == INT16_MIN ? 0 : zigzag32(r) + 1;
}

/* The coding (SD_*) of a sample of S direction bits of which fell fall, the cheaper of raw bits
 * and (fall_ok) symbols, in *bits: symbols only where they save an eighth of a bit a change on
 * the raw bits, as each costs the decoder a second rANS step. */
static unsigned sign_choice(int fall_ok, uint32_t fell, uint32_t S, double *bits)
{
    const double fb = fall_ok ? sign_bits(fell, S) : INFINITY;
    const int fall = fb + S / 8.0 < (double)S;
    *bits = fall ? fb : (double)S;
    return fall ? SD_FALL : SD_RAW;
}

/* Each band's value mode (VM_*) and centre, the cheapest by an estimate on up to SAMPLE_MAX of
 * its changes (evenly spaced), its symbol counts cnt, and how its direction bits are coded (sd,
 * sign_choice: raw, or falls where fall_ok). Bands whose z need under a raw bit a change on
 * average stay VM_DIFF unweighed, so a Llama-like step pays only the counting pass that its
 * tables need anyway. For the bands that change mode, vz[i] becomes the value its symbol codes
 * and gap[i] (free once the Rice streams are written) its direction bit, and falls[b] counts
 * the ones (those that fall). */
static void choose_value_modes(patch_ctx_scratch *s, int pred_ok, const uint16_t *old, const uint16_t *neu,
                               uint32_t nw, unsigned ebase, const uint32_t *off, const uint32_t *kb, int fall_ok,
                               uint8_t *vm, uint32_t *vc, uint32_t cnt[][NSYM], uint32_t *falls, uint8_t *sd)
{
    uint8_t cand[NB] = {0};   /* 1: weigh VM_CENTRED, 2: also VM_PRED */
    double cost[NB];
    int any = 0, any_pred = 0;
    for (unsigned b = 0; b < NB; b++) {
        vm[b] = VM_DIFF;
        vc[b] = 0;
        falls[b] = 0;
        sd[b] = SD_RAW;
        memset(cnt[b], 0, sizeof cnt[b]);
        if (!kb[b])
            continue;
        uint64_t raw = 0;
        for (uint32_t i = off[b]; i < off[b] + kb[b]; i++) {
            uint16_t zz = s->vz[i];
            cnt[b][zsym(zz)]++;
            if (zz > NDIRECT)
                raw += bitlen16(zz) - 1;
        }
        cost[b] = sym_bits(cnt[b], kb[b]) + (double)raw;
        /* VM_PRED pays for one pass over the chunk's changes and a prediction each: only where
         * the steps are many ulps, 4 raw bits a change on average */
        cand[b] = raw >= 4ull * kb[b] && pred_ok ? 2 : raw >= kb[b] ? 1 : 0;
        any |= cand[b] != 0;
        any_pred |= cand[b] == 2;
    }
    if (!any)
        return;
    /* gap[i] of a VM_PRED candidate: the new value (the changes in ascending position, as vz) */
    if (any_pred) {
        uint32_t fill[NB] = {0};
        for (uint32_t w = 0; w < nw; w++)
            for (uint64_t bits = s->chw[w]; bits; bits &= bits - 1) {
                uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
                unsigned b = band_of(old[i], ebase);
                if (cand[b] == 2)
                    s->gap[off[b] + fill[b]++] = neu[i];
            }
    }
    uint32_t *f = s->samp, *u = s->samp + SAMPLE_MAX, *nvs = s->samp + 2 * SAMPLE_MAX;
    for (unsigned b = 0; b < NB; b++) {
        if (!cand[b])
            continue;
        uint32_t *g = s->gap + off[b];
        uint16_t *z = s->vz + off[b];
        uint32_t c = kb[b], S = c < SAMPLE_MAX ? c : SAMPLE_MAX;
        double scale = (double)c / S;
        /* centred: |d| around its median; its sign (d < 0: it falls) raw or a symbol */
        uint32_t fell = 0;
        for (uint32_t t = 0; t < S; t++) {
            uint32_t i = (uint32_t)((uint64_t)t * c / S);
            int32_t d = (int16_t)unzigzag_z(z[i]);
            f[t] = (uint32_t)(d < 0 ? -d : d);
            fell += (uint32_t)(d < 0);
        }
        uint32_t C1 = median16(f, S, 0, 0xFFFFu);
        C1 = C1 < 1 ? 1 : C1 > VM_CENTRED_MAX ? VM_CENTRED_MAX : C1;
        for (uint32_t t = 0; t < S; t++)
            u[t] = zigzag32((int32_t)f[t] - (int32_t)C1) + 1;
        double sb;
        unsigned sd1 = sign_choice(fall_ok, fell, S, &sb);
        double c1 = (u_bits(u, S) + sb) * scale + mode_header_bits(C1);
        if (c1 < cost[b]) {
            vm[b] = VM_CENTRED;
            vc[b] = C1;
            sd[b] = (uint8_t)sd1;
            cost[b] = c1;
        }
        if (cand[b] == 2) {
            /* predicted: L the median step as a value (BF16 patterns of positive values sort as
             * integers) */
            for (uint32_t t = 0; t < S; t++) {
                uint32_t i = (uint32_t)((uint64_t)t * c / S);
                uint16_t nv = (uint16_t)g[i], ov = (uint16_t)(nv - unzigzag_z(z[i]));
                double step = ctx_bf16_value(nv) - ctx_bf16_value(ov);
                f[t] = ctx_bf16_round(step < 0 ? -step : step) & 0x7FFFu;
                nvs[t] = (uint32_t)nv << 16 | ov;
            }
            uint32_t C2 = median16(f, S, 0, 0x7FFFu);
            C2 = C2 < 1 ? 1 : C2 > VM_PRED_MAX ? VM_PRED_MAX : C2;
            double L = ctx_bf16_value((uint16_t)C2);
            int ok = 1;
            fell = 0;
            for (uint32_t t = 0; t < S && ok; t++) {
                uint32_t dir;
                uint16_t ov = (uint16_t)nvs[t];
                u[t] = pred_u(ov, (uint16_t)(nvs[t] >> 16), L, &dir);
                ok = u[t] != 0;
                fell += dir ^ (uint32_t)up_falls(ov);
            }
            unsigned sd2 = sign_choice(fall_ok, fell, S, &sb);
            double c2 = ok ? (u_bits(u, S) + sb) * scale + mode_header_bits(C2) : cost[b];
            if (c2 < cost[b]) {
                vm[b] = VM_PRED;
                vc[b] = C2;
                sd[b] = (uint8_t)sd2;
                cost[b] = c2;
            }
        }
        if (vm[b] == VM_DIFF)
            continue;
        uint32_t nc[NSYM] = {0};
        if (vm[b] == VM_CENTRED) {
            for (uint32_t i = 0; i < c; i++) {
                int32_t d = (int16_t)unzigzag_z(z[i]);
                g[i] = z[i] & 1u;   /* z is odd exactly for d < 0: it falls */
                falls[b] += g[i];
                z[i] = (uint16_t)(zigzag32((d < 0 ? -d : d) - (int32_t)vc[b]) + 1);
                nc[zsym(z[i])]++;
            }
        } else {
            /* the sample did not see every change: one at 32768 steps takes the band back to
             * VM_DIFF, its z recomputed from the chunk (rare: new 32768 steps from its
             * prediction is the other end of the value line) */
            double L = ctx_bf16_value((uint16_t)vc[b]);
            uint32_t i = 0;
            for (; i < c; i++) {
                uint16_t nv = (uint16_t)g[i], ov = (uint16_t)(nv - unzigzag_z(z[i]));
                uint32_t dir, uu = pred_u(ov, nv, L, &dir);
                if (!uu)
                    break;
                g[i] = dir;   /* the step down in value; as a symbol, whether the bit pattern falls */
                if (sd[b] != SD_RAW)
                    g[i] ^= (uint32_t)up_falls(ov);
                falls[b] += g[i];
                z[i] = (uint16_t)uu;
                nc[zsym(z[i])]++;
            }
            if (i < c) {
                uint32_t t = 0;
                for (uint32_t w = 0; w < nw; w++)
                    for (uint64_t bits = s->chw[w]; bits; bits &= bits - 1) {
                        uint32_t p = w * 64 + (uint32_t)__builtin_ctzll(bits);
                        if (band_of(old[p], ebase) == b)
                            z[t++] = zigzag(old[p], neu[p]);
                    }
                vm[b] = VM_DIFF;
                vc[b] = 0;
                falls[b] = 0;
                sd[b] = SD_RAW;
                continue;
            }
        }
        memcpy(cnt[b], nc, sizeof nc);
    }
}

/* A band's table as frequencies (parse_freqs): bytes written, at most 40. */
static size_t put_freqs(const uint16_t *freq, uint8_t *out)
{
    size_t l = 0;
    for (unsigned y = 0; y < NSYM; y++)
        l += pulse_leb_put(out + l, freq[y]);
    return l;
}

/* A band's table as its symbol counts (parse_counts; at least one is not 0): bytes written, at
 * most 3 + 19 x 5. */
static size_t put_counts(const uint32_t *cnt, uint8_t *out)
{
    uint32_t set = 0;
    for (unsigned y = 0; y < NSYM; y++)
        if (cnt[y])
            set |= 1u << y;
    unsigned last = 31u - (unsigned)__builtin_clz(set);
    size_t l = pulse_leb_put(out, set);
    for (unsigned y = 0; y < last; y++)
        if (cnt[y])
            l += pulse_leb_put(out + l, cnt[y] - 1);
    return l;
}

int patch_ctx_encode(patch_ctx_scratch *s, pulse_dtype dt, const uint16_t *old, const uint16_t *neu, uint32_t n,
                     size_t k, uint8_t *out, size_t cap, uint32_t *pos_len, uint32_t *val_len)
{
    if (!s || !old || !neu || !out || !pos_len || !val_len)
        return pulse_fail(PULSE_ERR_INVALID, "context coder: missing argument");
    if (!patch_ctx_dtype_ok(dt))
        return pulse_fail(PULSE_ERR_INVALID, "context coder: dtype %d is neither BF16 nor F16", (int)dt);
    if (n == 0 || n > s->cap)
        return pulse_fail(PULSE_ERR_INVALID, "context coder: chunk of %u elements, scratch for %u", n, s->cap);
    if (k == 0 || k > n)
        return pulse_fail(PULSE_ERR_INVALID, "context coder: %zu changes in a chunk of %u elements", k, n);
    size_t bound = patch_ctx_bound(n, k);
    if (cap < bound)
        return pulse_fail(PULSE_ERR_INVALID, "context coder: output of %zu bytes, %zu needed", cap, bound);
    int err = scratch_encoder(s);
    if (err)
        return err;
    const int counts = !s->freq_tables;
    const pulse_kernels *K = pulse_kernels_get();
    const uint16_t *src = band_source(s, dt, old, n);
    if (!src)
        return PULSE_ERR_NOMEM;
    unsigned ebase = K->ctx_ebase16(src, n);
    uint32_t mm[NB];   /* the members in all; the walk below counts them word by word */
    /* an F16 chunk's changed words come from its own patterns, its planes from the exponents */
    if (src != old)
        K->ctx_planes16(old, neu, n, ebase, s->plane, s->wc, NULL, mm, s->chw);
    K->ctx_planes16(src, src == old ? neu : NULL, n, ebase, s->plane, s->wc, NULL, mm, src == old ? s->chw : NULL);
    uint32_t nw = (n + 63) / 64;

    /* per band, in position order: the changed members' gaps and their z, each band's list at
     * the prefix sum of the members before it */
    uint32_t off[NB], kb[NB], m[NB];
    for (unsigned b = 0, o = 0; b < NB; b++) {
        off[b] = o;
        o += mm[b];
        m[b] = mm[b];
    }
    size_t got = K->ctx_gaps16(old, neu, s->plane, s->wc, s->chw, nw, off, s->gap, s->vz, kb);
    if (got != k)
        return pulse_fail(PULSE_ERR_INVALID, "context coder: %zu changes given, %zu differ", k, got);

    /* the Rice streams, written after room for the longest header, moved down once it is known */
    uint8_t head[HEAD_MAX];
    size_t hl = 0, hb[NB] = {0};  /* hb: where each band's header byte is */
    /* two rANS states where the decode has enough changes to gain from them; a small chunk
     * keeps the 4 bytes of the second state */
    const int two = !s->one_state && k >= CTX_TWO_STATES_MIN;
    head[hl++] = (uint8_t)(PATCH_POS_CONTEXT | (two ? PATCH_CTX_TWO_STATES : 0) |
                           (counts ? PATCH_CTX_COUNT_TABLES : 0));
    /* sign symbols allowed: each value-mode band then codes its direction bits raw or as falls,
     * whichever costs least (choose_value_modes) */
    const int may_sign = counts && !s->raw_signs;
    head[hl++] = (uint8_t)ebase;
    bitwr bw = {out + HEAD_MAX, out + cap, 0, 0, 0};
    for (unsigned b = 0; b < NB; b++) {
        uint32_t c = kb[b];
        if (!c) {
            head[hl++] = MODE_NONE;
            continue;
        }
        int mode = 2 * (uint64_t)c > m[b] ? MODE_UNCHANGED : MODE_CHANGED;
        const uint32_t *g = s->gap + off[b];
        uint32_t G = c;
        if (mode == MODE_UNCHANGED) {
            /* the complement of the changed members, from their gaps */
            uint32_t r = 0, *u = s->rank;
            uint64_t nc = g[0], pv = UINT64_MAX;
            G = 0;
            for (uint64_t i = 0; i < m[b]; i++) {
                if (i == nc) {
                    r++;
                    nc = r < c ? nc + g[r] + 1 : UINT64_MAX;
                    continue;
                }
                u[G++] = (uint32_t)(i - (pv + 1));
                pv = i;
            }
            g = u;
        }
        uint64_t bits;
        unsigned sp = rice_param(g, G, &bits);
        uint8_t *at = bw.p;
        for (uint32_t i = 0; i < G; i++)
            bw_rice(&bw, g[i], sp);
        bw_flush(&bw);
        size_t len = (size_t)(bw.p - at);
        if (bw.over || len != (bits + 7) / 8)
            return pulse_fail(PULSE_ERR_INVALID, "context coder: band %u's Rice stream overran its bound", b);
        hb[b] = hl;
        head[hl++] = (uint8_t)(mode | sp << 2);
        hl += pulse_leb_put(head + hl, c);
        hl += pulse_leb_put(head + hl, (uint32_t)len);
    }
    size_t rice_len = (size_t)(bw.p - (out + HEAD_MAX));
    /* the gaps are written: s->gap is the value modes' working memory from here */
    uint8_t vm[NB];
    uint32_t vc[NB], cnt[NB][NSYM], falls[NB];
    uint8_t sd[NB];
    choose_value_modes(s, dt == PULSE_DT_BF16, old, neu, nw, ebase, off, kb, may_sign, vm, vc, cnt, falls, sd);
    /* flag 8 where a value-mode band codes its direction bits as falls */
    int signs = 0;
    for (unsigned b = 0; b < NB; b++) {
        if (vm[b])
            head[hb[b]] |= HEAD_VMODE;
        signs |= vm[b] && sd[b] != SD_RAW;
    }
    if (signs)
        head[0] |= PATCH_CTX_SIGN_SYMBOLS;
    memcpy(out, head, hl);
    memmove(out + hl, out + HEAD_MAX, rice_len);
    size_t pl = hl + rice_len;

    /* the value stream: the band tables, the rANS stream (coded backwards), the escape bits */
    uint8_t *v = out + pl, *vend = out + cap;
    size_t vl = 0;
    if ((size_t)(vend - v) < NB * BAND_VALUE_HEAD_MAX)
        return pulse_fail(PULSE_ERR_INVALID, "context coder: position stream overran its bound");
    uint16_t freq[NB][NSYM];
    uint16_t cum[NB][NSYM];
    for (unsigned b = 0; b < NB; b++) {
        if (!kb[b])
            continue;
        if (vm[b]) {
            v[vl++] = vm[b];
            vl += pulse_leb_put(v + vl, vc[b]);
        }
        norm_freq(cnt[b], freq[b]);
        unsigned c = 0;
        for (unsigned y = 0; y < NSYM; y++) {
            cum[b][y] = (uint16_t)c;
            c += freq[b][y];
        }
        vl += counts ? put_counts(cnt[b], v + vl) : put_freqs(freq[b], v + vl);
        if (vm[b] && signs)   /* how its direction bits are coded: 0 raw, 2r + 1 where r of them fall */
            vl += pulse_leb_put(v + vl, sd[b] == SD_RAW ? 0 : 2 * falls[b] + SD_FALL);
    }
    uint8_t *rend = s->rbuf + 3 * (size_t)s->cap + 16, *rp = rend;
    /* backwards from the last change: x codes this change, x2 the one before it (two states;
     * one state: x2 unused); change j (decode order) goes on state j & 1 */
    uint32_t x = RANS_L, x2 = RANS_L;
    for (unsigned bi = NB; bi-- > 0;) {
        if (!kb[bi])
            continue;
        const uint16_t *f = freq[bi], *cu = cum[bi];
        /* x / f by a multiply (the states stay below 2^31, where it is exact: ryg_rans's
         * reciprocal), x = (x / f) 2^10 + x % f + cum as x + bias + q (2^10 - f); f = 1 takes
         * q = x - 1 and a bias of cum + 2^10 - 1 */
        uint32_t rcp[NSYM], bias[NSYM];
        unsigned rsh[NSYM];
        for (unsigned y = 0; y < NSYM; y++) {
            uint32_t fy = f[y];
            if (fy < 2) {
                rcp[y] = UINT32_MAX;
                rsh[y] = 0;
                bias[y] = cu[y] + TAB_TOTAL - 1u;
            } else {
                unsigned sh = 0;
                while (fy > (1u << sh))
                    sh++;
                rcp[y] = (uint32_t)(((1ull << (sh + 31)) + fy - 1) / fy);
                rsh[y] = sh - 1;
                bias[y] = cu[y];
            }
        }
        /* a band with a value mode whose direction bits are symbols: each change's (s->gap,
         * whether it falls) after its value's, on the same state */
        const int dsym = vm[bi] && sd[bi] != SD_RAW;
        const uint32_t ft = dsym ? fall_freq(falls[bi], kb[bi]) : 0;
        for (uint32_t i = off[bi] + kb[bi]; i-- > off[bi];) {
            if (dsym) {
                const uint32_t fall = s->gap[i] & 1u, fs = fall ? ft : TAB_TOTAL - ft;
                const uint32_t xm = ((RANS_L >> TAB_BITS) << 8) * fs;
                while (x >= xm) {
                    *--rp = (uint8_t)x;
                    x >>= 8;
                }
                x = ((x / fs) << TAB_BITS) + x % fs + (fall ? TAB_TOTAL - ft : 0);
            }
            unsigned y = zsym(s->vz[i]);
            uint32_t fy = f[y], xmax = ((RANS_L >> TAB_BITS) << 8) * fy;
            while (x >= xmax) {
                *--rp = (uint8_t)x;
                x >>= 8;
            }
            uint32_t q = (uint32_t)(((uint64_t)x * rcp[y]) >> 32) >> rsh[y];
            x += bias[y] + q * (TAB_TOTAL - fy);
            if (two) {
                const uint32_t t2 = x;
                x = x2;
                x2 = t2;
            }
        }
    }
    /* the states first, state 0 (change 0's) before state 1: after change 0, x2 holds state 0
     * when two states alternate */
    uint32_t first[2] = { two ? x2 : x, x };
    for (unsigned q = two ? 2 : 1; q-- > 0;) {
        rp -= 4;
        rp[0] = (uint8_t)first[q];
        rp[1] = (uint8_t)(first[q] >> 8);
        rp[2] = (uint8_t)(first[q] >> 16);
        rp[3] = (uint8_t)(first[q] >> 24);
    }
    size_t R = (size_t)(rend - rp);
    if ((size_t)(vend - v) < vl + 5 + R)
        return pulse_fail(PULSE_ERR_INVALID, "context coder: rANS stream overran its bound");
    vl += pulse_leb_put(v + vl, (uint32_t)R);
    memcpy(v + vl, rp, R);
    vl += R;
    bitwr ew = {v + vl, vend, 0, 0, 0};
    for (unsigned b = 0; b < NB; b++)
        for (uint32_t i = off[b]; i < off[b] + kb[b]; i++) {
            uint16_t zz = s->vz[i];
            if (vm[b] && sd[b] == SD_RAW)
                bw_put(&ew, s->gap[i] & 1u, 1);
            if (zz > NDIRECT) {
                unsigned L = bitlen16(zz);
                bw_put(&ew, zz & ((1u << (L - 1)) - 1), L - 1);
            }
        }
    bw_flush(&ew);
    if (ew.over)
        return pulse_fail(PULSE_ERR_INVALID, "context coder: escape bits overran their bound");
    vl = (size_t)(ew.p - v);
    *pos_len = (uint32_t)pl;
    *val_len = (uint32_t)vl;
    return 0;
}
