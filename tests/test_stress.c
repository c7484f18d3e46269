/* Multi-threaded allocator stress.
 *
 * Workload: T threads (default 8) each run N operations (default 1,000,000)
 * driven by a per-thread deterministic xorshift RNG seeded from (seed, thread).
 * Each thread owns an array of slots. Sizes are skewed across all of hakmem's
 * pools: ~80 % 8 B - 1 KiB, ~15 % 1 - 32 KiB, ~5 % 32 KiB - 1 MiB and ~0.1 %
 * 1 - 8 MiB. Operations on a random slot: malloc, calloc (checked zero),
 * posix_memalign with a random power-of-two alignment 8 B .. 64 KiB (checked
 * aligned), realloc (content checked to survive), free, and hand-off: a block
 * (with a small envelope holding its id and size, itself a heap block) is
 * swapped into a shared exchange array of atomic pointers with
 * atomic_exchange, and whatever was there is adopted; so most blocks are
 * freed, reallocated or realloc'ed by a thread other than their allocator.
 * Every block carries a pattern derived from its id (never its address);
 * blocks up to 16 KiB are checked fully before free/realloc/adoption, larger
 * ones on their first and last 4 KiB plus 16 sampled words. Live memory is
 * bounded (per-thread budget 96 MiB, hand-offs <= 256 KiB: peak well under
 * 1.5 GiB). At the end, each thread frees half its slots and leaves the other
 * half to the main thread, which frees them after the threads exited, then
 * drains the exchange.
 *
 * Usage: test_stress [threads] [ops-per-thread] [seed]
 * Calls the hak_ API when compiled with -DUSE_HAK_API, else the standard names.
 */
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
#define NSLOTS 2048
#define NEXCH 512
#define BUDGET (96 * MiB)
#define FULLCHECK (16 * KiB)
#define MAX_HANDOFF (256 * KiB)

typedef struct {
  void *p;
  size_t size;
  uint64_t id;
} slot_t;

typedef struct {
  int tid;
  uint64_t rng;
  size_t live;
  slot_t slots[NSLOTS];
  /* counters */
  uint64_t n_malloc, n_calloc, n_aligned, n_realloc, n_free, n_handoff, n_adopt;
} thread_t;

static _Atomic(slot_t *) exchange[NEXCH];
static int nthreads = 8;
static long nops = 1000000;
static uint64_t seed = 1;
static atomic_uint_fast64_t next_id = 1;

static size_t rand_size(uint64_t *r)
{
  uint64_t x = tu_xorshift(r);
  unsigned sel = (unsigned)(x % 10000);
  uint64_t y = tu_xorshift(r);
  size_t lo, hi;
  if (sel < 8000) { lo = 8; hi = 1024; }
  else if (sel < 9500) { lo = 1024; hi = 32 * KiB; }
  else if (sel < 9990) { lo = 32 * KiB; hi = MiB; }
  else { lo = MiB; hi = 8 * MiB; }
  /* log-uniform in [lo, hi], exact sizes (not rounded). */
  int bits = 63 - __builtin_clzll(hi / lo);
  size_t base = lo << (y % (unsigned)(bits + 1));
  size_t s = base + (size_t)((y >> 8) % base);
  if (s > hi) s = hi;
  if ((y >> 40) % 64 == 0) s = 1 + (y >> 50) % 16; /* a few really tiny ones */
  return s;
}

/* Regions of a block holding the pattern: all of it up to FULLCHECK, else the
 * first and last 4 KiB plus sampled words. */
static void sample_words(const slot_t *s, size_t idx[16])
{
  uint64_t r = s->id * 0x9E3779B97F4A7C15ull + 12345;
  size_t nw = s->size / 8;
  for (int k = 0; k < 16; k++) idx[k] = (size_t)(tu_xorshift(&r) % nw);
}

static void fill_block(const slot_t *s, size_t from)
{
  if (s->size <= FULLCHECK) { tu_fill(s->p, from, s->size, s->id); return; }
  size_t head = 4 * KiB, tail = s->size - 4 * KiB;
  if (from < head) tu_fill(s->p, from, head, s->id);
  tu_fill(s->p, tail < from ? from : tail, s->size, s->id);
  size_t idx[16];
  sample_words(s, idx);
  uint64_t *w = s->p;
  for (int k = 0; k < 16; k++)
    if (idx[k] * 8 >= from) w[idx[k]] = tu_pat(s->id, idx[k]);
}

