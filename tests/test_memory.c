/* test_memory.c - memory goes back to the OS, measured from /proc/self/statm.
 *
 *   purge    blocks of every pool (about 300 MiB) are written and freed; while
 *            the program goes on allocating (a little, every 10 ms),
 *            resident memory must fall back to within 4 MiB of where it
 *            started within one second, and no thread of hakmem's runs.
 *   background  with HAKMEM_BACKGROUND_THREAD=1 (set by CTest): no thread in
 *            a single-threaded program; once it runs a second thread, the
 *            same 300 MiB go back within a second with no further call, and
 *            hakmem runs one thread of its own.
 *   idle_owner  a thread allocates 20,000 blocks of 1 KiB and sleeps; another
 *            frees them all, at once (where both threads have a processor:
 *            the owner may not even be asleep yet): within a second, with no
 *            further call, resident memory is back within 2 MiB of the start.
 *   trim     the same with purging off (HAKMEM_PURGE_DELAY_MS=-1, set by
 *            CTest): memory stays resident until malloc_trim(0), which must
 *            bring it back within 4 MiB at once. Then a 1 MiB block goes
 *            where one was freed after the trim (units still resident), not
 *            where one was purged by it.
 *   threads  10,000 threads each allocate (a few hundred KiB) and exit;
 *            resident memory after the last must be within 8 MiB of what it
 *            was after the first thousand (exited threads' memory is reused).
 *   exit_reuse  rounds of 4 threads, each writing 16 blocks of 8-512 KiB
 *            whole, freeing 12 and handing 4 to the next round's thread,
 *            which frees them: after 50 rounds, at most 80 page faults a
 *            round (a round writes about 4,200 pages): each thread's
 *            adopter reuses what it leaves, other sizes as well, rather
 *            than faulting in what the exit gave back (purging by age off:
 *            HAKMEM_PURGE_DELAY_MS=10000, set by CTest).
 *   churn    grow to 256 MiB of mixed sizes, free it all, five times: peak
 *            resident memory at most 1.1x the live bytes, and resident memory
 *            under 10 % of the peak within a second of the end (the program
 *            allocating a little meanwhile).
 *   bigcache 40 huge blocks of 16 MiB freed at once: what the cache keeps
 *            stays within HAKMEM_BIGCACHE_MB (32, set by CTest, learning
 *            off: an explored strategy that keeps nothing would empty it),
 *            and fills it (each free past the bound sheds the excess, not
 *            the whole merged run of freed blocks), and is gone
 *            after its age (HAKMEM_BIGCACHE_AGE_MS), the program allocating
 *            a little meanwhile. Then a freed 8 MiB
 *            block's reservation serves a 10 MiB one in place (same address,
 *            written and read back whole), and a calloc of 11 MiB reusing it
 *            reads zero throughout.
 *   cache_yield  a 48 MiB huge block written and freed (kept in the
 *            BigCache, its age pinned long by CTest), then 48 MiB of 1000 B
 *            blocks: resident memory grows by at most their size, an eighth
 *            and 8 MiB (the cache gives way to the slabs), not by twice it.
 *   xthread  a producer allocates 16-1024 B blocks and a consumer frees them
 *            through a ring of 8192 (about 4 MiB in flight) for SECONDS
 *            (default 60): resident memory must stay within twice that
 *            working set (remote frees are reused, not parked).
 *   reuse    the block freed last is the next one of its size handed out;
 *            64 blocks of 8 KiB (one slab) written and freed: the emptied
 *            slab keeps its list (the next malloc returns the last freed)
 *            and, the program asleep, stays resident 20 purge delays
 *            (HAKMEM_PURGE_DELAY_MS=20, set by CTest). Once the program
 *            allocates other sizes again, its periodic check takes the slab
 *            off the fast path: a purge returns every page of it (mincore)
 *            within a second, and it starts afresh: the next 64 blocks lie in
 *            that one slab again, each written and read back whole.
 *   grow     8 blocks grown in turn by 4 KiB from 40 KiB to 1.5 MiB (12 MiB
 *            live): every byte kept, a usable size within a quarter of the
 *            request (below 256 KiB: twice the old size, to a unit), and
 *            resident memory grown by at most 1.3x the live bytes (the
 *            copies that moves leave behind are few; the largest is purged).
 *   regrow   8 buffers grown in turn by 4 KiB to 1 MiB, freed, 12 rounds:
 *            every byte kept, and each round's peak resident memory within
 *            2 MiB of the first's (the copies a round leaves are the runs
 *            the next one takes back).
 *   sparse   about 24 MiB of blocks of one size (64, 3000 and 20000 B in
 *            turn), all but one in K freed (K = 256, 16, 8: the survivors
 *            lie scattered over the pages): the pages with no live block go
 *            back, at least half of the freed bytes, at malloc_trim(0) and,
 *            in a second round, without it once the thread takes slow paths
 *            over two ticks (HAKMEM_PURGE_DELAY_MS=20, set by CTest): a slab
 *            found sparse at one goes back at the next.
 *            The survivors keep their bytes; as many blocks as were freed are
 *            then allocated again, and every block is written and read back
 *            (two handed out twice would overwrite each other).
 *   arena    huge blocks share arenas: two freed neighbours of 6 MiB merge and
 *            serve a 12 MiB block at the first one's address, its pages
 *            still resident (under a tenth of them fault when written); a
 *            calloc there reads zero; a pointer inside it is refused (usable
 *            size 0, free leaves the block intact); realloc grows it to 300
 *            MiB (beyond an arena's largest block) and back to 1 MiB keeping
 *            every byte.
 *   arena_grow  a huge block that does not fit the arena's mapping follows
 *            the one before it (the arena grows in place); freed, the two
 *            serve one block at the first's address.
 *   calloc   a freed block of 1 MiB (Large) and 8 MiB (huge), written whole,
 *            is the next calloc's: it reads zero, and writing it whole again
 *            faults under a tenth of its pages (zeroed in place); after
 *            malloc_trim(0), one written on a single page and freed leaves at
 *            most 2 pages resident after the calloc that takes it (the rest
 *            purged, not zeroed by a memset that would fault them in).
 *   lend     a thread writes 8 MiB of 128 KiB blocks, frees them and exits;
 *            the main thread then writes as many: its heap takes the pages
 *            the exited thread's heap holds free (resident), so writing them
 *            faults under a quarter of them, where pages of its own would
 *            fault each (HAKMEM_LEARN=0, HAKMEM_PURGE_DELAY_MS=10000).
 *   lend_clean  the same where the main thread's heap holds free pages of
 *            its own, purged (malloc_trim): it takes the exited thread's
 *            resident ones before its clean ones.
 *   lend_running  a thread writes 8 MiB of 128 KiB blocks, hands them to
 *            the main thread and waits, alive; the main thread frees them
 *            (into the waiting thread's heap) and writes as many: that heap
 *            lends the runs it cached, so the writes fault under a quarter
 *            of the pages (same settings).
 *   huge_grid  rounds of 4 huge blocks of 300 KiB-3.3 MiB written at their
 *            head only, freed and asked again: each one placed anew starts
 *            on its grid (a multiple of its units rounded down to a power of
 *            two, 2 MiB at most), where the freed ones' heads lie.
 *   large_classes  a malloc of 33 pages takes the freed 33-page block, not
 *            the 35-page one freed after it, its last page resident; with
 *            no 33-page block left, the 35-page one (an eighth longer).
 *   regrow_huge  a buffer grown by half again to 64 MiB with realloc,
 *            freed and grown again: the second growth faults under a
 *            tenth of its pages (it grew in its arena, whose pages the
 *            BigCache kept; HAKMEM_LEARN=0).
 *   huge_fit  after a churn of huge blocks written whole, a held 48 MiB
 *            block is not cut for a malloc of 3 MiB that a freed run fits,
 *            and the next 48 MiB block writes over its pages (under a tenth
 *            fault; purge delay and cache age pinned long).
 *   locked   under mlockall (MCL_ONFAULT), where the kernel refuses to purge
 *            (MADV_DONTNEED on locked pages fails): blocks of every pool
 *            written, freed and purged (HAKMEM_PURGE_DELAY_MS=0 and
 *            malloc_trim), then calloc'd again, read zero throughout.
 *            Skipped where mlockall is refused.
 *   exit_trim  64 threads each allocate, write and free a few small blocks,
 *            and exit; malloc_trim(0) then gives their regions back: the
 *            address space they took (4 MiB a thread: under half of it
 *            left, the pool's purged regions) and their headers' resident
 *            pages (under 48 KiB a thread left, stacks included).
 *   thread_cost  64 threads each hold one 64-byte block at once: at most
 *            32 KiB resident a thread more than each of 64 threads that
 *            never allocate (their stack pages and TLS, hakmem's TLS view
 *            with them): the heap, the region header and the block's page.
 *   teardown  200,000 blocks of 48 B freed in a random order, then as
 *            many allocated again: most of them come back in address order,
 *            each right after the last (slabs the teardown emptied went back
 *            whole and are carved afresh), not in the order of the frees
 *            (slabs held by blocks left in the tcache, their lists shuffled).
 *   big_batch  96 blocks of 1 MiB (32 regions, past the pool's 16)
 *            written at both ends and freed, 20 times: after the first
 *            batch, no mmap call (the regions each batch empties wait in
 *            the pool past its bound until their purge); then, the
 *            program allocating a little, its address space falls back
 *            within the pool's 64 MiB (and 8 MiB) of the start within two
 *            seconds (HAKMEM_LEARN=0).
 *   mid_batch  200 blocks of 32 KiB (slabs of 8) freed and allocated
 *            again, ten times: the tcache grows to hold the batch (past
 *            its 4 MiB bound: 256 blocks at least), so that the last
 *            batch's mallocs return the one before's frees in reverse
 *            order, where a batch past the tcache would empty its slabs
 *            and make new ones.
 *   mid_pages  after 1,600 blocks of 300 B (a hot class populating ahead),
 *            1,600 blocks of 20,000 B (five pages) written only at
 *            their first and last byte: resident memory grows by at most
 *            0.65x their bytes (the pages between stay absent); then 1,600
 *            written whole: at most 1.1x, and their carves populated ahead
 *            of the writes (one madvise call a 64 KiB at least, where the
 *            sparse ones made under one a MiB).
 *   no_thp   the regions that hold small and Large blocks (the first one,
 *            grown, a thread's, and regions taken back from the pool after
 *            a trim) are advised off transparent huge pages
 *            (VmFlags "nh" in /proc/self/smaps): where THP is "always", a
 *            thread's first malloc would otherwise make 2 MiB resident.
 *            Skipped where the kernel has no THP.
 *
 * Run alone by name, a case measures a fresh process (CTest runs each so,
 * with the environment it needs); run together, each in a child of the
 * runner, those that need CTest's environment are left out.
 *
 * usage: test_memory [CASE|all] [seconds]   (CASE: purge, trim, threads, churn,
 *        bigcache, cache_yield, doubling, xthread, reuse, grow, regrow, sparse,
 *        arena, arena_grow, lend, lend_clean, lend_running, huge_grid, large_classes, calloc, huge_fit, regrow_huge,
 *        locked, no_thp, exit_trim, thread_cost, teardown, big_batch, mid_batch)
 */
