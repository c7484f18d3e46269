/* libFuzzer target for the hak_ API.
 *
 * The input is a program: the bytes are split in two halves, each run by its
 * own thread (the fuzzer's thread and one persistent worker, started together
 * for every input). Each thread keeps 32 slots of blocks with a model
 * (pointer, size, alignment asked for, id) and decodes ops from its bytes:
 *   malloc, calloc (checked zero), realloc (prefix kept), reallocarray,
 *   posix_memalign / aligned_alloc / memalign (alignment checked), free,
 *   free_sized, free_aligned_sized, malloc_usable_size (>= size; the slack is
 *   written), a swap through a shared array of 8 atomic slots (the other
 *   thread then frees/reallocs blocks this one allocated), hak_owns, and
 *   hak_thread_done (the heap is handed back and adopted again).
 * Every block carries a fill pattern derived from its id, checked before
 * every free, realloc and adoption; alignment: 16 B for sizes >= 16 (8 B
 * below), the requested alignment for the aligned calls. Live memory per
 * thread is capped (32 MiB). Everything is freed at the end of each input.
 * A failed check prints a message and abort()s, so libFuzzer keeps the input.
 *
 * Built by tests/fuzz/run.sh with clang -fsanitize=fuzzer,undefined together
 * with the library sources (the hak_ API only; libFuzzer keeps the C
 * library's malloc).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hakmem.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
#define NSLOTS 32
#define NSHARED 8
#define BUDGET (32 * MiB)
#define FULL (16 * KiB)

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 2, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  if (write(2, "fuzz_alloc: ", 12) < 0 || write(2, buf, (size_t)n) < 0) { /* nothing to do */ }
  abort();
}
#define FCHECK(c, ...) do { if (__builtin_expect(!(c), 0)) fail(__VA_ARGS__); } while (0)

typedef struct {
  unsigned char *p;
  size_t size;  /* bytes holding the pattern */
  size_t align; /* alignment asked for (0: malloc-like) */
  uint64_t id;
} blk_t;

static inline uint8_t pat(uint64_t id, size_t o)
{
  uint64_t x = (id * 0x9E3779B97F4A7C15ull) ^ ((o >> 3) * 0xD6E8FEB86659FD93ull);
  return (uint8_t)(x >> ((o & 7) * 8));
}

/* Pattern on all of a block up to FULL, else on its first and last 4 KiB. */
static void fill(const blk_t *b, size_t from)
{
  if (b->size <= FULL) {
    for (size_t o = from; o < b->size; o++) b->p[o] = pat(b->id, o);
    return;
  }
  for (size_t o = from; o < 4 * KiB; o++) b->p[o] = pat(b->id, o);
  size_t t = b->size - 4 * KiB;
  for (size_t o = t > from ? t : from; o < b->size; o++) b->p[o] = pat(b->id, o);
}

static void check(const blk_t *b, size_t limit, const char *when)
{
  size_t end = limit < b->size ? limit : b->size;
  size_t head = b->size <= FULL ? end : (end < 4 * KiB ? end : 4 * KiB);
  for (size_t o = 0; o < head; o++)
    FCHECK(b->p[o] == pat(b->id, o), "%s: block %p (id %llu, size %zu) corrupted at byte %zu", when, (void *)b->p,
           (unsigned long long)b->id, b->size, o);
  if (b->size > FULL)
    for (size_t o = b->size - 4 * KiB; o < end; o++)
      FCHECK(b->p[o] == pat(b->id, o), "%s: block %p (id %llu, size %zu) corrupted at byte %zu", when,
             (void *)b->p, (unsigned long long)b->id, b->size, o);
}

static void check_align(const void *p, size_t size, size_t align, const char *what)
{
  uintptr_t a = (uintptr_t)p;
  size_t want = align ? align : (size >= 16 ? 16 : 8);
  FCHECK((a & (want - 1)) == 0, "%s(size %zu, align %zu) = %p: not %zu-aligned", what, size, align, p, want);
  FCHECK(hak_owns(p), "%s(size %zu) = %p: hak_owns says no", what, size, p);
}

static _Atomic(blk_t *) shared[NSHARED];
static atomic_uint_fast64_t next_id = 1;

typedef struct {
  const uint8_t *d;
  size_t n, i;
  blk_t slot[NSLOTS];
  size_t live;
} prog_t;

