/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the format 5 context coder: synthetic BF16 and F16 chunks round trip exactly, a hand-written chunk matches the byte format of docs/patch-format.md, and damaged or crafted streams are refused naming their stream (or decode to k distinct in-range positions), never read out of bounds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights.h"
#include "node/patch/patch_ctxcode.h"
#include "node/patch/patch_ctxvalue.h"
#include "check.h"

#define CAP (1u << 20)

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static double gauss(void)
{
    double u = unif(), v = unif();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

static uint16_t bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* The BF16 pattern nearest old's value plus step (an optimizer's update, rounded as a trainer
 * rounds its FP32 master weights). */
static uint16_t stepped(uint16_t old, float step)
{
    uint32_t bits = (uint32_t)old << 16;
    float o;
    memcpy(&o, &bits, 4);
    return bf16(o + step);
}

static uint16_t unzig(uint16_t z)
{
    return (uint16_t)((z >> 1) ^ (uint16_t)(0u - (z & 1u)));
}

/* The dtype of the chunks that roundtrip() and damage() code: BF16, or F16 in test_f16. */
static pulse_dtype dtype = PULSE_DT_BF16;

static unsigned exponent(uint16_t v)
{
    return dtype == PULSE_DT_F16 ? (v >> 10) & 0x1Fu : (v >> 7) & 0xFFu;
}

static unsigned band(uint16_t v, unsigned ebase)
{
    unsigned e = exponent(v), b = e > ebase ? e - ebase : 0;
    return b > 15 ? 15 : b;
}

static patch_ctx_scratch *S;
static uint8_t *enc;
static uint32_t *idx;
static uint16_t *zz, *work;
static uint8_t *mark;

static size_t count_changes(const uint16_t *old, const uint16_t *neu, uint32_t n)
{
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += old[i] != neu[i];
    return k;
}

/* A decode's output is k distinct positions < n and z >= 1 (what a damaged but accepted stream
 * must still give); 1 when so. */
static int sane(uint32_t n, size_t k)
{
    int ok = 1;
    for (size_t j = 0; j < k; j++) {
        if (idx[j] >= n || zz[j] == 0 || mark[idx[j]])
            ok = 0;
        else
            mark[idx[j]] = 1;
    }
    for (size_t j = 0; j < k; j++)
        if (idx[j] < n)
            mark[idx[j]] = 0;
    return ok;
}

/* The encoder writes one rANS state (what the first format-5 writers wrote) or two, frequency
 * tables (what the writers before count tables wrote) or count tables, and a value mode's
 * direction bits raw (what the writers before sign symbols wrote) or as symbols. */
static int one_state, freq_tables, raw_signs;

static void set_one_state(int v)
{
    one_state = v;
    patch_ctx_one_state(S, v);
}

static void set_freq_tables(int v)
{
    freq_tables = v;
    patch_ctx_freq_tables(S, v);
}

static void set_raw_signs(int v)
{
    raw_signs = v;
    patch_ctx_raw_signs(S, v);
}

static unsigned head_bands(const uint8_t *pos, uint8_t active[16], uint8_t vflag[16]);

/* The coding byte the encoder writes for a chunk of k changes in the modes set, but for sign
 * symbols (the encoder's estimate decides them). */
static unsigned coding_for(size_t k)
{
    return PATCH_POS_CONTEXT | (one_state || k < 256 ? 0 : PATCH_CTX_TWO_STATES) |
           (freq_tables ? 0 : PATCH_CTX_COUNT_TABLES);
}

/* Whether the sign-symbol flag of position stream pos is one the encoder may write: only on a
 * chunk with a band in a value mode, and neither with frequency tables nor raw signs asked for. */
static int signs_fit(const uint8_t *pos)
{
    if (!(pos[0] & PATCH_CTX_SIGN_SYMBOLS))
        return 1;
    uint8_t active[16], vflag[16];
    head_bands(pos, active, vflag);
    int vmode = 0;
    for (int b = 0; b < 16; b++)
        vmode |= vflag[b];
    return vmode && !freq_tables && !raw_signs;
}

/* Encodes, checks, decodes and applies one chunk; returns the coded bytes (pos + val). */
static size_t roundtrip(const char *what, const uint16_t *old, const uint16_t *neu, uint32_t n, uint32_t *pl,
                        uint32_t *vl)
{
    size_t k = count_changes(old, neu, n);
    size_t bound = patch_ctx_bound(n, k);
    CHECK(bound <= 8u * CAP + 4096);
    int r = patch_ctx_encode(S, dtype, old, neu, n, k, enc, bound, pl, vl);
    CHECK_OK(r);
    if (r)
        return 0;
    CHECK((size_t)*pl + *vl <= bound);
    CHECK_EQ_INT(enc[0] & ~PATCH_CTX_SIGN_SYMBOLS, coding_for(k));
    CHECK(signs_fit(enc));
    CHECK_OK(patch_ctx_check(dtype, enc, *pl, enc + *pl, *vl, k, n, what, 7));
    r = patch_ctx_decode(S, dtype, old, n, enc, *pl, enc + *pl, *vl, k, idx, zz, what, 7);
    CHECK_OK(r);
    if (r)
        return 0;
    CHECK(sane(n, k));
    /* band order, ascending inside a band */
    unsigned ebase = enc[1];
    for (size_t j = 1; j < k; j++) {
        unsigned a = band(old[idx[j - 1]], ebase), b = band(old[idx[j]], ebase);
        CHECK(a < b || (a == b && idx[j - 1] < idx[j]));
    }
    memcpy(work, old, (size_t)n * 2);
    for (size_t j = 0; j < k; j++)
        work[idx[j]] = (uint16_t)(work[idx[j]] + unzig(zz[j]));
    int same = memcmp(work, neu, (size_t)n * 2) == 0;
    if (!same)
        fprintf(stderr, "%s: decoded chunk differs from NEW\n", what);
    CHECK(same);
    return (size_t)*pl + *vl;
}

/* Order-0 entropy (bits) of the chunk's gaps and z, the floor the report compares with. */
static double order0_bits(const uint16_t *old, const uint16_t *neu, uint32_t n)
{
    static uint32_t gc[CAP + 1], zc[65536];
    memset(gc, 0, sizeof gc);
    memset(zc, 0, sizeof zc);
    uint32_t prev = UINT32_MAX;
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (old[i] != neu[i]) {
            gc[i - prev - 1]++;
            uint16_t d = (uint16_t)(neu[i] - old[i]);
            zc[(uint16_t)((uint16_t)(d << 1) ^ (uint16_t)(0u - (d >> 15)))]++;
            prev = i;
            k++;
        }
    double h = 0;
    for (uint32_t i = 0; i <= CAP; i++)
        if (gc[i])
            h -= gc[i] * log2((double)gc[i] / (double)k);
    for (uint32_t i = 0; i < 65536; i++)
        if (zc[i])
            h -= zc[i] * log2((double)zc[i] / (double)k);
    return h;
}

static uint16_t *old_, *neu_;

/* Weights ~N(0, 0.02); an element changes with a probability that grows with its exponent,
 * by +-1..3 ulp. */
static void realistic(uint32_t n, double scale)
{
    for (uint32_t i = 0; i < n; i++) {
        old_[i] = bf16((float)(0.02 * gauss()));
        unsigned e = (old_[i] >> 7) & 0xFF;
        double p = scale * pow(2.0, ((double)e - 122.0) / 2.0);
        neu_[i] = old_[i];
        if (unif() < p) {
            int d = 1 + (int)(rnd() % 3);
            neu_[i] = (uint16_t)(old_[i] + (rnd() & 1 ? d : -d));
        }
    }
}

