/* The learned Large/Huge strategy (src/learn.c).
 *
 *   rating   synthetic cost signals: the cheapest strategy's rating rises
 *            and it runs most of the time; when another becomes the cheapest
 *            (a new phase) the winner changes; ratings stay in their bounds;
 *            the same seed and costs give the same choices; rivals are
 *            explored only where they could win (cost in the OS: not leaner
 *            ones; cost in memory: not more generous ones; nil: none; not a
 *            leaner one whose floor loses to the best's cost); an exact floor of
 *            the leaner neighbour (nothing reused from the cache) is a game
 *   pinned   (run with HAKMEM_LEARN=0 HAKMEM_LEARN_PIN=k) the strategy never
 *            changes, whatever the costs, and its knobs are k's settings;
 *            under speed, a block larger than the freed one takes its
 *            resident pages (the freed regions and the free ones after them)
 *   speed    (HAKMEM_LEARN_WEIGHT=100) a burst of huge blocks freed and
 *            allocated again: the best rated strategy is one that caches,
 *            and the BigCache stays within the largest strategy's bound
 *   memory   (HAKMEM_LEARN_WEIGHT=0) the same burst: learning settles on a
 *            strategy that keeps nothing cached
 *   idle     (HAKMEM_BIGCACHE_AGE_MS=10000: every strategy would keep the
 *            cache) a burst of huge blocks, then nothing: at weight 50 a
 *            leaner strategy runs within 2 s and the BigCache holds no more
 *            than its bound; freeing a huge block held through the idle
 *            stretch brings back the strategy from before (which caches the
 *            block), and so does the next huge allocation. idle_speed: at
 *            weight 100 (memory costs
 *            nothing) the strategy and the cache stay as they are
 *   carve    the learned refill batch of a thread's size class: a class used
 *            once carves one page's worth (one 32 KiB block), a hot one
 *            doubles up to its bound, one left cold while others carve decays
 *            back, and every carved block holds what was written to it
 *
 * Run together (no case named), rating and carve run; the others need the
 * environment CTest gives them.
 *
 * usage: test_learn [rating|pinned K|speed|memory|idle|idle_speed|carve|all]
 */
#define USE_HAK_API
#include "testutil.h"

#include <pthread.h>

/* ---- hakmem's internals this test drives (retarget here) ----
 * The learner (src/learn.h, src/policy.h), the BigCache (src/huge.h) and a
 * thread heap's carves (src/heap.h): the rest of the file uses only the
 * names below. */
#include "../src/heap.h"
#include "../src/huge.h"
#include "../src/learn.h"
#include "../src/options.h"
#include "../src/policy.h"
#include "../src/size_class.h"

enum { DEFAULT, SPEED, LEAN, MEMORY };   /* the strategies, in hakmem's order */
enum { NSTRAT = STRATEGIES, NKNOBS = KNOB_COUNT };
enum { HOT_BATCH = CARVE_MIN_HOT, HOT_BYTES = CARVE_HOT_BYTES }; /* a hot class's carve: blocks, bytes */
static int strategy_running(void) { return learn_current(); }
static int strategy_after_idle(void) { return learn_resume(); } /* strategy to resume after idle, or -1 */
static double rating(int s) { return learn_rating(s); }
static void rate_epoch(double os_cost, double mem_cost) { learn_rate(os_cost, mem_cost); }
static void reset_learning(void) { learn_reset(); }
static void start_on(int s) { learn_start(s); }
static void set_floor(int s, double floor, bool exact) { learn_set_floor(s, floor, exact); }
static void sample_tick(void) { learn_tick(0, 0); }
static long knob(int k) { return policy_knob((knob_t)k); }
static size_t bigcache_bytes(void) { return huge_cached_bytes(); } /* bytes in the BigCache */
static unsigned class_of(size_t size) { return size_class(size); }
static ptrdiff_t carved_bytes(const void *block) /* bytes carved so far in block's slab */
{
  slab_t *s = slab_of(block);
  return s->bump - slab_first(s);
}
static unsigned carve_batch(unsigned cls) { return heap_get()->carve_n[cls]; } /* this thread's */
static uint32_t carves(void) { return heap_get()->carves; }                   /* this thread's, all classes */
/* ---- */

