/* SPDX-License-Identifier: Apache-2.0 */
/* The s3:// backend against a real server (Ceph RGW from tests/s3/rgw.sh): every operation round-trips. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <unistd.h>

#include "check.h"
#include "pulseweights/store.h"

static pulse_store *st;
static char base[128];

static int same(const char *key, const void *want, size_t n)
{
    void *got = NULL;
    size_t len = 0;
    int rc = pulse_store_get(st, key, 0, PULSE_TO_END, SIZE_MAX, &got, &len, NULL);
    int ok = rc == 0 && len == n && (n == 0 || !memcmp(got, want, n));
    if (!ok)
        fprintf(stderr, "object %s: rc %d len %zu want %zu (%s)\n", key, rc, len, n, pulse_last_error());
    pulse_store_free(got);
    return ok;
}

static int file_equals(const char *path, const void *want, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char *b = malloc(n + 1);
    size_t got = fread(b, 1, n + 1, f);
    fclose(f);
    int ok = got == n && !memcmp(b, want, n);
    free(b);
    return ok;
}

static const char *keys[] = { "plain", "dir/sub/deep", "with space/x y",
                              "unicode/\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80", "empty" };

static void round_trips(void)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        size_t n = strcmp(keys[i], "empty") ? 1000 + i : 0;
        unsigned char *d = malloc(n + 1);
        randombytes_buf(d, n);
        CHECK_OK(pulse_store_put(st, keys[i], d, n, 0));
        CHECK(same(keys[i], d, n));
        pulse_object_info info;
        CHECK_OK(pulse_store_head(st, keys[i], &info));
        CHECK_EQ_INT(info.size, n);
        CHECK(info.etag[0] != 0 && info.mtime > 0);
        free(d);
    }
    void *p = NULL;
    size_t n = 0;
    CHECK_OK(pulse_store_put(st, "r", "0123456789", 10, 0));
    CHECK_OK(pulse_store_get(st, "r", 2, 3, 100, &p, &n, NULL));
    CHECK(n == 3 && !memcmp(p, "234", 3));
    pulse_store_free(p);
    CHECK_OK(pulse_store_get(st, "r", 7, PULSE_TO_END, 100, &p, &n, NULL));
    CHECK(n == 3 && !memcmp(p, "789", 3));
    pulse_store_free(p);
    CHECK_ERR(pulse_store_get(st, "r", 0, PULSE_TO_END, 5, &p, &n, NULL), PULSE_ERR_LIMIT);
    CHECK_ERR(pulse_store_get(st, "r", 20, 1, 100, &p, &n, NULL), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_store_get(st, "nope", 0, PULSE_TO_END, 100, &p, &n, NULL), PULSE_ERR_NOTFOUND);
    CHECK(strstr(pulse_last_error(), "nope") && strstr(pulse_last_error(), "404"));
    CHECK_OK(pulse_store_get(st, "empty", 0, PULSE_TO_END, 0, &p, &n, NULL));
    CHECK(p && n == 0);
    pulse_store_free(p);
}

static void conditional(void)
{
    CHECK_OK(pulse_store_put(st, "head/x", "v1", 2, PULSE_PUT_IF_ABSENT));
    CHECK_ERR(pulse_store_put(st, "head/x", "v2", 2, PULSE_PUT_IF_ABSENT), PULSE_ERR_EXISTS);
    CHECK(same("head/x", "v1", 2));
    pulse_object_info info, info2;
    CHECK_OK(pulse_store_head(st, "head/x", &info));
    void *p = NULL;
    size_t n = 0;
    CHECK_ERR(pulse_store_get_if_none_match(st, "head/x", info.etag, 100, &p, &n, NULL),
              PULSE_ERR_NOT_MODIFIED);
    CHECK_OK(pulse_store_put(st, "head/x", "v2!", 3, 0));
    CHECK_OK(pulse_store_get_if_none_match(st, "head/x", info.etag, 100, &p, &n, &info2));
    CHECK(n == 3 && !memcmp(p, "v2!", 3) && strcmp(info.etag, info2.etag));
    pulse_store_free(p);
}

static void multipart(void)
{
    size_t n = 12u << 20; /* threshold 6 MiB, parts 5 MiB (RGW's minimum): 3 parts */
    unsigned char *d = malloc(n);
    randombytes_buf(d, n);
    char src[64] = "/tmp/pulse-s3-src-XXXXXX", out[80];
    int fd = mkstemp(src);
    CHECK(fd >= 0 && write(fd, d, n) == (ssize_t)n);
    close(fd);
    snprintf(out, sizeof out, "%s.out", src);
    CHECK_OK(pulse_store_put_file(st, "big/multi part", src, 0));
    pulse_object_info info;
    CHECK_OK(pulse_store_head(st, "big/multi part", &info));
    CHECK_EQ_INT(info.size, n);
    CHECK(strchr(info.etag, '-') != NULL); /* a multipart ETag: it really went multipart */
    CHECK_OK(pulse_store_get_file(st, "big/multi part", 0, PULSE_TO_END, out, NULL)); /* ranges */
    CHECK(file_equals(out, d, n));
    CHECK_OK(pulse_store_get_file(st, "big/multi part", 5000, 7u << 20, out, NULL));
    CHECK(file_equals(out, d + 5000, 7u << 20));
    /* Into a file of the caller's, as parallel ranges, at offsets from 0 whatever its
     * position; one byte past the end asked for, the object's own bytes come. */
    int ofd = open(out, O_RDWR | O_TRUNC);
    CHECK(ofd >= 0 && lseek(ofd, 100, SEEK_SET) == 100);
    CHECK_OK(pulse_store_get_fd(st, "big/multi part", 0, n + 1, ofd, &info));
    CHECK_EQ_INT(info.size, n);
    close(ofd);
    CHECK(file_equals(out, d, n));
    ofd = open(out, O_RDWR | O_TRUNC);
    CHECK_OK(pulse_store_get_fd(st, "big/multi part", 3, 10, ofd, NULL));   /* one GET */
    close(ofd);
    CHECK(file_equals(out, d + 3, 10));
    ofd = open(out, O_RDWR | O_TRUNC);
    CHECK_ERR(pulse_store_get_fd(st, "big/nope", 0, PULSE_TO_END, ofd, NULL), PULSE_ERR_NOTFOUND);
    close(ofd);
    CHECK_ERR(pulse_store_get_fd(st, "big/multi part", 0, PULSE_TO_END, -1, NULL), PULSE_ERR_INVALID);
    CHECK(same("big/multi part", d, n));
    /* Named ranges at once, each one GET, each counted whole when the call returns; the bytes
     * between them are not fetched; a range past the end is refused. */
    const char *mp = "big/multi part";
    pulse_store_range rg[4] = { { mp, 0, 1u << 20, 0, 0, 0 }, { mp, 3u << 20, 5u << 20, 3u << 20, 0, 0 },
                                { mp, n - 7, 7, n - 7, 0, 0 }, { "big/mem", 0, 10, n, 0, 0 } };
    ofd = open(out, O_RDWR | O_TRUNC);
    CHECK_OK(pulse_store_get_ranges(st, rg, 3, ofd));
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(rg[i].done, rg[i].length);
        CHECK_EQ_INT(rg[i].object_size, n);
        unsigned char *b = malloc(rg[i].length);
        CHECK(pread(ofd, b, rg[i].length, (off_t)rg[i].at) == (ssize_t)rg[i].length &&
              !memcmp(b, d + rg[i].offset, rg[i].length));
        free(b);
    }
    unsigned char hole = 1;
    CHECK(pread(ofd, &hole, 1, 2u << 20) == 1 && hole == 0);
    pulse_store_range past = { mp, n - 3, 7, 0, 0, 0 };
    CHECK(pulse_store_get_ranges(st, &past, 1, ofd) != 0);
    pulse_store_range nope = { "big/nope", 0, 10, 0, 0, 0 };
    CHECK_ERR(pulse_store_get_ranges(st, &nope, 1, ofd), PULSE_ERR_NOTFOUND);
    close(ofd);
    /* Multipart from memory, and if-absent on a multipart put. */
    CHECK_OK(pulse_store_put(st, "big/mem", d, n, PULSE_PUT_IF_ABSENT));
    CHECK_ERR(pulse_store_put(st, "big/mem", d, n, PULSE_PUT_IF_ABSENT), PULSE_ERR_EXISTS);
    CHECK(same("big/mem", d, n));
    /* ranges of two objects in one call, each to its own place in the file */
    ofd = open(out, O_RDWR | O_TRUNC);
    CHECK_OK(pulse_store_get_ranges(st, rg + 2, 2, ofd));
    unsigned char two[17];
    CHECK(pread(ofd, two, 7, (off_t)(n - 7)) == 7 && !memcmp(two, d + n - 7, 7));
    CHECK(pread(ofd, two, 10, (off_t)n) == 10 && !memcmp(two, d, 10));
    close(ofd);
    /* A batch runs what is not a small put or get (files, multipart from memory) one at a time
     * through the backend's own put and get. */
    pulse_transfer bx[3];
    memset(bx, 0, sizeof bx);
    bx[0] = (pulse_transfer){ .op = PULSE_XFER_PUT, .key = "big/batch file", .path = src };
    bx[1] = (pulse_transfer){ .op = PULSE_XFER_PUT, .key = "big/batch mem", .data = d, .len = n };
    bx[2] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = "big/multi part", .length = PULSE_TO_END,
                              .path = out };
    unlink(out);
    CHECK_OK(pulse_store_batch(st, bx, 3));
    CHECK(same("big/batch file", d, n));
    CHECK(same("big/batch mem", d, n));
    CHECK(file_equals(out, d, n));
    unlink(src);
    unlink(out);
    free(d);
}

