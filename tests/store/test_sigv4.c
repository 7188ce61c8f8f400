/* SPDX-License-Identifier: Apache-2.0 */
/* Runs every case of the AWS SigV4 test suite and AWS's documented S3 examples through our signer. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "pulseweights/error.h"
#include "store/sigv4.h"

/* The suite's fixed inputs (botocore's aws4_testsuite harness; the secret is AWS's documented
 * example key, not in the case files). */
#define SUITE_ACCESS "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_REGION "us-east-1"
#define SUITE_SERVICE "service"
#define SUITE_TOKEN "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"

static int cases_run, cases_passed;

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct buf b = { 0 };
    char tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        buf_add(&b, tmp, n);
    fclose(f);
    if (len)
        *len = b.len;
    return buf_take(&b);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* In place: the suite writes some query names already percent-encoded; the signer takes raw. */
static void pct_decode(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
            *o++ = (char)(hexval(p[1]) * 16 + hexval(p[2]));
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

static int expect_file(const char *dir, const char *name, const char *ext, const char *got)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    char *want = read_all(path, NULL);
    if (!want) {
        fprintf(stderr, "%s: cannot read %s\n", name, path);
        return 0;
    }
    int ok = !strcmp(want, got);
    if (!ok)
        fprintf(stderr, "%s.%s differs\n--- want\n%s\n--- got\n%s\n", name, ext, want, got);
    free(want);
    return ok;
}

static void run_case(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.req", dir, name);
    size_t len;
    char *req = read_all(path, &len);
    CHECK(req != NULL);
    if (!req)
        return;
    cases_run++;
    /* Body: everything after the first blank line. */
    char *body = strstr(req, "\n\n");
    size_t body_len = 0;
    if (body) {
        *body = 0;
        body += 2;
        body_len = len - (size_t)(body - req);
    } else {
        body = "";
    }
    /* Request line: METHOD SP URI SP HTTP/1.1, and the URI may hold spaces. */
    char *line_end = strchr(req, '\n');
    char *headers_text = line_end ? line_end + 1 : req + strlen(req);
    if (line_end)
        *line_end = 0;
    char *sp1 = strchr(req, ' '), *sp2 = strrchr(req, ' ');
    CHECK(sp1 && sp2 && sp1 < sp2);
    if (!sp1 || !sp2 || sp1 >= sp2) {
        free(req);
        return;
    }
    *sp1 = 0;
    *sp2 = 0;
    char *uri = sp1 + 1;
    char *qs = strchr(uri, '?');
    struct sigv4_kv query[64], headers[64];
    size_t nq = 0, nh = 0;
    if (qs) {
        *qs++ = 0;
        for (char *tok = strtok(qs, "&"); tok && nq < 64; tok = strtok(NULL, "&")) {
            char *eq = strchr(tok, '=');
            if (eq)
                *eq++ = 0;
            pct_decode(tok);
            if (eq)
                pct_decode(eq);
            query[nq].name = tok;
            query[nq].value = eq ? eq : "";
            nq++;
        }
    }
    /* Headers; a line starting with whitespace continues the previous value. */
    struct buf vals[64];
    memset(vals, 0, sizeof vals);
    const char *amz_date = NULL;
    char *save = NULL;
    for (char *l = strtok_r(headers_text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if ((l[0] == ' ' || l[0] == '\t') && nh) {
            buf_addc(&vals[nh - 1], ' ');
            buf_adds(&vals[nh - 1], l);
            continue;
        }
        char *colon = strchr(l, ':');
        if (!colon || nh == 64)
            continue;
        *colon = 0;
        headers[nh].name = l;
        buf_adds(&vals[nh], colon + 1);
        nh++;
    }
    for (size_t i = 0; i < nh; i++) {
        headers[i].value = vals[i].data ? vals[i].data : "";
        if (!strcasecmp(headers[i].name, "x-amz-date"))
            amz_date = headers[i].value;
    }
    CHECK(amz_date != NULL);
    char payload[65];
    sigv4_sha256_hex(body, body_len, payload);
    struct sigv4_request r = {
        .method = req, .path = uri, .normalize_path = strstr(dir, "normalize-path") != NULL,
        .query = query, .nquery = nq, .headers = headers, .nheaders = nh,
        .payload_hash = payload,
    };
    struct sigv4_credentials c = {
        SUITE_ACCESS, SUITE_SECRET,
        strstr(name, "with-session-token") ? SUITE_TOKEN : NULL,
        SUITE_REGION, SUITE_SERVICE,
    };
    struct sigv4_signature s;
    int ok = 0;
    if (amz_date) {
        CHECK_OK(sigv4_sign(&r, &c, amz_date, &s));
        ok = s.canonical_request && expect_file(dir, name, "creq", s.canonical_request) &&
             expect_file(dir, name, "sts", s.string_to_sign) &&
             expect_file(dir, name, "authz", s.authorization);
        sigv4_signature_free(&s);
    }
    CHECK(ok);
    if (ok)
        cases_passed++;
    else
        fprintf(stderr, "FAIL: %s\n", dir);
    for (size_t i = 0; i < 64; i++)
        buf_free(&vals[i]);
    free(req);
}

static void walk(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.req", dir, base);
    struct stat st;
    if (stat(path, &st) == 0)
        run_case(dir, base);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            walk(path);
    }
    closedir(d);
}

