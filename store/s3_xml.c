/* SPDX-License-Identifier: Apache-2.0 */
/* Reading S3's XML answers with expat, hardened (no DTD, no entities, bounded depth and size): an element's text, and one ListObjectsV2 page. */
#include "store/s3_xml.h"

#include <expat.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fail.h"
#include "store/buf.h"

#define XML_DEPTH 8                 /* ListBucketResult > Contents > Owner > ID is 4; deeper is not S3 */
#define XML_MAX_BYTES (64u << 20)   /* 1000 keys of 1 KiB, each escaped 6 times over, fit many times */

/* ---- one hardened parser ---- */

/* Why a handler stopped the parser (then XML_Parse fails with XML_ERROR_ABORTED). */
struct stop {
    XML_Parser p;
    const char *why;   /* the first reason, in words */
    long doctype_at;   /* where expat saw a DOCTYPE (just after its name) */
};

static void stop_with(struct stop *s, const char *why)
{
    if (!s->why)
        s->why = why;
    XML_StopParser(s->p, XML_FALSE);
}

/* A DOCTYPE is where entity declarations (billion laughs, external entities) live; S3 never
 * sends one, so the parser stops at its first bytes and no declaration is ever read. */
static void XMLCALL on_doctype(void *u, const XML_Char *name, const XML_Char *sys, const XML_Char *pub, int subset)
{
    struct stop *s = *(struct stop **)u;
    (void)name, (void)sys, (void)pub, (void)subset;
    s->doctype_at = XML_GetCurrentByteIndex(s->p);
    stop_with(s, "a document type declaration");
}

static void XMLCALL on_entity(void *u, const XML_Char *name, int pe, const XML_Char *v, int vlen,
                              const XML_Char *base, const XML_Char *sys, const XML_Char *pub, const XML_Char *nota)
{
    (void)name, (void)pe, (void)v, (void)vlen, (void)base, (void)sys, (void)pub, (void)nota;
    stop_with(*(struct stop **)u, "a document type declaration");
}

static int XMLCALL no_external(XML_Parser p, const XML_Char *ctx, const XML_Char *base, const XML_Char *sys,
                               const XML_Char *pub)
{
    (void)p, (void)ctx, (void)base, (void)sys, (void)pub;
    return XML_STATUS_ERROR;   /* never fetched, never read */
}

/* A parser for UTF-8 S3 answers; user data is a struct whose first member is a struct stop *. */
static XML_Parser parser_new(void *user)
{
    XML_Parser p = XML_ParserCreate("UTF-8");
    if (!p)
        return NULL;
    XML_SetUserData(p, user);
    XML_SetStartDoctypeDeclHandler(p, on_doctype);
    XML_SetEntityDeclHandler(p, on_entity);
    XML_SetExternalEntityRefHandler(p, no_external);
#ifdef XML_DTD
    XML_SetParamEntityParsing(p, XML_PARAM_ENTITY_PARSING_NEVER);
#if XML_MAJOR_VERSION > 2 || (XML_MAJOR_VERSION == 2 && XML_MINOR_VERSION >= 4)
    /* Unreachable with the DOCTYPE refused; kept so that a handler change cannot open it. */
    XML_SetBillionLaughsAttackProtectionMaximumAmplification(p, 4.0f);
    XML_SetBillionLaughsAttackProtectionActivationThreshold(p, 1u << 20);
#endif
#endif
    return p;
}

/* ---- the text of one element ---- */

struct find {
    struct stop *stop;
    struct stop st;
    const char *tag;
    long from;        /* only an element starting at or after this byte */
    int depth, at;    /* current depth; depth of the element found (0 = none yet) */
    struct buf text;
    long end;         /* the byte after its end tag */
    int done;
};

static void XMLCALL find_start(void *u, const XML_Char *name, const XML_Char **attr)
{
    struct find *f = u;
    (void)attr;
    if (++f->depth > 64) {
        stop_with(f->stop, "too deep");
        return;
    }
    if (!f->at && !strcmp(name, f->tag) && XML_GetCurrentByteIndex(f->stop->p) >= f->from)
        f->at = f->depth;
}

