/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the reading of S3's XML answers: any bytes as a list answer (of keys, or of incomplete uploads) are read or refused without faults (a refused page hands nothing on, the same page twice is a loop), and any key, escaped as a server escapes it, lists back exactly or is refused (never another key; always listed when it is printable ASCII). */
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

/* Printable ASCII, tabs and line ends: text XML 1.0 carries as it is; other bytes (controls,
 * bytes that are not UTF-8) are no XML text and a page holding them may be refused. */
static int plain(const char *k)
{
    for (; *k; k++)
        if ((*k < 0x20 || *k > 0x7e) && *k != '\t' && *k != '\n' && *k != '\r')
            return 0;
    return 1;
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
        case '\r': p += sprintf(p, "&#13;"); break;   /* as AWS does: XML reads a bare CR as LF */
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
    /* the bytes as an answer: a refused page hands nothing on, no token, and leaves the
     * listing's state as it was */
    size_t n = 0;
    char *token = NULL;
    struct s3_list_state ls = { .what = "fuzz", .prefix = "", .max_keys = 1000000 };
    if (s3_list_page(s, size, &ls, count, &n, &token) == 0) {
        free(token);
        if (ls.keys != n)
            abort();
        /* the same page again is a server that loops: refused unless it listed nothing */
        size_t n2 = 0;
        int again = s3_list_page(s, size, &ls, count, &n2, &token);
        if (again == 0)
            free(token);
        if ((n && again == 0) || n2)
            abort();
    } else if (token || n || ls.keys || ls.last) {
        abort();
    }
    free(ls.last);
    free(xml_tag(s, "Code", NULL));
    /* the bytes as a ListMultipartUploads answer: read whole or refused with nothing handed on */
    struct s3_upload *up = NULL;
    size_t nu = 0;
    char *nk = NULL, *ni = NULL;
    if (s3_uploads_page(s, size, "fuzz", &up, &nu, &nk, &ni) == 0) {
        for (size_t i = 0; i < nu; i++)
            if (!up[i].key || !up[i].upload_id || !*up[i].upload_id)
                abort();
        if (!nk != !ni)
            abort();
    } else if (up || nu || nk || ni) {
        abort();
    }
    s3_uploads_free(up, nu);
    free(nk);
    free(ni);
    /* the bytes (up to a NUL) as a key */
    struct expect x = { s, 0 };
    char *a = *s ? answer_for(s) : NULL;
    if (a) {
        struct s3_list_state lk = { .what = "fuzz", .prefix = "", .max_keys = 1 };
        int rc = s3_list_page(a, strlen(a), &lk, compare, &x, &token);
        if (token || (rc == 0 ? x.seen != 1 : x.seen != 0 || plain(s)))
            abort();
        free(lk.last);
    }
    free(a);
    free(s);
    return 0;
}