#include "testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/resource.h>

static size_t mib(size_t bytes) { return bytes / MiB; }

static void free_all(void **slots, size_t n)
{
  for (size_t i = 0; i < n; i++) A(free)(slots[i]);
}

/* Waits up to `ms` for what `measure` reads (resident memory, address
 * space) to fall to at most `limit`; with
 * active, the program allocates meanwhile (a Large block allocated and freed
 * a few times every 10 ms, slow paths that return what is due), else it
 * makes no call at all. */
static size_t wait_until(size_t (*measure)(void), size_t limit, int ms, int active)
{
  size_t now = measure();
  for (int waited = 0; now > limit && waited < ms; waited += 10) {
    for (int i = 0; active && i < 32; i++) A(free)(tu_launder(A(malloc)(40000)));
    usleep(10000);
    now = measure();
  }
  return now;
}
static size_t address_space(void) { return tu_statm(0); }
#define wait_rss(limit, ms, active) wait_until(tu_rss, limit, ms, active)
#define wait_rss_below(limit, ms) wait_rss(limit, ms, 1)

/* Threads of this process now (/proc/self/task). */
static int task_count(void)
{
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  CHECK(d != NULL);
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static void **slot_array(size_t n)
{
  void **s = mmap(NULL, n * sizeof *s, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(s != MAP_FAILED);
  return s;
}

typedef struct {
  size_t base;       /* resident before */
  size_t full;       /* resident with every block written */
  size_t slot_pages; /* the block list's pages, touched by the test itself */
  double freed_at;   /* when the frees began */
} pools_t;

/* Writes about 300 MiB in blocks of every pool, then frees them all. */
static pools_t write_and_free_pools(uint64_t seed)
{
  static const size_t sizes[] = {16, 64, 200, 1000, 4096, 20000, 100000, 600000, 3 << 20};
  size_t max = 1 << 20, n = 0, bytes = 0;
  void **slots = slot_array(max);
  pools_t r = {.base = tu_rss(), .slot_pages = max * sizeof *slots};
  while (bytes < 300 * MiB && n < max) {
    size_t sz = sizes[tu_xorshift(&seed) % (sizeof sizes / sizeof *sizes)];
    void *p = A(malloc)(sz);
    CHECKF(p != NULL, "malloc(%zu) failed", sz);
    memset(p, 0x5a, sz);
    slots[n++] = p;
    bytes += sz;
  }
  r.full = tu_rss();
  r.freed_at = tu_now();
  free_all(slots, n);
  return r;
}

static void test_purge(void)
{
  pools_t f = write_and_free_pools(1);
  size_t base = f.base, slot_pages = f.slot_pages;
  CHECKF(f.full > base + 250 * MiB, "only %zu MiB resident after writing 300 MiB", mib(f.full - base));
  size_t rss = wait_rss_below(base + slot_pages + 4 * MiB, 1000);
  double took = tu_now() - f.freed_at;
  CHECKF(rss <= base + slot_pages + 4 * MiB, "resident %zu MiB above the start 1 s after freeing %zu MiB",
         mib(rss - base - slot_pages), mib(f.full - base));
  CHECKF(task_count() == 1, "%d threads in a program that started none", task_count());
  printf("test_memory purge: %zu MiB freed, back within 4 MiB of the start in %.2f s while the program "
         "allocates, and no thread of hakmem's: OK\n", mib(f.full - base), took);
}

static void *sleeper(void *arg)
{
  A(free)(tu_launder(A(malloc)(100))); /* a thread of the program's that has used the allocator */
  while (!atomic_load((atomic_int *)arg)) usleep(1000);
  return NULL;
}

/* HAKMEM_BACKGROUND_THREAD=1 (set by CTest): a single-threaded program gets
 * no thread; once it runs a second one, memory goes back within a second
 * with no further call, from a thread of hakmem's. */
static void test_background(void)
{
  pools_t f0 = write_and_free_pools(3);
  usleep(100000);
  CHECKF(task_count() == 1, "%d threads in a single-threaded program", task_count());
  atomic_int stop = 0;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, sleeper, &stop) == 0);
  usleep(50000);
  pools_t f = write_and_free_pools(4);
  size_t rss = wait_rss(f.base + f.slot_pages + 4 * MiB, 1000, 0);
  double took = tu_now() - f.freed_at;
  int tasks = task_count();
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  CHECKF(rss <= f.base + f.slot_pages + 4 * MiB, "resident %zu MiB above the start 1 s after freeing %zu MiB",
         mib(rss - f.base - f.slot_pages), mib(f.full - f.base));
  CHECKF(tasks == 3, "%d threads: the program's two and hakmem's one expected", tasks);
  printf("test_memory background: %zu MiB freed, back within 4 MiB of the start in %.2f s with no call: OK\n",
         mib(f.full - f.base), took);
  (void)f0;
}

static atomic_int owner_wake, owner_done;
static void *sleeping_owner(void *arg)
{
  void **blocks = arg;
  for (int i = 0; i < 20000; i++) {
    CHECK((blocks[i] = A(malloc)(KiB)) != NULL);
    memset(blocks[i], 7, KiB);
  }
  atomic_store(&owner_done, 1);
  while (!atomic_load(&owner_wake)) usleep(1000); /* asleep, its heap still its own */
  return NULL;
}

