/* SPDX-License-Identifier: Apache-2.0 */
/* Reading S3's XML answers: an element's markup or its text, and one ListObjectsV2 page. */
#ifndef PULSE_STORE_S3_XML_H
#define PULSE_STORE_S3_XML_H

#include "pulseweights/store.h"

/* Text of the first <tag>...</tag> in xml at or after *pos (pos may be NULL), with XML's
 * escapes decoded once; *pos is moved past it. NULL when absent (or out of memory). */
char *xml_tag(const char *xml, const char *tag, const char **pos);

/* One ListObjectsV2 answer: calls fn(ctx, key without `prefix`, info) for each <Contents>
 * whose key starts with prefix, in the answer's order, stopping at fn's first non-zero, which
 * it returns. Then *token is NextContinuationToken when the answer says IsTruncated, else
 * NULL; a truncated answer without a token is PULSE_ERR_SERVER. `what` names the listing in
 * errors. */
int s3_list_page(const char *xml, const char *prefix, const char *what, pulse_store_list_fn fn, void *ctx,
                 char **token);

#endif
