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

/* ---- a strict reader of one ListObjectsV2 answer ---- */

#define XML_DEPTH 8 /* ListBucketResult > Contents > Owner > ID is 4; deeper is not S3 */

struct cur {
    const char *p, *end;
    const char *why;   /* what was wrong, when a step fails */
};

struct elem {
    const char *name;
    size_t nlen;
    const char *in, *in_end;   /* the inner markup */
    int children;              /* holds elements (not text) */
};

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int is_name(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
}

static int named(const struct elem *e, const char *name)
{
    return e->nlen == strlen(name) && !memcmp(e->name, name, e->nlen);
}

static int starts(const struct cur *c, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(c->end - c->p) >= n && !memcmp(c->p, s, n);
}

/* Skips blanks and comments; 0, or -1 on a comment that never ends. */
static int skip_misc(struct cur *c)
{
    for (;;) {
        while (c->p < c->end && is_ws(*c->p))
            c->p++;
        if (!starts(c, "<!--"))
            return 0;
        const char *e = memmem(c->p + 4, (size_t)(c->end - c->p - 4), "-->", 3);
        if (!e) {
            c->why = "the answer is cut inside a comment";
            return -1;
        }
        c->p = e + 3;
    }
}

/* Reads the element at c->p: its name and inner markup; inside, only text or only elements
 * (blanks between them), each closed by its own end tag. Anything cut, mismatched or mixed
 * is -1 with c->why set. */
static int element(struct cur *c, int depth, struct elem *e)
{
    if (depth > XML_DEPTH) {
        c->why = "elements nested deeper than a ListBucketResult has";
        return -1;
    }
    if (c->p >= c->end || *c->p != '<') {
        c->why = "text where an element should be";
        return -1;
    }
    e->name = ++c->p;
    while (c->p < c->end && is_name(*c->p))
        c->p++;
    e->nlen = (size_t)(c->p - e->name);
    e->children = 0;
    if (!e->nlen) {
        c->why = c->p < c->end ? "a malformed tag" : "the answer is cut inside a tag";
        return -1;
    }
    while (c->p < c->end && *c->p != '>') {   /* attributes (xmlns) */
        char q = *c->p;
        if (q == '"' || q == '\'') {
            const char *close = memchr(c->p + 1, q, (size_t)(c->end - c->p - 1));
            if (!close) {
                c->p = c->end;   /* cut inside an attribute's value */
                break;
            }
            c->p = close + 1;
            continue;
        }
        if (q == '<') {
            c->why = "a malformed tag";
            return -1;
        }
        if (q == '/' && c->end - c->p >= 2 && c->p[1] == '>') {   /* <Prefix/> */
            e->in = e->in_end = c->p;
            c->p += 2;
            return 0;
        }
        c->p++;
    }
    if (c->p >= c->end) {
        c->why = "the answer is cut inside a tag";
        return -1;
    }
    e->in = ++c->p;
    int text = 0;
    for (;;) {
        const char *lt = memchr(c->p, '<', (size_t)(c->end - c->p));
        if (!lt)
            break;
        for (const char *t = c->p; t < lt && !text; t++)
            text = !is_ws(*t);
        c->p = lt;
        if (starts(c, "<!--")) {
            if (skip_misc(c))
                return -1;
            continue;
        }
        if (starts(c, "</")) {
            const char *n = c->p + 2;
            if ((size_t)(c->end - n) < e->nlen + 1 || memcmp(n, e->name, e->nlen))
                break;
            const char *g = n + e->nlen;
            while (g < c->end && is_ws(*g))
                g++;
            if (g >= c->end || *g != '>')
                break;
            e->in_end = lt;
            c->p = g + 1;
            if (text && e->children) {
                c->why = "text mixed with elements";
                return -1;
            }
            return 0;
        }
        struct elem child;
        if (element(c, depth + 1, &child))
            return -1;
        e->children = 1;
    }
    c->why = "the answer is cut (an element is never closed)";
    return -1;
}

/* Up to 24 bytes of the body as readable text, for an error line. */
static void show_bytes(const char *p, size_t n, char *out, size_t outsz)
{
    struct buf b = { 0 };
    for (size_t i = 0; i < n && i < 24; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
            buf_addc(&b, (char)ch);
        else
            buf_printf(&b, "\\x%02x", ch);
    }
    snprintf(out, outsz, "\"%s%s\"", b.data ? b.data : "", n > 24 ? "..." : "");
    buf_free(&b);
}