static void XMLCALL find_end(void *u, const XML_Char *name)
{
    struct find *f = u;
    (void)name;
    if (f->at && f->depth == f->at) {
        f->end = XML_GetCurrentByteIndex(f->stop->p) + XML_GetCurrentByteCount(f->stop->p);
        f->done = 1;
        XML_StopParser(f->stop->p, XML_FALSE);   /* what follows may be cut: it is not read */
    }
    f->depth--;
}

static void XMLCALL find_text(void *u, const XML_Char *s, int n)
{
    struct find *f = u;
    if (f->at)
        buf_add(&f->text, s, (size_t)n);
}

char *xml_tag(const char *xml, const char *tag, const char **pos)
{
    if (!xml)
        return NULL;
    size_t len = strlen(xml);
    if (len > XML_MAX_BYTES)
        return NULL;
    struct find f = { .tag = tag, .from = pos && *pos ? (long)(*pos - xml) : 0 };
    f.stop = &f.st;
    XML_Parser p = parser_new(&f);
    if (!p)
        return NULL;
    f.st.p = p;
    XML_SetElementHandler(p, find_start, find_end);
    XML_SetCharacterDataHandler(p, find_text);
    XML_Parse(p, xml, (int)len, 1);
    XML_ParserFree(p);
    if (!f.done || f.text.oom) {
        buf_free(&f.text);
        return NULL;
    }
    if (pos)
        *pos = xml + f.end;
    char *t = buf_take(&f.text);
    return t ? t : strdup("");
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

/* The elements the reader takes text from; everything else is only checked for form. */
enum role { R_OTHER, R_ROOT, R_TRUNC, R_TOKEN, R_CONTENTS, R_KEY, R_SIZE, R_ETAG, R_LM };

struct frame {
    enum role role;
    int children, text;   /* holds elements; holds text other than blanks */
};

struct item {
    char *key;
    pulse_object_info info;
};

struct page {
    struct stop *stop;
    struct stop st;
    const char *what;
    char root[48];                /* the root element's name, once seen */
    int root_seen;
    struct frame f[XML_DEPTH + 1];
    int depth;
    struct buf text;              /* the text of the leaf being read */
    char *trunc, *token;
    char *leaf[4];                /* Key, Size, ETag, LastModified of the entry being read */
    struct item *items;
    size_t n, cap;
    int err;                      /* the first refusal of content, reported once the form is whole */
    char msg[640];
};

/* Keeps the first refusal of what the page says; the parse goes on so that a page whose form
 * is broken is refused for that, as it is a cut or garbled answer rather than a lie. */
__attribute__((format(printf, 3, 4))) static void refuse(struct page *pg, int err, const char *fmt, ...)
{
    if (pg->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pg->msg, sizeof pg->msg, fmt, ap);
    va_end(ap);
    pg->err = err;
}

static int blank(const char *s, int n)
{
    for (int i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

static void XMLCALL page_start(void *u, const XML_Char *name, const XML_Char **attr)
{
    struct page *pg = u;
    (void)attr;
    if (!pg->root_seen) {
        pg->root_seen = 1;
        snprintf(pg->root, sizeof pg->root, "%s", name);
        if (strcmp(name, "ListBucketResult")) {
            stop_with(pg->stop, "not a listing");
            return;
        }
    }
    if (pg->depth + 1 > XML_DEPTH) {
        stop_with(pg->stop, "elements nested deeper than a ListBucketResult has");
        return;
    }
    struct frame *up = pg->depth ? &pg->f[pg->depth] : NULL;
    enum role r = R_OTHER;
    if (!up) {
        r = R_ROOT;
    } else {
        up->children = 1;
        if (up->role == R_ROOT)
            r = !strcmp(name, "IsTruncated") ? R_TRUNC : !strcmp(name, "NextContinuationToken") ? R_TOKEN
              : !strcmp(name, "Contents") ? R_CONTENTS : R_OTHER;
        else if (up->role == R_CONTENTS)
            r = !strcmp(name, "Key") ? R_KEY : !strcmp(name, "Size") ? R_SIZE : !strcmp(name, "ETag") ? R_ETAG
              : !strcmp(name, "LastModified") ? R_LM : R_OTHER;
        else if (up->role != R_OTHER)   /* inside a leaf whose text is read */
            refuse(pg, PULSE_ERR_FORMAT, "list %s: %s has markup inside <%s>", pg->what,
                   up->role >= R_KEY ? "an entry of the answer" : "the answer",
                   up->role == R_TRUNC ? "IsTruncated" : up->role == R_TOKEN ? "NextContinuationToken"
                   : up->role == R_KEY ? "Key" : up->role == R_SIZE ? "Size" : up->role == R_ETAG ? "ETag"
                   : "LastModified");
    }
    pg->depth++;
    pg->f[pg->depth] = (struct frame){ r, 0, 0 };
    if (r == R_CONTENTS)
        for (int i = 0; i < 4; i++) {
            free(pg->leaf[i]);
            pg->leaf[i] = NULL;
        }
    pg->text.len = 0;
    if (pg->text.data)
        pg->text.data[0] = 0;
}

static void XMLCALL page_text(void *u, const XML_Char *s, int n)
{
    struct page *pg = u;
    struct frame *fr = &pg->f[pg->depth];
    if (!fr->text && !blank(s, n))
        fr->text = 1;
    if (fr->role >= R_TRUNC && fr->role != R_CONTENTS)
        buf_add(&pg->text, s, (size_t)n);
}

/* The end of one <Contents>: its key and what it says of its object. */
static void entry_end(struct page *pg)
{
    char *k = pg->leaf[0], *sz = pg->leaf[1], *et = pg->leaf[2], *lm = pg->leaf[3];
    if (!k) {
        refuse(pg, PULSE_ERR_SERVER, "list %s: an entry of the answer has no Key", pg->what);
        return;
    }
    if (sz && (!*sz || strspn(sz, "0123456789") != strlen(sz) || strlen(sz) > 19)) {
        refuse(pg, PULSE_ERR_FORMAT, "list %s: key %.200s has size '%.40s', not a number", pg->what, k, sz);
        return;
    }
    if (pg->err)
        return;   /* nothing after a refusal is kept */
    if (pg->n == pg->cap) {
        size_t cap = pg->cap ? pg->cap * 2 : 64;
        struct item *it = realloc(pg->items, cap * sizeof *it);
        if (!it) {
            refuse(pg, PULSE_ERR_NOMEM, "list %s: out of memory", pg->what);
            return;
        }
        pg->items = it;
        pg->cap = cap;
    }
    struct item *it = &pg->items[pg->n++];
    memset(it, 0, sizeof *it);
    it->info.size = sz ? strtoull(sz, NULL, 10) : 0;
    it->info.mtime = parse_iso8601(lm);
    if (et) {
        const char *q = et[0] == '"' ? et + 1 : et;
        snprintf(it->info.etag, sizeof it->info.etag, "%s", q);
        size_t el = strlen(it->info.etag);
        if (el && it->info.etag[el - 1] == '"')
            it->info.etag[el - 1] = 0;
    }
    it->key = k;
    pg->leaf[0] = NULL;
}

static void XMLCALL page_end(void *u, const XML_Char *name)
{
    struct page *pg = u;
    (void)name;
    struct frame *fr = &pg->f[pg->depth];
    pg->depth--;
    if (fr->text && fr->children) {
        stop_with(pg->stop, "text mixed with elements");
        return;
    }
    if (fr->role == R_CONTENTS) {
        entry_end(pg);
        return;
    }
    if (fr->role < R_TRUNC || fr->children)
        return;   /* markup inside a leaf was refused when it started */
    char **slot = fr->role == R_TRUNC ? &pg->trunc : fr->role == R_TOKEN ? &pg->token
                : &pg->leaf[fr->role - R_KEY];
    const char *nm = fr->role == R_TRUNC ? "IsTruncated" : fr->role == R_TOKEN ? "NextContinuationToken"
                   : fr->role == R_KEY ? "Key" : fr->role == R_SIZE ? "Size" : fr->role == R_ETAG ? "ETag"
                   : "LastModified";
    if (*slot) {
        refuse(pg, PULSE_ERR_FORMAT, "list %s: %s has a second <%s>", pg->what,
               fr->role >= R_KEY ? "an entry of the answer" : "the answer", nm);
        return;
    }
    *slot = pg->text.data ? strdup(pg->text.data) : strdup("");
    if (!*slot || pg->text.oom)
        refuse(pg, PULSE_ERR_NOMEM, "list %s: out of memory", pg->what);
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

static int is_name(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
}

/* The root is not ListBucketResult: says what the answer is instead (an S3 error document
 * with its code, another element such as an HTML page, or no XML at all), from byte at on. */
static int not_a_listing(const char *xml, size_t len, const struct page *pg, size_t at, const char *extra)
{
    char seen[320], shown[120];
    const char *p = xml + (at < len ? at : len);
    size_t left = len - (size_t)(p - xml);
    show_bytes(p, left, shown, sizeof shown);
    if (!len) {
        snprintf(seen, sizeof seen, "an empty body");
    } else if (pg->root_seen || (left > 1 && *p == '<' && is_name(p[1]))) {
        size_t n = 1;
        while (!pg->root_seen && n < left && n < 40 && is_name(p[n]))
            n++;
        char *code = memchr(xml, 0, len) ? NULL : xml_tag(xml, "Code", NULL);
        snprintf(seen, sizeof seen, "a <%.*s> document%s%.60s%s", pg->root_seen ? 40 : (int)(n - 1),
                 pg->root_seen ? pg->root : p + 1, code ? " (Code " : "", code ? code : "", code ? ")" : "");
        free(code);
    } else if (left && *p == '<') {
        snprintf(seen, sizeof seen, "markup starting %s%s", shown, extra);
    } else {
        snprintf(seen, sizeof seen, "%zu bytes that are not XML, starting %s", len, shown);
    }
    return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer is not a ListBucketResult but %s", pg->what, seen);
}

/* The words for a page expat refused (or a handler stopped) once it is known to be a listing. */
static int malformed(const char *xml, size_t len, struct page *pg, XML_Parser p)
{
    enum XML_Error e = XML_GetErrorCode(p);
    long at = XML_GetCurrentByteIndex(p);
    const char *t = at >= 0 && (size_t)at < len ? xml + at : "";
    size_t left = at >= 0 && (size_t)at < len ? len - (size_t)at : 0;
    const char *what = pg->what;
    if (e == XML_ERROR_ABORTED && pg->stop->why)
        return pulse_fail(PULSE_ERR_FORMAT, "list %s: %s (at byte %ld)", what, pg->stop->why, at);
    if (e == XML_ERROR_NO_ELEMENTS || e == XML_ERROR_UNCLOSED_CDATA_SECTION || e == XML_ERROR_PARTIAL_CHAR)
        return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer is cut (%s) (%zu bytes read)", what,
                          e == XML_ERROR_NO_ELEMENTS ? "an element is never closed"
                          : e == XML_ERROR_PARTIAL_CHAR ? "inside a character" : "inside a CDATA section", len);
    if (e == XML_ERROR_UNCLOSED_TOKEN)
        return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer is cut inside %s (%zu bytes read)", what,
                          left >= 4 && !memcmp(t, "<!--", 4) ? "a comment"
                          : left >= 5 && !memcmp(t, "<?xml", 5) ? "its XML declaration"
                          : left >= 2 && t[1] == '?' ? "a processing instruction" : "a tag", len);
    if (e == XML_ERROR_JUNK_AFTER_DOC_ELEMENT)
        return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer goes on after </ListBucketResult>", what);
    return pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer is not well-formed XML: %s at line %lu, column %lu",
                      what, XML_ErrorString(e), (unsigned long)XML_GetCurrentLineNumber(p),
                      (unsigned long)XML_GetCurrentColumnNumber(p) + 1);
}

/* Parses the page whole and keeps its entries; the form first, then what it says. */
static int read_page(const char *xml, size_t len, struct page *pg)
{
    if (!len)
        return not_a_listing(xml, len, pg, 0, "");
    if (len > XML_MAX_BYTES)
        return pulse_fail(PULSE_ERR_LIMIT, "list %s: the answer is %zu bytes, more than a page can be (%u MiB)",
                          pg->what, len, XML_MAX_BYTES >> 20);
    XML_Parser p = parser_new(pg);
    if (!p)
        return pulse_fail(PULSE_ERR_NOMEM, "list %s: out of memory", pg->what);
    pg->st.p = p;
    pg->stop = &pg->st;
    XML_SetElementHandler(p, page_start, page_end);
    XML_SetCharacterDataHandler(p, page_text);
    int ok = XML_Parse(p, xml, (int)len, 1) == XML_STATUS_OK;
    int rc = 0;
    if (pg->root_seen && strcmp(pg->root, "ListBucketResult")) {
        rc = not_a_listing(xml, len, pg, 0, "");
    } else if (!ok && pg->stop->why && !strcmp(pg->stop->why, "a document type declaration")) {
        /* expat reports the DOCTYPE after its name: shown from its "<!" */
        long at = pg->st.doctype_at;
        size_t end = at > 0 && (size_t)at + 9 < len ? (size_t)at + 9 : len;
        const char *d = memmem(xml, end, "<!DOCTYPE", 9);
        rc = not_a_listing(xml, len, pg, d ? (size_t)(d - xml) : 0,
                           " (a document type declaration: S3 sends none, and no DTD or entity is read)");
    } else if (pg->root_seen && memchr(xml, 0, len)) {
        rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer holds a NUL byte", pg->what);
    } else if (!ok) {
        /* Refused before the root element was read: its start tag is broken or cut, or there
         * is none (random bytes, a bare declaration). */
        size_t s = len >= 3 && !memcmp(xml, "\xEF\xBB\xBF", 3) ? 3 : 0;
        while (s < len && (xml[s] == ' ' || xml[s] == '\t' || xml[s] == '\r' || xml[s] == '\n'))
            s++;
        size_t rl = strlen("<ListBucketResult");
        int ours = len - s >= rl && !memcmp(xml + s, "<ListBucketResult", rl) && (len - s == rl || !is_name(xml[s + rl]));
        long at = XML_GetCurrentByteIndex(p);
        if (pg->root_seen || ours)
            rc = malformed(xml, len, pg, p);
        else
            rc = not_a_listing(xml, len, pg, at > 0 ? (size_t)at : s, "");
    } else if (pg->err) {
        rc = pulse_fail(pg->err, "%s", pg->msg);
    }
    XML_ParserFree(p);
    return rc;
}

static void page_free(struct page *pg)
{
    for (size_t i = 0; i < pg->n; i++)
        free(pg->items[i].key);
    free(pg->items);
    for (int i = 0; i < 4; i++)
        free(pg->leaf[i]);
    free(pg->trunc);
    free(pg->token);
    buf_free(&pg->text);
}

/* Keys strictly increasing from ls->last, under the prefix, within the bound. */
static int check_keys(const struct page *pg, const struct s3_list_state *ls)
{
    const char *prev = ls->last, *what = ls->what;
    size_t plen = strlen(ls->prefix);
    for (size_t i = 0; i < pg->n; i++) {
        const char *k = pg->items[i].key;
        /* Strictly increasing across the whole listing: a page that repeats keys or goes
         * back is a server that loops (or that hides or invents objects). */
        if (prev && strcmp(k, prev) <= 0)
            return pulse_fail(PULSE_ERR_SERVER, "list %s: key '%.200s' comes after '%.200s' (keys must "
                              "increase; the server repeats or reorders its listing)", what, k, prev);
        if (strncmp(k, ls->prefix, plen))
            return pulse_fail(PULSE_ERR_SERVER, "list %s: key '%.200s' is outside the prefix '%.200s' asked for",
                              what, k, ls->prefix);
        if (i + 1 + ls->keys > ls->max_keys)
            return pulse_fail(PULSE_ERR_LIMIT, "list %s: more than %llu keys (PULSE_S3_LIST_MAX_KEYS)",
                              what, (unsigned long long)ls->max_keys);
        prev = k;
    }
    return 0;
}

int s3_list_page(const char *xml, size_t len, struct s3_list_state *ls, pulse_store_list_fn fn, void *ctx,
                 char **token)
{
    *token = NULL;
    struct page pg;
    memset(&pg, 0, sizeof pg);
    pg.what = ls->what;
    /* First the whole page is read and checked, so that a page refused hands nothing to fn. */
    int rc = read_page(xml, len, &pg);
    if (!rc)
        rc = check_keys(&pg, ls);
    if (!rc && !pg.trunc)
        rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: the answer has no IsTruncated", ls->what);
    else if (!rc && strcmp(pg.trunc, "true") && strcmp(pg.trunc, "false"))
        rc = pulse_fail(PULSE_ERR_FORMAT, "list %s: IsTruncated is '%.40s', not true or false", ls->what, pg.trunc);
    else if (!rc && !strcmp(pg.trunc, "true") && (!pg.token || !*pg.token))
        rc = pulse_fail(PULSE_ERR_SERVER, "list %s: truncated answer without a continuation token", ls->what);
    int more = !rc && !strcmp(pg.trunc, "true");
    for (size_t i = 0; !rc && i < pg.n; i++)
        rc = fn(ctx, pg.items[i].key + ls->strip, &pg.items[i].info);
    if (!rc && pg.n) {
        free(ls->last);
        ls->last = pg.items[pg.n - 1].key;
        pg.items[pg.n - 1].key = NULL;
    }
    if (!rc)
        ls->keys += pg.n;
    if (!rc && more) {
        *token = pg.token;
        pg.token = NULL;
    }
    page_free(&pg);
    return rc;
}

/* ---- a strict reader of one ListMultipartUploads answer ---- */

/* Its elements by depth: 1 the root, 2 IsTruncated, the markers and each Upload, 3 an Upload's
 * Key, UploadId and Initiated; the text of anything else is not read. */
struct uploads {
    struct stop *stop;
    struct stop st;
    const char *what;
    int depth, root_seen, bad_root, in_upload;
    char root[48];
    const char *leaf;             /* the element whose text is being read, or NULL */
    struct buf text;
    char *trunc, *next_key, *next_id;
    char *key, *id, *init;        /* of the Upload being read */
    struct s3_upload *v;
    size_t n, cap;
    int err;
    char msg[320];
};

static void uploads_refuse(struct uploads *u, int err, const char *why)
{
    if (!u->err) {
        u->err = err;
        snprintf(u->msg, sizeof u->msg, "list uploads %s: %s", u->what, why);
    }
}

static void XMLCALL uploads_start(void *p, const XML_Char *name, const XML_Char **attr)
{
    struct uploads *u = p;
    (void)attr;
    if (!u->root_seen) {
        u->root_seen = 1;
        snprintf(u->root, sizeof u->root, "%s", name);
        if (strcmp(name, "ListMultipartUploadsResult")) {
            u->bad_root = 1;
            stop_with(u->stop, "not a list of uploads");
            return;
        }
    }
    if (++u->depth > XML_DEPTH) {
        stop_with(u->stop, "elements nested deeper than a ListMultipartUploadsResult has");
        return;
    }
    u->leaf = NULL;
    if (u->depth == 2 && !strcmp(name, "Upload")) {
        u->in_upload = 1;
        free(u->key), free(u->id), free(u->init);
        u->key = u->id = u->init = NULL;
    } else if (u->depth == 2 && (!strcmp(name, "IsTruncated") || !strcmp(name, "NextKeyMarker") ||
                                 !strcmp(name, "NextUploadIdMarker"))) {
        u->leaf = name[0] == 'I' ? "IsTruncated" : name[4] == 'K' ? "NextKeyMarker" : "NextUploadIdMarker";
    } else if (u->depth == 3 && u->in_upload &&
               (!strcmp(name, "Key") || !strcmp(name, "UploadId") || !strcmp(name, "Initiated"))) {
        u->leaf = name[0] == 'K' ? "Key" : name[0] == 'U' ? "UploadId" : "Initiated";
    }
    u->text.len = 0;
    if (u->text.data)
        u->text.data[0] = 0;
}

static void XMLCALL uploads_text(void *p, const XML_Char *s, int n)
{
    struct uploads *u = p;
    if (u->leaf)
        buf_add(&u->text, s, (size_t)n);
}

static void XMLCALL uploads_end(void *p, const XML_Char *name)
{
    struct uploads *u = p;
    (void)name;
    if (u->leaf) {
        char **slot = !strcmp(u->leaf, "IsTruncated") ? &u->trunc : !strcmp(u->leaf, "NextKeyMarker") ? &u->next_key
                    : !strcmp(u->leaf, "NextUploadIdMarker") ? &u->next_id : !strcmp(u->leaf, "Key") ? &u->key
                    : !strcmp(u->leaf, "UploadId") ? &u->id : &u->init;
        if (*slot)
            uploads_refuse(u, PULSE_ERR_FORMAT, "an element is given twice");
        else if (!(*slot = strdup(u->text.data ? u->text.data : "")) || u->text.oom)
            uploads_refuse(u, PULSE_ERR_NOMEM, "out of memory");
        u->leaf = NULL;
    } else if (u->depth == 2 && u->in_upload) {
        u->in_upload = 0;
        if (!u->key || !u->id || !*u->id) {
            uploads_refuse(u, PULSE_ERR_SERVER, "an upload without a Key or an UploadId");
        } else if (!u->err) {
            if (u->n == u->cap) {
                size_t cap = u->cap ? 2 * u->cap : 16;
                struct s3_upload *v = realloc(u->v, cap * sizeof *v);
                if (!v) {
                    uploads_refuse(u, PULSE_ERR_NOMEM, "out of memory");
                    goto out;
                }
                u->v = v;
                u->cap = cap;
            }
            u->v[u->n++] = (struct s3_upload){ u->key, u->id, parse_iso8601(u->init) };
            u->key = u->id = NULL;
        }
    }
out:
    u->depth--;
}

void s3_uploads_free(struct s3_upload *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].key);
        free(v[i].upload_id);
    }
    free(v);
}

