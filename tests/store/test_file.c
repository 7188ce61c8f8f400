/* SPDX-License-Identifier: Apache-2.0 */
/* The file:// backend end to end: round trips, ranges, conditional get, lists, races of writers, symlinks refused. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "pulseweights/store.h"

static char dir[256];
static pulse_store *st;

static void sha_hex(const void *p, size_t n, char out[65])
{
    unsigned char h[32];
    crypto_hash_sha256(h, p, n);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", h[i]);
}

static int same_object(const char *key, const void *want, size_t n)
{
    void *got = NULL;
    size_t len = 0;
    int rc = pulse_store_get(st, key, 0, PULSE_TO_END, SIZE_MAX, &got, &len, NULL);
    int ok = rc == 0 && len == n && (n == 0 || !memcmp(got, want, n));
    if (!ok)
        fprintf(stderr, "object %s: rc %d len %zu want %zu (%s)\n", key, rc, len, n,
                pulse_last_error());
    pulse_store_free(got);
    return ok;
}

static const char *keys[] = {
    "a", "dir/sub/b", "with space/x y", "unicode/\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80", "empty",
    "dir/c",
};

static void round_trips(void)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *k = keys[i];
        size_t n = strcmp(k, "empty") ? strlen(k) * 100 : 0;
        char *data = malloc(n + 1);
        for (size_t j = 0; j < n; j++)
            data[j] = k[j % strlen(k)];
        CHECK_OK(pulse_store_put(st, k, data, n, 0));
        CHECK(same_object(k, data, n));
        pulse_object_info info;
        CHECK_OK(pulse_store_head(st, k, &info));
        CHECK_EQ_INT(info.size, n);
        char hex[65];
        sha_hex(data, n, hex);
        CHECK(!strcmp(info.etag, hex));
        CHECK(info.mtime > 0);
        free(data);
    }
    /* Overwrite replaces. */
    CHECK_OK(pulse_store_put(st, "a", "second", 6, 0));
    CHECK(same_object("a", "second", 6));
}

static void ranges_and_limits(void)
{
    CHECK_OK(pulse_store_put(st, "r", "0123456789", 10, 0));
    void *p = NULL;
    size_t n = 0;
    CHECK_OK(pulse_store_get(st, "r", 2, 3, 100, &p, &n, NULL));
    CHECK(n == 3 && !memcmp(p, "234", 3));
    pulse_store_free(p);
    CHECK_OK(pulse_store_get(st, "r", 7, PULSE_TO_END, 100, &p, &n, NULL));
    CHECK(n == 3 && !memcmp(p, "789", 3));
    pulse_store_free(p);
    CHECK_OK(pulse_store_get(st, "r", 8, 100, 100, &p, &n, NULL)); /* clipped at the end */
    CHECK(n == 2 && !memcmp(p, "89", 2));
    pulse_store_free(p);
    CHECK_ERR(pulse_store_get(st, "r", 10, 1, 100, &p, &n, NULL), PULSE_ERR_INVALID);
    CHECK(p == NULL);
    CHECK_ERR(pulse_store_get(st, "r", 0, PULSE_TO_END, 9, &p, &n, NULL), PULSE_ERR_LIMIT);
    CHECK_ERR(pulse_store_get(st, "missing", 0, PULSE_TO_END, 9, &p, &n, NULL), PULSE_ERR_NOTFOUND);
    CHECK(strstr(pulse_last_error(), "missing") != NULL);
    /* Named ranges into a file, each counted whole; past the end refused. */
    char tmp[] = "/tmp/pulse-ranges-XXXXXX";
    int fd = mkstemp(tmp);
    pulse_store_range rg[2] = { { "r", 1, 2, 1, 0, 0 }, { "r", 6, 4, 6, 0, 0 } };
    CHECK_OK(pulse_store_get_ranges(st, rg, 2, fd));
    char b[10] = { 0 };
    CHECK(pread(fd, b, 10, 0) == 10 && !memcmp(b, "\0" "12\0\0\0" "6789", 10));
    CHECK(rg[0].done == 2 && rg[1].done == 4 && rg[0].object_size == 10);
    pulse_store_range past = { "r", 8, 3, 0, 0, 0 }, none = { "r", 0, 0, 0, 0, 0 }, missing = { "missing", 0, 1, 0, 0, 0 };
    CHECK_ERR(pulse_store_get_ranges(st, &past, 1, fd), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_store_get_ranges(st, &none, 1, fd), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_store_get_ranges(st, &missing, 1, fd), PULSE_ERR_NOTFOUND);
    close(fd);
    unlink(tmp);
    /* An empty object is a real, empty object. */
    CHECK_OK(pulse_store_get(st, "empty", 0, PULSE_TO_END, 0, &p, &n, NULL));
    CHECK(p != NULL && n == 0);
    pulse_store_free(p);
}