/* Runs n epochs in which each strategy costs what `cost` says (ms/s, half of
 * it in the OS); returns how many of the last half ran `cheap`. Records the
 * choices. The costs fall, then rise along the order of what the strategies
 * keep (memory, lean, default, speed), as real ones do. */
static int run_epochs(int n, int cheap, const double *cost, int *trace)
{
  int hits = 0;
  for (int i = 0; i < n; i++) {
    int s = strategy_running();
    if (trace) trace[i] = s;
    for (int t = 0; t < NSTRAT; t++) {
      double r = rating(t);
      CHECKF(r >= 1100 && r <= 1900, "rating of %d out of bounds: %f", t, r);
    }
    if (i >= n / 2 && s == cheap) hits++;
    rate_epoch(cost[s] / 2, cost[s] / 2);
  }
  return hits;
}

static int best_rated(void)
{
  int best = 0;
  for (int t = 1; t < NSTRAT; t++)
    if (rating(t) > rating(best)) best = t;
  return best;
}

static void test_rating(void)
{
  static const double lean_best[] = {[DEFAULT] = 100, [SPEED] = 100, [LEAN] = 10, [MEMORY] = 100};
  static const double speed_best[] = {[DEFAULT] = 50, [SPEED] = 10, [LEAN] = 100, [MEMORY] = 100};
  static const double memory_best[] = {[DEFAULT] = 100, [SPEED] = 100, [LEAN] = 50, [MEMORY] = 10};
  reset_learning();
  int hits = run_epochs(400, LEAN, lean_best, NULL);
  CHECKF(best_rated() == LEAN, "cheapest strategy not best rated (best %d)", best_rated());
  CHECKF(rating(LEAN) > 1600, "cheapest strategy's rating only %f", rating(LEAN));
  CHECKF(hits >= 150, "cheapest strategy ran %d of the last 200 epochs", hits);
  printf("test_learn rating: phase 1: lean rated %.0f, ran %d/200 epochs\n", rating(LEAN), hits);

  hits = run_epochs(400, SPEED, speed_best, NULL); /* a new phase */
  CHECKF(best_rated() == SPEED, "winner did not change with the phase (best %d)", best_rated());
  CHECKF(hits >= 150, "new cheapest strategy ran %d of the last 200 epochs", hits);
  printf("test_learn rating: phase 2: speed rated %.0f, ran %d/200 epochs\n", rating(SPEED), hits);

  static int a[300], b[300];
  reset_learning();
  run_epochs(300, MEMORY, memory_best, a);
  reset_learning();
  run_epochs(300, MEMORY, memory_best, b);
  CHECK(memcmp(a, b, sizeof a) == 0);
  int explored = 0;
  for (int i = 0; i < 300; i++) explored += a[i] != MEMORY;
  CHECKF(explored > 0 && explored < 100, "explored %d of 300 epochs", explored);
  printf("test_learn rating: same seed, same choices; explored %d of 300 epochs: OK\n", explored);

  /* Exploration goes where a rival could win: every strategy costs the
   * same, all of it in the OS (then all of it memory), so only strategies
   * keeping more (then less) than the best are worth trying (memory, beyond
   * lean from the default, once lean has drawn); none when the cost is nil.
   * And with lean a clear loser, memory beyond it is not tried. */
  static const struct { double os, mem; int never[2]; const char *what; } split[] = {
    {100, 0, {LEAN, MEMORY}, "all in the OS: leaner"},
    {0, 100, {SPEED, SPEED}, "all memory: more generous"},
    {0, 0, {LEAN, SPEED}, "nil: all other"},
  };
  for (size_t k = 0; k < sizeof split / sizeof *split; k++) {
    reset_learning();
    int ran[NSTRAT] = {0};
    for (int i = 0; i < 300; i++) {
      ran[strategy_running()]++;
      rate_epoch(split[k].os, split[k].mem);
    }
    for (int j = 0; j < 2; j++)
      CHECKF(ran[split[k].never[j]] == 0, "cost %s; strategy %d explored %d times", split[k].what, split[k].never[j],
             ran[split[k].never[j]]);
    CHECKF(k == 2 ? ran[DEFAULT] >= 297 : ran[DEFAULT] < 300, "cost %s: default ran %d of 300 epochs", split[k].what,
           ran[DEFAULT]);
    printf("test_learn rating: cost %s strategies not explored (ran %d %d %d %d): OK\n", split[k].what, ran[DEFAULT],
           ran[SPEED], ran[LEAN], ran[MEMORY]);
  }
  /* A tie keeps the running strategy: learning started on speed (a costly
   * page fault) stays there while no rival could win, not back to the
   * default at the first rating, when every rating is still the same. */
  reset_learning();
  start_on(SPEED);
  for (int i = 0; i < 50; i++) {
    CHECKF(strategy_running() == SPEED, "started on speed, epoch %d runs %d", i, strategy_running());
    rate_epoch(0, 0);
  }
  printf("test_learn rating: a tie keeps the strategy learning started on: OK\n");
  reset_learning();
  static const double lean_loses[] = {[DEFAULT] = 100, [SPEED] = 100, [LEAN] = 300, [MEMORY] = 0};
  int ran[NSTRAT] = {0};
  for (int i = 0; i < 300; i++) {
    int s = strategy_running();
    ran[s]++;
    rate_epoch(0, lean_loses[s]);
  }
  CHECKF(ran[LEAN] > 0 && ran[MEMORY] == 0, "lean a clear loser: lean ran %d, memory %d epochs", ran[LEAN], ran[MEMORY]);
  printf("test_learn rating: lean a clear loser, memory beyond it not explored (lean ran %d epochs): OK\n", ran[LEAN]);
  /* The cost all memory, lean could win; unless its floor (the default's
   * time in the OS and the faults its smaller cache would have taken) loses
   * to the default's cost: then neither it nor memory beyond it is tried. */
  static const double lean_floor[] = {50, 200};
  for (int k = 0; k < 2; k++) {
    reset_learning();
    int ran_f[NSTRAT] = {0};
    for (int i = 0; i < 300; i++) {
      ran_f[strategy_running()]++;
      set_floor(LEAN, lean_floor[k], false);
      rate_epoch(0, 100);
    }
    CHECKF(k == 0 ? ran_f[LEAN] > 0 : ran_f[LEAN] == 0 && ran_f[MEMORY] == 0,
           "lean's floor %.0f against the default's 100: lean ran %d, memory %d epochs", lean_floor[k], ran_f[LEAN],
           ran_f[MEMORY]);
    printf("test_learn rating: lean's floor %.0f against the default's cost 100: lean ran %d epochs: OK\n",
           lean_floor[k], ran_f[LEAN]);
  }
  /* A burst ends and small work follows that reuses nothing of speed's
   * cache: speed's cost is all memory, and the default's floor is exact and
   * nil. Played on that floor, the default is best rated within a few
   * epochs; without it, only after exploring. */
  int took[2] = {0, 0};
  for (int exact = 0; exact < 2; exact++) {
    reset_learning();
    run_epochs(400, SPEED, speed_best, NULL);
    CHECK(best_rated() == SPEED);
    while (took[exact] < 100 && best_rated() == SPEED) {
      set_floor(DEFAULT, 1, exact);
      rate_epoch(0, strategy_running() == SPEED ? 150 : 1);
      took[exact]++;
    }
  }
  CHECKF(took[1] <= 10 && took[1] < took[0], "speed's cache unused: the default best rated after %d epochs (%d without "
         "the exact floor)", took[1], took[0]);
  printf("test_learn rating: speed's cache unused: the default best rated after %d epochs (%d without the exact "
         "floor): OK\n", took[1], took[0]);
}

