/* SPDX-License-Identifier: Apache-2.0 */
/* file:// backend: a local directory with S3's semantics (atomic create-if-absent, durable puts, sorted lists). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/fail.h"
#include "crypto/sha256.h"
#include "store/backend.h"
#include "store/buf.h"

#define TEMP_MARK ".pulse-tmp-"
/* "SIZE HEX": the SHA-256 stored at put time so head/list need not reread the object. The
 * size guards against a file changed behind our back (we only ever replace whole files). */
#define ETAG_XATTR "user.pulse.sha256"
#define CHUNK (1u << 20)

struct file_store {
    char *root; /* absolute, no trailing '/' ("" for the file system root) */
};

static struct file_store *fs_of(pulse_store *st)
{
    return st->impl;
}

/* Every key is resolved beneath the root one directory at a time, with O_NOFOLLOW on each
 * component: the root may be shared with others (a directory anyone in a group can write), and
 * a symlink planted in it must never take a get, put, delete or list outside the root. The root
 * itself is the user's own choice and may be reached through symlinks. Refusals name the key. */
static int refuse_link(const char *op, const char *key, const char *comp, size_t comp_len)
{
    if (comp_len == strlen(key))
        return pulse_fail(PULSE_ERR_IO, "%s %s: is a symbolic link, refused", op, key);
    return pulse_fail(PULSE_ERR_IO, "%s %s: %.*s is a symbolic link, refused", op, key,
                      (int)comp_len, comp);
}

/* True when name in dfd is a symbolic link (not following it). */
static int is_link_at(int dfd, const char *name)
{
    struct stat sb;
    return fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode);
}

static int bad_segment(const char *c, size_t n)
{
    return n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.');
}

/* Opens the root directory; with create, makes it first (mkdir -p) when it is missing. */
static int open_root(const struct file_store *f, const char *op, const char *key, int create, int *out)
{
    const char *root = *f->root ? f->root : "/";
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        char *path = strdup(root);
        if (!path)
            return pulse_fail(PULSE_ERR_NOMEM, "%s %s: out of memory", op, key);
        for (char *p = path + 1;; p++) {
            char *slash = strchr(p, '/');
            if (slash)
                *slash = 0;
            if (mkdir(path, 0777) && errno != EEXIST) {
                int e = errno;
                free(path);
                errno = e;
                return pulse_fail_errno(PULSE_ERR_IO, "%s %s: create directory %s", op, key, root);
            }
            if (!slash)
                break;
            *slash = '/';
            p = slash;
        }
        free(path);
        fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return pulse_fail(PULSE_ERR_NOTFOUND, "%s %s: no such key (no directory %s)", op, key, root);
        return pulse_fail_errno(PULSE_ERR_IO, "%s %s: open %s", op, key, root);
    }
    *out = fd;
    return 0;
}

/* Opens the directory named by the first n bytes of key (whole segments; n == 0: the root),
 * beneath the root and through no symlink; with create, makes the missing ones (mkdirat).
 * PULSE_ERR_NOTFOUND when one is missing (or is not a directory) without create; *link (may be
 * NULL) is set when the refusal was a symlink. */
static int open_dir(const struct file_store *f, const char *op, const char *key, size_t n, int create,
                    int *out, int *link)
{
    if (link)
        *link = 0;
    int dfd = -1, rc = open_root(f, op, key, create, &dfd);
    if (rc)
        return rc;
    char name[256];
    for (size_t at = 0; at < n;) {
        const char *c = key + at;
        const char *e = memchr(c, '/', n - at);
        size_t l = e ? (size_t)(e - c) : n - at;
        if (bad_segment(c, l) || l >= sizeof name) {
            close(dfd);
            return pulse_fail(PULSE_ERR_INVALID, "%s %s: bad segment '%.*s'", op, key, (int)l, c);
        }
        memcpy(name, c, l);
        name[l] = 0;
        int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0 && errno == ENOENT && create) {
            if (mkdirat(dfd, name, 0777) && errno != EEXIST) {
                rc = pulse_fail_errno(PULSE_ERR_IO, "%s %s: create directory %.*s", op, key,
                                      (int)(at + l), key);
                close(dfd);
                return rc;
            }
            sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (sub < 0) {
            int e = errno;
            if (is_link_at(dfd, name)) {
                rc = refuse_link(op, key, key, at + l);
                if (link)
                    *link = 1;
            } else if ((e == ENOENT || e == ENOTDIR) && !create) {
                rc = pulse_fail(PULSE_ERR_NOTFOUND, "%s %s: no such key", op, key);
            } else {
                errno = e;
                rc = pulse_fail_errno(PULSE_ERR_IO, "%s %s: open directory %.*s", op, key, (int)(at + l), key);
            }
            close(dfd);
            return rc;
        }
        close(dfd);
        dfd = sub;
        at += l + (e ? 1 : 0);
    }
    *out = dfd;
    return 0;
}