/* Walks a position stream's band headers (what the encoder wrote: nothing is checked): active[b]
 * = band b has changes, vflag[b] = it has a value mode. Returns the bands with changes. */
static unsigned head_bands(const uint8_t *pos, uint8_t active[16], uint8_t vflag[16])
{
    unsigned bands = 0;
    for (size_t at = 2, b = 0; b < PATCH_CTX_BANDS; b++) {
        unsigned v = pos[at++];
        active[b] = (v & 3u) != 0;
        vflag[b] = active[b] && (v & 0x80u);
        if (!active[b])
            continue;
        bands++;
        for (int l = 0; l < 2; l++)   /* c_b and L_b */
            while (pos[at++] & 0x80) {
            }
    }
    return bands;
}

/* Count tables and frequency tables of one chunk name the same frequencies: both codings agree
 * byte for byte but for the coding byte and the tables, and the count tables are the smaller. */
static void test_count_tables_same_coding(void)
{
    static const uint32_t sizes[] = {600, 5000, 1u << 18};
    uint8_t *fq = malloc(patch_ctx_bound(CAP, CAP));
    if (!fq) {
        CHECK(fq != NULL);
        return;
    }
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        uint32_t n = sizes[t];
        realistic(n, t == 0 ? 40.0 : 1.0);
        size_t k = count_changes(old_, neu_, n);
        uint32_t fpl, fvl, cpl, cvl;
        set_freq_tables(1);
        CHECK_OK(patch_ctx_encode(S, PULSE_DT_BF16, old_, neu_, n, k, fq, patch_ctx_bound(n, k), &fpl, &fvl));
        set_freq_tables(0);
        CHECK_OK(patch_ctx_encode(S, PULSE_DT_BF16, old_, neu_, n, k, enc, patch_ctx_bound(n, k), &cpl, &cvl));
        CHECK_EQ_INT(fq[0] | PATCH_CTX_COUNT_TABLES, enc[0]);
        CHECK(fpl == cpl && memcmp(fq + 1, enc + 1, cpl - 1) == 0);
        /* the value streams from the rANS length on: the same bytes after tables of different size */
        size_t cs = 0;
        while (cs < cvl && cs < fvl && fq[fpl + fvl - 1 - cs] == enc[cpl + cvl - 1 - cs])
            cs++;
        uint8_t active[16], vflag[16];
        unsigned bands = head_bands(enc, active, vflag);
        CHECK(bands > 0 && cvl < fvl);
        CHECK(cs + bands * (4 + 3 + 19 * 5) >= cvl);   /* each band's head at most, then the same */
        printf("count tables, %u elements, %zu changes: value stream %u bytes (frequency tables %u)\n", n, k, cvl,
               fvl);
    }
    free(fq);
}

static void test_roundtrips(void)
{
    uint32_t pl, vl;
    realistic(CAP, 0.05);
    size_t k = count_changes(old_, neu_, CAP);
    size_t bytes = roundtrip("realistic", old_, neu_, CAP, &pl, &vl);
    double h = order0_bits(old_, neu_, CAP);
    printf("realistic 2^20: %zu changes (%.2f%%), %zu bytes (pos %u, val %u): %.3f bits/change, "
           "order-0 floor %.3f bits/change\n", k, 100.0 * (double)k / CAP, bytes, pl, vl,
           8.0 * (double)bytes / (double)k, h / (double)k);
    CHECK(k > 10000);

    /* very sparse: one change, at the end */
    realistic(CAP, 0);
    neu_[CAP - 1] = (uint16_t)(old_[CAP - 1] + 1);
    roundtrip("one change", old_, neu_, CAP, &pl, &vl);

    /* dense: every element changed (every band codes no gap) */
    for (uint32_t i = 0; i < 70000; i++)
        neu_[i] = (uint16_t)(old_[i] + 1 + (rnd() % 5));
    roundtrip("dense", old_, neu_, 70000, &pl, &vl);
    {
        /* every band byte says mode 0, or mode 2 with an empty Rice stream */
        size_t at = 2;
        int modes2 = 0;
        for (int b = 0; b < 16; b++) {
            unsigned v = enc[at++];
            CHECK((v & 3) == 0 || (v & 3) == 2);
            if (!(v & 3))
                continue;
            modes2++;
            while (enc[at++] & 0x80) {
            }
            CHECK_EQ_INT(enc[at], 0);
            at++;
        }
        CHECK(modes2 > 2);
        CHECK_EQ_INT(at, pl);
    }

    /* half and more changed in some bands: mode 2 with gaps */
    realistic(100000, 0.6);
    roundtrip("half", old_, neu_, 100000, &pl, &vl);

    /* a single band: every old value has the same exponent */
    for (uint32_t i = 0; i < 50000; i++) {
        old_[i] = (uint16_t)(0x3F80u | (rnd() & 0x7Fu) | (rnd() & 0x8000u));
        neu_[i] = rnd() % 10 ? old_[i] : (uint16_t)(old_[i] ^ 1u);
    }
    roundtrip("single band", old_, neu_, 50000, &pl, &vl);

    /* n not a multiple of 64 */
    static const uint32_t ns[] = {1, 63, 64, 65, 127, 1000};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        for (int rep = 0; rep < 4; rep++) {
            realistic(ns[t], rep == 3 ? 5.0 : 0.3);
            neu_[ns[t] - 1] = (uint16_t)(old_[ns[t] - 1] + 2);
            char name[32];
            snprintf(name, sizeof name, "n=%u", ns[t]);
            roundtrip(name, old_, neu_, ns[t], &pl, &vl);
        }
    }

    /* large z: escapes of every bit length, up to 65535 */
    realistic(200000, 0);
    for (uint32_t i = 0; i < 200000; i += 1 + (uint32_t)(rnd() % 7)) {
        unsigned L = 1 + (unsigned)(rnd() % 16);
        uint16_t z = (uint16_t)((1u << (L - 1)) | (rnd() & ((1u << (L - 1)) - 1)));
        if (i % 997 == 0)
            z = 65535;
        neu_[i] = (uint16_t)(old_[i] + unzig(z));
    }
    roundtrip("large z", old_, neu_, 200000, &pl, &vl);

    /* exponents 0 and 255: zeros, subnormals, inf and NaN; ebase 240, the rest in band 0 */
    for (uint32_t i = 0; i < 5000; i++) {
        static const uint16_t vals[] = {0x0000, 0x8000, 0x0001, 0x807F, 0x7F80, 0xFF80, 0x7FC0, 0x3F80, 0x7F00};
        old_[i] = (uint16_t)(vals[rnd() % 9] ^ (rnd() & 0x3u));
        neu_[i] = rnd() % 3 ? old_[i] : (uint16_t)(old_[i] + unzig((uint16_t)(1 + rnd() % 65535)));
    }
    roundtrip("exp 0 and 255", old_, neu_, 5000, &pl, &vl);
    CHECK_EQ_INT(enc[1], 240);
    /* small exponents only: ebase clamps at 0 */
    for (uint32_t i = 0; i < 3000; i++) {
        old_[i] = (uint16_t)((rnd() % 12) << 7 | (rnd() & 0x807Fu));
        neu_[i] = rnd() % 4 ? old_[i] : (uint16_t)(old_[i] - 1);
    }
    roundtrip("ebase 0", old_, neu_, 3000, &pl, &vl);
    CHECK_EQ_INT(enc[1], 0);

    /* worst case of the bound: every element changed by a 16-bit z, n = 2^20 */
    for (uint32_t i = 0; i < CAP; i++) {
        old_[i] = (uint16_t)rnd();
        neu_[i] = (uint16_t)(old_[i] + unzig((uint16_t)(0x8000u | rnd())));
    }
    roundtrip("worst z", old_, neu_, CAP, &pl, &vl);
    /* uniform random positions over random exponents, random z */
    for (uint32_t i = 0; i < CAP; i++) {
        old_[i] = (uint16_t)rnd();
        neu_[i] = rnd() % 3 ? old_[i] : (uint16_t)(old_[i] + unzig((uint16_t)(1 + rnd() % 65535)));
    }
    roundtrip("random", old_, neu_, CAP, &pl, &vl);
}

