/* SPDX-License-Identifier: Apache-2.0 */
/* A run's bucket keys (manifest/layout.h): each kind formatted and parsed in this one place. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "base/names.h"
#include "manifest/layout.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"

#define SYNC_HEAD_LINES 1100   /* a key line and a time line */

static int put(char *out, size_t cap, int n)
{
    if (n < 0 || (size_t)n >= cap) {
        if (cap)
            out[0] = '\0';
        return pulse_fail(PULSE_ERR_LIMIT, "bucket key longer than %zu bytes", cap);
    }
    return 0;
}

static void hex32(const uint8_t b[32], char out[65])
{
    pulse_hex_encode(b, 32, out);   /* lower case */
}

int pulse_layout_record(char *out, size_t cap, int kind, uint64_t step, const uint8_t node[32])
{
    const char *name = pulse_record_kind_name(kind);
    if (!name)
        return pulse_fail(PULSE_ERR_INVALID, "record kind %d has no key", kind);
    char hex[65];
    hex32(node, hex);
    if (kind == PULSE_RECORD_RECEIPT)
        return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_RECEIPTS "%s/%012" PRIu64, hex, step));
    return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_RECORDS "%s/%012" PRIu64 "/%s", name, step, hex));
}

int pulse_layout_records_prefix(char *out, size_t cap, int kind, uint64_t step)
{
    if (!kind)
        return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_RECORDS));
    const char *name = pulse_record_kind_name(kind);
    if (!name || kind == PULSE_RECORD_RECEIPT)
        return pulse_fail(PULSE_ERR_INVALID, "record kind %d has no records/ prefix", kind);
    if (step == UINT64_MAX)
        return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_RECORDS "%s/", name));
    return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_RECORDS "%s/%012" PRIu64 "/", name, step));
}

int pulse_layout_head(char *out, size_t cap, const uint8_t node[32])
{
    char hex[65];
    hex32(node, hex);
    return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_HEADS_SYNC "%s", hex));
}

int pulse_layout_head_content(uint8_t **out, size_t *len, const char *rel, uint64_t unix_ms, const uint8_t *record,
                              size_t record_len)
{
    char lines[SYNC_HEAD_LINES];
    int n = snprintf(lines, sizeof lines, "%s\n%" PRIu64 "\n", rel, unix_ms);
    if (n < 0 || (size_t)n >= sizeof lines || strchr(rel, '\n') || !*rel)
        return pulse_fail(PULSE_ERR_LIMIT, "head: record key %.80s does not fit one line", rel);
    if (record_len > PULSE_LAYOUT_HEAD_MAX - (size_t)n)
        return pulse_fail(PULSE_ERR_LIMIT, "head: a record of %zu bytes", record_len);
    uint8_t *b = malloc((size_t)n + record_len + 1);
    if (!b)
        return pulse_fail(PULSE_ERR_NOMEM, "head");
    memcpy(b, lines, (size_t)n);
    if (record_len)
        memcpy(b + n, record, record_len);
    *out = b;
    *len = (size_t)n + record_len;
    return 0;
}

int pulse_layout_parse_head_content(const void *data, size_t len, char *rel, size_t cap, uint64_t *unix_ms,
                                    const uint8_t **record, size_t *record_len)
{
    const uint8_t *b = data, *nl = memchr(b, '\n', len);
    size_t k = nl ? (size_t)(nl - b) : len;
    if (k > 0 && b[k - 1] == '\r')
        k--;
    if (k == 0 || k >= cap || memchr(b, '\0', k))
        return -1;
    memcpy(rel, b, k);
    rel[k] = '\0';
    *unix_ms = 0;
    *record = NULL;
    *record_len = 0;
    if (!nl)
        return 0;
    const uint8_t *p = nl + 1, *end = b + len, *nl2 = memchr(p, '\n', (size_t)(end - p));
    if (!nl2)
        return p == end ? 0 : -1;   /* "REL\n" alone, as heads were before they carried the record */
    uint64_t ms = 0;
    for (const uint8_t *q = p; q < nl2; q++) {
        if (*q < '0' || *q > '9' || nl2 - p > 19)
            return -1;
        ms = ms * 10 + (uint64_t)(*q - '0');
    }
    *unix_ms = ms;
    *record = nl2 + 1;
    *record_len = (size_t)(end - (nl2 + 1));
    return 0;
}