/* Splits key into its directory part (returned: its length, 0 for none) and its last segment. */
static size_t dir_len(const char *key, const char **leaf)
{
    const char *slash = strrchr(key, '/');
    *leaf = slash ? slash + 1 : key;
    return slash ? (size_t)(slash - key) : 0;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
    const char *c = p;
    while (n) {
        ssize_t w = pwrite(fd, c, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* Returns bytes read (short only at end of file) or -1. */
static ssize_t pread_full(int fd, void *p, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)p + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static void hex32(const unsigned char *h, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = d[h[i] >> 4];
        out[2 * i + 1] = d[h[i] & 15];
    }
    out[64] = 0;
}

static int file_put(pulse_store *st, const char *key, const struct store_src *src, unsigned flags)
{
    struct file_store *f = fs_of(st);
    const char *leaf;
    size_t dl = dir_len(key, &leaf);
    if (bad_segment(leaf, strlen(leaf)))
        return pulse_fail(PULSE_ERR_INVALID, "put %s: bad segment '%s'", key, leaf);
    int dfd = -1, rc = open_dir(f, "put", key, dl, 1, &dfd, NULL);
    if (rc)
        return rc;
    char tmp[64];
    int fd = -1, made = 0;
    /* rename(2) would replace a symlink rather than follow it; refusing it says what is wrong. */
    if (is_link_at(dfd, leaf)) {
        rc = refuse_link("put", key, key, strlen(key));
        goto out;
    }
    fd = pulse_create_temp_at(dfd, "", TEMP_MARK, 0666, tmp, sizeof tmp);
    if (fd < 0) {
        rc = pulse_fail(PULSE_ERR_IO, "put %s: %s", key, pulse_last_error());
        goto out;
    }
    made = 1;
    pulse_sha256_ctx hs;
    pulse_sha256_init(&hs);
    if (src->fd < 0) {
        pulse_sha256_update(&hs, src->data, src->len);
        if (write_all(fd, src->data, src->len)) {
            rc = pulse_fail_errno(PULSE_ERR_IO, "put %s: write", key);
            goto out;
        }
    } else {
        char *chunk = malloc(CHUNK);
        if (!chunk) {
            rc = pulse_fail(PULSE_ERR_NOMEM, "put %s: out of memory", key);
            goto out;
        }
        for (uint64_t off = 0; off < src->len;) {
            size_t want = src->len - off < CHUNK ? (size_t)(src->len - off) : CHUNK;
            ssize_t r = pread_full(src->fd, chunk, want, off);
            if (r != (ssize_t)want) {
                rc = r < 0 ? pulse_fail_errno(PULSE_ERR_IO, "put %s: read source", key)
                           : pulse_fail(PULSE_ERR_IO, "put %s: source file shrank while reading",
                                        key);
                break;
            }
            pulse_sha256_update(&hs, chunk, want);
            if (write_all(fd, chunk, want)) {
                rc = pulse_fail_errno(PULSE_ERR_IO, "put %s: write", key);
                break;
            }
            off += want;
        }
        free(chunk);
        if (rc)
            goto out;
    }
    unsigned char h[32];
    pulse_sha256_final(&hs, h);
    char xv[96];
    int xl = snprintf(xv, sizeof xv, "%llu ", (unsigned long long)src->len);
    hex32(h, xv + xl);
    /* Best effort: without xattrs head/list recompute the digest. */
    (void)fsetxattr(fd, ETAG_XATTR, xv, strlen(xv), 0);
    if (fsync(fd)) {
        rc = pulse_fail_errno(PULSE_ERR_IO, "put %s: fsync", key);
        goto out;
    }
    if (close(fd)) {
        fd = -1;
        rc = pulse_fail_errno(PULSE_ERR_IO, "put %s: close", key);
        goto out;
    }
    fd = -1;
    if (flags & PULSE_PUT_IF_ABSENT) {
        /* link(2) never replaces: exactly one of several racing writers wins. */
        if (linkat(dfd, tmp, dfd, leaf, 0)) {
            rc = errno == EEXIST ? pulse_fail(PULSE_ERR_EXISTS, "put %s: key already exists", key)
                                 : pulse_fail_errno(PULSE_ERR_IO, "put %s: link", key);
            goto out;
        }
    } else if (renameat(dfd, tmp, dfd, leaf)) {
        rc = errno == EISDIR ? pulse_fail(PULSE_ERR_EXISTS, "put %s: a prefix of other keys", key)
                             : pulse_fail_errno(PULSE_ERR_IO, "put %s: rename", key);
        goto out;
    } else {
        made = 0;
    }
    if (made) {
        unlinkat(dfd, tmp, 0);
        made = 0;
    }
    if (fsync(dfd))
        rc = pulse_fail_errno(PULSE_ERR_IO, "put %s: fsync of its directory", key);
out:
    if (fd >= 0)
        close(fd);
    if (made)
        unlinkat(dfd, tmp, 0);
    close(dfd);
    return rc;
}

/* Fills info from an open object; the ETag comes from the xattr or is recomputed. */
static int info_of(int fd, const char *op, const char *key, pulse_object_info *info)
{
    struct stat sb;
    if (fstat(fd, &sb))
        return pulse_fail_errno(PULSE_ERR_IO, "%s %s: stat", op, key);
    if (!S_ISREG(sb.st_mode))
        return pulse_fail(PULSE_ERR_NOTFOUND, "%s %s: no such key", op, key);
    info->size = (uint64_t)sb.st_size;
    info->mtime = (int64_t)sb.st_mtime;
    char xv[100];
    ssize_t xl = fgetxattr(fd, ETAG_XATTR, xv, sizeof xv - 1);
    if (xl > 0) {
        xv[xl] = 0;
        char *sp = strchr(xv, ' ');
        if (sp && strtoull(xv, NULL, 10) == info->size && strlen(sp + 1) == 64) {
            memcpy(info->etag, sp + 1, 65);
            return 0;
        }
    }
    pulse_sha256_ctx hs;
    pulse_sha256_init(&hs);
    char *chunk = malloc(CHUNK);
    if (!chunk)
        return pulse_fail(PULSE_ERR_NOMEM, "%s %s: out of memory", op, key);
    for (uint64_t off = 0; off < info->size;) {
        ssize_t r = pread_full(fd, chunk, CHUNK, off);
        if (r <= 0) {
            free(chunk);
            return pulse_fail_errno(PULSE_ERR_IO, "%s %s: read", op, key);
        }
        pulse_sha256_update(&hs, chunk, (size_t)r);
        off += (uint64_t)r;
    }
    free(chunk);
    unsigned char h[32];
    pulse_sha256_final(&hs, h);
    hex32(h, info->etag);
    return 0;
}

/* Opens the object at key for reading, through no symlink. *link (may be NULL) is set when the
 * refusal was a symlink, which a list skips. */
static int open_object(pulse_store *st, const char *op, const char *key, int *fd_out, int *link)
{
    const char *leaf;
    size_t dl = dir_len(key, &leaf);
    if (link)
        *link = 0;
    if (bad_segment(leaf, strlen(leaf)))
        return pulse_fail(PULSE_ERR_INVALID, "%s %s: bad segment '%s'", op, key, leaf);
    int dfd = -1, rc = open_dir(fs_of(st), op, key, dl, 0, &dfd, link);
    if (rc)
        return rc;
    /* O_NONBLOCK: a FIFO planted at a key must not hang the open (info_of refuses it). */
    int fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int e = errno;
    if (fd < 0 && is_link_at(dfd, leaf)) {
        close(dfd);
        if (link)
            *link = 1;
        return refuse_link(op, key, key, strlen(key));
    }
    close(dfd);
    if (fd < 0) {
        errno = e;
        if (e == ENOENT || e == ENOTDIR)
            return pulse_fail(PULSE_ERR_NOTFOUND, "%s %s: no such key", op, key);
        return pulse_fail_errno(PULSE_ERR_IO, "%s %s: open", op, key);
    }
    *fd_out = fd;
    return 0;
}

static int file_get(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                    const char *if_none_match, const struct store_dst *dst,
                    pulse_object_info *info)
{
    int fd = -1, rc = open_object(st, "get", key, &fd, NULL);
    if (rc)
        return rc;
    /* One descriptor for metadata and bytes: objects are replaced, never rewritten, so
     * the ETag and the content we read belong together. */
    rc = info_of(fd, "get", key, info);
    if (rc)
        goto out;
    if (if_none_match && !strcmp(if_none_match, info->etag)) {
        rc = pulse_fail(PULSE_ERR_NOT_MODIFIED, "get %s: not modified (ETag %s)", key,
                        info->etag);
        goto out;
    }
    if (offset > info->size || (offset == info->size && offset > 0)) {
        rc = pulse_fail(PULSE_ERR_INVALID, "get %s: range starts at %llu, object has %llu bytes",
                        key, (unsigned long long)offset, (unsigned long long)info->size);
        goto out;
    }
    uint64_t n = info->size - offset;
    if (length < n)
        n = length;
    if (dst->fd < 0) {
        if (n > dst->max) {
            rc = pulse_fail(PULSE_ERR_LIMIT, "get %s: %llu bytes exceed the limit of %zu", key,
                            (unsigned long long)n, dst->max);
            goto out;
        }
        char *mem = malloc(n ? (size_t)n : 1);
        if (!mem) {
            rc = pulse_fail(PULSE_ERR_NOMEM, "get %s: out of memory", key);
            goto out;
        }
        if (pread_full(fd, mem, (size_t)n, offset) != (ssize_t)n) {
            free(mem);
            rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: read", key);
            goto out;
        }
        *dst->data = mem;
        *dst->len = (size_t)n;
    } else {
        char *chunk = malloc(CHUNK);
        if (!chunk) {
            rc = pulse_fail(PULSE_ERR_NOMEM, "get %s: out of memory", key);
            goto out;
        }
        for (uint64_t done = 0; done < n;) {
            size_t want = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
            if (pread_full(fd, chunk, want, offset + done) != (ssize_t)want) {
                rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: read", key);
                break;
            }
            if (pwrite_all(dst->fd, chunk, want, done)) {
                rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: write output", key);
                break;
            }
            done += want;
        }
        free(chunk);
    }
out:
    close(fd);
    return rc;
}

/* The ranges one after another, each in CHUNK steps counted as they land. */
static int file_get_ranges(pulse_store *st, pulse_store_range *x, size_t n, int out)
{
    char *chunk = malloc(CHUNK);
    int rc = chunk ? 0 : pulse_fail(PULSE_ERR_NOMEM, "get: out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        int fd = -1;
        pulse_object_info info;
        if ((rc = open_object(st, "get", x[i].key, &fd, NULL)) != 0)
            break;
        rc = info_of(fd, "get", x[i].key, &info);
        x[i].object_size = info.size;
        if (!rc && (x[i].offset >= info.size || x[i].length > info.size - x[i].offset))
            rc = pulse_fail(PULSE_ERR_INVALID, "get %s: range %llu-%llu, object has %llu bytes", x[i].key,
                            (unsigned long long)x[i].offset, (unsigned long long)(x[i].offset + x[i].length - 1),
                            (unsigned long long)info.size);
        for (uint64_t done = 0; !rc && done < x[i].length;) {
            size_t want = x[i].length - done < CHUNK ? (size_t)(x[i].length - done) : CHUNK;
            if (pread_full(fd, chunk, want, x[i].offset + done) != (ssize_t)want)
                rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: read", x[i].key);
            else if (pwrite_all(out, chunk, want, x[i].at + done))
                rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: write output", x[i].key);
            else
                __atomic_store_n(&x[i].done, done += want, __ATOMIC_RELEASE);
        }
        close(fd);
    }
    free(chunk);
    return rc;
}

static int file_head(pulse_store *st, const char *key, pulse_object_info *info)
{
    int fd = -1, rc = open_object(st, "head", key, &fd, NULL);
    if (rc)
        return rc;
    rc = info_of(fd, "head", key, info);
    close(fd);
    return rc;
}

static int file_del(pulse_store *st, const char *key)
{
    struct file_store *f = fs_of(st);
    const char *leaf;
    size_t dl = dir_len(key, &leaf);
    if (bad_segment(leaf, strlen(leaf)))
        return pulse_fail(PULSE_ERR_INVALID, "delete %s: bad segment '%s'", key, leaf);
    int dfd = -1, rc = open_dir(f, "delete", key, dl, 0, &dfd, NULL);
    if (rc)
        return rc;
    struct stat sb;
    if (fstatat(dfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode)) {
        rc = refuse_link("delete", key, key, strlen(key));
    } else if (fstatat(dfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) || !S_ISREG(sb.st_mode)) {
        rc = pulse_fail(PULSE_ERR_NOTFOUND, "delete %s: no such key", key);
    } else if (unlinkat(dfd, leaf, 0)) {
        rc = pulse_fail_errno(PULSE_ERR_IO, "delete %s", key);
    } else {
        (void)fsync(dfd);   /* best effort: the key is gone either way */
    }
    close(dfd);
    if (rc)
        return rc;
    /* S3 has no directories: drop the ones this key alone kept alive, each removed from its own
     * parent (opened again beneath the root), so that nothing outside is ever touched. */
    char name[256];
    while (dl > 0) {
        const char *slash = NULL;
        for (size_t i = dl; i-- > 0;)
            if (key[i] == '/') {
                slash = key + i;
                break;
            }
        size_t pl = slash ? (size_t)(slash - key) : 0;
        const char *c = slash ? slash + 1 : key;
        size_t l = dl - (size_t)(c - key);
        int pfd;
        if (l >= sizeof name || open_dir(f, "delete", key, pl, 0, &pfd, NULL))
            break;
        memcpy(name, c, l);
        name[l] = 0;
        int r = unlinkat(pfd, name, AT_REMOVEDIR);
        close(pfd);
        if (r)
            break;
        dl = pl;
    }
    pulse_clear_error();
    return 0;
}

struct key_list {
    char **keys;
    size_t n, cap;
};

static int key_push(struct key_list *l, char *k)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        char **p = realloc(l->keys, cap * sizeof *p);
        if (!p)
            return -1;
        l->keys = p;
        l->cap = cap;
    }
    l->keys[l->n++] = k;
    return 0;
}

