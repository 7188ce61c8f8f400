/* SPDX-License-Identifier: Apache-2.0 */
/* Every error code has its own message, and the thread-local detail works as documented. */
#include <string.h>

#include "base/fail.h"
#include "check.h"

int main(void)
{
    static const int codes[] = {
        PULSE_OK, PULSE_ERR_INVALID, PULSE_ERR_NOMEM, PULSE_ERR_IO, PULSE_ERR_FORMAT,
        PULSE_ERR_CORRUPT, PULSE_ERR_MISMATCH, PULSE_ERR_LIMIT, PULSE_ERR_NOTFOUND,
        PULSE_ERR_EXISTS, PULSE_ERR_AUTH, PULSE_ERR_NETWORK, PULSE_ERR_SERVER,
        PULSE_ERR_UNSUPPORTED, PULSE_ERR_NOT_MODIFIED, PULSE_ERR_PRECONDITION,
    };
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        const char *m = pulse_strerror(codes[i]);
        CHECK(m && strcmp(m, "unknown error") != 0);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(m, pulse_strerror(codes[j])) != 0);   /* each message names its own code */
        CHECK_EQ_INT(codes[i], -(int)i);                          /* append-only, no gaps */
    }
    CHECK(strcmp(pulse_strerror(-(int)n), "unknown error") == 0);

    pulse_clear_error();
    CHECK(strcmp(pulse_last_error(), "") == 0);
    CHECK_EQ_INT(pulse_fail(PULSE_ERR_FORMAT, "tensor %s: offset %d", "w", 7), PULSE_ERR_FORMAT);
    CHECK(strcmp(pulse_last_error(), "tensor w: offset 7") == 0);
    /* The detail can be prefixed with context by passing it back in. */
    pulse_fail(PULSE_ERR_CORRUPT, "object %s: digest mismatch", "objects/ab");
    pulse_fail(PULSE_ERR_CORRUPT, "step %d: %s", 4, pulse_last_error());
    CHECK(strcmp(pulse_last_error(), "step 4: object objects/ab: digest mismatch") == 0);
    return check_done("errors");
}
