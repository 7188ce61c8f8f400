/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: eight SHA-256 rounds with the working variables a..h renamed through ROUND's arguments instead of moved; shared by the portable and the sixteen-lane compression functions, each defining its own ROUND. */
#ifndef PULSE_CRYPTO_SHA256_ROUNDS_H
#define PULSE_CRYPTO_SHA256_ROUNDS_H

/* ROUND(a, b, c, d, e, f, g, h, i, wi) is round i with message word wi: it writes only d and
 * h, and the next round sees (h, a, b, c, d, e, f, g). WF(i) yields word i. */
#define SHA256_EIGHT(i, WF)                                                   \
    do {                                                                      \
        ROUND(a, b, c, d, e, f, g, h, (i) + 0, WF((i) + 0));                  \
        ROUND(h, a, b, c, d, e, f, g, (i) + 1, WF((i) + 1));                  \
        ROUND(g, h, a, b, c, d, e, f, (i) + 2, WF((i) + 2));                  \
        ROUND(f, g, h, a, b, c, d, e, (i) + 3, WF((i) + 3));                  \
        ROUND(e, f, g, h, a, b, c, d, (i) + 4, WF((i) + 4));                  \
        ROUND(d, e, f, g, h, a, b, c, (i) + 5, WF((i) + 5));                  \
        ROUND(c, d, e, f, g, h, a, b, (i) + 6, WF((i) + 6));                  \
        ROUND(b, c, d, e, f, g, h, a, (i) + 7, WF((i) + 7));                  \
    } while (0)

#endif
