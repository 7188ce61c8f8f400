/* SPDX-License-Identifier: Apache-2.0 */
/* Writes the codec's synthetic check pair: random BF16 OLD, NEW with 4.4% of elements moved by +-1 ulp (5% of them +-2). */
#include <stdio.h>
#include <stdlib.h>

#include "pulseweights.h"

static uint64_t s = 88172645463325252ull;
static uint64_t rnd(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: ratio_bench OLD NEW ELEMENTS\n");
        return 2;
    }
    uint64_t n = strtoull(argv[3], NULL, 10);
    pulse_tensor_spec spec = { "w", "BF16", 1, { n } };
    pulse_ckpt *a, *b;
    if (pulse_ckpt_create(&a, argv[1], &spec, 1, NULL) || pulse_ckpt_create(&b, argv[2], &spec, 1, NULL)) {
        fprintf(stderr, "create: %s\n", pulse_last_error());
        return 1;
    }
    uint16_t *x = (uint16_t *)pulse_ckpt_tensor(a, 0)->data, *y = (uint16_t *)pulse_ckpt_tensor(b, 0)->data;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        x[i] = y[i] = (uint16_t)r;
        if ((r >> 16) % 1000 < 44) {
            int d = (r >> 40) % 100 < 5 ? 2 : 1;
            y[i] = (uint16_t)(x[i] + ((r >> 48) & 1 ? d : -d));
        }
    }
    if (pulse_ckpt_commit(a) || pulse_ckpt_commit(b)) {
        fprintf(stderr, "commit: %s\n", pulse_last_error());
        return 1;
    }
    pulse_ckpt_close(&a);
    pulse_ckpt_close(&b);
    return 0;
}