/* Processors this process may run on. */
static int processors(void)
{
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

/* One thread allocates 20,000 blocks of 1 KiB and sleeps; another frees them
 * all: within a second, with no further call, resident memory is back within
 * 2 MiB of the start. The frees start as soon as the owner is done, before
 * it may be asleep: with a processor each, an owner that stops taking its
 * slabs back is one that stopped. On one processor it gets a moment first
 * (the allocator cannot tell it from one the scheduler just set aside). */
static void test_idle_owner(void)
{
  void **blocks = slot_array(20000);
  size_t base = tu_rss();
  pthread_t owner;
  CHECK(pthread_create(&owner, NULL, sleeping_owner, blocks) == 0);
  while (!atomic_load(&owner_done)) usleep(100);
  if (processors() < 2) usleep(20000);
  size_t full = tu_rss();
  CHECKF(full > base + 15 * MiB, "only %zu MiB resident for 20,000 blocks of 1 KiB", mib(full - base));
  for (int i = 0; i < 20000; i++) A(free)(blocks[i]);
  double t0 = tu_now();
  size_t rss = wait_rss(base + 2 * MiB, 1000, 0);
  double took = tu_now() - t0;
  atomic_store(&owner_wake, 1);
  pthread_join(owner, NULL);
  CHECKF(rss <= base + 2 * MiB, "resident %zu KiB above the start 1 s after another thread freed the sleeping "
         "owner's blocks", (rss - base) / KiB);
  printf("test_memory idle_owner: %zu MiB freed by another thread, back within 2 MiB in %.2f s: OK\n",
         mib(full - base), took);
}

static void test_trim(void)
{
  pools_t f = write_and_free_pools(2);
  size_t base = f.base, slot_pages = f.slot_pages;
  usleep(300000);
  size_t kept = tu_rss();
  CHECKF(kept > base + 100 * MiB, "with purging off, only %zu MiB stayed resident after the frees", mib(kept - base));
  CHECK(A(malloc_trim)(0) == 1);
  size_t rss = tu_rss();
  CHECKF(rss <= base + slot_pages + 4 * MiB, "malloc_trim(0) left %zu MiB above the start",
         mib(rss - base - slot_pages));
  /* A new span takes units still resident before purged ones: x's units
   * are purged by the trim, y's stay dirty (purging is off), so a block of
   * their size goes where y was, whatever lies lower. The anchor keeps the
   * region from going back to the pool empty. */
  char *anchor = A(malloc)(64 * 1024), *x = A(malloc)(MiB), *y = A(malloc)(MiB);
  CHECK(anchor != NULL && x != NULL && y != NULL);
  memset(x, 1, MiB);
  memset(y, 2, MiB);
  A(free)(x);
  CHECK(A(malloc_trim)(0) == 1);
  A(free)(y);
  char *z = A(malloc)(MiB);
  CHECKF(z == y, "a 1 MiB block went to %p, not to the resident units of the one freed last at %p (purged: %p)",
         (void *)z, (void *)y, (void *)x);
  memset(z, 3, MiB);
  CHECK(z[0] == 3 && z[MiB - 1] == 3);
  A(free)(z);
  A(free)(anchor);
  printf("test_memory trim: %zu MiB kept without purging, %zu MiB after malloc_trim(0); resident units reused "
         "first: OK\n", mib(kept - base), mib(rss > base + slot_pages ? rss - base - slot_pages : 0));
}

static void *thread_body(void *arg)
{
  uint64_t seed = (uintptr_t)arg + 1;
  void *keep[64];
  size_t n = 0;
  for (int i = 0; i < 400; i++) {
    size_t sz = 16 + tu_xorshift(&seed) % 2000;
    void *p = A(malloc)(sz);
    CHECK(p != NULL);
    memset(p, 1, sz);
    if (n < 64 && (i & 7) == 0) keep[n++] = p;
    else A(free)(p);
  }
  void *big = A(malloc)(200000);
  CHECK(big != NULL);
  memset(big, 2, 200000);
  A(free)(big);
  while (n) A(free)(keep[--n]); /* the rest stays live in slabs the next thread adopts */
  return NULL;
}

/* A round of ROUND_THREADS threads running fn, their arguments first, first
 * + 1, ...; returns once they have all exited. */
#define ROUND_THREADS 4
static void run_round(void *(*fn)(void *), uintptr_t first)
{
  pthread_t th[ROUND_THREADS];
  for (int i = 0; i < ROUND_THREADS; i++) CHECK(pthread_create(&th[i], NULL, fn, (void *)(first + i)) == 0);
  for (int i = 0; i < ROUND_THREADS; i++) CHECK(pthread_join(th[i], NULL) == 0);
}

static void test_threads(void)
{
  size_t after_first = 0;
  for (int t = 0; t < 10000; t += ROUND_THREADS) {
    run_round(thread_body, (uintptr_t)t);
    if (t + ROUND_THREADS == 1000) after_first = tu_rss();
  }
  size_t end = tu_rss();
  CHECKF(end <= after_first + 8 * MiB, "resident grew from %zu MiB (1000 threads) to %zu MiB (10000 threads)",
         mib(after_first), mib(end));
  printf("test_memory threads: 10000 threads, resident %zu MiB after 1000, %zu MiB after 10000: OK\n",
         mib(after_first), mib(end));
}

static long minor_faults(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

#define EXIT_HANDED 4
static void *exit_handed[ROUND_THREADS][EXIT_HANDED];

static void *exit_reuse_body(void *arg)
{
  uintptr_t id = (uintptr_t)arg;
  uint64_t seed = id * 7919 + 1;
  void **handed = exit_handed[id % ROUND_THREADS], *b[16];
  for (int i = 0; i < EXIT_HANDED; i++) A(free)(handed[i]); /* the last round's thread's */
  for (int i = 0; i < 16; i++) {
    size_t size = 8192 + tu_xorshift(&seed) % (504 * 1024);
    b[i] = A(malloc)(size);
    CHECK(b[i] != NULL);
    memset(b[i], 1, size);
  }
  for (int i = 0; i < 16; i++) {
    if (i < EXIT_HANDED) handed[i] = b[i];
    else A(free)(b[i]);
  }
  return NULL;
}

static void test_exit_reuse(void)
{
  enum { WARM = 50, ROUNDS = 250, BOUND = 80 };
  long f0 = 0;
  for (int r = 0; r < ROUNDS; r++) {
    if (r == WARM) f0 = minor_faults();
    run_round(exit_reuse_body, (uintptr_t)r * ROUND_THREADS + 1);
  }
  double per_round = (double)(minor_faults() - f0) / (ROUNDS - WARM);
  for (int s = 0; s < ROUND_THREADS; s++)
    for (int i = 0; i < EXIT_HANDED; i++) A(free)(exit_handed[s][i]);
  CHECKF(per_round <= BOUND, "%.1f page faults a round of 4 threads, after %d rounds (at most %d)", per_round, WARM,
         BOUND);
  printf("test_memory exit_reuse: %.1f page faults a round of 4 threads writing 64 blocks of 8-512 KiB: OK\n",
         per_round);
}

static void test_churn(void)
{
  size_t max = 1 << 20, target = 256 * MiB; /* live bytes a round reaches */
  void **slots = slot_array(max);
  size_t base = tu_rss(), peak = 0, live = 0, slot_pages = max * sizeof *slots; /* touched by the test itself */
  int shown = 0;
  for (int round = 0; round < 5; round++) {
    uint64_t seed = (uint64_t)round + 10;
    size_t n = 0;
    live = 0;
    while (live < target && n < max) {
      size_t r = tu_xorshift(&seed) % 100;
      size_t sz = r < 70 ? 16 + tu_xorshift(&seed) % 1000 : r < 95 ? 1024 + tu_xorshift(&seed) % 31000
                                                                     : 32768 + tu_xorshift(&seed) % (4 << 20);
      void *p = A(malloc)(sz);
      CHECK(p != NULL);
      memset(p, 3, sz);
      slots[n++] = p;
      live += sz;
      if ((n & 1023) == 0) {
        size_t rss = tu_rss() - base;
        if (rss > peak) peak = rss;
        if (!shown && rss > target + target / 10 + slot_pages) { /* past the bound below: what holds it, for the log */
          A(malloc_stats)();
          shown = 1;
        }
      }
    }
    size_t rss = tu_rss() - base;
    if (rss > peak) peak = rss;
    free_all(slots, n);
  }
  size_t end = wait_rss_below(base + slot_pages + peak / 10, 1000) - base;
  end = end > slot_pages ? end - slot_pages : 0;
  CHECKF(peak <= live + live / 10 + slot_pages, "peak resident %zu MiB for %zu MiB live", mib(peak), mib(live));
  if (end > peak / 10) A(malloc_stats)(); /* what held it, for the log */
  CHECKF(end <= peak / 10, "resident %zu MiB at the end, peak %zu MiB", mib(end), mib(peak));
  printf("test_memory churn: 5 x %zu MiB live, peak resident %zu MiB, end %zu MiB: OK\n", mib(live), mib(peak),
         mib(end));
}

static void test_bigcache(void)
{
  void *blocks[40];
  size_t base = tu_rss();
  for (int i = 0; i < 40; i++) {
    blocks[i] = A(malloc)(16 * MiB);
    CHECK(blocks[i] != NULL);
    memset(blocks[i], 4, 16 * MiB);
  }
  for (int i = 0; i < 40; i++) A(free)(blocks[i]);
  size_t kept = tu_rss() > base ? tu_rss() - base : 0;
  CHECKF(kept <= 32 * MiB + 4 * MiB, "%zu MiB stayed resident with a 32 MiB BigCache", mib(kept));
  CHECKF(kept >= 24 * MiB, "%zu MiB stayed resident: the 32 MiB BigCache shed more than its excess", mib(kept));
  size_t rss = wait_rss_below(base + 4 * MiB, 1500);
  CHECKF(rss <= base + 4 * MiB, "%zu MiB still resident after the cache's age", mib(rss - base));
  printf("test_memory bigcache: %zu MiB kept after freeing 640 MiB, gone after its age: OK\n", mib(kept));
  unsigned char *p = A(malloc)(8 * MiB);
  CHECK(p != NULL);
  memset(p, 5, 8 * MiB);
  A(free)(p);
  /* It takes the freed block's units; its other 2 MiB may lie before them
   * as well as after (placement weighs resident pages, and the wait above
   * leaves up to 4 MiB resident). */
  unsigned char *q = A(malloc)(10 * MiB);
  CHECKF(q != NULL && q <= p && q + 10 * MiB >= p + 8 * MiB,
         "a 10 MiB block after freeing 8 MiB at %p came at %p, not over it", (void *)p, (void *)q);
  memset(q, 6, 10 * MiB);
  for (size_t i = 0; i < 10 * MiB; i += 4093) CHECKF(q[i] == 6, "byte %zu of the grown block reads %d", i, q[i]);
  A(free)(q);
  unsigned char *z = A(calloc)(1, 11 * MiB);
  CHECK(z != NULL);
  for (size_t i = 0; i < 11 * MiB; i += 4093) CHECKF(z[i] == 0, "byte %zu of calloc's reused block reads %d", i, z[i]);
  CHECK(z[11 * MiB - 1] == 0);
  A(free)(z);
  printf("test_memory bigcache: a freed block's units served a larger one over them: OK\n");
}

/* A freed huge block's cached pages give way to slabs growing onto fresh
 * memory (the cache's age is pinned long, so only that can release them). */
static void test_cache_yield(void)
{
  const size_t big = 48 * MiB, size = 1000, n = big / size;
  size_t base = tu_rss();
  char *h = A(malloc)(big);
  CHECK(h != NULL);
  memset(h, 7, big);
  A(free)(h);
  size_t cached = tu_rss() > base ? tu_rss() - base : 0;
  char **p = (char **)slot_array(n);
  for (size_t i = 0; i < n; i++) {
    CHECK((p[i] = A(malloc)(size)) != NULL);
    tu_fill(p[i], 0, size, i);
  }
  size_t grown = tu_rss() > base ? tu_rss() - base : 0;
  /* the small blocks, their class's rounding and slabs, and a step or two of the cache not yet given back */
  CHECKF(grown <= big + big / 8 + 8 * MiB, "%zu MiB of huge pages cached, then %zu MiB of small blocks: %zu MiB resident",
         mib(cached), mib(big), mib(grown));
  for (size_t i = 0; i < n; i++) {
    size_t bad = tu_verify(p[i], 0, size, i);
    CHECKF(bad == (size_t)-1, "block %zu lost byte %zu", i, bad);
    A(free)(p[i]);
  }
  munmap(p, n * sizeof *p);
  printf("test_memory cache_yield: %zu MiB cached, %zu MiB of small blocks after: %zu MiB resident: OK\n", mib(cached),
         mib(big), mib(grown));
}

/* Huge blocks that only grow (a table doubled, the old one freed after the
 * copy) land on fresh pages each time: the cache gives up the older ones
 * meanwhile, and the resident memory stays that of the two live blocks, as
 * with blocks unmapped at free. */
static void test_doubling(void)
{
  size_t base = tu_rss(), old_size = 0, most = 0;
  unsigned char *old = NULL;
  for (size_t size = 4 * MiB; size <= 64 * MiB; size *= 2) {
    unsigned char *p = A(malloc)(size);
    CHECK(p != NULL);
    if (p == NULL) break;
    if (old) memcpy(p, old, old_size);
    tu_fill(p, old_size, size, 9);
    size_t rss = tu_rss() > base ? tu_rss() - base : 0;
    if (rss > most) most = rss;
    CHECKF(rss <= size + old_size + 8 * MiB, "a %zu MiB block beside the %zu MiB one it replaces: %zu MiB resident",
           mib(size), mib(old_size), mib(rss));
    size_t bad = tu_verify(p, 0, size, 9);
    CHECKF(bad == (size_t)-1, "the %zu MiB block lost byte %zu", mib(size), bad);
    A(free)(old);
    old = p;
    old_size = size;
  }
  A(free)(old);
  printf("test_memory doubling: huge blocks doubled from 4 to 64 MiB, at most %zu MiB resident: OK\n", mib(most));
}

#define RING 8192
static void *_Atomic ring[RING];
static _Atomic int xthread_stop;

static void *xthread_consumer(void *arg)
{
  size_t head = 0;
  for (;;) {
    void *p = atomic_exchange(&ring[head % RING], NULL);
    if (p == NULL) {
      if (atomic_load(&xthread_stop)) return NULL;
      sched_yield();
      continue;
    }
    CHECK(*(uint64_t *)p == head);
    A(free)(p);
    head++;
  }
}

static void test_xthread(void)
{
  double seconds = tu_param(0, 60);
  pthread_t cons;
  CHECK(pthread_create(&cons, NULL, xthread_consumer, NULL) == 0);
  uint64_t seed = 7;
  size_t base = tu_rss(), peak = 0, working_set = RING * (16 + 1024) / 2;
  double t0 = tu_now(), next_sample = t0;
  for (size_t tail = 0;; tail++) {
    size_t sz = 16 + tu_xorshift(&seed) % 1009;
    uint64_t *p = A(malloc)(sz);
    CHECK(p != NULL);
    memset(p, 6, sz);
    *p = tail;
    while (atomic_load(&ring[tail % RING]) != NULL) sched_yield();
    atomic_store(&ring[tail % RING], p);
    if ((tail & 4095) == 0) {
      double now = tu_now();
      if (now >= next_sample) {
        size_t rss = tu_rss();
        if (rss > base && rss - base > peak) peak = rss - base;
        next_sample = now + 0.1;
      }
      if (now - t0 >= seconds) break;
    }
  }
  atomic_store(&xthread_stop, 1);
  CHECK(pthread_join(cons, NULL) == 0);
  CHECKF(peak <= 2 * working_set, "resident grew %zu KiB over the start, working set %zu KiB", peak >> 10,
         working_set >> 10);
  printf("test_memory xthread: %.0f s producer/consumer, resident at most %zu KiB over the start "
         "(working set %zu KiB): OK\n", seconds, peak >> 10, working_set >> 10);
}

/* A slab of 8 KiB requests spans SLAB_SPAN (8 units of 64 KiB) and holds 61
 * or 62 blocks of their class (8448 B, off the page grid: size_class.h), the
 * first at a multiple of the size. */
enum { SLAB_BLOCKS = 61, SLAB_BSIZE = 8192, SLAB_SPAN = 512 * 1024 };

/* Allocates a slab's worth of 8 KiB blocks, fills each with its own byte and
 * checks them all once every block is written (an overlap would show). */
static void slab_fill(char **p, int round)
{
  for (int i = 0; i < SLAB_BLOCKS; i++) {
    p[i] = A(malloc)(SLAB_BSIZE);
    CHECKF(p[i] != NULL, "round %d: malloc(8192) failed", round);
    memset(p[i], round * SLAB_BLOCKS + i, SLAB_BSIZE);
  }
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < SLAB_BLOCKS; i++) {
    for (size_t k = 0; k < SLAB_BSIZE; k++)
      CHECKF((unsigned char)p[i][k] == (unsigned char)(round * SLAB_BLOCKS + i), "round %d: block %d byte %zu overwritten",
             round, i, k);
    if ((uintptr_t)p[i] < lo) lo = (uintptr_t)p[i];
    if ((uintptr_t)p[i] > hi) hi = (uintptr_t)p[i];
  }
  CHECKF(hi - lo < SLAB_SPAN, "round %d: the %d blocks span %zu KiB, more than one slab", round, SLAB_BLOCKS,
         (size_t)(hi - lo) >> 10);
}

enum { OTHER_BSIZE = 20000 };

/* Resident pages of [p, p + size) (mincore; page-aligned p). */
static size_t resident_pages(const void *p, size_t size)
{
  static unsigned char vec[8 * MiB / 4096];
  size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (size + page - 1) / page, n = 0;
  CHECK(pages <= sizeof vec);
  CHECK(mincore((void *)p, size, vec) == 0);
  for (size_t k = 0; k < pages; k++) n += vec[k] & 1;
  return n;
}

/* Resident bytes of the pages that hold the blocks p[] (mincore), and in
 * *total how many bytes those pages make. */
static size_t slab_resident(char **p, size_t *total)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < SLAB_BLOCKS; i++) {
    if ((uintptr_t)p[i] < lo) lo = (uintptr_t)p[i];
    if ((uintptr_t)p[i] + SLAB_BSIZE > hi) hi = (uintptr_t)p[i] + SLAB_BSIZE;
  }
  lo &= ~(page - 1);
  hi = (hi + page - 1) & ~(page - 1);
  *total = hi - lo;
  return resident_pages((void *)lo, hi - lo) * page;
}