struct listed {
    char keys[64][64];
    int n;
};

static int collect(void *ctx, const char *key, const pulse_object_info *info)
{
    struct listed *l = ctx;
    (void)info;
    if (l->n < 64)
        snprintf(l->keys[l->n++], 64, "%s", key);
    return 0;
}

static void listing(void)
{
    struct listed l = { 0 };
    CHECK_OK(pulse_store_list(st, "", NULL, collect, &l)); /* list_page 3: several pages */
    CHECK(l.n >= 9);
    for (int i = 1; i < l.n; i++)
        CHECK(strcmp(l.keys[i - 1], l.keys[i]) < 0);
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "dir/", NULL, collect, &l));
    CHECK(l.n == 1 && !strcmp(l.keys[0], "dir/sub/deep"));
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "", "r", collect, &l));
    CHECK(l.n == 2 && !strcmp(l.keys[0], keys[3]) && !strcmp(l.keys[1], keys[2]));
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "unicode/", NULL, collect, &l));
    CHECK(l.n == 1 && !strcmp(l.keys[0], keys[3]));
}

static int drop(void *ctx, const char *key, const pulse_object_info *info);

/* Keys holding XML's special characters, and text that looks like XML's escapes and tags: the
 * list answer escapes them, and each must come back exactly once, unescaped exactly once. The
 * last one holds every character a URL or SigV4 treats specially, "%20" and a bad "%zz". */
