/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a growable byte buffer for building request text, XML and response bodies. */
#ifndef PULSE_STORE_BUF_H
#define PULSE_STORE_BUF_H

#include <stddef.h>

/* Always NUL-terminated when data != NULL; oom latches so callers check once at the end. */
struct buf {
    char *data;
    size_t len;
    size_t cap;
    int oom;
};

void buf_add(struct buf *b, const void *p, size_t n);
void buf_adds(struct buf *b, const char *s);
void buf_addc(struct buf *b, char c);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Returns the string (caller frees) or NULL when any append ran out of memory. */
char *buf_take(struct buf *b);
void buf_free(struct buf *b);

#endif
