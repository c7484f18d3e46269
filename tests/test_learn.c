/* The learned Large/Huge strategy (src/learn.c).
 *
 *   rating   synthetic cost signals: the cheapest strategy's rating rises
 *            and it runs most of the time; when another becomes the cheapest
 *            (a new phase) the winner changes; ratings stay in their bounds;
 *            the same seed and costs give the same choices; rivals are
 *            explored only where they could win (cost in the OS: not leaner
 *            ones; cost in memory: not more generous ones; nil: none; not a
 *            leaner one whose floor loses to the best's cost)
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
 * usage: test_learn rating|pinned K|speed|memory|idle|idle_speed|carve
 */
#define USE_HAK_API
#include "testutil.h"

#include <pthread.h>

#include "../src/internal.h"
#include "../src/learn.h"
#include "../src/options.h"

#define MiB ((size_t)1 << 20)

enum { DEFAULT, SPEED, LEAN, MEMORY };

/* Runs n epochs in which each strategy costs what `cost` says (ms/s, half of
 * it in the OS); returns how many of the last half ran `cheap`. Records the
 * choices. The costs fall, then rise along the order of what the strategies
 * keep (memory, lean, default, speed), as real ones do. */
static int run_epochs(int n, int cheap, const double *cost, int *trace)
{
  int hits = 0;
  for (int i = 0; i < n; i++) {
    int s = learn_current();
    if (trace) trace[i] = s;
    for (int t = 0; t < LEARN_STRATEGIES; t++) {
      double r = learn_rating(t);
      CHECKF(r >= 1100 && r <= 1900, "rating of %d out of bounds: %f", t, r);
    }
    if (i >= n / 2 && s == cheap) hits++;
    learn_rate(cost[s] / 2, cost[s] / 2);
  }
  return hits;
}

static int best_rated(void)
{
  int best = 0;
  for (int t = 1; t < LEARN_STRATEGIES; t++)
    if (learn_rating(t) > learn_rating(best)) best = t;
  return best;
}

