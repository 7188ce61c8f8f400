/* SPDX-License-Identifier: Apache-2.0 */
/* pulse inspect: what a patch holds, per tensor and in total, against the order-0 entropy bound and, given its base, the bound with the old values' exponents as context. */
#include <inttypes.h>
#include <math.h>
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
        "usage: pulse inspect PATCH [--base OLD] [--json]\n"
        "\n"
        "Decodes PATCH (checking every chunk digest) and prints, per tensor and in total: changes,\n"
        "density, compressed bytes of the position and value streams, bits per change, and the\n"
        "order-0 entropy bound of the coded symbols (gaps and value symbols, with their empirical\n"
        "frequencies) for comparison.\n"
        "\n"
        "  --base OLD  the checkpoint PATCH applies to (layout and state id checked): also print,\n"
        "              per stream, what a coder using context the receiver holds could reach:\n"
        "              positions as H(changed | tensor, exponent of the old value) x elements,\n"
        "              values as H(ulp symbol | dtype, exponent of the old value) x changes,\n"
        "              next to their order-0 bounds (gaps; ulp symbols), and per tensor a\n"
        "              \"ctx\" column (bits per change of that bound)\n"
        "  --json      one JSON object instead of the table\n");
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/* A figure of the order-0 bound, which a context-coded patch (format 5) inspected without its
 * base does not have (NAN): null in JSON, n/a in the table. */
static void json_bits(const char *name, double v, const char *fmt)
{
    printf(",\"%s\":", name);
    if (isnan(v))
        printf("null");
    else
        printf(fmt, v);
}

/* Opens OLD, computes the context bound of p against it (total and per tensor) and checks that
 * OLD is the patch's base state. 0, or the exit status with the error printed. */
static int context_of(const pulse_patch *p, const char *base_path, pulse_ckpt **old, pulse_patch_context *cx,
                      pulse_patch_context **per)
{
    int r = pulse_ckpt_open(old, base_path, PULSE_CKPT_READ);
    if (r)
        return cli_fail("inspect", r, base_path);
    *per = calloc(pulse_patch_tensor_count(p) + 1, sizeof **per);
    if (!*per)
        r = cli_fail("inspect", PULSE_ERR_NOMEM, "per-tensor figures");
    else if ((r = pulse_patch_context_bound(p, *old, 0, cx, *per)))
        r = cli_fail("inspect", r, base_path);
    uint8_t id[32];
    if (!r && (r = pulse_ckpt_state_id(*old, 0, id)))
        r = cli_fail("inspect", r, base_path);
    if (!r && memcmp(id, pulse_patch_base_id(p), sizeof id) != 0) {
        char have[65], want[65];
        fprintf(stderr, "pulse inspect: %s is not the patch's base: its state id is %s, the patch applies to %s\n",
                base_path, pulse_id_hex(id, have), pulse_id_hex(pulse_patch_base_id(p), want));
        r = 1;
    }
    if (r) {
        free(*per);
        *per = NULL;
        pulse_ckpt_close(old);
    }
    return r;
}

/* The "context" object of --json: per stream, coded bytes, order-0 and context bounds. */
static void json_context(const pulse_patch_context *c)
{
    double n = (double)c->changes;
    printf(",\"context\":{\"changes\":%" PRIu64 ",\"elements\":%" PRIu64, c->changes, c->elements);
    printf(",\"positions\":{\"coded_bytes\":%" PRIu64 ",\"order0_bits\":%.1f,\"tensor_bits\":%.1f"
           ",\"context_bits\":%.1f,\"model_bits\":%.1f,\"coded_bits_per_change\":%.4f"
           ",\"order0_bits_per_change\":%.4f,\"context_bits_per_change\":%.4f,\"context_vs_order0\":%.4f}",
           c->pos_bytes, c->gap_bits, c->flag0_bits, c->flag_bits, c->flag_model_bits, ratio(8.0 * (double)c->pos_bytes, n),
           ratio(c->gap_bits, n), ratio(c->flag_bits, n), ratio(c->flag_bits, c->gap_bits));
    printf(",\"values\":{\"coded_bytes\":%" PRIu64 ",\"order0_bits\":%.1f,\"context_bits\":%.1f"
           ",\"model_bits\":%.1f,\"coded_bits_per_change\":%.4f,\"order0_bits_per_change\":%.4f,\"context_bits_per_change\":%.4f"
           ",\"context_vs_order0\":%.4f}",
           c->val_bytes, c->ulp_bits, c->ulp_ctx_bits, c->ulp_model_bits, ratio(8.0 * (double)c->val_bytes, n), ratio(c->ulp_bits, n),
           ratio(c->ulp_ctx_bits, n), ratio(c->ulp_ctx_bits, c->ulp_bits));
    double o0 = c->gap_bits + c->ulp_bits, cb = c->flag_bits + c->ulp_ctx_bits;
    printf(",\"total\":{\"coded_bytes\":%" PRIu64 ",\"order0_bits\":%.1f,\"context_bits\":%.1f"
           ",\"coded_bits_per_change\":%.4f,\"order0_bits_per_change\":%.4f,\"context_bits_per_change\":%.4f"
           ",\"context_vs_order0\":%.4f}}",
           c->pos_bytes + c->val_bytes, o0, cb, ratio(8.0 * (double)(c->pos_bytes + c->val_bytes), n), ratio(o0, n),
           ratio(cb, n), ratio(cb, o0));
}

