/* The OS layer: system calls only. See os.h for the contracts.
 *
 * Calls are made directly (raw_syscall), not through the C library's
 * wrappers: they never touch errno (malloc must leave it alone on success)
 * nor any other thread-local state. Under a sanitizer the mapping calls go
 * through the wrappers, which the sanitizer intercepts. */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
static long raw_syscall(long n, long a, long b, long c, long d, long e, long f) {
  long ret;
  register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
static long raw_syscall(long n, long a, long b, long c, long d, long e, long f) {
  register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b, x2 __asm__("x2") = c,
                x3 __asm__("x3") = d, x4 __asm__("x4") = e, x5 __asm__("x5") = f;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
}
#else
static long raw_syscall(long n, long a, long b, long c, long d, long e, long f) {
  int saved = errno;
  long ret = syscall(n, a, b, c, d, e, f);
  if (ret == -1) ret = -errno;
  errno = saved;
  return ret;
}
#endif
#define SYS(n, a, b, c, d, e, f) raw_syscall(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
#define MIN_SIZE(a, b) ((a) < (b) ? (a) : (b))
/* A raw result in [-4095, -1] is an error number. */
static bool failed(long ret) { return (unsigned long)ret > -4096UL; }

#if HAK_UNDER_SANITIZER
#define MAP_CALL(n, a, b, c, d, e, f) sanitized_call(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
static long sanitized_call(long n, long a, long b, long c, long d, long e, long f) {
  int saved = errno;
  long ret;
  switch (n) {
  case SYS_mmap: ret = (long)mmap((void *)a, (size_t)b, (int)c, (int)d, (int)e, (off_t)f); break;
  case SYS_munmap: ret = munmap((void *)a, (size_t)b); break;
  case SYS_madvise: ret = madvise((void *)a, (size_t)b, (int)c); break;
  case SYS_mprotect: ret = mprotect((void *)a, (size_t)b, (int)c); break;
  default: ret = (long)mremap((void *)a, (size_t)b, (size_t)c, (int)d, (void *)e); break;
  }
  if (ret == -1) ret = -errno;
  errno = saved;
  return ret;
}
#else
#define MAP_CALL SYS
#endif

_Atomic uint64_t os_calls[OS_CALL_KINDS];
#define COUNT(kind) atomic_fetch_add_explicit(&os_calls[kind], 1, memory_order_relaxed)

uint64_t os_calls_total(void) {
  uint64_t n = 0;
  for (int k = 0; k < OS_CALL_KINDS; k++) n += atomic_load_explicit(&os_calls[k], memory_order_relaxed);
  return n;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#define MAP_FLAGS (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)

static void *map_call(void *addr, size_t size, int flags, long *err) {
  COUNT(OS_MMAP);
  long p = MAP_CALL(SYS_mmap, addr, size, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (err) *err = failed(p) ? -p : 0;
  return failed(p) ? NULL : (void *)p;
}

/* For ranges never touched: nothing to flush, so one call whatever the size. */
void os_unmap_untouched(void *p, size_t size) {
  COUNT(OS_MUNMAP);
  MAP_CALL(SYS_munmap, p, size, 0, 0, 0, 0);
}

void *os_map(size_t size) { return map_call(NULL, size, MAP_FLAGS, NULL); }

/* A kernel before 4.17 takes MAP_FIXED_NOREPLACE for a hint and may map
 * elsewhere: that mapping is undone and NULL returned. */
void *os_map_at(void *addr, size_t size, bool *taken) {
  long err;
  void *p = map_call(addr, size, MAP_FLAGS | MAP_FIXED_NOREPLACE, &err);
  *taken = err == EEXIST;
  if (p != NULL && p != addr) {
    os_unmap_untouched(p, size);
    p = NULL;
  }
  return p;
}

void *os_map_aligned(size_t size, size_t align) {
  /* Try the exact size first: the kernel often hands out neighbouring,
   * already aligned addresses. Otherwise over-map and trim both ends. */
  char *p = os_map(size);
  if (p == NULL || ((uintptr_t)p & (align - 1)) == 0) return p;
  os_unmap_untouched(p, size);
  size_t over = size + align;
  if (over < size) return NULL;
  char *q = os_map(over);
  if (q == NULL) return NULL;
  char *aligned = (char *)(((uintptr_t)q + align - 1) & ~(uintptr_t)(align - 1));
  if (aligned > q) os_unmap_untouched(q, (size_t)(aligned - q));
  size_t tail = (size_t)(q + over - (aligned + size));
  if (tail) os_unmap_untouched(aligned + size, tail);
  return aligned;
}

/* Memory that may be resident goes back in pieces of at most RELEASE_PIECE:
 * under shadow paging (a nested VM) one munmap or madvise of more than a
 * few MiB can flush the whole process's shadow page tables, after which
 * every resident page faults again (docs/experiments.md). Beyond
 * RELEASE_PIECED bytes the rest goes in one call: thousands of calls would
 * cost more than one flush, and the tail of a block that large is seldom
 * all touched. */
#define RELEASE_PIECE ((size_t)2 << 20)
#define RELEASE_PIECED ((size_t)64 << 20)

/* Each piece's call result, negative errno on failure, goes to done(). */
static bool release(long n, int kind, char *p, size_t size, long advice, void (*done)(char *, size_t, long)) {
  bool ok = true;
  for (size_t off = 0; off < size;) {
    size_t len = size - off;
    if (off < RELEASE_PIECED && len > RELEASE_PIECE) len = RELEASE_PIECE;
    COUNT(kind);
    long r = MAP_CALL(n, p + off, len, advice, 0, 0, 0);
    ok &= !failed(r);
    if (done) done(p + off, len, r);
    off += len;
  }
  return ok;
}

void os_unmap(void *p, size_t size) { release(SYS_munmap, OS_MUNMAP, p, size, 0, NULL); }

/* Zeroes the pages of [p, p+n) that vec (mincore's) shows resident, a run
 * of them at a time, and purges the absent ones when purge_absent. */
static void zero_by_runs(char *p, size_t n, const unsigned char *vec, bool purge_absent) {
  size_t page = os_page_size(), pages = (n + page - 1) / page;
  for (size_t i = 0, j; i < pages; i = j) {
    for (j = i + 1; j < pages && (vec[j] & 1) == (vec[i] & 1); j++) {}
    if (vec[i] & 1) __builtin_memset(p + i * page, 0, MIN_SIZE(j * page, n) - i * page);
    else if (purge_absent) os_purge(p + i * page, (j - i) * page);
  }
}

/* The kernel refuses MADV_DONTNEED on locked pages (mlock, mlockall:
 * EINVAL), which stay with their data: their resident pages are zeroed
 * here (an absent locked page was never touched: it reads zero), so that a
 * purged range always reads zeros (callers take it for clean: calloc does
 * not zero it again). Not for ENOMEM: nothing is mapped there. */
static void purge_done(char *p, size_t len, long r) {
  if (!failed(r) || r == -ENOMEM) return;
  unsigned char vec[512];
  size_t page = os_page_size();
  for (size_t off = 0; off < len;) {
    size_t n = MIN_SIZE(len - off, sizeof vec * page);
    COUNT(OS_MINCORE);
    if (failed(SYS(SYS_mincore, p + off, n, vec, 0, 0, 0))) __builtin_memset(vec, 1, (n + page - 1) / page);
    zero_by_runs(p + off, n, vec, false);
    off += n;
  }
}

size_t os_purge(void *p, size_t size) {
  return release(SYS_madvise, OS_MADVISE, p, size, MADV_DONTNEED, purge_done) ? size : 0;
}

#define POPULATE_WRITE 23 /* MADV_POPULATE_WRITE, Linux 5.14 */
static _Atomic bool populate_unsupported;
/* From p's page: a start inside a page answers EINVAL, as a kernel without
 * the advice does, and that answer turns populating off for good. */
void os_populate(void *p, size_t size) {
  if (size == 0 || atomic_load_explicit(&populate_unsupported, memory_order_relaxed)) return;
  uintptr_t from = (uintptr_t)p & ~(uintptr_t)(os_page_size() - 1);
  COUNT(OS_MADVISE);
  if (MAP_CALL(SYS_madvise, from, size + ((uintptr_t)p - from), POPULATE_WRITE, 0, 0, 0) == -EINVAL)
    atomic_store_explicit(&populate_unsupported, true, memory_order_relaxed);
}

#define NO_HUGE_PAGES 15 /* MADV_NOHUGEPAGE */
void os_no_huge_pages(void *p, size_t size) {
  COUNT(OS_MADVISE);
  MAP_CALL(SYS_madvise, p, size, NO_HUGE_PAGES, 0, 0, 0);
}

bool os_protect_none(void *p, size_t size) {
  COUNT(OS_MPROTECT);
  return !failed(MAP_CALL(SYS_mprotect, p, size, PROT_NONE, 0, 0, 0));
}

/* MREMAP_DONTUNMAP (Linux 5.7; for every private anonymous mapping since
 * 5.13) leaves the source mapped, reading as untouched. mremap moves no
 * range that spans two of the kernel's mappings (EFAULT), and pages moved
 * in are one of their own (they keep their origin's offset): a range that
 * fails so is halved until each piece lies in one, and a piece that cannot
 * move at all sends the moved ones back, to places still mapped. */
#define MOVE_DONTUNMAP 4
bool os_move_pages(void *p, size_t size, void *to) {
  COUNT(OS_MREMAP);
  long r = MAP_CALL(SYS_mremap, p, size, size, MREMAP_MAYMOVE | MREMAP_FIXED | MOVE_DONTUNMAP, to, 0);
  if (!failed(r)) return true;
  size_t page = os_page_size(), half = (size / 2 + page - 1) & ~(page - 1);
  if (r != -EFAULT || size <= page) return false;
  if (!os_move_pages(p, half, to)) return false;
  if (os_move_pages((char *)p + half, size - half, (char *)to + half)) return true;
  os_move_pages(to, half, p);
  return false;
}

size_t os_page;
unsigned os_page_shift;

size_t os_page_init(void) {
  long ps = sysconf(_SC_PAGESIZE);
  size_t page = ps > 0 ? (size_t)ps : 4096;
  os_page_shift = (unsigned)__builtin_ctzl(page);
  __atomic_store_n(&os_page, page, __ATOMIC_RELEASE);
  return page;
}

unsigned os_cpu_count(void) {
  static _Atomic unsigned cached;
  unsigned n = atomic_load_explicit(&cached, memory_order_relaxed);
  if (n == 0) {
    uint64_t mask[16] = {0}; /* 1024 processors */
    long bytes = SYS(SYS_sched_getaffinity, 0, sizeof mask, mask, 0, 0, 0);
    for (long i = 0; i < bytes / 8; i++) n += (unsigned)__builtin_popcountll(mask[i]);
    if (n == 0) n = 1;
    atomic_store_explicit(&cached, n, memory_order_relaxed);
  }
  return n;
}

uint64_t os_random_seed(void) {
  uint64_t v = 0;
  if (failed(SYS(SYS_getrandom, &v, sizeof v, 0, 0, 0, 0)) || v == 0) v = os_now_ns() * 0x9E3779B97F4A7C15ull ^ (uintptr_t)&v;
  return v;
}

uint64_t os_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Ages and delays in ms need no finer clock: the coarse one (a tick, 1 to
 * 10 ms) costs a few loads where the precise one reads the time counter. */
uint64_t os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t os_minor_faults(void) {
  struct rusage ru;
  if (failed(SYS(SYS_getrusage, RUSAGE_SELF, &ru, 0, 0, 0, 0))) return 0;
  return (uint64_t)ru.ru_minflt;
}


void os_yield(void) { SYS(SYS_sched_yield, 0, 0, 0, 0, 0, 0); }

void os_sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  SYS(SYS_nanosleep, &ts, 0, 0, 0, 0, 0);
}

void os_write_fd(int fd, const char *s, size_t len) {
  while (len > 0) {
    long n = SYS(SYS_write, fd, s, len, 0, 0, 0);
    if (n == -EINTR) continue;
    if (n <= 0) break;
    s += n;
    len -= (size_t)n;
  }
}


int os_open_write(const char *path) {
  long fd = SYS(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644, 0, 0);
  return failed(fd) ? -1 : (int)fd;
}

int os_open_read(const char *path) {
  long fd = SYS(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0, 0, 0);
  return failed(fd) ? -1 : (int)fd;
}

long os_read(int fd, char *buf, size_t len) {
  long n;
  while ((n = SYS(SYS_read, fd, buf, len, 0, 0, 0)) == -EINTR) {
  }
  return failed(n) ? -1 : n;
}

long os_getpid(void) { return SYS(SYS_getpid, 0, 0, 0, 0, 0, 0); }

void os_close(int fd) { SYS(SYS_close, fd, 0, 0, 0, 0, 0); }

long os_read_file(const char *path, char *buf, size_t len) {
  int fd = os_open_read(path);
  if (fd < 0) return -1;
  long n = os_read(fd, buf, len);
  os_close(fd);
  return n;
}

int os_dup(int fd, int min) {
  long d = SYS(SYS_fcntl, fd, F_DUPFD_CLOEXEC, min, 0, 0, 0);
  return failed(d) ? -1 : (int)d;
}

uint64_t os_file_id(int fd) {
  struct stat st;
  if (failed(SYS(SYS_fstat, fd, &st, 0, 0, 0, 0))) return 0;
  return (uint64_t)st.st_dev << 40 ^ (uint64_t)st.st_ino;
}

static size_t resident(const void *p, size_t size, bool count) {
  unsigned char vec[4096];
  size_t page = os_page_size(), n = 0;
  uintptr_t a = (uintptr_t)p & ~(page - 1), end = (uintptr_t)p + size;
  while (a < end) {
    size_t len = MIN_SIZE(end - a, sizeof vec * page);
    if (count) COUNT(OS_MINCORE);
    if (failed(SYS(SYS_mincore, a, len, vec, 0, 0, 0))) break;
    for (size_t i = 0; i < (len + page - 1) / page; i++) n += vec[i] & 1;
    a += len;
  }
  return n * page;
}

size_t os_resident(const void *p, size_t size) { return resident(p, size, false); }
size_t os_resident_look(const void *p, size_t size) { return resident(p, size, true); }

/* A program that callocs a block usually writes all of it, and a page fault
 * costs as much as a memset of 10 to 20 pages: the block's resident pages
 * are zeroed in place and its absent ones purged, which reads zeros and
 * leaves them absent (an absent page is never touched: the program faults
 * in only what it writes). Purged, not skipped: an absent page may be
 * swapped out rather than zero. A block whose pages alternate more than
 * ZERO_PIECES times, or larger than one mincore vector on the stack
 * covers, is purged whole. */
#define ZERO_VEC 4096
#define ZERO_PIECES 8
void os_zero(void *p, size_t size) {
  unsigned char vec[ZERO_VEC];
  size_t page = os_page_size(), pages = (size + page - 1) / page, pieces = 0;
  bool look = pages <= ZERO_VEC;
  if (look) {
    COUNT(OS_MINCORE);
    look = !failed(SYS(SYS_mincore, p, size, vec, 0, 0, 0));
  }
  for (size_t i = 0; look && i < pages; i++) pieces += !(vec[i] & 1) && (i == 0 || vec[i - 1] & 1);
  if (!look || pieces > ZERO_PIECES) {
    os_purge(p, pages * page);
    return;
  }
  zero_by_runs(p, size, vec, true);
}