static void test_pinned(int pin)
{
  static const long knobs[NSTRAT][NKNOBS] = {
    {250, 256, 500}, {10000, 1024, 10000}, {50, 64, 100}, {0, 0, 0}};
  for (int phase = 0; phase < 4; phase++) {
    for (int i = 0; i < 100; i++) {
      CHECKF(strategy_running() == pin, "pinned strategy changed to %d", strategy_running());
      rate_epoch(strategy_running() == phase ? 1.0 : 500.0, 0);
    }
  }
  for (int k = 0; k < NKNOBS; k++)
    CHECKF(knob(k) == knobs[pin][k], "knob %d is %ld, pinned %ld", k, knob(k),
           knobs[pin][k]);
  /* and the pools obey: with nothing cached (memory) a freed huge block is gone */
  void *p = hak_malloc(4 * MiB);
  CHECK(p != NULL);
  memset(p, 1, 4 * MiB);
  hak_free(p);
  size_t cached = bigcache_bytes();
  CHECKF(pin == MEMORY ? cached == 0 : cached >= 4 * MiB, "%zu bytes cached under strategy %d", cached, pin);
  /* a larger block takes the freed block's resident regions and the free
   * ones after them: nothing stays cached, and it starts where p did */
  char *q = hak_malloc(12 * MiB);
  CHECK(q != NULL);
  memset(q, 2, 12 * MiB);
  size_t left = bigcache_bytes();
  CHECKF(pin != SPEED || (left < MiB && q == p), "%zu -> %zu bytes cached, block at %p after %p (speed)", cached, left,
         (void *)q, p);
  CHECK(q[0] == 2 && q[12 * MiB - 1] == 2);
  hak_free(q);
  printf("test_learn pinned %d: strategy and knobs unchanged by 400 rated epochs%s: OK\n", pin,
         pin != SPEED ? "" : "; a larger block took the freed one's pages");
}

