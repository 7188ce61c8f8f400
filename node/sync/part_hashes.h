/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a part's tensor hashes as an object of its records, which a committer combines into the whole model's state id. */
#ifndef PULSE_NODE_SYNC_PART_HASHES_H
#define PULSE_NODE_SYNC_PART_HASHES_H

#include <stddef.h>
#include <stdint.h>


/* The object (role PULSE_ROLE_TENSOR_HASHES, manifest/patch_objects.h; docs/sync.md, "A trainer
 * in parts"): "PULSETH1", u64 count, then per tensor in bytewise name order u16 name length, the
 * name, its 32-byte tensor hash (docs/checkpoints.md). Little-endian. */
typedef struct part_hashes {
    size_t n;
    char **name;            /* NUL-terminated, strictly ascending */
    uint8_t (*hash)[32];
} part_hashes;

/* The bytes for tensors NAMES[0..n) (strictly ascending) with hashes HASHES, *out malloc'd. */
int part_hashes_encode(size_t n, const char *const *names, const uint8_t (*hashes)[32], uint8_t **out, size_t *len);
/* Strict parse of untrusted bytes: PULSE_ERR_FORMAT naming what is wrong. */
int part_hashes_parse(const void *bytes, size_t len, part_hashes *out);
void part_hashes_free(part_hashes *h);
/* The state id of the tensors H holds. */
void part_hashes_state(const part_hashes *h, uint8_t out[32]);
/* The index of NAME in H, or -1. */
long part_hashes_find(const part_hashes *h, const char *name);

#endif
