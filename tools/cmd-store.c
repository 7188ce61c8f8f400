/* SPDX-License-Identifier: Apache-2.0 */
/* pulse store: list, put, get, head, remove and presign objects in a file:// or s3:// store. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/names.h"
#include "pulseweights/store.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static const char usage_text[] =
    "usage: pulse store <subverb> URL [options]   (pulse store <subverb> --help)\n"
    "\n"
    "URL is a store URL plus key: s3://bucket/prefix/key or file:///abs/dir/key.\n"
    "\n"
    "  ls URL [-l]                      list keys starting with URL's key part (all depths);\n"
    "                                   -l adds size and ETag: SIZE<TAB>ETAG<TAB>KEY\n"
    "  put URL FILE [--if-absent]       upload FILE; --if-absent fails if the key exists\n"
    "  get URL -o FILE [--range A-B]    download to FILE (bytes A..B inclusive; A- to the end);\n"
    "                                   -o - writes to standard output\n"
    "  head URL                         print size, etag and mtime\n"
    "  rm URL                           delete the key\n"
    "  presign URL [--expires S]        print a presigned GET URL valid S seconds (default 3600)\n"
    "\n"
    "s3:// uses AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION,\n"
    "AWS_ENDPOINT_URL, AWS_PROFILE, AWS_CA_BUNDLE; PULSE_S3_ANONYMOUS=1 sends unsigned requests\n"
    "(see docs/store.md). Errors: one line on stderr, exit 1\n"
    "(2 for usage errors, a malformed key among them).\n";

struct sub_args {
    const char *url;
    const char *file;
    const char *out;
    const char *range;
    const char *expires;
    int if_absent;
    int long_list;
};

/* store get -o -: the range to stdout in pieces of at most 16 MiB, each checked to come from
 * the same object (ETag) as the first, so a key rewritten meanwhile is an error, not a splice. */
static int get_to_stdout(pulse_store *st, const char *key, uint64_t off, uint64_t len, const char *url)
{
    pulse_object_info head, info;
    int err = pulse_store_head(st, key, &head);
    if (err)
        return cli_fail("store get", err, url);
    uint64_t end;
    if (off > head.size)
        end = off + 1;   /* the store says how the range is wrong */
    else
        end = len == PULSE_TO_END || len > head.size - off ? head.size : off + len;
    for (uint64_t pos = off; pos < end;) {
        uint64_t want = end - pos < (16u << 20) ? end - pos : (16u << 20);
        void *data = NULL;
        size_t got = 0;
        err = pulse_store_get(st, key, pos, want, (size_t)want, &data, &got, &info);
        if (err)
            return cli_fail("store get", err, url);
        if (strcmp(info.etag, head.etag)) {
            pulse_store_free(data);
            fprintf(stderr, "pulse store get: %s: the object changed while it was read (ETag %s, then %s)\n", url,
                    head.etag, info.etag);
            return 1;
        }
        size_t w = got ? fwrite(data, 1, got, stdout) : 0;
        pulse_store_free(data);
        if (w != got || !got)
            break;   /* a short write: cli_finish_stdout says why */
        pos += got;
    }
    return cli_finish_stdout("store get");
}

/* Parses the options a subverb allows (flags listed in `allowed`); returns 0 or an exit status. */
static int parse(const char *verb, int argc, char **argv, const char *allowed, int npos,
                 struct sub_args *a)
{
    memset(a, 0, sizeof *a);
    const char *pos[2] = { NULL, NULL };
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char **val = NULL;
        if (!strcmp(s, "-o") && strchr(allowed, 'o'))
            val = &a->out;
        else if (!strcmp(s, "--range") && strchr(allowed, 'r'))
            val = &a->range;
        else if (!strcmp(s, "--expires") && strchr(allowed, 'e'))
            val = &a->expires;
        else if (!strcmp(s, "--if-absent") && strchr(allowed, 'a'))
            a->if_absent = 1;
        else if (!strcmp(s, "-l") && strchr(allowed, 'l'))
            a->long_list = 1;
        else if (s[0] == '-' && s[1])
            return cli_usage_error(verb, "unknown option '%s'", s);
        else if (n < npos)
            pos[n++] = s;
        else
            return cli_usage_error(verb, "unexpected argument '%s'", s);
        if (val) {
            if (i + 1 >= argc)
                return cli_usage_error(verb, "%s needs a value", s);
            *val = argv[++i];
        }
    }
    if (n < npos)
        return cli_usage_error(verb, "missing %s", n == 0 ? "URL" : "FILE");
    a->url = pos[0];
    a->file = pos[1];
    return 0;
}

/* Opens the store that holds the URL's key; *key is "" for a bare bucket or directory. The key
 * (a list prefix for ls) is checked before anything is opened: a malformed one is a usage error. */
static int open_url(const char *verb, const char *url, pulse_store **st, char **key)
{
    char *root = NULL;
    int rc = pulse_store_split_url(url, &root, key);
    if (!rc && (strcmp(verb, "store ls") ? pulse_check_key(*key) : pulse_check_key_prefix(*key))) {
        pulse_store_free(root);
        pulse_store_free(*key);
        *key = NULL;
        return cli_usage_error(verb, "%s", pulse_last_error());
    }
    if (!rc)
        rc = pulse_store_open(st, root, NULL);
    pulse_store_free(root);
    if (rc) {
        pulse_store_free(*key);
        *key = NULL;
        return cli_fail(verb, rc, url);
    }
    return 0;
}

static int print_key(void *ctx, const char *key, const pulse_object_info *info)
{
    int long_list = *(int *)ctx;
    if (long_list)
        printf("%" PRIu64 "\t%s\t%s\n", info->size, info->etag, key);
    else
        printf("%s\n", key);
    return ferror(stdout) ? -1 : 0;
}

