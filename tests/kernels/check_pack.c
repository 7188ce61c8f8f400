/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel family pack: ulp_pack2_16, the 2-bit symbol and escape packer of a patch's values, against its decoded definition and the reference. */
#include <stdlib.h>
#include <string.h>

#include "checkasm.h"

/* ulp_pack2_16 on k values drawn like a patch's (mostly 1..3, some escapes of every LEB
 * length, the largest 16-bit value): the reference against a decode of its own output, the
 * table under test against the reference, the histogram added to a nonzero start. */
static void check_ulp_pack2(const pulse_kernels *t, const pulse_kernels *r)
{
    cur_pattern = "ulp_pack2_16";
    static const size_t ks[] = {0, 1, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 65537};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        for (int mix = 0; mix < 3; mix++) {
            size_t k = ks[ki];
            cur_n = k;
            cur_placement = mix;
            guarded g;
            uint16_t *z = guard_alloc(&g, k * 2);
            for (size_t j = 0; j < k; j++) {
                uint64_t x = rnd();
                z[j] = mix == 0 ? (uint16_t)(1 + x % 3)                         /* no escapes */
                     : mix == 1 ? (uint16_t)(x % 10 ? 1 + (x >> 8) % 3 : 4 + (x >> 8) % 300)
                     : (uint16_t)(x % 4 == 0 ? 0xffff : x % 4 == 1 ? 1 + (x >> 8) % 0xffff : 1 + (x >> 8) % 5);
            }
            size_t proom = (k + 3) / 4 + SLACK, eroom = 3 * k + SLACK;
            uint8_t *p_r = canary_alloc(proom), *p_t = canary_alloc(proom);
            uint8_t *e_r = canary_alloc(eroom), *e_t = canary_alloc(eroom);
            uint32_t h_r[256], h_t[256], h_w[256];
            for (int i = 0; i < 256; i++)
                h_r[i] = h_t[i] = h_w[i] = (uint32_t)i * 3;
            size_t el_r = r->ulp_pack2_16(z, k, p_r, e_r, h_r), el_t = t->ulp_pack2_16(z, k, p_t, e_t, h_t);
            /* the definition: decode symbols and escapes back */
            int ok = 1;
            size_t at = 0;
            for (size_t j = 0; j < k && ok; j++) {
                unsigned sym = (p_r[j / 4] >> (2 * (j % 4))) & 3;
                uint32_t v = sym + 1;
                if (sym == 3) {
                    uint32_t e = 0;
                    for (unsigned sh = 0; at < el_r; sh += 7) {
                        uint8_t byte = e_r[at++];
                        e |= (uint32_t)(byte & 0x7f) << sh;
                        if (!(byte & 0x80))
                            break;
                    }
                    v = e + 4;
                }
                ok = v == z[j];
                h_w[z[j] < 256 ? z[j] : 0]++;
            }
            if (k % 4)
                ok = ok && !(p_r[k / 4] >> (2 * (k % 4)));
            CHECK_SAME(ok && at == el_r && !memcmp(h_r, h_w, sizeof h_w), "ulp_pack2_16 reference");
            CHECK_SAME(el_t == el_r && !memcmp(p_t, p_r, (k + 3) / 4) && !memcmp(e_t, e_r, el_r)
                       && !memcmp(h_t, h_r, sizeof h_r), "ulp_pack2_16");
            CHECK_SAME(canary_intact(p_t, proom) && canary_intact(e_t, eroom), "ulp_pack2_16 overrun");
            canary_free(p_r); canary_free(p_t); canary_free(e_r); canary_free(e_t);
            guard_free(&g);
        }
    }
}

void checkasm_check_pack(const pulse_kernels *t, const pulse_kernels *r)
{
    check_ulp_pack2(t, r);
}
