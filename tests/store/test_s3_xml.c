/* SPDX-License-Identifier: Apache-2.0 */
/* S3's XML answers without a server: escapes decoded exactly once, keys that look like markup, and every answer a listing refuses (not a listing, cut, looping, out of order, a DTD, too large). */
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
        { "<K>&#65;&#x42;</K>", "AB" },
        { "<K>&#xe9;&#x20AC;&#x1F600;</K>", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" },
        { "<K>a<!-- b -->c<![CDATA[<&>]]></K>", "ac<&>" },
        { "<K></K>", "" },
        { "<K/>", "" },
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
    /* what is no XML is no text: a bad escape, an unknown entity, entities declared in a DTD
     * (never read: a DOCTYPE stops the parser) */
    static const char *bad[] = {
        "<K>&#X43;</K>", "<K>&#x110000;</K>", "<K>&#0;</K>", "<K>&#;</K>", "<K>&# 65;</K>", "<K>&#-1;</K>",
        "<K>&nbsp;</K>", "<K>&amp</K>", "<K>a\x01</K>",
        "<!DOCTYPE K [<!ENTITY e \"x\">]><K>&e;</K>",
        "<!DOCTYPE K [<!ENTITY e SYSTEM \"file:///etc/passwd\">]><K>&e;</K>",
        "<!DOCTYPE K><K>plain</K>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *got = xml_tag(bad[i], "K", NULL);
        CHECK(got == NULL);
        if (got)
            fprintf(stderr, "%s: got \"%s\", want nothing\n", bad[i], got);
        free(got);
    }
    /* the element is read once closed; what follows it is not (an error body cut after it) */
    char *code = xml_tag("<Error><Code>SlowDown</Code><Mess", "Code", NULL);
    CHECK(code && !strcmp(code, "SlowDown"));
    free(code);
    /* pos walks the elements in order */
    const char *xml = "<R><A>1</A><B>x</B><A>&amp;2</A></R>", *pos = xml;
    char *a1 = xml_tag(xml, "A", &pos), *a2 = xml_tag(xml, "A", &pos), *a3 = xml_tag(xml, "A", &pos);
    CHECK(a1 && !strcmp(a1, "1"));
    CHECK(a2 && !strcmp(a2, "&2"));
    CHECK(a3 == NULL);
    free(a1);
    free(a2);
}

#define ENTRY(key, size) "<Contents><Key>" key "</Key><LastModified>2026-12-01T20:33:00.000Z</LastModified>" \
                         "<ETag>&quot;0123abcd&quot;</ETag><Size>" size "</Size></Contents>"

/* A fresh listing state over prefix `run/` (stripped as the store's own prefix "" would not be). */
static struct s3_list_state state(const char *prefix, size_t strip)
{
    struct s3_list_state ls = { .what = "s3://b/run/ at http://x", .prefix = prefix, .strip = strip,
                                .max_keys = 1000000 };
    return ls;
}

static int page_of(const char *xml, struct s3_list_state *ls, struct seen *s, char **token)
{
    memset(s, 0, sizeof *s);
    s->stop_at = -1;
    return s3_list_page(xml, strlen(xml), ls, collect, s, token);
}

