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
 * Every operation kind must have run (given 10,000 operations per thread),
 * and the counts must balance: every block allocated or adopted left its
 * slot once (freed or handed off), every hand-off was adopted, dropped or
 * drained.
 *
 * Usage: test_stress [mixed|all] [threads] [ops-per-thread] [seed]
 * Calls the hak_ API when compiled with -DUSE_HAK_API, else the standard names.
 */
#define TU_BLK_FULL (16 * 1024)
#define TU_BLK_SAMPLES 16
#include "testutil.h"

#include <pthread.h>

#define NSLOTS 2048
#define NEXCH 512
#define BUDGET (96 * MiB)
#define MAX_HANDOFF (256 * KiB)

/* What the threads did, by kind. */
enum { N_MALLOC, N_CALLOC, N_ALIGNED, N_REALLOC, N_FREE, N_HANDOFF, N_ADOPT, N_DROP, N_KINDS };
static const char *const kind_name[N_KINDS] = {"malloc", "calloc", "aligned", "realloc", "free", "handoff", "adopt",
                                               "drop"};

typedef struct {
  uint64_t rng;
  size_t live;
  blk_t slots[NSLOTS];
  uint64_t n[N_KINDS];
} thread_t;

static _Atomic(blk_t *) exchange[NEXCH];
static int nthreads;
static long nops;
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

static void do_free(thread_t *t, blk_t *s)
{
  t->live -= s->size;
  blk_free(s, "before free");
  t->n[N_FREE]++;
}

static void do_alloc(thread_t *t, blk_t *s)
{
  size_t size = rand_size(&t->rng);
  if (t->live + size > BUDGET) return;
  uint64_t r = tu_xorshift(&t->rng) % 100;
  void *p;

  if (r < 60) {
    p = A(malloc)(size);
    CHECKF(p != NULL, "malloc(%zu) failed", size);
    t->n[N_MALLOC]++;
  } else if (r < 80) {
    p = A(calloc)(1, size);
    CHECKF(p != NULL, "calloc(%zu) failed", size);
    /* zeroed: check what we will check later */
    const unsigned char *b = p;
    size_t lim = size <= TU_BLK_FULL ? size : 4 * KiB;
    for (size_t i = 0; i < lim; i++) CHECKF(b[i] == 0, "calloc(%zu) byte %zu = %#x", size, i, b[i]);
    for (size_t i = size - (size <= TU_BLK_FULL ? 0 : 4 * KiB); i < size; i++)
      CHECKF(b[i] == 0, "calloc(%zu) byte %zu = %#x", size, i, b[i]);
    t->n[N_CALLOC]++;
  } else {
    size_t align = (size_t)8 << (tu_xorshift(&t->rng) % 14); /* 8 B .. 64 KiB */
    p = NULL;
    int e = A(posix_memalign)(&p, align, size);
    CHECKF(e == 0 && p != NULL, "posix_memalign(%zu, %zu) = %d", align, size, e);
    CHECKF(((uintptr_t)p & (align - 1)) == 0, "posix_memalign(%zu, %zu) = %p misaligned", align, size, p);
    t->n[N_ALIGNED]++;
  }

  /* 8-byte alignment at least (the 16-byte rule for sizes >= 16 is test_api's). */
  CHECKF(((uintptr_t)p & 7) == 0 || size < 8, "block %p of size %zu misaligned", p, size);
  s->p = p;
  s->size = size;
  s->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
  t->live += size;
  blk_fill(s);
}

static void do_realloc(thread_t *t, blk_t *s)
{
  size_t ns = rand_size(&t->rng);
  if ((tu_xorshift(&t->rng) & 3) == 0) ns = s->size + s->size / 8 + 1; /* small growth: in-place paths */
  if (t->live - s->size + ns > BUDGET) return;
  CHECK_BLK(s, "before realloc");
  t->live = t->live - s->size + ns;
  blk_realloc(s, ns);
  t->n[N_REALLOC]++;
}

static void do_handoff(thread_t *t, blk_t *s)
{
  blk_t *env = NULL;
  if (s->p != NULL) {
    if (s->size > MAX_HANDOFF) return;
    CHECK_BLK(s, "before hand-off");
    env = A(malloc)(sizeof *env);
    CHECK(env != NULL);
    *env = *s;
    t->live -= s->size;
    s->p = NULL;
    t->n[N_HANDOFF]++;
  }
  blk_t *got = atomic_exchange_explicit(&exchange[tu_xorshift(&t->rng) % NEXCH], env, memory_order_acq_rel);
  if (got != NULL) {
    CHECK_BLK(got, "adopted block");
    if (t->live + got->size > BUDGET) {
      A(free)(got->p);
      t->n[N_DROP]++;
    } else {
      *s = *got;
      t->live += s->size;
      t->n[N_ADOPT]++;
    }
    A(free)(got); /* the envelope was allocated by another thread */
  }
}

