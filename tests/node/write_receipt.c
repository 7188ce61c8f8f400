/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper: writes a signed receipt ("node holds STATE at STEP") into a run, as a follower would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: write_receipt STORE_URL RUN KEY STEP STATE_HEX\n");
        return 2;
    }
    pulse_secret_key *k = NULL;
    pulse_store *st = NULL;
    pulse_record rec;
    uint8_t *bytes = NULL;
    size_t len = 0;
    char rel[600], key[800];
    int r = pulse_key_load_secret(argv[3], &k);
    if (!r)
        r = pulse_record_init(&rec, PULSE_RECORD_RECEIPT, argv[2], strtoull(argv[4], NULL, 10));
    if (!r) {
        rec.time = (uint64_t)time(NULL);
        r = pulse_id_parse(argv[5], rec.result);
        if (!r)
            r = pulse_record_sign(&rec, k, &bytes, &len);
        if (!r)
            r = pulse_record_key(&rec, rel, sizeof rel);
        pulse_record_clear(&rec);
    }
    if (!r) {
        snprintf(key, sizeof key, "%s/%s", argv[2], rel);
        r = pulse_store_open(&st, argv[1], NULL);
    }
    if (!r)
        r = pulse_store_put(st, key, bytes, len, PULSE_PUT_IF_ABSENT);
    if (r)
        fprintf(stderr, "write_receipt: %s: %s\n", pulse_strerror(r), pulse_last_error());
    else
        printf("%s\n", key);
    free(bytes);
    pulse_store_close(&st);
    pulse_key_free(&k);
    return r ? 1 : 0;
}