static void xml_keys(void)
{
    static const char *odd[] = { "xml/a<b>c&d", "xml/&lt;not an escape&amp;", "xml/</Key></Contents>x",
                                 "xml/'quotes\"", "xml/&#x41;&#65;",
                                 "xml/url+=?#%20%zz~!*(),;:@$[]{}|^`\\" };
    enum { N = sizeof odd / sizeof odd[0] };
    for (int i = 0; i < N; i++)
        CHECK_OK(pulse_store_put(st, odd[i], odd[i], strlen(odd[i]), 0));
    struct listed l = { 0 };
    CHECK_OK(pulse_store_list(st, "xml/", NULL, collect, &l));
    CHECK_EQ_INT(l.n, N);
    for (int i = 0; i < N; i++) {
        int found = 0;
        for (int j = 0; j < l.n; j++)
            found += !strcmp(l.keys[j], odd[i]);
        if (found != 1)
            fprintf(stderr, "key %s listed %d times\n", odd[i], found);
        CHECK(found == 1);
        CHECK(same(odd[i], odd[i], strlen(odd[i])));
    }
    /* start-after with such a key, and deleting by the listed names */
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "xml/", "xml/&lt;not an escape&amp;", collect, &l));
    CHECK_EQ_INT(l.n, N - 2);
    CHECK_OK(pulse_store_list(st, "xml/", NULL, drop, st));
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "xml/", NULL, collect, &l));
    CHECK_EQ_INT(l.n, 0);
}