static void print_stream(const char *name, uint64_t coded, double o0, double cb, double n)
{
    printf("  %-10s %12" PRIu64 " %9.3f %12.0f %9.3f %12.0f %9.3f %12.4f\n", name, coded, ratio(8.0 * (double)coded, n),
           o0 / 8, ratio(o0, n), cb / 8, ratio(cb, n), ratio(cb, o0));
}

/* The --base table: where the element-wise streams' bytes go, and what context could save. */
static void print_context(const pulse_patch_context *c, pulse_value_code code)
{
    double n = (double)c->changes;
    printf("\nwith the base's exponents as context (element-wise tensors, %" PRIu64 " changes; bits per change):\n",
           c->changes);
    printf("  %-10s %12s %9s %12s %9s %12s %9s %12s\n", "stream", "coded bytes", "bits/chg", "order-0 B",
           "bits/chg", "context B", "bits/chg", "ctx/order-0");
    print_stream("positions", c->pos_bytes, c->gap_bits, c->flag_bits, n);
    print_stream("values", c->val_bytes, c->ulp_bits, c->ulp_ctx_bits, n);
    print_stream("total", c->pos_bytes + c->val_bytes, c->gap_bits + c->ulp_bits, c->flag_bits + c->ulp_ctx_bits, n);
    printf("positions: order-0 = the gaps as coded; context = H(changed | tensor, exponent of the old value) x "
           "elements (the tensor alone: %.3f bits per change)\n", ratio(c->flag0_bits, n));
    printf("values: order-0 = the ulp symbols (zigzag of new - old)%s; context = H(ulp symbol | dtype, exponent of "
           "the old value) x changes\n", code == PULSE_VALUES_ABS ? ", not the abs values this patch codes" : "");
    printf("not in the context bound: describing its frequencies, ~%.0f bytes for positions and ~%.0f for values "
           "((k-1)/2 log2 n bits per context)\n", c->flag_model_bits / 8, c->ulp_model_bits / 8);
}

