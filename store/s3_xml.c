/* SPDX-License-Identifier: Apache-2.0 */
/* Reading S3's XML answers: an element's markup or its text, and one ListObjectsV2 page. */
#include "store/s3_xml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fail.h"
#include "store/buf.h"

/* The inner markup [*a, *e) of the first <tag>...</tag> at or after *pos; 0 when absent. */
static int find(const char *xml, const char *tag, const char **pos, const char **a, const char **e)
{
    if (!xml)
        return 0;
    char open[80], close[80];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *s = strstr(pos && *pos ? *pos : xml, open);
    if (!s)
        return 0;
    s += strlen(open);
    const char *t = strstr(s, close);
    if (!t)
        return 0;
    if (pos)
        *pos = t + strlen(close);
    *a = s;
    *e = t;
    return 1;
}

/* Appends code point cp as UTF-8. */
static void add_utf8(struct buf *b, unsigned long cp)
{
    if (cp < 0x80) {
        buf_addc(b, (char)cp);
    } else if (cp < 0x800) {
        buf_addc(b, (char)(0xC0 | (cp >> 6)));
        buf_addc(b, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        buf_addc(b, (char)(0xE0 | (cp >> 12)));
        buf_addc(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
        buf_addc(b, (char)(0x80 | (cp & 0x3F)));
    } else {
        buf_addc(b, (char)(0xF0 | (cp >> 18)));
        buf_addc(b, (char)(0x80 | ((cp >> 12) & 0x3F)));
        buf_addc(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
        buf_addc(b, (char)(0x80 | (cp & 0x3F)));
    }
}

/* The code point of the escape name[0..n) (between '&' and ';'); 0 when it is not one. */
static unsigned long escape_of(const char *name, size_t n)
{
    if (n == 3 && !strncmp(name, "amp", 3)) return '&';
    if (n == 2 && !strncmp(name, "lt", 2)) return '<';
    if (n == 2 && !strncmp(name, "gt", 2)) return '>';
    if (n == 4 && !strncmp(name, "quot", 4)) return '"';
    if (n == 4 && !strncmp(name, "apos", 4)) return '\'';
    if (n < 2 || name[0] != '#')
        return 0;
    /* digits only, so that strtoul neither skips blanks nor takes a sign */
    int hex = name[1] == 'x';
    size_t i = hex ? 2 : 1;
    if (i == n || n - i > 8)
        return 0;
    unsigned long cp = 0;
    for (; i < n; i++) {
        char c = name[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                   : hex && c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : hex && c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 99;
        if (d == 99)
            return 0;
        cp = cp * (hex ? 16 : 10) + d;
    }
    return cp <= 0x10FFFF ? cp : 0;
}

/* [a, e) with XML's escapes decoded once; NULL only when out of memory. */
static char *text(const char *a, const char *e)
{
    struct buf b = { 0 };
    for (const char *p = a; p < e; p++) {
        const char *semi = *p == '&' ? memchr(p, ';', (size_t)(e - p)) : NULL;
        unsigned long cp = semi ? escape_of(p + 1, (size_t)(semi - p - 1)) : 0;
        if (!cp) {
            buf_addc(&b, *p);   /* not an escape: kept as it stands */
            continue;
        }
        add_utf8(&b, cp);
        p = semi;
    }
    return buf_take(&b);
}

/* [a, e) as it stands; NULL only when out of memory. An element holding others (<Contents>)
 * is taken so and its texts read from it: decoding the whole first would decode the texts
 * twice, and a key holding "&lt;/Key&gt;" would end early. */
static char *markup(const char *a, const char *e)
{
    struct buf b = { 0 };
    buf_add(&b, a, (size_t)(e - a));
    return buf_take(&b);
}

char *xml_tag(const char *xml, const char *tag, const char **pos)
{
    const char *a, *e;
    return find(xml, tag, pos, &a, &e) ? text(a, e) : NULL;
}

static int64_t parse_iso8601(const char *t)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!t || sscanf(t, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                     &tm.tm_min, &tm.tm_sec) != 6)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

/* What one <Contents> says of its object. */
static void object_info(const char *item, pulse_object_info *info)
{
    char *sz = xml_tag(item, "Size", NULL), *et = xml_tag(item, "ETag", NULL);
    char *lm = xml_tag(item, "LastModified", NULL);
    memset(info, 0, sizeof *info);
    info->size = sz ? strtoull(sz, NULL, 10) : 0;
    info->mtime = parse_iso8601(lm);
    if (et) {
        const char *q = et[0] == '"' ? et + 1 : et;
        snprintf(info->etag, sizeof info->etag, "%s", q);
        size_t el = strlen(info->etag);
        if (el && info->etag[el - 1] == '"')
            info->etag[el - 1] = 0;
    }
    free(sz);
    free(et);
    free(lm);
}

int s3_list_page(const char *xml, const char *prefix, const char *what, pulse_store_list_fn fn, void *ctx,
                 char **token)
{
    *token = NULL;
    const char *pos = xml, *a, *e;
    size_t plen = strlen(prefix);
    int rc = 0;
    /* An entry lost to memory or to a malformed answer would be an object the caller never
     * sees (a listing that deletes, or that looks for the newest state): both fail the list. */
    while (!rc && find(xml, "Contents", &pos, &a, &e)) {
        char *item = markup(a, e), *k = NULL;
        const char *ka, *ke;
        if (!item)
            rc = pulse_fail(PULSE_ERR_NOMEM, "list %s: out of memory", what);
        else if (!find(item, "Key", NULL, &ka, &ke))
            rc = pulse_fail(PULSE_ERR_SERVER, "list %s: an entry of the answer has no Key", what);
        else if (!(k = text(ka, ke)))
            rc = pulse_fail(PULSE_ERR_NOMEM, "list %s: out of memory", what);
        else if (strlen(k) >= plen && !strncmp(k, prefix, plen)) {
            pulse_object_info info;
            object_info(item, &info);
            rc = fn(ctx, k + plen, &info);
        }
        free(k);
        free(item);
    }
    if (rc)
        return rc;
    char *trunc = xml_tag(xml, "IsTruncated", NULL);
    if (trunc && !strcmp(trunc, "true")) {
        *token = xml_tag(xml, "NextContinuationToken", NULL);
        if (!*token || !**token) {
            free(*token);
            *token = NULL;
            rc = pulse_fail(PULSE_ERR_SERVER, "list %s: truncated answer without a continuation token", what);
        }
    }
    free(trunc);
    return rc;
}