static void files(void)
{
    char src[300], out[300];
    snprintf(src, sizeof src, "%s/src.bin", dir);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    size_t n = 3 * (1u << 20) + 12345; /* several copy chunks */
    unsigned char *data = malloc(n);
    randombytes_buf(data, n);
    FILE *f = fopen(src, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    CHECK_OK(pulse_store_put_file(st, "big/file.bin", src, 0));
    CHECK(same_object("big/file.bin", data, n));
    pulse_object_info info;
    CHECK_OK(pulse_store_get_file(st, "big/file.bin", 1000, 2u << 20, out, &info));
    CHECK_EQ_INT(info.size, n);
    f = fopen(out, "rb");
    unsigned char *back = malloc(n);
    size_t got = f ? fread(back, 1, n, f) : 0;
    if (f)
        fclose(f);
    CHECK_EQ_INT(got, 2u << 20);
    CHECK(!memcmp(back, data + 1000, 2u << 20));
    /* Into a file of the caller's: at offsets from 0, one byte past the end asked for. */
    int ofd = open(out, O_RDWR | O_TRUNC);
    CHECK(ofd >= 0 && lseek(ofd, 7, SEEK_SET) == 7);
    CHECK_OK(pulse_store_get_fd(st, "big/file.bin", 0, n + 1, ofd, &info));
    CHECK_EQ_INT(info.size, n);
    struct stat sb;
    CHECK(fstat(ofd, &sb) == 0 && (size_t)sb.st_size == n);
    CHECK(pread(ofd, back, n, 0) == (ssize_t)n && !memcmp(back, data, n));
    CHECK_ERR(pulse_store_get_fd(st, "nope", 0, PULSE_TO_END, ofd, NULL), PULSE_ERR_NOTFOUND);
    close(ofd);
    /* A failed get leaves nothing at the output path. */
    unlink(out);
    CHECK_ERR(pulse_store_get_file(st, "nope", 0, PULSE_TO_END, out, NULL), PULSE_ERR_NOTFOUND);
    CHECK(access(out, F_OK) != 0);
    CHECK_ERR(pulse_store_put_file(st, "x", "/nonexistent/file", 0), PULSE_ERR_IO);
    free(data);
    free(back);
}

static void if_absent_and_conditional(void)
{
    CHECK_OK(pulse_store_put(st, "once", "first", 5, PULSE_PUT_IF_ABSENT));
    CHECK_ERR(pulse_store_put(st, "once", "other", 5, PULSE_PUT_IF_ABSENT), PULSE_ERR_EXISTS);
    CHECK(same_object("once", "first", 5));
    pulse_object_info info;
    CHECK_OK(pulse_store_head(st, "once", &info));
    void *p = NULL;
    size_t n = 0;
    CHECK_ERR(pulse_store_get_if_none_match(st, "once", info.etag, 100, &p, &n, NULL),
              PULSE_ERR_NOT_MODIFIED);
    CHECK(p == NULL);
    CHECK_OK(pulse_store_put(st, "once", "changed", 7, 0));
    pulse_object_info info2;
    CHECK_OK(pulse_store_get_if_none_match(st, "once", info.etag, 100, &p, &n, &info2));
    CHECK(n == 7 && !memcmp(p, "changed", 7));
    CHECK(strcmp(info.etag, info2.etag) != 0);
    pulse_store_free(p);
}

struct listed {
    char keys[32][64];
    int n;
    int stop_after;
};

static int collect(void *ctx, const char *key, const pulse_object_info *info)
{
    struct listed *l = ctx;
    (void)info;
    if (l->n < 32)
        snprintf(l->keys[l->n++], 64, "%s", key);
    return (l->stop_after && l->n >= l->stop_after) ? 42 : 0;
}

static void listing(void)
{
    struct listed l = { 0 };
    CHECK_OK(pulse_store_list(st, "", NULL, collect, &l));
    for (int i = 1; i < l.n; i++)
        CHECK(strcmp(l.keys[i - 1], l.keys[i]) < 0);
    CHECK(l.n >= 9);
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "dir/", NULL, collect, &l));
    CHECK_EQ_INT(l.n, 2);
    CHECK(!strcmp(l.keys[0], "dir/c") && !strcmp(l.keys[1], "dir/sub/b"));
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "dir/", "dir/c", collect, &l));
    CHECK(l.n == 1 && !strcmp(l.keys[0], "dir/sub/b"));
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "di", NULL, collect, &l)); /* prefix inside a name */
    CHECK_EQ_INT(l.n, 2);
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "unicode/", NULL, collect, &l));
    CHECK(l.n == 1 && !strcmp(l.keys[0], keys[3]));
    memset(&l, 0, sizeof l);
    l.stop_after = 2;
    CHECK_ERR(pulse_store_list(st, "", NULL, collect, &l), 42);
    CHECK_EQ_INT(l.n, 2);
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "zzz/", NULL, collect, &l));
    CHECK_EQ_INT(l.n, 0);
}