static void test_reuse(void)
{
  static const size_t sizes[] = {16, 48, 512, 1024, 3000, 8192, 20000};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    void *a = A(malloc)(sizes[i]), *b = A(malloc)(sizes[i]);
    CHECK(a != NULL && b != NULL && a != b);
    A(free)(b);
    void *c = A(malloc)(sizes[i]);
    CHECKF(c == b, "malloc(%zu) after a free of that size: %p, not the block freed last %p", sizes[i], c, b);
    A(free)(a);
    A(free)(c);
  }
  char *p[SLAB_BLOCKS];
  slab_fill(p, 0);
  for (int i = 0; i < SLAB_BLOCKS; i++) A(free)(p[i]);
  char *q = A(malloc)(SLAB_BSIZE);
  CHECKF(q == p[SLAB_BLOCKS - 1], "an emptied slab lost its list: %p, not the block freed last %p", (void *)q,
         (void *)p[SLAB_BLOCKS - 1]);
  A(free)(q);
  slab_fill(p, 1);
  for (int i = 0; i < SLAB_BLOCKS; i++) A(free)(p[i]);
  usleep(400000); /* 20 times the purge delay */
  size_t total, kept = slab_resident(p, &total);
  CHECKF(kept == total, "the last emptied slab went idle: %zu of %zu KiB resident", kept >> 10, total >> 10);
  /* The owner's periodic check (once per purge delay, on its slow paths)
   * takes an emptied current slab that carved more than a unit off the fast
   * path; idle for the delay, its pages go back. */
  size_t idle = total;
  for (int waited = 0; waited < 1000 && idle > 0; waited += 10) {
    for (int i = 0; i < 32; i++) A(free)(tu_launder(A(malloc)(OTHER_BSIZE * 2)));
    usleep(10000);
    idle = slab_resident(p, &total);
  }
  CHECKF(idle == 0, "an emptied slab kept %zu KiB resident while the program allocated other sizes", idle >> 10);
  slab_fill(p, 2);
  for (int i = 0; i < SLAB_BLOCKS; i++) A(free)(p[i]);
  printf("test_memory reuse: last freed first at %zu sizes; an emptied slab stayed resident while "
         "the program slept, went idle once it allocated again, was purged and started afresh: OK\n",
         sizeof sizes / sizeof *sizes);
}

static void test_grow(void)
{
  enum { NB = 8, STEP = 4096, FROM = 40 * 1024, TO = 1536 * 1024 };
  unsigned char *b[NB];
  size_t rss0 = tu_rss();
  for (int k = 0; k < NB; k++) {
    CHECK((b[k] = A(malloc)(FROM)) != NULL);
    tu_fill(b[k], 0, FROM, 77 + (uint64_t)k);
  }
  for (size_t size = FROM; size < TO; size += STEP)
    for (int k = 0; k < NB; k++) {
      size_t want = size + STEP;
      unsigned char *nb = tu_launder(A(realloc)(b[k], want));
      CHECKF(nb != NULL, "realloc(%zu)", want);
      /* a class's rounding, or (moved below 256 KiB) room of twice its old size up to 256 KiB, to
       * a 64 KiB unit's end, which it grows into in place: the resident check below holds either way */
      size_t twice = 2 * want < 256 * 1024 ? 2 * want : 256 * 1024;
      size_t usable = A(malloc_usable_size)(nb), room = ((want > twice ? want : twice) + 65535) & ~(size_t)65535;
      CHECKF(usable >= want && usable <= (room > want + want / 4 + STEP ? room : want + want / 4 + STEP),
             "usable size %zu after realloc(%zu)", usable, want);
      tu_fill(nb, size, want, 77 + (uint64_t)k);
      b[k] = nb;
    }
  double grown = (double)(tu_rss() - rss0) / MiB, live = (double)NB * TO / MiB;
  for (int k = 0; k < NB; k++) {
    size_t bad = tu_verify(b[k], 0, TO, 77 + (uint64_t)k);
    CHECKF(bad == (size_t)-1, "block %d grown to %d KiB: byte %zu lost", k, TO >> 10, bad);
    A(free)(b[k]);
  }
  /* the copies each move leaves (64, 128 and 256 KiB a block, kept for the
   * next buffers grown the same way: regrow) are 0.29 of the live bytes */
  CHECKF(grown <= 1.35 * live, "%d blocks grown to %d KiB: resident memory grew %.1f MiB for %.1f MiB live", NB,
         TO >> 10, grown, live);
  printf("test_memory grow: %d blocks grown 4 KiB at a time to %d KiB, content kept; resident memory grew %.1f MiB "
         "for %.1f MiB live: OK\n", NB, TO >> 10, grown, live);
}

/* Buffers grown the same way round after round (a server's responses, a
 * parser's records) take back the runs the last round's copies left: the
 * resident memory of a round's peak stays that of the first. */
static void test_regrow(void)
{
  enum { NB = 8, STEP = 4096, TO = 1024 * 1024, ROUNDS = 12 };
  size_t rss0 = tu_rss(), first = 0, most = 0;
  for (int r = 0; r < ROUNDS; r++) {
    unsigned char *b[NB] = {0};
    for (size_t size = 0; size < TO; size += STEP)
      for (int k = 0; k < NB; k++) {
        unsigned char *nb = tu_launder(A(realloc)(b[k], size + STEP));
        CHECKF(nb != NULL, "realloc(%zu)", size + STEP);
        if (nb == NULL) return;
        tu_fill(nb, size, size + STEP, (uint64_t)(r * NB + k));
        b[k] = nb;
      }
    size_t grown = tu_rss() - rss0;
    first = r == 0 ? grown : first;
    most = grown > most ? grown : most;
    for (int k = 0; k < NB; k++) {
      size_t bad = tu_verify(b[k], 0, TO, (uint64_t)(r * NB + k));
      CHECKF(bad == (size_t)-1, "round %d, buffer %d: byte %zu lost", r, k, bad);
      A(free)(b[k]);
    }
  }
  CHECKF(most <= first + 2 * MiB, "%d rounds of %d buffers grown to %d KiB: resident %.1f MiB at the first "
         "round's peak, %.1f MiB at the most", ROUNDS, NB, TO >> 10, (double)first / MiB, (double)most / MiB);
  printf("test_memory regrow: %d rounds of %d buffers grown 4 KiB at a time to %d KiB: resident %.1f MiB at the "
         "first round's peak, %.1f MiB at the most: OK\n", ROUNDS, NB, TO >> 10, (double)first / MiB,
         (double)most / MiB);
}

static void test_sparse(void)
{
  static const struct {
    size_t size, keep;
  } kinds[] = {{64, 256}, {3000, 16}, {20000, 8}};
  const size_t total = 24 * MiB;
  for (int round = 0; round < 2; round++)
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
      size_t size = kinds[k].size, keep = kinds[k].keep, n = total / size, freed = 0;
      char **p = (char **)slot_array(n);
      A(malloc_trim)(0); /* what the last round freed is not counted here */
      for (size_t i = 0; i < n; i++) {
        CHECK((p[i] = A(malloc)(size)) != NULL);
        tu_fill(p[i], 0, size, i);
      }
      size_t full = tu_rss();
      for (size_t i = 0; i < n; i++)
        if (i % keep) A(free)(p[i]), p[i] = NULL, freed += size;
      if (round == 0) {
        A(malloc_trim)(0);
      } else {
        usleep(100000);
        /* slow paths (Large blocks) for 150 ms, three ticks at least: a
         * slab found sparse at one tick goes back at the next */
        for (double t0 = tu_now(); tu_now() - t0 < 0.15; usleep(2000))
          for (int j = 0; j < 32; j++) {
            void *x = A(malloc)(100000);
            CHECK(x != NULL);
            A(free)(x);
          }
      }
      size_t after = tu_rss(), fell = full > after ? full - after : 0; /* resident may also have grown */
      CHECKF(fell >= freed / 2, "%s, %zu B blocks, %zu MiB freed, one in %zu kept: resident fell by %zu KiB",
             round ? "no trim" : "malloc_trim", size, mib(freed), keep, fell >> 10);
      for (size_t i = 0; i < n; i += keep) {
        size_t bad = tu_verify(p[i], 0, size, i);
        CHECKF(bad == (size_t)-1, "kept %zu B block %zu lost byte %zu", size, i, bad);
      }
      for (size_t i = 0; i < n; i++)
        if (!p[i]) {
          CHECK((p[i] = A(malloc)(size)) != NULL);
          tu_fill(p[i], 0, size, i);
        }
      for (size_t i = 0; i < n; i++) {
        size_t bad = tu_verify(p[i], 0, size, i);
        CHECKF(bad == (size_t)-1, "%zu B block %zu, allocated again, lost byte %zu", size, i, bad);
        A(free)(p[i]);
      }
      munmap(p, n * sizeof *p);
      printf("test_memory sparse (%s): %zu B blocks, one in %zu kept: resident fell by %zu of %zu MiB freed; "
             "reallocated and checked: OK\n", round ? "no trim" : "malloc_trim", size, keep, mib(fell),
             mib(freed));
    }
}

