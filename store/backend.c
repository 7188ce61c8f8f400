/* SPDX-License-Identifier: Apache-2.0 */
/* Store back end services: key checks, the deadline, and the validated put and get that the
 * public calls and a backend's batch both run, so no backend calls back into the public API. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fail.h"
#include "store/backend.h"

#define TEMP_MARK ".pulse-tmp-"

int store_check_key(const char *op, const char *key)
{
    if (!key || !*key)
        return pulse_fail(PULSE_ERR_INVALID, "%s: empty key", op);
    size_t n = strlen(key);
    if (n > 1024)
        return pulse_fail(PULSE_ERR_INVALID, "%s: key longer than 1024 bytes", op);
    if (key[0] == '/')
        return pulse_fail(PULSE_ERR_INVALID, "%s %s: key starts with '/'", op, key);
    const char *p = key;
    for (;;) {
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == 0)
            return pulse_fail(PULSE_ERR_INVALID, "%s %s: key has an empty segment", op, key);
        if ((l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.'))
            return pulse_fail(PULSE_ERR_INVALID, "%s %s: key has a '.' or '..' segment", op, key);
        if (l >= strlen(TEMP_MARK) && !strncmp(p, TEMP_MARK, strlen(TEMP_MARK)))
            return pulse_fail(PULSE_ERR_INVALID, "%s %s: segments starting with " TEMP_MARK
                              " are reserved", op, key);
        if (!e)
            break;
        p = e + 1;
    }
    for (const unsigned char *c = (const unsigned char *)key; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return pulse_fail(PULSE_ERR_INVALID, "%s: key has a control character", op);
    return 0;
}

int store_check_prefix(const char *prefix)
{
    if (!*prefix)
        return 0;
    if (strlen(prefix) > 1024 || prefix[0] == '/' || strstr(prefix, "//"))
        return pulse_fail(PULSE_ERR_INVALID, "list: bad prefix '%s'", prefix);
    return 0;
}

int store_deadline_check(const struct store_deadline *d, const char *op, const char *who)
{
    if (!d->at || pulse_monotonic_s() < d->at)
        return 0;
    return pulse_fail(PULSE_ERR_NETWORK, "%s %s: the deadline of %.3g s for this operation passed", op, who,
                      d->span > 0 ? d->span : 0.0);
}

int store_put_data(pulse_store *st, const char *key, const void *data, size_t len, unsigned flags)
{
    if (!st || (!data && len))
        return pulse_fail(PULSE_ERR_INVALID, "put: no store or no data");
    int rc = store_check_key("put", key);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "put", key);
    if (rc)
        return rc;
    struct store_src src = { data ? data : "", len, -1 };
    return st->ops->put(st, key, &src, flags);
}

int store_put_path(pulse_store *st, const char *key, const char *path, unsigned flags)
{
    if (!st || !path)
        return pulse_fail(PULSE_ERR_INVALID, "put: no store or no file");
    int rc = store_check_key("put", key);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "put", key);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pulse_fail_errno(PULSE_ERR_IO, "put %s: open %s", key, path);
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pulse_fail(PULSE_ERR_IO, "put %s: %s is not a regular file", key, path);
    }
    struct store_src src = { NULL, (uint64_t)sb.st_size, fd };
    rc = st->ops->put(st, key, &src, flags);
    close(fd);
    return rc;
}

int store_get_fd(pulse_store *st, const char *key, uint64_t offset, uint64_t length, int fd,
                 pulse_object_info *info)
{
    if (!st || fd < 0)
        return pulse_fail(PULSE_ERR_INVALID, "get: no store or no output file");
    int rc = store_check_key("get", key);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "get", key);
    if (rc)
        return rc;
    pulse_object_info tinfo;
    struct store_dst dst = { fd, 0, NULL, NULL };
    return st->ops->get(st, key, offset, length, NULL, &dst, info ? info : &tinfo);
}

int store_get_path(pulse_store *st, const char *key, uint64_t offset, uint64_t length,
                   const char *path, pulse_object_info *info)
{
    if (!st || !path || !*path)
        return pulse_fail(PULSE_ERR_INVALID, "get: no output file");
    int rc = store_check_key("get", key);
    if (!rc)
        rc = store_deadline_check(&st->deadline, "get", key);
    if (rc)
        return rc;
    size_t n = strlen(path);
    char *tmp = malloc(n + 32);
    if (!tmp)
        return pulse_fail(PULSE_ERR_NOMEM, "get: out of memory");
    /* Beside the target so the final rename stays on one file system. */
    snprintf(tmp, n + 32, "%s" TEMP_MARK "XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: create %s", key, tmp);
        free(tmp);
        return rc;
    }
    /* mkstemp makes 0600; the result should look like any file the user creates. */
    mode_t um = umask(0);
    umask(um);
    if (fchmod(fd, 0666 & ~um))
        rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: chmod %s", key, tmp);
    if (!rc)
        rc = store_get_fd(st, key, offset, length, fd, info);
    if (!rc && fsync(fd))
        rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: fsync %s", key, path);
    if (close(fd) && !rc)
        rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: close %s", key, path);
    if (!rc && rename(tmp, path))
        rc = pulse_fail_errno(PULSE_ERR_IO, "get %s: rename to %s", key, path);
    if (rc)
        unlink(tmp);
    free(tmp);
    return rc;
}
