/* SPDX-License-Identifier: Apache-2.0 */
/* The signing side of node keys: generating, saving and loading Ed25519 secret keys, and signing. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fail.h"
#include "pulseweights/keys.h"

/* libsodium's secret key is seed || public key; we keep both so the file can be checked. */
struct pulse_secret_key {
    uint8_t sk[crypto_sign_SECRETKEYBYTES];
    uint8_t pk[crypto_sign_PUBLICKEYBYTES];
};

_Static_assert(crypto_sign_PUBLICKEYBYTES == PULSE_PUBLIC_KEY_BYTES, "Ed25519 public key size");
_Static_assert(crypto_sign_BYTES == PULSE_SIGNATURE_BYTES, "Ed25519 signature size");

static int crypto_ready(void)
{
    /* sodium_init is idempotent and thread-safe; it picks the CSPRNG and the fastest code paths. */
    if (sodium_init() < 0)
        return pulse_fail(PULSE_ERR_UNSUPPORTED, "libsodium could not be initialised");
    return 0;
}

static int key_alloc(pulse_secret_key **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return pulse_fail(PULSE_ERR_NOMEM, "secret key");
    return 0;
}

PULSE_API void pulse_key_free(pulse_secret_key **k)
{
    if (!k || !*k)
        return;
    sodium_memzero(*k, sizeof **k);
    free(*k);
    *k = NULL;
}

PULSE_API int pulse_key_generate(pulse_secret_key **out)
{
    if (!out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_key_generate: NULL output");
    *out = NULL;
    int err = crypto_ready();
    if (err)
        return err;
    pulse_secret_key *k;
    if ((err = key_alloc(&k)))
        return err;
    crypto_sign_keypair(k->pk, k->sk);
    *out = k;
    return 0;
}

PULSE_API void pulse_key_public(const pulse_secret_key *k, uint8_t pub[PULSE_PUBLIC_KEY_BYTES])
{
    memcpy(pub, k->pk, PULSE_PUBLIC_KEY_BYTES);
}

PULSE_API int pulse_sign(const pulse_secret_key *k, const void *msg, size_t len,
                         uint8_t sig[PULSE_SIGNATURE_BYTES])
{
    if (!k || (!msg && len) || !sig)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_sign: NULL argument");
    int err = crypto_ready();
    if (err)
        return err;
    if (crypto_sign_detached(sig, NULL, msg, len, k->sk) != 0)
        return pulse_fail(PULSE_ERR_INVALID, "Ed25519 signing failed");
    return 0;
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Creates PATH exclusively with MODE and writes TEXT, fsynced; removes it again on failure. */
static int create_exclusive(const char *path, mode_t mode, const char *text, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) {
        if (errno == EEXIST)
            return pulse_fail(PULSE_ERR_EXISTS, "%s already exists; refusing to overwrite it", path);
        return pulse_fail_errno(PULSE_ERR_IO, "cannot create %s", path);
    }
    /* The umask can only take bits away, but set the mode explicitly so it is exactly MODE. */
    if (fchmod(fd, mode) != 0 || write_all(fd, text, len) != 0 || fsync(fd) != 0) {
        int err = pulse_fail_errno(PULSE_ERR_IO, "cannot write %s", path);
        close(fd);
        unlink(path);
        return err;
    }
    if (close(fd) != 0) {
        int err = pulse_fail_errno(PULSE_ERR_IO, "cannot write %s", path);
        unlink(path);
        return err;
    }
    return 0;
}

static int comment_ok(const char *c)
{
    size_t n = strlen(c);
    if (n > PULSE_KEY_MAX_COMMENT)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f)
            return 0;
    return 1;
}

PULSE_API int pulse_key_save(const pulse_secret_key *k, const char *name, const char *comment)
{
    if (!k || !name || !*name)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_key_save: no key or no name");
    if (comment && !comment_ok(comment))
        return pulse_fail(PULSE_ERR_INVALID, "key comment must be one printable line of at most %d bytes",
                          PULSE_KEY_MAX_COMMENT);
    size_t nlen = strlen(name);
    char *key_path = malloc(nlen + 5), *pub_path = malloc(nlen + 5);
    if (!key_path || !pub_path) {
        free(key_path);
        free(pub_path);
        return pulse_fail(PULSE_ERR_NOMEM, "key file names");
    }
    snprintf(key_path, nlen + 5, "%s.key", name);
    snprintf(pub_path, nlen + 5, "%s.pub", name);

    /* Secret text: header line, then the 64-byte libsodium secret (seed || public) in hex. */
    char secret_text[sizeof PULSE_KEY_SECRET_HEADER + 2 * crypto_sign_SECRETKEYBYTES + 2];
    char pub_text[sizeof PULSE_KEY_PUBLIC_HEADER + 2 * PULSE_PUBLIC_KEY_BYTES + PULSE_KEY_MAX_COMMENT + 4];
    char hex[2 * crypto_sign_SECRETKEYBYTES + 1];
    pulse_hex_encode(k->sk, crypto_sign_SECRETKEYBYTES, hex);
    int slen = snprintf(secret_text, sizeof secret_text, "%s\n%s\n", PULSE_KEY_SECRET_HEADER, hex);
    sodium_memzero(hex, sizeof hex);
    pulse_hex_encode(k->pk, PULSE_PUBLIC_KEY_BYTES, hex);
    int plen = snprintf(pub_text, sizeof pub_text, "%s %s%s%s\n", PULSE_KEY_PUBLIC_HEADER, hex,
                        comment && *comment ? " " : "", comment ? comment : "");

    int err = 0;
    struct stat st;
    /* Check the .pub first so that a taken .pub name does not leave a fresh .key behind. */
    if (lstat(pub_path, &st) == 0)
        err = pulse_fail(PULSE_ERR_EXISTS, "%s already exists; refusing to overwrite it", pub_path);
    if (!err)
        err = create_exclusive(key_path, 0600, secret_text, (size_t)slen);
    if (!err) {
        err = create_exclusive(pub_path, 0644, pub_text, (size_t)plen);
        if (err)
            unlink(key_path);
    }
    sodium_memzero(secret_text, sizeof secret_text);
    free(key_path);
    free(pub_path);
    return err;
}