static void test_arena(void)
{
  char *a = A(malloc)(6 * MiB), *b = A(malloc)(6 * MiB);
  CHECK(a != NULL && b != NULL);
  memset(a, 1, 6 * MiB);
  memset(b, 2, 6 * MiB);
  A(free)(a);
  A(free)(b);
  long f0 = minor_faults();
  char *c = A(malloc)(12 * MiB);
  CHECKF(c == a || c == b, "12 MiB after freeing 6 MiB at %p and %p came at %p", (void *)a, (void *)b, (void *)c);
  memset(c, 3, 12 * MiB);
  long faults = minor_faults() - f0;
  CHECKF(faults < (long)(12 * MiB / 4096 / 10), "%ld page faults writing 12 MiB of freed, resident pages", faults);
  A(free)(c);
  unsigned char *z = A(calloc)(1, 12 * MiB);
  CHECKF(z == (unsigned char *)c, "calloc of 12 MiB at %p, not the freed block's %p", (void *)z, (void *)c);
  for (size_t i = 0; i < 12 * MiB; i += 4096) CHECKF(z[i] == 0 && z[i + 4095] == 0, "calloc's page at %zu not zero", i);
  printf("test_memory arena: freed neighbours merged and served 12 MiB in place (%ld faults), calloc zeroed: OK\n",
         faults);

  tu_fill(z, 0, 12 * MiB, 7);
  CHECK(A(malloc_usable_size)(z + MiB) == 0);
  A(free)(z + MiB); /* reported on stderr, nothing done */
  CHECKF(tu_verify(z, 0, 12 * MiB, 7) == (size_t)-1, "a free inside the block changed it");
  char *g = A(realloc)(z, 300 * MiB);
  CHECK(g != NULL);
  CHECKF(tu_verify(g, 0, 12 * MiB, 7) == (size_t)-1, "realloc to 300 MiB lost bytes");
  tu_fill(g, 12 * MiB, 300 * MiB, 8);
  char *s = A(realloc)(g, MiB);
  CHECK(s != NULL);
  CHECKF(tu_verify(s, 0, MiB, 7) == (size_t)-1, "realloc back to 1 MiB lost bytes");
  A(free)(s);
  printf("test_memory arena: a pointer inside refused, realloc to 300 MiB and back kept every byte: OK\n");
}

/* An arena that fills its mapping grows in place: the next block follows,
 * and once both are freed they serve one block that spans the growth. */
static void test_arena_grow(void)
{
  char *x = A(malloc)(10 * MiB), *y = A(malloc)(12 * MiB);
  CHECK(x != NULL && y != NULL);
  if ((uintptr_t)x < ((uintptr_t)1 << 32) || (uintptr_t)x >= ((uintptr_t)1 << 40)) {
    printf("test_memory arena_grow: outside the window (%p): arenas do not grow there, skipped\n", (void *)x);
    return;
  }
  CHECKF(y == x + 10 * MiB, "12 MiB after 10 MiB at %p came at %p, not after it", (void *)x, (void *)y);
  memset(x, 1, 10 * MiB);
  memset(y, 2, 12 * MiB);
  A(free)(x);
  A(free)(y);
  char *z = A(malloc)(22 * MiB);
  CHECKF(z == x, "22 MiB after freeing both came at %p, not at %p", (void *)z, (void *)x);
  A(free)(z);
  printf("test_memory arena_grow: the arena grew in place, and its parts merged: OK\n");
}

#define LEND_BLOCKS 64
#define LEND_SIZE ((size_t)128 << 10)
#define LEND_PAGES ((long)(LEND_BLOCKS * LEND_SIZE / 4096))
/* Mallocs LEND_BLOCKS blocks into b and writes them whole; the page faults
 * that took. */
static long lend_write(void **b, int fill)
{
  long f0 = minor_faults();
  for (int i = 0; i < LEND_BLOCKS; i++) {
    b[i] = A(malloc)(LEND_SIZE);
    CHECK(b[i] != NULL);
    if (b[i]) memset(b[i], fill, LEND_SIZE);
  }
  return minor_faults() - f0;
}

static void lend_free(void **b)
{
  for (int i = 0; i < LEND_BLOCKS; i++) A(free)(b[i]);
}

static void *lend_body(void *arg)
{
  void *b[LEND_BLOCKS];
  lend_write(b, 1);
  lend_free(b);
  return arg;
}

static void test_lend(void)
{
  void *own = A(malloc)(64), *b[LEND_BLOCKS]; /* the main thread's heap exists before the other exits */
  pthread_t th;
  CHECK(pthread_create(&th, NULL, lend_body, NULL) == 0);
  CHECK(pthread_join(th, NULL) == 0);
  long faults = lend_write(b, 2);
  lend_free(b);
  A(free)(own);
  CHECKF(faults * 4 < LEND_PAGES, "%ld page faults writing %ld pages an exited thread's heap left free", faults,
         LEND_PAGES);
  printf("test_memory lend: %ld page faults writing 8 MiB on pages an exited thread left: OK\n", faults);
}

/* A thread that writes LEND_BLOCKS blocks, hands them to the main thread
 * and waits, alive, while the main thread frees them and writes as many. */
static pthread_barrier_t lend_wait;
static void *lend_made[LEND_BLOCKS];
static void *lend_body_waiting(void *arg)
{
  lend_write(lend_made, 1);
  pthread_barrier_wait(&lend_wait); /* handed over */
  pthread_barrier_wait(&lend_wait); /* the main thread wrote its own */
  return arg;
}

static void test_lend_clean(void)
{
  void *b[LEND_BLOCKS];
  for (int i = 0; i < LEND_BLOCKS; i++) CHECK((b[i] = A(malloc)(LEND_SIZE)) != NULL);
  lend_free(b);
  CHECK(A(malloc_trim)(0) == 1); /* the main thread's heap keeps 8 MiB of free pages, none resident */
  pthread_t th;
  CHECK(pthread_create(&th, NULL, lend_body, NULL) == 0);
  CHECK(pthread_join(th, NULL) == 0);
  long faults = lend_write(b, 2);
  lend_free(b);
  CHECKF(faults * 4 < LEND_PAGES, "%ld page faults writing %ld pages beside an exited thread's free ones", faults,
         LEND_PAGES);
  printf("test_memory lend_clean: %ld page faults writing 8 MiB, its heap's own free pages purged: OK\n", faults);
}

static void test_lend_running(void)
{
  void *own = A(malloc)(64), *b[LEND_BLOCKS];
  pthread_t th;
  CHECK(pthread_barrier_init(&lend_wait, NULL, 2) == 0);
  CHECK(pthread_create(&th, NULL, lend_body_waiting, NULL) == 0);
  pthread_barrier_wait(&lend_wait);
  lend_free(lend_made); /* into the waiting thread's heap */
  long faults = lend_write(b, 2);
  pthread_barrier_wait(&lend_wait);
  CHECK(pthread_join(th, NULL) == 0);
  pthread_barrier_destroy(&lend_wait);
  lend_free(b);
  A(free)(own);
  CHECKF(faults * 4 < LEND_PAGES, "%ld page faults writing %ld pages a waiting thread's heap holds free", faults,
         LEND_PAGES);
  printf("test_memory lend_running: %ld page faults writing 8 MiB on pages freed into a waiting thread's heap: OK\n",
         faults);
}

/* A program that writes only the head of its blocks: once a placement's
 * probe has found the freed blocks' pages mostly absent, a huge block
 * placed on freed units starts on its grid (its units rounded down to a
 * power of two, at most 8: 2 MiB), where the freed blocks' heads lie, not
 * in the middle of one. The block the thread held is taken back as it
 * lies, off the grid of a new size. */
static void test_huge_grid(void)
{
  enum { LIVE = 4, ROUNDS = 16, UNIT = 256 * 1024 };
  char *p[LIVE] = {0};
  uint64_t rng = 7;
  int placed = 0;
  for (int r = 0; r < ROUNDS; r++) {
    char *held = p[LIVE - 1]; /* freed last */
    for (int k = 0; k < LIVE; k++) A(free)(p[k]);
    for (int k = 0; k < LIVE; k++) {
      size_t size = 300 * 1024 + tu_xorshift(&rng) % (3 * MiB), units = (size + UNIT - 1) / UNIT;
      size_t grid = units >= 8 ? 8 : (size_t)1 << (63 - __builtin_clzll(units));
      CHECK((p[k] = A(malloc)(size)) != NULL);
      p[k][0] = (char)r; /* its head only */
      if (r < 2 || p[k] == held) continue;
      placed++;
      CHECKF((uintptr_t)p[k] % (grid * UNIT) == 0, "round %d: a %zu KiB block at %p, not on its %zu KiB grid", r,
             size >> 10, (void *)p[k], grid * UNIT >> 10);
    }
  }
  for (int k = 0; k < LIVE; k++) A(free)(p[k]);
  CHECKF(placed >= (ROUNDS - 2) * (LIVE - 1), "%d blocks placed anew in %d rounds", placed, ROUNDS - 2);
  printf("test_memory huge_grid: %d blocks written at their head only, placed on freed units on their grid: OK\n",
         placed);
}

/* One block grown by small steps from 1 MiB to 64 MiB: past the arena it
 * moves to a mapping of its own, which grows in place or moves its pages
 * (in pieces where they lie in several of the kernel's mappings), never
 * copies them: each page faults once, as the program writes it. */
static void test_grow_huge(void)
{
  enum { STEP = 16 * 1024, FROM = 1 << 20, TO = 64 << 20 };
  unsigned char *b = A(malloc)(FROM);
  CHECK(b != NULL);
  tu_fill(b, 0, FROM, 99);
  long f0 = minor_faults();
  for (size_t size = FROM; size < TO; size += STEP) {
    unsigned char *nb = tu_launder(A(realloc)(b, size + STEP));
    CHECKF(nb != NULL, "realloc(%zu)", size + STEP);
    if (nb == NULL) break;
    tu_fill(nb, size, size + STEP, 99);
    b = nb;
  }
  long faults = minor_faults() - f0, pages = (TO - FROM) / 4096;
  size_t bad = tu_verify(b, 0, TO, 99);
  CHECKF(bad == (size_t)-1, "grown to %d MiB: byte %zu lost", TO >> 20, bad);
  A(free)(b);
  CHECKF(faults <= pages + pages / 8 + 512, "%ld page faults growing to %d MiB, %ld pages written: copied", faults,
         TO >> 20, pages);
  printf("test_memory grow_huge: 1 MiB grown 16 KiB at a time to %d MiB: %ld page faults for %ld pages: OK\n",
         TO >> 20, faults, pages);
}

/* A buffer grown by half again from 16 B to 64 MiB (realloc, each new part
 * written), freed, and grown so again: it grows in its arena, which grows
 * with it, and the second time its pages are the first one's, cached (under
 * a tenth fault); moved to a mapping of its own and unmapped at free, each
 * growth faulted every page. */