/* The root is not ListBucketResult: says what it is instead (an S3 error document with its
 * code, another element such as an HTML page, or no XML at all). */
static int not_a_listing(const char *xml, size_t len, const struct cur *c, const char *what)
{
    char seen[320], shown[120];
    size_t left = (size_t)(c->end - c->p);
    show_bytes(c->p, left, shown, sizeof shown);
    if (!len) {
        snprintf(seen, sizeof seen, "an empty body");
    } else if (left > 1 && *c->p == '<' && is_name(c->p[1])) {
        size_t n = 1;
        while (n < left && n < 40 && is_name(c->p[n]))
            n++;
        char *code = memchr(xml, 0, len) ? NULL : xml_tag(xml, "Code", NULL);
        snprintf(seen, sizeof seen, "a <%.*s> document%s%.60s%s", (int)(n - 1), c->p + 1,
                 code ? " (Code " : "", code ? code : "", code ? ")" : "");
        free(code);
    } else if (left && *c->p == '<') {
        snprintf(seen, sizeof seen, "markup starting %s", shown);
    } else {
        snprintf(seen, sizeof seen, "%zu bytes that are not XML, starting %s", len, shown);
    }
    return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer is not a ListBucketResult but %s", what, seen);
}

/* The text of a leaf element (NULL when out of memory). */
static char *leaf_text(const struct elem *e)
{
    return text(e->in, e->in_end);
}

/* One <Contents>: its key (decoded, malloc'd) and, when info is not NULL, what it says of its
 * object. 0, PULSE_ERR_NOMEM, or PULSE_ERR_SERVER/FORMAT for an entry that would hide an
 * object (no key, two keys, a size that is not a number). */
static int entry(const struct elem *ce, const char *what, char **key, pulse_object_info *info)
{
    struct cur c = { ce->in, ce->in_end, NULL };
    char *k = NULL, *sz = NULL, *et = NULL, *lm = NULL;
    int rc = 0;
    while (!rc) {
        if (skip_misc(&c) || c.p >= c.end)
            break;
        struct elem e;
        if (element(&c, 3, &e)) {
            rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: an entry of the answer is malformed: %s", what, c.why);
            break;
        }
        char **slot = named(&e, "Key") ? &k : named(&e, "Size") ? &sz : named(&e, "ETag") ? &et
                    : named(&e, "LastModified") ? &lm : NULL;
        if (!slot)
            continue;
        if (*slot || e.children)
            rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: an entry of the answer has %s <%.*s>", what,
                            *slot ? "a second" : "markup inside", (int)e.nlen, e.name);
        else if (!(*slot = leaf_text(&e)))
            rc = pulse_fail(PULSE_ERR_NOMEM, "list %s: out of memory", what);
    }
    if (!rc && !k)
        rc = pulse_fail(PULSE_ERR_SERVER, "list %s: an entry of the answer has no Key", what);
    if (!rc && sz && (!*sz || strspn(sz, "0123456789") != strlen(sz) || strlen(sz) > 19))
        rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: key %.200s has size '%.40s', not a number", what, k, sz);
    if (!rc && info) {
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
    }
    free(sz);
    free(et);
    free(lm);
    if (rc)
        free(k);
    else
        *key = k;
    return rc;
}

/* Checks the page's structure, its keys' order and count, and finds IsTruncated and the
 * token; with fn, then hands each entry to it. */