/* Reads a small text file (at most CAP - 1 bytes, NUL-terminated) from an open descriptor. */
static int read_small(int fd, const char *path, char *buf, size_t cap, size_t *len)
{
    size_t got = 0;
    for (;;) {
        char extra;
        char *dst = got < cap - 1 ? buf + got : &extra;
        ssize_t n = read(fd, dst, got < cap - 1 ? cap - 1 - got : 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return pulse_fail_errno(PULSE_ERR_IO, "cannot read %s", path);
        if (n == 0)
            break;
        if (dst == &extra)
            return pulse_fail(PULSE_ERR_LIMIT, "%s: larger than %zu bytes; not a key file", path, cap - 1);
        got += (size_t)n;
    }
    buf[got] = '\0';
    *len = got;
    return 0;
}

PULSE_API int pulse_key_load_secret(const char *path, pulse_secret_key **out)
{
    if (!path || !out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_key_load_secret: NULL argument");
    *out = NULL;
    int err = crypto_ready();
    if (err)
        return err;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pulse_fail_errno(errno == ENOENT ? PULSE_ERR_NOTFOUND : PULSE_ERR_IO, "cannot open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err = pulse_fail_errno(PULSE_ERR_IO, "cannot stat %s", path);
        close(fd);
        return err;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pulse_fail(PULSE_ERR_INVALID, "%s is not a regular file", path);
    }
    /* A .pub given where the secret key belongs: say so, before the mode check would tell the
     * operator to chmod a file that holds no secret. */
    char first[sizeof PULSE_KEY_PUBLIC_HEADER];
    ssize_t fl = pread(fd, first, sizeof first, 0);
    if (fl == (ssize_t)sizeof first && !memcmp(first, PULSE_KEY_PUBLIC_HEADER, sizeof first - 1) &&
        (first[sizeof first - 1] == ' ' || first[sizeof first - 1] == '\n')) {
        close(fd);
        size_t pl = strlen(path);
        int pub = pl > 4 && !strcmp(path + pl - 4, ".pub");
        return pulse_fail(PULSE_ERR_FORMAT, "%s is a public key (.pub); --key needs the secret key file %.*s.key",
                          path, pub ? (int)(pl - 4) : 4, pub ? path : "NAME");
    }
    /* As ssh: a secret that others may read is no longer a secret; make the operator fix it. */
    if (st.st_mode & 077) {
        close(fd);
        return pulse_fail(PULSE_ERR_INVALID, "%s has mode %04o: group or others can access this secret key "
                          "(run chmod 600 %s)", path, (unsigned)(st.st_mode & 07777), path);
    }
    char buf[PULSE_KEY_MAX_FILE + 1];
    size_t len = 0;
    err = read_small(fd, path, buf, sizeof buf, &len);
    close(fd);
    if (err) {
        sodium_memzero(buf, sizeof buf);
        return err;
    }

    size_t hlen = strlen(PULSE_KEY_SECRET_HEADER), xlen = 2 * crypto_sign_SECRETKEYBYTES;
    pulse_secret_key *k = NULL;
    if (len != hlen + 1 + xlen + 1 || memcmp(buf, PULSE_KEY_SECRET_HEADER, hlen) != 0 || buf[hlen] != '\n' ||
        buf[len - 1] != '\n') {
        err = pulse_fail(PULSE_ERR_FORMAT, "%s: not a %s file", path, PULSE_KEY_SECRET_HEADER);
    } else if (!(err = key_alloc(&k))) {
        if (pulse_hex_decode(buf + hlen + 1, xlen, k->sk, sizeof k->sk) != 0) {
            err = pulse_fail(PULSE_ERR_FORMAT, "%s: secret key is not %zu hex digits", path, xlen);
        } else {
            /* Re-derive the pair from the seed: a damaged file must not sign under a wrong identity. */
            uint8_t seed[crypto_sign_SEEDBYTES], sk2[crypto_sign_SECRETKEYBYTES];
            crypto_sign_ed25519_sk_to_seed(seed, k->sk);
            crypto_sign_seed_keypair(k->pk, sk2, seed);
            if (sodium_memcmp(sk2, k->sk, sizeof sk2) != 0)
                err = pulse_fail(PULSE_ERR_FORMAT, "%s: public half does not match the seed (damaged key file)",
                                 path);
            sodium_memzero(seed, sizeof seed);
            sodium_memzero(sk2, sizeof sk2);
        }
    }
    sodium_memzero(buf, sizeof buf);
    if (err) {
        pulse_key_free(&k);
        return err;
    }
    *out = k;
    return 0;
}
