/* Faults: fork under allocation load, and running out of address space.
 *
 * fork (100 times by default): 4 worker threads allocate and free
 *   continuously (sizes across every pool, 16 B .. 4 MiB, blocks handed to
 *   other threads through an atomic exchange array so remote frees are in
 *   flight) while the main thread forks. Before each fork the main thread
 *   allocates one patterned block per pool; the child (with alarm(10), so a
 *   deadlock on an allocator lock held across fork becomes a failure)
 *   verifies and frees those, then allocates 200 blocks from every pool
 *   (16 B, 4 KiB, 100 KiB, 4 MiB), fills, checks and frees them, and
 *   _exit(0)s. The parent requires every child to exit 0.
 *
 * oom: in a child process, RLIMIT_AS is set to the current VmSize + 256 MiB;
 *   blocks of several sizes (16 B, 200 B, 4 KiB, 20 KiB, 100 KiB, 1 MiB,
 *   4 MiB, 32 MiB), round robin, are allocated with malloc, calloc and
 *   posix_memalign until every size returns NULL. Every NULL must come with
 *   errno == ENOMEM (posix_memalign: return value ENOMEM). Then: a realloc
 *   that cannot be satisfied returns NULL + ENOMEM and leaves the block
 *   intact; every block still holds its pattern; half of the blocks are
 *   freed and the same sizes allocated again, smallest first: every block
 *   up to 32 KiB must succeed, larger ones may fail only with ENOMEM
 *   (fragmentation, alignment slack of mappings) and at least half of the
 *   freed bytes must be obtained again; everything is checked; finally all is
 *   freed and one 96 MiB block must be obtainable (caches give memory back
 *   under pressure).
 *
 * Blocks carry a pattern over the whole block up to 64 KiB, else over the
 * first and last 4 KiB and one word in every 4 KiB page.
 *
 * Usage: test_faults [oom|fork|all] [forks]
 * Calls the hak_ API when compiled with -DUSE_HAK_API, else the standard names.
 */
#define TU_BLK_FULL (64 * 1024)
#define TU_BLK_SAMPLES 0
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* ---------------------------------------------------------------------- */
/* fork under load */

#define NWORKERS 4
#define WSLOTS 256
#define NEXCH 64

static atomic_int stop_workers;
/* Set while a child runs: the fork happens under load, but the child need not
 * share two cores with four workers (on VMs where faults are slow, that made
 * each fork take over a second). */
static atomic_int pause_workers;
static _Atomic(blk_t *) exch[NEXCH];
static atomic_uint_fast64_t next_id = 1;
static atomic_long worker_ops;
static atomic_long worker_progress; /* +1 per 64 ops of any worker */

static size_t worker_size(uint64_t *r)
{
  uint64_t x = tu_xorshift(r);
  unsigned sel = (unsigned)(x % 1000);
  size_t s;
  if (sel < 700) s = 8 + (size_t)((x >> 16) % 1017);        /* tiny */
  else if (sel < 900) s = 1 * KiB + (size_t)((x >> 16) % (31 * KiB)); /* mid */
  else if (sel < 995) s = 32 * KiB + (size_t)((x >> 16) % (2 * MiB)); /* large */
  else s = 2 * MiB + (size_t)((x >> 16) % (6 * MiB));      /* huge */
  return s;
}

