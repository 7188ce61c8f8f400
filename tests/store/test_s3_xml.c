/* SPDX-License-Identifier: Apache-2.0 */
/* S3's XML answers without a server: escapes decoded exactly once, keys that look like markup, truncated pages, malformed entries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "store/s3_xml.h"

struct seen {
    char keys[8][96];
    pulse_object_info info[8];
    int n, stop_at;
};

static int collect(void *ctx, const char *key, const pulse_object_info *info)
{
    struct seen *s = ctx;
    if (s->n == s->stop_at)
        return 42;
    if (s->n < 8) {
        snprintf(s->keys[s->n], sizeof s->keys[0], "%s", key);
        s->info[s->n] = *info;
    }
    s->n++;
    return 0;
}

static void escapes(void)
{
    static const struct { const char *xml, *want; } cases[] = {
        { "<K>a&amp;b</K>", "a&b" },
        { "<K>&lt;&gt;&quot;&apos;</K>", "<>\"'" },
        { "<K>&amp;lt;</K>", "&lt;" },                       /* once, not twice */
        { "<K>&#65;&#x42;&#X43;</K>", "AB&#X43;" },          /* 'X' is not XML's hex mark */
        { "<K>&#xe9;&#x20AC;&#x1F600;</K>", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" },
        { "<K>&#x110000;&#0;&#;&#x;&# 65;&#-1;&#+65;</K>", "&#x110000;&#0;&#;&#x;&# 65;&#-1;&#+65;" },
        { "<K>&nbsp;&amp</K>", "&nbsp;&amp" },                /* unknown, unterminated: as they stand */
        { "<K></K>", "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = xml_tag(cases[i].xml, "K", NULL);
        CHECK(got && !strcmp(got, cases[i].want));
        if (got && strcmp(got, cases[i].want))
            fprintf(stderr, "%s: got \"%s\", want \"%s\"\n", cases[i].xml, got, cases[i].want);
        free(got);
    }
    CHECK(xml_tag("<K>open", "K", NULL) == NULL);
    CHECK(xml_tag("no element", "K", NULL) == NULL);
    /* pos walks the elements in order */
    const char *xml = "<A>1</A><B>x</B><A>&amp;2</A>", *pos = xml;
    char *a1 = xml_tag(xml, "A", &pos), *a2 = xml_tag(xml, "A", &pos), *a3 = xml_tag(xml, "A", &pos);
    CHECK(a1 && !strcmp(a1, "1"));
    CHECK(a2 && !strcmp(a2, "&2"));
    CHECK(a3 == NULL);
    free(a1);
    free(a2);
}

#define ENTRY(key, size) "<Contents><Key>" key "</Key><LastModified>2026-12-01T20:33:00.000Z</LastModified>" \
                         "<ETag>&quot;0123abcd&quot;</ETag><Size>" size "</Size></Contents>"

static void pages(void)
{
    char *token = (char *)1;
    struct seen s = { .stop_at = -1 };
    /* keys that look like escapes and like markup come back exactly as they were put */
    const char *page = "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name>"
        ENTRY("run/a&amp;lt;b&lt;/Key&gt;", "17") ENTRY("other/x", "1") ENTRY("run/&lt;/Contents&gt;&amp;", "0")
        "<IsTruncated>false</IsTruncated></ListBucketResult>";
    CHECK_OK(s3_list_page(page, "run/", "b", collect, &s, &token));
    CHECK(token == NULL);
    CHECK_EQ_INT(s.n, 2);
    CHECK(!strcmp(s.keys[0], "a&lt;b</Key>"));
    CHECK(!strcmp(s.keys[1], "</Contents>&"));
    CHECK_EQ_INT(s.info[0].size, 17);
    CHECK(!strcmp(s.info[0].etag, "0123abcd"));
    CHECK_EQ_INT(s.info[0].mtime, 1796157180);   /* 2026-12-01T20:33:00Z */

    /* a truncated page hands back its token; without one it is the server's fault */
    const char *more = "<ListBucketResult>" ENTRY("run/1", "1") "<IsTruncated>true</IsTruncated>"
                       "<NextContinuationToken>tok&amp;en</NextContinuationToken></ListBucketResult>";
    memset(&s, 0, sizeof s);
    s.stop_at = -1;
    CHECK_OK(s3_list_page(more, "run/", "b", collect, &s, &token));
    CHECK(token && !strcmp(token, "tok&en"));
    free(token);
    const char *lost = "<ListBucketResult>" ENTRY("run/1", "1") "<IsTruncated>true</IsTruncated></ListBucketResult>";
    CHECK_ERR(s3_list_page(lost, "run/", "b", collect, &s, &token), PULSE_ERR_SERVER);
    CHECK(token == NULL);
    CHECK(strstr(pulse_last_error(), "continuation token") != NULL);

    /* an entry without a key fails the listing rather than hiding an object */
    const char *keyless = "<ListBucketResult>" ENTRY("run/1", "1")
                          "<Contents><Size>3</Size></Contents></ListBucketResult>";
    memset(&s, 0, sizeof s);
    s.stop_at = -1;
    CHECK_ERR(s3_list_page(keyless, "run/", "b", collect, &s, &token), PULSE_ERR_SERVER);
    CHECK_EQ_INT(s.n, 1);
    CHECK(strstr(pulse_last_error(), "no Key") != NULL);

    /* the callback's first non-zero ends the page and is returned */
    memset(&s, 0, sizeof s);
    s.stop_at = 1;
    CHECK_EQ_INT(s3_list_page(page, "run/", "b", collect, &s, &token), 42);
    CHECK(token == NULL);

    /* an empty answer lists nothing */
    memset(&s, 0, sizeof s);
    s.stop_at = -1;
    CHECK_OK(s3_list_page("", "", "b", collect, &s, &token));
    CHECK_EQ_INT(s.n, 0);
}

int main(void)
{
    escapes();
    pages();
    return check_done("store-s3-xml");
}
