/* The OS layer: mmap, munmap, madvise, mremap, write, futex, clone. See os.h
 * for the contracts.
 *
 * System calls are made directly (raw_syscall), not through the C library's
 * wrappers: they never touch errno (malloc must leave it alone on success) nor
 * any other thread-local state, so the background purger, which runs without
 * a C library thread of its own, may use them too. */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#if defined(__x86_64__)
#define HAVE_RAW_SYSCALL 1
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
#define HAVE_RAW_SYSCALL 1
static long raw_syscall(long n, long a, long b, long c, long d, long e, long f) {
  register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b, x2 __asm__("x2") = c,
                x3 __asm__("x3") = d, x4 __asm__("x4") = e, x5 __asm__("x5") = f;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
}
#else
#define HAVE_RAW_SYSCALL 0
static long raw_syscall(long n, long a, long b, long c, long d, long e, long f) {
  int saved = errno;
  long ret = syscall(n, a, b, c, d, e, f);
  if (ret == -1) ret = -errno;
  errno = saved;
  return ret;
}
#endif
#define SYS(n, a, b, c, d, e, f) raw_syscall(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
/* A raw result in [-4095, -1] is an error number. */
static bool failed(long ret) { return (unsigned long)ret > -4096UL; }

#if HAK_UNDER_SANITIZER
/* Mapping changes through the wrappers, which the sanitizer intercepts. */
#define MAP_CALL(n, a, b, c, d, e, f) sanitized_call(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
static long sanitized_call(long n, long a, long b, long c, long d, long e, long f) {
  int saved = errno;
  long ret;
  switch (n) {
  case SYS_mmap: ret = (long)mmap((void *)a, (size_t)b, (int)c, (int)d, (int)e, (off_t)f); break;
  case SYS_munmap: ret = munmap((void *)a, (size_t)b); break;
  case SYS_madvise: ret = madvise((void *)a, (size_t)b, (int)c); break;
  default: ret = (long)mremap((void *)a, (size_t)b, (size_t)c, (int)d, (void *)e); break;
  }
  if (ret == -1) ret = -errno;
  errno = saved;
  return ret;
}
#else
#define MAP_CALL SYS
#endif

/* Mapping calls made, for the learned policies' cost of time in the OS. */
_Atomic uint64_t os_map_calls;
#define COUNT_CALL() atomic_fetch_add_explicit(&os_map_calls, 1, memory_order_relaxed)

