/* SPDX-License-Identifier: Apache-2.0 */
/* The verifying side of node keys: .pub files, trust sets, Ed25519 verification and hex text. */
#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fail.h"
#include "pulseweights/keys.h"

struct pulse_trust {
    pulse_public_key *keys;
    size_t count, cap;
};

PULSE_API void pulse_hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

PULSE_API int pulse_hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t n)
{
    if (!hex || hex_len != 2 * n)
        return pulse_fail(PULSE_ERR_FORMAT, "want %zu hex digits, got %zu", 2 * n, hex_len);
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return pulse_fail(PULSE_ERR_FORMAT, "not a hex digit at position %zu", 2 * i + (hi < 0 ? 0 : 1));
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

PULSE_API void pulse_node_id_hex(const uint8_t pub[PULSE_PUBLIC_KEY_BYTES], char out[PULSE_NODE_ID_HEX])
{
    pulse_hex_encode(pub, PULSE_PUBLIC_KEY_BYTES, out);
}

PULSE_API int pulse_verify(const uint8_t pub[PULSE_PUBLIC_KEY_BYTES], const void *msg, size_t len,
                           const uint8_t sig[PULSE_SIGNATURE_BYTES])
{
    if (!pub || (!msg && len) || !sig)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_verify: NULL argument");
    if (sodium_init() < 0)
        return pulse_fail(PULSE_ERR_UNSUPPORTED, "libsodium could not be initialised");
    if (crypto_sign_verify_detached(sig, msg, len, pub) != 0) {
        char id[PULSE_NODE_ID_HEX];
        pulse_node_id_hex(pub, id);
        return pulse_fail(PULSE_ERR_AUTH, "signature does not verify under key %s", id);
    }
    return 0;
}

/* Parses the text of a .pub file: "pulse-ed25519-public-v1 <64 hex> [comment]\n", one line. */
static int parse_public(const char *path, const char *text, size_t len, pulse_public_key *out)
{
    size_t hlen = strlen(PULSE_KEY_PUBLIC_HEADER), xlen = 2 * PULSE_PUBLIC_KEY_BYTES;
    if (len && text[len - 1] == '\n')
        len--;
    if (memchr(text, '\n', len) || memchr(text, '\0', len))
        return pulse_fail(PULSE_ERR_FORMAT, "%s: a public key file is one line", path);
    if (len < hlen + 1 + xlen || memcmp(text, PULSE_KEY_PUBLIC_HEADER, hlen) != 0 || text[hlen] != ' ')
        return pulse_fail(PULSE_ERR_FORMAT, "%s: not a %s file", path, PULSE_KEY_PUBLIC_HEADER);
    if (pulse_hex_decode(text + hlen + 1, xlen, out->key, PULSE_PUBLIC_KEY_BYTES) != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "%s: public key is not %zu hex digits", path, xlen);
    const char *rest = text + hlen + 1 + xlen;
    size_t rest_len = len - (hlen + 1 + xlen);
    if (rest_len && rest[0] != ' ')
        return pulse_fail(PULSE_ERR_FORMAT, "%s: public key is not %zu hex digits", path, xlen);
    if (rest_len) {
        rest++;
        rest_len--;
    }
    if (rest_len > PULSE_KEY_MAX_COMMENT)
        return pulse_fail(PULSE_ERR_LIMIT, "%s: comment longer than %d bytes", path, PULSE_KEY_MAX_COMMENT);
    for (size_t i = 0; i < rest_len; i++)
        if ((unsigned char)rest[i] < 0x20 || rest[i] == 0x7f)
            return pulse_fail(PULSE_ERR_FORMAT, "%s: control character in the comment", path);
    if (rest_len) {
        memcpy(out->comment, rest, rest_len);
        out->comment[rest_len] = '\0';
    } else {
        /* Without a comment the file name is the most useful label in messages. */
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t n = strlen(base);
        if (n > 4 && !strcmp(base + n - 4, ".pub"))
            n -= 4;
        if (n > PULSE_KEY_MAX_COMMENT)
            n = PULSE_KEY_MAX_COMMENT;
        memcpy(out->comment, base, n);
        out->comment[n] = '\0';
    }
    return 0;
}

PULSE_API int pulse_key_load_public(const char *path, pulse_public_key *out)
{
    if (!path || !out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_key_load_public: NULL argument");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "cannot open %s", path);
    char buf[PULSE_KEY_MAX_FILE + 1];
    size_t len = fread(buf, 1, sizeof buf, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return pulse_fail(PULSE_ERR_IO, "cannot read %s", path);
    if (len > PULSE_KEY_MAX_FILE)
        return pulse_fail(PULSE_ERR_LIMIT, "%s: larger than %d bytes; not a public key file", path,
                          PULSE_KEY_MAX_FILE);
    return parse_public(path, buf, len, out);
}

PULSE_API int pulse_trust_new(pulse_trust **out)
{
    if (!out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_trust_new: NULL output");
    *out = calloc(1, sizeof **out);
    return *out ? 0 : pulse_fail(PULSE_ERR_NOMEM, "trust set");
}

PULSE_API void pulse_trust_free(pulse_trust **t)
{
    if (!t || !*t)
        return;
    free((*t)->keys);
    free(*t);
    *t = NULL;
}

PULSE_API size_t pulse_trust_count(const pulse_trust *t)
{
    return t ? t->count : 0;
}

PULSE_API const pulse_public_key *pulse_trust_get(const pulse_trust *t, size_t i)
{
    return t && i < t->count ? &t->keys[i] : NULL;
}

PULSE_API const pulse_public_key *pulse_trust_find(const pulse_trust *t, const uint8_t pub[PULSE_PUBLIC_KEY_BYTES])
{
    if (!t || !pub)
        return NULL;
    for (size_t i = 0; i < t->count; i++)
        if (memcmp(t->keys[i].key, pub, PULSE_PUBLIC_KEY_BYTES) == 0)
            return &t->keys[i];
    return NULL;
}

PULSE_API int pulse_trust_add(pulse_trust *t, const pulse_public_key *key)
{
    if (!t || !key)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_trust_add: NULL argument");
    if (pulse_trust_find(t, key->key))
        return 0;
    if (t->count >= PULSE_TRUST_MAX_KEYS)
        return pulse_fail(PULSE_ERR_LIMIT, "more than %d trusted keys", PULSE_TRUST_MAX_KEYS);
    if (t->count == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 8;
        pulse_public_key *keys = realloc(t->keys, cap * sizeof *keys);
        if (!keys)
            return pulse_fail(PULSE_ERR_NOMEM, "trust set");
        t->keys = keys;
        t->cap = cap;
    }
    t->keys[t->count++] = *key;
    return 0;
}

static int ends_with_pub(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".pub") == 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Loads every *.pub of DIR in name order, so that a set's order (and its messages) is reproducible. */
static int load_dir(pulse_trust *t, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot open directory %s", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int err = 0;
    struct dirent *e;
    while (!err && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !ends_with_pub(e->d_name))
            continue;
        if (n >= PULSE_TRUST_MAX_KEYS) {
            err = pulse_fail(PULSE_ERR_LIMIT, "%s: more than %d .pub files", dir, PULSE_TRUST_MAX_KEYS);
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                err = pulse_fail(PULSE_ERR_NOMEM, "trust directory listing");
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            err = pulse_fail(PULSE_ERR_NOMEM, "trust directory listing");
            break;
        }
        n++;
    }
    closedir(d);
    if (!err && n == 0)
        err = pulse_fail(PULSE_ERR_NOTFOUND, "%s: no .pub files (a follower must trust at least one key)", dir);
    if (!err)
        qsort(names, n, sizeof *names, name_cmp);
    for (size_t i = 0; !err && i < n; i++) {
        size_t plen = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(plen);
        if (!path) {
            err = pulse_fail(PULSE_ERR_NOMEM, "trust path");
            break;
        }
        snprintf(path, plen, "%s/%s", dir, names[i]);
        pulse_public_key key;
        err = pulse_key_load_public(path, &key);
        if (!err)
            err = pulse_trust_add(t, &key);
        free(path);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return err;
}

PULSE_API int pulse_trust_load(pulse_trust *t, const char *path)
{
    if (!t || !path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_trust_load: NULL argument");
    struct stat st;
    if (stat(path, &st) != 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "cannot open %s", path);
    if (S_ISDIR(st.st_mode))
        return load_dir(t, path);
    pulse_public_key key;
    int err = pulse_key_load_public(path, &key);
    return err ? err : pulse_trust_add(t, &key);
}

PULSE_API int pulse_key_load_trust_dir(const char *path, pulse_trust **out)
{
    if (!out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_key_load_trust_dir: NULL output");
    pulse_trust *t;
    int err = pulse_trust_new(&t);
    if (err)
        return err;
    if ((err = pulse_trust_load(t, path))) {
        pulse_trust_free(&t);
        return err;
    }
    *out = t;
    return 0;
}
