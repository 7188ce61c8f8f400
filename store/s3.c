/* SPDX-License-Identifier: Apache-2.0 */
/* s3:// backend: placeholder while being written. */
#include "base/fail.h"
#include "store/backend.h"

int store_s3_open(pulse_store *st, const char *rest)
{
    (void)st;
    (void)rest;
    return pulse_fail(PULSE_ERR_UNSUPPORTED, "s3: not built yet");
}
