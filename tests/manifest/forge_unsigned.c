/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper: stores an unsigned sync-patch record that names one object of any digest and size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

static int die(const char *what, int rc)
{
    fprintf(stderr, "forge_unsigned: %s: %s: %s\n", what, pulse_strerror(rc), pulse_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fputs("usage: forge_unsigned STORE-URL RUN NODE-HEX STEP DIGEST-HEX SIZE\n"
              "  stores, under its own key, a sync-patch record of NODE whose signature is all zero\n"
              "  and whose one 'patch' object is DIGEST of SIZE bytes; prints the key.\n", stderr);
        return 2;
    }
    const char *url = argv[1], *run = argv[2];
    uint64_t step = strtoull(argv[4], NULL, 10), size = strtoull(argv[6], NULL, 10);
    uint8_t digest[PULSE_DIGEST_BYTES];
    pulse_record r;
    memset(&r, 0, sizeof r);
    int rc = pulse_record_init(&r, PULSE_RECORD_SYNC_PATCH, run, step);
    if (rc)
        return die("init", rc);
    if (pulse_hex_decode(argv[3], strlen(argv[3]), r.node, sizeof r.node) ||
        pulse_hex_decode(argv[5], strlen(argv[5]), digest, sizeof digest))
        return fputs("forge_unsigned: NODE-HEX and DIGEST-HEX are 64 hex digits\n", stderr), 2;
    r.time = 1;
    r.base[0] = 1;
    r.result[0] = 2;
    r.patch_bytes = size;
    if ((rc = pulse_record_add_object(&r, digest, size, "patch", "", 0, 0)))
        return die("object", rc);
    uint8_t *bytes = NULL;
    size_t len = 0;
    char rel[512], key[1024];
    if ((rc = pulse_record_encode(&r, &bytes, &len)))
        return die("encode", rc);
    if ((rc = pulse_record_key(&r, rel, sizeof rel)))
        return die("key", rc);
    snprintf(key, sizeof key, "%s/%s", run, rel);
    pulse_store *st = NULL;
    if ((rc = pulse_store_open(&st, url, NULL)))
        return die(url, rc);
    if ((rc = pulse_store_put(st, key, bytes, len, 0)))
        return die(key, rc);
    printf("%s\n", rel);
    free(bytes);
    pulse_record_clear(&r);
    pulse_store_close(&st);
    return 0;
}
