/* Thread life-cycle tests.
 *
 * (a) churn: many short-lived threads (default 1000, in waves of 8); each
 *     allocates a few hundred blocks of mixed sizes, frees half and hands the
 *     other half to the main thread, which checks and frees them after the
 *     thread has exited. Resident memory afterwards must stay bounded
 *     (< 256 MiB and little growth after the first waves): exited threads'
 *     memory is reused, not leaked.
 * (b) blocks still live when their thread exits are freed later, by the main
 *     thread and by threads created afterwards, with content checked.
 * (c) fork under load: 4 threads allocate/free continuously while the main
 *     thread forks (default 50 times); each child allocates and frees across
 *     all pools, frees blocks the parent's threads allocated, checks content
 *     and _exit(0)s; alarm() turns a deadlock into a failure.
 * (d) hak_thread_done: a thread hands its heap back early, frees its own old
 *     blocks and keeps allocating; another thread frees blocks of a thread
 *     that already exited.
 * (e) remote_rows (hak_ API build): one thread's 6 MiB of blocks leave the
 *     region header's rows for remote frees untouched (mincore: none of
 *     their pages resident); another thread then frees half of them, the
 *     owner takes them back and allocates as many again: every block keeps
 *     its pattern (rows written by the remote frees are cleared for reuse).
 * (f) foreign: a thread frees 64 of another's blocks, then allocates 64 of
 *     their size: most are those blocks (its foreign list hands them out
 *     first, heap.h), each whole; the owner's remaining blocks keep theirs.
 * (g) foreign_idle: a thread frees 64 of another's blocks and then uses
 *     other sizes only for four purge delays: its list goes home at its
 *     tick, and the owner's mallocs find every one of them (run only with
 *     HAKMEM_PURGE_DELAY_MS set: a learned strategy's delay may be 10 s).
 * (h) exit_chain: four chains of detached threads, each started by the one
 *     before (200 in all), allocate, free and exit. Their stacks (64 MiB)
 *     overflow glibc's cache of exited threads' stacks, so an exit frees
 *     stacks before it, and their TLS vectors (blocks their creators
 *     allocated), after the thread's heap went back: those frees must not
 *     take a heap that no thread hands back (at most 16 heaps made, and as
 *     many threads holding one after as before).
 * (i) exit_heapless: 200 detached threads that never allocate, on such
 *     stacks, exit four at a time: glibc's frees in their exits go home
 *     without a heap (none made, as many threads holding one after).
 * (j) exit_malloc: 64 threads, one at a time, allocate and free a Small and
 *     a Large block in a key destructor that runs after hakmem's: each such
 *     malloc takes a heap for that call only (at most 2 made).
 * (k) gather_bound: a thread frees 64 of another's 4000-byte blocks and
 *     then waits, making no call: its gathered batch holds at most 64 KiB of
 *     them (and its foreign list 32 KiB), so the owner's next mallocs of the
 *     size find the rest (unbounded, 48 stayed with the waiter).
 * (l) huge_shards: two threads each place 3 and 5 MiB blocks, free the
 *     other's and place as many again, every block keeping its pattern;
 *     with the hak_ API (every cache purged first), the first blocks lie in
 *     the thread's own shard (its heap's, huge.h). Then, in a child under RLIMIT_AS of its size
 *     plus 2 MiB (no room for an arena), a thread new to the huge blocks
 *     places a 3 MiB block in units the main thread freed in its shard,
 *     whose arena keeps a block (with the hak_ API the others are unmapped
 *     first and the freed units purged, and where the thread's own shard is
 *     another, the block must lie in the main thread's).
 * With the hak_ API, each part also checks the allocator's count of threads
 * holding a heap (it decides whether carves populate their pages): down at
 * each exit and hak_thread_done, up again at the next malloc, 1 in a forked
 * child; and its processor count against sched_getaffinity.
 *
 * Blocks carry their pattern whole.
 *
 * Usage: test_threads [CASE|all] [churn-threads] [forks]   (cases: the table at the end;
 *        cpu_count with the hak_ API only)
 * Calls the hak_ API when compiled with -DUSE_HAK_API, else the standard names.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/resource.h>

/* ---- hakmem's internals (hak_ API build only; retarget here) ----
 * RUNNING(): threads holding a heap; CPUS(): the processors hakmem counts. */
#ifdef USE_HAK_API
#include <sched.h>

#include "../src/heap.h"
#include "../src/huge.h"
#include "../src/map.h"
#define RUNNING() ((int)heap_threads_running())
#define CPUS() os_cpu_count()
#define CHECK_RUNNING(n)                                                                                            \
  CHECKF(RUNNING() == (n), "%d threads hold a heap, expected %d", RUNNING(), (n))
