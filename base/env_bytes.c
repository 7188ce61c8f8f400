/* SPDX-License-Identifier: Apache-2.0 */
/* A byte count from the environment, for the caps that keep memory flat in the model size. */
#include <stdlib.h>

#include "base/env_bytes.h"

size_t pulse_env_bytes(const char *name, size_t dflt, size_t most)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    if (*e < '0' || *e > '9')
        return dflt;   /* no number (strtoull would also take "-1" as 2^64 - 1): as if unset */
    char *end;
    unsigned long long v = strtoull(e, &end, 10);
    unsigned shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20
                     : *end == 'G' || *end == 'g' ? 30 : 0;
    return v > (most >> shift) ? most : (size_t)(v << shift);
}