static void test_rating(void)
{
  static const double lean_best[] = {[DEFAULT] = 100, [SPEED] = 100, [LEAN] = 10, [MEMORY] = 100};
  static const double speed_best[] = {[DEFAULT] = 50, [SPEED] = 10, [LEAN] = 100, [MEMORY] = 100};
  static const double memory_best[] = {[DEFAULT] = 100, [SPEED] = 100, [LEAN] = 50, [MEMORY] = 10};
  learn_reset();
  int hits = run_epochs(400, LEAN, lean_best, NULL);
  CHECKF(best_rated() == LEAN, "cheapest strategy not best rated (best %d)", best_rated());
  CHECKF(learn_rating(LEAN) > 1600, "cheapest strategy's rating only %f", learn_rating(LEAN));
  CHECKF(hits >= 150, "cheapest strategy ran %d of the last 200 epochs", hits);
  printf("test_learn rating: phase 1: lean rated %.0f, ran %d/200 epochs\n", learn_rating(LEAN), hits);

  hits = run_epochs(400, SPEED, speed_best, NULL); /* a new phase */
  CHECKF(best_rated() == SPEED, "winner did not change with the phase (best %d)", best_rated());
  CHECKF(hits >= 150, "new cheapest strategy ran %d of the last 200 epochs", hits);
  printf("test_learn rating: phase 2: speed rated %.0f, ran %d/200 epochs\n", learn_rating(SPEED), hits);

  static int a[300], b[300];
  learn_reset();
  run_epochs(300, MEMORY, memory_best, a);
  learn_reset();
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
    learn_reset();
    int ran[LEARN_STRATEGIES] = {0};
    for (int i = 0; i < 300; i++) {
      ran[learn_current()]++;
      learn_rate(split[k].os, split[k].mem);
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
  learn_reset();
  learn_start(SPEED);
  for (int i = 0; i < 50; i++) {
    CHECKF(learn_current() == SPEED, "started on speed, epoch %d runs %d", i, learn_current());
    learn_rate(0, 0);
  }
  printf("test_learn rating: a tie keeps the strategy learning started on: OK\n");
  learn_reset();
  static const double lean_loses[] = {[DEFAULT] = 100, [SPEED] = 100, [LEAN] = 300, [MEMORY] = 0};
  int ran[LEARN_STRATEGIES] = {0};
  for (int i = 0; i < 300; i++) {
    int s = learn_current();
    ran[s]++;
    learn_rate(0, lean_loses[s]);
  }
  CHECKF(ran[LEAN] > 0 && ran[MEMORY] == 0, "lean a clear loser: lean ran %d, memory %d epochs", ran[LEAN], ran[MEMORY]);
  printf("test_learn rating: lean a clear loser, memory beyond it not explored (lean ran %d epochs): OK\n", ran[LEAN]);
  /* The cost all memory, lean could win; unless its floor (the default's
   * time in the OS and the faults its smaller cache would have taken) loses
   * to the default's cost: then neither it nor memory beyond it is tried. */
  static const double lean_floor[] = {50, 200};
  for (int k = 0; k < 2; k++) {
    learn_reset();
    int ran_f[LEARN_STRATEGIES] = {0};
    for (int i = 0; i < 300; i++) {
      ran_f[learn_current()]++;
      learn_set_floor(LEAN, lean_floor[k]);
      learn_rate(0, 100);
    }
    CHECKF(k == 0 ? ran_f[LEAN] > 0 : ran_f[LEAN] == 0 && ran_f[MEMORY] == 0,
           "lean's floor %.0f against the default's 100: lean ran %d, memory %d epochs", lean_floor[k], ran_f[LEAN],
           ran_f[MEMORY]);
    printf("test_learn rating: lean's floor %.0f against the default's cost 100: lean ran %d epochs: OK\n",
           lean_floor[k], ran_f[LEAN]);
  }
}

static void test_pinned(int pin)
{
  static const long knobs[LEARN_STRATEGIES][KNOB_COUNT] = {
    {250, 256, 500, 25}, {10000, 1024, 10000, 100}, {50, 64, 100, 25}, {0, 0, 0, 0}};
  for (int phase = 0; phase < 4; phase++) {
    for (int i = 0; i < 100; i++) {
      CHECKF(learn_current() == pin, "pinned strategy changed to %d", learn_current());
      learn_rate(learn_current() == phase ? 1.0 : 500.0, 0);
    }
  }
  for (int k = 0; k < KNOB_COUNT; k++)
    CHECKF(learn_knob((learn_knob_t)k) == knobs[pin][k], "knob %d is %ld, pinned %ld", k, learn_knob((learn_knob_t)k),
           knobs[pin][k]);
  /* and the pools obey: with nothing cached (memory) a freed huge block is gone */
  void *p = hak_malloc(8 * MiB);
  CHECK(p != NULL);
  memset(p, 1, 8 * MiB);
  hak_free(p);
  size_t cached = huge_cached_bytes();
  CHECKF(pin == MEMORY ? cached == 0 : cached >= 8 * MiB, "%zu bytes cached under strategy %d", cached, pin);
  /* a larger block takes the freed block's resident regions and the free
   * ones after them: nothing stays cached, and it starts where p did */
  char *q = hak_malloc(24 * MiB);
  CHECK(q != NULL);
  memset(q, 2, 24 * MiB);
  size_t left = huge_cached_bytes();
  CHECKF(pin != SPEED || (left < MiB && q == p), "%zu -> %zu bytes cached, block at %p after %p (speed)", cached, left,
         (void *)q, p);
  CHECK(q[0] == 2 && q[24 * MiB - 1] == 2);
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
      CHECKF(huge_cached_bytes() <= 1024 * MiB, "BigCache holds %zu MiB", huge_cached_bytes() / MiB);
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
         s, learn_rating(0), learn_rating(1), learn_rating(2), learn_rating(3));
}