/* The huge arenas' shard of block p; -1 for none. */
#define SHARD(p) (map_kind(p) >= MAP_ARENA ? (map_kind(p) - MAP_ARENA) % HUGE_SHARDS : -1)
/* Unmaps the arenas that hold nothing, as the allocator does out of address space. */
#define UNMAP_EMPTY_ARENAS() huge_purge(0, true, true, NULL)
/* Purges every cache: freed units stay free, clean. */
#define PURGE_CACHES() huge_purge(0, true, false, NULL)
/* The calling thread's own shard: its heap's (huge.c). */
#define MY_SHARD() ((int)(heap_get()->serial % HUGE_SHARDS))
#else
#define RUNNING() 0
#define CHECK_RUNNING(n) ((void)(n))
#define SHARD(p) ((void)(p), 0)
#define UNMAP_EMPTY_ARENAS() ((void)0)
#define PURGE_CACHES() ((void)0)
#define MY_SHARD() 0
#endif

static size_t mixed_size(uint64_t *r)
{
  uint64_t x = tu_xorshift(r);
  switch (x % 16) {
  case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: return 8 + (x >> 8) % 1017; /* tiny */
  case 8: case 9: case 10: case 11: case 12: return 1024 + (x >> 8) % (31 * KiB);              /* mid */
  case 13: case 14: return 32 * KiB + (x >> 8) % (200 * KiB);                                /* large */
  default: return 16 + (x >> 8) % 240;
  }
}

/* ---------------- (a) churn ---------------- */

#define CHURN_BLOCKS 300
typedef struct {
  int idx;
  blk_t handed[CHURN_BLOCKS / 2];
} churn_arg_t;

static void *churn_thread(void *arg)
{
  churn_arg_t *a = arg;
  uint64_t r = 0x1234567ull + (uint64_t)a->idx * 7919;
  blk_t b[CHURN_BLOCKS];
  for (int i = 0; i < CHURN_BLOCKS; i++) blk_alloc(&b[i], mixed_size(&r), (uint64_t)a->idx * 1000 + (uint64_t)i);
  for (int i = 0; i < CHURN_BLOCKS; i++) {
    if (i & 1) a->handed[i / 2] = b[i];
    else blk_free(&b[i], "churn own free");
  }
  return NULL;
}

static void test_churn(void)
{
  int nthreads = (int)tu_param(0, 1000);
  enum { WAVE = 8 };
  churn_arg_t *args = A(calloc)(WAVE, sizeof *args);
  CHECK(args != NULL);
  size_t rss0 = tu_rss(), rss_early = 0;
  int running = RUNNING();
  for (int base = 0; base < nthreads; base += WAVE) {
    pthread_t th[WAVE];
    int n = nthreads - base < WAVE ? nthreads - base : WAVE;
    for (int i = 0; i < n; i++) {
      args[i].idx = base + i;
      CHECK(pthread_create(&th[i], NULL, churn_thread, &args[i]) == 0);
    }
    for (int i = 0; i < n; i++) CHECK(pthread_join(th[i], NULL) == 0);
    CHECK_RUNNING(running);
    /* The threads are gone: free what they handed over. */
    for (int i = 0; i < n; i++)
      for (int k = 0; k < CHURN_BLOCKS / 2; k++) blk_free(&args[i].handed[k], "churn handed block");
    /* the warm-up's most: by its end the heaps that waves hand on hold what they will hold (one
     * reading swings by tens of MiB with what the last waves happened to free) */
    if (base + n <= nthreads / 5) {
      size_t rss = tu_rss();
      if (rss > rss_early) rss_early = rss;
    }
  }
  A(free)(args);
  size_t rss1 = tu_rss();
  if (rss_early == 0) rss_early = rss1;
  printf("  churn: %d threads, rss %.1f -> %.1f (most in the first %d) -> %.1f MiB\n", nthreads,
         (double)rss0 / MiB, (double)rss_early / MiB, nthreads / 5, (double)rss1 / MiB);
#ifndef HAKMEM_TEST_SANITIZED /* sanitizer shadow memory makes RSS meaningless */
  CHECKF(rss1 < 256 * MiB, "rss %.1f MiB after thread churn: exited threads' memory not reused",
         (double)rss1 / MiB);
  CHECKF(rss1 <= rss_early + 64 * MiB, "rss grew from %.1f to %.1f MiB during churn", (double)rss_early / MiB,
         (double)rss1 / MiB);
#endif
}

/* ---------------- (b) live blocks outlive their thread ---------------- */

#define ORPHANS 2000
static blk_t orphans[8][ORPHANS];

static void *orphan_maker(void *arg)
{
  int k = (int)(intptr_t)arg;
  uint64_t r = 99 + (uint64_t)k;
  for (int i = 0; i < ORPHANS; i++) blk_alloc(&orphans[k][i], mixed_size(&r), 500000 + (uint64_t)k * ORPHANS + (uint64_t)i);
  /* Free a few so the slabs are partly empty when abandoned. */
  for (int i = 0; i < ORPHANS; i += 3) blk_free(&orphans[k][i], "orphan maker own free");
  return NULL;
}

