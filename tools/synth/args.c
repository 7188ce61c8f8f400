/* SPDX-License-Identifier: Apache-2.0 */
/* Option parsing shared by the verbs built on the synthetic trainer (synth, bench, demo). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/synth/args.h"

int synth_arg(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *val = argv[++*i];
    return 1;
}

int synth_parse_count(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);       /* "1.5B" is a fine size too */
    if (errno || end == s)
        return -1;
    double mult = 1;
    switch (*end) {
    case 'K': case 'k': mult = 1e3; end++; break;
    case 'M': case 'm': mult = 1e6; end++; break;
    case 'B': case 'b': case 'G': case 'g': mult = 1e9; end++; break;
    default: break;
    }
    v *= mult;
    if (*end || !(v >= 0) || v > 1e18)
        return -1;
    *out = (uint64_t)llround(v);
    return 0;
}

int synth_parse_positive(const char *s, double max, double *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v <= 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

int synth_parse_threads(const char *s, int *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > 256)
        return -1;
    *out = (int)v;
    return 0;
}
