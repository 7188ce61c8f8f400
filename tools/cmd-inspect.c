/* SPDX-License-Identifier: Apache-2.0 */
/* pulse inspect: what a patch holds, per tensor and in total, against the order-0 entropy bound. */
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
        "usage: pulse inspect PATCH [--json]\n"
        "\n"
        "Decodes PATCH (checking every chunk digest) and prints, per tensor and in total: changes,\n"
        "density, compressed bytes of the position and value streams, bits per change, and the\n"
        "order-0 entropy bound of the coded symbols (gaps and value symbols, with their empirical\n"
        "frequencies) for comparison.\n"
        "\n"
        "  --json   one JSON object instead of the table\n");
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

int cmd_inspect(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("inspect");
    }
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        else if (path)
            return cli_usage_error("inspect", "one patch at a time");
        else
            path = argv[i];
    }
    if (!path)
        return cli_usage_error("inspect", "no patch given");
    pulse_patch *p = NULL;
    int r = pulse_patch_open(&p, path);
    if (r)
        return cli_fail("inspect", r, "cannot read the patch");
    pulse_patch_stats st;
    size_t n = pulse_patch_tensor_count(p);
    /* Everything is decoded (and so checked) before anything is printed. */
    if ((r = pulse_patch_info(p, 1, &st))) {
        pulse_patch_close(&p);
        return cli_fail("inspect", r, path);
    }
    char base[65], result[65];
    pulse_id_hex(pulse_patch_base_id(p), base);
    pulse_id_hex(pulse_patch_result_id(p), result);
    const char *code = pulse_patch_values(p) == PULSE_VALUES_ULP ? "ulp" : "abs";
    double coded_bits = 8.0 * (double)(st.pos_bytes + st.val_bytes);
    if (json) {
        printf("{\"format\":%d,\"values\":\"%s\",\"base\":\"%s\",\"result\":\"%s\",\"chunk_elems\":%u,"
               "\"tensors\":[", pulse_patch_version(p), code, base, result, pulse_patch_chunk_elems(p));
    } else {
        printf("patch %s: format %d, values %s, chunk %u elements\nbase   %s\nresult %s\n\n",
               path, pulse_patch_version(p), code, pulse_patch_chunk_elems(p), base, result);
        printf("%-40s %-8s %12s %9s %10s %10s %9s %9s\n", "tensor", "dtype", "changes", "density",
               "pos bytes", "val bytes", "bits/chg", "bound");
    }
    uint64_t elementwise = 0;   /* elements of element-wise tensors: what changes counts */
    for (size_t i = 0; i < n; i++) {
        pulse_patch_tensor_info ti;
        if ((r = pulse_patch_tensor_info_get(p, i, 1, &ti))) {
            pulse_patch_close(&p);
            return cli_fail("inspect", r, path);
        }
        int opaque = ti.dtype == PULSE_DT_OPAQUE;
        elementwise += opaque ? 0 : ti.nelems;
        double bits = ratio(8.0 * (double)(ti.pos_bytes + ti.val_bytes), (double)ti.changes);
        double bound = ratio(ti.entropy_bits, (double)ti.changes);
        if (json) {
            printf("%s{\"name\":", i ? "," : "");
            cli_json_str(ti.name);
            printf(",\"dtype\":");
            cli_json_str(ti.dtype_name);
            printf(",\"elements\":%" PRIu64 ",\"changes\":%" PRIu64 ",\"opaque\":%s,\"pos_bytes\":%" PRIu64
                   ",\"val_bytes\":%" PRIu64 ",\"bits_per_change\":%.4f,\"entropy_bits\":%.1f}",
                   ti.nelems, ti.changes, ti.dtype == PULSE_DT_OPAQUE ? "true" : "false",
                   ti.pos_bytes, ti.val_bytes, bits, ti.entropy_bits);
        } else {
            /* an OPAQUE tensor's changes are bytes, replaced whole chunks at a time: no density */
            char b[32] = "replace", d[32] = "bytes";
            if (!opaque) {
                snprintf(b, sizeof b, "%.3f", bound);
                snprintf(d, sizeof d, "%.4f%%", 100.0 * ratio((double)ti.changes, (double)ti.nelems));
            }
            printf("%-40s %-8s %12" PRIu64 " %9s %10" PRIu64 " %10" PRIu64 " %9.3f %9s\n", ti.name,
                   ti.dtype_name, ti.changes, d, ti.pos_bytes, ti.val_bytes, bits, b);
        }
    }
    double ratio_bound = ratio(coded_bits, st.entropy_bits);
    if (json) {
        printf("],\"total\":{\"file_bytes\":%" PRIu64 ",\"header_bytes\":%" PRIu64 ",\"dense_bytes\":%" PRIu64
               ",\"elements\":%" PRIu64 ",\"elementwise_elements\":%" PRIu64 ",\"changes\":%" PRIu64
               ",\"opaque_changes\":%" PRIu64
               ",\"density\":%.6f,\"pos_bytes\":%" PRIu64 ",\"val_bytes\":%" PRIu64 ",\"opaque_bytes\":%" PRIu64
               ",\"bits_per_change\":%.4f,\"entropy_bits\":%.1f,\"entropy_bytes\":%.0f,\"vs_bound\":%.4f}}\n",
               st.file_bytes, st.header_bytes, st.dense_bytes, st.nelems, elementwise, st.changes,
               st.opaque_changes, ratio((double)st.changes, (double)elementwise), st.pos_bytes, st.val_bytes,
               st.opaque_bytes,
               ratio(coded_bits, (double)st.changes), st.entropy_bits, st.entropy_bits / 8, ratio_bound);
    } else {
        char op[64];
        cli_opaque_note(op, sizeof op, st.opaque_changes);
        printf("\ntotal: %" PRIu64 " changes of %" PRIu64 " elements (%.4f%%)%s; %" PRIu64 " bytes = "
               "%" PRIu64 " positions + %" PRIu64 " values + %" PRIu64 " opaque + %" PRIu64 " header\n",
               st.changes, elementwise, 100.0 * ratio((double)st.changes, (double)elementwise), op,
               st.file_bytes, st.pos_bytes, st.val_bytes, st.opaque_bytes, st.header_bytes);
        printf("bits per change %.3f; order-0 bound %.3f bits per change (%.0f bytes); streams at %.4f x "
               "the bound; file %.3f%% of %" PRIu64 " dense bytes\n",
               ratio(coded_bits, (double)st.changes), ratio(st.entropy_bits, (double)st.changes),
               st.entropy_bits / 8, ratio_bound, 100.0 * ratio((double)st.file_bytes, (double)st.dense_bytes),
               st.dense_bytes);
    }
    pulse_patch_close(&p);
    return cli_finish_stdout("inspect");
}