static int walk(const char *xml, size_t len, struct s3_list_state *ls, pulse_store_list_fn fn, void *ctx,
                char **trunc, char **token, char **last, uint64_t *count)
{
    const char *what = ls->what;
    struct cur c = { xml, xml + len, NULL };
    if (len >= 3 && !memcmp(xml, "\xEF\xBB\xBF", 3))
        c.p += 3;
    while (c.p < c.end && is_ws(*c.p))
        c.p++;
    if (starts(&c, "<?xml")) {
        const char *e = memmem(c.p, (size_t)(c.end - c.p), "?>", 2);
        if (!e)
            return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer is cut inside its XML declaration", what);
        c.p = e + 2;
    }
    if (skip_misc(&c))
        return pulse_fail(PULSE_ERR_FORMAT, "list %s: %s", what, c.why);
    const char *root = "<ListBucketResult";
    size_t rl = strlen(root);
    if (!starts(&c, root) || (c.p + rl < c.end && is_name(c.p[rl])))
        return not_a_listing(xml, len, &c, what);
    if (memchr(xml, 0, len))
        return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer holds a NUL byte", what);
    /* The root's own tag, then its children one by one. */
    struct cur rc_ = c;
    struct elem whole;
    if (element(&rc_, 1, &whole))
        return pulse_fail(PULSE_ERR_FORMAT, "list %s: %s (%zu bytes read)", what, rc_.why, len);
    if (skip_misc(&rc_) || rc_.p != rc_.end)
        return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer goes on after </ListBucketResult>", what);
    struct cur in = { whole.in, whole.in_end, NULL };
    const char *prev = *last;
    size_t plen = strlen(ls->prefix);
    uint64_t n = 0;
    int rc = 0;
    while (!rc) {
        if (skip_misc(&in) || in.p >= in.end)
            break;
        struct elem e;
        if (element(&in, 2, &e)) /* cannot fail: the whole was read above */
            return pulse_fail(PULSE_ERR_FORMAT, "list %s: %s", what, in.why);
        char **slot = named(&e, "IsTruncated") ? trunc : named(&e, "NextContinuationToken") ? token : NULL;
        if (slot) {
            if (*slot || e.children)
                rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer has %s <%.*s>", what,
                                *slot ? "a second" : "markup inside", (int)e.nlen, e.name);
            else if (!(*slot = leaf_text(&e)))
                rc = pulse_fail(PULSE_ERR_NOMEM, "list %s: out of memory", what);
            continue;
        }
        if (!named(&e, "Contents"))
            continue;
        pulse_object_info info;
        char *k = NULL;
        if ((rc = entry(&e, what, &k, fn ? &info : NULL)))
            break;
        if (!fn) {
            /* Strictly increasing across the whole listing: a page that repeats keys or goes
             * back is a server that loops (or that hides or invents objects). */
            if (prev && strcmp(k, prev) <= 0)
                rc = pulse_fail(PULSE_ERR_SERVER, "list %s: key '%.200s' comes after '%.200s' (keys must "
                                "increase; the server repeats or reorders its listing)", what, k, prev);
            else if (strncmp(k, ls->prefix, plen))
                rc = pulse_fail(PULSE_ERR_SERVER, "list %s: key '%.200s' is outside the prefix '%.200s' asked for",
                                what, k, ls->prefix);
            else if (++n + ls->keys > ls->max_keys)
                rc = pulse_fail(PULSE_ERR_LIMIT, "list %s: more than %llu keys (PULSE_S3_LIST_MAX_KEYS)",
                                what, (unsigned long long)ls->max_keys);
            if (!rc) {
                if (*last != ls->last)
                    free(*last);
                *last = k;
                prev = k;
                continue;
            }
        } else {
            rc = fn(ctx, k + ls->strip, &info);
        }
        free(k);
    }
    *count = n;
    return rc;
}

int s3_list_page(const char *xml, size_t len, struct s3_list_state *ls, pulse_store_list_fn fn, void *ctx,
                 char **token)
{
    *token = NULL;
    char *trunc = NULL, *tok = NULL, *last = ls->last;
    /* First the whole page is checked, so that a page refused hands nothing to fn. */
    uint64_t n = 0, n2;
    int rc = walk(xml, len, ls, NULL, NULL, &trunc, &tok, &last, &n);
    if (!rc && !trunc)
        rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer has no IsTruncated", ls->what);
    else if (!rc && strcmp(trunc, "true") && strcmp(trunc, "false"))
        rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: IsTruncated is '%.40s', not true or false", ls->what, trunc);
    else if (!rc && !strcmp(trunc, "true") && (!tok || !*tok))
        rc = pulse_fail(PULSE_ERR_SERVER, "list %s: truncated answer without a continuation token", ls->what);
    int more = !rc && !strcmp(trunc, "true");
    free(trunc);
    trunc = NULL;
    if (!rc) {
        char *t2 = NULL, *l2 = NULL;
        rc = walk(xml, len, ls, fn, ctx, &trunc, &t2, &l2, &n2);
        free(trunc);
        free(t2);
    }
    if (last != ls->last) {
        if (!rc) {
            free(ls->last);
            ls->last = last;
        } else {
            free(last);
        }
    }
    if (!rc)
        ls->keys += n;
    if (!rc && more)
        *token = tok;
    else
        free(tok);
    return rc;
}
