/* SPDX-License-Identifier: Apache-2.0 */
/* pulse squash: compose consecutive patches into one absolute patch (for late joiners). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/patch.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse squash P1 P2 ... -o P [--base CKPT] [--level N] [--threads N]\n"
        "\n"
        "Writes one absolute patch from P1's base state to the last patch's result state.\n"
        "Each patch must start where the previous one ends. ulp-coded inputs need the checkpoint\n"
        "in P1's base state (--base, checked by state id); with it, the output holds exactly the\n"
        "elements where the result differs from the base.\n"
        "\n"
        "  -o P          output patch (written to a temporary name, then renamed)\n"
        "  --base CKPT   the checkpoint P1 applies to\n"
        "  --level N     zstd level 1..22 (default: zstd's fastest search with Huffman-coded\n"
        "                literals, as for pulse diff: the smallest and fastest on these streams)\n"
        "  --threads N   threads (default: all cores)\n");
}

int cmd_squash(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("squash");
    }
    const char *out = NULL, *base_path = NULL;
    int threads = 0, level = 0, n = 0;   /* 0: the library's default level */
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    if (!inputs)
        return cli_fail("squash", PULSE_ERR_NOMEM, "arguments");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") || !strcmp(a, "--base") || !strcmp(a, "--level") || !strcmp(a, "--threads")) {
            if (i + 1 >= argc) {
                free(inputs);
                return cli_usage_error("squash", "%s needs a value", a);
            }
            const char *val = argv[++i];
            uint64_t v = 0;
            if (!strcmp(a, "-o")) {
                if (cli_out_not_stdout("squash", "-o", val)) {
                    free(inputs);
                    return 2;
                }
                out = val;
            }
            else if (!strcmp(a, "--base"))
                base_path = val;
            else if (cli_parse_u64(val, &v) || v < 1 || v > (strcmp(a, "--level") ? 1024u : 22u)) {
                free(inputs);
                return cli_usage_error("squash", "%s: bad number '%s'", a, val);
            } else if (!strcmp(a, "--level"))
                level = (int)v;
            else
                threads = (int)v;
        } else if (a[0] == '-' && a[1]) {
            free(inputs);
            return cli_usage_error("squash", "unknown option '%s'", a);
        } else {
            inputs[n++] = a;
        }
    }
    if (n < 1 || !out) {
        free(inputs);
        return cli_usage_error("squash", n < 1 ? "no patches given" : "no output given (-o P)");
    }
    pulse_patch **p = calloc((size_t)n, sizeof *p);
    pulse_ckpt *base = NULL;
    int r = p ? 0 : PULSE_ERR_NOMEM;
    const char *what = "arguments";
    for (int i = 0; !r && i < n; i++)
        if ((r = pulse_patch_open(&p[i], inputs[i])))
            what = inputs[i];
    if (!r && base_path && (r = pulse_ckpt_open(&base, base_path, PULSE_CKPT_READ)))
        what = base_path;
    if (!r && (r = pulse_patch_squash(p, (size_t)n, base, threads, level, out)))
        what = "cannot squash";
    for (int i = 0; p && i < n; i++)
        pulse_patch_close(&p[i]);
    free(p);
    pulse_ckpt_close(&base);
    free(inputs);
    return r ? cli_fail("squash", r, what) : 0;
}