static void pages(void)
{
    char *token = (char *)1;
    struct seen s = { .stop_at = -1 };
    /* keys that look like escapes and like markup come back exactly as they were put */
    const char *page = "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name>"
        ENTRY("run/&lt;/Contents&gt;&amp;", "0") ENTRY("run/a&amp;lt;b&lt;/Key&gt;", "17")
        "<IsTruncated>false</IsTruncated></ListBucketResult>";
    struct s3_list_state ls = state("run/", 4);
    CHECK_OK(s3_list_page(page, strlen(page), &ls, collect, &s, &token));
    CHECK(token == NULL);
    CHECK_EQ_INT(s.n, 2);
    CHECK(!strcmp(s.keys[0], "</Contents>&"));
    CHECK(!strcmp(s.keys[1], "a&lt;b</Key>"));
    CHECK_EQ_INT(s.info[1].size, 17);
    CHECK(!strcmp(s.info[1].etag, "0123abcd"));
    CHECK_EQ_INT(s.info[1].mtime, 1796157180);   /* 2026-12-01T20:33:00Z */
    CHECK_EQ_INT(ls.keys, 2);
    CHECK(ls.last && !strcmp(ls.last, "run/a&lt;b</Key>"));
    free(ls.last);

    /* what RGW and AWS send: a namespace, an Owner inside each entry, an empty <Prefix/> */
    const char *real = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
        "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name><Prefix/><MaxKeys>2</MaxKeys>"
        "<IsTruncated>false</IsTruncated><Contents><Key>run/x</Key><Size>3</Size><Owner><ID>o</ID>"
        "<DisplayName>O</DisplayName></Owner><Type>Normal</Type></Contents>\n</ListBucketResult>\n";
    ls = state("run/", 0);
    CHECK_OK(page_of(real, &ls, &s, &token));
    CHECK_EQ_INT(s.n, 1);
    CHECK(!strcmp(s.keys[0], "run/x"));
    free(ls.last);

    /* a truncated page hands back its token; without one it is the server's fault */
    const char *more = "<ListBucketResult>" ENTRY("run/1", "1") "<IsTruncated>true</IsTruncated>"
                       "<NextContinuationToken>tok&amp;en</NextContinuationToken></ListBucketResult>";
    ls = state("run/", 4);
    CHECK_OK(page_of(more, &ls, &s, &token));
    CHECK(token && !strcmp(token, "tok&en"));
    free(token);
    free(ls.last);
    const char *lost = "<ListBucketResult>" ENTRY("run/1", "1") "<IsTruncated>true</IsTruncated></ListBucketResult>";
    ls = state("run/", 4);
    CHECK_ERR(page_of(lost, &ls, &s, &token), PULSE_ERR_SERVER);
    CHECK(token == NULL);
    CHECK(strstr(pulse_last_error(), "continuation token") != NULL);
    CHECK_EQ_INT(s.n, 0);   /* a refused page hands nothing on */
    const char *empty_tok = "<ListBucketResult><IsTruncated>true</IsTruncated>"
                            "<NextContinuationToken></NextContinuationToken></ListBucketResult>";
    CHECK_ERR(page_of(empty_tok, &ls, &s, &token), PULSE_ERR_SERVER);

    /* an entry without a key fails the listing rather than hiding an object */
    const char *keyless = "<ListBucketResult>" ENTRY("run/1", "1")
                          "<Contents><Size>3</Size></Contents><IsTruncated>false</IsTruncated></ListBucketResult>";
    CHECK_ERR(page_of(keyless, &ls, &s, &token), PULSE_ERR_SERVER);
    CHECK_EQ_INT(s.n, 0);
    CHECK(strstr(pulse_last_error(), "no Key") != NULL);
    CHECK(ls.last == NULL && ls.keys == 0);   /* a refused page leaves the state as it was */

    /* the callback's first non-zero ends the page and is returned */
    memset(&s, 0, sizeof s);
    s.stop_at = 1;
    ls = state("run/", 4);
    CHECK_EQ_INT(s3_list_page(page, strlen(page), &ls, collect, &s, &token), 42);
    CHECK(token == NULL);
    free(ls.last);
}