/* Many small random chunks: sizes, exponent spreads, change rates and step sizes drawn at random. */
static void test_random_small(void)
{
    uint32_t pl, vl;
    for (int it = 0; it < 400; it++) {
        uint32_t n = 1 + (uint32_t)(rnd() % 3000);
        unsigned spread = 1 + (unsigned)(rnd() % 40), top = (unsigned)(rnd() % 256);
        double p = unif();
        unsigned zbits = 1 + (unsigned)(rnd() % 16);
        size_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            unsigned e = top > spread ? top - (unsigned)(rnd() % spread) : (unsigned)(rnd() % (top + 1));
            old_[i] = (uint16_t)((rnd() & 0x807Fu) | (e & 0xFFu) << 7);
            neu_[i] = old_[i];
            if (unif() < p) {
                uint16_t z = (uint16_t)(1 + rnd() % ((1u << zbits) - 1));
                neu_[i] = (uint16_t)(old_[i] + unzig(z));
            }
            k += old_[i] != neu_[i];
        }
        if (!k)
            neu_[n / 2] = (uint16_t)(old_[n / 2] + 1);
        roundtrip("random small", old_, neu_, n, &pl, &vl);
    }
}

static int err_has(const char *a, const char *b)
{
    const char *e = pulse_last_error();
    int ok = strstr(e, a) != NULL && (!b || strstr(e, b) != NULL);
    if (!ok)
        fprintf(stderr, "error \"%s\" lacks \"%s\"%s%s\n", e, a, b ? " or " : "", b ? b : "");
    return ok;
}

/* Every single-byte change and every truncation of a small chunk's streams: refused with
 * FORMAT/UNSUPPORTED, or k distinct in-range positions; check never accepts what decode refuses
 * for a reason check can see, and never crashes. */
static void damage(uint32_t n)
{
    uint32_t pl, vl;
    size_t k = count_changes(old_, neu_, n);
    size_t len = roundtrip("damage base", old_, neu_, n, &pl, &vl);
    CHECK(len > 0 && k > 10);
    uint8_t *copy = malloc(len);
    memcpy(copy, enc, len);
    size_t accepted = 0, refused = 0;
    for (size_t at = 0; at < len; at++) {
        for (unsigned x = 1; x < 256; x++) {
            /* every value at the header bytes, single bits and 0xFF elsewhere */
            if (at >= 40 && !(x == 0xFF || (x & (x - 1)) == 0))
                continue;
            uint8_t *b = malloc(len);  /* its own allocation: ASan sees any overread */
            memcpy(b, copy, len);
            b[at] ^= (uint8_t)x;
            int rc = patch_ctx_check(dtype, b, pl, b + pl, vl, k, n, "t", 1);
            CHECK(rc == 0 || rc == PULSE_ERR_FORMAT || rc == PULSE_ERR_UNSUPPORTED);
            int rd = patch_ctx_decode(S, dtype, old_, n, b, pl, b + pl, vl, k, idx, zz, "t", 1);
            CHECK(rd == 0 || rd == PULSE_ERR_FORMAT || rd == PULSE_ERR_UNSUPPORTED);
            /* the check against the base refuses exactly what the decode refuses */
            CHECK_EQ_INT(patch_ctx_check_base(S, dtype, old_, n, b, pl, b + pl, vl, k, idx, zz, "t", 1), rd);
            if (rd == 0) {
                CHECK(sane(n, k));
                CHECK_EQ_INT(rc, 0);
                accepted++;
            } else {
                refused++;
            }
            free(b);
        }
    }
    printf("damage: %zu single-byte changes refused, %zu accepted (decoded to %zu distinct positions)\n",
           refused, accepted, k);
    /* truncations of either stream, into an exact-size allocation */
    for (int which = 0; which < 2; which++) {
        size_t full = which ? vl : pl;
        for (size_t cut = 0; cut < full; cut++) {
            uint8_t *p = malloc(which ? pl : cut ? cut : 1), *v = malloc(which ? (cut ? cut : 1) : vl);
            memcpy(p, copy, which ? pl : cut);
            memcpy(v, copy + pl, which ? cut : vl);
            size_t plen = which ? pl : cut, vlen = which ? cut : vl;
            int rc = patch_ctx_check(dtype, p, plen, v, vlen, k, n, "t", 1);
            int rd = patch_ctx_decode(S, dtype, old_, n, p, plen, v, vlen, k, idx, zz, "t", 1);
            CHECK(rc == PULSE_ERR_FORMAT);
            CHECK(rd == PULSE_ERR_FORMAT);
            CHECK_EQ_INT(patch_ctx_check_base(S, dtype, old_, n, p, plen, v, vlen, k, idx, zz, "t", 1), PULSE_ERR_FORMAT);
            free(p);
            free(v);
        }
    }
    /* wrong k, wrong n, wrong base */
    CHECK_ERR(patch_ctx_decode(S, dtype, old_, n, copy, pl, copy + pl, vl, k + 1, idx, zz, "t", 1), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "add up"));
    CHECK_ERR(patch_ctx_check(dtype, copy, pl, copy + pl, vl, k - 1, n, "t", 1), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor t chunk 1: position stream", "add up"));
    CHECK_EQ_INT(patch_ctx_check_base(S, dtype, old_, n, copy, pl, copy + pl, vl, k, idx, zz, "t", 1), 0);
    old_[5] = 0x7F00;   /* another exponent base */
    CHECK_ERR(patch_ctx_decode(S, dtype, old_, n, copy, pl, copy + pl, vl, k, idx, zz, "t", 1), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "exponent base"));
    CHECK_ERR(patch_ctx_check_base(S, dtype, old_, n, copy, pl, copy + pl, vl, k, idx, zz, "t", 1), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "exponent base"));
    free(copy);
}

/* A bit of a band header's byte that is 1 in the last encoded chunk. */
static int some_header_has(uint8_t bit)
{
    size_t at = 2;
    int any = 0;
    for (int bd = 0; bd < 16; bd++) {
        unsigned v = enc[at++];
        if (!(v & 3))
            continue;
        any |= (v & bit) != 0;
        while (enc[at++] & 0x80) {
        }
        while (enc[at++] & 0x80) {
        }
    }
    return any;
}

static void test_damage(void)
{
    uint32_t n = 300;
    realistic(n, 1.0);
    for (uint32_t i = 0; i < n; i += 37)
        neu_[i] = (uint16_t)(old_[i] + unzig((uint16_t)(100 + i * 50)));
    damage(n);
    /* a chunk whose bands take the value modes: 300 weights over 20 binades, one step each */
    for (uint32_t i = 0; i < n; i++) {
        old_[i] = bf16((float)pow(2.0, -20.0 * unif()));
        neu_[i] = stepped(old_[i], -0x1p-14f);
    }
    uint32_t pl, vl;
    roundtrip("damage base (value modes)", old_, neu_, n, &pl, &vl);
    CHECK(some_header_has(0x80));
    /* every one falls: its direction bits are symbols where the encoder may write them */
    CHECK(!(enc[0] & PATCH_CTX_SIGN_SYMBOLS) == (freq_tables || raw_signs));
    damage(n);
    /* enough changes for the encoder's two rANS states (unless one is asked for) */
    n = 1200;
    realistic(n, 1.0);
    for (uint32_t i = 0; i < n; i += 3)
        neu_[i] = (uint16_t)(old_[i] + (i & 4 ? 1 : -2));
    roundtrip("damage base (many changes)", old_, neu_, n, &pl, &vl);
    CHECK(count_changes(old_, neu_, n) >= 256);
    CHECK_EQ_INT(enc[0] & ~PATCH_CTX_SIGN_SYMBOLS, coding_for(count_changes(old_, neu_, n)));
    damage(n);
}