static void test_regrow_huge(void)
{
  long faults[2] = {0};
  for (int round = 0; round < 2; round++) {
    long f0 = minor_faults();
    size_t cap = 16;
    unsigned char *v = A(malloc)(cap);
    CHECK(v != NULL);
    if (v == NULL) return;
    while (cap < 64 * MiB) {
      size_t more = cap + cap / 2;
      unsigned char *nv = tu_launder(A(realloc)(v, more));
      CHECKF(nv != NULL, "realloc(%zu)", more);
      if (nv == NULL) break;
      memset(nv + cap, round + 1, more - cap);
      v = nv;
      cap = more;
    }
    faults[round] = minor_faults() - f0;
    CHECKF(v[cap - 1] == round + 1 && v[64 * MiB / 2] == round + 1, "round %d: bytes lost", round);
    A(free)(v);
  }
  long pages = (long)(64 * MiB / 4096);
  CHECKF(faults[1] < pages / 10, "the second growth to 64 MiB faulted %ld pages (the first %ld)", faults[1], faults[0]);
  printf("test_memory regrow_huge: a buffer grown by half to 64 MiB, twice: %ld then %ld page faults: OK\n", faults[0],
         faults[1]);
}

/* Large blocks up to 256 KiB come in a class per page count (large.c): a
 * freed block of a malloc's own page count serves it before a longer one
 * freed later, so that the page its last byte falls on is resident already;
 * with none of its own, one up to an eighth longer does. A block takes
 * the pages its size needs, no more. */
static void test_large_classes(void)
{
  enum { PAGE = 4096 };
  char *anchor = A(malloc)(40 * PAGE), *own = A(malloc)(33 * PAGE - 100), *longer = A(malloc)(35 * PAGE - 100);
  CHECK(anchor != NULL && own != NULL && longer != NULL);
  CHECKF(A(malloc_usable_size)(own) == 33 * PAGE, "malloc(%d) has %zu B usable, not its 33 pages", 33 * PAGE - 100,
         A(malloc_usable_size)(own));
  own[0] = longer[0] = 1;
  own[33 * PAGE - 101] = longer[35 * PAGE - 101] = 1;
  A(free)(own);
  A(free)(longer); /* freed last */
  char *q = A(malloc)(33 * PAGE - 200);
  CHECKF(q == own, "malloc(33 pages) after frees of 33 and then 35 pages came at %p, not the 33-page block %p",
         (void *)q, (void *)own);
  CHECKF(q == NULL || resident_pages(q + 32 * PAGE, PAGE) == 1, "the last page of the block reused was not resident");
  char *r = tu_launder(A(malloc)(33 * PAGE - 200)); /* none of 33 pages left: the 35-page one, within an eighth */
  CHECKF(r == longer, "malloc(33 pages) with only a 35-page block freed came at %p, not that block %p", (void *)r,
         (void *)longer);
  CHECK(r == NULL || r[35 * PAGE - 101] == 1);
  A(free)(q);
  A(free)(r);
  A(free)(anchor);
  printf("test_memory large_classes: a freed block of the same page count first, one an eighth longer next: OK\n");
}

/* The huge block freed last is held (huge.c): the next malloc of about its
 * size takes it without the lock; a shorter one takes it reshaped in place
 * (its tail freed), a longer one too where the freed units after it are
 * enough; malloc_trim(0) returns its pages. */
static void test_held_reshape(void)
{
  enum { SZ = 1 << 20, PAGE = 4096 };
  char *anchor = A(malloc)(SZ), *p = A(malloc)(SZ);
  CHECK(anchor != NULL && p != NULL);
  memset(p, 1, SZ);
  A(free)(p);
  char *q = A(malloc)(SZ - 4 * PAGE);
  CHECKF(q == p && A(malloc_usable_size)(q) == SZ, "malloc(1 MiB - 16 KiB) after free(1 MiB) came at %p (%zu B usable), "
         "not as the freed block %p", (void *)q, A(malloc_usable_size)(q), (void *)p);
  CHECK(q[64] == 1 && q[SZ - 4 * PAGE - 1] == 1); /* the same pages (the first words held the list's) */
  A(free)(q);
  char *r = A(malloc)(SZ / 2); /* shorter by half: the held block cut to it, its tail freed */
  CHECK(r != NULL);
  CHECKF(r == q && A(malloc_usable_size)(r) == SZ / 2, "malloc(512 KiB) after free(1 MiB) came at %p (%zu B usable), "
         "not as the freed block %p cut to 512 KiB", (void *)r, A(malloc_usable_size)(r), (void *)q);
  CHECK(r[64] == 1 && r[SZ / 2 - 1] == 1);
  memset(r, 2, SZ / 2);
  A(free)(r);
  char *s = A(malloc)(SZ); /* longer: the held block grown back over its freed tail */
  CHECKF(s == r && A(malloc_usable_size)(s) == SZ, "malloc(1 MiB) after free(512 KiB) came at %p (%zu B usable), "
         "not as the freed block %p grown over its freed tail", (void *)s, A(malloc_usable_size)(s), (void *)r);
  CHECK(s[64] == 2 && s[SZ - 1] == 1);
  memset(s, 3, SZ);
  A(free)(s);
  size_t before = tu_rss();
  CHECK(A(malloc_trim)(0) == 1);
  size_t after = tu_rss();
  CHECKF(after + SZ / 2 <= before, "malloc_trim(0) took %zu KiB back, not the held 1 MiB block", (before - after) / 1024);
  A(free)(anchor);
  printf("test_memory held_reshape: a freed 1 MiB block taken back at once, cut and grown in place, trimmed: OK\n");
}

/* calloc on a freed block's pages: resident ones are zeroed in place (a
 * program writes what it callocs: a fault each page would cost 10-20 times a
 * memset), absent ones purged, not faulted in by a memset. */
static void test_calloc(void)
{
  static const size_t sizes[] = {MiB, 8 * MiB}; /* a Large block and a huge one */
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t size = sizes[i], pages = size / 4096;
    unsigned char *p = A(malloc)(size);
    CHECK(p != NULL);
    memset(p, 0x5a, size);
    A(free)(p);
    long f0 = minor_faults();
    unsigned char *z = A(calloc)(1, size);
    CHECKF(z == p, "calloc(%zu) at %p, not at the freed block's %p", size, (void *)z, (void *)p);
    for (size_t k = 0; k < size; k += 512) CHECKF(z[k] == 0 && z[k + 511] == 0, "calloc(%zu) byte %zu not zero", size, k);
    memset(z, 0x6b, size);
    long faults = minor_faults() - f0;
    CHECKF(faults < (long)pages / 10, "calloc(%zu) on resident pages, written whole: %ld faults", size, faults);
    A(free)(z);
    A(malloc_trim)(0); /* every freed page goes back: the next block starts absent */
    unsigned char *q = A(malloc)(size);
    CHECK(q != NULL);
    q[0] = 1; /* one page of it written */
    A(free)(q);
    unsigned char *y = A(calloc)(1, size);
    CHECKF(y == q, "calloc(%zu) at %p, not at the freed block's %p", size, (void *)y, (void *)q);
    size_t in = resident_pages(y, size);
    CHECKF(in <= 2, "calloc(%zu) on a block written on one page: %zu pages resident after it", size, in);
    for (size_t k = 0; k < size; k += 4096) CHECKF(y[k] == 0 && y[k + 4095] == 0, "calloc(%zu) page %zu not zero", size, k / 4096);
    A(free)(y);
    printf("test_memory calloc: %zu KiB on resident pages zeroed in place (%ld faults written whole), on absent "
           "ones left absent (%zu pages resident): OK\n", size >> 10, faults, in);
  }
}

/* A freed huge block is held by the thread that freed it: its next huge
 * malloc of about the size takes it back, pages and all; one of another
 * size takes it cut or grown in place, else frees it first; it goes back
 * with the purge delay and the cache's age while the program allocates,
 * and at once on malloc_trim. */
static void test_huge_held(void)
{
  const size_t size = 8 * MiB, big = 24 * MiB;
  size_t base = tu_rss();
  unsigned char *p = A(malloc)(size);
  CHECK(p != NULL);
  memset(p, 1, size);
  A(free)(p);
  unsigned char *q = A(malloc)(size - 100 * 1024);
  CHECKF(q == p, "malloc(8 MiB - 100 KiB) after free(8 MiB) came at %p, not as the freed block %p", (void *)q, (void *)p);
  CHECKF(A(malloc_usable_size)(q) >= size - 100 * 1024, "%zu B usable", A(malloc_usable_size)(q));
  CHECK(q[4096] == 1 && q[size - 200 * 1024] == 1); /* its pages kept */
  A(free)(q);
  unsigned char *r = A(malloc)(big); /* another size: the held block grown, or freed for it */
  CHECK(r != NULL);
  memset(r, 2, big);
  A(free)(r);
  size_t before = tu_rss();
  CHECK(A(malloc_trim)(0) == 1);
  size_t after = tu_rss();
  CHECKF(after + big - 4 * MiB <= before, "malloc_trim(0) took %zu MiB back, not the held %zu MiB block",
         mib(before - after), mib(big));
  unsigned char *s = A(malloc)(big);
  CHECK(s != NULL);
  memset(s, 3, big);
  A(free)(s);
  double t0 = tu_now();
  size_t rss = wait_rss_below(base + 4 * MiB, 2000);
  CHECKF(rss <= base + 4 * MiB, "%zu MiB still resident 2 s after freeing a held %zu MiB block", mib(rss - base), mib(big));
  printf("test_memory huge_held: a freed 8 MiB block taken back at once, trimmed; a held %zu MiB block back in %.2f s: OK\n",
         mib(big), tu_now() - t0);
}

/* A block of size bytes written whole (a byte a page, and its last) with v. */
static unsigned char *written(size_t size, unsigned char v)
{
  unsigned char *p = A(malloc)(size);
  CHECK(p != NULL);
  if (p == NULL) return NULL;
  for (size_t o = 0; o < size; o += 4096) p[o] = v;
  p[size - 1] = v;
  return p;
}

/* Huge blocks written whole: after a churn of them, a freed block of 48
 * MiB, held, is not cut for a malloc of 3 MiB, which a freed run of its
 * size fits: that one takes the run, and the next 48 MiB block writes over
 * the held one's resident pages (under a tenth fault). The purge delay and
 * the cache's age are pinned long by CTest. */
static void test_huge_fit(void)
{
  enum { SLOTS = 4 };
  unsigned char *p[SLOTS] = {0};
  uint64_t rng = 42;
  for (int i = 0; i < 300; i++) {
    size_t v = tu_xorshift(&rng) % SLOTS, k = 21 + tu_xorshift(&rng) % 4;
    A(free)(p[v]);
    p[v] = written(((size_t)1 << k) + (tu_xorshift(&rng) % ((size_t)1 << k) & ~(size_t)4095) + 4096, 1);
  }
  for (int v = 0; v < SLOTS; v++) A(free)(p[v]);
  unsigned char *big = written(48 * MiB, 2), *small = written(3 * MiB, 3), *guard = written(3 * MiB, 4);
  A(free)(big); /* held */
  A(free)(small);
  unsigned char *s2 = written(3 * MiB, 5);
  CHECKF(s2 != big, "malloc(3 MiB) cut the held 48 MiB block at %p", (void *)big);
  long f0 = minor_faults();
  unsigned char *b2 = written(48 * MiB, 6);
  long faults = minor_faults() - f0;
  CHECKF(faults < (long)(48 * MiB / 4096 / 10), "%ld of %zu pages faulted writing 48 MiB again", faults, 48 * MiB / 4096);
  A(free)(b2);
  A(free)(s2);
  A(free)(guard);
  printf("test_memory huge_fit: a held 48 MiB block kept whole for the next one (%ld faults), not cut for 3 MiB: OK\n",
         faults);
}

