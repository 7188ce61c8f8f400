/* SPDX-License-Identifier: Apache-2.0 */
/* The one parser of the memory caps' environment variables: a byte count as <bytes>[K|M|G]. */
#ifndef PULSE_BASE_ENV_BYTES_H
#define PULSE_BASE_ENV_BYTES_H

#include <stddef.h>

/* The environment variable `name` as <bytes>[K|M|G] (0 allowed), at most `most`; `dflt` when
 * unset or not starting with a digit. How a cap that keeps memory flat in the model size is set
 * (PULSE_APPLY_CACHE, PULSE_UNDO_MEMORY; PULSE_DIFF_PARK, PULSE_PATCH_FLUSH and PULSE_UPLOAD_PART
 * only lowered, for tests), so that tests can reach the capped paths. */
size_t pulse_env_bytes(const char *name, size_t dflt, size_t most);

#endif