/* Collects keys under the directory dfd (owned; whose key form is kp, "" or ending in '/') that
 * can match prefix. Symlinks are neither listed nor followed. */
static int walk(int dfd, const char *kp, const char *prefix, struct key_list *out)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return pulse_fail_errno(PULSE_ERR_IO, "list: open directory for '%s'", kp);
    }
    int rc = 0;
    struct dirent *e;
    size_t plen = strlen(prefix);
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            !strncmp(e->d_name, TEMP_MARK, strlen(TEMP_MARK)))
            continue;
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) || S_ISLNK(sb.st_mode))
            continue;
        struct buf kb = { 0 };
        buf_adds(&kb, kp);
        buf_adds(&kb, e->d_name);
        if (kb.oom) {
            buf_free(&kb);
            rc = pulse_fail(PULSE_ERR_NOMEM, "list: out of memory");
            break;
        }
        if (S_ISDIR(sb.st_mode)) {
            buf_addc(&kb, '/');
            size_t m = kb.len < plen ? kb.len : plen;
            if (!kb.oom && !strncmp(kb.data, prefix, m)) {
                int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0)
                    rc = walk(sub, kb.data, prefix, out);
                else if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP)
                    rc = pulse_fail_errno(PULSE_ERR_IO, "list: open directory for '%s'", kb.data);
            }
            buf_free(&kb);
        } else if (S_ISREG(sb.st_mode) && !strncmp(kb.data, prefix, plen)) {
            char *k = buf_take(&kb);
            if (!k || key_push(out, k)) {
                free(k);
                rc = pulse_fail(PULSE_ERR_NOMEM, "list: out of memory");
            }
        } else {
            buf_free(&kb);
        }
    }
    closedir(d);
    return rc;
}