int pulse_layout_object(char *out, size_t cap, const uint8_t *digest)
{
    if (!digest)
        return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_OBJECTS));
    char hex[65];
    hex32(digest, hex);
    return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_OBJECTS "%s", hex));
}

int pulse_layout_part_run(char *out, size_t cap, const char *run, unsigned part, unsigned parts)
{
    if (parts < 1 || parts > PULSE_LAYOUT_MAX_PARTS || part >= parts)
        return pulse_fail(PULSE_ERR_INVALID, "part %u of %u: parts are 0 .. N-1, N at most %u", part, parts,
                          PULSE_LAYOUT_MAX_PARTS);
    int r = put(out, cap, snprintf(out, cap, "%s.part-%u-of-%u", run, part, parts));
    return r ? r : pulse_check_run(out);
}

/* S[0..N) as a decimal of 1..4 digits without leading zeros; -1 otherwise. */
static int part_number(const char *s, size_t n, unsigned *out)
{
    if (n < 1 || n > 4 || (n > 1 && s[0] == '0'))
        return -1;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *out = v;
    return 0;
}

int pulse_layout_parse_part_run(const char *run, size_t *parent_len, unsigned *part, unsigned *parts)
{
    const char *at = strstr(run, ".part-");
    while (at) {   /* the last ".part-" decides: a parent's name may contain one */
        const char *next = strstr(at + 1, ".part-");
        if (!next)
            break;
        at = next;
    }
    if (!at || at == run)
        return -1;
    const char *i = at + 6, *of = strstr(i, "-of-");
    if (!of)
        return -1;
    unsigned a, b;
    if (part_number(i, (size_t)(of - i), &a) || part_number(of + 4, strlen(of + 4), &b) || b < 1 ||
        b > PULSE_LAYOUT_MAX_PARTS || a >= b)
        return -1;
    *parent_len = (size_t)(at - run);
    *part = a;
    *parts = b;
    return 0;
}

int pulse_layout_shard_name_ok(const char *s)
{
    static const char ext[] = ".safetensors";
    size_t n = strlen(s);
    if (n < sizeof ext || n > 255 || s[0] == '.' || strcmp(s + n - (sizeof ext - 1), ext))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '.' || s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

int pulse_layout_object_key(char *out, size_t cap, const char *run, const uint8_t digest[32])
{
    char parent[PULSE_NAMES_MAX_RUN + 1], rel[80];
    size_t plen;
    unsigned a, b;
    if (strlen(run) <= PULSE_NAMES_MAX_RUN && pulse_layout_parse_part_run(run, &plen, &a, &b) == 0) {
        memcpy(parent, run, plen);
        parent[plen] = 0;
        run = parent;
    }
    int r = pulse_layout_object(rel, sizeof rel, digest);
    return r ? r : pulse_layout_join(out, cap, run, rel);
}

int pulse_layout_loco_rs(char *out, size_t cap, uint64_t round, unsigned attempt, const char *name)
{
    if (!name)
        return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_LOCO_RS "%012" PRIu64 "/", round));
    return put(out, cap, snprintf(out, cap, PULSE_LAYOUT_LOCO_RS "%012" PRIu64 "/%02u/%s", round, attempt, name));
}

int pulse_layout_join(char *out, size_t cap, const char *run, const char *rel)
{
    int r = pulse_check_run(run);   /* the run is one key segment: never "..", never "x/y" */
    if (r)
        return r;
    int n = snprintf(out, cap, "%s/%s", run, rel);
    if (n < 0 || (size_t)n >= cap)
        return pulse_fail(PULSE_ERR_LIMIT, "key too long: %s/%s", run, rel);
    return 0;
}

/* ---- parsers: exact widths, lower-case hex, nothing after the last field ---------------- */