/* A chunk written by hand from the format's text: 4 elements of 1.0 (exponent 127: ebase 112,
 * band 15), elements 0 and 1 lowered by one ulp (z = 1, symbol 0). */
static size_t hand(uint8_t *b, int mode, uint8_t rice, int extra_rice, int s, size_t *pl)
{
    size_t n = 0;
    b[n++] = 64;
    b[n++] = 112;
    for (int i = 0; i < 15; i++)
        b[n++] = 0;
    b[n++] = (uint8_t)(mode | s << 2);
    b[n++] = 2;                        /* c_15 */
    b[n++] = (uint8_t)(1 + extra_rice); /* L_15 */
    b[n++] = rice;
    if (extra_rice)
        b[n++] = 0;
    *pl = n;
    b[n++] = 0x80;                     /* freq[0] = 1024 */
    b[n++] = 0x08;
    for (int i = 1; i < 20; i++)
        b[n++] = 0;
    b[n++] = 4;                        /* R */
    b[n++] = 0x00;                     /* final state 2^23, little-endian */
    b[n++] = 0x00;
    b[n++] = 0x80;
    b[n++] = 0x00;
    return n;
}

/* hand()'s chunk a (len bytes, position stream pl) with two rANS states: coding byte 65, R = 8,
 * state 0 then state 1, each 2^23 (the table puts every symbol at one slot range: no state
 * moves). Returns its length. */
static size_t hand2(uint8_t *b, const uint8_t *a, size_t len, size_t pl)
{
    memcpy(b, a, len);
    b[0] = PATCH_POS_CONTEXT2;
    size_t r = pl + 21;                /* R, after the table of 21 bytes */
    b[r] = 8;
    const uint8_t st[4] = {0x00, 0x00, 0x80, 0x00};
    memcpy(b + r + 1, st, 4);
    memcpy(b + r + 5, st, 4);
    return r + 9;
}

/* hand()'s chunk with band 15's values in value mode vm around centre C (bit 7 of its header
 * byte, the mode byte and LEB128 C before its table), its table all on symbol sym (so the rANS
 * state never moves), and the sign and escape bits of its two changes: nesc bytes. */
static size_t hand_vm(uint8_t *b, unsigned vm, uint32_t C, unsigned sym, const uint8_t *esc, size_t nesc,
                      size_t *pl)
{
    size_t n = hand(b, 1, 0x03, 0, 0, pl);
    b[17] |= 0x80;
    uint8_t v[8];
    size_t m = 0;
    v[m++] = (uint8_t)vm;
    do {
        v[m++] = (uint8_t)((C & 0x7F) | (C > 0x7F ? 0x80 : 0));
        C >>= 7;
    } while (C);
    memmove(b + *pl + m, b + *pl, n - *pl);
    memcpy(b + *pl, v, m);
    n += m;
    /* the table: freq[sym] = 1024 (LEB 0x80 0x08), the others 0 */
    size_t t = *pl + m;
    memset(b + t, 0, 21);
    b[t + sym] = 0x80;
    b[t + sym + 1] = 0x08;
    memcpy(b + n, esc, nesc);
    return n + nesc;
}

/* Value modes by hand: centred |d| and predicted new values decode to the same changes, and
 * every field of theirs that can be wrong is refused by name. */
static void test_crafted_value_modes(void)
{
    uint16_t old[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80};
    uint8_t b[160];
    size_t pl, len;
    /* centred, C = 1: d = -1 is |d| = 1 (symbol 0) with sign bits 1, 1 */
    len = hand_vm(b, 1, 1, 0, (const uint8_t[]){0x03}, 1, &pl);
    CHECK_OK(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "v", 2));
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "v", 2));
    CHECK(idx[0] == 0 && idx[1] == 1 && zz[0] == 1 && zz[1] == 1);
    /* predicted, L = 2^-8 (C = 0x3B80), both steps down (direction bits 1, 1): 1.0 - 2^-8 is
     * 0x3F7F, the new values at distance 0 (symbol 0) */
    len = hand_vm(b, 2, 0x3B80, 0, (const uint8_t[]){0x03}, 1, &pl);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "v", 2));
    CHECK(idx[0] == 0 && idx[1] == 1 && zz[0] == 1 && zz[1] == 1);
    /* L = 2^-7 (C = 0x3C00), down: 1.0 - 2^-7 is 0x3F7E, distance +1 (u = 3, symbol 2) */
    len = hand_vm(b, 2, 0x3C00, 2, (const uint8_t[]){0x03}, 1, &pl);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "v", 2));
    CHECK(zz[0] == 1 && zz[1] == 1);
    /* predicted, a new value equal to the old one (0x3F7F + 1): only the base shows it */
    len = hand_vm(b, 2, 0x3B80, 2, (const uint8_t[]){0x03}, 1, &pl);
    CHECK_OK(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "v", 2));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "v", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor v chunk 2: value stream", "equals its old value"));
    /* predicted up (direction bits 0): 1.0 + 2^-7 is 0x3F81, distance -2 (u = 4, symbol 3)
     * lands on 0x3F7F, below the old value: the direction bit is the step's, so this is refused */
    len = hand_vm(b, 2, 0x3C00, 3, (const uint8_t[]){0x00}, 1, &pl);
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "v", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "steps down, its direction bit says up"));
    /* centred, sign bits 0: d = +1 each */
    len = hand_vm(b, 1, 1, 0, (const uint8_t[]){0x00}, 1, &pl);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "v", 2));
    CHECK(zz[0] == 2 && zz[1] == 2);
    /* centred, C = 16384, u = 32769 (symbol 19, escape bits 1): |d| = 32768, legal only as
     * -32768 (sign 1); +32768 is no int16 */
    static const uint8_t neg[4] = {0x03, 0x00, 0x03, 0x00}, pos_[4] = {0x02, 0x00, 0x03, 0x00};
    len = hand_vm(b, 1, 16384, 19, neg, 4, &pl);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "v", 2));
    CHECK(zz[0] == 0xFFFF && zz[1] == 0xFFFF);
    len = hand_vm(b, 1, 16384, 19, pos_, 4, &pl);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "v", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "change 0 is +32768 ulps"));
    /* mode bytes 0 and 3, centres out of range */
    static const struct { unsigned vm; uint32_t C; const char *err; } bad[] = {
        {0, 1, "value mode 0"}, {3, 1, "value mode 3"}, {1, 0, "centre 0 outside [1, 16384]"},
        {1, 16385, "centre 16385 outside"}, {2, 0, "centre 0 outside [1, 32639]"},
        {2, 0x7F80, "centre 32640 outside [1, 32639]"},
    };
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        len = hand_vm(b, bad[t].vm, bad[t].C, 0, (const uint8_t[]){0x03}, 1, &pl);
        CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "v", 2), PULSE_ERR_FORMAT);
        CHECK(err_has("value stream", bad[t].err));
        CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "v", 2), PULSE_ERR_FORMAT);
    }
    /* no sign bits */
    len = hand_vm(b, 1, 1, 0, (const uint8_t[]){0x03}, 1, &pl);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - 1 - pl, 2, 4, "v", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "sign bits end"));
    /* a third sign bit set: padding not zero */
    len = hand_vm(b, 1, 1, 0, (const uint8_t[]){0x07}, 1, &pl);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "v", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "padding not zero"));
    /* the value-mode bit on a band without changes */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    b[16] = 0x80;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "v", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "band 14: a value mode with no change"));
}