static void *worker(void *arg)
{
  uint64_t rng = 0x1234567ull + (uint64_t)(uintptr_t)arg * 7919;
  blk_t slots[WSLOTS];
  memset(slots, 0, sizeof slots);
  long ops = 0;
  while (!atomic_load_explicit(&stop_workers, memory_order_relaxed)) {
    if (atomic_load_explicit(&pause_workers, memory_order_relaxed)) {
      struct timespec ts = { 0, 1000 * 1000 };
      nanosleep(&ts, NULL);
      continue;
    }
    blk_t *s = &slots[tu_xorshift(&rng) % WSLOTS];
    unsigned op = (unsigned)(tu_xorshift(&rng) % 16);
    if (s->p != NULL) {
      CHECK_BLK(s, "worker");
      if (op == 0) {
        /* hand off: envelope (a heap block itself) through the exchange */
        blk_t *env = A(malloc)(sizeof *env);
        CHECK(env != NULL);
        *env = *s;
        s->p = NULL;
        blk_t *got = atomic_exchange(&exch[tu_xorshift(&rng) % NEXCH], env);
        if (got != NULL) {
          blk_free(got, "adopted");
          A(free)(got);
        }
      } else if (op < 3) {
        blk_realloc(s, worker_size(&rng));
      } else {
        A(free)(s->p);
        s->p = NULL;
      }
    } else {
      blk_alloc(s, worker_size(&rng), atomic_fetch_add(&next_id, 1));
    }
    if ((++ops & 63) == 0) atomic_fetch_add_explicit(&worker_progress, 1, memory_order_relaxed);
  }
  for (int i = 0; i < WSLOTS; i++)
    if (slots[i].p != NULL) blk_free(&slots[i], "worker end");
  atomic_fetch_add(&worker_ops, ops);
  return NULL;
}

static const size_t pool_sizes[4] = { 16, 4 * KiB, 100 * KiB, 4 * MiB };

static void *child_thread(void *arg)
{
  blk_t *b = arg;
  for (int i = 0; i < 200; i++) {
    blk_free(&b[i], "child thread: remote block");
    blk_t own;
    blk_alloc(&own, pool_sizes[i % 4] + 8, 8000000ull + (uint64_t)i);
    blk_free(&own, "child thread");
  }
  return NULL;
}

/* In the child (under alarm(10)). */
static void child_work(void *arg)
{
  blk_t *inherited = arg;
  /* Blocks the parent's main thread allocated just before fork. */
  for (int k = 0; k < 4; k++) blk_free(&inherited[k], "child: inherited");
  enum { N = 200 };
  static blk_t b[4][N];
  for (int round = 0; round < 2; round++) {
    for (int k = 0; k < 4; k++) {
      int n = k == 3 ? 8 : N; /* 8 x 4 MiB is enough for the huge path */
      for (int i = 0; i < n; i++) {
        b[k][i].size = pool_sizes[k] + (size_t)(i % 3) * 8;
        b[k][i].id = 1000000ull * (uint64_t)(k + 1) + (uint64_t)i + (uint64_t)round * 7;
        b[k][i].p = i % 5 == 4 ? A(calloc)(1, b[k][i].size) : A(malloc)(b[k][i].size);
        CHECKF(b[k][i].p != NULL, "child: allocation of %zu failed", b[k][i].size);
        blk_fill(&b[k][i]);
      }
    }
    for (int k = 0; k < 4; k++) {
      int n = k == 3 ? 8 : N;
      for (int i = 0; i < n; i++) blk_free(&b[k][i], "child");
    }
  }
  /* A thread in the child must work too, and free what the child's main
   * thread allocated (remote frees in the child). */
  pthread_t th;
  for (int i = 0; i < N; i++) blk_alloc(&b[0][i], 16 + (size_t)i * 40, 9000000ull + (uint64_t)i);
  CHECK(pthread_create(&th, NULL, child_thread, b[0]) == 0);
  CHECK(pthread_join(th, NULL) == 0);
}

static void test_fork(void)
{
  int nforks = (int)tu_param(0, 100);
  double t0 = tu_now();
  pthread_t th[NWORKERS];
  for (int i = 0; i < NWORKERS; i++) CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0);
  /* let them get going */
  struct timespec ts = { 0, 20 * 1000 * 1000 };
  nanosleep(&ts, NULL);

  for (int f = 0; f < nforks; f++) {
    /* the workers are back at work before the next fork */
    for (long p0 = atomic_load(&worker_progress); atomic_load(&worker_progress) < p0 + NWORKERS;) sched_yield();
    blk_t pre[4];
    for (int k = 0; k < 4; k++) blk_alloc(&pre[k], pool_sizes[k] + 24, 5000000ull + (uint64_t)f * 4 + (uint64_t)k);
    pid_t pid = tu_spawn(child_work, pre, 10, NULL);
    atomic_store(&pause_workers, 1);
    int st = tu_wait(pid);
    atomic_store(&pause_workers, 0);
    char why[64];
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork %d: child ended with %s (alarm: killed after 10 s)", f,
           tu_status_str(st, why, sizeof why));
    for (int k = 0; k < 4; k++) blk_free(&pre[k], "parent after fork");
  }
  atomic_store(&stop_workers, 1);
  for (int i = 0; i < NWORKERS; i++) CHECK(pthread_join(th[i], NULL) == 0);
  for (int i = 0; i < NEXCH; i++) {
    blk_t *e = atomic_exchange(&exch[i], NULL);
    if (e != NULL) { blk_free(e, "exchange drain"); A(free)(e); }
  }
  printf("test_faults (%s): fork: %d children exited 0 while %d threads allocated (%ld ops), %.2f s\n", API_NAME,
         nforks, NWORKERS, atomic_load(&worker_ops), tu_now() - t0);
}

