/* SPDX-License-Identifier: Apache-2.0 */
/* AWS Signature Version 4: canonical request, string to sign, key derivation, presigned URLs. */
#include "store/sigv4.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fail.h"
#include "crypto/sha256.h"

static const char hexdig[] = "0123456789abcdef";

static void to_hex(const unsigned char *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexdig[in[i] >> 4];
        out[2 * i + 1] = hexdig[in[i] & 15];
    }
    out[2 * n] = 0;
}

void sigv4_sha256_hex(const void *data, size_t n, char hex[65])
{
    unsigned char h[32];
    pulse_sha256(data, n, h); /* SHA-NI when the CPU has it: 4x libsodium's */
    to_hex(h, sizeof h, hex);
}

static void hmac(unsigned char out[32], const unsigned char *key, size_t klen,
                 const char *msg, size_t mlen)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, klen);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)msg, mlen);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof st);
}

void sigv4_amz_date(long long t, char out[17])
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

static int unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

void sigv4_uri_encode(struct buf *b, const char *s, size_t n, int keep_slash)
{
    static const char up[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c) || (keep_slash && c == '/')) {
            buf_addc(b, (char)c);
        } else {
            char e[3] = { '%', up[c >> 4], up[c & 15] };
            buf_add(b, e, 3);
        }
    }
}

/* RFC 3986 dot-segment removal plus collapsing of empty segments, the way the AWS test
 * suite's normalize-path cases expect; a trailing '/' survives. */
static void canonical_path_normalized(struct buf *out, const char *path)
{
    size_t n = strlen(path);
    const char **seg = calloc(n + 1, sizeof *seg);
    size_t *len = calloc(n + 1, sizeof *len);
    if (!seg || !len) {
        out->oom = 1;
        free(seg);
        free(len);
        return;
    }
    size_t k = 0;
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        const char *e = p;
        while (*e && *e != '/')
            e++;
        size_t l = (size_t)(e - p);
        if (l == 0 || (l == 1 && p[0] == '.')) {
            /* skip */
        } else if (l == 2 && p[0] == '.' && p[1] == '.') {
            if (k)
                k--;
        } else {
            seg[k] = p;
            len[k] = l;
            k++;
        }
        p = e;
    }
    int trailing = n > 0 && path[n - 1] == '/';
    buf_addc(out, '/');
    for (size_t i = 0; i < k; i++) {
        if (i)
            buf_addc(out, '/');
        sigv4_uri_encode(out, seg[i], len[i], 0);
    }
    if (trailing && k)
        buf_addc(out, '/');
    free(seg);
    free(len);
}

struct enc_kv {
    char *name;
    char *value;
};

static int cmp_enc_kv(const void *a, const void *b)
{
    const struct enc_kv *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static char *encode_dup(const char *s, size_t n)
{
    struct buf b = { 0 };
    sigv4_uri_encode(&b, s, n, 0);
    return buf_take(&b);
}

/* Sorted, encoded query: name=value pairs joined by '&' (a name with no value gets "="). */
static int canonical_query(struct buf *out, const struct sigv4_kv *q, size_t n)
{
    if (!n)
        return 0;
    struct enc_kv *v = calloc(n, sizeof *v);
    if (!v)
        return PULSE_ERR_NOMEM;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const char *val = q[i].value ? q[i].value : "";
        v[i].name = encode_dup(q[i].name, strlen(q[i].name));
        v[i].value = encode_dup(val, strlen(val));
        if (!v[i].name || !v[i].value)
            rc = PULSE_ERR_NOMEM;
    }
    if (!rc) {
        qsort(v, n, sizeof *v, cmp_enc_kv);
        for (size_t i = 0; i < n; i++) {
            if (i)
                buf_addc(out, '&');
            buf_adds(out, v[i].name);
            buf_addc(out, '=');
            buf_adds(out, v[i].value);
        }
    }
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].value);
    }
    free(v);
    return rc;
}

struct canon_hdr {
    char *name;   /* lower case */
    char *value;  /* trimmed, inner whitespace runs compressed */
    size_t order; /* position in the request, so duplicates keep their order */
};