/* Weights log-uniform over 20 binades, each moved by one step of one size (a first Adam step, a
 * sign optimizer): the small-step bands code |d| around their centre, the bands of weights near
 * or below the step the new value's distance from old -+ the step, and the chunk costs well
 * under the order-0 floor. */
static void test_wide_magnitudes(void)
{
    uint32_t n = 1u << 18, pl, vl;
    const float step = 0x1p-14f;
    for (uint32_t i = 0; i < n; i++) {
        float w = (float)pow(2.0, -20.0 * unif()) * (rnd() & 1 ? -1.0f : 1.0f);
        old_[i] = bf16(w);
        neu_[i] = stepped(old_[i], rnd() & 1 ? step : -step);
    }
    size_t k = count_changes(old_, neu_, n);
    size_t bytes = roundtrip("wide magnitudes", old_, neu_, n, &pl, &vl);
    double h = order0_bits(old_, neu_, n);
    printf("wide magnitudes 2^18: %zu changes, %.3f bits/change, order-0 floor %.3f (%.3fx)\n", k,
           8.0 * (double)bytes / (double)k, h / (double)k, 8.0 * (double)bytes / h);
    CHECK(8.0 * (double)bytes < 0.25 * h);
    /* which value modes the bands took: walk the headers, then the tables */
    uint8_t flag[16], active[16];
    head_bands(enc, active, flag);
    int seen[3] = {0, 0, 0};
    size_t at = pl;
    for (int bd = 0; bd < 16; bd++) {
        if (!active[bd])
            continue;
        unsigned vm = 0;
        if (flag[bd]) {
            vm = enc[at++];
            while (enc[at++] & 0x80) {
            }
        }
        if (vm < 3)
            seen[vm]++;
        int fields = 20;
        if (enc[0] & PATCH_CTX_COUNT_TABLES) {   /* the symbol set, then a count for all but one */
            uint32_t set = 0;
            for (int sh = 0;; sh += 7) {
                set |= (uint32_t)(enc[at] & 0x7F) << sh;
                if (!(enc[at++] & 0x80))
                    break;
            }
            fields = __builtin_popcount(set) - 1;
        }
        if (vm && (enc[0] & PATCH_CTX_SIGN_SYMBOLS))
            fields++;   /* the count of falling directions */
        for (int y = 0; y < fields; y++)
            while (enc[at++] & 0x80) {
            }
    }
    printf("wide magnitudes: bands by value mode: %d diff, %d centred, %d predicted\n", seen[0], seen[1], seen[2]);
    CHECK(seen[1] > 0);
    CHECK(seen[2] > 0);
}

/* Weights over 20 binades moved by one step, away from zero for 9 in 10 of them (a step larger
 * than a weight mostly grows it): coded as symbols, a value mode's direction bits cost about
 * H(0.9) = 0.47 bits where raw they cost 1, so the chunk is well under its raw-bit coding; where
 * half grow, the bands keep raw bits (symbols would save under an eighth of a bit a change). */
static void test_sign_symbols(void)
{
    uint32_t n = 1u << 16, pl, vl;
    for (int half = 0; half < 2; half++) {
        for (uint32_t i = 0; i < n; i++) {
            int neg = (int)(rnd() & 1), away = unif() < (half ? 0.5 : 0.9);
            old_[i] = bf16((float)pow(2.0, -20.0 * unif()) * (neg ? -1.0f : 1.0f));
            neu_[i] = stepped(old_[i], (neg != away) ? 0x1p-14f : -0x1p-14f);
        }
        const int was = raw_signs;
        set_raw_signs(1);
        size_t raw = roundtrip("sign bits raw", old_, neu_, n, &pl, &vl);
        CHECK(!(enc[0] & PATCH_CTX_SIGN_SYMBOLS));
        set_raw_signs(0);
        size_t sym = roundtrip("sign symbols", old_, neu_, n, &pl, &vl);
        CHECK((!(enc[0] & PATCH_CTX_SIGN_SYMBOLS)) == half);
        set_raw_signs(was);
        printf("sign symbols, %s grow: %zu bytes, raw sign bits %zu (%.3f)\n", half ? "half" : "9 in 10", sym, raw,
               (double)sym / (double)raw);
        if (half)
            CHECK(sym == raw);
        else
            CHECK(sym < 0.95 * (double)raw);
    }
}

/* A sign-symbol chunk by hand: hand()'s two changes (-1 ulp each) in the centred mode around 1,
 * its table a count table of symbol 0, then its direction coding v (0: raw bits, which follow
 * the rANS stream as esc; 2r + 1: r of them fall; 2r + 2: r turn), the rANS state never moving
 * where all or none fall. */
static size_t hand_signs(uint8_t *b, uint8_t coding, uint8_t v, int esc, size_t *pl)
{
    size_t n = hand(b, 1, 0x03, 0, 0, pl);
    b[0] = coding;
    b[17] |= 0x80;
    n = *pl;
    const uint8_t val[] = {1 /* centred */, 1 /* C */, 0x01 /* symbol set {0} */, v, 4, 0x00, 0x00, 0x80, 0x00};
    memcpy(b + n, val, sizeof val);
    n += sizeof val;
    if (esc >= 0)
        b[n++] = (uint8_t)esc;
    return n;
}

static void test_crafted_signs(void)
{
    uint16_t old[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80};
    uint8_t b[64];
    size_t pl;
    const uint8_t coding = PATCH_POS_CONTEXT | PATCH_CTX_COUNT_TABLES | PATCH_CTX_SIGN_SYMBOLS;
    /* both fall */
    size_t len = hand_signs(b, coding, 2 * 2 + 1, -1, &pl);
    CHECK_OK(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "s", 3));
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "s", 3));
    CHECK(idx[0] == 0 && idx[1] == 1 && zz[0] == 1 && zz[1] == 1);   /* -1 each */
    /* none falls: the same bytes decode to +1 each */
    len = hand_signs(b, coding, 1, -1, &pl);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "s", 3));
    CHECK(zz[0] == 2 && zz[1] == 2);
    /* raw direction bits: 1 and 1 after the rANS stream, -1 each again */
    len = hand_signs(b, coding, 0, 0x03, &pl);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "s", 3));
    CHECK(zz[0] == 1 && zz[1] == 1);
    len = hand_signs(b, coding, 0, -1, &pl);
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "s", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "sign bits end"));
    /* one of two falls: the state moves and needs bytes the stream lacks */
    len = hand_signs(b, coding, 2 * 1 + 1, -1, &pl);
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "s", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "rANS stream ends"));
    /* more falling than changes */
    len = hand_signs(b, coding, 2 * 3 + 1, -1, &pl);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "s", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "band 15: 3 falling directions of its 2 changes"));
    /* turns need the previous directions */
    len = hand_signs(b, coding, 2 * 0 + 2, -1, &pl);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "s", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "band 15: turning directions without the previous directions"));
    /* sign symbols need count tables */
    len = hand_signs(b, PATCH_POS_CONTEXT | PATCH_CTX_SIGN_SYMBOLS, 5, -1, &pl);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "s", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "sign symbols without count tables"));
    /* cut before the direction coding */
    len = hand_signs(b, coding, 5, -1, &pl);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, 3, 2, 4, "s", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "direction coding truncated"));
}

/* The nearest BF16 pattern to x by frexp and rint (ties to even in the default rounding mode):
 * the reference for ctx_bf16_round's bit arithmetic. */
