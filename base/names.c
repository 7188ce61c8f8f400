/* SPDX-License-Identifier: Apache-2.0 */
/* Run names and store keys: what is allowed, and a one-line refusal that names the bad input safely. */
#include <stdio.h>
#include <string.h>

#include "base/fail.h"
#include "base/names.h"

/* Renders s (n bytes) for an error line: printable ASCII as is, '"', '\\' and every other byte as
 * \xHH, cut after 64 bytes. A name that is being refused must not be able to rewrite the
 * terminal or the log it is reported to. */
static void escape(const char *s, size_t n, char out[300])
{
    static const char d[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n && i < 64; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = d[c >> 4];
            out[o++] = d[c & 15];
        }
    }
    if (n > 64) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = 0;
}

int pulse_names_check_run(const char *what, const char *s, size_t n)
{
    if (n == 0)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: empty", what);
    if (n > PULSE_NAMES_MAX_RUN)
        return pulse_fail(PULSE_ERR_LIMIT, "%s: %zu bytes, limit %u", what, n, PULSE_NAMES_MAX_RUN);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return pulse_fail(PULSE_ERR_FORMAT, "%s: byte %zu (0x%02x) not allowed "
                              "(letters, digits, '.', '_', '-'; first a letter or digit)", what, i,
                              (unsigned char)c);
    }
    return 0;
}

int pulse_check_run(const char *run)
{
    if (!run)
        return pulse_fail(PULSE_ERR_FORMAT, "run: none given");
    size_t n = strlen(run);
    char esc[300], what[320];
    escape(run, n, esc);
    snprintf(what, sizeof what, "run \"%s\"", esc);
    return pulse_names_check_run(what, run, n);
}

/* The key rule, for a key (prefix 0) or a list prefix (prefix 1: "" allowed, and a last
 * segment that is empty, i.e. a trailing '/'). */
static int check(const char *kind, const char *key, int prefix)
{
    if (!key)
        return pulse_fail(PULSE_ERR_INVALID, "%s: none given", kind);
    size_t n = strlen(key);
    char esc[300];
    escape(key, n, esc);
    if (n == 0) {
        if (prefix)
            return 0;
        return pulse_fail(PULSE_ERR_INVALID, "%s \"\": empty", kind);
    }
    if (n > PULSE_NAMES_MAX_KEY)
        return pulse_fail(PULSE_ERR_INVALID, "%s \"%s\": %zu bytes, limit %u", kind, esc, n,
                          PULSE_NAMES_MAX_KEY);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c == 0x7f)
            return pulse_fail(PULSE_ERR_INVALID, "%s \"%s\": control byte 0x%02x at %zu", kind,
                              esc, c, i);
    }
    if (key[0] == '/')
        return pulse_fail(PULSE_ERR_INVALID, "%s \"%s\": starts with '/'", kind, esc);
    for (const char *p = key;;) {
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == 0 && !(prefix && !e))
            return pulse_fail(PULSE_ERR_INVALID, "%s \"%s\": empty segment", kind, esc);
        if ((l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.'))
            return pulse_fail(PULSE_ERR_INVALID, "%s \"%s\": '%.*s' segment", kind, esc, (int)l, p);
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

int pulse_check_key(const char *key)
{
    return check("key", key, 0);
}

int pulse_check_key_prefix(const char *prefix)
{
    return check("prefix", prefix, 1);
}