/* Checks the pattern of s as filled for s->size, restricted to [0, limit). */
static void check_block(const slot_t *s, size_t limit, const char *when)
{
  size_t bad = (size_t)-1;
  if (s->size <= FULLCHECK) {
    bad = tu_verify(s->p, 0, limit < s->size ? limit : s->size, s->id);
  } else {
    size_t head = 4 * KiB, tail = s->size - 4 * KiB;
    bad = tu_verify(s->p, 0, head < limit ? head : limit, s->id);
    if (bad == (size_t)-1 && tail < limit) bad = tu_verify(s->p, tail, limit < s->size ? limit : s->size, s->id);
    if (bad == (size_t)-1) {
      size_t idx[16];
      sample_words(s, idx);
      const uint64_t *w = s->p;
      for (int k = 0; k < 16; k++)
        if ((idx[k] + 1) * 8 <= limit && w[idx[k]] != tu_pat(s->id, idx[k])) { bad = idx[k] * 8; break; }
    }
  }
  CHECKF(bad == (size_t)-1, "%s: block %p (id %llu, size %zu) corrupted at byte %zu", when, s->p,
         (unsigned long long)s->id, s->size, bad);
}

static void do_free(thread_t *t, slot_t *s)
{
  check_block(s, s->size, "before free");
  A(free)(s->p);
  t->live -= s->size;
  s->p = NULL;
  t->n_free++;
}

static void do_alloc(thread_t *t, slot_t *s)
{
  size_t size = rand_size(&t->rng);
  if (t->live + size > BUDGET) return;
  uint64_t r = tu_xorshift(&t->rng) % 100;
  void *p;

  if (r < 60) {
    p = A(malloc)(size);
    CHECKF(p != NULL, "malloc(%zu) failed", size);
    t->n_malloc++;
  } else if (r < 80) {
    p = A(calloc)(1, size);
    CHECKF(p != NULL, "calloc(%zu) failed", size);
    /* zeroed: check what we will check later */
    const unsigned char *b = p;
    size_t lim = size <= FULLCHECK ? size : 4 * KiB;
    for (size_t i = 0; i < lim; i++) CHECKF(b[i] == 0, "calloc(%zu) byte %zu = %#x", size, i, b[i]);
    for (size_t i = size - (size <= FULLCHECK ? 0 : 4 * KiB); i < size; i++)
      CHECKF(b[i] == 0, "calloc(%zu) byte %zu = %#x", size, i, b[i]);
    t->n_calloc++;
  } else {
    size_t align = (size_t)8 << (tu_xorshift(&t->rng) % 14); /* 8 B .. 64 KiB */
    p = NULL;
    int e = A(posix_memalign)(&p, align, size);
    CHECKF(e == 0 && p != NULL, "posix_memalign(%zu, %zu) = %d", align, size, e);
    CHECKF(((uintptr_t)p & (align - 1)) == 0, "posix_memalign(%zu, %zu) = %p misaligned", align, size, p);
    t->n_aligned++;
  }

  /* 8-byte alignment at least (the 16-byte rule for sizes >= 16 is test_api's). */
  CHECKF(((uintptr_t)p & 7) == 0 || size < 8, "block %p of size %zu misaligned", p, size);
  s->p = p;
  s->size = size;
  s->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
  t->live += size;
  fill_block(s, 0);
}

static void do_realloc(thread_t *t, slot_t *s)
{
  size_t ns = rand_size(&t->rng);
  if ((tu_xorshift(&t->rng) & 3) == 0) ns = s->size + s->size / 8 + 1; /* small growth: in-place paths */
  if (t->live - s->size + ns > BUDGET) return;
  check_block(s, s->size, "before realloc");
  void *np = A(realloc)(s->p, ns);
  CHECKF(np != NULL, "realloc(%zu -> %zu) failed", s->size, ns);
  slot_t old = *s;
  old.p = np;
  check_block(&old, ns, "after realloc");
  t->live = t->live - s->size + ns;
  s->p = np;
  s->size = ns;
  /* The pattern depends on the id and offset only: refill the new size's regions. */
  size_t from = old.size <= FULLCHECK ? (old.size < ns ? old.size & ~(size_t)7 : ns) : 0;
  if (from < ns) fill_block(s, from);
  t->n_realloc++;
}

