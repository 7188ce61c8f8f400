/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the one owner of a run's bucket key layout (docs/sync.md "Bucket layout"): every key is formatted and parsed here. */
#ifndef PULSE_MANIFEST_LAYOUT_H
#define PULSE_MANIFEST_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Keys relative to the run ("REL"; the store key is "<run>/REL", pulse_layout_join):
 *   records/<kind>/<step:012>/<node-hex>   a signed record of any kind but a receipt
 *   receipts/<node-hex>/<step:012>         a follower's receipt
 *   heads/sync/<node-hex>                  a node's head: its newest record's REL on the first line
 *                                          (then the record itself, pulse_layout_head_content)
 *   objects/<sha256-hex>                   a content-addressed object
 *   loco-rs/<round:012>/<attempt:02>/<name> a LoCo reduce-scatter key (name: "plan" or a node-hex)
 * Steps and rounds are 12 decimal digits, hex is 64 lower-case digits; a parser takes exactly
 * that and nothing after it, so one record has one key and bytewise listing order is step order. */

#define PULSE_LAYOUT_STEP_DIGITS 12

/* The areas of a run, for classifying a listed key ("heads/" holds "heads/sync/<node-hex>"). */
#define PULSE_LAYOUT_RECORDS "records/"
#define PULSE_LAYOUT_RECEIPTS "receipts/"
#define PULSE_LAYOUT_HEADS "heads/"
#define PULSE_LAYOUT_HEADS_SYNC "heads/sync/"
#define PULSE_LAYOUT_OBJECTS "objects/"
#define PULSE_LAYOUT_LOCO_RS "loco-rs/"
/* Whether REL lies in AREA (one of the above). */
#define PULSE_LAYOUT_IN(rel, area) (strncmp((rel), area, sizeof area - 1) == 0)

/* Every formatter writes a NUL-terminated key to OUT[0..CAP) and returns 0, or
 * PULSE_ERR_LIMIT (OUT too small) / PULSE_ERR_INVALID (an unknown kind). */

/* The key of a record of KIND at STEP by NODE: records/... or, for a receipt, receipts/... */
int pulse_layout_record(char *out, size_t cap, int kind, uint64_t step, const uint8_t node[32]);
/* A listing prefix: "records/" (KIND 0), "records/<kind>/" (STEP UINT64_MAX), or
 * "records/<kind>/<step:012>/". */
int pulse_layout_records_prefix(char *out, size_t cap, int kind, uint64_t step);
/* "heads/sync/<node-hex>". */
int pulse_layout_head(char *out, size_t cap, const uint8_t node[32]);
/* "objects/<hex>"; "objects/" with DIGEST NULL (a listing prefix). */
int pulse_layout_object(char *out, size_t cap, const uint8_t *digest);
/* "loco-rs/<round:012>/<attempt:02>/<name>"; "loco-rs/<round:012>/" with NAME NULL. */
int pulse_layout_loco_rs(char *out, size_t cap, uint64_t round, unsigned attempt, const char *name);
/* "<run>/<rel>" after the run-name rule (pulse_check_run: its error when RUN breaks it). */
int pulse_layout_join(char *out, size_t cap, const char *run, const char *rel);

/* A step published in parts (docs/sync.md, "A trainer in parts"): part I (0-based) of N of run R
 * is the run "R.part-I-of-N" (decimal, no leading zeros, 1 <= N <= PULSE_LAYOUT_MAX_PARTS), and a
 * run shares one object space with its parts: the objects of every run of the family lie under
 * "R/objects/", so the record committing a step of R names its parts' objects where they are. */
#define PULSE_LAYOUT_MAX_PARTS 4096u
int pulse_layout_part_run(char *out, size_t cap, const char *run, unsigned part, unsigned parts);
/* Whether RUN is a part run: 0 with *parent_len (bytes of R), *part, *parts; else -1. */
int pulse_layout_parse_part_run(const char *run, size_t *parent_len, unsigned *part, unsigned *parts);
/* Whether S may name a file of a sharded keyframe (docs/sync.md): [A-Za-z0-9._-]+ ending in
 * .safetensors, not starting with '.', at most 255 bytes. A plain name, so no record can make a
 * follower write outside the directory it restores into. */
int pulse_layout_shard_name_ok(const char *s);
/* "<object run>/objects/<hex>": the key of an object that a record of RUN names (the parent's
 * objects/ for a part run). */
int pulse_layout_object_key(char *out, size_t cap, const char *run, const uint8_t digest[32]);

/* Every parser returns 0 when REL is exactly such a key, else -1 (outputs then unspecified);
 * it sets no error detail. */

/* A record or receipt key: its kind (a known kind; a receipt only under receipts/), step, node. */
int pulse_layout_parse_record(const char *rel, int *kind, uint64_t *step, uint8_t node[32]);
/* heads/sync/<node-hex>. */
int pulse_layout_parse_head(const char *rel, uint8_t node[32]);
/* objects/<hex>. */
int pulse_layout_parse_object(const char *rel, uint8_t digest[32]);
/* What follows "loco-rs/<round:012>/" (a listing of pulse_layout_loco_rs(..., NULL)):
 * "<attempt:02>/<name>", NAME "plan" (*is_plan 1) or a node-hex (*is_plan 0, NODE set). */
int pulse_layout_parse_loco_rs_tail(const char *tail, unsigned *attempt, int *is_plan, uint8_t node[32]);
/* S is exactly 64 lower-case hex digits (a node id or digest): decoded into OUT. */
int pulse_layout_parse_hex32(const char *s, size_t n, uint8_t out[32]);

/* A head's content: the REL of the node's newest record on the first line; then the unix time in
 * milliseconds when the head was written, on the second; then that record's signed bytes, so a
 * follower polling the head holds the record without a second request (a round trip less per
 * step). A reader of the first line alone (older followers, `pulse status`) sees what it always
 * did. Nothing in a head is trusted: the record in it is verified as any other, and the time is
 * only for the "seen" figure of a follower's step. *out is malloc'd. */
#define PULSE_LAYOUT_HEAD_MAX (1024u + (16u << 20))   /* a key line, a time line, a record */
int pulse_layout_head_content(uint8_t **out, size_t *len, const char *rel, uint64_t unix_ms, const uint8_t *record,
                              size_t record_len);
/* Parses a head's content: its first line (without '\n') into REL[0..CAP) (a line that does not
 * fit, holds a NUL or is empty: -1); the time (0 when absent) and the record bytes (pointer into
 * DATA; length 0 when absent, as in a head of one line). 0, or -1 (no error detail). */
int pulse_layout_parse_head_content(const void *data, size_t len, char *rel, size_t cap, uint64_t *unix_ms,
                                    const uint8_t **record, size_t *record_len);

/* The loose shape a record key may have, for retention (node/daemon/retention.c), which judges a
 * record by its content and never by its key: "records/<kind>/<digits>/<name>" with KIND any
 * 1..31 bytes (copied to kind_name, NUL-terminated; not checked against the known kinds), 1..19
 * digits (*step) and NAME any bytes without '/' (pointer into REL). 0, or -1. */
int pulse_layout_split_record(const char *rel, char kind_name[32], uint64_t *step, const char **name);

#endif