/* Answers that are no listing at all, or only part of one: refused, naming what was seen. */
static void refusals(void)
{
    static const struct { const char *xml; size_t len; int err; const char *says; } cases[] = {
        { "", 0, PULSE_ERR_FORMAT, "an empty body" },
        { "\x8f\x01zz\xff random", 10, PULSE_ERR_FORMAT, "not XML" },
        { "<!DOCTYPE html><html><body>Welcome</body></html>", 48, PULSE_ERR_FORMAT, "markup starting \"<!DOCTYPE" },
        { "<html><head><title>Login</title></head></html>", 46, PULSE_ERR_FORMAT, "a <html> document" },
        { "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code></Error>", 61, PULSE_ERR_FORMAT,
          "a <Error> document (Code NoSuchBucket)" },
        { "<ListBucketResults></ListBucketResults>", 39, PULSE_ERR_FORMAT, "<ListBucketResults>" },
        /* cut inside an entry, between entries, before the end tag, inside a tag */
        { "<ListBucketResult><IsTruncated>false</IsTruncated>" ENTRY("run/1", "1") "<Contents><Key>run/2</Key><Si",
          0, PULSE_ERR_FORMAT, "cut" },
        { "<ListBucketResult><IsTruncated>false</IsTruncated>" ENTRY("run/1", "1"), 0, PULSE_ERR_FORMAT, "cut" },
        { "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketRes", 0, PULSE_ERR_FORMAT, "cut" },
        { "<ListBucketResult><IsTruncated>false</IsTruncated><Conte", 0, PULSE_ERR_FORMAT, "cut inside a tag" },
        { "<ListBucketResult", 0, PULSE_ERR_FORMAT, "cut inside a tag" },
        /* an attribute's value without its closing quote runs into the next tag: a '<' in it */
        { "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/><IsTruncated>false</IsTruncated>"
          "</ListBucketResult>", 0, PULSE_ERR_FORMAT, "not well-formed (invalid token) at line 1, column 66" },
        /* an entry closed by another's end tag, text mixed into the listing, trailing bytes */
        { "<ListBucketResult><Contents><Key>run/1</Key></Size></Contents><IsTruncated>false</IsTruncated>"
          "</ListBucketResult>", 0, PULSE_ERR_FORMAT, "mismatched tag at line 1, column 47" },
        { "<ListBucketResult>junk<IsTruncated>false</IsTruncated></ListBucketResult>", 0, PULSE_ERR_FORMAT, "mixed" },
        { "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult><html>", 0, PULSE_ERR_FORMAT,
          "goes on after" },
        /* IsTruncated missing or neither true nor false, twice; a size that is not a number */
        { "<ListBucketResult>" ENTRY("run/1", "1") "</ListBucketResult>", 0, PULSE_ERR_FORMAT, "no IsTruncated" },
        { "<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>", 0, PULSE_ERR_FORMAT,
          "not true or false" },
        { "<ListBucketResult><IsTruncated>false</IsTruncated><IsTruncated>true</IsTruncated></ListBucketResult>",
          0, PULSE_ERR_FORMAT, "a second <IsTruncated>" },
        { "<ListBucketResult>" ENTRY("run/1", "-1") "<IsTruncated>false</IsTruncated></ListBucketResult>", 0,
          PULSE_ERR_FORMAT, "not a number" },
        { "<ListBucketResult><Contents><Key>run/1</Key><Key>run/2</Key></Contents>"
          "<IsTruncated>false</IsTruncated></ListBucketResult>", 0, PULSE_ERR_FORMAT, "a second <Key>" },
        /* keys must increase and stay under the prefix asked for */
        { "<ListBucketResult>" ENTRY("run/2", "1") ENTRY("run/1", "1") "<IsTruncated>false</IsTruncated>"
          "</ListBucketResult>", 0, PULSE_ERR_SERVER, "comes after" },
        { "<ListBucketResult>" ENTRY("run/1", "1") ENTRY("run/1", "1") "<IsTruncated>false</IsTruncated>"
          "</ListBucketResult>", 0, PULSE_ERR_SERVER, "comes after" },
        { "<ListBucketResult>" ENTRY("other/1", "1") "<IsTruncated>false</IsTruncated></ListBucketResult>", 0,
          PULSE_ERR_SERVER, "outside the prefix" },
        /* nesting without end: refused at a fixed depth, not by running out of stack */
        { "<ListBucketResult><a><a><a><a><a><a><a><a><a><a><a>", 0, PULSE_ERR_FORMAT, "deeper" },
        /* a NUL byte; markup inside a leaf; a second token */
        { "<ListBucketResult><IsTruncated>false</IsTruncated>\0</ListBucketResult>", 70, PULSE_ERR_FORMAT,
          "a NUL byte" },
        { "<ListBucketResult><IsTruncated><b>false</b></IsTruncated></ListBucketResult>", 0, PULSE_ERR_FORMAT,
          "markup inside <IsTruncated>" },
        { "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>a</NextContinuationToken>"
          "<NextContinuationToken>b</NextContinuationToken></ListBucketResult>", 0, PULSE_ERR_FORMAT,
          "a second <NextContinuationToken>" },
        /* DTDs are never read: billion laughs, an external entity, a bare DOCTYPE before a listing */
        { "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol1 \"&lol;&lol;&lol;&lol;"
          "&lol;&lol;&lol;&lol;&lol;&lol;\"><!ENTITY lol2 \"&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;"
          "&lol1;&lol1;\">]><ListBucketResult><Contents><Key>run/&lol2;</Key></Contents>"
          "<IsTruncated>false</IsTruncated></ListBucketResult>", 0, PULSE_ERR_FORMAT,
          "markup starting \"<!DOCTYPE lolz" },
        { "<!DOCTYPE ListBucketResult [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><ListBucketResult>"
          "<Contents><Key>run/&x;</Key></Contents><IsTruncated>false</IsTruncated></ListBucketResult>", 0,
          PULSE_ERR_FORMAT, "a document type declaration" },
        { "<!DOCTYPE ListBucketResult><ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", 0,
          PULSE_ERR_FORMAT, "a document type declaration" },
        /* an entity never declared (there is no DTD to declare it) */
        { "<ListBucketResult><Contents><Key>run/&x;</Key></Contents><IsTruncated>false</IsTruncated>"
          "</ListBucketResult>", 0, PULSE_ERR_FORMAT, "undefined entity" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct seen s;
        char *token = (char *)1;
        struct s3_list_state ls = state("run/", 4);
        memset(&s, 0, sizeof s);
        s.stop_at = -1;
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].xml);
        int rc = s3_list_page(cases[i].xml, len, &ls, collect, &s, &token);
        CHECK_EQ_INT(rc, cases[i].err);
        CHECK(token == NULL);
        CHECK_EQ_INT(s.n, 0);
        CHECK(ls.last == NULL && ls.keys == 0);
        CHECK(strstr(pulse_last_error(), "s3://b/run/ at http://x") != NULL);
        if (!strstr(pulse_last_error(), cases[i].says)) {
            CHECK(0);
            fprintf(stderr, "case %zu: got \"%s\", want \"%s\" in it\n", i, pulse_last_error(), cases[i].says);
        }
    }
}

