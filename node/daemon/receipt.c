/* SPDX-License-Identifier: Apache-2.0 */
/* Receipts: a signed record per applied step, so `pulse status` can show where every follower stands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fail.h"
#include "manifest/layout.h"
#include "node/daemon/receipt.h"
#include "pulseweights/record.h"

int node_receipt_write(pulse_store *st, const char *run, const pulse_secret_key *k, uint64_t step,
                       const uint8_t state[32], uint64_t *moved)
{
    pulse_record rec;
    int r = pulse_record_init(&rec, PULSE_RECORD_RECEIPT, run, step);
    if (r)
        return r;
    rec.time = (uint64_t)time(NULL);
    memcpy(rec.result, state, 32);
    uint8_t *bytes = NULL;
    size_t len = 0;
    char rel[512], key[1024];
    r = pulse_record_sign(&rec, k, &bytes, &len);
    if (!r)
        r = pulse_record_key(&rec, rel, sizeof rel);
    if (!r)
        r = pulse_layout_join(key, sizeof key, run, rel);
    if (!r) {
        r = pulse_store_put(st, key, bytes, len, PULSE_PUT_IF_ABSENT);
        if (!r && moved)
            *moved += len;
        if (r == PULSE_ERR_EXISTS)
            r = 0;
    }
    free(bytes);
    pulse_record_clear(&rec);
    return r;
}
