/* What the hakmem tests share: named cases, checks, patterned blocks.
 *
 * Cases. A test binary is a table of named cases handed to tu_main():
 *   test_x [PARAM...]          every case (but those marked TU_BY_NAME: they
 *   test_x all [PARAM...]      need the environment CTest sets for them)
 *   test_x CASE [PARAM...]     that case only
 * PARAMs (numbers) are the binary's own, read with tu_param(). Each case ends
 * with "case NAME: ok (T s)" or "case NAME: FAILED (why)"; the binary ends
 * with one line "N passed, M failed" and exits 1 when M > 0.
 *
 * Isolation. Running more than one case, the runner forks a child for each
 * and waits for it; it starts no thread and allocates nothing between cases.
 * So a failed check in any thread of a case (stress workers, threads under a
 * fork), or a signal, ends that child and nothing else, without unwinding
 * threads or locks a longjmp could not leave; every case starts from the same
 * allocator state, not from what earlier cases left (the block freed last,
 * resident memory); and each fork comes from a single-threaded process, which
 * is all ThreadSanitizer supports. A case named alone runs in the process
 * itself, as the program it was before it was a case: what test_memory and
 * test_learn measure (resident memory, page-fault time, options read at
 * start-up) is that of a fresh process, and a debugger sees the case
 * directly; there a fatal signal is caught to print the verdict and the
 * summary, then raised again. HAKMEM_TEST_FORK=1 forks for one case too,
 * HAKMEM_TEST_FORK=0 runs every case in-process (the first failure ends the
 * run).
 *
 * Checks. CHECK(cond) / CHECKF(cond, fmt, ...): on failure print file:line
 * and the failing expression (formatted into a stack buffer and written with
 * write(2), so a broken heap cannot hide the message) and end the case. In a
 * process the case forked itself, they _exit(1): its parent checks how it
 * ended.
 *
 * A(f): the allocation function under test. Compiled with -DUSE_HAK_API the
 * tests call hakmem's hak_ names (standard names stay with the C library);
 * otherwise they call the standard names, which libhakmem overrides.
 *
 * Blocks (blk_t): a block carries a pattern derived from an id and the offset
 * (never its address), on the whole block up to TU_BLK_FULL bytes; beyond, on
 * the first and last 4 KiB and TU_BLK_SAMPLES sampled words (0: one word in
 * every 4 KiB page). A test may set both before including this file; by
 * default the whole block carries it.
 */
#ifndef HAKMEM_TESTUTIL_H
#define HAKMEM_TESTUTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <execinfo.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#ifdef __cplusplus /* test_cxx: the same cases, in C++ */
#include <atomic>
using std::atomic_exchange;
using std::atomic_int;
#else
#include <stdatomic.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

#define TU_UNUSED __attribute__((unused))

/* ---- output that needs no heap ---- */

__attribute__((format(printf, 2, 3)))
static TU_UNUSED void tu_say(int fd, const char *fmt, ...)
{
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
  for (const char *s = buf; len > 0;) {
    ssize_t w = write(fd, s, len);
    if (w <= 0) return;
    s += w;
    len -= (size_t)w;
  }
}