/* An answer larger than any page is refused before it is parsed. */
static void too_large(void)
{
    size_t n = (64u << 20) + 1;
    char *big = malloc(n + 1);
    CHECK(big != NULL);
    if (!big)
        return;
    memset(big, ' ', n);
    memcpy(big, "<ListBucketResult>", 18);
    big[n] = 0;
    struct seen s;
    char *token = NULL;
    struct s3_list_state ls = state("run/", 4);
    CHECK_ERR(page_of(big, &ls, &s, &token), PULSE_ERR_LIMIT);
    CHECK(strstr(pulse_last_error(), "more than a page can be") != NULL);
    CHECK(xml_tag(big, "ListBucketResult", NULL) == NULL);
    free(big);
}

/* Across pages: keys go on increasing from the last page's last key (or start-after), and
 * the count of keys is bounded. */
static void across_pages(void)
{
    struct seen s;
    char *token = NULL;
    struct s3_list_state ls = state("run/", 4);
    const char *p1 = "<ListBucketResult>" ENTRY("run/a", "1") ENTRY("run/b", "1") "<IsTruncated>true</IsTruncated>"
                     "<NextContinuationToken>t1</NextContinuationToken></ListBucketResult>";
    const char *p2 = "<ListBucketResult>" ENTRY("run/c", "1") "<IsTruncated>false</IsTruncated></ListBucketResult>";
    CHECK_OK(page_of(p1, &ls, &s, &token));
    free(token);
    /* the same page again (a server that answers the next token with the first page) */
    CHECK_ERR(page_of(p1, &ls, &s, &token), PULSE_ERR_SERVER);
    CHECK(strstr(pulse_last_error(), "'run/a' comes after 'run/b'") != NULL);
    CHECK_EQ_INT(s.n, 0);
    CHECK_OK(page_of(p2, &ls, &s, &token));
    CHECK_EQ_INT(s.n, 1);
    CHECK_EQ_INT(ls.keys, 3);
    free(ls.last);

    /* start-after is the first bound */
    ls = state("run/", 4);
    ls.last = strdup("run/b");
    CHECK_ERR(page_of(p1, &ls, &s, &token), PULSE_ERR_SERVER);
    CHECK_OK(page_of(p2, &ls, &s, &token));
    free(ls.last);

    /* more keys than the bound */
    ls = state("run/", 4);
    ls.max_keys = 2;
    CHECK_OK(page_of(p1, &ls, &s, &token));
    free(token);
    CHECK_ERR(page_of(p2, &ls, &s, &token), PULSE_ERR_LIMIT);
    CHECK(strstr(pulse_last_error(), "more than 2 keys") != NULL);
    free(ls.last);
}