/* Locked pages cannot be purged: what hakmem takes for purged must read
 * zero all the same, or calloc hands out old data. MCL_ONFAULT: the
 * reservations stay absent until touched. */
static void test_locked(void)
{
  if (mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) != 0) {
    printf("test_memory locked: mlockall refused (%s), skipped\n", strerror(errno));
    return;
  }
  static const size_t sizes[] = {64, 3000, 20 * KiB, 100 * KiB, 300 * KiB, MiB, 3 * MiB, 8 * MiB};
  enum { N = 8 };
  size_t checked = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t size = sizes[i];
    for (int round = 0; round < 3; round++) {
      unsigned char *p[N];
      for (int k = 0; k < N; k++) {
        p[k] = A(malloc)(size);
        CHECK(p[k] != NULL);
        memset(p[k], 0xab, size);
      }
      for (int k = 0; k < N; k++) A(free)(p[k]);
      if (round == 1) A(malloc_trim)(0);
      for (int k = 0; k < N; k++) {
        p[k] = A(calloc)(1, size);
        CHECK(p[k] != NULL);
        for (size_t b = 0; b < size; b++)
          CHECKF(p[k][b] == 0, "calloc(%zu) round %d: byte %zu reads 0x%02x", size, round, b, p[k][b]);
        checked += size;
        memset(p[k], 0xcd, size);
      }
      for (int k = 0; k < N; k++) A(free)(p[k]);
    }
  }
  munlockall();
  printf("test_memory locked: %zu MiB calloc'd over freed, purged locked pages, all zero: OK\n", checked >> 20);
}

/* Whether the mapping that holds p carries VmFlags "nh" (MADV_NOHUGEPAGE). */
static bool no_huge_pages_at(const void *p)
{
  FILE *f = fopen("/proc/self/smaps", "r");
  CHECK(f != NULL);
  char line[512];
  bool in = false, nh = false, found = false;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      found = true;
      nh = strstr(line, " nh") != NULL;
      break;
    }
  }
  fclose(f);
  CHECKF(found, "no mapping holds %p", p);
  return nh;
}

static void *no_thp_thread(void *arg)
{
  void *p = A(malloc)(100);
  CHECK(p != NULL);
  *(bool *)arg = no_huge_pages_at(p);
  A(free)(p);
  return NULL;
}

static void test_no_thp(void)
{
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0) {
    printf("test_memory no_thp: no transparent huge pages here, skipped\n");
    return;
  }
  static const size_t sizes[] = {64, 20 * KiB, 200 * KiB};
  enum { N = 64 };
  void *p[N];
  /* round 1 on new regions; round 2 on the same regions, emptied by the
   * trim and taken back from the pool (advised once, when first mapped) */
  for (int round = 1; round <= 2; round++) {
    for (int k = 0; k < N; k++) { /* 4.5 MiB in all: past the first region's first 256 KiB */
      p[k] = A(malloc)(sizes[k % 3]);
      CHECK(p[k] != NULL);
      memset(p[k], 1, sizes[k % 3]);
    }
    for (int k = 0; k < N; k++)
      CHECKF(no_huge_pages_at(p[k]), "round %d, block %d (%zu B) at %p: huge pages allowed", round, k, sizes[k % 3],
             p[k]);
    for (int k = 0; k < N; k++) A(free)(p[k]);
    A(malloc_trim)(0);
  }
  bool nh = false;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, no_thp_thread, &nh) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECKF(nh, "a thread's first block: huge pages allowed");
  printf("test_memory no_thp: small and Large blocks, the main thread's and another's, on regions kept off THP, "
         "new and taken back from the pool: OK\n");
}

/* n threads on 64 KiB stacks (a server's many small ones) running fn, their
 * arguments 0, 1, ...; join_threads waits for them. */
static void start_small_threads(pthread_t *th, int n, void *(*fn)(void *))
{
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * KiB);
  for (uintptr_t i = 0; i < (uintptr_t)n; i++) CHECK(pthread_create(&th[i], &attr, fn, (void *)i) == 0);
  pthread_attr_destroy(&attr);
}

static void join_threads(pthread_t *th, int n)
{
  for (int i = 0; i < n; i++) CHECK(pthread_join(th[i], NULL) == 0);
}

static pthread_barrier_t exit_trim_all; /* every thread holds its heap at once */

static void *exit_trim_thread(void *arg)
{
  void *p[4];
  for (int i = 0; i < 4; i++) {
    size_t size = 16 + (size_t)(uintptr_t)arg * 29 + (size_t)i * 500;
    CHECK((p[i] = A(malloc)(size)) != NULL);
    memset(p[i], 1, size);
  }
  pthread_barrier_wait(&exit_trim_all);
  for (int i = 0; i < 4; i++) A(free)(p[i]);
  return NULL;
}

static void test_exit_trim(void)
{
  enum { N = 64 };
  size_t vm0 = tu_statm(0), rss0 = tu_rss();
  pthread_t th[N];
  pthread_barrier_init(&exit_trim_all, NULL, N);
  start_small_threads(th, N, exit_trim_thread);
  join_threads(th, N);
  pthread_barrier_destroy(&exit_trim_all);
  size_t vm1 = tu_statm(0), rss1 = tu_rss();
  A(malloc_trim)(0);
  size_t vm2 = tu_statm(0), rss2 = tu_rss();
  /* the pool keeps a few empty regions mapped (purged): 64 MiB by default */
  CHECKF(vm2 - vm0 < (vm1 - vm0) / 2, "after trim %zu MiB more address space than before %d threads (%zu MiB before the trim)",
         mib(vm2 - vm0), N, mib(vm1 - vm0));
  /* left: the stacks the C library caches, with their TLS, and each heap's
   * own structure, kept for the next thread */
  CHECKF(rss2 < rss0 + N * 48 * KiB, "after trim %zu KiB more resident than before %d threads (%zu KiB before it)",
         (rss2 - rss0) / KiB, N, (rss1 - rss0) / KiB);
  printf("test_memory exit_trim: %d exited threads' regions back on trim: +%zu MiB address space, +%zu KiB resident "
         "(before the trim +%zu MiB, +%zu KiB): OK\n", N, mib(vm2 - vm0), (rss2 - rss0) / KiB, mib(vm1 - vm0),
         (rss1 - rss0) / KiB);
}

/* Held at once: N threads that never allocate, then N that each hold one
 * small block; the main thread reads the resident memory each group added. */
static pthread_barrier_t thread_cost_idle, thread_cost_held, thread_cost_done;

static void *thread_cost_idle_thread(void *arg)
{
  (void)arg;
  pthread_barrier_wait(&thread_cost_idle);
  pthread_barrier_wait(&thread_cost_done);
  return NULL;
}

static void *thread_cost_thread(void *arg)
{
  (void)arg;
  void *p = A(malloc)(64);
  CHECK(p != NULL);
  memset(p, 1, 64);
  pthread_barrier_wait(&thread_cost_held);
  pthread_barrier_wait(&thread_cost_done);
  A(free)(p);
  return NULL;
}

static void test_big_batch(void)
{
  enum { N = 200, ROUNDS = 40, SZ = 1 << 20 };
  char *p[N];
  size_t vm0 = tu_statm(0);
  long maps = 0, looks = 0;
  for (int r = 0; r < ROUNDS; r++) {
    if (r == 1) maps = tu_stat("mmap"), looks = tu_stat("mincore");
    for (int i = 0; i < N; i++) {
      p[i] = A(malloc)(SZ);
      CHECK(p[i] != NULL);
      p[i][0] = p[i][SZ - 1] = (char)r;
    }
    for (int i = 0; i < N; i++) A(free)(p[i]);
  }
  maps = tu_stat("mmap") - maps;
  CHECKF(maps == 0, "%d batches of %d x 1 MiB after the first: %ld mmap calls", ROUNDS - 1, N, maps);
  /* the placements' look at how the blocks were written backs off while the answer holds */
  looks = tu_stat("mincore") - looks;
  CHECKF(looks <= 32, "%d batches of %d x 1 MiB after the first: %ld mincore calls", ROUNDS - 1, N, looks);
  size_t vm1 = tu_statm(0);
  CHECKF(vm1 >= vm0 + N * MiB, "%d x 1 MiB took %zu MiB of address space", N, mib(vm1 - vm0));
  size_t vm = wait_until(address_space, vm0 + 72 * MiB, 2000, 1);
  CHECKF(vm <= vm0 + 72 * MiB, "address space %zu MiB above the start 2 s after the last batch (%zu MiB then)",
         mib(vm - vm0), mib(vm1 - vm0));
  printf("test_memory big_batch: %d batches of %d x 1 MiB, no mmap and %ld mincore after the first; address space "
         "+%zu MiB after them, +%zu MiB once the pool let them go: OK\n", ROUNDS, N, looks, mib(vm1 - vm0),
         mib(vm - vm0));
}

static void test_mid_batch(void)
{
  enum { N = 200, SZ = 32 * 1024, ROUNDS = 10 };
  char *p[N] = {0}, *q[N];
  int kept = 0;
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < N; i++) {
      q[i] = A(malloc)(SZ);
      CHECK(q[i] != NULL);
      q[i][0] = q[i][SZ - 1] = (char)r;
    }
    for (int i = 0; r == ROUNDS - 1 && i < N; i++) kept += q[i] == p[N - 1 - i];
    for (int i = 0; i < N; i++) A(free)(p[i] = q[i]);
  }
  CHECKF(kept == N, "%d of %d blocks of 32 KiB came back from the tcache in reverse order of their frees", kept, N);
  printf("test_memory mid_batch: %d blocks of 32 KiB (6.25 MiB) freed and taken back from the tcache: OK\n", N);
}

/* One phase of mid_pages: n blocks of sz written whole or at both ends;
 * returns the resident growth and sets *calls to the madvise calls made. */
static size_t mid_pages_phase(char **p, int n, size_t sz, bool whole, long *calls)
{
  size_t rss0 = tu_rss();
  long m0 = tu_stat("madvise");
  for (int i = 0; i < n; i++) {
    p[i] = A(malloc)(sz);
    CHECK(p[i] != NULL);
    if (whole) memset(p[i], 1, sz);
    else p[i][0] = p[i][sz - 1] = 1;
  }
  *calls = tu_stat("madvise") - m0;
  size_t rss1 = tu_rss();
  return rss1 > rss0 ? rss1 - rss0 : 0;
}