static void *orphan_freer(void *arg)
{
  int k = (int)(intptr_t)arg;
  /* Allocate first (may adopt the abandoned slabs), then free the orphans. */
  uint64_t r = 7 + (uint64_t)k;
  blk_t mine[200];
  for (int i = 0; i < 200; i++) blk_alloc(&mine[i], mixed_size(&r), 900000 + (uint64_t)i);
  for (int i = 0; i < ORPHANS; i++)
    if (orphans[k][i].p && (i % 3) == 1) blk_free(&orphans[k][i], "orphan freed by a later thread");
  for (int i = 0; i < 200; i++) blk_free(&mine[i], "later thread own");
  return NULL;
}

static void test_orphans(void)
{
  pthread_t th[8];
  for (int k = 0; k < 8; k++) CHECK(pthread_create(&th[k], NULL, orphan_maker, (void *)(intptr_t)k) == 0);
  for (int k = 0; k < 8; k++) CHECK(pthread_join(th[k], NULL) == 0);
  /* Main thread allocates over the abandoned heaps, then frees some orphans. */
  uint64_t r = 3;
  blk_t mine[500];
  for (int i = 0; i < 500; i++) blk_alloc(&mine[i], mixed_size(&r), 700000 + (uint64_t)i);
  for (int k = 0; k < 8; k++)
    for (int i = 0; i < ORPHANS; i++)
      if (orphans[k][i].p && (i % 3) == 2) blk_free(&orphans[k][i], "orphan freed by main");
  for (int k = 0; k < 8; k++) CHECK(pthread_create(&th[k], NULL, orphan_freer, (void *)(intptr_t)k) == 0);
  for (int k = 0; k < 8; k++) CHECK(pthread_join(th[k], NULL) == 0);
  for (int k = 0; k < 8; k++)
    for (int i = 0; i < ORPHANS; i++) CHECK(orphans[k][i].p == NULL);
  for (int i = 0; i < 500; i++) blk_free(&mine[i], "main own");
  printf("  orphans: 8 x %d blocks freed after their threads exited\n", ORPHANS);
}

/* ---------------- (c) fork under load ---------------- */

#define FORK_WORKERS 4
#define PREFORK 64
static atomic_int stop_load;
static blk_t prefork[FORK_WORKERS][PREFORK];
static atomic_int prefork_ready;

static void *load_thread(void *arg)
{
  int k = (int)(intptr_t)arg;
  uint64_t r = 1000 + (uint64_t)k;
  for (int i = 0; i < PREFORK; i++) blk_alloc(&prefork[k][i], mixed_size(&r), 3000000 + (uint64_t)k * PREFORK + (uint64_t)i);
  atomic_fetch_add(&prefork_ready, 1);
  blk_t b[64] = {{0}};
  uint64_t id = 4000000 + (uint64_t)k * 100000000;
  while (!atomic_load_explicit(&stop_load, memory_order_relaxed)) {
    uint64_t x = tu_xorshift(&r);
    blk_t *s = &b[x % 64];
    if (s->p) blk_free(s, "load thread");
    else {
      size_t size = mixed_size(&r);
      if ((x >> 40) % 200 == 0) size = 3 * MiB; /* huge, now and then */
      blk_alloc(s, size, id++);
    }
  }
  for (int i = 0; i < 64; i++) if (b[i].p) blk_free(&b[i], "load thread end");
  return NULL;
}

/* In the child (under alarm(20)). */
static void fork_child(void *arg)
{
  int round = (int)(intptr_t)arg;
  CHECK_RUNNING(1);
  /* Blocks from the parent's threads, which do not exist here. */
  for (int k = 0; k < FORK_WORKERS; k++)
    for (int i = 0; i < PREFORK; i++) blk_free(&prefork[k][i], "child frees parent thread's block");
  const size_t sizes[] = {8, 16, 48, 100, 512, 1000, 2048, 5000, 20000, 32768, 50000, 200000, 1 * MiB, 3 * MiB, 6 * MiB};
  blk_t b[sizeof sizes / sizeof sizes[0]][4];
  for (int rep = 0; rep < 2; rep++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      for (int j = 0; j < 4; j++)
        if (sizes[i] < MiB || j == 0) blk_alloc(&b[i][j], sizes[i] + (size_t)j, (uint64_t)round * 1000 + i * 4 + (uint64_t)j);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      for (int j = 0; j < 4; j++)
        if (sizes[i] < MiB || j == 0) blk_free(&b[i][j], "child block");
  }
  void *al = NULL;
  CHECK(A(posix_memalign)(&al, 4096, 10000) == 0);
  A(free)(al);
  void *c = A(calloc)(1000, 10);
  CHECK(c != NULL);
  A(free)(c);
}