static uint16_t ref_round(double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a == 0)
        return sign;
    int e;
    double m = frexp(a, &e);           /* a = m 2^e, m in [0.5, 1): the unbiased exponent is e - 1 */
    if (e - 1 < -126) {
        double q = rint(ldexp(a, 133));
        return (uint16_t)(sign | (uint16_t)q);   /* 128 is the smallest normal */
    }
    double q = rint(ldexp(m, 8));       /* [128, 256] */
    int E = e - 1;
    if (q == 256) {
        q = 128;
        E++;
    }
    if (E > 127)
        return (uint16_t)(sign | 0x7F80);
    return (uint16_t)(sign | (unsigned)(E + 127) << 7 | ((unsigned)q & 0x7F));
}

/* The predicted mode's arithmetic: every finite BF16 pattern's value against the float of its
 * bits, and the rounding of sums and differences of BF16 values over the whole range (subnormals,
 * ties, overflow) against ref_round. */
static void test_value_arith(void)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7F80) == 0x7F80)
            continue;
        uint32_t bits = h << 16;
        float f;
        memcpy(&f, &bits, 4);
        CHECK(ctx_bf16_value((uint16_t)h) == (double)f);
        CHECK_EQ_INT(ctx_bf16_round((double)f), h);
    }
    size_t bad = 0;
    for (int it = 0; it < 2000000; it++) {
        uint16_t a = (uint16_t)rnd(), b = (uint16_t)rnd();
        if (it % 4 == 1)   /* neighbours: ties and carries */
            b = (uint16_t)((a & 0x8000) | ((a + (rnd() % 2000)) & 0x7FFF));
        if ((a & 0x7F80) == 0x7F80 || (b & 0x7F80) == 0x7F80)
            continue;
        double x = it & 1 ? ctx_bf16_value(a) - ctx_bf16_value(b) : ctx_bf16_value(a) + ctx_bf16_value(b);
        bad += ctx_bf16_round(x) != ref_round(x);
    }
    CHECK_EQ_INT(bad, 0);
    /* the order K: each pattern's successor in value is one step up the ring */
    CHECK_EQ_INT(ctx_key16(0x8000), 0xFFFF);
    CHECK_EQ_INT((uint16_t)(ctx_key16(0x8000) + 1), ctx_key16(0x0000));
    CHECK_EQ_INT((uint16_t)(ctx_key16(0x8001) + 1), ctx_key16(0x8000));
    CHECK(ctx_step_down(0x3F80, 0x3F7F) && !ctx_step_down(0x3F7F, 0x3F80) && ctx_step_down(0x0001, 0x8001));
    CHECK_EQ_INT(ctx_predict(0x7FC0, 1, 1.0), 0x7FC0);
    CHECK_EQ_INT(ctx_predict(0x7F7F, 0, ctx_bf16_value(0x7F7F)), 0x7F80);   /* max + max: infinity */
}

/* A band the encoder would predict, one of whose changes lands 32768 steps from its prediction
 * (no symbol codes it): found in the sample or only when the band is written, the band is coded
 * another way and the chunk still round trips. */
static void test_pred_unreachable(void)
{
    const uint32_t n = 3 * 8192;   /* one band of 3 x the sample: the sample takes every third change */
    for (uint32_t i = 0; i < n; i++) {
        old_[i] = (uint16_t)(0x3980u | (rnd() & 0x7Fu));   /* 2^-12..2^-11: one band, 32 ulps a step */
        neu_[i] = stepped(old_[i], -0x1p-14f);
    }
    uint32_t pl, vl;
    roundtrip("one step", old_, neu_, n, &pl, &vl);
    CHECK(some_header_has(0x80));
    for (uint32_t at = 0; at < 2; at++) {   /* position 0 is in the sample, 1 is not */
        uint16_t p = ctx_predict(old_[at], 1, 0x1p-14);
        uint16_t keep = neu_[at];
        neu_[at] = ctx_key16((uint16_t)(ctx_key16(p) + 0x8000u));
        CHECK(ctx_step_down(old_[at], neu_[at]));
        roundtrip(at ? "unreachable, unsampled" : "unreachable, sampled", old_, neu_, n, &pl, &vl);
        /* band 15's header byte: no value mode that needs the prediction */
        size_t hb = 2 + 15;
        CHECK(!(enc[hb] & 0x80) || enc[pl + 0] == 1);
        neu_[at] = keep;
    }
}

/* hand()'s chunk a (len bytes, position stream pl) with a count table (coding byte 66): the
 * band's symbol set {0} (LEB128 1) and no count (its one symbol has all c_15 = 2 changes), in
 * place of the 20 frequencies. Returns its length. */
static size_t hand_counts(uint8_t *b, const uint8_t *a, size_t len, size_t pl)
{
    memcpy(b, a, pl);
    b[0] = PATCH_POS_CONTEXT | PATCH_CTX_COUNT_TABLES;
    b[pl] = 0x01;
    memcpy(b + pl + 1, a + pl + 21, len - pl - 21);
    return len - 20;
}

/* Count tables, by hand: what the encoder writes, what they decode to, and each way one can be
 * malformed. */
static void test_crafted_counts(const uint8_t *a, size_t alen, size_t pl)
{
    uint16_t old[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80}, neu[4] = {0x3F7F, 0x3F7F, 0x3F80, 0x3F80};
    uint8_t b[128], c[128];
    size_t len = hand_counts(b, a, alen, pl);
    uint32_t epl, evl;
    CHECK_OK(patch_ctx_encode(S, PULSE_DT_BF16, old, neu, 4, 2, enc, patch_ctx_bound(4, 2), &epl, &evl));
    CHECK(epl == pl && epl + evl == len && memcmp(enc, b, len) == 0);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3));
    CHECK(idx[0] == 0 && idx[1] == 1 && zz[0] == 1 && zz[1] == 1);
    CHECK_OK(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "h", 3));
    /* the set {0, 1} with symbol 0's count 2 - 1 = 1 leaves nothing for symbol 1 */
    memcpy(c, b, pl);
    c[pl] = 0x03;
    c[pl + 1] = 0x01;
    memcpy(c + pl + 2, b + pl + 1, len - pl - 1);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, len + 1 - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor h chunk 3: value stream", "band 15: symbol counts add up to 2 or more of its 2 changes before symbol 1"));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, c, pl, c + pl, len + 1 - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    /* {0, 1} with symbol 0's count 0 + 1: one change each; the table (512, 512) parses, but
     * the rANS stream that came with {0} is not one of it (its state moves and needs bytes) */
    c[pl + 1] = 0x00;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, len + 1 - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor h chunk 3: value stream", "rANS stream ends at change"));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, c, pl, c + pl, len + 1 - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor h chunk 3: value stream", "rANS stream ends at change"));
    /* an empty set; symbol 20 (2^20: 0x80 0x80 0x40); an overlong set (0x81 0x00); a set that
     * ends the stream */
    memcpy(c, b, len);
    c[pl] = 0x00;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, len - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "band 15: symbol set 0 empty or past the 20 symbols"));
    const uint8_t big[3] = {0x80, 0x80, 0x40}, over[2] = {0x81, 0x00};
    memcpy(c + pl, big, 3);
    memcpy(c + pl + 3, b + pl + 1, len - pl - 1);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, len + 2 - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "band 15: symbol set 0x100000 empty or past the 20 symbols"));
    memcpy(c + pl, over, 2);
    memcpy(c + pl + 2, b + pl + 1, len - pl - 1);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, len + 1 - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "band 15: symbol set malformed"));
    c[pl] = 0x83;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, 1, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "band 15: symbol set truncated"));
    /* a count that ends the stream, one overlong */
    c[pl] = 0x03;
    c[pl + 1] = 0x80;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, 2, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "band 15: symbol 0's count truncated"));
    c[pl + 2] = 0x00;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, 3, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "band 15: symbol 0's count malformed"));
    /* count tables with two rANS states: 67, R = 8 */
    memcpy(c, b, len);
    c[0] = PATCH_POS_CONTEXT | PATCH_CTX_TWO_STATES | PATCH_CTX_COUNT_TABLES;
    c[pl + 1] = 8;
    const uint8_t st[4] = {0x00, 0x00, 0x80, 0x00};
    memcpy(c + pl + 2, st, 4);
    memcpy(c + pl + 6, st, 4);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, c, pl, c + pl, 10, 2, idx, zz, "h", 3));
    CHECK(idx[0] == 0 && idx[1] == 1 && zz[0] == 1 && zz[1] == 1);
    /* a frequency table read as counts (66 on a chunk of 64): the set 0x80 0x08 is 1024, symbol 10 */
    memcpy(c, a, alen);
    c[0] = PATCH_POS_CONTEXT | PATCH_CTX_COUNT_TABLES;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, c, pl, c + pl, alen - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", NULL));
}