static int file_is(const char *path, const char *want)
{
    char got[64] = { 0 };
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    if (f)
        fclose(f);
    return f && n == strlen(want) && !memcmp(got, want, n);
}

static int refused_as_link(int rc, const char *key)
{
    const char *e = pulse_last_error();
    int ok = rc == PULSE_ERR_IO && strstr(e, key) && strstr(e, "is a symbolic link, refused");
    if (!ok)
        fprintf(stderr, "wanted a symlink refusal naming %s, got %d: %s\n", key, rc, e);
    return ok;
}

/* The store's directory may be writable by others: a symlink in it, as the key itself or as a
 * directory on the way, is refused by every operation and never leads outside the root. */
static void symlinks(void)
{
    char outside[300], secret[300], link[300], sub[300], dangling[300];
    snprintf(outside, sizeof outside, "%s/outside", dir);
    snprintf(secret, sizeof secret, "%s/outside/secret", dir);
    CHECK(mkdir(outside, 0755) == 0);
    FILE *f = fopen(secret, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs("SECRET", f);
        fclose(f);
    }
    snprintf(link, sizeof link, "%s/store/leak", dir);
    snprintf(sub, sizeof sub, "%s/store/sub", dir);
    snprintf(dangling, sizeof dangling, "%s/store/dangling", dir);
    CHECK(symlink(secret, link) == 0);
    CHECK(symlink(outside, sub) == 0);
    CHECK(symlink("/nonexistent/x", dangling) == 0);

    /* The key is a symlink. */
    void *p = NULL;
    size_t n = 0;
    pulse_object_info info;
    CHECK(refused_as_link(pulse_store_get(st, "leak", 0, PULSE_TO_END, 100, &p, &n, NULL), "leak"));
    CHECK(p == NULL);
    CHECK(refused_as_link(pulse_store_head(st, "leak", &info), "leak"));
    CHECK(refused_as_link(pulse_store_delete(st, "leak"), "leak"));
    CHECK(refused_as_link(pulse_store_put(st, "leak", "overwritten", 11, 0), "leak"));
    CHECK(refused_as_link(pulse_store_put(st, "leak", "overwritten", 11, PULSE_PUT_IF_ABSENT), "leak"));
    CHECK(refused_as_link(pulse_store_get(st, "dangling", 0, PULSE_TO_END, 100, &p, &n, NULL), "dangling"));
    char out[300];
    snprintf(out, sizeof out, "%s/got", dir);
    CHECK(refused_as_link(pulse_store_get_file(st, "leak", 0, PULSE_TO_END, out, NULL), "leak"));
    CHECK(access(out, F_OK) != 0);
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));

    /* A directory on the way is a symlink. */
    CHECK(refused_as_link(pulse_store_get(st, "sub/secret", 0, PULSE_TO_END, 100, &p, &n, NULL), "sub/secret"));
    CHECK(strstr(pulse_last_error(), ": sub is a symbolic link") != NULL);
    CHECK(refused_as_link(pulse_store_head(st, "sub/secret", &info), "sub/secret"));
    CHECK(refused_as_link(pulse_store_delete(st, "sub/secret"), "sub/secret"));
    CHECK(refused_as_link(pulse_store_put(st, "sub/secret", "overwritten", 11, 0), "sub/secret"));
    CHECK(refused_as_link(pulse_store_put(st, "sub/new/deeper", "x", 1, 0), "sub/new/deeper"));
    char made[300];
    snprintf(made, sizeof made, "%s/outside/new", dir);
    CHECK(access(made, F_OK) != 0);
    CHECK(file_is(secret, "SECRET"));

    /* A list neither names nor descends into them. */
    struct listed l = { 0 };
    CHECK_OK(pulse_store_list(st, "", NULL, collect, &l));
    for (int i = 0; i < l.n; i++)
        CHECK(strcmp(l.keys[i], "leak") && strncmp(l.keys[i], "sub/", 4) && strcmp(l.keys[i], "dangling"));
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "sub/", NULL, collect, &l));
    CHECK_EQ_INT(l.n, 0);
    memset(&l, 0, sizeof l);
    CHECK_OK(pulse_store_list(st, "le", NULL, collect, &l));
    CHECK_EQ_INT(l.n, 0);

    /* A FIFO at a key does not hang a get: it is no object. */
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/store/fifo", dir);
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK_ERR(pulse_store_get(st, "fifo", 0, PULSE_TO_END, 100, &p, &n, NULL), PULSE_ERR_NOTFOUND);

    /* Deleting the last key of nested directories removes them, and nothing above the root. */
    CHECK_OK(pulse_store_put(st, "n1/n2/k", "x", 1, 0));
    CHECK_OK(pulse_store_delete(st, "n1/n2/k"));
    char n1[300];
    snprintf(n1, sizeof n1, "%s/store/n1", dir);
    CHECK(access(n1, F_OK) != 0);
    snprintf(n1, sizeof n1, "%s/store", dir);
    CHECK(access(n1, F_OK) == 0);

    /* The root itself is the user's choice: reaching it through a symlink is fine. */
    char alias[300], url[400];
    snprintf(alias, sizeof alias, "%s/alias", dir);
    snprintf(url, sizeof url, "file://%s", alias);
    CHECK(symlink(n1, alias) == 0);
    pulse_store *as = NULL;
    CHECK_OK(pulse_store_open(&as, url, NULL));
    CHECK_OK(pulse_store_put(as, "via-alias", "ok", 2, 0));
    CHECK(same_object("via-alias", "ok", 2));
    CHECK_OK(pulse_store_delete(as, "via-alias"));
    pulse_store_close(&as);

    unlink(link);
    unlink(sub);
    unlink(dangling);
    unlink(fifo);
    CHECK(file_is(secret, "SECRET"));
}