static void test_fork(void)
{
  int nforks = (int)tu_param(1, 50);
  atomic_store(&stop_load, 0);
  atomic_store(&prefork_ready, 0);
  pthread_t th[FORK_WORKERS];
  for (int k = 0; k < FORK_WORKERS; k++) CHECK(pthread_create(&th[k], NULL, load_thread, (void *)(intptr_t)k) == 0);
  while (atomic_load(&prefork_ready) < FORK_WORKERS) usleep(1000);
  for (int i = 0; i < nforks; i++) {
    int st = tu_wait(tu_spawn(fork_child, (void *)(intptr_t)i, 20, NULL));
    char why[64];
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork child %d: %s", i, tu_status_str(st, why, sizeof why));
    /* Parent allocates between forks too. */
    void *p = A(malloc)(100 + (size_t)i);
    CHECK(p != NULL);
    A(free)(p);
  }
  atomic_store(&stop_load, 1);
  for (int k = 0; k < FORK_WORKERS; k++) CHECK(pthread_join(th[k], NULL) == 0);
  for (int k = 0; k < FORK_WORKERS; k++)
    for (int i = 0; i < PREFORK; i++) blk_free(&prefork[k][i], "parent frees prefork block");
  printf("  fork: %d children under load, all exited 0\n", nforks);
}

/* ---------------- (d) hak_thread_done and exited owners ---------------- */

static blk_t early[500];

static void *thread_done_user(void *arg)
{
  (void)arg;
  uint64_t r = 55;
  blk_t b[500];
  for (int i = 0; i < 500; i++) blk_alloc(&b[i], mixed_size(&r), 6000000 + (uint64_t)i);
  for (int i = 0; i < 500; i++) blk_alloc(&early[i], mixed_size(&r), 6100000 + (uint64_t)i);
  int running = RUNNING();
  hak_thread_done();
  CHECK_RUNNING(running - 1);
  /* Our old blocks now sit in abandoned slabs: freeing them must work. */
  for (int i = 0; i < 500; i += 2) blk_free(&b[i], "own block after hak_thread_done");
  /* And the thread keeps working. */
  for (int i = 0; i < 500; i += 2) blk_alloc(&b[i], mixed_size(&r), 6200000 + (uint64_t)i);
  CHECK_RUNNING(running);
  hak_thread_done();
  hak_thread_done();
  CHECK_RUNNING(running - 1);
  for (int i = 0; i < 500; i++) blk_free(&b[i], "block after second hak_thread_done");
  return NULL;
}

static void *exited_owner_freer(void *arg)
{
  (void)arg;
  for (int i = 0; i < 500; i++) blk_free(&early[i], "block of an exited thread");
  return NULL;
}