/* AWS's documented S3 examples (GET Object with Range; presigned URL). */
static void s3_doc_examples(void)
{
    struct sigv4_credentials c = { "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                                   NULL, "us-east-1", "s3" };
    struct sigv4_kv h[] = {
        { "Host", "examplebucket.s3.amazonaws.com" },
        { "Range", "bytes=0-9" },
        { "x-amz-content-sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "x-amz-date", "20130524T000000Z" },
    };
    struct sigv4_request r = { .method = "GET", .path = "/test.txt", .headers = h, .nheaders = 4,
        .payload_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" };
    struct sigv4_signature s;
    CHECK_OK(sigv4_sign(&r, &c, "20130524T000000Z", &s));
    CHECK(!strcmp(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"));
    sigv4_signature_free(&s);

    char *q = NULL;
    CHECK_OK(sigv4_presign_query("GET", "/test.txt", "examplebucket.s3.amazonaws.com", &c,
                                 "20130524T000000Z", 86400, &q));
    CHECK(q && strstr(q, "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"));
    CHECK(q && strstr(q, "X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"));
    free(q);
    CHECK_ERR(sigv4_presign_query("GET", "/t", "h", &c, "20130524T000000Z", 604801, &q),
              PULSE_ERR_INVALID);

    /* S3 keys are never normalised: "a//b/../c" is signed literally, spaces as %20. */
    struct sigv4_request r2 = { .method = "GET", .path = "/b/a//x y/../c", .headers = h,
                                .nheaders = 1, .payload_hash = "UNSIGNED-PAYLOAD" };
    CHECK_OK(sigv4_sign(&r2, &c, "20130524T000000Z", &s));
    CHECK(s.canonical_request && !strncmp(s.canonical_request, "GET\n/b/a//x%20y/../c\n", 21));
    sigv4_signature_free(&s);
}

int main(void)
{
    s3_doc_examples();
    const char *dir = getenv("PULSE_SIGV4_VECTORS");
    char buf[4096];
    if (!dir || !*dir) {
        const char *src = getenv("PULSE_SRC");
        snprintf(buf, sizeof buf, "%s/../shared/sigv4-vectors", src ? src : ".");
        dir = buf;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("SKIP: SigV4 test suite not found at %s (set PULSE_SIGV4_VECTORS)\n", dir);
        return check_done("sigv4 (doc examples only)") ? 1 : 77;
    }
    walk(dir);
    printf("sigv4 suite: %d of %d cases pass (%s)\n", cases_passed, cases_run, dir);
    CHECK(cases_run > 0);
    CHECK_EQ_INT(cases_passed, cases_run);
    return check_done("sigv4");
}
