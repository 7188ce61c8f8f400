/* SPDX-License-Identifier: Apache-2.0 */
/* pulse diff: write the sparse patch that turns one checkpoint into the next. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/patch.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse diff OLD NEW -o PATCH [--values abs|ulp] [--context] [--level N] [--threads N]\n"
        "                  [--chunk N]\n"
        "\n"
        "Writes the positions where NEW differs from OLD and NEW's values there (docs/patch-format.md).\n"
        "Prints one line: changes, density, patch bytes and their ratio to the dense checkpoint.\n"
        "\n"
        "  -o PATCH        output file (written to a temporary name, then renamed)\n"
        "  --values CODE   ulp (default): zigzag difference of the bit patterns, about half the bytes;\n"
        "                  abs: the new bit patterns (idempotent)\n"
        "  --context       code BF16 and F16 chunks by the exponents of OLD's values (format 5):\n"
        "                  about 0.7x the bytes, but only a reader holding OLD decodes them (pulse\n"
        "                  apply, squash --base; not sparse updates without OLD or engine-held\n"
        "                  followers; docs/patch-format.md)\n"
        "  --level N       zstd level 1..22 of every stream (default: zstd's fastest search with\n"
        "                  Huffman-coded literals, the smallest and fastest on these streams)\n"
        "  --threads N     threads (default: all cores)\n"
        "  --chunk N       elements per chunk (default 1M; K/M suffixes)\n");
}

int cmd_diff(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("diff");
    }
    const char *paths[2] = { NULL, NULL }, *out = NULL;
    int npaths = 0;
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v;
        if (!strcmp(a, "-o") || !strcmp(a, "--values") || !strcmp(a, "--level")
            || !strcmp(a, "--threads") || !strcmp(a, "--chunk")) {
            if (i + 1 >= argc)
                return cli_usage_error("diff", "%s needs a value", a);
            const char *val = argv[++i];
            if (!strcmp(a, "-o")) {
                if (cli_out_not_stdout("diff", "-o", val))
                    return 2;
                out = val;
            } else if (!strcmp(a, "--values")) {
                if (!strcmp(val, "abs")) o.values = PULSE_VALUES_ABS;
                else if (!strcmp(val, "ulp")) o.values = PULSE_VALUES_ULP;
                else return cli_usage_error("diff", "--values wants abs or ulp, not '%s'", val);
            } else if (!strcmp(a, "--level")) {
                if (cli_parse_u64(val, &v) || v < 1 || v > 22)
                    return cli_usage_error("diff", "--level wants a number from 1 to 22");
                o.zstd_level = (int)v;
            } else if (!strcmp(a, "--threads")) {
                if (cli_parse_u64(val, &v) || v < 1 || v > 1024)
                    return cli_usage_error("diff", "--threads wants a number from 1 to 1024");
                o.threads = (int)v;
            } else {
                if (cli_parse_u64(val, &v) || v < 1 || v > PULSE_PATCH_MAX_CHUNK)
                    return cli_usage_error("diff", "--chunk wants a number from 1 to %u", PULSE_PATCH_MAX_CHUNK);
                o.chunk_elems = (uint32_t)v;
            }
        } else if (!strcmp(a, "--context")) {
            o.context = 1;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("diff", "unknown option '%s'", a);
        } else if (npaths < 2) {
            paths[npaths++] = a;
        } else {
            return cli_usage_error("diff", "too many arguments ('%s')", a);
        }
    }
    if (npaths < 2)
        return cli_usage_error("diff", "needs OLD and NEW checkpoints");
    if (!out)
        return cli_usage_error("diff", "no output given (-o PATCH)");
    if (o.context && o.values != PULSE_VALUES_ULP)
        return cli_usage_error("diff", "--context codes ulp values: it cannot be used with --values abs");

    pulse_ckpt *old_c = NULL, *new_c = NULL;
    pulse_patch *p = NULL;
    int r = pulse_ckpt_open(&old_c, paths[0], PULSE_CKPT_READ);
    if (r)
        return cli_fail("diff", r, paths[0]);
    if ((r = pulse_ckpt_open(&new_c, paths[1], PULSE_CKPT_READ))) {
        pulse_ckpt_close(&old_c);
        return cli_fail("diff", r, paths[1]);
    }
    r = pulse_patch_diff(old_c, new_c, &o, out);
    pulse_ckpt_close(&old_c);
    pulse_ckpt_close(&new_c);
    if (r)
        return cli_fail("diff", r, "cannot write the patch");
    pulse_patch_stats st;
    if ((r = pulse_patch_open(&p, out)) || (r = pulse_patch_info(p, 0, &st))) {
        pulse_patch_close(&p);
        return cli_fail("diff", r, out);
    }
    uint64_t elementwise = cli_patch_elementwise(p);   /* as `pulse inspect` counts */
    pulse_patch_close(&p);
    char op[64];
    cli_opaque_note(op, sizeof op, st.opaque_changes);
    printf("%" PRIu64 " changes of %" PRIu64 " elements (%.3f%%)%s, %" PRIu64 " bytes (%.3f%% of %" PRIu64
           " dense bytes, %s)\n", st.changes, elementwise,
           elementwise ? 100.0 * (double)st.changes / (double)elementwise : 0.0, op, st.file_bytes,
           st.dense_bytes ? 100.0 * (double)st.file_bytes / (double)st.dense_bytes : 0.0, st.dense_bytes,
           o.values == PULSE_VALUES_ULP ? "ulp" : "abs");
    return cli_finish_stdout("diff");
}