static void deleting(void)
{
    CHECK_OK(pulse_store_delete(st, "dir/sub/b"));
    pulse_object_info info;
    CHECK_ERR(pulse_store_head(st, "dir/sub/b", &info), PULSE_ERR_NOTFOUND);
    CHECK_ERR(pulse_store_delete(st, "dir/sub/b"), PULSE_ERR_NOTFOUND);
    CHECK_ERR(pulse_store_delete(st, "dir"), PULSE_ERR_NOTFOUND); /* a directory is no key */
    char sub[300];
    snprintf(sub, sizeof sub, "%s/store/dir/sub", dir);
    CHECK(access(sub, F_OK) != 0); /* emptied directories go */
}

static void bad_keys(void)
{
    const char *bad[] = { "", "/a", "a//b", "a/", "../x", "a/../b", "a/./b", ".", "a\nb",
                          "x/.pulse-tmp-abc" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_ERR(pulse_store_put(st, bad[i], "x", 1, 0), PULSE_ERR_INVALID);
    char *r, *k;
    CHECK_OK(pulse_store_split_url("s3://bucket/p/q r", &r, &k));
    CHECK(!strcmp(r, "s3://bucket") && !strcmp(k, "p/q r"));
    pulse_store_free(r);
    pulse_store_free(k);
    CHECK_OK(pulse_store_split_url("file:///tmp/x/y", &r, &k));
    CHECK(!strcmp(r, "file:///tmp/x") && !strcmp(k, "y"));
    pulse_store_free(r);
    pulse_store_free(k);
    CHECK_OK(pulse_store_split_url("file:///y", &r, &k));
    CHECK(!strcmp(r, "file:///") && !strcmp(k, "y"));
    pulse_store_free(r);
    pulse_store_free(k);
    CHECK_ERR(pulse_store_split_url("http://x/y", &r, &k), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_store_split_url("file://rel/y", &r, &k), PULSE_ERR_FORMAT);
    pulse_store *s2 = NULL;
    CHECK_ERR(pulse_store_open(&s2, "ftp://x", NULL), PULSE_ERR_FORMAT);
    char *url = NULL;
    CHECK_ERR(pulse_store_presign(st, "a", 60, &url), PULSE_ERR_UNSUPPORTED);
}

/* Several processes race to create (or replace) one key: one creator wins, nothing torn. */
static void races(int if_absent)
{
    enum { WRITERS = 6, SIZE = 1 << 20 };
    const char *key = if_absent ? "race/absent" : "race/replace";
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            pulse_store *cs = NULL;
            char url[300];
            snprintf(url, sizeof url, "file://%s/store", dir);
            if (pulse_store_open(&cs, url, NULL))
                _exit(3);
            unsigned char *buf = malloc(SIZE);
            memset(buf, 'A' + w, SIZE);
            int rc = pulse_store_put(cs, key, buf, SIZE, if_absent ? PULSE_PUT_IF_ABSENT : 0);
            pulse_store_close(&cs);
            _exit(rc == 0 ? 0 : rc == PULSE_ERR_EXISTS ? 1 : 2);
        }
    }
    int won = 0, lost = 0;
    for (int w = 0; w < WRITERS; w++) {
        int status = 0;
        waitpid(pids[w], &status, 0);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 9;
        won += code == 0;
        lost += code == 1;
    }
    CHECK_EQ_INT(won, if_absent ? 1 : WRITERS);
    CHECK_EQ_INT(lost, if_absent ? WRITERS - 1 : 0);
    void *p = NULL;
    size_t n = 0;
    CHECK_OK(pulse_store_get(st, key, 0, PULSE_TO_END, SIZE, &p, &n, NULL));
    CHECK_EQ_INT(n, SIZE);
    int uniform = n == SIZE;
    for (size_t i = 1; uniform && i < n; i++)
        uniform = ((unsigned char *)p)[i] == ((unsigned char *)p)[0];
    CHECK(uniform);
    pulse_store_free(p);
}

