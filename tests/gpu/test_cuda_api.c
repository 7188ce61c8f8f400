/* SPDX-License-Identifier: Apache-2.0 */
/* Runs on any machine: the CUDA entry points refuse cleanly without CUDA or without a device. */
#include <stdio.h>

#include "config.h"
#include "pulseweights/cuda.h"
#include "check.h"

int main(void)
{
    int count = -1;
    int rc = pulse_cuda_device_count(&count);
    if (rc == 0) {
        /* a machine with a GPU: only the argument checks here, tests/gpu/run.sh does the rest */
        CHECK(HAVE_CUDA);
        CHECK(count >= 1);
        printf("cuda devices: %d\n", count);
    } else {
        CHECK_ERR(rc, PULSE_ERR_UNSUPPORTED);
        CHECK_EQ_INT(count, 0);
    }
    CHECK_ERR(pulse_cuda_apply_patch(NULL, NULL, 0, NULL, 1),
              HAVE_CUDA ? PULSE_ERR_INVALID : PULSE_ERR_UNSUPPORTED);
    CHECK_ERR(pulse_cuda_device_count(NULL), rc == 0 ? 0 : PULSE_ERR_UNSUPPORTED);
    return check_done("cuda_api");
}