int s3_uploads_page(const char *xml, size_t len, const char *what, struct s3_upload **v, size_t *n,
                    char **next_key, char **next_id)
{
    *v = NULL;
    *n = 0;
    *next_key = *next_id = NULL;
    if (len > XML_MAX_BYTES)
        return pulse_fail(PULSE_ERR_LIMIT, "list uploads %s: the answer is %zu bytes, more than a page can be", what, len);
    struct uploads u = { .what = what };
    u.stop = &u.st;
    XML_Parser p = parser_new(&u);
    if (!p)
        return pulse_fail(PULSE_ERR_NOMEM, "list uploads %s: out of memory", what);
    u.st.p = p;
    XML_SetElementHandler(p, uploads_start, uploads_end);
    XML_SetCharacterDataHandler(p, uploads_text);
    int ok = len && memchr(xml, 0, len) == NULL && XML_Parse(p, xml, (int)len, 1) == XML_STATUS_OK;
    int rc = 0;
    char shown[120];
    show_bytes(xml, len, shown, sizeof shown);
    if (u.bad_root) {
        char *code = xml_tag(xml, "Code", NULL);
        rc = pulse_fail(PULSE_ERR_FORMAT, "list uploads %s: the answer is a <%.40s> document%s%.60s%s, not a "
                        "ListMultipartUploadsResult", what, u.root, code ? " (Code " : "", code ? code : "", code ? ")" : "");
        free(code);
    } else if (!ok) {
        rc = pulse_fail(PULSE_ERR_FORMAT, "list uploads %s: not a whole XML answer (%s at byte %ld), starting %s", what,
                        u.st.why ? u.st.why : XML_ErrorString(XML_GetErrorCode(p)), (long)XML_GetCurrentByteIndex(p),
                        shown);
    } else if (u.err) {
        rc = pulse_fail(u.err, "%s", u.msg);
    } else if (!u.trunc || (strcmp(u.trunc, "true") && strcmp(u.trunc, "false"))) {
        rc = pulse_fail(PULSE_ERR_FORMAT, "list uploads %s: IsTruncated is %s", what, u.trunc ? "neither true nor false" : "missing");
    } else if (!strcmp(u.trunc, "true") && (!u.next_key || !u.next_id || (!*u.next_key && !*u.next_id))) {
        rc = pulse_fail(PULSE_ERR_SERVER, "list uploads %s: truncated answer without its next markers", what);
    }
    XML_ParserFree(p);
    if (!rc && !strcmp(u.trunc, "true")) {
        *next_key = u.next_key;
        *next_id = u.next_id;
        u.next_key = u.next_id = NULL;
    }
    if (!rc) {
        *v = u.v;
        *n = u.n;
        u.v = NULL;
        u.n = 0;
    }
    s3_uploads_free(u.v, u.n);
    free(u.trunc), free(u.next_key), free(u.next_id), free(u.key), free(u.id), free(u.init);
    buf_free(&u.text);
    return rc;
}