static int parse_range(const char *s, uint64_t *off, uint64_t *len)
{
    char *dash = strchr(s, '-');
    if (!dash || dash == s)
        return -1;
    char a[32];
    size_t n = (size_t)(dash - s);
    if (n >= sizeof a)
        return -1;
    memcpy(a, s, n);
    a[n] = 0;
    uint64_t b;
    if (cli_parse_u64(a, off))
        return -1;
    if (!dash[1]) {
        *len = PULSE_TO_END;
        return 0;
    }
    if (cli_parse_u64(dash + 1, &b) || b < *off || b == UINT64_MAX)
        return -1;
    *len = b - *off + 1;
    return 0;
}

static int sub_help(const char *line)
{
    printf("usage: pulse store %s\n\n%s", line, usage_text);
    return cli_finish_stdout("store");
}

int cmd_store(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        if (argc < 2) {
            fputs(usage_text, stderr);
            return 2;
        }
        fputs(usage_text, stdout);
        return cli_finish_stdout("store");
    }
    const char *sub = argv[1];
    argc--;
    argv++;
    struct sub_args a;
    pulse_store *st = NULL;
    char *key = NULL;
    int rc = 0;

    if (!strcmp(sub, "ls")) {
        if (cli_wants_help(argc, argv))
            return sub_help("ls URL [-l]");
        if ((rc = parse("store ls", argc, argv, "l", 1, &a)) || (rc = open_url("store ls", a.url, &st, &key)))
            return rc;
        int err = pulse_store_list(st, key, NULL, print_key, &a.long_list);
        rc = err ? (err == -1 ? cli_finish_stdout("store ls") : cli_fail("store ls", err, a.url))
                 : cli_finish_stdout("store ls");
    } else if (!strcmp(sub, "put")) {
        if (cli_wants_help(argc, argv))
            return sub_help("put URL FILE [--if-absent]");
        if ((rc = parse("store put", argc, argv, "a", 2, &a)) || (rc = open_url("store put", a.url, &st, &key)))
            return rc;
        int err = pulse_store_put_file(st, key, a.file, a.if_absent ? PULSE_PUT_IF_ABSENT : 0);
        rc = err ? cli_fail("store put", err, a.url) : 0;
    } else if (!strcmp(sub, "get")) {
        if (cli_wants_help(argc, argv))
            return sub_help("get URL -o FILE [--range A-B]");
        if ((rc = parse("store get", argc, argv, "or", 1, &a)))
            return rc;
        if (!a.out)
            return cli_usage_error("store get", "missing -o FILE");
        uint64_t off = 0, len = PULSE_TO_END;
        if (a.range && parse_range(a.range, &off, &len))
            return cli_usage_error("store get", "bad --range '%s' (want A-B or A-)", a.range);
        if ((rc = open_url("store get", a.url, &st, &key)))
            return rc;
        if (!strcmp(a.out, "-")) {
            rc = get_to_stdout(st, key, off, len, a.url);
        } else {
            int err = pulse_store_get_file(st, key, off, len, a.out, NULL);
            rc = err ? cli_fail("store get", err, a.url) : 0;
        }
    } else if (!strcmp(sub, "head")) {
        if (cli_wants_help(argc, argv))
            return sub_help("head URL");
        if ((rc = parse("store head", argc, argv, "", 1, &a)) || (rc = open_url("store head", a.url, &st, &key)))
            return rc;
        pulse_object_info info;
        int err = pulse_store_head(st, key, &info);
        if (err) {
            rc = cli_fail("store head", err, a.url);
        } else {
            char when[32] = "";
            time_t t = (time_t)info.mtime;
            struct tm tm;
            if (gmtime_r(&t, &tm))
                strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
            printf("size: %" PRIu64 "\netag: %s\nmtime: %s\n", info.size, info.etag, when);
            rc = cli_finish_stdout("store head");
        }
    } else if (!strcmp(sub, "rm")) {
        if (cli_wants_help(argc, argv))
            return sub_help("rm URL");
        if ((rc = parse("store rm", argc, argv, "", 1, &a)) || (rc = open_url("store rm", a.url, &st, &key)))
            return rc;
        int err = pulse_store_delete(st, key);
        rc = err ? cli_fail("store rm", err, a.url) : 0;
    } else if (!strcmp(sub, "presign")) {
        if (cli_wants_help(argc, argv))
            return sub_help("presign URL [--expires S]");
        if ((rc = parse("store presign", argc, argv, "e", 1, &a)))
            return rc;
        uint64_t exp = 3600;
        if (a.expires && (cli_parse_u64(a.expires, &exp) || exp < 1 || exp > 604800))
            return cli_usage_error("store presign", "bad --expires '%s' (1..604800 seconds)",
                                   a.expires);
        if ((rc = open_url("store presign", a.url, &st, &key)))
            return rc;
        char *u = NULL;
        int err = pulse_store_presign(st, key, (unsigned long)exp, &u);
        if (err) {
            rc = cli_fail("store presign", err, a.url);
        } else {
            printf("%s\n", u);
            rc = cli_finish_stdout("store presign");
        }
        pulse_store_free(u);
    } else {
        return cli_usage_error("store", "unknown subverb '%s' (ls, put, get, head, rm, presign)", sub);
    }
    /* A success that needed retries says so: a flaky link or a busy server is worth knowing
     * about. A failure already said everything in its one line. */
    if (rc == 0 && st && pulse_store_retries(st) > 0)
        fprintf(stderr, "pulse store: %" PRIu64 " retr%s after transient errors\n", pulse_store_retries(st),
                pulse_store_retries(st) == 1 ? "y" : "ies");
    pulse_store_free(key);
    pulse_store_close(&st);
    return rc;
}