static void test_thread_done(void)
{
  pthread_t t;
  CHECK(pthread_create(&t, NULL, thread_done_user, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(pthread_create(&t, NULL, exited_owner_freer, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  /* The main thread too, then carries on. */
  void *p = A(malloc)(100);
  CHECK(p != NULL);
  hak_thread_done();
  A(free)(p);
  p = A(malloc)(200);
  CHECK(p != NULL);
  A(free)(p);
  printf("  thread_done: heaps handed back early and after exit\n");
}

/* ---------------- (h) exit_chain ---------------- */

#define CHAIN_THREADS 200
#define CHAINS 4
static atomic_int chain_left;

/* Starts fn detached, on a stack larger than glibc's cache. */
static void chain_start(void *(*fn)(void *), uint64_t seed)
{
  pthread_attr_t at;
  pthread_t t;
  CHECK(pthread_attr_init(&at) == 0);
  CHECK(pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) == 0);
  CHECK(pthread_attr_setstacksize(&at, 64 * MiB) == 0);
  CHECK(pthread_create(&t, &at, fn, (void *)(uintptr_t)seed) == 0);
  pthread_attr_destroy(&at);
}

static void *chain_thread(void *arg)
{
  uint64_t r = (uint64_t)(uintptr_t)arg;
  blk_t b[64];
  for (int i = 0; i < 64; i++) blk_alloc(&b[i], mixed_size(&r), 700000 + (uint64_t)i);
  for (int i = 0; i < 64; i++) blk_free(&b[i], "chain own free");
  if (atomic_fetch_sub(&chain_left, 1) > CHAINS) chain_start(chain_thread, r | 1);
  return NULL;
}

/* The threads started since there were `threads` threads and `running`
 * holding a heap are gone (a sanitizer runs threads of its own: there,
 * gone from hakmem's count of threads holding a heap). */
static bool threads_gone(int threads, int running)
{
#ifdef HAKMEM_TEST_SANITIZED
  (void)threads;
  return RUNNING() <= running;
#else
  return tu_threads() <= threads && RUNNING() <= running;
#endif
}

/* Every chained thread started and gone. */
static bool chain_done(int threads, int running)
{
  return atomic_load(&chain_left) == 0 && threads_gone(threads, running);
}

static void test_exit_chain(void)
{
  int running = RUNNING(), threads = tu_threads();
  long made = tu_stat("heaps_created");
  atomic_store(&chain_left, CHAIN_THREADS);
  for (int i = 0; i < CHAINS; i++) chain_start(chain_thread, 12345 + (uint64_t)i);
  double t0 = tu_now();
  while (!chain_done(threads, running) && tu_now() - t0 < 20) usleep(1000);
  CHECKF(chain_done(threads, running), "chain not done: %d to start, %d threads", atomic_load(&chain_left),
         tu_threads());
  long made_now = tu_stat("heaps_created");
  printf("  exit_chain: %d detached threads, %ld heaps made\n", CHAIN_THREADS, made_now - made);
  CHECKF(made >= 0 && made_now - made <= 16, "%ld heaps made for %d chained threads (at most 16)", made_now - made,
         CHAIN_THREADS);
  CHECK_RUNNING(running);
}

/* ---------------- (i) exit_heapless ---------------- */

/* A thread that never allocates: it only exits. */
static void *idle_thread(void *arg)
{
  (void)arg;
  return NULL;
}

static void test_exit_heapless(void)
{
  int running = RUNNING(), threads = tu_threads();
  long made = tu_stat("heaps_created");
  for (int i = 0; i < CHAIN_THREADS; i++) {
    chain_start(idle_thread, 0);
    if (i % CHAINS == CHAINS - 1)
      for (double t0 = tu_now(); !threads_gone(threads, running) && tu_now() - t0 < 5;) usleep(100);
  }
  for (double t0 = tu_now(); !threads_gone(threads, running) && tu_now() - t0 < 20;) usleep(1000);
  long made_now = tu_stat("heaps_created");
  printf("  exit_heapless: %d detached threads, %ld heaps made\n", CHAIN_THREADS, made_now - made);
  CHECKF(made >= 0 && made_now - made <= 4, "%ld heaps made for %d threads that never allocate (at most 4)",
         made_now - made, CHAIN_THREADS);
  CHECK_RUNNING(running);
}

/* ---------------- (j) exit_malloc ---------------- */

static pthread_key_t late_key;
static atomic_int late_done;

/* A destructor that runs after hakmem's (its key is younger): it allocates
 * a Small and a Large block once the thread's heap went back. */
static void late_malloc(void *arg)
{
  blk_t b[2];
  blk_alloc(&b[0], 100, 800000 + (uint64_t)(uintptr_t)arg);
  blk_alloc(&b[1], 64 * KiB, 800001 + (uint64_t)(uintptr_t)arg);
  blk_free(&b[0], "small block of a late destructor");
  blk_free(&b[1], "large block of a late destructor");
  atomic_fetch_add(&late_done, 1);
}

static void *late_thread(void *arg)
{
  A(free)(A(malloc)(32)); /* a heap of its own, handed back at its exit */
  pthread_setspecific(late_key, arg);
  return NULL;
}

static void test_exit_malloc(void)
{
  enum { N = 64 };
  int running = RUNNING();
  long made = tu_stat("heaps_created");
  CHECK(pthread_key_create(&late_key, late_malloc) == 0);
  for (int i = 0; i < N; i++) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, late_thread, (void *)(uintptr_t)(i + 1)) == 0);
    CHECK(pthread_join(t, NULL) == 0);
  }
  pthread_key_delete(late_key);
  long made_now = tu_stat("heaps_created");
  printf("  exit_malloc: %d threads allocated in a destructor after hakmem's, %ld heaps made\n", atomic_load(&late_done),
         made_now - made);
  CHECK(atomic_load(&late_done) == N);
  CHECKF(made_now - made <= 2, "%ld heaps made for %d threads one at a time (at most 2)", made_now - made, N);
  CHECK_RUNNING(running);
}

#ifdef USE_HAK_API
/* hakmem counts the processors this process may run on. */
static void test_cpu_count(void)
{
  cpu_set_t set;
  CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
  CHECKF(CPUS() == (unsigned)CPU_COUNT(&set), "os_cpu_count %u, sched_getaffinity %d", CPUS(), CPU_COUNT(&set));
}
#endif

#ifdef USE_HAK_API
#include <sys/mman.h>

#define ROWS_BLOCKS 3000
#define ROWS_SIZE 2048
static blk_t rows_blk[ROWS_BLOCKS];

/* Pages lying wholly within the remote-free rows of p's region that are
 * resident; a failed mincore fails the case. */