static void *raw_mmap(size_t size) {
  COUNT_CALL();
  long p = MAP_CALL(SYS_mmap, 0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return failed(p) ? NULL : (void *)p;
}

/* For ranges never touched: nothing to flush, so one call whatever the size. */
static void unmap_untouched(void *p, size_t size) {
  COUNT_CALL();
  MAP_CALL(SYS_munmap, p, size, 0, 0, 0, 0);
}

static size_t page_size_cached;

size_t os_page_size(void) {
  if (page_size_cached == 0) {
    long ps = sysconf(_SC_PAGESIZE);
    page_size_cached = ps > 0 ? (size_t)ps : 4096;
  }
  return page_size_cached;
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

size_t os_page_round(size_t size) {
  size_t page = os_page_size();
  return (size + page - 1) & ~(page - 1);
}

void *os_map_aligned(size_t size, size_t align) {
  /* Try the exact size first: the kernel often hands out neighbouring,
   * already aligned addresses. Otherwise over-map and trim both ends. */
  char *p = raw_mmap(size);
  if (p == NULL) return NULL;
  if (((uintptr_t)p & (align - 1)) == 0) return p;
  unmap_untouched(p, size);
  size_t over = size + align;
  if (over < size) return NULL;
  char *q = raw_mmap(over);
  if (q == NULL) return NULL;
  char *aligned = (char *)(((uintptr_t)q + align - 1) & ~(uintptr_t)(align - 1));
  if (aligned > q) unmap_untouched(q, (size_t)(aligned - q));
  size_t tail = (size_t)(q + over - (aligned + size));
  if (tail) unmap_untouched(aligned + size, tail);
  return aligned;
}

bool os_protect_none(void *p, size_t size) {
  return !failed(SYS(SYS_mprotect, p, size, PROT_NONE, 0, 0, 0));
}

uint64_t os_random_seed(void) {
  uint64_t v = 0;
  if (failed(SYS(SYS_getrandom, &v, sizeof v, 0, 0, 0, 0)) || v == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uintptr_t)&v;
  }
  return v;
}

/* Memory goes back in pieces of at most this much. Under shadow paging (a
 * nested VM: this project's CI machines run under PVM) one munmap or madvise
 * that frees more than 4 MiB flushes the whole process's shadow page tables,
 * and every resident page of the process then faults again in the
 * hypervisor on its next access, about 6 us each (a process holding 170 MiB
 * paid a quarter of a second per such call); 2 MiB pieces flush only their
 * own range. The extra calls cost little beside freeing the pages: 16 MiB
 * went back in 1.5-2 ms in pieces, in 4 ms in one call (with the flush). */
#define RELEASE_PIECE ((size_t)2 << 20)

/* The length of the piece at off of a range of size bytes. */
static size_t piece_at(size_t size, size_t off) { return size - off < RELEASE_PIECE ? size - off : RELEASE_PIECE; }

/* Calls n(p, size, advice) piece by piece, counted as one call (none for an
 * empty range); returns whether every call succeeded. */
static bool release_in_pieces(long n, char *p, size_t size, long advice) {
  bool ok = true;
  if (size == 0) return ok;
  COUNT_CALL();
  for (size_t off = 0; off < size; off += RELEASE_PIECE)
    ok &= !failed(MAP_CALL(n, p + off, piece_at(size, off), advice, 0, 0, 0));
  return ok;
}

void os_unmap(void *p, size_t size) { release_in_pieces(SYS_munmap, p, size, 0); }

size_t os_purge(void *p, size_t size) {
  return release_in_pieces(SYS_madvise, p, size, MADV_DONTNEED) ? size : 0;
}

/* MADV_POPULATE_WRITE (Linux 5.14) faults a range in with one call: on a
 * PVM VM a fault trapped page by page cost about 10 us, populated 3.5-4.5 us
 * (a call, about 1 us, pays from the first page). Older kernels answer
 * EINVAL once, and the call is not tried again. */
#define POPULATE_WRITE 23
static _Atomic bool populate_unsupported;
void os_populate(void *p, size_t size) {
  if (size == 0 || atomic_load_explicit(&populate_unsupported, memory_order_relaxed)) return;
  if (SYS(SYS_madvise, p, size, POPULATE_WRITE, 0, 0, 0) == -EINVAL)
    atomic_store_explicit(&populate_unsupported, true, memory_order_relaxed);
}

/* MREMAP_DONTUNMAP (Linux 5.7; for every private anonymous mapping since
 * 5.13) leaves the source mapped, reading as untouched. */
#define MOVE_DONTUNMAP 4
bool os_move_pages(void *p, size_t size, void *to) {
  COUNT_CALL();
  return !failed(MAP_CALL(SYS_mremap, p, size, size, MREMAP_MAYMOVE | MREMAP_FIXED | MOVE_DONTUNMAP, to, 0));
}

void *os_remap(void *p, size_t old_size, size_t new_size, void *fixed_at) {
  COUNT_CALL();
  long q = fixed_at ? SYS(SYS_mremap, p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, fixed_at, 0)
                    : SYS(SYS_mremap, p, old_size, new_size, 0, 0, 0);
  return failed(q) ? NULL : (void *)q;
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

void os_sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  SYS(SYS_nanosleep, &ts, 0, 0, 0, 0, 0);
}

void os_futex_wait(_Atomic uint32_t *word, uint32_t expected, unsigned timeout_ms) {
  struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
  SYS(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, &ts, 0, 0);
}

void os_futex_wake(_Atomic uint32_t *word) { SYS(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0); }

/* The background thread is a bare clone: no C library thread, no TLS of its
 * own, every signal blocked (so no handler of the program ever runs on it),
 * and nothing allocated but its stack. fn may use only os_ functions. */
bool os_spawn_background(int (*fn)(void *), void *arg) {
  if (!HAVE_RAW_SYSCALL) return false;
  size_t stack_size = 64 * 1024;
  char *stack = raw_mmap(stack_size);
  if (stack == NULL) return false;
  sigset_t all, old;
  sigfillset(&all);
  SYS(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof(long), 0, 0);
  int saved = errno;
  int tid = clone(fn, stack + stack_size,
                  CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM, arg);
  errno = saved;
  SYS(SYS_rt_sigprocmask, SIG_SETMASK, &old, 0, sizeof(long), 0, 0);
  if (tid <= 0) {
    os_unmap(stack, stack_size);
    return false;
  }
  return true;
}

void os_write_stderr(const char *s, size_t len) { os_write_fd(2, s, len); }

uint64_t os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t os_minor_faults(void) {
  struct rusage ru;
  if (failed(SYS(SYS_getrusage, RUSAGE_SELF, &ru, 0, 0, 0, 0))) return 0;
  return (uint64_t)ru.ru_minflt;
}

#define FAULT_PROBE_BATCHES 4
#define FAULT_PROBE_PAGES 8
double os_fault_us(void) {
  size_t page = os_page_size();
  char *p = raw_mmap(FAULT_PROBE_BATCHES * FAULT_PROBE_PAGES * page);
  if (p == NULL) return 0;
  double best = 0;
  for (int b = 0; b < FAULT_PROBE_BATCHES; b++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < FAULT_PROBE_PAGES; i++) ((volatile char *)p)[(size_t)(b * FAULT_PROBE_PAGES + i) * page] = 1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / FAULT_PROBE_PAGES;
    if (b == 0 || us < best) best = us;
  }
  os_unmap(p, FAULT_PROBE_BATCHES * FAULT_PROBE_PAGES * page);
  return best;
}

size_t os_resident_bytes(void) {
  long fd = SYS(SYS_openat, AT_FDCWD, "/proc/self/statm", O_RDONLY | O_CLOEXEC, 0, 0, 0);
  size_t pages = 0;
  if (fd >= 0) {
    char buf[128];
    long n = SYS(SYS_read, fd, buf, sizeof buf - 1, 0, 0, 0);
    SYS(SYS_close, fd, 0, 0, 0, 0, 0);
    int field = 0;
    for (long i = 0; i < n && field < 2; i++) {
      if (buf[i] == ' ') field++;
      else if (field == 1 && buf[i] >= '0' && buf[i] <= '9') pages = pages * 10 + (size_t)(buf[i] - '0');
    }
  }
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

long os_thread_id(void) { return SYS(SYS_gettid, 0, 0, 0, 0, 0, 0); }

void os_yield(void) { SYS(SYS_sched_yield, 0, 0, 0, 0, 0, 0); }

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
