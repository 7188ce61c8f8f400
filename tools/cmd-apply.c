/* SPDX-License-Identifier: Apache-2.0 */
/* pulse apply: apply a verified patch to a copy of a checkpoint or in place. */
#include <stdio.h>
#include <string.h>

#include "base/fail.h"
#include "node/patch/patch_undo.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/patch.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse apply BASE PATCH -o OUT [--threads N]\n"
        "       pulse apply --in-place CKPT PATCH [--threads N]\n"
        "\n"
        "Checks that the checkpoint is the patch's base state and that every chunk of the patch\n"
        "is intact before writing anything, applies it, and checks the result's state id.\n"
        "With -o, OUT is created only on success. With --in-place, CKPT is left as it was when the\n"
        "patch is refused: the bytes at every position the patch writes are saved first (~4 +\n"
        "element size bytes a change; past PULSE_UNDO_MEMORY, 64M by default, in an unlinked\n"
        "temporary CKPT.undo.XXXXXX beside CKPT, so its directory needs that room) and put back\n"
        "if the result is not the patch's result.\n"
        "An in-place apply that is killed part-way leaves CKPT torn (pulse pull and pulse node\n"
        "follow journal each step and finish it after a crash).\n"
        "\n"
        "  -o OUT        write the result to OUT (same layout as BASE)\n"
        "  --in-place    modify CKPT itself\n"
        "  --threads N   threads (default: all cores)\n"
        "\n"
        "Environment: PULSE_APPLY_CACHE=<bytes>[K|M|G] caps the memory that keeps each chunk's\n"
        "decoded streams between the check and the write (default 64M, about 49M changes;\n"
        "larger patches decode the rest twice; 0 = off).\n");
}

/* What failed, for the error line: the patch (refused: wrong base, damaged, ...) or the
 * machine (a full disk, memory) while writing `target`. */
static const char *why(int err, const char *target)
{
    return err == PULSE_ERR_IO || err == PULSE_ERR_NOMEM ? target : "patch refused";
}

static int apply_opened(pulse_patch *p, const char *const paths[2], const char *out, int in_place, int threads);

int cmd_apply(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("apply");
    }
    const char *paths[2] = { NULL, NULL }, *out = NULL;
    int npaths = 0, in_place = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--in-place")) {
            in_place = 1;
        } else if (!strcmp(a, "-o")) {
            if (i + 1 >= argc)
                return cli_usage_error("apply", "-o needs a value");
            out = argv[++i];
            if (cli_out_not_stdout("apply", "-o", out))
                return 2;
        } else if (!strcmp(a, "--threads")) {
            uint64_t v;
            if (i + 1 >= argc || cli_parse_u64(argv[i + 1], &v) || v < 1 || v > 1024)
                return cli_usage_error("apply", "--threads wants a number from 1 to 1024");
            threads = (int)v;
            i++;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("apply", "unknown option '%s'", a);
        } else if (npaths < 2) {
            paths[npaths++] = a;
        } else {
            return cli_usage_error("apply", "too many arguments ('%s')", a);
        }
    }
    if (npaths < 2)
        return cli_usage_error("apply", "needs a checkpoint and a patch");
    if (in_place == !!out)
        return cli_usage_error("apply", "give exactly one of -o OUT and --in-place");

    pulse_patch *p = NULL;
    int r = pulse_patch_open(&p, paths[1]);
    if (r)
        return cli_fail("apply", r, "cannot read the patch");
    r = apply_opened(p, paths, out, in_place, threads);
    pulse_patch_close(&p);
    return r;
}

static int apply_opened(pulse_patch *p, const char *const paths[2], const char *out, int in_place, int threads)
{
    int r;
    pulse_ckpt *base = NULL, *target = NULL;
    if (in_place) {
        if ((r = pulse_ckpt_open(&target, paths[0], PULSE_CKPT_WRITE))) {
            return cli_fail("apply", r, paths[0]);
        }
        /* Every check but the result's can be made before the first write (pass 1); the
         * result's only after, so the old bytes are kept to put back. */
        patch_undo undo;
        char stem[4200];   /* a large undo goes beside CKPT (page cache), not into memory */
        snprintf(stem, sizeof stem, "%s.undo", paths[0]);
        r = patch_undo_save(&undo, p, target, threads, stem);
        if (!r) {
            r = pulse_patch_apply(p, target, threads);
            if (!r)
                r = pulse_ckpt_sync(target);
            if (r) {
                char detail[1024];
                snprintf(detail, sizeof detail, "%s", pulse_last_error());
                char *tail = strstr(detail, " (target was written)");
                if (tail)
                    *tail = '\0';
                patch_undo_restore(&undo, target);
                int sr = pulse_ckpt_sync(target);
                if (sr)
                    r = pulse_fail(sr, "%s; putting %s back: %s", detail, paths[0], pulse_last_error());
                else
                    pulse_fail(r, "%s (%s left as it was)", detail, paths[0]);
            }
            patch_undo_free(&undo);
        }
        pulse_ckpt_close(&target);
        return r ? cli_fail("apply", r, why(r, paths[0])) : 0;
    }
    if ((r = pulse_ckpt_open(&base, paths[0], PULSE_CKPT_READ)))
        return cli_fail("apply", r, paths[0]);
    /* Checked before copying the base: a patch for another state fails fast. */
    r = pulse_patch_verify(p, base, threads);
    if (!r && (r = pulse_ckpt_create_like(&target, out, base)) == 0) {
        r = pulse_patch_apply(p, target, threads);
        if (!r)
            r = pulse_ckpt_commit(target);
        pulse_ckpt_close(&target);   /* without commit this removes the temporary files */
    }
    pulse_ckpt_close(&base);
    return r ? cli_fail("apply", r, why(r, out)) : 0;
}