static size_t rows_resident(const void *p)
{
  region_t *r = region_of(p);
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)r->remote_bits, hi = lo + sizeof r->remote_bits;
  lo = (lo + page - 1) & ~(page - 1);
  hi &= ~(page - 1);
  unsigned char vec[64];
  size_t n = 0, pages = (hi - lo) / page;
  CHECKF(hi > lo && pages <= sizeof vec, "remote-free rows span %zu whole pages", pages);
  if (hi <= lo || pages > sizeof vec) return 0;
  int rc = mincore((void *)lo, hi - lo, vec);
  CHECKF(rc == 0, "mincore of the remote-free rows: errno %d", errno);
  if (rc != 0) return 0;
  for (size_t i = 0; i < pages; i++) n += vec[i] & 1;
  return n;
}

static void *rows_freer(void *arg)
{
  (void)arg;
  for (int i = 0; i < ROWS_BLOCKS; i += 2) blk_free(&rows_blk[i], "remote free");
  return NULL;
}

static void test_remote_rows(void)
{
  for (int i = 0; i < ROWS_BLOCKS; i++) blk_alloc(&rows_blk[i], ROWS_SIZE, (uint64_t)i);
  size_t resident = 0, regions = 0;
  for (int i = 0; i < ROWS_BLOCKS; i++)
    if (i == 0 || region_of(rows_blk[i].p) != region_of(rows_blk[i - 1].p)) resident += rows_resident(rows_blk[i].p), regions++;
  CHECKF(resident == 0, "%zu pages of remote-free rows resident in %zu regions, no remote free made", resident, regions);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, rows_freer, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  for (int i = 0; i < ROWS_BLOCKS; i += 2) blk_alloc(&rows_blk[i], ROWS_SIZE, (uint64_t)i + ROWS_BLOCKS);
  for (int i = 0; i < ROWS_BLOCKS; i++) blk_free(&rows_blk[i], "owner free");
  printf("  remote_rows: %zu regions, rows untouched until a remote free; blocks checked\n", regions);
}
#endif

/* ---------------- (f) foreign blocks ---------------- */

enum { FOREIGN_N = 64, FOREIGN_SIZE = 48 };
static blk_t foreign_owned[2 * FOREIGN_N];

static void *foreign_taker(void *arg)
{
  (void)arg;
  void *freed[FOREIGN_N];
  for (int i = 0; i < FOREIGN_N; i++) {
    freed[i] = foreign_owned[i].p;
    blk_free(&foreign_owned[i], "another thread's block, freed here");
  }
  blk_t mine[FOREIGN_N];
  intptr_t reused = 0;
  for (int i = 0; i < FOREIGN_N; i++) {
    blk_alloc(&mine[i], FOREIGN_SIZE, 9000000 + (uint64_t)i);
    for (int j = 0; j < FOREIGN_N; j++) reused += mine[i].p == freed[j];
  }
  for (int i = 0; i < FOREIGN_N; i++) blk_free(&mine[i], "foreign block taken, freed by its taker");
  return (void *)reused;
}

/* The taker's mallocs after its frees of the owner's blocks: how many of
 * those blocks they return. With `current`, the blocks lie in the slab the
 * owner allocates from (no filler): they go home, and the taker's data
 * shares no line with the owner's newest blocks. */
static intptr_t foreign_round(int current)
{
  for (int i = 0; i < 2 * FOREIGN_N; i++) blk_alloc(&foreign_owned[i], FOREIGN_SIZE, 8000000 + (uint64_t)i);
  tu_filler_t filler = current ? (tu_filler_t){NULL, 0} : tu_filler(FOREIGN_SIZE);
  pthread_t t;
  void *reused = NULL;
  CHECK(pthread_create(&t, NULL, foreign_taker, NULL) == 0);
  CHECK(pthread_join(t, &reused) == 0);
  for (int i = FOREIGN_N; i < 2 * FOREIGN_N; i++) blk_free(&foreign_owned[i], "owner's own, after");
  tu_filler_free(filler);
  return (intptr_t)reused;
}

static void test_foreign(void)
{
  intptr_t reused = foreign_round(0);
  /* statistics and sampling count every allocation on the slow path: no list then */
  int lists = getenv("HAKMEM_STATS") == NULL && getenv("HAKMEM_PROFILE") == NULL;
  CHECKF(!lists || reused >= FOREIGN_N / 2, "%d of %d blocks freed by the thread came back to it", (int)reused,
         FOREIGN_N);
  printf("  foreign: %d of %d blocks another thread freed came back to it\n", (int)reused, FOREIGN_N);
}

static void test_foreign_current(void)
{
  intptr_t reused = foreign_round(1);
  CHECKF(reused == 0, "%d of %d blocks of the owner's current slab came back to the thread that freed them",
         (int)reused, FOREIGN_N);
  printf("  foreign_current: %d of %d blocks of the owner's current slab came back to their freer\n", (int)reused,
         FOREIGN_N);
}