static unsigned byte(prog_t *g)
{
  return g->i < g->n ? g->d[g->i++] : 0;
}

static size_t get_size(prog_t *g)
{
  unsigned s = byte(g);
  unsigned x = byte(g) | (byte(g) << 8);
  switch (s >> 5) {
    case 0: case 1: case 2: return s & 31 ? (s & 31) : 0;        /* 0 .. 31 */
    case 3: return 32 + x % 1000;                               /* tiny */
    case 4: return 1 * KiB + x % (31 * KiB + 1);                /* mid (up to 32 KiB) */
    case 5: return 32 * KiB - 64 + x % 192;                     /* the mid/large edge */
    case 6: return 32 * KiB + (size_t)x * 31;                   /* large, up to ~2 MiB */
    default: return (s & 1) ? 2 * MiB + (size_t)x * 96 : (size_t)x * 8 + 1; /* huge up to ~8 MiB, or odd */
  }
}

static size_t get_align(prog_t *g)
{
  unsigned a = byte(g);
  return (size_t)8 << (a % 20); /* 8 B .. 4 MiB */
}

static void drop(prog_t *g, blk_t *b, const char *when)
{
  if (b->p == NULL) return;
  check(b, b->size, when);
  hak_free(b->p);
  g->live -= b->size;
  b->p = NULL;
}

