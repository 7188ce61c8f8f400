/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the record parser: placeholder until its owner lands it. */
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { (void)data; (void)size; return 0; }
