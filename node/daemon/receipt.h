/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the follower's signed receipt "this node holds STATE at STEP of RUN". */
#ifndef PULSE_NODE_DAEMON_RECEIPT_H
#define PULSE_NODE_DAEMON_RECEIPT_H

#include <stdint.h>

#include "pulseweights/keys.h"
#include "pulseweights/store.h"

/* Signs a receipt record with K and stores it create-if-absent at
 * <run>/receipts/<node-hex>/<step:012>. One already there (a restart re-running the step) is
 * fine. Adds the bytes sent to *moved (may be NULL). */
int node_receipt_write(pulse_store *st, const char *run, const pulse_secret_key *k, uint64_t step,
                       const uint8_t state[32], uint64_t *moved);

#endif