static void test_crafted(void)
{
    uint16_t old[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80}, neu[4] = {0x3F7F, 0x3F7F, 0x3F80, 0x3F80};
    uint8_t b[128];
    size_t pl, len = hand(b, 1, 0x03, 0, 0, &pl);   /* mode 1: gaps 0, 0 at s = 0: bits 1, 1 */
    uint32_t epl, evl;
    set_one_state(1);
    set_freq_tables(1);
    CHECK_OK(patch_ctx_encode(S, PULSE_DT_BF16, old, neu, 4, 2, enc, patch_ctx_bound(4, 2), &epl, &evl));
    set_one_state(0);
    CHECK_EQ_INT(epl, pl);
    CHECK_EQ_INT(evl, len - pl);
    CHECK(epl + evl == len && memcmp(enc, b, len) == 0);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3));
    CHECK(idx[0] == 0 && idx[1] == 1 && zz[0] == 1 && zz[1] == 1);
    CHECK_OK(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "h", 3));
    /* two changes: the encoder keeps one state below 256 changes */
    CHECK_OK(patch_ctx_encode(S, PULSE_DT_BF16, old, neu, 4, 2, enc, patch_ctx_bound(4, 2), &epl, &evl));
    CHECK(epl + evl == len && memcmp(enc, b, len) == 0);
    set_freq_tables(0);
    /* the same with two rANS states: coding byte 65, R = 8, both final states 2^23 */
    uint8_t b2[128];
    size_t len2 = hand2(b2, b, len, pl);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b2, pl, b2 + pl, len2 - pl, 2, idx, zz, "h", 3));
    CHECK(idx[0] == 0 && idx[1] == 1 && zz[0] == 1 && zz[1] == 1);
    CHECK_OK(patch_ctx_check(PULSE_DT_BF16, b2, pl, b2 + pl, len2 - pl, 2, 4, "h", 3));
    /* a two-state chunk with one state's bytes (R = 4), and one whose second state is not
     * back at 2^23 */
    memcpy(b2 + pl, b + pl, len - pl);
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b2, pl, b2 + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor h chunk 3: value stream", "rANS stream of 4 bytes"));
    len2 = hand2(b2, b, len, pl);
    b2[len2 - 1] = 0x01;   /* state 1 = 2^23 + 2^24: in range, but not where the encoder started */
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b2, pl, b2 + pl, len2 - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor h chunk 3: value stream", "final state"));
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b2, pl, b2 + pl, len2 - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    /* a coding byte past 67 is no context coding */
    len2 = hand2(b2, b, len, pl);
    b2[0] = 68;
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b2, pl, b2 + pl, len2 - pl, 2, idx, zz, "h", 3), PULSE_ERR_UNSUPPORTED);
    CHECK(err_has("tensor h chunk 3: position stream", "coding byte 68"));
    test_crafted_counts(b, len, pl);

    /* mode 2 for 2 changes among 4 members (unchanged 2, 3: gaps 2, 0 -> bits 0 0 1 1): mode 1 is the choice */
    len = hand(b, 2, 0x0C, 0, 0, &pl);
    CHECK_OK(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "h", 3));   /* needs the base to see */
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor h chunk 3: position stream", "mode 2"));
    /* mode 3 */
    len = hand(b, 3, 0x03, 0, 0, &pl);
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "mode 3"));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "mode 3"));
    /* s = 25 */
    len = hand(b, 1, 0x03, 0, 25, &pl);
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "Rice parameter 25"));
    /* s = 24 is legal: gaps 0, 0 as 1 + 24 zero bits each: 50 bits in 7 bytes; here 1 byte: truncated */
    len = hand(b, 1, 0x03, 0, 24, &pl);
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "ends at gap"));
    /* nonzero padding */
    len = hand(b, 1, 0x83, 0, 0, &pl);
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "does not end"));
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    /* a byte past the last gap (L = 2) */
    len = hand(b, 1, 0x03, 1, 0, &pl);
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "does not end"));
    /* a byte after the last stream of the position stream (L_b do not fill it) */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    memmove(b + pl + 1, b + pl, len - pl);
    b[pl] = 0;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl + 1, b + pl + 1, len - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "Rice streams of 1 bytes"));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl + 1, b + pl + 1, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    /* a trailing byte after the value stream */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    b[len] = 0;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len + 1 - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "escape bits"));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len + 1 - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", NULL));
    /* counts that do not add up to k: c_15 = 3 */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    b[18] = 3;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "add up to 3"));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 3, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "mode 1 for 3 changes"));
    /* an overlong LEB (c_15 = 0x82 0x00) */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    memmove(b + 19, b + 18, len - 18);
    b[18] = 0x82;
    b[19] = 0x00;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl + 1, b + pl + 1, len - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "malformed"));
    /* table not adding to 1024 */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    b[pl + 2] = 1;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "add up to 1025"));
    /* rANS state not back at 2^23 */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    b[len - 4] = 1;
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "final state"));
    /* R past the stream */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    b[len - 5] = 5;
    CHECK_ERR(patch_ctx_check(PULSE_DT_BF16, b, pl, b + pl, len - pl, 2, 4, "h", 3), PULSE_ERR_FORMAT);
    CHECK(err_has("value stream", "rANS stream of 5 bytes"));
    /* another coding byte */
    len = hand(b, 1, 0x03, 0, 0, &pl);
    b[0] = 3;
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, pl, b + pl, len - pl, 2, idx, zz, "h", 3), PULSE_ERR_UNSUPPORTED);
    /* k mismatch in the encoder; no change at all */
    CHECK_ERR(patch_ctx_encode(S, PULSE_DT_BF16, old, neu, 4, 3, enc, patch_ctx_bound(4, 3), &epl, &evl), PULSE_ERR_INVALID);
    CHECK_ERR(patch_ctx_encode(S, PULSE_DT_BF16, old, neu, 4, 1, enc, patch_ctx_bound(4, 3), &epl, &evl), PULSE_ERR_INVALID);
    CHECK_ERR(patch_ctx_encode(S, PULSE_DT_BF16, old, old, 4, 0, enc, patch_ctx_bound(4, 1), &epl, &evl), PULSE_ERR_INVALID);
    CHECK_ERR(patch_ctx_encode(S, PULSE_DT_BF16, old, neu, 4, 2, enc, patch_ctx_bound(4, 2) - 1, &epl, &evl), PULSE_ERR_INVALID);
}

/* F16 weight-like patterns whose exponents spread over [elo, ehi] (0 and 31 are subnormals and
 * Inf/NaN patterns): an element changes with a chance that doubles per exponent below the top,
 * by more ulps there, as an update of one size moves them. */
