/* SPDX-License-Identifier: Apache-2.0 */
/* Reading S3's XML answers: an element's markup or its text, and one ListObjectsV2 page. */
#ifndef PULSE_STORE_S3_XML_H
#define PULSE_STORE_S3_XML_H

#include "pulseweights/store.h"

/* Text of the first <tag>...</tag> in xml at or after *pos (pos may be NULL), with XML's
 * escapes decoded once; *pos is moved past it. NULL when absent (or out of memory). */
char *xml_tag(const char *xml, const char *tag, const char **pos);

#include <stddef.h>
#include <stdint.h>

/* What one listing has seen across its pages; the caller fills the first four fields and
 * frees `last` at the end. */
struct s3_list_state {
    const char *what;    /* names the listing (store URL and endpoint) in errors */
    const char *prefix;  /* the full prefix asked for: every key must start with it */
    size_t strip;        /* bytes cut from the front of each key handed to fn (the store's prefix) */
    uint64_t max_keys;   /* more keys than this in the whole listing is PULSE_ERR_LIMIT */
    char *last;          /* the greatest key so far (malloc'd): start-after, or NULL, at first */
    uint64_t keys;       /* keys listed so far */
};

/* One ListObjectsV2 answer of len bytes (xml[len] == 0). The whole page is checked first:
 * its root must be <ListBucketResult> (anything else, such as random bytes, an HTML page or
 * an <Error> document, is PULSE_ERR_FORMAT saying what it was), every element closed (a cut
 * answer is PULSE_ERR_FORMAT), IsTruncated true or false, each <Contents> with one Key and a
 * numeric Size (PULSE_ERR_SERVER / PULSE_ERR_FORMAT), keys strictly increasing from ls->last
 * and under ls->prefix (PULSE_ERR_SERVER: a server that repeats, reorders or loops), at most
 * ls->max_keys in all (PULSE_ERR_LIMIT). Only then fn(ctx, key + ls->strip, info) is called
 * for each entry in order, stopping at fn's first non-zero, which it returns. *token is
 * NextContinuationToken when the answer says IsTruncated, else NULL; a truncated answer
 * without a token is PULSE_ERR_SERVER. A failed page hands back no token and leaves ls as
 * it was. */
int s3_list_page(const char *xml, size_t len, struct s3_list_state *ls, pulse_store_list_fn fn, void *ctx,
                 char **token);

/* One incomplete multipart upload, as ListMultipartUploads lists it. */
struct s3_upload {
    char *key;          /* the full key (the caller strips the store's prefix) */
    char *upload_id;
    int64_t initiated;  /* seconds since the epoch, UTC; 0 when the answer gave none */
};

/* One ListMultipartUploads answer of len bytes (xml[len] == 0), read whole before anything is
 * handed on: its root must be <ListMultipartUploadsResult> (else PULSE_ERR_FORMAT saying what it
 * is), every element closed, IsTruncated true or false, each <Upload> with one Key and one
 * non-empty UploadId, a truncated answer with NextKeyMarker and NextUploadIdMarker (else
 * PULSE_ERR_SERVER). WHAT names the listing in errors. On success *v holds *n uploads (free with
 * s3_uploads_free) and *next_key / *next_id the markers of a truncated answer (else NULL). */
int s3_uploads_page(const char *xml, size_t len, const char *what, struct s3_upload **v, size_t *n,
                    char **next_key, char **next_id);
void s3_uploads_free(struct s3_upload *v, size_t n);

#endif
