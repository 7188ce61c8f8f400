/* SPDX-License-Identifier: Apache-2.0 */
/* A strict JSON parser (RFC 8259, minus what safetensors never needs) into a compact tree. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/checkpoint/json.h"

typedef struct parser {
    json_doc *d;
    const unsigned char *s;
    size_t len, pos;
    const char *what;
} parser;

static int bad(parser *p, const char *why)
{
    return pulse_fail(PULSE_ERR_FORMAT, "%s: bad JSON at byte %zu: %s", p->what, p->pos, why);
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int new_node(parser *p, uint8_t type, uint32_t *out)
{
    json_doc *d = p->d;
    if (d->count >= JSON_MAX_NODES)
        return pulse_fail(PULSE_ERR_LIMIT, "%s: more than %u JSON values", p->what, JSON_MAX_NODES);
    if (d->count == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        json_node *n = realloc(d->nodes, cap * sizeof *n);
        if (!n)
            return pulse_fail(PULSE_ERR_NOMEM, "%s: JSON tree", p->what);
        d->nodes = n;
        d->cap = cap;
    }
    json_node *n = &d->nodes[d->count];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->first = n->next = JSON_NONE;
    *out = (uint32_t)d->count++;
    return 0;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *p, unsigned *out)
{
    if (p->len - p->pos < 4)
        return bad(p, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + i]);
        if (h < 0)
            return bad(p, "bad \\u escape");
        v = v << 4 | (unsigned)h;
    }
    p->pos += 4;
    *out = v;
    return 0;
}

static void put_utf8(char *o, size_t *n, unsigned cp)
{
    if (cp < 0x80) {
        o[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*n)++] = (char)(0xc0 | cp >> 6);
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[(*n)++] = (char)(0xe0 | cp >> 12);
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[(*n)++] = (char)(0xf0 | cp >> 18);
        o[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when invalid
 * (overlong forms, surrogates and values past U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* Decodes the string starting at the opening quote into d->strs; *off receives its offset. */
static int parse_string(parser *p, uint32_t *off)
{
    json_doc *d = p->d;
    p->pos++; /* opening quote */
    char *o = d->strs;
    size_t n = d->strs_fill;
    *off = (uint32_t)n;
    for (;;) {
        if (p->pos >= p->len)
            return bad(p, "unterminated string");
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return bad(p, "control character in string");
        if (c != '\\') {
            size_t l = utf8_len(p->s + p->pos, p->len - p->pos);
            if (!l)
                return bad(p, "invalid UTF-8 in string");
            memcpy(o + n, p->s + p->pos, l);
            n += l;
            p->pos += l;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len)
            return bad(p, "unterminated escape");
        c = p->s[p->pos++];
        switch (c) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            int r = read_hex4(p, &cp);
            if (r)
                return r;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return bad(p, "lone low surrogate");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return bad(p, "lone high surrogate");
                p->pos += 2;
                if ((r = read_hex4(p, &lo)))
                    return r;
                if (lo < 0xdc00 || lo > 0xdfff)
                    return bad(p, "bad surrogate pair");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0)
                return bad(p, "\\u0000 in string");
            /* A \uXXXX escape is 6 input bytes and yields at most 3 output bytes (a pair:
             * 12 -> 4), so the decoded text never outgrows the input. */
            put_utf8(o, &n, cp);
            break;
        }
        default:
            return bad(p, "bad escape");
        }
    }
    o[n++] = '\0';
    d->strs_fill = n;
    return 0;
}

static int parse_number(parser *p, json_node *node)
{
    size_t start = p->pos;
    int neg = 0, is_int = 1;
    if (p->s[p->pos] == '-') {
        neg = 1;
        p->pos++;
    }
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
        return bad(p, "bad number");
    uint64_t v = 0;
    int overflow = 0;
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            return bad(p, "leading zero in number");
    } else {
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            unsigned dgt = (unsigned)(p->s[p->pos++] - '0');
            if (v > (UINT64_C(1) << 63) / 10 || v * 10 + dgt >= (UINT64_C(1) << 63))
                overflow = 1;
            else
                v = v * 10 + dgt;
        }
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        is_int = 0;
        p->pos++;
        size_t digits = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++;
        if (p->pos == digits)
            return bad(p, "bad fraction");
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        is_int = 0;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        size_t digits = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++;
        if (p->pos == digits)
            return bad(p, "bad exponent");
    }
    if (is_int && !neg && !overflow) {
        node->type = JSON_INT;
        node->val = v;
    } else {
        /* Negative, fractional or huge: valid JSON, but never a size or an offset. */
        node->type = JSON_NUMBER;
        node->val = start;
    }
    return 0;
}

static int cmp_key_ptrs(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int check_duplicates(parser *p, uint32_t obj)
{
    json_doc *d = p->d;
    size_t n = 0;
    for (uint32_t i = d->nodes[obj].first; i != JSON_NONE; i = d->nodes[i].next)
        n++;
    if (n < 2)
        return 0;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys)
        return pulse_fail(PULSE_ERR_NOMEM, "%s: key table", p->what);
    size_t k = 0;
    for (uint32_t i = d->nodes[obj].first; i != JSON_NONE; i = d->nodes[i].next)
        keys[k++] = d->strs + d->nodes[i].key;
    qsort(keys, n, sizeof *keys, cmp_key_ptrs);
    int r = 0;
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(keys[i - 1], keys[i])) {
            r = pulse_fail(PULSE_ERR_FORMAT, "%s: duplicate key \"%s\"", p->what, keys[i]);
            break;
        }
    }
    free(keys);
    return r;
}

