/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the patch parser and chunk decoder: open from memory, decode every chunk, gather the stats. */
#include <stddef.h>
#include <stdint.h>

#include "pulseweights/patch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pulse_patch *p = NULL;
    if (pulse_patch_open_mem(&p, data, size) != 0)
        return 0;
    /* No base: the layout check is skipped, every chunk is still digested and decoded. */
    if (pulse_patch_verify(p, NULL, 1) == 0) {
        pulse_patch_stats st;
        pulse_patch_info(p, 1, &st);
        for (size_t i = 0; i < pulse_patch_tensor_count(p); i++) {
            pulse_patch_tensor_info ti;
            pulse_patch_tensor_info_get(p, i, 1, &ti);
        }
    }
    pulse_patch_close(&p);
    return 0;
}