static void run_prog(prog_t *g)
{
  while (g->i < g->n) {
    unsigned op = byte(g);
    blk_t *b = &g->slot[byte(g) % NSLOTS];
    switch (op % 14) {
      case 0: case 1: { /* malloc */
        size_t sz = get_size(g);
        if (g->live + sz > BUDGET) break;
        drop(g, b, "before malloc");
        void *p = hak_malloc(sz);
        FCHECK(p != NULL, "malloc(%zu) = NULL", sz);
        check_align(p, sz, 0, "malloc");
        *b = (blk_t){ p, sz, 0, atomic_fetch_add(&next_id, 1) };
        fill(b, 0);
        g->live += sz;
        break;
      }
      case 2: { /* calloc */
        size_t sz = get_size(g);
        size_t cnt = 1 + byte(g) % 8;
        sz /= cnt;
        if (g->live + sz * cnt > BUDGET) break;
        drop(g, b, "before calloc");
        unsigned char *p = hak_calloc(cnt, sz);
        FCHECK(p != NULL, "calloc(%zu, %zu) = NULL", cnt, sz);
        check_align(p, sz * cnt, 0, "calloc");
        size_t tot = sz * cnt, lim = tot < 64 * KiB ? tot : 64 * KiB;
        for (size_t o = 0; o < lim; o++) FCHECK(p[o] == 0, "calloc(%zu, %zu): byte %zu = %#x", cnt, sz, o, p[o]);
        for (size_t o = tot - lim; o < tot; o++) FCHECK(p[o] == 0, "calloc(%zu, %zu): byte %zu = %#x", cnt, sz, o, p[o]);
        *b = (blk_t){ p, tot, 0, atomic_fetch_add(&next_id, 1) };
        fill(b, 0);
        g->live += tot;
        break;
      }
      case 3: case 4: { /* realloc / reallocarray */
        size_t sz = get_size(g);
        if (b->p == NULL || g->live - b->size + sz > BUDGET) break;
        check(b, b->size, "before realloc");
        if (sz == 0) sz = 1; /* realloc(p, 0) frees: not modelled */
        void *q = op % 14 == 3 ? hak_realloc(b->p, sz) : hak_reallocarray(b->p, 1, sz);
        FCHECK(q != NULL, "realloc(%p, %zu) = NULL", (void *)b->p, sz);
        check_align(q, sz, 0, "realloc");
        size_t keep = sz < b->size ? sz : b->size;
        blk_t nb = { q, sz, 0, b->id };
        /* the kept prefix: check what fill() wrote for the old size */
        blk_t old = { q, b->size, 0, b->id };
        if (b->size <= FULL) check(&old, keep, "after realloc");
        else { blk_t h = { q, keep < 4 * KiB ? keep : 4 * KiB, 0, b->id }; check(&h, h.size, "after realloc"); }
        g->live = g->live - b->size + sz;
        *b = nb;
        fill(b, 0);
        break;
      }
      case 5: case 6: { /* aligned */
        size_t sz = get_size(g), al = get_align(g);
        if (g->live + sz > BUDGET) break;
        drop(g, b, "before aligned");
        void *p = NULL;
        const char *what;
        unsigned how = byte(g) % 3;
        if (how == 0) {
          what = "posix_memalign";
          int rc = hak_posix_memalign(&p, al, sz);
          FCHECK(rc == 0, "posix_memalign(%zu, %zu) = %d", al, sz, rc);
        } else if (how == 1) {
          what = "aligned_alloc";
          p = hak_aligned_alloc(al, sz);
        } else {
          what = "memalign";
          p = hak_memalign(al, sz);
        }
        FCHECK(p != NULL, "%s(%zu, %zu) = NULL", what, al, sz);
        check_align(p, sz, al, what);
        *b = (blk_t){ p, sz, al, atomic_fetch_add(&next_id, 1) };
        fill(b, 0);
        g->live += sz;
        break;
      }
      case 7: case 8: /* free */
        drop(g, b, "before free");
        break;
      case 9: /* free_sized / free_aligned_sized */
        if (b->p == NULL) break;
        check(b, b->size, "before free_sized");
        if (b->align) hak_free_aligned_sized(b->p, b->align, b->size);
        else hak_free_sized(b->p, b->size);
        g->live -= b->size;
        b->p = NULL;
        break;
      case 10: { /* usable size: the slack is ours to write */
        if (b->p == NULL) break;
        size_t us = hak_malloc_usable_size(b->p);
        FCHECK(us >= b->size, "malloc_usable_size(%p) = %zu < %zu", (void *)b->p, us, b->size);
        if (us - b->size <= 64 * KiB) memset(b->p + b->size, 0xA5, us - b->size);
        else { b->p[us - 1] = 0xA5; b->p[b->size] = 0xA5; }
        check(b, b->size, "after writing the usable slack");
        break;
      }
      case 11: case 12: { /* swap with the other thread */
        blk_t *env = NULL;
        if (b->p != NULL) {
          env = hak_malloc(sizeof *env);
          FCHECK(env != NULL, "malloc(envelope) = NULL");
          *env = *b;
          g->live -= b->size;
          b->p = NULL;
        }
        blk_t *got = atomic_exchange(&shared[byte(g) % NSHARED], env);
        if (got != NULL) {
          check(got, got->size, "adopted");
          *b = *got;
          g->live += b->size;
          hak_free(got);
          if (g->live > BUDGET) drop(g, b, "over budget");
        }
        break;
      }
      default: /* hand the heap back (as at thread exit); the next call adopts one */
        if (byte(g) % 8 == 0) hak_thread_done();
        break;
    }
  }
  for (int k = 0; k < NSLOTS; k++) drop(g, &g->slot[k], "at end");
  FCHECK(g->live == 0, "live bytes %zu at end", g->live);
}

/* The second thread: persistent, runs one half per input. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static prog_t *work;
static int done_flag;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *worker(void *arg)
{
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (work == NULL) pthread_cond_wait(&cv, &mu);
    prog_t *g = work;
    pthread_mutex_unlock(&mu);
    run_prog(g);
    pthread_mutex_lock(&mu);
    work = NULL;
    done_flag = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

static void start_worker(void)
{
  pthread_t th;
  FCHECK(pthread_create(&th, NULL, worker, NULL) == 0, "pthread_create failed");
  pthread_detach(th);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static prog_t ga, gb;
  pthread_once(&once, start_worker);
  size_t half = size / 2;
  memset(&ga, 0, sizeof ga);
  memset(&gb, 0, sizeof gb);
  ga.d = data; ga.n = half;
  gb.d = data + half; gb.n = size - half;

  pthread_mutex_lock(&mu);
  done_flag = 0;
  work = &gb;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);

  run_prog(&ga);

  pthread_mutex_lock(&mu);
  while (!done_flag) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);

  /* Both halves are done: free what is left in the shared array. */
  for (int k = 0; k < NSHARED; k++) {
    blk_t *e = atomic_exchange(&shared[k], NULL);
    if (e != NULL) {
      check(e, e->size, "drain");
      hak_free(e->p);
      hak_free(e);
    }
  }
  return 0;
}