static int cmp_keys(const void *a, const void *b)
{
    /* strcmp compares as unsigned char: S3's bytewise UTF-8 order. */
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int file_list(pulse_store *st, const char *prefix, const char *start_after,
                     pulse_store_list_fn fn, void *ctx)
{
    struct file_store *f = fs_of(st);
    /* Start at the deepest directory the prefix names, so "a/b/c" does not walk the root. A
     * missing one, or a symlink, lists nothing. */
    const char *slash = strrchr(prefix, '/');
    size_t dlen = slash ? (size_t)(slash - prefix) + 1 : 0;
    struct key_list l = { 0 };
    int link = 0;
    int dfd = -1, rc = open_dir(f, "list", prefix, dlen ? dlen - 1 : 0, 0, &dfd, &link);
    if (rc == PULSE_ERR_NOTFOUND || link) {
        pulse_clear_error();
        return 0;
    }
    if (rc)
        return rc;
    struct buf kp = { 0 };
    buf_add(&kp, prefix, dlen);
    if (kp.oom) {
        close(dfd);
        rc = pulse_fail(PULSE_ERR_NOMEM, "list: out of memory");
    } else {
        rc = walk(dfd, kp.data ? kp.data : "", prefix, &l);
    }
    buf_free(&kp);
    if (!rc && l.n > 1)   /* qsort(NULL, 0, ...) is undefined behaviour */
        qsort(l.keys, l.n, sizeof *l.keys, cmp_keys);
    for (size_t i = 0; i < l.n && !rc; i++) {
        if (start_after && strcmp(l.keys[i], start_after) <= 0)
            continue;
        int fd;
        pulse_object_info info;
        memset(&info, 0, sizeof info);
        int r = open_object(st, "list", l.keys[i], &fd, &link);
        if (r == PULSE_ERR_NOTFOUND || link)
            continue; /* deleted, or replaced by a symlink, while listing */
        if (r) {
            rc = r;
            break;
        }
        r = info_of(fd, "list", l.keys[i], &info);
        close(fd);
        if (r == PULSE_ERR_NOTFOUND)
            continue;
        if (r) {
            rc = r;
            break;
        }
        rc = fn(ctx, l.keys[i], &info);
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.keys[i]);
    free(l.keys);
    return rc;
}

static int file_presign(pulse_store *st, const char *key, unsigned long expires, char **url)
{
    (void)st;
    (void)expires;
    (void)url;
    return pulse_fail(PULSE_ERR_UNSUPPORTED, "presign %s: file:// stores have no URLs to sign", key);
}

static void file_close(pulse_store *st)
{
    struct file_store *f = fs_of(st);
    if (f)
        free(f->root);
    free(f);
    st->impl = NULL;
}

static const struct store_ops file_ops = {
    .put = file_put, .get = file_get, .get_ranges = file_get_ranges, .head = file_head, .del = file_del,
    .list = file_list,
    .presign = file_presign, .batch = NULL, .close = file_close,
};

int store_file_open(pulse_store *st, const char *rest)
{
    if (rest[0] != '/')
        return pulse_fail(PULSE_ERR_FORMAT, "file URL: needs an absolute path (file:///dir)");
    if (strstr(rest, "/../") || strstr(rest, "/./") ||
        (strlen(rest) >= 3 && !strcmp(rest + strlen(rest) - 3, "/..")))
        return pulse_fail(PULSE_ERR_FORMAT, "file URL: '.' and '..' segments are not allowed");
    struct file_store *f = calloc(1, sizeof *f);
    if (!f || !(f->root = strdup(rest))) {
        free(f);
        return pulse_fail(PULSE_ERR_NOMEM, "file store: out of memory");
    }
    size_t n = strlen(f->root);
    while (n > 0 && f->root[n - 1] == '/')
        f->root[--n] = 0;
    st->impl = f;
    st->ops = &file_ops;
    return 0;
}