static int parse_value(parser *p, int depth, uint32_t *out);

static int parse_container(parser *p, int depth, int is_object, uint32_t self)
{
    json_doc *d = p->d;
    char close = is_object ? '}' : ']';
    p->pos++; /* opening bracket */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    uint32_t last = JSON_NONE;
    for (;;) {
        uint32_t key = 0;
        int r;
        if (is_object) {
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return bad(p, "expected a key string");
            if ((r = parse_string(p, &key)))
                return r;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return bad(p, "expected ':'");
            p->pos++;
        }
        uint32_t child;
        if ((r = parse_value(p, depth + 1, &child)))
            return r;
        d->nodes[child].key = key;
        if (last == JSON_NONE)
            d->nodes[self].first = child;
        else
            d->nodes[last].next = child;
        last = child;
        skip_ws(p);
        if (p->pos >= p->len)
            return bad(p, "unterminated object or array");
        if (p->s[p->pos] == ',') {
            p->pos++;
            skip_ws(p);
            continue;
        }
        if (p->s[p->pos] == close) {
            p->pos++;
            break;
        }
        return bad(p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    return is_object ? check_duplicates(p, self) : 0;
}

static int literal(parser *p, const char *word, uint8_t type, uint32_t *out)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n))
        return bad(p, "unexpected character");
    p->pos += n;
    return new_node(p, type, out);
}

static int parse_value(parser *p, int depth, uint32_t *out)
{
    if (depth > JSON_MAX_DEPTH)
        return pulse_fail(PULSE_ERR_LIMIT, "%s: JSON nested deeper than %d", p->what, JSON_MAX_DEPTH);
    skip_ws(p);
    if (p->pos >= p->len)
        return bad(p, "unexpected end");
    unsigned char c = p->s[p->pos];
    int r;
    switch (c) {
    case '{':
    case '[':
        if ((r = new_node(p, c == '{' ? JSON_OBJECT : JSON_ARRAY, out)))
            return r;
        return parse_container(p, depth, c == '{', *out);
    case '"': {
        uint32_t off;
        if ((r = new_node(p, JSON_STRING, out)))
            return r;
        if ((r = parse_string(p, &off)))
            return r;
        p->d->nodes[*out].val = off;
        return 0;
    }
    case 't': return literal(p, "true", JSON_TRUE, out);
    case 'f': return literal(p, "false", JSON_FALSE, out);
    case 'n': return literal(p, "null", JSON_NULL, out);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            if ((r = new_node(p, JSON_INT, out)))
                return r;
            return parse_number(p, &p->d->nodes[*out]);
        }
        return bad(p, "unexpected character");
    }
}

int json_parse(json_doc *d, const char *text, size_t len, const char *what)
{
    memset(d, 0, sizeof *d);
    if (len >= UINT32_MAX)
        return pulse_fail(PULSE_ERR_LIMIT, "%s: JSON text of %zu bytes", what, len);
    d->strs = malloc(len + 1);   /* decoded strings never outgrow the text */
    if (!d->strs)
        return pulse_fail(PULSE_ERR_NOMEM, "%s: %zu bytes of JSON strings", what, len);
    parser p = { d, (const unsigned char *)text, len, 0, what };
    uint32_t root;
    int r = parse_value(&p, 0, &root);
    if (!r) {
        skip_ws(&p);
        if (p.pos != len)
            r = bad(&p, "trailing bytes after the JSON value");
    }
    if (r)
        json_free(d);
    return r;
}

void json_free(json_doc *d)
{
    free(d->nodes);
    free(d->strs);
    memset(d, 0, sizeof *d);
}

const json_node *json_get(const json_doc *d, const json_node *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    for (uint32_t i = obj->first; i != JSON_NONE; i = d->nodes[i].next)
        if (!strcmp(d->strs + d->nodes[i].key, key))
            return &d->nodes[i];
    return NULL;
}

int json_append_raw(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (!b)
            return pulse_fail(PULSE_ERR_NOMEM, "JSON text of %zu bytes", c);
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

int json_append_string(char **buf, size_t *len, size_t *cap, const char *s)
{
    int r = json_append_raw(buf, len, cap, "\"", 1);
    for (const char *run = s; !r; ) {
        const char *q = run;
        while (*q && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20)
            q++;
        if ((r = json_append_raw(buf, len, cap, run, (size_t)(q - run))))
            break;
        if (!*q)
            break;
        char esc[8];
        char e = 0;
        switch (*q) {
        case '"': e = '"'; break;
        case '\\': e = '\\'; break;
        case '\n': e = 'n'; break;
        case '\t': e = 't'; break;
        case '\r': e = 'r'; break;
        case '\b': e = 'b'; break;
        case '\f': e = 'f'; break;
        }
        if (e) {
            esc[0] = '\\';
            esc[1] = e;
            esc[2] = 0;
        } else {
            static const char hex[] = "0123456789abcdef";
            unsigned char c = (unsigned char)*q;
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            esc[6] = 0;
        }
        r = json_append_raw(buf, len, cap, esc, strlen(esc));
        run = q + 1;
    }
    if (!r)
        r = json_append_raw(buf, len, cap, "\"", 1);
    return r;
}