/* Bursts of huge blocks, freed and allocated again, for ms milliseconds. */
static void burst(int ms)
{
  uint64_t seed = 7;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    void *b[4];
    for (int i = 0; i < 4; i++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      size_t size = (2 * MiB) << (seed >> 61 & 3);
      b[i] = hak_malloc(size);
      CHECK(b[i] != NULL);
      for (size_t off = 0; off < size; off += 4096) ((char *)b[i])[off] = (char)off;
    }
    for (int i = 0; i < 4; i++) {
      hak_free(b[i]);
      /* the largest strategy's bound (the running one may change meanwhile) */
      CHECKF(bigcache_bytes() <= 1024 * MiB, "BigCache holds %zu MiB", bigcache_bytes() / MiB);
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= ms) break;
  }
}

static void test_live(int want_cache)
{
  burst(5000);
  int s = best_rated(); /* the one running may be an exploration */
  if (want_cache)
    CHECKF(s == SPEED || s == DEFAULT, "weight 100 (speed) settled on strategy %d", s);
  else
    CHECKF(s == MEMORY || s == LEAN, "weight 0 (memory) settled on strategy %d", s);
  printf("test_learn %s: settled on strategy %d (ratings %.0f %.0f %.0f %.0f): OK\n", want_cache ? "speed" : "memory",
         s, rating(0), rating(1), rating(2), rating(3));
}