/* The owner's side of (g) and (k): `take` mallocs of size into taken[]
 * (freed later with takes_free), and how many of them are owned[0..n). */
static int takes_back(void **taken, int take, size_t size, const blk_t *owned, int n)
{
  int back = 0;
  for (int i = 0; i < take; i++) {
    taken[i] = A(malloc)(size);
    CHECK(taken[i] != NULL);
    for (int j = 0; j < n; j++) back += taken[i] == owned[j].p;
  }
  return back;
}
static void takes_free(void **taken, int take)
{
  for (int i = 0; i < take; i++) A(free)(taken[i]);
}

/* ---------------- (g) an idle foreign list ---------------- */

static blk_t idle_owned[FOREIGN_N];
static atomic_int idle_ticked, idle_done;
static double idle_seconds;

static void *idle_taker(void *arg)
{
  (void)arg;
  for (int i = 0; i < FOREIGN_N; i++) A(free)(idle_owned[i].p);
  /* slow paths of another size for several purge delays: the thread ticks,
   * and the list of the freed blocks' class sees no use */
  double t0 = tu_now();
  while (tu_now() - t0 < idle_seconds) {
    A(free)(tu_launder(A(malloc)(100000)));
    usleep(500);
  }
  atomic_store(&idle_ticked, 1);
  while (!atomic_load(&idle_done)) usleep(1000);
  return NULL;
}

static void test_foreign_idle(void)
{
  /* the lists go home after a purge delay: the one set, since a strategy's
   * may be 10 s (the learner's, or a pinned one's) */
  const char *d = getenv("HAKMEM_PURGE_DELAY_MS");
  if (d == NULL) {
    printf("  foreign_idle: runs with HAKMEM_PURGE_DELAY_MS set (ctest: threads_foreign_idle)\n");
    return;
  }
  long delay = atol(d);
  CHECKF(delay > 0 && delay <= 1000, "HAKMEM_PURGE_DELAY_MS=%ld: the case needs 1 to 1000", delay);
  idle_seconds = (double)(4 * delay + 200) / 1000;
  for (int i = 0; i < FOREIGN_N; i++) blk_alloc(&idle_owned[i], FOREIGN_SIZE, 9500000 + (uint64_t)i);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, idle_taker, NULL) == 0);
  while (!atomic_load(&idle_ticked)) usleep(1000);
  enum { TAKE = 8192 };
  static void *taken[TAKE];
  int back = takes_back(taken, TAKE, FOREIGN_SIZE, idle_owned, FOREIGN_N);
  atomic_store(&idle_done, 1);
  CHECK(pthread_join(t, NULL) == 0);
  takes_free(taken, TAKE);
  CHECKF(back == FOREIGN_N, "%d of %d blocks on an idle thread's foreign list came back to their owner", back,
         FOREIGN_N);
  printf("  foreign_idle: %d of %d blocks came home from an idle thread's list\n", back, FOREIGN_N);
}

/* ---------------- (k) a bounded gathered batch ---------------- */

enum { GATHER_N = 64, GATHER_SIZE = 4000, GATHER_TAKE = 4096 };
static blk_t gather_owned[GATHER_N];
static atomic_int gather_freed, gather_done;

static void *gather_taker(void *arg)
{
  (void)arg;
  for (int i = 0; i < GATHER_N; i++) A(free)(gather_owned[i].p);
  atomic_store(&gather_freed, 1);
  while (!atomic_load(&gather_done)) usleep(1000); /* no call: no tick publishes the batch */
  return NULL;
}

static void test_gather_bound(void)
{
  for (int i = 0; i < GATHER_N; i++) blk_alloc(&gather_owned[i], GATHER_SIZE, 9700000 + (uint64_t)i);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, gather_taker, NULL) == 0);
  while (!atomic_load(&gather_freed)) usleep(1000);
  static void *taken[GATHER_TAKE];
  int back = takes_back(taken, GATHER_TAKE, GATHER_SIZE, gather_owned, GATHER_N);
  atomic_store(&gather_done, 1);
  CHECK(pthread_join(t, NULL) == 0);
  takes_free(taken, GATHER_TAKE);
  /* what stays with the waiter: its batch, 64 KiB at most (slab.h), and
   * its foreign list, 32 KiB at most (heap.h; a heap adopted from an
   * earlier case's thread may keep that much), one block more where each ends */
  CHECKF(back >= GATHER_N - (65536 + 32768) / GATHER_SIZE - 2,
         "%d of %d blocks a waiting thread freed came back to their owner", back, GATHER_N);
  printf("  gather_bound: %d of %d blocks a waiting thread freed came back\n", back, GATHER_N);
}

