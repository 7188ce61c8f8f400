/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the reading of S3's XML answers: any bytes as a list answer are read or refused without faults, and any key, escaped as a server escapes it, lists back exactly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/s3_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)info;
    (void)strlen(key);
    ++*(size_t *)ctx;
    return 0;
}

struct expect {
    const char *key;
    int seen;
};

static int compare(void *ctx, const char *key, const pulse_object_info *info)
{
    struct expect *x = ctx;
    (void)info;
    if (strcmp(key, x->key) != 0) {
        fprintf(stderr, "fuzz_s3_xml: key listed as \"%s\", put as \"%s\"\n", key, x->key);
        abort();
    }
    x->seen++;
    return 0;
}

/* The answer a server gives for one object named key: its name escaped as XML escapes it. */
static char *answer_for(const char *key)
{
    size_t n = strlen(key);
    /* the fixed text is < 160 bytes; an escape is at most 6 bytes a character */
    char *a = malloc(160 + 6 * n), *p = a;
    if (!a)
        return NULL;
    p += sprintf(p, "<ListBucketResult><Contents><Key>");
    for (const char *k = key; *k; k++) {
        switch (*k) {
        case '&': p += sprintf(p, "&amp;"); break;
        case '<': p += sprintf(p, "&lt;"); break;
        case '>': p += sprintf(p, "&gt;"); break;
        case '"': p += sprintf(p, "&quot;"); break;
        case '\'': p += sprintf(p, "&apos;"); break;
        default: *p++ = *k;
        }
    }
    sprintf(p, "</Key><Size>1</Size></Contents><IsTruncated>false</IsTruncated></ListBucketResult>");
    return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    /* the bytes as an answer */
    size_t n = 0;
    char *token = NULL;
    if (s3_list_page(s, "", "fuzz", count, &n, &token) == 0)
        free(token);
    else if (token)
        abort();   /* a failed page hands back no token */
    free(xml_tag(s, "Code", NULL));
    /* the bytes (up to a NUL) as a key */
    struct expect x = { s, 0 };
    char *a = *s ? answer_for(s) : NULL;
    if (a) {
        if (s3_list_page(a, "", "fuzz", compare, &x, &token) != 0 || token || x.seen != 1)
            abort();
    }
    free(a);
    free(s);
    return 0;
}