static void test_idle(int speed)
{
  static const size_t bound[NSTRAT] = {256 * MiB, 1024 * MiB, 64 * MiB, 0};
  enum { HELD = 20 };
  char *held[HELD];
  for (int i = 0; i < HELD; i++) {
    held[i] = hak_malloc(4 * MiB);
    CHECK(held[i] != NULL);
    held[i][0] = (char)i;
  }
  size_t cached = 0;
  int ms = 0;
  /* The burst may end inside an exploring epoch of a strategy that caches
   * nothing (CI saw the memory one there once): learning must go back to one
   * that caches within a few more epochs of the same burst. And the epoch
   * that ends as the program goes quiet may still be rated and start
   * exploring the memory strategy, the leanest: the idle stretch then keeps
   * it, with nothing to switch to; a burst more, and the stretch begins
   * again (CI saw that too). */
  for (int round = 0; round < 5; round++) {
    burst(round ? 300 : 1500);
    for (int more = 0; more < 40 && bigcache_bytes() == 0; more++) burst(100);
    cached = bigcache_bytes();
    CHECKF(cached > 0, "nothing cached after the burst (strategy %d)", strategy_running());
    for (ms = 0; ms < 2000 && strategy_after_idle() < 0; ms += 10) {
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
      sample_tick(); /* as the purger does (it does not run under sanitizers) */
      if (!speed && strategy_after_idle() < 0 && strategy_running() == STRATEGY_MEMORY && ms >= 200) break;
    }
    if (speed || strategy_after_idle() >= 0 || strategy_running() != STRATEGY_MEMORY) break;
  }
  if (speed) {
    CHECKF(strategy_after_idle() < 0, "weight 100: strategy %d ran while idle", strategy_running());
    CHECKF(bigcache_bytes() == cached, "weight 100: cache %zu MiB -> %zu MiB while idle", cached / MiB,
           bigcache_bytes() / MiB);
    printf("test_learn idle_speed: strategy %d and %zu MiB cached kept for %d ms: OK\n", strategy_running(),
           cached / MiB, ms);
    return;
  }
  int idle = strategy_running(), before = strategy_after_idle();
  CHECKF(before >= 0, "still no idle strategy after %d ms (running %d)", ms, idle);
  CHECKF(bound[idle] < bound[before], "idle strategy %d keeps no less than %d", idle, before);
  CHECKF(bigcache_bytes() <= bound[idle], "idle strategy %d, %zu MiB cached", idle, bigcache_bytes() / MiB);
  printf("test_learn idle: after %d ms strategy %d (was %d), cache %zu -> %zu MiB\n", ms, idle, before, cached / MiB,
         bigcache_bytes() / MiB);
  int freed = 0;
  /* The purger may be inside the sample that began the idle stretch (it
   * holds the learner's lock while it evicts): a free then ends the stretch
   * as that sample finishes, or at the next one. */
  for (int tries = 0; freed < HELD - 1 && strategy_after_idle() >= 0 && tries < 100; tries++) {
    if (tries % 10 == 0) {
      CHECKF(held[freed][0] == (char)freed, "block %d lost its contents", freed);
      hak_free(held[freed++]);
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    sample_tick();
  }
  CHECKF(strategy_after_idle() < 0 && strategy_running() == before, "after %d frees: strategy %d, resume %d", freed,
         strategy_running(), strategy_after_idle());
  printf("test_learn idle: freeing a block brought back strategy %d (after %d frees): OK\n", before, freed);
  hak_free(held[freed++]);
  CHECKF(bound[before] < 4 * MiB || bigcache_bytes() >= 4 * MiB, "strategy %d back, but a freed block was not cached",
         before);
  while (freed < HELD) hak_free(held[freed++]);
  for (ms = 0; ms < 2000 && strategy_after_idle() < 0; ms += 10) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
    sample_tick();
  }
  CHECKF(strategy_after_idle() >= 0, "no idle strategy again after %d ms (running %d)", ms, strategy_running());
  for (int i = 0; i < 20 && strategy_after_idle() >= 0; i++) { /* the purger may hold the lock for a moment */
    char *p = hak_malloc(8 * MiB);
    CHECK(p != NULL);
    p[0] = p[8 * MiB - 1] = 1;
    hak_free(p);
  }
  CHECKF(strategy_after_idle() < 0 && strategy_running() == before, "after allocating again: strategy %d, resume %d",
         strategy_running(), strategy_after_idle());
  printf("test_learn idle: allocating again brought back strategy %d: OK\n", before);
}

