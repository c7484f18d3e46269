/* Small helpers shared by the hakmem tests.
 *
 * CHECK(cond) / CHECKF(cond, fmt, ...): on failure print file:line and the
 * failing expression (formatted into a stack buffer and written with write(2),
 * so a broken heap cannot hide the message) and exit with status 1.
 *
 * A(f): the allocation function under test. Compiled with -DUSE_HAK_API the
 * tests call hakmem's hak_ names (standard names stay with the C library);
 * otherwise they call the standard names, which libhakmem overrides.
 */
#ifndef HAKMEM_TESTUTIL_H
#define HAKMEM_TESTUTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hakmem.h"

#ifdef USE_HAK_API
#define A(f) hak_##f
#define API_NAME "hak_ API"
#else
#define A(f) f
#define API_NAME "standard names"
#endif

static inline void tu_write_str(int fd, const char *s)
{
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

__attribute__((noreturn, format(printf, 4, 5)))
static void tu_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "%s:%d: CHECK failed: %s", file, line, expr);
  if (n < 0 || n >= (int)sizeof buf) n = (int)sizeof buf - 1;
  if (fmt != NULL && n < (int)sizeof buf - 4) {
    va_list ap;
    va_start(ap, fmt);
    buf[n++] = ' ';
    buf[n++] = '(';
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 2, fmt, ap);
    va_end(ap);
    if (m > 0) n += m < (int)(sizeof buf - (size_t)n - 2) ? m : (int)(sizeof buf - (size_t)n - 3);
    buf[n++] = ')';
  }
  buf[n++] = '\n';
  buf[n] = 0;
  tu_write_str(2, buf);
  _exit(1);
}

#define CHECK(cond) \
  do { if (__builtin_expect(!(cond), 0)) tu_fail(__FILE__, __LINE__, #cond, NULL); } while (0)
#define CHECKF(cond, ...) \
  do { if (__builtin_expect(!(cond), 0)) tu_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); } while (0)

/* Keeps the compiler from reasoning about (and eliding) allocations. */
static void *volatile tu_sink;
static inline void *tu_launder(void *p) { tu_sink = p; return tu_sink; }

static inline uint64_t tu_xorshift(uint64_t *s)
{
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static inline double tu_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Resident set size of this process in bytes (from /proc/self/statm). */
static inline size_t tu_rss(void)
{
  char buf[128];
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  unsigned long size = 0, res = 0;
  if (sscanf(buf, "%lu %lu", &size, &res) != 2) return 0;
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* Position-dependent pattern: word i of a block with identity id. The byte at
 * offset o is byte (o % 8) of word o / 8 (little endian), so it does not
 * depend on the block's address or size. */
static inline uint64_t tu_pat(uint64_t id, size_t wi)
{
  return (id * 0x9E3779B97F4A7C15ull) ^ (wi * 0xD6E8FEB86659FD93ull) ^ 0x5555AAAA5555AAAAull;
}
static inline uint8_t tu_pat_byte(uint64_t id, size_t o)
{
  return (uint8_t)(tu_pat(id, o >> 3) >> ((o & 7) * 8));
}

/* Fill bytes [from, to) of p; from must be a multiple of 8 when p is. */
static inline void tu_fill(void *p, size_t from, size_t to, uint64_t id)
{
  unsigned char *b = (unsigned char *)p;
  size_t o = from;
  while (o < to && ((uintptr_t)(b + o) & 7) != 0) { b[o] = tu_pat_byte(id, o); o++; }
  if ((o & 7) == 0) {
    size_t w0 = o >> 3, w1 = to >> 3;
    uint64_t *w = (uint64_t *)(void *)b;
    for (size_t i = w0; i < w1; i++) w[i] = tu_pat(id, i);
    if (w1 > w0) o = w1 << 3;
  }
  for (; o < to; o++) b[o] = tu_pat_byte(id, o);
}

/* Returns the first offset in [from, to) that does not hold the pattern, or
 * (size_t)-1 when all do. */
static inline size_t tu_verify(const void *p, size_t from, size_t to, uint64_t id)
{
  const unsigned char *b = (const unsigned char *)p;
  size_t o = from;
  while (o < to && ((uintptr_t)(b + o) & 7) != 0) { if (b[o] != tu_pat_byte(id, o)) return o; o++; }
  if ((o & 7) == 0) {
    size_t w0 = o >> 3, w1 = to >> 3;
    const uint64_t *w = (const uint64_t *)(const void *)b;
    uint64_t bad = 0;
    for (size_t i = w0; i < w1; i++) bad |= w[i] ^ tu_pat(id, i);
    if (bad != 0) {
      for (size_t i = w0; i < w1; i++)
        if (w[i] != tu_pat(id, i)) {
          for (size_t k = i << 3; k < (i << 3) + 8; k++)
            if (b[k] != tu_pat_byte(id, k)) return k;
        }
    }
    if (w1 > w0) o = w1 << 3;
  }
  for (; o < to; o++) if (b[o] != tu_pat_byte(id, o)) return o;
  return (size_t)-1;
}

#endif