static void batch(void)
{
    enum { N = 24 };
    pulse_transfer x[N];
    char names[N][32], bodies[N][32];
    memset(x, 0, sizeof x);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "batch/%02d", i);
        snprintf(bodies[i], sizeof bodies[i], "body %d", i);
        x[i] = (pulse_transfer){ .op = PULSE_XFER_PUT, .key = names[i], .data = bodies[i],
                                 .len = strlen(bodies[i]) };
    }
    CHECK_OK(pulse_store_batch(st, x, N));
    for (int i = 0; i < N; i++)
        x[i] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = names[i], .length = PULSE_TO_END,
                                 .max_size = 100 };
    x[N - 1].key = "batch/missing";
    CHECK_ERR(pulse_store_batch(st, x, N), PULSE_ERR_NOTFOUND);
    for (int i = 0; i < N - 1; i++)
        CHECK(x[i].result == 0 && x[i].len == strlen(bodies[i]) &&
              !memcmp(x[i].out, bodies[i], x[i].len));
    CHECK_EQ_INT(x[N - 1].result, PULSE_ERR_NOTFOUND);
    for (int i = 0; i < N; i++)
        pulse_store_free(x[i].out);
}

static int http_code(const char *url)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' '%s'", url);
    FILE *p = popen(cmd, "r");
    int code = 0;
    if (p) {
        if (fscanf(p, "%d", &code) != 1)
            code = 0;
        pclose(p);
    }
    return code;
}

static void presign_and_errors(const char *bucket)
{
    char *url = NULL;
    CHECK_OK(pulse_store_presign(st, "r", 600, &url));
    CHECK_EQ_INT(http_code(url), 200);
    pulse_store_free(url);
    CHECK_OK(pulse_store_presign(st, "r", 1, &url));
    sleep(2); /* let it expire */
    CHECK_EQ_INT(http_code(url), 403);
    pulse_store_free(url);

    char u[300];
    pulse_store *bad = NULL;
    snprintf(u, sizeof u, "s3://%s-does-not-exist", bucket);
    CHECK_OK(pulse_store_open(&bad, u, NULL));
    pulse_object_info info;
    void *p = NULL;
    size_t n;
    CHECK_ERR(pulse_store_get(bad, "k", 0, PULSE_TO_END, 10, &p, &n, NULL), PULSE_ERR_NOTFOUND);
    CHECK(strstr(pulse_last_error(), "bucket") != NULL);
    pulse_store_close(&bad);

    char *secret = strdup(getenv("AWS_SECRET_ACCESS_KEY"));
    setenv("AWS_SECRET_ACCESS_KEY", "definitely-wrong-secret", 1);
    snprintf(u, sizeof u, "s3://%s", bucket);
    CHECK_OK(pulse_store_open(&bad, u, NULL));
    CHECK_ERR(pulse_store_put(bad, "x", "y", 1, 0), PULSE_ERR_AUTH);
    CHECK(strstr(pulse_last_error(), "definitely") == NULL); /* never the secret */
    CHECK_ERR(pulse_store_head(bad, "r", &info), PULSE_ERR_AUTH);
    pulse_store_close(&bad);
    setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
    free(secret);
}

static int drop(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)info;
    return pulse_store_delete(ctx, key);
}

/* Credentials, region and endpoint from profile files alone, as most users keep them: the
 * same server through [profile NAME] files, and a profile with a wrong secret refused. */