/* ---------------------------------------------------------------------- */
/* out of memory */

#define OOM_MAX_BLOCKS (4u << 20)
static const size_t oom_sizes[] = { 16, 200, 4 * KiB, 20 * KiB, 100 * KiB, 1 * MiB, 4 * MiB, 32 * MiB };
#define NOOM (sizeof oom_sizes / sizeof oom_sizes[0])

/* In the child (under alarm(120)). */
static void oom_child(void *arg)
{
  /* Bookkeeping from mmap, before the limit (not from the allocator under test). */
  blk_t *blks = mmap(NULL, OOM_MAX_BLOCKS * sizeof(blk_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(blks != MAP_FAILED);
  /* Warm up every pool so lazily created state (threads, tables) exists. */
  for (size_t k = 0; k < NOOM; k++) {
    void *p = A(malloc)(oom_sizes[k]);
    CHECK(p != NULL);
    A(free)(p);
  }
  size_t base = tu_statm(0);
  CHECK(base != 0);
  struct rlimit rl = { base + 256 * MiB, base + 256 * MiB };
  CHECKF(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: errno %d", errno);

  size_t n = 0, bytes = 0, nulls = 0;
  size_t per_size[NOOM] = { 0 };
  int live[NOOM];
  int nlive = (int)NOOM;
  for (size_t k = 0; k < NOOM; k++) live[k] = 1;
  uint64_t rng = 42;
  while (nlive > 0) {
    for (size_t k = 0; k < NOOM; k++) {
      if (!live[k]) continue;
      CHECKF(n < OOM_MAX_BLOCKS, "more than %u blocks allocated under a 256 MiB limit", OOM_MAX_BLOCKS);
      size_t size = oom_sizes[k] + (size_t)(tu_xorshift(&rng) % 4) * 8;
      unsigned how = (unsigned)(n % 3);
      void *p = NULL;
      errno = 0;
      if (how == 0) {
        p = A(malloc)(size);
        CHECKF(p != NULL || errno == ENOMEM, "malloc(%zu) returned NULL with errno %d, not ENOMEM", size, errno);
      } else if (how == 1) {
        p = A(calloc)(1, size);
        CHECKF(p != NULL || errno == ENOMEM, "calloc(1, %zu) returned NULL with errno %d, not ENOMEM", size, errno);
        if (p != NULL) {
          const unsigned char *c = p;
          size_t lim = size < 4 * KiB ? size : 4 * KiB;
          for (size_t i = 0; i < lim; i++) CHECKF(c[i] == 0, "calloc(%zu) not zeroed at %zu", size, i);
          for (size_t i = size - lim; i < size; i++) CHECKF(c[i] == 0, "calloc(%zu) not zeroed at %zu", size, i);
        }
      } else {
        size_t al = (size_t)64 << (tu_xorshift(&rng) % 8); /* 64 B .. 8 KiB */
        int rc = A(posix_memalign)(&p, al, size);
        CHECKF(rc == 0 || rc == ENOMEM, "posix_memalign(%zu, %zu) returned %d, not ENOMEM", al, size, rc);
        if (rc != 0) p = NULL;
        else CHECKF(((uintptr_t)p & (al - 1)) == 0, "posix_memalign(%zu) gave %p", al, p);
      }
      if (p == NULL) {
        nulls++;
        /* A size fails for good only after a few attempts (others may still fit). */
        if (++per_size[k] >= 3) { live[k] = 0; nlive--; }
        continue;
      }
      blks[n].p = p;
      blks[n].size = size;
      blks[n].id = n + 1;
      blk_fill(&blks[n]);
      bytes += size;
      n++;
    }
  }
  CHECKF(bytes >= 64 * MiB, "only %zu bytes allocated under a 256 MiB limit", bytes);

  /* A realloc that cannot be satisfied leaves the block as it was. */
  size_t small = 0;
  while (small < n && blks[small].size > 4 * KiB) small++;
  CHECK(small < n);
  errno = 0;
  void *q = A(realloc)(blks[small].p, 512 * MiB);
  CHECKF(q == NULL && errno == ENOMEM, "realloc to 512 MiB under the limit: %p errno %d", q, errno);
  CHECK_BLK(&blks[small], "after failed realloc");
  errno = 0;
  q = A(malloc)(SIZE_MAX / 2);
  CHECKF(q == NULL && errno == ENOMEM, "malloc(SIZE_MAX/2): %p errno %d", q, errno);

  for (size_t i = 0; i < n; i++) CHECK_BLK(&blks[i], "after OOM");

  /* Free half, then allocate the same sizes again, smallest first (so the
   * freed slab space is reused before new mappings are needed). Every block
   * below 1 MiB (slabs and page runs) must be obtained again; a huge block
   * may fail only with ENOMEM (its mapping needs alignment slack), and at
   * least half of the freed bytes must be obtained again. */
  size_t freed = 0, freed_bytes = 0, again = 0, again_bytes = 0;
  for (size_t i = 0; i < n; i += 2) {
    A(free)(blks[i].p);
    blks[i].p = NULL;
    freed++;
    freed_bytes += blks[i].size;
  }
  for (size_t k = 0; k < NOOM; k++) {
    for (size_t i = 0; i < n; i += 2) {
      if (blks[i].size < oom_sizes[k] || (k + 1 < NOOM && blks[i].size >= oom_sizes[k + 1])) continue;
      errno = 0;
      blks[i].p = A(malloc)(blks[i].size);
      if (blks[i].p == NULL) {
        CHECKF(errno == ENOMEM, "re-allocation of %zu returned NULL with errno %d", blks[i].size, errno);
        CHECKF(blks[i].size > 32 * KiB, "re-allocation of %zu (block %zu of %zu) after freeing half failed", blks[i].size,
               i, n);
        blks[i].size = 0;
        continue;
      }
      again++;
      again_bytes += blks[i].size;
      blks[i].id += 0x100000000ull;
      blk_fill(&blks[i]);
    }
  }
  CHECKF(again_bytes >= freed_bytes / 2, "after freeing %zu bytes only %zu could be allocated again", freed_bytes,
         again_bytes);
  for (size_t i = 0; i < n; i++)
    if (blks[i].p != NULL) CHECK_BLK(&blks[i], "after re-allocation");
  for (size_t i = 0; i < n; i++) A(free)(blks[i].p);

  /* Everything is free: a large block must fit (cached memory is given back). */
  errno = 0;
  void *big = A(malloc)(96 * MiB);
  CHECKF(big != NULL, "malloc(96 MiB) after freeing everything under the limit (base + 256 MiB) failed: errno %d", errno);
  memset(big, 0x5a, 96 * MiB);
  A(free)(big);

  printf("test_faults (%s): oom: %zu blocks (%zu MiB) before the limit, %zu NULLs all ENOMEM; freed %zu (%zu MiB), "
         "%zu (%zu MiB) allocated again: OK\n",
         API_NAME, n, bytes / MiB, nulls, freed, freed_bytes / MiB, again, again_bytes / MiB);
  fflush(stdout);
}

static void test_oom(void)
{
  double t0 = tu_now();
  char why[64];
  int st = tu_wait(tu_spawn(oom_child, NULL, 120, NULL));
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "oom child ended with %s", tu_status_str(st, why, sizeof why));
  printf("test_faults (%s): oom: %.2f s\n", API_NAME, tu_now() - t0);
}

static const tu_case_t cases[] = {
  {"oom", test_oom, 0},
  {"fork", test_fork, 0},
};

int main(int argc, char **argv) { return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, "[forks]"); }