static thread_t *threads[64];

static void *worker(void *arg)
{
  thread_t *t = arg;
  for (long i = 0; i < nops; i++) {
    uint64_t x = tu_xorshift(&t->rng);
    blk_t *s = &t->slots[x % NSLOTS];
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
      CHECK_BLK(s, "periodic check");
    }
  }
  /* Free half; leave the rest for the main thread to free after we exit. */
  for (int i = 0; i < NSLOTS; i += 2)
    if (t->slots[i].p) do_free(t, &t->slots[i]);
  return NULL;
}

static void test_mixed(void)
{
  nthreads = (int)tu_param(0, 8);
  nops = (long)tu_param(1, 1000000);
  uint64_t seed = (uint64_t)tu_param(2, 1);
  CHECKF(nthreads >= 1 && nthreads <= 64 && nops >= 0, "threads %d (1 .. 64), ops %ld", nthreads, nops);
  double t0 = tu_now();
  pthread_t th[64];
  for (int i = 0; i < nthreads; i++) {
    /* The thread records live in the heap under test. */
    thread_t *t = A(calloc)(1, sizeof *t);
    CHECK(t != NULL);
    t->rng = (seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(i + 1) * 0xBF58476D1CE4E5B9ull);
    if (t->rng == 0) t->rng = 1;
    threads[i] = t;
    CHECK(pthread_create(&th[i], NULL, worker, t) == 0);
  }
  for (int i = 0; i < nthreads; i++) CHECK(pthread_join(th[i], NULL) == 0);
  double t1 = tu_now();
  size_t rss = tu_rss();

  uint64_t tot[N_KINDS] = {0};
  size_t left = 0;
  for (int i = 0; i < nthreads; i++) {
    thread_t *t = threads[i];
    for (int k = 0; k < NSLOTS; k++)
      if (t->slots[k].p) { left++; do_free(t, &t->slots[k]); }
    for (int k = 0; k < N_KINDS; k++) tot[k] += t->n[k];
  }
  size_t drained = 0;
  for (int i = 0; i < NEXCH; i++) {
    blk_t *e = atomic_exchange(&exchange[i], NULL);
    if (e) {
      blk_free(e, "exchange drain");
      A(free)(e);
      drained++;
    }
  }
  for (int i = 0; i < nthreads; i++) A(free)(threads[i]);
  if (nops >= 10000)
    for (int k = 0; k < N_KINDS; k++)
      CHECKF(tot[k] > 0 || k == N_DROP, "no %s in %d x %ld operations", kind_name[k], nthreads, nops);
  uint64_t in = tot[N_MALLOC] + tot[N_CALLOC] + tot[N_ALIGNED] + tot[N_ADOPT], out = tot[N_FREE] + tot[N_HANDOFF];
  CHECKF(in == out, "%llu blocks allocated or adopted into slots, %llu freed or handed off",
         (unsigned long long)in, (unsigned long long)out);
  CHECKF(tot[N_HANDOFF] == tot[N_ADOPT] + tot[N_DROP] + drained, "%llu handed off, %llu adopted, %llu dropped, %zu drained",
         (unsigned long long)tot[N_HANDOFF], (unsigned long long)tot[N_ADOPT], (unsigned long long)tot[N_DROP],
         drained);
  printf("test_stress (%s): %d threads x %ld ops, seed %llu: %.2f s; malloc %llu calloc %llu aligned %llu "
         "realloc %llu free %llu handoff %llu adopt %llu drop %llu; freed after exit %zu, drained %zu; "
         "rss %.1f MiB: OK\n",
         API_NAME, nthreads, nops, (unsigned long long)seed, t1 - t0, (unsigned long long)tot[N_MALLOC],
         (unsigned long long)tot[N_CALLOC], (unsigned long long)tot[N_ALIGNED], (unsigned long long)tot[N_REALLOC],
         (unsigned long long)tot[N_FREE], (unsigned long long)tot[N_HANDOFF], (unsigned long long)tot[N_ADOPT],
         (unsigned long long)tot[N_DROP], left, drained, (double)rss / (double)MiB);
}

static const tu_case_t cases[] = {
  {"mixed", test_mixed, 0},
};

int main(int argc, char **argv)
{
  return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, "[threads] [ops-per-thread] [seed]");
}