static int from_hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int pulse_layout_parse_hex32(const char *s, size_t n, uint8_t out[32])
{
    if (n != 64)
        return -1;
    for (size_t i = 0; i < 32; i++) {
        int hi = from_hex(s[2 * i]), lo = from_hex(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* Exactly N decimal digits at S (no sign, no space). */
static int digits(const char *s, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return 0;
}

/* "<12 digits>" ending at the terminator END ('\0' or '/'): the step, P advanced past END. */
static int step_field(const char **p, char end, uint64_t *step)
{
    if (digits(*p, PULSE_LAYOUT_STEP_DIGITS, step) || (*p)[PULSE_LAYOUT_STEP_DIGITS] != end)
        return -1;
    *p += PULSE_LAYOUT_STEP_DIGITS + 1;
    return 0;
}

/* 64 lower-case hex digits and the end of the string. */
static int node_last(const char *p, uint8_t node[32])
{
    return strlen(p) == 64 ? pulse_layout_parse_hex32(p, 64, node) : -1;
}

int pulse_layout_parse_record(const char *rel, int *kind, uint64_t *step, uint8_t node[32])
{
    static const char rec[] = PULSE_LAYOUT_RECORDS, rct[] = PULSE_LAYOUT_RECEIPTS;
    if (!strncmp(rel, rec, sizeof rec - 1)) {
        const char *p = rel + sizeof rec - 1, *slash = strchr(p, '/');
        char name[32];
        size_t kl = slash ? (size_t)(slash - p) : 0;
        if (!kl || kl >= sizeof name)
            return -1;
        memcpy(name, p, kl);
        name[kl] = '\0';
        int k = pulse_record_kind_from_name(name);
        if (!k || k == PULSE_RECORD_RECEIPT)
            return -1;
        p = slash + 1;
        if (step_field(&p, '/', step) || node_last(p, node))
            return -1;
        *kind = k;
        return 0;
    }
    if (!strncmp(rel, rct, sizeof rct - 1)) {
        const char *p = rel + sizeof rct - 1;
        if (pulse_layout_parse_hex32(p, strnlen(p, 64), node) || p[64] != '/')
            return -1;
        p += 65;
        if (step_field(&p, '\0', step))
            return -1;
        *kind = PULSE_RECORD_RECEIPT;
        return 0;
    }
    return -1;
}

int pulse_layout_parse_head(const char *rel, uint8_t node[32])
{
    static const char pre[] = PULSE_LAYOUT_HEADS_SYNC;
    return strncmp(rel, pre, sizeof pre - 1) ? -1 : node_last(rel + sizeof pre - 1, node);
}

int pulse_layout_parse_object(const char *rel, uint8_t digest[32])
{
    static const char pre[] = PULSE_LAYOUT_OBJECTS;
    return strncmp(rel, pre, sizeof pre - 1) ? -1 : node_last(rel + sizeof pre - 1, digest);
}

int pulse_layout_parse_loco_rs_tail(const char *tail, unsigned *attempt, int *is_plan, uint8_t node[32])
{
    uint64_t a;
    if (strnlen(tail, 3) < 3 || digits(tail, 2, &a) || tail[2] != '/')
        return -1;
    *attempt = (unsigned)a;
    const char *name = tail + 3;
    *is_plan = !strcmp(name, "plan");
    return *is_plan ? 0 : node_last(name, node);
}

int pulse_layout_split_record(const char *rel, char kind_name[32], uint64_t *step, const char **name)
{
    static const char pre[] = PULSE_LAYOUT_RECORDS;
    if (strncmp(rel, pre, sizeof pre - 1))
        return -1;
    const char *k = rel + sizeof pre - 1, *s1 = strchr(k, '/');
    if (!s1 || s1 - k >= 32)
        return -1;
    const char *s2 = strchr(s1 + 1, '/');
    if (!s2 || strchr(s2 + 1, '/') || s2 - s1 - 1 < 1 || s2 - s1 - 1 > 19)
        return -1;
    if (digits(s1 + 1, (size_t)(s2 - s1 - 1), step))
        return -1;
    memcpy(kind_name, k, (size_t)(s1 - k));
    kind_name[s1 - k] = '\0';
    *name = s2 + 1;
    return 0;
}
