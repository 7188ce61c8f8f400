/* SPDX-License-Identifier: Apache-2.0 */
/* Ed25519 node keys (libsodium): key files, trust sets of public keys, signing and verifying bytes. */
#ifndef PULSEWEIGHTS_KEYS_H
#define PULSEWEIGHTS_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PULSE_PUBLIC_KEY_BYTES 32
#define PULSE_SIGNATURE_BYTES 64
#define PULSE_NODE_ID_HEX 65          /* 64 hex digits + NUL */

/* First token of each key file; the version is part of the name so a v2 file is refused, not misread. */
#define PULSE_KEY_SECRET_HEADER "pulse-ed25519-secret-v1"
#define PULSE_KEY_PUBLIC_HEADER "pulse-ed25519-public-v1"

#define PULSE_KEY_MAX_FILE 4096        /* bytes; a key file larger than this is refused */
#define PULSE_KEY_MAX_COMMENT 200      /* bytes of the optional comment of a .pub file */
#define PULSE_TRUST_MAX_KEYS 4096      /* keys in one trust set */

/* A secret key. Opaque; its bytes are zeroed when it is freed and never printed. */
typedef struct pulse_secret_key pulse_secret_key;

/* A public key with the comment of its .pub file (or the file's name without .pub when it had none). */
typedef struct pulse_public_key {
    uint8_t key[PULSE_PUBLIC_KEY_BYTES];
    char comment[PULSE_KEY_MAX_COMMENT + 1];
} pulse_public_key;

/* A set of trusted public keys. Opaque; the caller owns it (pulse_trust_free). */
typedef struct pulse_trust pulse_trust;

/* Makes a fresh key pair from the system CSPRNG. *out owned by the caller (pulse_key_free). */
PULSE_API int pulse_key_generate(pulse_secret_key **out);

/* Frees K after zeroing its secret; NULL-safe; clears the pointer. */
PULSE_API void pulse_key_free(pulse_secret_key **k);

/* The public half (the node id) of K. */
PULSE_API void pulse_key_public(const pulse_secret_key *k, uint8_t pub[PULSE_PUBLIC_KEY_BYTES]);

/* Writes NAME.key (the secret, mode 0600) and NAME.pub ("pulse-ed25519-public-v1 <hex> [COMMENT]").
 * Both are created with O_EXCL: an existing file is never overwritten (PULSE_ERR_EXISTS naming it).
 * On any failure neither file is left behind. COMMENT may be NULL; it must be one line. */
PULSE_API int pulse_key_save(const pulse_secret_key *k, const char *name, const char *comment);

/* Loads a secret key file. Refused with PULSE_ERR_INVALID when its mode lets group or others
 * access it (as ssh does; the detail names the file and the mode), PULSE_ERR_FORMAT when it is
 * not a v1 secret key file or its public half does not match its seed. */
PULSE_API int pulse_key_load_secret(const char *path, pulse_secret_key **out);

/* Loads one .pub file into *out. PULSE_ERR_FORMAT with the reason when malformed. */
PULSE_API int pulse_key_load_public(const char *path, pulse_public_key *out);

/* Trust sets. pulse_trust_load reads PATH: one .pub file, or a directory whose *.pub files
 * are all loaded (other files ignored; a malformed .pub refuses the whole set; an empty
 * directory is PULSE_ERR_NOTFOUND: trusting nobody is never what the operator meant).
 * Calling it again on the same set adds more keys; a key already present is not duplicated. */
PULSE_API int pulse_trust_new(pulse_trust **out);
PULSE_API int pulse_trust_load(pulse_trust *t, const char *path);
PULSE_API int pulse_trust_add(pulse_trust *t, const pulse_public_key *key);
PULSE_API void pulse_trust_free(pulse_trust **t);
PULSE_API size_t pulse_trust_count(const pulse_trust *t);
/* The i-th key (i < count), or NULL. Owned by the set. */
PULSE_API const pulse_public_key *pulse_trust_get(const pulse_trust *t, size_t i);
/* The trusted key equal to PUB, or NULL when PUB is not trusted. */
PULSE_API const pulse_public_key *pulse_trust_find(const pulse_trust *t, const uint8_t pub[PULSE_PUBLIC_KEY_BYTES]);

/* Convenience wrapper: a new set loaded from PATH (file or directory). */
PULSE_API int pulse_key_load_trust_dir(const char *path, pulse_trust **out);

/* Ed25519 detached signature of the exact bytes MSG[0..LEN). */
PULSE_API int pulse_sign(const pulse_secret_key *k, const void *msg, size_t len,
                         uint8_t sig[PULSE_SIGNATURE_BYTES]);

/* 0 when SIG is PUB's signature of MSG, else PULSE_ERR_AUTH. */
PULSE_API int pulse_verify(const uint8_t pub[PULSE_PUBLIC_KEY_BYTES], const void *msg, size_t len,
                           const uint8_t sig[PULSE_SIGNATURE_BYTES]);

/* Lower-case hex of N bytes into OUT (2*N+1 bytes, NUL-terminated). */
PULSE_API void pulse_hex_encode(const uint8_t *in, size_t n, char *out);
/* Exactly 2*N hex digits (either case) into N bytes; PULSE_ERR_FORMAT otherwise. */
PULSE_API int pulse_hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t n);
/* The node id of a public key as text: 64 lower-case hex digits. */
PULSE_API void pulse_node_id_hex(const uint8_t pub[PULSE_PUBLIC_KEY_BYTES], char out[PULSE_NODE_ID_HEX]);

#ifdef __cplusplus
}
#endif
#endif
