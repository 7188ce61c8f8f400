/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the safetensors header parser: any bytes are either refused cleanly or
 * yield tensors that lie inside the input and hash without faults. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "node/checkpoint/ckpt_internal.h"
#include "pulseweights/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_open_memory(&c, data, size);
    if (r) {
        if (c || r >= 0 || !pulse_last_error()[0])
            abort();   /* a refusal leaves nothing open and always says why */
        return 0;
    }
    for (size_t i = 0; i < pulse_ckpt_count(c); i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(c, i);
        if (t->data < data || t->nbytes > size || t->data + t->nbytes > data + size)
            abort();
        if (i && strcmp(pulse_ckpt_tensor(c, i - 1)->name, t->name) >= 0)
            abort();
        if (pulse_ckpt_find(c, t->name) != t)
            abort();
    }
    (void)strlen(pulse_ckpt_metadata(c));
    uint8_t id[32];
    if (pulse_ckpt_state_id(c, 1, id) != 0)
        abort();
    pulse_ckpt_close(&c);
    return 0;
}