static void batch(void)
{
    pulse_transfer x[4];
    memset(x, 0, sizeof x);
    x[0] = (pulse_transfer){ .op = PULSE_XFER_PUT, .key = "batch/1", .data = "one", .len = 3 };
    x[1] = (pulse_transfer){ .op = PULSE_XFER_PUT, .key = "batch/2", .data = "two", .len = 3,
                             .flags = PULSE_PUT_IF_ABSENT };
    x[2] = (pulse_transfer){ .op = PULSE_XFER_PUT, .key = "bad//key", .data = "x", .len = 1 };
    x[3] = (pulse_transfer){ .op = PULSE_XFER_PUT, .key = "batch/3", .data = "", .len = 0 };
    CHECK_ERR(pulse_store_batch(st, x, 4), PULSE_ERR_INVALID);
    CHECK_OK(x[0].result);
    CHECK_OK(x[1].result);
    CHECK_EQ_INT(x[2].result, PULSE_ERR_INVALID);
    CHECK(strstr(x[2].detail, "bad//key") != NULL);
    CHECK_OK(x[3].result);
    pulse_transfer g[3];
    memset(g, 0, sizeof g);
    g[0] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = "batch/1", .length = PULSE_TO_END,
                             .max_size = 10 };
    g[1] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = "batch/2", .offset = 1, .length = 1,
                             .max_size = 10 };
    g[2] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = "batch/none", .length = PULSE_TO_END,
                             .max_size = 10 };
    CHECK_ERR(pulse_store_batch(st, g, 3), PULSE_ERR_NOTFOUND);
    CHECK(g[0].result == 0 && g[0].len == 3 && !memcmp(g[0].out, "one", 3));
    CHECK(g[1].result == 0 && g[1].len == 1 && !memcmp(g[1].out, "w", 1));
    CHECK_EQ_INT(g[2].result, PULSE_ERR_NOTFOUND);
    for (int i = 0; i < 3; i++)
        pulse_store_free(g[i].out);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-store-test-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    char url[300];
    snprintf(url, sizeof url, "file://%s/store", dir); /* does not exist yet: created on put */
    CHECK_OK(pulse_store_open(&st, url, NULL));
    round_trips();
    ranges_and_limits();
    files();
    if_absent_and_conditional();
    listing();
    deleting();
    symlinks();
    bad_keys();
    races(1);
    races(0);
    batch();
    pulse_store_close(&st);
    CHECK(st == NULL);
    pulse_store_close(&st);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done("store-file");
}
