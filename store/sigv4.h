/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: AWS Signature Version 4 (header and presigned-URL forms), our own implementation. */
#ifndef PULSE_STORE_SIGV4_H
#define PULSE_STORE_SIGV4_H

#include <stddef.h>

#include "store/buf.h"

struct sigv4_kv {
    const char *name;
    const char *value;
};

struct sigv4_request {
    const char *method;
    /* Raw path (not percent-encoded), starting with '/'; each segment is encoded here. */
    const char *path;
    /* 1: remove "." / ".." segments and empty segments first (generic AWS services, and the
     * test suite's normalize-path cases). S3 keys are taken literally, so S3 passes 0. */
    int normalize_path;
    /* Raw (decoded) names and values; encoded and sorted here. */
    const struct sigv4_kv *query;
    size_t nquery;
    /* Every header to sign, raw; names any case, duplicates allowed (joined with ','). */
    const struct sigv4_kv *headers;
    size_t nheaders;
    /* Lower-case hex SHA-256 of the body, or "UNSIGNED-PAYLOAD". */
    const char *payload_hash;
};

struct sigv4_credentials {
    const char *access_key;
    const char *secret_key;
    const char *session_token; /* NULL: none; else signed as x-amz-security-token */
    const char *region;
    const char *service;
};

struct sigv4_signature {
    char *canonical_request;
    char *string_to_sign;
    char *signed_headers;
    char *authorization; /* the Authorization header's value */
    char signature[65];
};

/* Signs req at amz_date ("YYYYMMDDTHHMMSSZ"). The caller must send exactly the headers it
 * passed (plus x-amz-security-token when a session token is set). Returns 0 or
 * PULSE_ERR_INVALID / PULSE_ERR_NOMEM; free the result with sigv4_signature_free. */
int sigv4_sign(const struct sigv4_request *req, const struct sigv4_credentials *cred,
               const char *amz_date, struct sigv4_signature *out);
void sigv4_signature_free(struct sigv4_signature *s);

/* Builds the query string of a presigned GET (X-Amz-* parameters, host the only signed
 * header, UNSIGNED-PAYLOAD), signature included; *out is malloc'd. */
int sigv4_presign_query(const char *method, const char *path, const char *host,
                        const struct sigv4_credentials *cred, const char *amz_date,
                        unsigned long expires, char **out);

/* Percent-encodes s[0..n) the SigV4 way (unreserved kept, %XX upper case); '/' is kept
 * when keep_slash. */
void sigv4_uri_encode(struct buf *b, const char *s, size_t n, int keep_slash);

/* Lower-case hex SHA-256 of data (65 bytes with NUL). */
void sigv4_sha256_hex(const void *data, size_t n, char hex[65]);

/* Formats t (UTC) as "YYYYMMDDTHHMMSSZ". */
void sigv4_amz_date(long long t, char out[17]);

#endif
