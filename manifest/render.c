/* SPDX-License-Identifier: Apache-2.0 */
/* Readable and JSON renderings of a record, for `pulse manifest show` and the audit. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/fail.h"
#include "pulseweights/record.h"

static void hex(FILE *f, const uint8_t *p, size_t n)
{
    char buf[2 * PULSE_SIGNATURE_BYTES + 1];
    pulse_hex_encode(p, n, buf);
    fputs(buf, f);
}

static int is_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* The parser admits only printable ASCII and valid UTF-8 in strings, so only '"' and '\\' need escaping. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void utc(uint64_t t, char *buf, size_t cap)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if ((uint64_t)tt != t || !gmtime_r(&tt, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, cap, "?");
}

static void render_text(const pulse_record *r, const pulse_public_key *signer, FILE *f)
{
    char when[40];
    utc(r->time, when, sizeof when);
    fprintf(f, "record %s (format v%u)\n", pulse_record_kind_name(r->kind), r->version);
    fprintf(f, "  run          %s\n  step         %llu\n  node         ", r->run, (unsigned long long)r->step);
    hex(f, r->node, sizeof r->node);
    if (signer)
        fprintf(f, " (%s)", signer->comment);
    fprintf(f, "\n  time         %llu (%s)\n  base         ", (unsigned long long)r->time, when);
    if (is_zero(r->base, sizeof r->base)) fputs("-", f); else hex(f, r->base, sizeof r->base);
    fputs("\n  result       ", f);
    if (is_zero(r->result, sizeof r->result)) fputs("-", f); else hex(f, r->result, sizeof r->result);
    fprintf(f, "\n  changes      %llu\n  dense bytes  %llu\n  patch bytes  %llu",
            (unsigned long long)r->changes, (unsigned long long)r->dense_bytes, (unsigned long long)r->patch_bytes);
    if (r->dense_bytes)
        fprintf(f, " (%.2f%% of dense)", 100.0 * (double)r->patch_bytes / (double)r->dense_bytes);
    fprintf(f, "\n  objects      %u\n", r->n_objects);
    for (uint32_t i = 0; i < r->n_objects; i++) {
        const pulse_record_object *o = &r->objects[i];
        fprintf(f, "    %4u ", i);
        hex(f, o->digest, sizeof o->digest);
        fprintf(f, " %12llu %s", (unsigned long long)o->size, o->role);
        if (o->tensor[0])
            fprintf(f, " %s", o->tensor);
        if (o->range_offset || o->range_length)
            fprintf(f, " [%llu+%llu]", (unsigned long long)o->range_offset, (unsigned long long)o->range_length);
        fputc('\n', f);
    }
    fputs("  signature    ", f);
    hex(f, r->signature, sizeof r->signature);
    fputc('\n', f);
}

static void render_json(const pulse_record *r, const pulse_public_key *signer, FILE *f)
{
    fprintf(f, "{\"version\":%u,\"kind\":\"%s\",\"run\":", r->version, pulse_record_kind_name(r->kind));
    json_string(f, r->run);
    fprintf(f, ",\"step\":%llu,\"node\":\"", (unsigned long long)r->step);
    hex(f, r->node, sizeof r->node);
    fputs("\",\"signer\":", f);
    if (signer)
        json_string(f, signer->comment);
    else
        fputs("null", f);
    fprintf(f, ",\"time\":%llu,\"base\":\"", (unsigned long long)r->time);
    hex(f, r->base, sizeof r->base);
    fputs("\",\"result\":\"", f);
    hex(f, r->result, sizeof r->result);
    fprintf(f, "\",\"changes\":%llu,\"dense_bytes\":%llu,\"patch_bytes\":%llu,\"objects\":[",
            (unsigned long long)r->changes, (unsigned long long)r->dense_bytes, (unsigned long long)r->patch_bytes);
    for (uint32_t i = 0; i < r->n_objects; i++) {
        const pulse_record_object *o = &r->objects[i];
        fprintf(f, "%s{\"digest\":\"", i ? "," : "");
        hex(f, o->digest, sizeof o->digest);
        fprintf(f, "\",\"size\":%llu,\"role\":", (unsigned long long)o->size);
        json_string(f, o->role);
        fputs(",\"tensor\":", f);
        json_string(f, o->tensor);
        fprintf(f, ",\"range_offset\":%llu,\"range_length\":%llu}", (unsigned long long)o->range_offset,
                (unsigned long long)o->range_length);
    }
    fputs("],\"signature\":\"", f);
    hex(f, r->signature, sizeof r->signature);
    fputs("\"}\n", f);
}

PULSE_API int pulse_record_render(const pulse_record *r, const pulse_public_key *signer, int format, FILE *f)
{
    if (!r || !f || !r->run || (r->n_objects && !r->objects))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_render: NULL argument");
    if (!pulse_record_kind_name(r->kind))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_render: kind %u unknown", r->kind);
    if (format == PULSE_RENDER_JSON)
        render_json(r, signer, f);
    else if (format == PULSE_RENDER_TEXT)
        render_text(r, signer, f);
    else
        return pulse_fail(PULSE_ERR_INVALID, "pulse_record_render: format %d unknown", format);
    if (ferror(f))
        return pulse_fail(PULSE_ERR_IO, "could not write the record rendering");
    return 0;
}
