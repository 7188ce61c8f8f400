/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of sliced patches: a head plus the chunks of some element ranges, supplied by byte range, give exactly the whole patch's changes in those chunks; damaged, misplaced and absent chunks are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "check.h"

#define CHUNK 64
#define ROWS 40
#define COLS 32   /* a 40x32 BF16 matrix: 1280 elements, 20 chunks */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static pulse_ckpt *wrap(uint16_t *w, uint8_t *bytes, float *f)
{
    pulse_mem_tensor mt[3];
    memset(mt, 0, sizeof mt);
    mt[0] = (pulse_mem_tensor){ .name = "a.w", .dtype_name = "BF16", .ndim = 2, .shape = { ROWS, COLS }, .data = w,
                                .nbytes = ROWS * COLS * 2 };
    mt[1] = (pulse_mem_tensor){ .name = "b.ids", .dtype_name = "U8", .ndim = 1, .shape = { 300 }, .data = bytes,
                                .nbytes = 300 };
    mt[2] = (pulse_mem_tensor){ .name = "c.f", .dtype_name = "F32", .ndim = 1, .shape = { 500 }, .data = f,
                                .nbytes = 500 * 4 };
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c, mt, 3, PULSE_CKPT_READ));
    return c;
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len);
    CHECK(fread(b, 1, *len, f) == *len);
    fclose(f);
    return b;
}

/* Tensor i's updates (index, deltas) of p. */
static uint64_t updates(const pulse_patch *p, size_t i, int64_t **idx, uint16_t **d)
{
    uint64_t n = pulse_patch_tensor_changes(p, i);
    *idx = malloc((n ? n : 1) * sizeof **idx);
    *d = malloc((n ? n : 1) * 4);
    CHECK_OK(pulse_patch_tensor_updates(p, i, NULL, 2, *idx, NULL, *d));
    return n;
}

