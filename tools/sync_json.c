/* SPDX-License-Identifier: Apache-2.0 */
/* What publish, commit and pull did, as their output line or --json object. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pulseweights/record.h"
#include "tools/cli.h"
#include "tools/sync_json.h"

void sync_json_step_fields(const pulse_sync_step *s)
{
    static const uint8_t zero[32];
    char hex[65];
    printf("\"step\":%" PRIu64 ",\"kind\":", s->step);
    cli_json_str(pulse_record_kind_name(s->kind));
    printf(",\"record\":");
    cli_json_str(s->record_key);
    if (memcmp(s->base, zero, 32))
        printf(",\"base\":\"%s\"", pulse_id_hex(s->base, hex));
    else
        printf(",\"base\":null");
    printf(",\"state\":\"%s\",\"changes\":%" PRIu64 ",\"dense_bytes\":%" PRIu64 ",\"object_bytes\":%" PRIu64
           ",\"bytes\":%" PRIu64,
           pulse_id_hex(s->result, hex), s->changes, s->dense_bytes, s->object_bytes, s->moved_bytes);
}

void sync_print_published(const pulse_sync_step *s, int json)
{
    char hex[65];
    if (json) {
        putchar('{');
        sync_json_step_fields(s);
        printf(",\"already\":%s}\n", s->already ? "true" : "false");
    } else if (s->already)
        printf("step %" PRIu64 ": state %.16s already published (%s)\n", s->step, pulse_id_hex(s->result, hex),
               s->record_key);
    else
        printf("step %" PRIu64 ": %s %s, %" PRIu64 " changes, %" PRIu64 " bytes of objects for %" PRIu64
               " dense (%.2f%%), %" PRIu64 " bytes uploaded, state %.16s\n",
               s->step, pulse_record_kind_name(s->kind), s->record_key, s->changes, s->object_bytes, s->dense_bytes,
               s->dense_bytes ? 100.0 * (double)s->object_bytes / (double)s->dense_bytes : 0.0, s->moved_bytes,
               pulse_id_hex(s->result, hex));
}
