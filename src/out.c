/* Text output into a stack buffer, then to a file descriptor or the caller's
 * memory. */
#include "out.h"

out_t out_mem(char *buf, size_t cap) {
  out_t o = {.fd = -1, .mem = buf, .cap = cap};
  if (cap) buf[0] = 0;
  return o;
}

size_t out_flush(out_t *o) {
  if (o->fd >= 0) {
    os_write_fd(o->fd, o->buf, o->len);
  } else if (o->mem) {
    size_t at = o->total, room = at < o->cap ? o->cap - at : 0;
    size_t n = o->len < room ? o->len : room;
    for (size_t i = 0; i < n; i++) o->mem[at + i] = o->buf[i];
    if (o->cap) o->mem[at + n < o->cap ? at + n : o->cap - 1] = 0;
  }
  o->total += o->len;
  o->len = 0;
  return o->total;
}

void out_char(out_t *o, char c) {
  if (o->len == sizeof o->buf) out_flush(o);
  o->buf[o->len++] = c;
}

void out_str(out_t *o, const char *s) {
  for (; *s; s++) out_char(o, *s);
}

void out_uint(out_t *o, uint64_t v, int width) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10), v /= 10; while (v);
  for (int p = n; p < width; p++) out_char(o, ' ');
  while (n) out_char(o, tmp[--n]);
}

void out_int(out_t *o, int64_t v) {
  if (v < 0) out_char(o, '-');
  out_uint(o, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, 0);
}

void out_hex(out_t *o, uintptr_t v) {
  out_str(o, "0x");
  bool any = false;
  for (int shift = (int)sizeof v * 8 - 4; shift >= 0; shift -= 4) {
    unsigned d = (unsigned)(v >> shift) & 15;
    if (any || d || shift == 0) out_char(o, (char)(d < 10 ? '0' + d : 'a' + d - 10)), any = true;
  }
}

void out_pointer_line(const char *what, const void *p, const char *problem) {
  out_t o = OUT_FD(2);
  out_str(&o, "hakmem: ");
  out_str(&o, what);
  out_str(&o, ": ");
  out_hex(&o, (uintptr_t)p);
  out_str(&o, problem);
  out_flush(&o);
}
