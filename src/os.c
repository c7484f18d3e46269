/* The OS layer: mmap, munmap, madvise, mremap, write. See os.h for contracts. */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static size_t page_size_cached;

size_t os_page_size(void) {
  if (page_size_cached == 0) {
    long ps = sysconf(_SC_PAGESIZE);
    page_size_cached = ps > 0 ? (size_t)ps : 4096;
  }
  return page_size_cached;
}

void *os_map_aligned(size_t size, size_t align) {
  /* Try the exact size first: the kernel often hands out neighbouring,
   * already aligned addresses. Otherwise over-map and trim both ends. */
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (((uintptr_t)p & (align - 1)) == 0) return p;
  munmap(p, size);
  size_t over = size + align;
  if (over < size) return NULL;
  char *q = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (q == MAP_FAILED) return NULL;
  char *aligned = (char *)(((uintptr_t)q + align - 1) & ~(uintptr_t)(align - 1));
  if (aligned > q) munmap(q, (size_t)(aligned - q));
  size_t tail = (size_t)(q + over - (aligned + size));
  if (tail) munmap(aligned + size, tail);
  return aligned;
}

void os_unmap(void *p, size_t size) {
  if (size) munmap(p, size);
}

size_t os_purge(void *p, size_t size) {
  if (size == 0) return 0;
  return madvise(p, size, MADV_DONTNEED) == 0 ? size : 0;
}

void *os_remap(void *p, size_t old_size, size_t new_size, void *fixed_at) {
  void *q = fixed_at ? mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, fixed_at)
                     : mremap(p, old_size, new_size, 0);
  return q == MAP_FAILED ? NULL : q;
}

void os_write_fd(int fd, const char *s, size_t len) {
  int saved = errno;
  while (len > 0) {
    ssize_t n = write(fd, s, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s += n;
    len -= (size_t)n;
  }
  errno = saved;
}

void os_write_stderr(const char *s, size_t len) { os_write_fd(2, s, len); }

uint64_t os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

size_t os_resident_bytes(void) {
  int saved = errno;
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  size_t pages = 0;
  if (fd >= 0) {
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    int field = 0;
    for (ssize_t i = 0; i < n && field < 2; i++) {
      if (buf[i] == ' ') field++;
      else if (field == 1 && buf[i] >= '0' && buf[i] <= '9') pages = pages * 10 + (size_t)(buf[i] - '0');
    }
  }
  errno = saved;
  return pages * os_page_size();
}

const char *os_getenv(const char *name) {
  char **env = environ;
  if (env == NULL) return NULL;
  for (; *env; env++) {
    const char *e = *env, *n = name;
    while (*n && *e == *n) e++, n++;
    if (*n == 0 && *e == '=') return e + 1;
  }
  return NULL;
}

long os_thread_id(void) { return syscall(SYS_gettid); }

void os_yield(void) { sched_yield(); }

void os_out_flush(os_out_t *o) {
  os_write_fd(o->fd, o->buf, o->len);
  o->len = 0;
}

void os_out_str(os_out_t *o, const char *s) {
  for (; *s; s++) {
    if (o->len == sizeof o->buf) os_out_flush(o);
    o->buf[o->len++] = *s;
  }
}

void os_out_uint(os_out_t *o, uint64_t v, int width) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10), v /= 10; while (v);
  char pad[48];
  int p = 0;
  while (p < width - n && p < 23) pad[p++] = ' ';
  while (n) pad[p++] = tmp[--n];
  pad[p] = 0;
  os_out_str(o, pad);
}

void os_out_hex(os_out_t *o, uintptr_t v) {
  char tmp[19] = "0x";
  int n = 2;
  for (int shift = 60; shift >= 0; shift -= 4) {
    unsigned d = (v >> shift) & 15;
    if (n > 2 || d || shift == 0) tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
  }
  tmp[n] = 0;
  os_out_str(o, tmp);
}