int cmd_inspect(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("inspect");
    }
    const char *path = NULL, *base_path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--base")) {
            if (i + 1 >= argc || !argv[i + 1][0])
                return cli_usage_error("inspect", "--base needs the checkpoint the patch applies to");
            base_path = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1])
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
    /* With a base: the context bound, after the layout (named by the library) and the state id
     * are checked, so that no figure is computed against weights the patch does not apply to. */
    pulse_ckpt *old = NULL;
    pulse_patch_context cx;
    pulse_patch_context *per = NULL;
    if (base_path && (r = context_of(p, base_path, &old, &cx, &per))) {
        pulse_patch_close(&p);
        return r;
    }
    char base[65], result[65];
    pulse_id_hex(pulse_patch_base_id(p), base);
    pulse_id_hex(pulse_patch_result_id(p), result);
    const char *code = pulse_patch_values(p) == PULSE_VALUES_ULP ? "ulp" : "abs";
    double coded_bits = 8.0 * (double)(st.pos_bytes + st.val_bytes);
    /* Format 5: context-coded chunks decode only against the base, so their order-0 bound is
     * the one the context bound computed from it (for ulp patches the same symbols), or none. */
    const int ctx_coded = pulse_patch_version(p) >= PULSE_PATCH_VERSION_CONTEXT;
    if (ctx_coded)
        st.entropy_bits = per ? cx.gap_bits + cx.ulp_bits : NAN;
    if (json) {
        printf("{\"format\":%d,\"values\":\"%s\",\"base\":\"%s\",\"result\":\"%s\",", pulse_patch_version(p), code,
               base, result);
        printf("\"chunk_elems\":%u,\"tensors\":[", pulse_patch_chunk_elems(p));
    } else {
        printf("patch %s: format %d, values %s, chunk %u elements\n", path, pulse_patch_version(p), code,
               pulse_patch_chunk_elems(p));
        printf("base   %s\nresult %s\n\n", base, result);
        printf("%-40s %-8s %12s %9s %10s %10s %9s %9s%s\n", "tensor", "dtype", "changes", "density",
               "pos bytes", "val bytes", "bits/chg", "bound", per ? "       ctx" : "");
    }
    uint64_t elementwise = 0;   /* elements of element-wise tensors: what changes counts */
    for (size_t i = 0; i < n; i++) {
        pulse_patch_tensor_info ti;
        if ((r = pulse_patch_tensor_info_get(p, i, 1, &ti))) {
            free(per);
            pulse_ckpt_close(&old);
            pulse_patch_close(&p);
            return cli_fail("inspect", r, path);
        }
        int opaque = ti.dtype == PULSE_DT_OPAQUE;
        elementwise += opaque ? 0 : ti.nelems;
        if (ctx_coded && !opaque)
            ti.entropy_bits = per ? per[i].gap_bits + per[i].ulp_bits : NAN;
        double bits = ratio(8.0 * (double)(ti.pos_bytes + ti.val_bytes), (double)ti.changes);
        double bound = ratio(ti.entropy_bits, (double)ti.changes);
        if (json) {
            printf("%s{\"name\":", i ? "," : "");
            cli_json_str(ti.name);
            printf(",\"dtype\":");
            cli_json_str(ti.dtype_name);
            printf(",\"elements\":%" PRIu64 ",\"changes\":%" PRIu64 ",\"opaque\":%s,\"pos_bytes\":%" PRIu64
                   ",\"val_bytes\":%" PRIu64 ",\"bits_per_change\":%.4f",
                   ti.nelems, ti.changes, ti.dtype == PULSE_DT_OPAQUE ? "true" : "false",
                   ti.pos_bytes, ti.val_bytes, bits);
            json_bits("entropy_bits", ti.entropy_bits, "%.1f");
            if (per && !opaque)
                json_context(&per[i]);
            putchar('}');
        } else {
            /* an OPAQUE tensor's changes are bytes, replaced whole chunks at a time: no density */
            char b[32] = "replace", d[32] = "bytes";
            if (!opaque) {
                snprintf(b, sizeof b, isnan(bound) ? "n/a" : "%.3f", bound);
                snprintf(d, sizeof d, "%.4f%%", 100.0 * ratio((double)ti.changes, (double)ti.nelems));
            }
            printf("%-40s %-8s %12" PRIu64 " %9s %10" PRIu64 " %10" PRIu64 " %9.3f %9s", ti.name,
                   ti.dtype_name, ti.changes, d, ti.pos_bytes, ti.val_bytes, bits, b);
            if (per && !opaque)
                printf(" %9.3f", ratio(per[i].flag_bits + per[i].ulp_ctx_bits, (double)per[i].changes));
            putchar('\n');
        }
    }
    double ratio_bound = isnan(st.entropy_bits) ? NAN : ratio(coded_bits, st.entropy_bits);
    if (json) {
        printf("],\"total\":{\"file_bytes\":%" PRIu64 ",\"header_bytes\":%" PRIu64 ",\"dense_bytes\":%" PRIu64
               ",\"elements\":%" PRIu64 ",\"elementwise_elements\":%" PRIu64 ",\"changes\":%" PRIu64
               ",\"opaque_changes\":%" PRIu64
               ",\"density\":%.6f,\"pos_bytes\":%" PRIu64 ",\"val_bytes\":%" PRIu64 ",\"opaque_bytes\":%" PRIu64
               ",\"bits_per_change\":%.4f",
               st.file_bytes, st.header_bytes, st.dense_bytes, st.nelems, elementwise, st.changes,
               st.opaque_changes, ratio((double)st.changes, (double)elementwise), st.pos_bytes, st.val_bytes,
               st.opaque_bytes, ratio(coded_bits, (double)st.changes));
        json_bits("entropy_bits", st.entropy_bits, "%.1f");
        json_bits("entropy_bytes", st.entropy_bits / 8, "%.0f");
        json_bits("vs_bound", ratio_bound, "%.4f");
        if (per)
            json_context(&cx);
        printf("}}\n");
    } else {
        char op[64];
        cli_opaque_note(op, sizeof op, st.opaque_changes);
        printf("\ntotal: %" PRIu64 " changes of %" PRIu64 " elements (%.4f%%)%s; %" PRIu64 " bytes = "
               "%" PRIu64 " positions + %" PRIu64 " values + %" PRIu64 " opaque + %" PRIu64 " header\n",
               st.changes, elementwise, 100.0 * ratio((double)st.changes, (double)elementwise), op,
               st.file_bytes, st.pos_bytes, st.val_bytes, st.opaque_bytes, st.header_bytes);
        if (isnan(st.entropy_bits))
            printf("bits per change %.3f; order-0 bound n/a (context-coded chunks decode only against the base: "
                   "--base); file %.3f%% of %" PRIu64 " dense bytes\n", ratio(coded_bits, (double)st.changes),
                   100.0 * ratio((double)st.file_bytes, (double)st.dense_bytes), st.dense_bytes);
        else {
            printf("bits per change %.3f; order-0 bound %.3f bits per change (%.0f bytes); streams at %.4f x "
                   "the bound; file %.3f%% of %" PRIu64 " dense bytes\n",
                   ratio(coded_bits, (double)st.changes), ratio(st.entropy_bits, (double)st.changes),
                   st.entropy_bits / 8, ratio_bound, 100.0 * ratio((double)st.file_bytes, (double)st.dense_bytes),
                   st.dense_bytes);
        }
        if (per)
            print_context(&cx, pulse_patch_values(p));
    }
    free(per);
    pulse_ckpt_close(&old);
    pulse_patch_close(&p);
    return cli_finish_stdout("inspect");
}