static void do_handoff(thread_t *t, slot_t *s)
{
  slot_t *env = NULL;
  if (s->p != NULL) {
    if (s->size > MAX_HANDOFF) return;
    check_block(s, s->size, "before hand-off");
    env = A(malloc)(sizeof *env);
    CHECK(env != NULL);
    *env = *s;
    t->live -= s->size;
    s->p = NULL;
    t->n_handoff++;
  }
  slot_t *got = atomic_exchange_explicit(&exchange[tu_xorshift(&t->rng) % NEXCH], env, memory_order_acq_rel);
  if (got != NULL) {
    check_block(got, got->size, "adopted block");
    if (t->live + got->size > BUDGET) {
      A(free)(got->p);
    } else {
      *s = *got;
      t->live += s->size;
      t->n_adopt++;
    }
    A(free)(got); /* the envelope was allocated by another thread */
  }
}

static slot_t *leftovers[64];
static thread_t *threads[64];

static void *worker(void *arg)
{
  thread_t *t = arg;
  for (long i = 0; i < nops; i++) {
    uint64_t x = tu_xorshift(&t->rng);
    slot_t *s = &t->slots[x % NSLOTS];
    unsigned op = (unsigned)((x >> 32) % 100);
    if (s->p == NULL) {
      if (op < 85) do_alloc(t, s);
      else do_handoff(t, s);
    } else if (op < 45) {
      do_free(t, s);
    } else if (op < 70) {
      do_realloc(t, s);
    } else if (op < 90) {
      do_handoff(t, s);
    } else {
      check_block(s, s->size, "periodic check");
    }
  }
  /* Free half; leave the rest for the main thread to free after we exit. */
  for (int i = 0; i < NSLOTS; i += 2)
    if (t->slots[i].p) do_free(t, &t->slots[i]);
  return NULL;
}

int main(int argc, char **argv)
{
  if (argc > 1) nthreads = atoi(argv[1]);
  if (argc > 2) nops = atol(argv[2]);
  if (argc > 3) seed = strtoull(argv[3], NULL, 0);
  CHECK(nthreads >= 1 && nthreads <= 64 && nops >= 0);
  (void)leftovers;
  double t0 = tu_now();
  pthread_t th[64];
  for (int i = 0; i < nthreads; i++) {
    /* The thread records live in the heap under test. */
    thread_t *t = A(calloc)(1, sizeof *t);
    CHECK(t != NULL);
    t->tid = i;
    t->rng = (seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(i + 1) * 0xBF58476D1CE4E5B9ull);
    if (t->rng == 0) t->rng = 1;
    threads[i] = t;
    CHECK(pthread_create(&th[i], NULL, worker, t) == 0);
  }
  for (int i = 0; i < nthreads; i++) CHECK(pthread_join(th[i], NULL) == 0);
  double t1 = tu_now();
  size_t rss = tu_rss();

  uint64_t tot[7] = {0};
  size_t left = 0;
  for (int i = 0; i < nthreads; i++) {
    thread_t *t = threads[i];
    for (int k = 0; k < NSLOTS; k++)
      if (t->slots[k].p) { left++; do_free(t, &t->slots[k]); }
    tot[0] += t->n_malloc; tot[1] += t->n_calloc; tot[2] += t->n_aligned; tot[3] += t->n_realloc;
    tot[4] += t->n_free; tot[5] += t->n_handoff; tot[6] += t->n_adopt;
  }
  size_t drained = 0;
  for (int i = 0; i < NEXCH; i++) {
    slot_t *e = atomic_exchange(&exchange[i], NULL);
    if (e) {
      check_block(e, e->size, "exchange drain");
      A(free)(e->p);
      A(free)(e);
      drained++;
    }
  }
  for (int i = 0; i < nthreads; i++) A(free)(threads[i]);
  printf("test_stress (%s): %d threads x %ld ops, seed %llu: %.2f s; malloc %llu calloc %llu aligned %llu "
         "realloc %llu free %llu handoff %llu adopt %llu; freed after exit %zu, drained %zu; rss %.1f MiB: OK\n",
         API_NAME, nthreads, nops, (unsigned long long)seed, t1 - t0, (unsigned long long)tot[0],
         (unsigned long long)tot[1], (unsigned long long)tot[2], (unsigned long long)tot[3],
         (unsigned long long)tot[4], (unsigned long long)tot[5], (unsigned long long)tot[6], left, drained,
         (double)rss / (double)MiB);
  return 0;
}
