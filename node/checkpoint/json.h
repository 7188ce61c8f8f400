/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a strict JSON parser into a compact tree, for safetensors headers and index files. */
#ifndef PULSE_NODE_CHECKPOINT_JSON_H
#define PULSE_NODE_CHECKPOINT_JSON_H

#include <stddef.h>
#include <stdint.h>

enum json_type { JSON_OBJECT, JSON_ARRAY, JSON_STRING, JSON_INT, JSON_NUMBER, JSON_TRUE,
                 JSON_FALSE, JSON_NULL };

#define JSON_NONE UINT32_MAX
#define JSON_MAX_DEPTH 32
/* Bounds the tree a hostile header can make us allocate (24 bytes a node). */
#define JSON_MAX_NODES (16u << 20)

/* One value. Strings (and keys) are decoded to UTF-8 and NUL-terminated in the string
 * buffer; embedded NUL (\u0000) is refused so C strings are exact. */
typedef struct json_node {
    uint64_t val;    /* INT: the value; STRING: offset in strs; NUMBER: offset of its text in the input */
    uint32_t first;  /* OBJECT/ARRAY: first child or JSON_NONE */
    uint32_t next;   /* next sibling or JSON_NONE */
    uint32_t key;    /* member of an OBJECT: offset of its key in strs */
    uint8_t type;
} json_node;

typedef struct json_doc {
    json_node *nodes;   /* nodes[0] is the root */
    size_t count, cap;
    char *strs;         /* decoded strings */
    size_t strs_fill;
} json_doc;

/* Parses text[0..len): one value, then only whitespace. Integers are non-negative and
 * fit in 63 bits (JSON_INT); other numbers are kept as JSON_NUMBER. Duplicate keys in an
 * object, bad UTF-8, control characters in strings, nesting deeper than JSON_MAX_DEPTH
 * are refused. Returns 0, PULSE_ERR_FORMAT / PULSE_ERR_LIMIT / PULSE_ERR_NOMEM (detail
 * starts with `what` and gives the byte offset). On failure *d is freed. */
int json_parse(json_doc *d, const char *text, size_t len, const char *what);
void json_free(json_doc *d);

static inline const json_node *json_at(const json_doc *d, uint32_t i)
{
    return i == JSON_NONE ? NULL : &d->nodes[i];
}
static inline const char *json_str(const json_doc *d, const json_node *n) { return d->strs + n->val; }
static inline const char *json_key(const json_doc *d, const json_node *n) { return d->strs + n->key; }

/* Member of an object by key, or NULL. Linear: for objects with few members. */
const json_node *json_get(const json_doc *d, const json_node *obj, const char *key);

/* Appends s as a JSON string literal (quotes, escapes) to *buf (grown with realloc).
 * Returns 0 or PULSE_ERR_NOMEM. */
int json_append_string(char **buf, size_t *len, size_t *cap, const char *s);
int json_append_raw(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

#endif