/* Allocates n blocks of size, each with the pattern of its index; returns
 * them. */
static void **fill(size_t n, size_t size)
{
  void **v = hak_malloc(n * sizeof *v);
  CHECK(v != NULL);
  for (size_t i = 0; i < n; i++) {
    CHECK((v[i] = hak_malloc(size)) != NULL);
    tu_fill(v[i], 0, size, i);
  }
  return v;
}

static void drop(void **v, size_t n, size_t size)
{
  for (size_t i = 0; i < n; i++) {
    CHECK_PAT(v[i], size, i);
    hak_free(v[i]);
  }
  hak_free(v);
}

static void *carve_thread(void *arg)
{
  (void)arg;
  const size_t big = 32768, small = 16;
  unsigned cb = class_of(big), cs = class_of(small);
  void *one = hak_malloc(big);
  CHECK(one != NULL);
  CHECKF(carved_bytes(one) == (ptrdiff_t)big, "first carve of a 32 KiB class took %td bytes", carved_bytes(one));
  CHECKF(carve_batch(cb) == 1, "cold batch %u", carve_batch(cb));
  hak_free(one);

  size_t n = 2000; /* many slabs' worth: every carve after the first is hot */
  void **v = fill(n, big);
  unsigned hot = carve_batch(cb);
  CHECKF(hot == HOT_BATCH, "hot batch of the 32 KiB class %u, bound %d", hot, HOT_BATCH);
  printf("test_learn carve: 32 KiB class: first carve 1 block, hot %u\n", hot);

  /* 16-byte blocks carve 256 to 1024 at a time: 200,000 of them make at
   * least 195 carves, three cold gaps for the 32 KiB class. */
  size_t m = 200000;
  void **w = fill(m, small);
  CHECKF(carve_batch(cs) == HOT_BYTES / small, "hot batch of 16 B %u", carve_batch(cs));
  CHECKF(carve_batch(cb) == hot, "the 32 KiB class's batch changed without a carve");
  void *x[64];
  unsigned cold = 0, k = 0;
  for (uint32_t c0 = carves(); k < 64 && carves() == c0; k++)
    CHECK((x[k] = hak_malloc(big)) != NULL); /* up to the first carve */
  cold = carve_batch(cb);
  for (; k < 64; k++) CHECK((x[k] = hak_malloc(big)) != NULL);
  unsigned again = carve_batch(cb);
  for (unsigned i = 0; i < 64; i++) hak_free(x[i]);
  printf("test_learn carve: after a cold stretch the 32 KiB class carved %u, then %u\n", cold, again);
  CHECKF(cold <= hot / 4, "cold batch %u, hot %u", cold, hot);
  CHECKF(again == hot, "batch %u after regrowth, hot %u", again, hot);
  drop(v, n, big);
  drop(w, m, small);
  return NULL;
}

static void test_pinned_case(void) { test_pinned((int)tu_param(0, 0)); }
static void test_speed(void) { test_live(1); }
static void test_memory(void) { test_live(0); }
static void test_idle_memory(void) { test_idle(0); }
static void test_idle_speed(void) { test_idle(1); }

static void test_carve(void)
{
  pthread_t t;
  CHECK(pthread_create(&t, NULL, carve_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

/* Those marked TU_BY_NAME need the environment CTest gives them. */
static const tu_case_t cases[] = {
  {"rating", test_rating, 0},
  {"pinned", test_pinned_case, TU_BY_NAME},
  {"speed", test_speed, TU_BY_NAME},
  {"memory", test_memory, TU_BY_NAME},
  {"idle", test_idle_memory, TU_BY_NAME},
  {"idle_speed", test_idle_speed, TU_BY_NAME},
  {"carve", test_carve, 0},
};

int main(int argc, char **argv)
{
  hak_free(hak_malloc(1)); /* initialise: options read */
  return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, "[K: the pinned strategy]");
}
