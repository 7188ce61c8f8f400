/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON form of what publish and pull did, for their --json output. */
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