/* "exit 1", "signal 11 (SIGSEGV)": how a child ended, for messages. */
static TU_UNUSED const char *tu_status_str(int st, char *buf, size_t n)
{
  static const struct { int sig; const char *name; } names[] = {
    {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGABRT, "SIGABRT"}, {SIGILL, "SIGILL"}, {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"}, {SIGTRAP, "SIGTRAP"}, {SIGALRM, "SIGALRM: deadlock?"}};
  if (WIFEXITED(st)) {
    snprintf(buf, n, "exit %d", WEXITSTATUS(st));
  } else if (WIFSIGNALED(st)) {
    const char *name = "";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
      if (names[i].sig == WTERMSIG(st)) name = names[i].name;
    snprintf(buf, n, "signal %d%s%s%s", WTERMSIG(st), *name ? " (" : "", name, *name ? ")" : "");
  } else {
    snprintf(buf, n, "status %#x", st);
  }
  return buf;
}

/* ---- the runner's state and the end of a failed case ---- */

typedef struct {
  const char *name;
  void (*fn)(void);
  unsigned flags;
} tu_case_t;

/* Not run with the others: the case needs the environment CTest sets. */
#define TU_BY_NAME 1u

static struct {
  const char *name;     /* the case running */
  pid_t case_pid;       /* the process running it (0: none yet) */
  int in_process;       /* cases run in the runner's own process */
  int passed, failed;
  int nparams;          /* numbers after the case name */
  char **params;
  atomic_int failing;   /* a thread of the case is reporting its failure */
} tu_run;

static TU_UNUSED void tu_summary(void) { tu_say(1, "%d passed, %d failed\n", tu_run.passed, tu_run.failed); }

/* Ends the calling process after a failure in the case (why: what ended it). */
__attribute__((noreturn))
static void tu_case_failed(const char *why)
{
  if (tu_run.case_pid != getpid()) _exit(1); /* a child of the case: its parent judges */
  if (atomic_exchange(&tu_run.failing, 1))
    for (;;) pause(); /* another thread reports and ends the process */
  if (tu_run.in_process) {
    tu_run.failed++;
    tu_say(1, "case %s: FAILED (%s)\n", tu_run.name, why);
    tu_summary();
  }
  _exit(1);
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
  buf[n] = 0;
  tu_say(2, "%s\n", buf);
  tu_case_failed("a check failed");
}

#define CHECK(cond) \
  do { if (__builtin_expect(!(cond), 0)) tu_fail(__FILE__, __LINE__, #cond, NULL); } while (0)
#define CHECKF(cond, ...) \
  do { if (__builtin_expect(!(cond), 0)) tu_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); } while (0)

/* ---- the runner ---- */

static inline double tu_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits for pid (through EINTR); returns its wait status. */
static TU_UNUSED int tu_wait(pid_t pid)
{
  int st = 0;
  pid_t w;
  do w = waitpid(pid, &st, 0); while (w < 0 && errno == EINTR);
  CHECKF(w == pid, "waitpid(%d): errno %d", (int)pid, errno);
  return st;
}

/* Parameter i after the case name (a number), or def when not given. */
static TU_UNUSED double tu_param(int i, double def)
{
  return i < tu_run.nparams ? strtod(tu_run.params[i], NULL) : def;
}

/* A crash prints where it happened: the faulting address, the thread and
 * the stack with the libraries' offsets (addr2line turns them into lines of
 * the same build), so that a crash in CI can be read. */
static void tu_on_fatal(int sig, siginfo_t *si, void *uc)
{
  (void)uc;
  if (getpid() == tu_run.case_pid && !atomic_exchange(&tu_run.failing, 1)) {
    char why[64];
    void *frames[64];
    tu_run.failed++;
    tu_say(1, "case %s: FAILED (%s) at address %p, thread %ld; stack:\n", tu_run.name,
           tu_status_str(sig & 0x7f, why, sizeof why), si->si_addr, (long)syscall(SYS_gettid));
    backtrace_symbols_fd(frames, backtrace(frames, 64), 1);
    tu_summary();
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void tu_catch_fatal(void)
{
  static char altstack[64 * 1024];
  stack_t ss = {.ss_sp = altstack, .ss_flags = 0, .ss_size = sizeof altstack};
  sigaltstack(&ss, NULL);
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE, SIGTRAP};
  void *frame;
  backtrace(&frame, 1); /* loads the unwinder now: it allocates on first use */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = tu_on_fatal;
  sa.sa_flags = SA_ONSTACK | SA_SIGINFO;
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaction(sigs[i], &sa, NULL);
}

static void tu_run_case(const tu_case_t *c)
{
  double t0 = tu_now();
  tu_run.name = c->name;
  if (tu_run.in_process) {
    tu_run.case_pid = getpid();
    c->fn();
    fflush(stdout);
    tu_run.passed++;
    tu_say(1, "case %s: ok (%.2f s)\n", c->name, tu_now() - t0);
    return;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    tu_run.case_pid = getpid();
    c->fn();
    exit(0);
  }
  if (pid < 0) {
    tu_run.failed++;
    tu_say(1, "case %s: FAILED (fork: errno %d)\n", c->name, errno);
    return;
  }
  int st = tu_wait(pid);
  char why[64];
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
    tu_run.passed++;
    tu_say(1, "case %s: ok (%.2f s)\n", c->name, tu_now() - t0);
  } else {
    tu_run.failed++;
    tu_say(1, "case %s: FAILED (%s, %.2f s)\n", c->name,
           WIFEXITED(st) && WEXITSTATUS(st) == 1 ? "a check failed" : tu_status_str(st, why, sizeof why),
           tu_now() - t0);
  }
}

static int tu_is_number(const char *s)
{
  if (*s == '-' || *s == '+') s++;
  if (*s == '.') s++;
  return *s >= '0' && *s <= '9';
}

/* Runs the cases the command line names (see the top of this file); returns
 * main's exit status. params: the binary's parameters, for the usage line. */
static TU_UNUSED int tu_main(int argc, char **argv, const tu_case_t *cases, size_t ncases, const char *params)
{
  setvbuf(stdout, NULL, _IOLBF, 0); /* lines out before a crash, in order with the runner's */
  const tu_case_t *only = NULL;
  int first = 1;
  if (argc > 1 && !tu_is_number(argv[1])) {
    for (size_t i = 0; i < ncases; i++)
      if (strcmp(argv[1], cases[i].name) == 0) only = &cases[i];
    if (only == NULL && strcmp(argv[1], "all") != 0) {
      tu_say(2, "%s: no case %s\nusage: %s [CASE|all]%s%s\ncases:", argv[0], argv[1], argv[0], *params ? " " : "",
             params);
      for (size_t i = 0; i < ncases; i++)
        tu_say(2, " %s%s", cases[i].name, cases[i].flags & TU_BY_NAME ? " (by name)" : "");
      tu_say(2, "\n");
      return 2;
    }
    first = 2;
  }
  for (int i = first; i < argc; i++)
    if (!tu_is_number(argv[i])) {
      tu_say(2, "%s: parameter %s is not a number\n", argv[0], argv[i]);
      return 2;
    }
  tu_run.nparams = argc - first;
  tu_run.params = argv + first;
  const char *fork_env = getenv("HAKMEM_TEST_FORK");
  tu_run.in_process = fork_env != NULL && *fork_env ? *fork_env == '0' : only != NULL;
  if (tu_run.in_process) tu_catch_fatal();
  for (size_t i = 0; i < ncases; i++) {
    if (only != NULL ? &cases[i] != only : (cases[i].flags & TU_BY_NAME) != 0) continue;
    tu_run_case(&cases[i]);
  }
  if (only == NULL)
    for (size_t i = 0; i < ncases; i++)
      if (cases[i].flags & TU_BY_NAME) tu_say(1, "case %s: not run (by name only: CTest sets its environment)\n",
                                              cases[i].name);
  tu_summary();
  return tu_run.failed > 0;
}

/* ---- children ---- */

/* Forks a child that runs fn(arg) under alarm(alarm_s) (0: none) and exits
 * 0 if fn returns. With errfd not NULL the child's stderr goes to a pipe
 * whose reading end *errfd is. */
static TU_UNUSED pid_t tu_spawn(void (*fn)(void *), void *arg, unsigned alarm_s, int *errfd)
{
  int pfd[2] = {-1, -1};
  if (errfd != NULL) CHECK(pipe(pfd) == 0);
  fflush(stdout);
  pid_t pid = fork();
  CHECKF(pid >= 0, "fork: errno %d", errno);
  if (pid == 0) {
    if (errfd != NULL) {
      close(pfd[0]);
      dup2(pfd[1], 2);
      close(pfd[1]);
    }
    alarm(alarm_s);
    fn(arg);
    _exit(0);
  }
  if (errfd != NULL) {
    close(pfd[1]);
    *errfd = pfd[0];
  }
  return pid;
}

/* tu_spawn with stderr captured into out (cap bytes, NUL-terminated);
 * returns the child's wait status. */
static TU_UNUSED int tu_child_output(void (*fn)(void *), void *arg, unsigned alarm_s, char *out, size_t cap)
{
  int fd;
  pid_t pid = tu_spawn(fn, arg, alarm_s, &fd);
  size_t n = 0;
  for (ssize_t r; n < cap - 1 && (r = read(fd, out + n, cap - 1 - n)) != 0;)
    if (r > 0) n += (size_t)r;
    else if (errno != EINTR) break;
  out[n] = 0;
  close(fd);
  return tu_wait(pid);
}

/* ---- numbers, time, memory ---- */

/* Keeps the compiler from reasoning about (and eliding) allocations. */
static void *volatile tu_sink TU_UNUSED;
static inline void *tu_launder(void *p) { tu_sink = p; return tu_sink; }

/* Blocks of one size that move the calling thread's allocation of the size
 * past the slab holding its earlier ones (TU_FILLER_BYTES exceeds any
 * slab): another thread's free of a block in its owner's current slab goes
 * home at once, and only the others stay on that thread's foreign list
 * (heap.h). Freed with tu_filler_free. */
enum { TU_FILLER_BYTES = 1 << 20 };
typedef struct {
  void **p;
  size_t n;
} tu_filler_t;
static inline tu_filler_t tu_filler(size_t size)
{
  tu_filler_t f = {(void **)A(malloc)(TU_FILLER_BYTES / size * sizeof(void *)), 0};
  while (f.p && f.n < TU_FILLER_BYTES / size && (f.p[f.n] = tu_launder(A(malloc)(size))) != NULL) f.n++;
  return f;
}
static inline void tu_filler_free(tu_filler_t f)
{
  for (size_t i = 0; i < f.n; i++) A(free)(f.p[i]);
  A(free)(f.p);
}

static inline uint64_t tu_xorshift(uint64_t *s)
{
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Field `field` of /proc/self/statm in bytes (0: address space, 1: resident);
 * 0 when it cannot be read. */
static inline size_t tu_statm(int field)
{
  char buf[128];
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  unsigned long v[2] = {0, 0};
  if (sscanf(buf, "%lu %lu", &v[0], &v[1]) != 2 || field < 0 || field > 1) return 0;
  return (size_t)v[field] * (size_t)sysconf(_SC_PAGESIZE);
}

/* Resident set size of this process in bytes. */
static inline size_t tu_rss(void) { return tu_statm(1); }

/* The counter `key` of hakmem's statistics (hak_stats_json), -1 when absent. */
static TU_UNUSED long tu_stat(const char *key)
{
  static char buf[32768];
  char want[96];
  if (hak_stats_json(buf, sizeof buf) == 0) return -1;
  snprintf(want, sizeof want, "\"%s\": ", key);
  const char *at = strstr(buf, want);
  return at ? strtol(at + strlen(want), NULL, 10) : -1;
}

/* Threads of this process now (/proc/self/task), 0 when unreadable. */
static TU_UNUSED int tu_threads(void)
{
  char buf[512];
  FILE *f = fopen("/proc/self/status", "r");
  int n = 0;
  if (f == NULL) return 0;
  while (fgets(buf, sizeof buf, f))
    if (sscanf(buf, "Threads: %d", &n) == 1) break;
  fclose(f);
  return n;
}

/* ---- patterns ---- */

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

/* Fill bytes [from, to) of p with the pattern of id. */
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

/* Bytes [0, n) of p hold the pattern of id. */
#define CHECK_PAT(p, n, id)                                                                                        \
  do {                                                                                                             \
    size_t bad_ = tu_verify((p), 0, (n), (id));                                                                    \
    CHECKF(bad_ == (size_t)-1, "block %p: byte %zu of %zu lost its pattern", (void *)(p), bad_, (size_t)(n));     \
  } while (0)

/* ---- patterned blocks ---- */

#ifndef TU_BLK_FULL
#define TU_BLK_FULL SIZE_MAX
#endif
#ifndef TU_BLK_SAMPLES
#define TU_BLK_SAMPLES 0
#endif

typedef struct {
  void *p;
  size_t size;
  uint64_t id;
} blk_t;

/* Past the first and last 4 KiB of a block larger than TU_BLK_FULL: k words
 * a step apart (one in each 4 KiB page, or TU_BLK_SAMPLES over the block),
 * each at an offset in its step drawn from the block's id. Sets *first and
 * *step (word indices) and returns k. */
static inline size_t tu_blk_words(const blk_t *b, size_t *first, size_t *step)
{
  size_t lo = 4 * KiB / 8, hi = (b->size - 4 * KiB) / 8;
  if (b->size <= TU_BLK_FULL || hi <= lo) return 0;
  size_t samples = TU_BLK_SAMPLES; /* a variable: C++ warns of a constant 0 divisor on the branch not taken */
  *step = samples ? (hi - lo) / samples : 4 * KiB / 8;
  if (*step == 0) *step = 1;
  *first = lo + (size_t)(tu_pat(b->id, 1) % *step);
  return (hi - *first + *step - 1) / *step;
}

/* Writes b's pattern at offsets from `from` on (a sampled word that reaches
 * past `from` is written whole: what lies below it holds the pattern). */
static inline void blk_fill_from(const blk_t *b, size_t from)
{
  if (b->size <= TU_BLK_FULL) {
    tu_fill(b->p, from, b->size, b->id);
    return;
  }
  size_t tail = b->size - 4 * KiB, first = 0, step = 0;
  if (from < 4 * KiB) tu_fill(b->p, from, 4 * KiB, b->id);
  tu_fill(b->p, tail < from ? from : tail, b->size, b->id);
  uint64_t *w = (uint64_t *)b->p;
  for (size_t k = 0, n = tu_blk_words(b, &first, &step); k < n; k++)
    if ((first + k * step + 1) * 8 > from) w[first + k * step] = tu_pat(b->id, first + k * step);
}

static inline void blk_fill(const blk_t *b) { blk_fill_from(b, 0); }

/* The first offset below limit where b does not hold its pattern, or
 * (size_t)-1. */
static inline size_t blk_verify(const blk_t *b, size_t limit)
{
  if (limit > b->size) limit = b->size;
  if (b->size <= TU_BLK_FULL) return tu_verify(b->p, 0, limit, b->id);
  size_t tail = b->size - 4 * KiB, first = 0, step = 0;
  size_t bad = tu_verify(b->p, 0, limit < 4 * KiB ? limit : 4 * KiB, b->id);
  if (bad == (size_t)-1 && tail < limit) bad = tu_verify(b->p, tail, limit, b->id);
  const uint64_t *w = (const uint64_t *)b->p;
  for (size_t k = 0, n = tu_blk_words(b, &first, &step); bad == (size_t)-1 && k < n; k++) {
    size_t i = first + k * step;
    if ((i + 1) * 8 <= limit && w[i] != tu_pat(b->id, i)) bad = i * 8;
  }
  return bad;
}

static TU_UNUSED void tu_blk_check_at(const blk_t *b, size_t limit, const char *when, const char *file, int line)
{
  size_t bad = blk_verify(b, limit);
  if (bad != (size_t)-1)
    tu_fail(file, line, "block holds its pattern", "%s: block %p (id %llu, size %zu) corrupted at byte %zu", when,
            b->p, (unsigned long long)b->id, b->size, bad);
}

static TU_UNUSED void tu_blk_alloc_at(blk_t *b, size_t size, uint64_t id, const char *file, int line)
{
  b->p = A(malloc)(size);
  if (b->p == NULL) tu_fail(file, line, "b->p != NULL", "malloc(%zu)", size);
  b->size = size;
  b->id = id;
  blk_fill(b);
}

static TU_UNUSED void tu_blk_free_at(blk_t *b, const char *when, const char *file, int line)
{
  tu_blk_check_at(b, b->size, when, file, line);
  A(free)(b->p);
  b->p = NULL;
}

/* realloc to ns bytes: the pattern must survive up to the smaller size; then
 * the new size's pattern is completed. */
static TU_UNUSED void tu_blk_realloc_at(blk_t *b, size_t ns, const char *file, int line)
{
  void *np = A(realloc)(b->p, ns);
  if (np == NULL) tu_fail(file, line, "np != NULL", "realloc(%zu -> %zu)", b->size, ns);
  blk_t old = *b;
  old.p = np;
  tu_blk_check_at(&old, ns, "after realloc", file, line);
  /* a block patterned whole keeps it below its old size; else the sampled
   * words move with the size */
  size_t from = old.size <= TU_BLK_FULL ? (old.size < ns ? old.size : ns) : 0;
  b->p = np;
  b->size = ns;
  if (from < ns) blk_fill_from(b, from);
}

/* b holds its pattern (below limit). */
#define CHECK_BLK(b, when) tu_blk_check_at((b), (b)->size, (when), __FILE__, __LINE__)
#define CHECK_BLK_TO(b, limit, when) tu_blk_check_at((b), (limit), (when), __FILE__, __LINE__)
/* malloc'ed and patterned; checked and freed (p set to NULL); realloc'ed. */
#define blk_alloc(b, size, id) tu_blk_alloc_at((b), (size), (id), __FILE__, __LINE__)
#define blk_free(b, when) tu_blk_free_at((b), (when), __FILE__, __LINE__)
#define blk_realloc(b, ns) tu_blk_realloc_at((b), (ns), __FILE__, __LINE__)

#endif