static int cmp_hdr(const void *a, const void *b)
{
    const struct canon_hdr *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static char *trim_compress(const char *s)
{
    struct buf b = { 0 };
    while (is_ws(*s))
        s++;
    int pending = 0;
    for (; *s; s++) {
        if (is_ws(*s)) {
            pending = 1;
            continue;
        }
        if (pending)
            buf_addc(&b, ' ');
        pending = 0;
        buf_addc(&b, *s);
    }
    return buf_take(&b);
}

static char *lower_dup(const char *s)
{
    char *d = strdup(s);
    if (d)
        for (char *p = d; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
    return d;
}

/* Appends "name:value\n" lines and fills signed (the ';' list). */
static int canonical_headers(struct buf *out, struct buf *signed_list, const struct sigv4_kv *h,
                             size_t n, const char *token)
{
    size_t total = n + (token ? 1 : 0);
    if (!total)
        return pulse_fail(PULSE_ERR_INVALID, "sigv4: no headers to sign (host is required)");
    struct canon_hdr *v = calloc(total, sizeof *v);
    if (!v)
        return PULSE_ERR_NOMEM;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        v[i].name = lower_dup(h[i].name);
        v[i].value = trim_compress(h[i].value ? h[i].value : "");
        v[i].order = i;
        if (!v[i].name || !v[i].value)
            rc = PULSE_ERR_NOMEM;
    }
    if (token) {
        v[n].name = strdup("x-amz-security-token");
        v[n].value = trim_compress(token);
        v[n].order = n;
        if (!v[n].name || !v[n].value)
            rc = PULSE_ERR_NOMEM;
    }
    if (!rc) {
        qsort(v, total, sizeof *v, cmp_hdr);
        for (size_t i = 0; i < total; i++) {
            if (i && !strcmp(v[i].name, v[i - 1].name)) {
                buf_addc(out, ',');
                buf_adds(out, v[i].value);
                continue;
            }
            if (i) {
                buf_addc(out, '\n');
                buf_addc(signed_list, ';');
            }
            buf_adds(out, v[i].name);
            buf_addc(out, ':');
            buf_adds(out, v[i].value);
            buf_adds(signed_list, v[i].name);
        }
        buf_addc(out, '\n');
    }
    for (size_t i = 0; i < total; i++) {
        free(v[i].name);
        free(v[i].value);
    }
    free(v);
    return rc;
}

void sigv4_signature_free(struct sigv4_signature *s)
{
    if (!s)
        return;
    free(s->canonical_request);
    free(s->string_to_sign);
    free(s->signed_headers);
    free(s->authorization);
    memset(s, 0, sizeof *s);
}

int sigv4_sign(const struct sigv4_request *req, const struct sigv4_credentials *cred,
               const char *amz_date, struct sigv4_signature *out)
{
    memset(out, 0, sizeof *out);
    if (!req || !cred || !amz_date || strlen(amz_date) != 16 || !req->method || !req->path ||
        req->path[0] != '/' || !req->payload_hash || !cred->access_key || !cred->secret_key ||
        !cred->region || !cred->service)
        return pulse_fail(PULSE_ERR_INVALID, "sigv4: incomplete request or credentials");
    if (sodium_init() < 0)
        return pulse_fail(PULSE_ERR_INVALID, "sigv4: libsodium failed to initialise");

    struct buf creq = { 0 }, signed_list = { 0 }, sts = { 0 }, authz = { 0 };
    int rc;
    buf_adds(&creq, req->method);
    buf_addc(&creq, '\n');
    if (req->normalize_path)
        canonical_path_normalized(&creq, req->path);
    else
        sigv4_uri_encode(&creq, req->path, strlen(req->path), 1);
    buf_addc(&creq, '\n');
    rc = canonical_query(&creq, req->query, req->nquery);
    buf_addc(&creq, '\n');
    if (!rc)
        rc = canonical_headers(&creq, &signed_list, req->headers, req->nheaders,
                               cred->session_token);
    buf_addc(&creq, '\n');
    buf_add(&creq, signed_list.data ? signed_list.data : "", signed_list.len);
    buf_addc(&creq, '\n');
    buf_adds(&creq, req->payload_hash);
    if (rc || creq.oom || signed_list.oom) {
        buf_free(&creq);
        buf_free(&signed_list);
        return rc ? rc : pulse_fail(PULSE_ERR_NOMEM, "sigv4: out of memory");
    }

    char date[9];
    memcpy(date, amz_date, 8);
    date[8] = 0;
    char creq_hash[65];
    sigv4_sha256_hex(creq.data, creq.len, creq_hash);
    buf_printf(&sts, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", amz_date, date,
               cred->region, cred->service, creq_hash);

    /* kSecret -> kDate -> kRegion -> kService -> kSigning. */
    struct buf k0 = { 0 };
    buf_adds(&k0, "AWS4");
    buf_adds(&k0, cred->secret_key);
    unsigned char k[32], sig[32];
    if (!k0.oom) {
        hmac(k, (unsigned char *)k0.data, k0.len, date, 8);
        sodium_memzero(k0.data, k0.len);
    }
    buf_free(&k0);
    hmac(k, k, 32, cred->region, strlen(cred->region));
    hmac(k, k, 32, cred->service, strlen(cred->service));
    hmac(k, k, 32, "aws4_request", 12);
    if (!sts.oom)
        hmac(sig, k, 32, sts.data, sts.len);
    sodium_memzero(k, sizeof k);
    to_hex(sig, 32, out->signature);

    buf_printf(&authz, "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
               "Signature=%s", cred->access_key, date, cred->region, cred->service,
               signed_list.data, out->signature);
    out->canonical_request = buf_take(&creq);
    out->string_to_sign = buf_take(&sts);
    out->signed_headers = buf_take(&signed_list);
    out->authorization = buf_take(&authz);
    if (!out->canonical_request || !out->string_to_sign || !out->signed_headers ||
        !out->authorization) {
        sigv4_signature_free(out);
        return pulse_fail(PULSE_ERR_NOMEM, "sigv4: out of memory");
    }
    return 0;
}

int sigv4_presign_query(const char *method, const char *path, const char *host,
                        const struct sigv4_credentials *cred, const char *amz_date,
                        unsigned long expires, char **out)
{
    *out = NULL;
    if (!cred || !amz_date || strlen(amz_date) != 16 || !cred->access_key)
        return pulse_fail(PULSE_ERR_INVALID, "presign: incomplete credentials");
    /* AWS caps presigned URLs at 7 days. */
    if (expires < 1 || expires > 604800)
        return pulse_fail(PULSE_ERR_INVALID, "presign: expiry %lu s is outside 1..604800",
                          expires);
    char credential[512], exp[24], date[9];
    memcpy(date, amz_date, 8);
    date[8] = 0;
    snprintf(credential, sizeof credential, "%s/%s/%s/%s/aws4_request", cred->access_key, date,
             cred->region, cred->service);
    snprintf(exp, sizeof exp, "%lu", expires);
    struct sigv4_kv q[6] = {
        { "X-Amz-Algorithm", "AWS4-HMAC-SHA256" },
        { "X-Amz-Credential", credential },
        { "X-Amz-Date", amz_date },
        { "X-Amz-Expires", exp },
        { "X-Amz-SignedHeaders", "host" },
        { "X-Amz-Security-Token", cred->session_token },
    };
    size_t nq = cred->session_token ? 6 : 5;
    struct sigv4_kv h = { "host", host };
    struct sigv4_request req = {
        .method = method, .path = path, .query = q, .nquery = nq, .headers = &h, .nheaders = 1,
        .payload_hash = "UNSIGNED-PAYLOAD",
    };
    /* The token travels in the query here, never as a signed header. */
    struct sigv4_credentials c = *cred;
    c.session_token = NULL;
    struct sigv4_signature s;
    int rc = sigv4_sign(&req, &c, amz_date, &s);
    if (rc)
        return rc;
    struct buf b = { 0 };
    rc = canonical_query(&b, q, nq);
    buf_adds(&b, "&X-Amz-Signature=");
    buf_adds(&b, s.signature);
    sigv4_signature_free(&s);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    *out = buf_take(&b);
    return *out ? 0 : pulse_fail(PULSE_ERR_NOMEM, "presign: out of memory");
}