static void f16_chunk(uint32_t n, unsigned elo, unsigned ehi, double top_p)
{
    for (uint32_t i = 0; i < n; i++) {
        unsigned e = elo + (unsigned)(rnd() % (ehi - elo + 1)), below = ehi - e;
        old_[i] = (uint16_t)((rnd() & 1u) << 15 | e << 10 | (rnd() & 0x3FFu));
        neu_[i] = old_[i];
        if (unif() < top_p * (double)(1u << (below < 12 ? below : 12))) {
            int d = 1 + (int)(rnd() % (1u + (below < 30 ? 1u << (below / 3) : 1024u)));
            neu_[i] = (uint16_t)(old_[i] + (rnd() & 1 ? d : -d));
        }
    }
}

/* F16 chunks: the bands are the 5-bit exponents (the encoder's ebase is the largest minus 15),
 * every kind round trips and survives the damage sweep, the encoder never writes the predicted
 * value mode (BF16's arithmetic), and a decoder refuses one in an F16 chunk. */
static void test_f16(void)
{
    dtype = PULSE_DT_F16;
    static const struct {
        uint32_t n;
        unsigned elo, ehi;
        double p;
    } cases[] = {
        {CAP, 8, 15, 0.001},      /* Llama-like: a few exponents, sparse changes */
        {CAP, 0, 31, 0.0002},     /* every exponent: the lowest lumped into band 0 */
        {CAP - 5, 2, 30, 0.01},   /* many-ulp steps low down: the centred value mode */
        {100000, 14, 14, 0.2},    /* one exponent */
        {4099, 5, 20, 0.02},
        {64, 10, 13, 0.1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint32_t n = cases[c].n, pl, vl;
        f16_chunk(n, cases[c].elo, cases[c].ehi, cases[c].p);
        size_t k = count_changes(old_, neu_, n);
        if (!k)
            neu_[n / 2] ^= 1u;
        unsigned emax = 0;
        for (uint32_t i = 0; i < n; i++)
            emax = exponent(old_[i]) > emax ? exponent(old_[i]) : emax;
        char what[64];
        snprintf(what, sizeof what, "f16 case %zu", c);
        size_t bytes = roundtrip(what, old_, neu_, n, &pl, &vl);
        CHECK(bytes > 0);
        CHECK_EQ_INT(enc[1], emax > 15 ? emax - 15 : 0);
        CHECK(!some_header_has(0x80) || c == 1 || c == 2);   /* value modes only where steps are wide */
        printf("f16 case %zu: %u elements, %zu changes, %.3f bits a change, order-0 floor %.3f\n", c, n,
               count_changes(old_, neu_, n), 8.0 * (double)bytes / (double)count_changes(old_, neu_, n),
               order0_bits(old_, neu_, n) / (double)count_changes(old_, neu_, n));
    }
    /* F16's exponent, not BF16's, makes the bands: the same stream decoded as a BF16 chunk is
     * refused (another exponent base) or gives another NEW */
    f16_chunk(4099, 5, 20, 0.02);
    uint32_t pl, vl;
    size_t k = count_changes(old_, neu_, 4099);
    CHECK(roundtrip("f16 as bf16", old_, neu_, 4099, &pl, &vl) > 0);
    int same = patch_ctx_decode(S, PULSE_DT_BF16, old_, 4099, enc, pl, enc + pl, vl, k, idx, zz, "t", 1) == 0;
    if (same) {
        memcpy(work, old_, 4099 * 2);
        for (size_t j = 0; j < k; j++)
            work[idx[j]] = (uint16_t)(work[idx[j]] + unzig(zz[j]));
        same = memcmp(work, neu_, 4099 * 2) == 0;
    }
    CHECK(!same);
    /* damage sweeps of small F16 chunks, sparse and dense */
    f16_chunk(300, 6, 15, 0.02);
    damage(300);
    f16_chunk(1200, 9, 14, 0.1);
    damage(1200);
    dtype = PULSE_DT_BF16;
    /* the hand-written chunks of test_crafted_value_modes told they are F16: the predicted mode
     * is refused before the base is looked at, the centred one decodes only against its base */
    uint16_t old[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80};
    uint8_t b[160];
    size_t hpl, len = hand_vm(b, 2, 0x3B80, 0, (const uint8_t[]){0x03}, 1, &hpl);
    CHECK_OK(patch_ctx_decode(S, PULSE_DT_BF16, old, 4, b, hpl, b + hpl, len - hpl, 2, idx, zz, "v", 2));
    CHECK_ERR(patch_ctx_check(PULSE_DT_F16, b, hpl, b + hpl, len - hpl, 2, 4, "v", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor v chunk 2: value stream", "predicted value mode in an F16 chunk"));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_F16, old, 4, b, hpl, b + hpl, len - hpl, 2, idx, zz, "v", 2),
              PULSE_ERR_FORMAT);
    CHECK(err_has("tensor v chunk 2: value stream", "predicted value mode in an F16 chunk"));
    len = hand_vm(b, 1, 1, 0, (const uint8_t[]){0x03}, 1, &hpl);
    CHECK_OK(patch_ctx_check(PULSE_DT_F16, b, hpl, b + hpl, len - hpl, 2, 4, "v", 2));
    CHECK_ERR(patch_ctx_decode(S, PULSE_DT_F16, old, 4, b, hpl, b + hpl, len - hpl, 2, idx, zz, "v", 2),
              PULSE_ERR_FORMAT);
    CHECK(err_has("position stream", "exponent base 112, the base's is 0"));
    /* dtypes the coder does not take */
    CHECK_ERR(patch_ctx_encode(S, PULSE_DT_F32, old, old, 4, 1, enc, patch_ctx_bound(4, 1), &pl, &vl),
              PULSE_ERR_INVALID);
    CHECK_ERR(patch_ctx_check(PULSE_DT_F8_E4M3, b, hpl, b + hpl, len - hpl, 2, 4, "v", 2), PULSE_ERR_FORMAT);
    CHECK(err_has("tensor v chunk 2: position stream", "context coding on a chunk of dtype"));
}

int main(void)
{
    S = patch_ctx_scratch_new(CAP);
    enc = malloc(patch_ctx_bound(CAP, CAP));
    idx = malloc(sizeof *idx * CAP);
    zz = malloc(sizeof *zz * CAP);
    work = malloc(2u * CAP);
    old_ = malloc(2u * CAP);
    neu_ = malloc(2u * CAP);
    mark = calloc(CAP, 1);
    if (!S || !enc || !idx || !zz || !work || !old_ || !neu_ || !mark) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    test_value_arith();
    test_f16();
    test_crafted();
    test_crafted_value_modes();
    test_crafted_signs();
    test_count_tables_same_coding();
    /* count tables, two rANS states and sign symbols (what the encoder writes), then what older
     * patches hold: one state, frequency tables, both, raw sign bits */
    for (int mode = 0; mode < 5; mode++) {
        set_one_state(mode & 1);
        set_freq_tables((mode >> 1) & 1);
        set_raw_signs(mode == 4);
        printf("-- %s rANS state%s, %s tables, %s sign bits\n", mode & 1 ? "one" : "two", mode & 1 ? "" : "s",
               (mode >> 1) & 1 ? "frequency" : "count", mode >= 2 ? "raw" : "symbol");
        test_roundtrips();
        test_wide_magnitudes();
        if (mode == 0)
            test_sign_symbols();
        test_pred_unreachable();
        test_random_small();
        test_damage();
    }
    set_one_state(0);
    set_freq_tables(0);
    set_raw_signs(0);
    patch_ctx_scratch_free(S);
    free(enc);
    free(idx);
    free(zz);
    free(work);
    free(old_);
    free(neu_);
    free(mark);
    return check_done("test_ctxcode");
}