static void test_idle(int speed)
{
  static const size_t bound[LEARN_STRATEGIES] = {256 * MiB, 1024 * MiB, 64 * MiB, 0};
  enum { HELD = 20 };
  char *held[HELD];
  for (int i = 0; i < HELD; i++) {
    held[i] = hak_malloc(4 * MiB);
    CHECK(held[i] != NULL);
    held[i][0] = (char)i;
  }
  burst(1500);
  /* The burst may end inside an exploring epoch of a strategy that caches
   * nothing (CI saw the memory one there once): learning must go back to one
   * that caches within a few more epochs of the same burst. */
  for (int more = 0; more < 40 && huge_cached_bytes() == 0; more++) burst(100);
  size_t cached = huge_cached_bytes();
  CHECKF(cached > 0, "nothing cached after the burst (strategy %d)", learn_current());
  int ms = 0;
  for (; ms < 2000 && learn_resume() < 0; ms += 10) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
    learn_tick(0); /* as the purger does (it does not run under sanitizers) */
  }
  if (speed) {
    CHECKF(learn_resume() < 0, "weight 100: strategy %d ran while idle", learn_current());
    CHECKF(huge_cached_bytes() == cached, "weight 100: cache %zu MiB -> %zu MiB while idle", cached / MiB,
           huge_cached_bytes() / MiB);
    printf("test_learn idle_speed: strategy %d and %zu MiB cached kept for %d ms: OK\n", learn_current(),
           cached / MiB, ms);
    return;
  }
  int idle = learn_current(), before = learn_resume();
  CHECKF(before >= 0, "still no idle strategy after %d ms (running %d)", ms, idle);
  CHECKF(bound[idle] < bound[before], "idle strategy %d keeps no less than %d", idle, before);
  CHECKF(huge_cached_bytes() <= bound[idle], "idle strategy %d, %zu MiB cached", idle, huge_cached_bytes() / MiB);
  printf("test_learn idle: after %d ms strategy %d (was %d), cache %zu -> %zu MiB\n", ms, idle, before, cached / MiB,
         huge_cached_bytes() / MiB);
  int freed = 0;
  /* The purger may be inside the sample that began the idle stretch (it
   * holds the learner's lock while it evicts): a free then ends the stretch
   * as that sample finishes, or at the next one. */
  for (int tries = 0; freed < HELD - 1 && learn_resume() >= 0 && tries < 100; tries++) {
    if (tries % 10 == 0) {
      CHECKF(held[freed][0] == (char)freed, "block %d lost its contents", freed);
      hak_free(held[freed++]);
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    learn_tick(0);
  }
  CHECKF(learn_resume() < 0 && learn_current() == before, "after %d frees: strategy %d, resume %d", freed,
         learn_current(), learn_resume());
  printf("test_learn idle: freeing a block brought back strategy %d (after %d frees): OK\n", before, freed);
  hak_free(held[freed++]);
  CHECKF(bound[before] < 4 * MiB || huge_cached_bytes() >= 4 * MiB, "strategy %d back, but a freed block was not cached",
         before);
  while (freed < HELD) hak_free(held[freed++]);
  for (ms = 0; ms < 2000 && learn_resume() < 0; ms += 10) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
    learn_tick(0);
  }
  CHECKF(learn_resume() >= 0, "no idle strategy again after %d ms (running %d)", ms, learn_current());
  for (int i = 0; i < 20 && learn_resume() >= 0; i++) { /* the purger may hold the lock for a moment */
    char *p = hak_malloc(8 * MiB);
    CHECK(p != NULL);
    p[0] = p[8 * MiB - 1] = 1;
    hak_free(p);
  }
  CHECKF(learn_resume() < 0 && learn_current() == before, "after allocating again: strategy %d, resume %d",
         learn_current(), learn_resume());
  printf("test_learn idle: allocating again brought back strategy %d: OK\n", before);
}

