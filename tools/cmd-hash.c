/* SPDX-License-Identifier: Apache-2.0 */
/* pulse hash: print the state id of a checkpoint, and optionally each tensor's hash and layout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/checkpoint/ckpt_internal.h"
#include "pulseweights/checkpoint.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pulse hash CKPT [--threads N] [--tensors]\n"
        "\n"
        "Prints the state id of CKPT (64 hex digits): a SHA-256 tree over the tensor names,\n"
        "dtypes, shapes and 1 MiB chunks of their data (docs/checkpoints.md).\n"
        "CKPT is a .safetensors file, a model.safetensors.index.json, or a directory holding one.\n"
        "\n"
        "  --threads N   hash on N threads (default: all cores; the id does not depend on it)\n"
        "  --tensors     also print one line per tensor: hash, dtype, shape, name\n");
}

int cmd_hash(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return cli_finish_stdout("hash");
    }
    const char *path = NULL;
    int threads = 0, tensors = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tensors")) {
            tensors = 1;
        } else if (!strcmp(argv[i], "--threads")) {
            uint64_t v;
            if (i + 1 >= argc || cli_parse_u64(argv[i + 1], &v) || v < 1 || v > 1024)
                return cli_usage_error("hash", "--threads wants a number from 1 to 1024");
            threads = (int)v;
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage_error("hash", "unknown option '%s'", argv[i]);
        } else if (path) {
            return cli_usage_error("hash", "one checkpoint at a time (got '%s' and '%s')", path, argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path)
        return cli_usage_error("hash", "no checkpoint given");

    pulse_ckpt *c;
    int r = pulse_ckpt_open(&c, path, PULSE_CKPT_READ);
    if (r)
        return cli_fail("hash", r, "cannot open checkpoint");
    uint8_t id[PULSE_STATE_ID_BYTES];
    char hex[65];
    size_t n = pulse_ckpt_count(c);
    uint8_t *th = NULL;
    if (tensors && !(th = malloc(n ? n * 32 : 1))) {
        pulse_ckpt_close(&c);
        return cli_fail("hash", PULSE_ERR_NOMEM, "tensor hashes");
    }
    /* One pass over the data gives the id and, with --tensors, every tensor's hash. */
    if ((r = ckpt_state_id_tensors(c, threads, id, th))) {
        free(th);
        pulse_ckpt_close(&c);
        return cli_fail("hash", r, "cannot hash checkpoint");
    }
    printf("%s\n", pulse_id_hex(id, hex));
    for (size_t i = 0; tensors && i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(c, i);
        printf("%s %-7s [", pulse_id_hex(th + i * 32, hex), t->dtype_name);
        for (int k = 0; k < t->ndim; k++)
            printf("%s%" PRIu64, k ? "," : "", t->shape[k]);
        printf("] %s\n", t->name);
    }
    free(th);
    pulse_ckpt_close(&c);
    return cli_finish_stdout("hash");
}
