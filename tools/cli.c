/* SPDX-License-Identifier: Apache-2.0 */
/* Shared conventions of the CLI verbs: one-line errors, --help detection, number parsing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <inttypes.h>

#include "pulseweights/error.h"
#include "tools/cli.h"

int cli_fail(const char *verb, int err, const char *what)
{
    const char *detail = pulse_last_error();
    fprintf(stderr, "pulse %s: %s: %s%s%s\n", verb, what, pulse_strerror(err),
            detail[0] ? ": " : "", detail);
    return 1;
}

int cli_usage_error(const char *verb, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pulse %s: ", verb);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\ntry 'pulse %s --help'\n", verb);
    return 2;
}

int cli_out_not_stdout(const char *verb, const char *opt, const char *val)
{
    if (strcmp(val, "-"))
        return 0;
    fprintf(stderr, "pulse %s: %s -: this output is a file written whole, not a stream; name a file "
            "(./- for one called '-')\n", verb, opt);
    return 2;
}

int cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return 1;
    }
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    if (*end)
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int cli_finish_stdout(const char *verb)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "pulse %s: could not write to standard output: %s\n", verb, strerror(errno));
        return 1;
    }
    return 0;
}

void cli_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

uint64_t cli_patch_elementwise(const pulse_patch *p)
{
    uint64_t n = 0;
    for (size_t i = 0; i < pulse_patch_tensor_count(p); i++) {
        pulse_patch_tensor_info ti;
        if (pulse_patch_tensor_info_get(p, i, 0, &ti) == 0 && ti.dtype != PULSE_DT_OPAQUE)
            n += ti.nelems;
    }
    return n;
}

void cli_opaque_note(char *buf, size_t cap, uint64_t opaque_changes)
{
    if (!opaque_changes)
        snprintf(buf, cap, "%s", "");
    else
        snprintf(buf, cap, " and %" PRIu64 " changed byte%s in opaque tensors", opaque_changes,
                 opaque_changes == 1 ? "" : "s");
}

int cli_parse_part(const char *s, uint32_t *part, uint32_t *parts)
{
    const char *slash = strchr(s, '/');
    char head[32];
    uint64_t a, b;
    if (!slash || (size_t)(slash - s) >= sizeof head)
        return -1;
    memcpy(head, s, (size_t)(slash - s));
    head[slash - s] = 0;
    if (cli_parse_u64(head, &a) || cli_parse_u64(slash + 1, &b) || b < 1 || b > 4096 || a >= b)
        return -1;
    *part = (uint32_t)a;
    *parts = (uint32_t)b;
    return 0;
}
