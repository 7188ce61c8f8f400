/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of an in-place apply's undo (node/patch/patch_undo.c): in memory, and past PULSE_UNDO_MEMORY in an unlinked temporary beside the target, mapped (or in memory where none can be made); either way the bytes it saved put the target back as it was, and nothing is left beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "node/patch/patch_undo.h"
#include "check.h"
#include "dir_entries.h"

#define NA 70001   /* BF16, several 4K-element chunks */
#define NB 333     /* I64 token table: an OPAQUE tensor, replaced whole */

static uint16_t old_a[NA], new_a[NA], work_a[NA];
static int64_t old_b[NB], new_b[NB], work_b[NB];

static pulse_ckpt *wrap(uint16_t *a, int64_t *b, int flags)
{
    pulse_mem_tensor t[2] = {
        { .name = "a", .dtype_name = "BF16", .ndim = 1, .shape = { NA }, .data = a, .nbytes = sizeof old_a },
        { .name = "b", .dtype_name = "I64", .ndim = 1, .shape = { NB }, .data = b, .nbytes = sizeof old_b },
    };
    pulse_ckpt *c = NULL;
    CHECK_OK(pulse_ckpt_wrap(&c, t, 2, flags));
    return c;
}

/* Save, apply, then put back: the target as it was; `mapped` says which road the undo took. */
static void round_trip(const pulse_patch *p, const char *stem, int mapped)
{
    memcpy(work_a, old_a, sizeof work_a);
    memcpy(work_b, old_b, sizeof work_b);
    pulse_ckpt *t = wrap(work_a, work_b, PULSE_CKPT_WRITE);
    patch_undo u;
    CHECK_OK(patch_undo_save(&u, p, t, 2, stem));
    CHECK((u.map != NULL) == mapped);
    CHECK_OK(pulse_patch_apply(p, t, 2));
    CHECK(!memcmp(work_a, new_a, sizeof work_a) && !memcmp(work_b, new_b, sizeof work_b));
    patch_undo_restore(&u, t);
    CHECK(!memcmp(work_a, old_a, sizeof work_a) && !memcmp(work_b, old_b, sizeof work_b));
    patch_undo_free(&u);
    CHECK(u.map == NULL && u.ent == NULL);
    pulse_ckpt_close(&t);
}

int main(void)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < NA; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        old_a[i] = (uint16_t)(0x3c00 + (x & 0x3ff));
        new_a[i] = (uint16_t)(old_a[i] + (x >> 20) % 5 - 2);   /* about 60 % change, by +-1 or +-2 */
    }
    for (size_t i = 0; i < NB; i++) {
        old_b[i] = (int64_t)i;
        new_b[i] = (int64_t)(i % 7 ? i : i + 1);
    }
    char dir[] = "/tmp/pulse-undo-test.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], stem[256];
    snprintf(path, sizeof path, "%s/p", dir);
    snprintf(stem, sizeof stem, "%s/ckpt.undo", dir);
    pulse_ckpt *a = wrap(old_a, old_b, PULSE_CKPT_READ), *b = wrap(new_a, new_b, PULSE_CKPT_READ);
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.chunk_elems = 4096;
    CHECK_OK(pulse_patch_diff(a, b, &o, path));
    pulse_patch *p = NULL;
    CHECK_OK(pulse_patch_open(&p, path));

    /* Under the cap (64 MiB by default): in memory. */
    unsetenv("PULSE_UNDO_MEMORY");
    round_trip(p, stem, 0);
    /* Past it: in a temporary beside the target, unlinked at once (only the patch is there). */
    setenv("PULSE_UNDO_MEMORY", "0", 1);
    round_trip(p, stem, 1);
    CHECK_EQ_INT(dir_entries(dir), 1);
    /* No temporary can be made there: in memory instead, not an error. */
    round_trip(p, "/nonexistent/dir/ckpt.undo", 0);
    /* No place given: in memory. */
    round_trip(p, NULL, 0);

    pulse_patch_close(&p);
    pulse_ckpt_close(&a);
    pulse_ckpt_close(&b);
    unlink(path);
    rmdir(dir);
    return check_done("test_undo");
}