int main(void)
{
    char dir[] = "/tmp/pulse-slice-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    static uint16_t w0[ROWS * COLS], w1[ROWS * COLS];
    static uint8_t b0[300], b1[300];
    static float f0[500], f1[500];
    for (size_t i = 0; i < ROWS * COLS; i++) {
        w0[i] = (uint16_t)rnd();
        w1[i] = w0[i] + (rnd() % 10 == 0 ? 1 : 0);
    }
    for (size_t i = 0; i < 300; i++)
        b1[i] = b0[i] = (uint8_t)rnd();
    b1[7] ^= 1;
    for (size_t i = 0; i < 500; i++)
        f1[i] = f0[i] = (float)i;
    f1[3] = 9.5f;
    pulse_ckpt *old = wrap(w0, b0, f0), *new_ = wrap(w1, b1, f1);
    char path[300];
    snprintf(path, sizeof path, "%s/p.patch", dir);
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.chunk_elems = CHUNK;
    CHECK_OK(pulse_patch_diff(old, new_, &o, path));
    size_t len = 0;
    uint8_t *bytes = read_all(path, &len);
    pulse_patch *whole = NULL, *p = NULL;
    CHECK_OK(pulse_patch_open_mem(&whole, bytes, len));
    const uint64_t head = pulse_patch_head_bytes(whole);
    CHECK(head > 104 && head < len);
    CHECK(!pulse_patch_is_sliced(whole));

    /* The head alone, exactly: a longer or shorter buffer, or another patch size, is refused. */
    CHECK_ERR(pulse_patch_open_head(&p, bytes, (size_t)head + 1, len), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_patch_open_head(&p, bytes, (size_t)head - 1, len), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_patch_open_head(&p, bytes, (size_t)head, len + 1), PULSE_ERR_FORMAT);
    uint8_t *bad_head = malloc(head);
    memcpy(bad_head, bytes, head);
    bad_head[head - 40] ^= 1;   /* inside the table: the header digest catches it */
    CHECK_ERR(pulse_patch_open_head(&p, bad_head, (size_t)head, len), PULSE_ERR_CORRUPT);
    free(bad_head);
    CHECK_OK(pulse_patch_open_head(&p, bytes, (size_t)head, len));
    CHECK(pulse_patch_is_sliced(p));

    size_t ia = 9, ib = 9, ic = 9;
    CHECK_OK(pulse_patch_tensor_find(p, "a.w", &ia));
    CHECK_OK(pulse_patch_tensor_find(p, "b.ids", &ib));
    CHECK_OK(pulse_patch_tensor_find(p, "c.f", &ic));
    CHECK_ERR(pulse_patch_tensor_find(p, "zz", &ia), PULSE_ERR_NOTFOUND);
    CHECK_EQ_INT(ia, 0);

    /* Nothing present: nothing counted, nothing to verify, no absent chunk read. */
    CHECK_EQ_INT(pulse_patch_tensor_changes(p, ia), 0);
    CHECK_OK(pulse_patch_verify(p, NULL, 2));
    CHECK_EQ_INT(pulse_patch_missing(p, 0, NULL, 0), 0);

    /* Rows 10..20 of a.w: elements 320..640, chunks 5..9 (those that changed). */
    CHECK_ERR(pulse_patch_want(p, ia, 0, ROWS * COLS + 1), PULSE_ERR_MISMATCH);
    CHECK_ERR(pulse_patch_want(p, ia, 5, 5), PULSE_ERR_MISMATCH);
    CHECK_ERR(pulse_patch_want(whole, ia, 0, 1), PULSE_ERR_INVALID);
    CHECK_OK(pulse_patch_want(p, ia, 10 * COLS, 20 * COLS));
    pulse_patch_range rg[8];
    size_t n = pulse_patch_missing(p, 0, rg, 8);
    CHECK_EQ_INT(n, 1);   /* neighbouring chunks: one range */
    size_t n1 = pulse_patch_missing(p, 1, rg, 8);   /* at most 1 byte a range: one a chunk */
    CHECK(n1 >= 4);
    CHECK_EQ_INT(pulse_patch_missing(p, 0, rg, 8), 1);
    uint64_t fetched = rg[0].length;
    CHECK(fetched < len - head);

    /* A damaged range is refused whole; one that cuts a chunk is refused; nothing is added. */
    uint8_t *dam = malloc(rg[0].length);
    memcpy(dam, bytes + rg[0].offset, rg[0].length);
    dam[rg[0].length - 1] ^= 0x40;
    CHECK_ERR(pulse_patch_supply(p, rg[0].offset, dam, rg[0].length), PULSE_ERR_CORRUPT);
    CHECK_ERR(pulse_patch_supply(p, rg[0].offset + 1, bytes + rg[0].offset + 1, rg[0].length - 1), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_patch_supply(p, rg[0].offset, bytes + rg[0].offset, rg[0].length - 1), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_patch_supply(p, 0, bytes, 10), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_patch_supply(p, len - 1, bytes + len - 1, 2), PULSE_ERR_INVALID);
    free(dam);
    CHECK_EQ_INT(pulse_patch_tensor_changes(p, ia), 0);
    CHECK_OK(pulse_patch_supply(p, rg[0].offset, bytes + rg[0].offset, rg[0].length));
    CHECK_EQ_INT(pulse_patch_missing(p, 0, NULL, 0), 0);
    CHECK_OK(pulse_patch_verify(p, NULL, 2));

    /* The sliced updates are the whole patch's updates in those chunks, exactly. */
    int64_t *wi, *si;
    uint16_t *wd, *sd;
    uint64_t wn = updates(whole, ia, &wi, &wd), sn = updates(p, ia, &si, &sd);
    CHECK(sn > 0 && sn < wn);
    uint64_t k = 0;
    for (uint64_t j = 0; j < wn; j++) {
        if (wi[j] / CHUNK < 5 || wi[j] / CHUNK > 9)
            continue;
        CHECK(k < sn && si[k] == wi[j] && sd[k] == wd[j]);
        k++;
    }
    CHECK_EQ_INT(k, sn);
    for (uint64_t j = 0; j < sn; j++)
        CHECK(si[j] >= 5 * CHUNK && si[j] < 10 * CHUNK);
    free(wi), free(wd), free(si), free(sd);

    /* Reading a chunk that was not supplied is refused by name. */
    pulse_patch_tensor_info info;
    CHECK_ERR(pulse_patch_tensor_info_get(p, ia, 1, &info), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "not fetched") != NULL);

    /* Tensors not asked for are empty; asking for the opaque one wants all of its chunks. */
    CHECK_EQ_INT(pulse_patch_tensor_changes(p, ic), 0);
    CHECK_OK(pulse_patch_want(p, ib, 7, 8));
    CHECK_OK(pulse_patch_want(p, ic, 3, 4));
    n = pulse_patch_missing(p, 0, rg, 8);
    CHECK(n >= 1 && n <= 2);
    for (size_t r = 0; r < n && r < 8; r++)
        CHECK_OK(pulse_patch_supply(p, rg[r].offset, bytes + rg[r].offset, rg[r].length));
    CHECK_EQ_INT(pulse_patch_tensor_changes(p, ic), 1);
    CHECK_EQ_INT(pulse_patch_tensor_changes(p, ib), 1);

    /* A sliced patch is never applied or squashed into a whole checkpoint. */
    static uint16_t t0[ROWS * COLS];
    memcpy(t0, w0, sizeof t0);
    pulse_mem_tensor mt[3];
    memset(mt, 0, sizeof mt);
    static uint8_t tb[300];
    static float tf[500];
    memcpy(tb, b0, 300);
    memcpy(tf, f0, sizeof tf);
    mt[0] = (pulse_mem_tensor){ .name = "a.w", .dtype_name = "BF16", .ndim = 2, .shape = { ROWS, COLS }, .data = t0,
                                .nbytes = sizeof t0 };
    mt[1] = (pulse_mem_tensor){ .name = "b.ids", .dtype_name = "U8", .ndim = 1, .shape = { 300 }, .data = tb,
                                .nbytes = 300 };
    mt[2] = (pulse_mem_tensor){ .name = "c.f", .dtype_name = "F32", .ndim = 1, .shape = { 500 }, .data = tf,
                                .nbytes = sizeof tf };
    pulse_ckpt *target = NULL;
    CHECK_OK(pulse_ckpt_wrap(&target, mt, 3, PULSE_CKPT_READ | PULSE_CKPT_WRITE));
    CHECK_ERR(pulse_patch_apply(p, target, 1), PULSE_ERR_INVALID);
    CHECK(!memcmp(t0, w0, sizeof t0));
    char out[300];
    snprintf(out, sizeof out, "%s/sq.patch", dir);
    CHECK_ERR(pulse_patch_squash(&p, 1, old, 1, 0, out), PULSE_ERR_INVALID);
    CHECK(access(out, F_OK) != 0);
    pulse_ckpt_close(&target);

    /* Pieces: rows [10, 20) of a.w, and columns [8, 16) of every row, written straight into
     * parameters that hold just them, from the whole patch and from the sliced one. */
    {
        static uint16_t rows[10 * COLS], cols[ROWS * 8];
        const pulse_patch *from[2] = { whole, p };
        for (int k = 0; k < 2; k++) {
            for (size_t r = 0; r < 10; r++)
                memcpy(rows + r * COLS, w0 + (10 + r) * COLS, COLS * 2);
            for (size_t r = 0; r < ROWS; r++)
                memcpy(cols + r * 8, w0 + r * COLS + 8, 16);
            pulse_piece pr = { .rows = ROWS, .cols = COLS, .dim = 0, .start = 10, .stop = 20, .param_cols = COLS };
            pulse_piece pcol = { .rows = ROWS, .cols = COLS, .dim = 1, .start = 8, .stop = 16, .param_cols = 8 };
            uint64_t nw = 0;
            CHECK_OK(pulse_patch_apply_piece(from[k], ia, &pr, rows, 10 * COLS, 2, &nw));
            int same = 1;
            for (size_t r = 0; r < 10; r++)
                same &= !memcmp(rows + r * COLS, w1 + (10 + r) * COLS, COLS * 2);
            CHECK(same);
            CHECK(nw > 0);
            if (k == 0) {   /* the sliced patch holds rows 10..20 only */
                CHECK_OK(pulse_patch_apply_piece(from[k], ia, &pcol, cols, ROWS * 8, 1, &nw));
                same = 1;
                for (size_t r = 0; r < ROWS; r++)
                    same &= !memcmp(cols + r * 8, w1 + r * COLS + 8, 16);
                CHECK(same);
            }
        }
        /* Refused before any write: rows past the tensor, a parameter too small, an opaque tensor. */
        memcpy(rows, w0, sizeof rows);
        pulse_piece bad = { .rows = ROWS, .cols = COLS, .dim = 0, .start = 35, .stop = 41, .param_cols = COLS };
        CHECK_ERR(pulse_patch_apply_piece(whole, ia, &bad, rows, 10 * COLS, 1, NULL), PULSE_ERR_MISMATCH);
        bad = (pulse_piece){ .rows = ROWS, .cols = COLS, .dim = 0, .start = 0, .stop = 11, .param_cols = COLS };
        CHECK_ERR(pulse_patch_apply_piece(whole, ia, &bad, rows, 10 * COLS, 1, NULL), PULSE_ERR_MISMATCH);
        bad = (pulse_piece){ .rows = ROWS, .cols = COLS, .dim = 1, .start = 0, .stop = 8, .param_cols = 8, .at = 1 };
        CHECK_ERR(pulse_patch_apply_piece(whole, ia, &bad, cols, ROWS * 8, 1, NULL), PULSE_ERR_MISMATCH);
        bad = (pulse_piece){ .rows = 20, .cols = COLS, .dim = 0, .start = 0, .stop = 5, .param_cols = COLS };
        CHECK_ERR(pulse_patch_apply_piece(whole, ia, &bad, rows, 10 * COLS, 1, NULL), PULSE_ERR_MISMATCH);
        bad = (pulse_piece){ .rows = 1, .cols = 300, .dim = 0, .start = 0, .stop = 1, .param_cols = 300 };
        static uint8_t ids[300];
        CHECK_ERR(pulse_patch_apply_piece(whole, ib, &bad, ids, 300, 1, NULL), PULSE_ERR_INVALID);
        CHECK(!memcmp(rows, w0, sizeof rows));
    }

    /* A whole patch verified once (in memory) is not decoded again, and still refuses nothing. */
    CHECK_OK(pulse_patch_verify(whole, NULL, 2));
    CHECK_OK(pulse_patch_verify(whole, old, 2));

    pulse_patch_close(&p);
    pulse_patch_close(&whole);
    pulse_ckpt_close(&old);
    pulse_ckpt_close(&new_);
    free(bytes);
    unlink(path);
    rmdir(dir);
    return check_done("patch-slice");
}