/* Allocates n blocks of size, each filled with its index; returns them. */
static void **fill(size_t n, size_t size)
{
  void **v = hak_malloc(n * sizeof *v);
  CHECK(v != NULL);
  for (size_t i = 0; i < n; i++) {
    CHECK((v[i] = hak_malloc(size)) != NULL);
    memset(v[i], (int)(i & 0xff), size);
  }
  return v;
}

static void drop(void **v, size_t n, size_t size)
{
  for (size_t i = 0; i < n; i++) {
    const unsigned char *b = v[i];
    CHECKF(b[0] == (i & 0xff) && b[size - 1] == (i & 0xff), "block %zu of %zu B damaged", i, size);
    hak_free(v[i]);
  }
  hak_free(v);
}

static void *carve_thread(void *arg)
{
  (void)arg;
  const size_t big = 32768, small = 16;
  unsigned cb = size_class(big), cs = size_class(small);
  void *one = hak_malloc(big);
  CHECK(one != NULL);
  slab_t *s = slab_of(one);
  CHECKF(s->bump - slab_start(s) == (ptrdiff_t)big, "first carve of a 32 KiB class took %td bytes",
         s->bump - slab_start(s));
  CHECKF(heap_get()->carve_n[cb] == 1, "cold batch %u", heap_get()->carve_n[cb]);
  hak_free(one);

  size_t n = 2000; /* many slabs' worth: every carve after the first is hot */
  void **v = fill(n, big);
  unsigned hot = heap_get()->carve_n[cb];
  CHECKF(hot == CARVE_MIN_HOT, "hot batch of the 32 KiB class %u, bound %d", hot, CARVE_MIN_HOT);
  printf("test_learn carve: 32 KiB class: first carve 1 block, hot %u\n", hot);

  /* 16-byte blocks carve 256 to 1024 at a time: 200,000 of them make at
   * least 195 carves, three cold gaps for the 32 KiB class. */
  size_t m = 200000;
  void **w = fill(m, small);
  CHECKF(heap_get()->carve_n[cs] == CARVE_HOT_BYTES / small, "hot batch of 16 B %u", heap_get()->carve_n[cs]);
  CHECKF(heap_get()->carve_n[cb] == hot, "the 32 KiB class's batch changed without a carve");
  void *x[64];
  unsigned cold = 0, k = 0;
  for (uint32_t c0 = heap_get()->carves; k < 64 && heap_get()->carves == c0; k++)
    CHECK((x[k] = hak_malloc(big)) != NULL); /* up to the first carve */
  cold = heap_get()->carve_n[cb];
  for (; k < 64; k++) CHECK((x[k] = hak_malloc(big)) != NULL);
  unsigned again = heap_get()->carve_n[cb];
  for (unsigned i = 0; i < 64; i++) hak_free(x[i]);
  printf("test_learn carve: after a cold stretch the 32 KiB class carved %u, then %u\n", cold, again);
  CHECKF(cold <= hot / 4, "cold batch %u, hot %u", cold, hot);
  CHECKF(again == hot, "batch %u after regrowth, hot %u", again, hot);
  drop(v, n, big);
  drop(w, m, small);
  return NULL;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "rating";
  hak_free(hak_malloc(1)); /* initialise: options read */
  if (strcmp(mode, "rating") == 0) test_rating();
  else if (strcmp(mode, "pinned") == 0) test_pinned(argc > 2 ? atoi(argv[2]) : 0);
  else if (strcmp(mode, "speed") == 0) test_live(1);
  else if (strcmp(mode, "memory") == 0) test_live(0);
  else if (strcmp(mode, "idle") == 0) test_idle(0);
  else if (strcmp(mode, "idle_speed") == 0) test_idle(1);
  else if (strcmp(mode, "carve") == 0) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, carve_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
  } else {
    fprintf(stderr, "usage: test_learn rating|pinned K|speed|memory|idle|idle_speed|carve\n");
    return 2;
  }
  return 0;
}
