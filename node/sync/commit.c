/* SPDX-License-Identifier: Apache-2.0 */
/* The commit point of every flow: a signed record written create-if-absent, idempotent across crashes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/sync/sync_internal.h"

int sync_same_transition(const pulse_record *prev, const pulse_record *mine)
{
    return prev->kind == mine->kind && !memcmp(prev->node, mine->node, 32) &&
           !memcmp(prev->base, mine->base, 32) && !memcmp(prev->result, mine->result, 32);
}

int sync_commit_record(pulse_store *st, const char *run, const pulse_secret_key *key, pulse_record *rec,
                       sync_same_fn same, char rel[SYNC_KEY_MAX], uint8_t **bytes, size_t *len,
                       uint64_t *moved)
{
    char k[SYNC_KEY_MAX];
    int r = pulse_record_sign(rec, key, bytes, len);
    if (!r)
        r = pulse_record_key(rec, rel, SYNC_KEY_MAX);
    if (!r)
        r = sync_run_key(run, rel, k);
    if (!r)
        r = pulse_store_put(st, k, *bytes, *len, PULSE_PUT_IF_ABSENT);
    if (r == 0) {
        *moved += *len;
        return 0;
    }
    if (r != PULSE_ERR_EXISTS)
        return r;

    /* A record is already there for this kind, step and node: a re-run after a crash. It is
     * accepted when it says the same thing (as the caller defines it), and its bytes are kept,
     * so what this node indexes is exactly what readers see. */
    void *old = NULL;
    size_t old_len = 0;
    pulse_record prev = { 0 };
    r = pulse_store_get(st, k, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &old, &old_len, NULL);
    if (!r)
        r = pulse_record_parse(old, old_len, &prev);
    if (!r && !same(&prev, rec))
        r = pulse_fail(PULSE_ERR_EXISTS, "%s already holds a different %s record for step %llu", k,
                       pulse_record_kind_name(rec->kind), (unsigned long long)rec->step);
    pulse_record_clear(&prev);
    if (!r) {
        free(*bytes);
        *bytes = malloc(old_len ? old_len : 1);
        if (!*bytes)
            r = pulse_fail(PULSE_ERR_NOMEM, "record");
        else
            memcpy(*bytes, old, old_len), *len = old_len;
    }
    pulse_store_free(old);
    return r;
}

void sync_step_from_record(pulse_sync_step *s, const pulse_record *rec, const char *rel)
{
    s->step = rec->step;
    s->kind = rec->kind;
    memcpy(s->base, rec->base, 32);
    memcpy(s->result, rec->result, 32);
    s->changes = rec->changes;
    s->dense_bytes = rec->dense_bytes;
    s->object_bytes = rec->patch_bytes;
    snprintf(s->record_key, sizeof s->record_key, "%s", rel);
}
