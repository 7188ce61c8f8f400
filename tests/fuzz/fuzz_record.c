/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the record parser: any accepted input must re-encode to exactly the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pulse_record r;
    if (pulse_record_parse(data, size, &r) != 0)
        return 0;
    uint8_t *again = NULL;
    size_t len = 0;
    if (pulse_record_encode(&r, &again, &len) != 0 || len != size || memcmp(again, data, size) != 0) {
        fprintf(stderr, "fuzz_record: accepted input of %zu bytes does not re-encode canonically (%zu bytes)\n",
                size, len);
        abort();
    }
    /* The renderings must cope with everything the parser admits. */
    static FILE *sink;
    if (!sink)
        sink = fopen("/dev/null", "w");
    if (sink && (pulse_record_render(&r, NULL, PULSE_RENDER_TEXT, sink) != 0 ||
                 pulse_record_render(&r, NULL, PULSE_RENDER_JSON, sink) != 0))
        abort();
    free(again);
    pulse_record_clear(&r);
    return 0;
}