static void test_mid_pages(void)
{
  enum { N = 1600, SZ = 20000 };
  static char *sparse[N], *dense[N], *small[N];
  long sparse_calls, dense_calls;
  for (int i = 0; i < N; i++) CHECK((small[i] = A(malloc)(300)) != NULL); /* a hot class populating ahead first */
  size_t bytes = (size_t)N * SZ, sparse_rss = mid_pages_phase(sparse, N, SZ, false, &sparse_calls);
  size_t dense_rss = mid_pages_phase(dense, N, SZ, true, &dense_calls);
  CHECKF(sparse_rss <= bytes / 100 * 65, "%d x %d B written at both ends: resident +%zu KiB for %zu KiB of blocks", N,
         SZ, sparse_rss / KiB, bytes / KiB);
  CHECKF(dense_rss <= bytes / 10 * 11, "%d x %d B written whole: resident +%zu KiB for %zu KiB of blocks", N, SZ,
         dense_rss / KiB, bytes / KiB);
  CHECKF(sparse_calls <= (long)(bytes / MiB) && dense_calls >= (long)(bytes / (64 * KiB)) / 2,
         "madvise calls: %ld for the blocks written at both ends, %ld for those written whole", sparse_calls,
         dense_calls);
  for (int i = 0; i < N; i++) {
    CHECK(sparse[i][0] == 1 && sparse[i][SZ - 1] == 1 && dense[i][SZ / 2] == 1);
    A(free)(sparse[i]);
    A(free)(dense[i]);
    A(free)(small[i]);
  }
  printf("test_memory mid_pages: %d x %d B at both ends +%zu KiB resident, %ld madvise; written whole +%zu KiB, "
         "%ld madvise: OK\n", N, SZ, sparse_rss / KiB, sparse_calls, dense_rss / KiB, dense_calls);
}

static void test_teardown(void)
{
  enum { N = 200000, SIZE = 48 };
  char **p = mmap(NULL, N * sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  if (p == MAP_FAILED) return;
  for (size_t i = 0; i < N; i++) CHECK((p[i] = tu_launder(A(malloc)(SIZE))) != NULL);
  uint64_t rng = 1;
  for (size_t i = N - 1; i > 0; i--) {
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    size_t j = (size_t)(rng >> 33) % (i + 1);
    char *t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  for (size_t i = 0; i < N; i++) A(free)(p[i]);
  size_t next = 0;
  for (size_t i = 0; i < N; i++) {
    CHECK((p[i] = tu_launder(A(malloc)(SIZE))) != NULL);
    next += i > 0 && p[i] > p[i - 1] && p[i] - p[i - 1] <= 64;
  }
  CHECKF(next * 4 >= N * 3, "after a teardown in random order, %zu of %d blocks came right after the one before",
         next, N);
  for (size_t i = 0; i < N; i++) A(free)(p[i]);
  munmap(p, N * sizeof *p);
  printf("test_memory teardown: %zu of %d blocks allocated after a random-order teardown came in address order: OK\n",
         next, N);
}

/* cold_mid: rounds of COLD_MID_THREADS threads; each frees the block a
 * thread of the last round left, allocates COLD_MID_BLOCKS blocks of 8-512
 * KiB (one in twenty in a Mid class), writes them whole, frees them but
 * one and leaves that one. */
enum { COLD_MID_THREADS = 4, COLD_MID_BLOCKS = 16 };
static char *cold_mid_left[COLD_MID_THREADS];
static pthread_mutex_t cold_mid_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cold_mid_cond = PTHREAD_COND_INITIALIZER;
static uintptr_t cold_mid_turn;
static pthread_barrier_t cold_mid_done;
static long cold_mid_blocks, cold_mid_runs;
/* The threads of a round live together and take turns, so that the run
 * does not depend on how the scheduler interleaves them. */
static void *cold_mid_thread(void *arg)
{
  uintptr_t id = (uintptr_t)arg;
  uint64_t rng = id * 0x9E3779B97F4A7C15ull + 1;
  pthread_mutex_lock(&cold_mid_lock);
  while (cold_mid_turn != id) pthread_cond_wait(&cold_mid_cond, &cold_mid_lock);
  pthread_mutex_unlock(&cold_mid_lock);
  A(free)(cold_mid_left[id % COLD_MID_THREADS]);
  char *p[COLD_MID_BLOCKS];
  for (int i = 0; i < COLD_MID_BLOCKS; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    size_t n = 8 * KiB + rng % (504 * KiB);
    CHECK((p[i] = A(malloc)(n)) != NULL);
    memset(p[i], 1, n);
    if (n <= 32 * KiB) { /* a page run's usable size is a multiple of a page; a Mid slab block's, its class's */
      __atomic_fetch_add(&cold_mid_blocks, 1, __ATOMIC_RELAXED);
      if (A(malloc_usable_size)(p[i]) % 4096 == 0) __atomic_fetch_add(&cold_mid_runs, 1, __ATOMIC_RELAXED);
    }
  }
  for (int i = 1; i < COLD_MID_BLOCKS; i++) A(free)(p[i]);
  cold_mid_left[id % COLD_MID_THREADS] = p[0];
  pthread_mutex_lock(&cold_mid_lock);
  cold_mid_turn++;
  pthread_cond_broadcast(&cold_mid_cond);
  pthread_mutex_unlock(&cold_mid_lock);
  pthread_barrier_wait(&cold_mid_done); /* no heap is given up while the others of its round run */
  return NULL;
}

static void test_cold_mid(void)
{
  enum { WARM = 20, ROUNDS = 200 };
  long faults = 0;
  pthread_barrier_init(&cold_mid_done, NULL, COLD_MID_THREADS);
  for (unsigned r = 0; r < WARM + ROUNDS; r++) {
    if (r == WARM) faults = minor_faults(), cold_mid_blocks = cold_mid_runs = 0;
    pthread_t t[COLD_MID_THREADS];
    cold_mid_turn = r * COLD_MID_THREADS + 1;
    for (uintptr_t i = 0; i < COLD_MID_THREADS; i++)
      CHECK(pthread_create(&t[i], NULL, cold_mid_thread, (void *)(r * COLD_MID_THREADS + i + 1)) == 0);
    for (int i = 0; i < COLD_MID_THREADS; i++) pthread_join(t[i], NULL);
  }
  faults = minor_faults() - faults;
  for (int i = 0; i < COLD_MID_THREADS; i++) A(free)(cold_mid_left[i]);
  pthread_barrier_destroy(&cold_mid_done);
  /* each thread's few Mid blocks take the pages that its heap's last
   * thread freed, not a slab per class that each thread starts afresh */
  CHECKF(cold_mid_blocks > 0 && cold_mid_runs * 4 >= cold_mid_blocks * 3,
         "%ld of %ld Mid blocks of the threads' heaps were page runs", cold_mid_runs, cold_mid_blocks);
  printf("test_memory cold_mid: %d rounds of %d threads, %d blocks of 8-512 KiB each: %ld of %ld Mid blocks page "
         "runs, %ld page faults: OK\n", ROUNDS, COLD_MID_THREADS, COLD_MID_BLOCKS, cold_mid_runs, cold_mid_blocks,
         faults);
}

static void test_thread_cost(void)
{
  enum { N = 64 };
  pthread_t idle[N], held[N];
  pthread_barrier_init(&thread_cost_idle, NULL, N + 1);
  pthread_barrier_init(&thread_cost_held, NULL, N + 1);
  pthread_barrier_init(&thread_cost_done, NULL, 2 * N + 1);
  size_t rss0 = tu_rss();
  start_small_threads(idle, N, thread_cost_idle_thread);
  pthread_barrier_wait(&thread_cost_idle);
  size_t rss1 = tu_rss();
  start_small_threads(held, N, thread_cost_thread);
  pthread_barrier_wait(&thread_cost_held);
  size_t rss2 = tu_rss(), base = (rss1 - rss0) / N, per = (rss2 - rss1) / N;
  pthread_barrier_wait(&thread_cost_done);
  join_threads(idle, N);
  join_threads(held, N);
  pthread_barrier_destroy(&thread_cost_idle);
  pthread_barrier_destroy(&thread_cost_held);
  pthread_barrier_destroy(&thread_cost_done);
  /* over a thread that never allocates (the C library's stack pages and
   * TLS, hakmem's TLS view): its heap's first pages (the tcaches right
   * after the fields a new heap copies), its region's header pages and the
   * block's page */
  CHECKF(per <= base + 32 * KiB, "a thread holding one 64-byte block costs %zu KiB resident, %zu KiB more than one "
         "that never allocates", per / KiB, (per > base ? per - base : 0) / KiB);
  printf("test_memory thread_cost: %d threads holding one small block each, %zu KiB resident a thread (%zu KiB for "
         "one that never allocates): OK\n", N, per / KiB, base / KiB);
}

/* Those marked TU_BY_NAME need the environment CTest gives them. */
static const tu_case_t cases[] = {
  {"purge", test_purge, 0},
  {"background", test_background, TU_BY_NAME},
  {"idle_owner", test_idle_owner, 0},
  {"trim", test_trim, TU_BY_NAME},
  {"threads", test_threads, 0},
  {"exit_reuse", test_exit_reuse, TU_BY_NAME},
  {"churn", test_churn, 0},
  {"bigcache", test_bigcache, TU_BY_NAME},
  {"cache_yield", test_cache_yield, TU_BY_NAME},
  {"doubling", test_doubling, TU_BY_NAME},
  {"xthread", test_xthread, 0},
  {"reuse", test_reuse, TU_BY_NAME},
  {"grow", test_grow, 0},
  {"regrow", test_regrow, 0},
  {"sparse", test_sparse, TU_BY_NAME},
  {"arena", test_arena, TU_BY_NAME},
  {"arena_grow", test_arena_grow, TU_BY_NAME},
  {"lend", test_lend, TU_BY_NAME},
  {"lend_clean", test_lend_clean, TU_BY_NAME},
  {"lend_running", test_lend_running, TU_BY_NAME},
  {"huge_grid", test_huge_grid, TU_BY_NAME},
  {"large_classes", test_large_classes, TU_BY_NAME},
  {"held_reshape", test_held_reshape, TU_BY_NAME},
  {"huge_held", test_huge_held, TU_BY_NAME},
  {"huge_fit", test_huge_fit, TU_BY_NAME},
  {"grow_huge", test_grow_huge, 0},
  {"regrow_huge", test_regrow_huge, TU_BY_NAME},
  {"calloc", test_calloc, TU_BY_NAME},
  {"locked", test_locked, TU_BY_NAME},
  {"no_thp", test_no_thp, 0},
  {"exit_trim", test_exit_trim, 0},
  {"thread_cost", test_thread_cost, 0},
  {"cold_mid", test_cold_mid, 0},
  {"teardown", test_teardown, 0},
  {"big_batch", test_big_batch, TU_BY_NAME},
  {"mid_batch", test_mid_batch, TU_BY_NAME},
  {"mid_pages", test_mid_pages, TU_BY_NAME},
};

int main(int argc, char **argv) { return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, "[seconds]"); }
