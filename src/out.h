/* Text output without allocating: a buffer on the stack, flushed with
 * write(2). The allocator's messages, its statistics and its JSON go out
 * this way. Layer 0. */
#ifndef HAKMEM_OUT_H
#define HAKMEM_OUT_H

#include "base.h"

typedef struct {
  char buf[512];
  size_t len;
  int fd;      /* flushed to fd; -1: into mem instead */
  char *mem;   /* with fd -1: the caller's buffer, of cap bytes */
  size_t cap, total; /* total: bytes written so far (also beyond cap) */
} out_t;

/* An out_t that writes to fd. */
#define OUT_FD(f) ((out_t){.fd = (f)})
/* An out_t that fills buf (cap bytes, always NUL-terminated if cap > 0). */
out_t out_mem(char *buf, size_t cap);

void out_str(out_t *o, const char *s);
void out_char(out_t *o, char c);
void out_uint(out_t *o, uint64_t v, int width);
void out_int(out_t *o, int64_t v);
void out_hex(out_t *o, uintptr_t v);
/* Writes what is buffered; with a memory target, terminates the string.
 * Returns the total bytes written so far. */
size_t out_flush(out_t *o);

/* "hakmem: <what>: <pointer><problem>" on stderr. */
void out_pointer_line(const char *what, const void *p, const char *problem);

#endif