/* ---------------- (l) huge_shards ---------------- */

#define SHARD_BLOCKS 4
static blk_t shard_blk[2][SHARD_BLOCKS];
static pthread_barrier_t shard_step;

static void shard_place(blk_t *b, int who, int round)
{
  for (int i = 0; i < SHARD_BLOCKS; i++)
    blk_alloc(&b[i], (i & 1 ? 5 : 3) * MiB + (size_t)i * 4096, 9800000 + (uint64_t)(round * 100 + who * 10 + i));
}

/* Whether every block of b lies in one shard, returned in *shard. */
static bool shard_same(const blk_t *b, int *shard)
{
  *shard = SHARD(b[0].p);
  for (int i = 1; i < SHARD_BLOCKS; i++)
    if (SHARD(b[i].p) != *shard) return false;
  return true;
}

static void *shard_thread(void *arg)
{
  int who = (int)(intptr_t)arg, placed;
  shard_place(shard_blk[who], who, 0);
  CHECKF(shard_same(shard_blk[who], &placed) && placed == MY_SHARD(), "thread %d's huge blocks lie in shard %d, not %d",
         who, placed, MY_SHARD());
  pthread_barrier_wait(&shard_step);
  for (int i = 0; i < SHARD_BLOCKS; i++) blk_free(&shard_blk[1 - who][i], "the other thread's huge block");
  pthread_barrier_wait(&shard_step);
  shard_place(shard_blk[who], who, 1);
  return (void *)(intptr_t)placed;
}

static atomic_int shard_go;
static void *shard_late(void *arg)
{
  void *small = A(malloc)(64); /* its heap, before the limit */
  CHECK(small != NULL);
  while (!atomic_load(&shard_go)) usleep(1000);
  blk_t b;
  blk_alloc(&b, 3 * MiB, 9900000);
  ((int *)arg)[0] = SHARD(b.p);
  ((int *)arg)[1] = MY_SHARD();
  blk_free(&b, "a block in another thread's shard");
  A(free)(small);
  return NULL;
}

/* In a child: the main thread's freed units serve a thread whose own shard
 * cannot map an arena. */
static void shard_fallback_child(void *arg)
{
  (void)arg;
  UNMAP_EMPTY_ARENAS();
  blk_t b[SHARD_BLOCKS];
  shard_place(b, 0, 2);
  int mine, got[2] = {-2, -2};
  CHECK(shard_same(b, &mine));
  for (int i = 1; i < SHARD_BLOCKS; i++) blk_free(&b[i], "the main thread's huge block");
  PURGE_CACHES(); /* so that the late thread finds them free, not cached */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, shard_late, got) == 0);
  usleep(20000);
  struct rlimit rl = {tu_statm(0) + 2 * MiB, tu_statm(0) + 2 * MiB};
  CHECKF(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: errno %d", errno);
  atomic_store(&shard_go, 1);
  CHECK(pthread_join(t, NULL) == 0);
  CHECKF(got[0] == mine || got[1] == mine, "a block placed under the limit lies in shard %d, not the main thread's %d",
         got[0], mine);
  blk_free(&b[0], "the main thread's last huge block");
}

static void test_huge_shards(void)
{
  pthread_t t[2];
  void *shard[2];
  UNMAP_EMPTY_ARENAS(); /* no cache left to place the first blocks in another shard */
  CHECK(pthread_barrier_init(&shard_step, NULL, 2) == 0);
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, shard_thread, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], &shard[i]) == 0);
  pthread_barrier_destroy(&shard_step);
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < SHARD_BLOCKS; i++) blk_free(&shard_blk[w][i], "a huge block placed again");
  CHECKF(tu_wait(tu_spawn(shard_fallback_child, NULL, 60, NULL)) == 0, "the child under RLIMIT_AS failed");
  printf("  huge_shards: threads in shards %d and %d\n", (int)(intptr_t)shard[0], (int)(intptr_t)shard[1]);
}

static const tu_case_t cases[] = {
#ifdef USE_HAK_API
  {"cpu_count", test_cpu_count, 0},
  {"remote_rows", test_remote_rows, 0},
#endif
  {"orphans", test_orphans, 0},
  {"thread_done", test_thread_done, 0},
  {"churn", test_churn, 0},
  {"fork", test_fork, 0},
  {"foreign", test_foreign, 0},
  {"foreign_current", test_foreign_current, 0},
  {"foreign_idle", test_foreign_idle, 0},
  {"gather_bound", test_gather_bound, 0},
  {"huge_shards", test_huge_shards, 0},
  {"exit_chain", test_exit_chain, 0},
  {"exit_heapless", test_exit_heapless, 0},
  {"exit_malloc", test_exit_malloc, 0},
};

int main(int argc, char **argv)
{
  return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, "[churn-threads] [forks]");
}