/* ListMultipartUploads answers: read whole, or refused with nothing handed on. */
static void uploads(void)
{
    const char *ok = "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>"
                     "<NextKeyMarker>run/objects/b</NextKeyMarker><NextUploadIdMarker>2~y</NextUploadIdMarker>"
                     "<Upload><Key>run/objects/a</Key><UploadId>2~x</UploadId><Initiator><ID>u</ID></Initiator>"
                     "<Initiated>2026-12-07T09:00:00.000Z</Initiated></Upload>"
                     "<Upload><Key>run/objects/b</Key><UploadId>2~y</UploadId></Upload></ListMultipartUploadsResult>";
    struct s3_upload *v = NULL;
    size_t n = 0;
    char *nk = NULL, *ni = NULL;
    CHECK_OK(s3_uploads_page(ok, strlen(ok), "t", &v, &n, &nk, &ni));
    CHECK_EQ_INT(n, 2);
    CHECK(n == 2 && !strcmp(v[0].key, "run/objects/a") && !strcmp(v[0].upload_id, "2~x"));
    CHECK(n == 2 && v[0].initiated == 1796634000 && v[1].initiated == 0);
    CHECK(nk && ni && !strcmp(nk, "run/objects/b") && !strcmp(ni, "2~y"));
    s3_uploads_free(v, n);
    free(nk);
    free(ni);
    static const struct {
        const char *xml;
        int err;
    } bad[] = {
        { "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", PULSE_ERR_FORMAT },
        { "<Error><Code>AccessDenied</Code></Error>", PULSE_ERR_FORMAT },
        { "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated><Upload><Key>k</Key>", PULSE_ERR_FORMAT },
        { "<ListMultipartUploadsResult><IsTruncated>maybe</IsTruncated></ListMultipartUploadsResult>", PULSE_ERR_FORMAT },
        { "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated></ListMultipartUploadsResult>", PULSE_ERR_SERVER },
        { "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated><Upload><Key>k</Key></Upload>"
          "</ListMultipartUploadsResult>", PULSE_ERR_SERVER },
        { "<!DOCTYPE x [<!ENTITY a 'b'>]><ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
          "</ListMultipartUploadsResult>", PULSE_ERR_FORMAT },
        { "", PULSE_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = NULL;
        n = 0;
        nk = ni = NULL;
        CHECK_ERR(s3_uploads_page(bad[i].xml, strlen(bad[i].xml), "t", &v, &n, &nk, &ni), bad[i].err);
        CHECK(!v && !n && !nk && !ni);
    }
}

int main(void)
{
    uploads();
    escapes();
    pages();
    refusals();
    across_pages();
    too_large();
    return check_done("store-s3-xml");
}