static void profile_files(void)
{
    static const char *vars[] = { "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL" };
    char *saved[4], cred[200], conf[216], text[1024], u[300];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
    }
    snprintf(cred, sizeof cred, "%s/pulse-e2e-credentials-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    snprintf(conf, sizeof conf, "%s.config", cred);
    FILE *f = fopen(cred, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    snprintf(text, sizeof text, "[e2e]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
             "[e2e-wrong]\naws_access_key_id = %s\naws_secret_access_key = definitely-wrong-secret\n",
             saved[0] ? saved[0] : "", saved[1] ? saved[1] : "", saved[0] ? saved[0] : "");
    fputs(text, f);
    fclose(f);
    f = fopen(conf, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "[profile e2e]\nregion = %s\nendpoint_url = %s\n[profile e2e-wrong]\nregion = %s\nendpoint_url = %s\n",
            saved[2] ? saved[2] : "us-east-1", saved[3] ? saved[3] : "", saved[2] ? saved[2] : "us-east-1",
            saved[3] ? saved[3] : "");
    fclose(f);
    for (int i = 0; i < 4; i++)
        unsetenv(vars[i]);
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", conf, 1);
    snprintf(u, sizeof u, "%s/profiles", base);
    pulse_store *p = NULL;
    setenv("AWS_PROFILE", "e2e", 1);
    CHECK_OK(pulse_store_open(&p, u, NULL));
    if (p) {
        CHECK_OK(pulse_store_put(p, "k", "profile", 7, 0));
        void *got = NULL;
        size_t n = 0;
        CHECK_OK(pulse_store_get(p, "k", 0, PULSE_TO_END, 100, &got, &n, NULL));
        CHECK(n == 7 && got && !memcmp(got, "profile", 7));
        pulse_store_free(got);
        CHECK_OK(pulse_store_delete(p, "k"));
        pulse_store_close(&p);
    }
    setenv("AWS_PROFILE", "e2e-wrong", 1);
    CHECK_OK(pulse_store_open(&p, u, NULL));
    if (p) {
        CHECK_ERR(pulse_store_put(p, "k", "x", 1, 0), PULSE_ERR_AUTH);
        CHECK(strstr(pulse_last_error(), "definitely") == NULL); /* never the secret */
        pulse_store_close(&p);
    }
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_CONFIG_FILE");
    for (int i = 0; i < 4; i++) {
        if (saved[i])
            setenv(vars[i], saved[i], 1);
        free(saved[i]);
    }
    unlink(cred);
    unlink(conf);
}

/* scripts/test.sh passes the server as PULSE_RGW_ENV=DIR/env ("export K=V" lines). */
static void load_rgw_env(void)
{
    const char *path = getenv("PULSE_RGW_ENV");
    FILE *f = path && *path && !getenv("PULSE_TEST_BUCKET") ? fopen(path, "r") : NULL;
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        char *kv = strncmp(line, "export ", 7) ? line : line + 7;
        char *eq = strchr(kv, '=');
        if (!eq)
            continue;
        *eq = 0;
        char *v = eq + 1;
        v[strcspn(v, "\r\n")] = 0;
        size_t vl = strlen(v);
        if (vl >= 2 && (v[0] == '\'' || v[0] == '"') && v[vl - 1] == v[0]) {
            v[vl - 1] = 0;
            v++;
        }
        setenv(kv, v, 1);
    }
    if (f)
        fclose(f);
}

int main(void)
{
    load_rgw_env();
    const char *bucket = getenv("PULSE_TEST_BUCKET");
    if (!bucket || !*bucket) {
        printf("SKIP: neither PULSE_TEST_BUCKET nor PULSE_RGW_ENV is set (start RGW with tests/s3/rgw.sh and source its env)\n");
        return 77;
    }
    unsigned char r[4];
    randombytes_buf(r, sizeof r);
    snprintf(base, sizeof base, "s3://%s/store-test-%02x%02x%02x%02x", bucket, r[0], r[1], r[2], r[3]);
    pulse_store_settings s;
    pulse_store_default_settings(&s);
    s.multipart_threshold = 6u << 20;
    s.part_size = 5u << 20;
    s.list_page = 3;
    s.concurrency = 4;
    CHECK_OK(pulse_store_open(&st, base, &s));
    if (!st)
        return check_done("store-s3");
    round_trips();
    conditional();
    multipart();
    listing();
    xml_keys();
    batch();
    presign_and_errors(bucket);
    profile_files();
    CHECK_OK(pulse_store_delete(st, "plain"));
    pulse_object_info info;
    CHECK_ERR(pulse_store_head(st, "plain", &info), PULSE_ERR_NOTFOUND);
    CHECK_OK(pulse_store_list(st, "", NULL, drop, st));
    struct listed l = { 0 };
    CHECK_OK(pulse_store_list(st, "", NULL, collect, &l));
    CHECK_EQ_INT(l.n, 0);
    pulse_store_close(&st);
    return check_done("store-s3");
}
