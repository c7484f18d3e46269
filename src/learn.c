/* Learned policies for the Large and Huge pools.
 *
 * A strategy is a complete setting of the knobs that trade time in the OS
 * for memory: how long freed units stay resident before madvise, how many
 * bytes of freed huge blocks the BigCache keeps and for how long. Time runs
 * in epochs (HAKMEM_LEARN_EPOCH_MS and EPOCH_MIN_ALLOCS); each runs one
 * strategy and measures its cost (epoch_cost):
 *
 *   cost = W * os_ms + (1 - W) * MIB_PRICE_MS * held_mib_s
 *
 * os_ms is the time the epoch's page faults and mapping calls cost (counted,
 * then priced as below), and
 * held_mib_s integrates the memory hakmem holds above the live blocks
 * (dirty units and the BigCache). W is HAKMEM_LEARN_WEIGHT / 100.
 *
 * Strategies are rated Elo-fashion: each scored epoch is a game between the
 * strategy that ran and every rival whose cost was measured in the last few
 * epochs (a recent cost is a cost of the same workload phase, a stale one is
 * not). The best-rated strategy runs, except that a seeded generator sends a
 * rival (of those that could beat it, the one measured longest ago: see
 * could_win) to run now and then: rarely while the
 * running strategy's cost is steady, more rarely still when the rival is a
 * known loser (exploring one costs a whole epoch at its price), often when
 * the cost jumps (a new phase). After a switch to a strategy that keeps
 * more, the first half epoch is a warm-up that is not scored: the pools
 * take one free-and-reuse cycle to fill to the new bounds, and an epoch
 * scored from a cold start would rate a caching strategy as if it kept
 * nothing. An idle stretch (an epoch's length without
 * allocations or page faults) is not rated: the strategy that would have
 * held least in it runs until the program allocates, frees or faults again
 * (see idle_choice). All of this runs under a try-lock on slow paths and
 * in the purger, never on a fast path. */
#include "learn.h"

#include "heap.h"
#include "huge.h"
#include "options.h"
#include "policy.h"
#include "purge.h"
#include "run.h"
#include "stats.h"

/* Prices of the OS's work. A page fault's is timed when learning starts
 * (fault_us): it differs several-fold between machines, and with
 * it what keeping freed memory resident is worth. A mapping call and a
 * purged page are priced at fixed figures (docs/learning.md). */
#define FAULT_US_MIN 0.5
#define FAULT_US_MAX 1000.0
#define CALL_US 5.0
#define PURGE_PAGE_US 0.5
#define MIB_PRICE_MS 1.0 /* holding 1 MiB for 1 s costs as much as 1 ms in the kernel */

#define RATING_START 1500.0
#define RATING_MIN 1100.0
#define RATING_MAX 1900.0
#define ELO_K 48.0
#define RECENT_EPOCHS 8     /* rivals measured longer ago are not compared */
#define DRAW_MARGIN 0.05    /* costs within 5 % draw */
#define NEGLIGIBLE_COST 0.5 /* ms per second: below this, cost 0 */
#define EXPLORE_STEADY 16   /* explore one epoch in 16 ... */
#define EXPLORE_SHIFTED 4   /* ... or one in 4 after the cost jumped, or */
                            /* while a rival was never measured */
#define EXPLORE_FAR 32      /* ... and one in 32 for a known loser: a rival */
#define FAR_RATING 200.0    /* rated this far below the best, or whose last */
#define LOSER 2.0           /* cost was this many times the best's */
#define JUMP 3.0            /* by this factor: a new phase, not noise */
/* An epoch lasts HAKMEM_LEARN_EPOCH_MS and at least EPOCH_MIN_ALLOCS Large
 * and Huge allocations, or EPOCH_MAX times as long when they are rare: where
 * each allocation faults in megabytes, a time-only epoch held one or two of
 * them, and which sizes happened to come decided its cost, not the strategy.
 * A quiet stretch as long as an epoch (see quiet_sample) ends the epoch on
 * time: there is nothing to wait for, and what came before it is not scored.
 * The warm-up after a switch lasts half as long on both counts, so that a
 * caching strategy is not scored before its cache has filled. */
#define EPOCH_MIN_ALLOCS 16
#define EPOCH_MAX 8
/* Where a fault costs this much (weighted), learning starts from the speed
 * strategy, not the default, whose bounds suit a cheap fault; and the first
 * START_WARM half epochs, cold for every strategy (the pools fill), are a
 * warm-up: a cold first epoch would rate whichever strategy ran it as a
 * loser. */
#define START_FAST_US 2.5
#define START_WARM 8
#define STRATEGY_SPEED 1

int learn_resume_to = -1; /* idle: the strategy to go back to (__atomic builtins) */
static _Atomic bool woken;        /* the program was active while idle */
static _Atomic uint64_t last_sample_ms;
static _Atomic uint64_t allocs, alloc_bytes; /* Large and Huge allocations so far */

static struct {
  hak_lock_t lock;
  bool started;
  int warming; /* half epochs of warm-up left: see run_next, START_WARM */
  uint64_t start_ms, sample_ms, epochs, rng;
  double held_mib, held_mib_ms;              /* last sample, integral this epoch */
  double cf_mib[STRATEGIES];           /* the same, had t run */
  double cf_mib_ms[STRATEGIES];        /* its integral this epoch */
  double cache_mib, cache_mib_ms;            /* the BigCache alone */
  uint64_t reused;                           /* hak_huge_reused at the epoch's start */
  double floor[STRATEGIES];            /* least cost t could have had (see floors) */
  uint64_t floor_at[STRATEGIES];       /* epoch of it; 0 none */
  bool floor_exact[STRATEGIES];        /* it is t's cost (see learn_set_floor) */
  uint64_t quiet_since, quiet_allocs, quiet_faults; /* the last busy sample, counts then */
  uint64_t quiet_from;                       /* start of the sums below */
  double quiet_cf_mib_ms[STRATEGIES]; /* what t would have held while quiet */
  uint64_t faults, calls, purged, allocs, bytes; /* at the epoch's start */
  double lost_at;                            /* exploring: a cost that loses */
  double fault_us;                           /* price of a page fault here */
  double rating[STRATEGIES];
  double cost[STRATEGIES];             /* last scored cost */
  double os_cost[STRATEGIES];          /* the part of it spent in the OS */
  uint64_t scored_at[STRATEGIES];      /* epoch of it; 0 never */
  uint64_t ran_ms[STRATEGIES], ran_epochs[STRATEGIES];
} L;

static bool learning(void) { return hak_option_on(OPT_LEARN); }

/* Microseconds a first touch of a fresh anonymous page costs here, timed on
 * a few pages (the least of several batches, so that preemption does not
 * count): the price of a page fault differs fivefold between machines. The
 * pages are mapped at start-up, and each batch faults the same ones in and
 * purges them after, so that the probe adds a batch's pages to the peak
 * resident memory, not all of them: an mmap or munmap call when the first
 * sample comes, with threads running, would wait for the address space's
 * lock (mmap_lock) behind every populate they make. */
#define FAULT_PROBE_BATCHES 4
#define FAULT_PROBE_PAGES 8
static char *probe;
static size_t probe_bytes(void) { return FAULT_PROBE_PAGES * os_page_size(); }

void learn_init(void) {
  if (learning() && probe == NULL) probe = os_map(probe_bytes());
}

static double fault_us(void) {
  size_t page = os_page_size();
  if (probe == NULL) return 0;
  double best = 0;
  for (int b = 0; b < FAULT_PROBE_BATCHES; b++) {
    uint64_t t0 = os_now_ns();
    for (int i = 0; i < FAULT_PROBE_PAGES; i++) ((volatile char *)probe)[(size_t)i * page] = 1;
    double us = (double)(os_now_ns() - t0) / 1e3 / FAULT_PROBE_PAGES;
    if (b == 0 || us < best) best = us;
    os_purge(probe, probe_bytes());
  }
  return best;
}

int learn_current(void) { return policy_current(); }
void learn_start(int strategy) { policy_set(strategy); }
int learn_resume(void) { return __atomic_load_n(&learn_resume_to, __ATOMIC_RELAXED); }
double learn_rating(int s) { return L.rating[s]; }

void learn_reset(void) {
  for (int i = 0; i < STRATEGIES; i++) {
    L.rating[i] = RATING_START;
    L.cost[i] = L.os_cost[i] = 0;
    L.scored_at[i] = L.floor_at[i] = 0;
    L.ran_ms[i] = L.ran_epochs[i] = 0;
  }
  L.epochs = 0;
  __atomic_store_n(&learn_resume_to, -1, __ATOMIC_RELAXED);
  L.rng = (uint64_t)hak_option(OPT_LEARN_SEED) * 0x9E3779B97F4A7C15ull | 1;
  policy_set(-1);
  policy_current(); /* picks the first strategy and sets its knobs */
}

/* 10^x for |x| <= 2: e^(x ln 10) from a Taylor series of e^(y/16), squared
 * four times (no libm inside the allocator). */
static double pow10_small(double x) {
  double y = x * 2.302585092994046 / 16, e = 1, term = 1;
  for (int i = 1; i <= 7; i++) e += term *= y / i;
  for (int i = 0; i < 4; i++) e *= e;
  return e;
}

static double clamp_rating(double r) { return r < RATING_MIN ? RATING_MIN : r > RATING_MAX ? RATING_MAX : r; }

/* One game: s scored `score` (1 win, 0.5 draw, 0 loss) against t. */
static void elo_game(int s, int t, double score) {
  double expect = 1 / (1 + pow10_small((L.rating[t] - L.rating[s]) / 400));
  double delta = ELO_K * (score - expect);
  L.rating[s] = clamp_rating(L.rating[s] + delta);
  L.rating[t] = clamp_rating(L.rating[t] - delta);
}

static double game_score(double mine, double theirs) {
  if (mine <= 0 && theirs <= 0) return 0.5;
  double rel = (theirs - mine) / (mine > theirs ? mine : theirs);
  return rel > DRAW_MARGIN ? 1 : rel < -DRAW_MARGIN ? 0 : 0.5;
}

static uint64_t next_random(void) {
  L.rng ^= L.rng << 13;
  L.rng ^= L.rng >> 7;
  L.rng ^= L.rng << 17;
  return L.rng;
}

/* Whether strategy a keeps more than b on some knob ("never", -1, is most). */
static bool keeps_more(int a, int b) {
  for (int k = 0; k < KNOB_COUNT; k++)
    if ((unsigned long)policy_knob_of(a, (knob_t)k) > (unsigned long)policy_knob_of(b, (knob_t)k)) return true;
  return false;
}

/* Whether u lies between a and b in what they keep (on every knob). */
static bool between(int u, int a, int b) {
  return (!keeps_more(a, u) && !keeps_more(u, b)) || (!keeps_more(b, u) && !keeps_more(u, a));
}

/* A cost that clearly loses to b's last one (0 when b was never scored). */
static double losing_cost(int b) { return L.scored_at[b] ? L.cost[b] * LOSER + NEGLIGIBLE_COST : 0; }

/* Whether u's last cost was a clear loss to b's. */
static bool lost_clearly(int u, int b) { return L.scored_at[u] && L.scored_at[b] && L.cost[u] > losing_cost(b); }

/* Whether rival t is worth an epoch against b, the best rated, whose last
 * cost split as it did. One that keeps no more than b pays at least b's time
 * in the OS, one that keeps no less holds at least b's memory; so neither is
 * tried when b's cost lies (all but a draw's margin) in that part. And a
 * rival beyond b's neighbour in the order of what they keep waits until the
 * neighbour has been tried and did not clearly lose: the cost moves one way
 * along that order (less memory, more faults), with plateaus where
 * neighbours draw. Exploring the memory strategy from the default, or a
 * leaner one where the cost is page faults, only ever lost, and in short
 * programs it was most of what learning cost (the realloc benchmark: a fault
 * storm per exploration). */
static bool could_win(int t, int b) {
  for (int u = 0; u < STRATEGIES; u++)
    if (u != t && u != b && between(u, t, b) && (!L.scored_at[u] || lost_clearly(u, b))) return false;
  if (!L.scored_at[b]) return true;
  if (L.floor_at[t] == L.scored_at[b] && L.floor[t] > L.cost[b] * (1 + DRAW_MARGIN) + NEGLIGIBLE_COST) return false;
  double os = L.os_cost[b], mem = L.cost[b] - os, margin = DRAW_MARGIN * L.cost[b];
  if (!keeps_more(t, b)) return mem > margin;
  if (!keeps_more(b, t)) return os > margin;
  return true;
}

void learn_set_floor(int t, double floor, bool exact) {
  L.floor[t] = floor;
  L.floor_at[t] = L.epochs + 1; /* the epoch learn_rate scores next */
  L.floor_exact[t] = exact;
}

/* The rival that keeps less than s on some knob, more on none, and most
 * among those: the next step along the order of what they keep; -1 none. */
static int leaner_neighbour(int s) {
  int n = -1;
  for (int t = 0; t < STRATEGIES; t++)
    if (t != s && keeps_more(s, t) && !keeps_more(t, s) && (n < 0 || keeps_more(t, n))) n = t;
  return n;
}

int learn_rate(double os_cost, double mem_cost) {
  double cost = os_cost + mem_cost;
  if (L.rng == 0) learn_reset();
  int s = policy_current();
  L.epochs++;
  for (int t = 0; t < STRATEGIES; t++)
    if (t != s && L.scored_at[t] && L.epochs - L.scored_at[t] <= RECENT_EPOCHS) elo_game(s, t, game_score(cost, L.cost[t]));
  /* An exact floor of the leaner neighbour is a game too: after a burst, a
   * caching strategy's cost stays level (held memory in place of faults),
   * and these games, not one exploring epoch in EXPLORE_STEADY, show within
   * a few epochs that its cache buys nothing now. */
  int n = leaner_neighbour(s);
  if (n >= 0 && L.floor_at[n] == L.epochs && L.floor_exact[n]) elo_game(s, n, game_score(cost, L.floor[n]));
  double before = L.cost[s];
  bool jumped = L.scored_at[s] && (cost > before * JUMP + NEGLIGIBLE_COST || before > cost * JUMP + NEGLIGIBLE_COST);
  L.cost[s] = cost;
  L.os_cost[s] = os_cost;
  L.scored_at[s] = L.epochs;
  /* A tie keeps the running strategy: the first rating, before any game,
   * sent the speed strategy that a costly page fault had started (see
   * sample) back to the default, which that fault price had ruled out (the
   * large benchmark: bimodal, 589-817/s against 1,184-1,191/s). */
  int best = s, stalest = -1;
  for (int t = 0; t < STRATEGIES; t++)
    if (L.rating[t] > L.rating[best]) best = t;
  for (int t = 0; t < STRATEGIES; t++)
    if (t != best && could_win(t, best) && (stalest < 0 || L.scored_at[t] < L.scored_at[stalest])) stalest = t;
  if (stalest < 0) stalest = best; /* nothing could do better */
  double beat = losing_cost(best);
  bool far = L.rating[stalest] < L.rating[best] - FAR_RATING || lost_clearly(stalest, best);
  bool shifted = jumped || !L.scored_at[stalest];
  bool explore = (next_random() >> 33) % (shifted ? EXPLORE_SHIFTED : far ? EXPLORE_FAR : EXPLORE_STEADY) == 0 &&
                 stalest != best;
  int next = explore ? stalest : best;
  L.lost_at = explore ? beat : 0;
  if (!learning()) next = s; /* pinned: rate, never switch */
  policy_set(next);
  return next;
}

/* What is held now above the live blocks, and what each strategy t would
 * hold had it run while the program allocated nothing: the BigCache runs
 * young enough for its age bound, within its size bound, and the dirty units
 * if any became dirty within its delay. One look at the BigCache for all. */
static void sample_held(uint64_t now) {
  uint64_t age[STRATEGIES];
  size_t young[STRATEGIES];
  for (int t = 0; t < STRATEGIES; t++) age[t] = (uint64_t)policy_knob_of(t, KNOB_BIGCACHE_AGE_MS);
  huge_cached_by_age(now, STRATEGIES, age, young);
  size_t cached = huge_cached_bytes();
  uint64_t grew;
  size_t dirty = heap_dirty_bytes(&grew);
  L.held_mib = (double)(dirty + cached) / (1 << 20);
  L.cache_mib = (double)cached / (1 << 20);
  for (int t = 0; t < STRATEGIES; t++) {
    long delay = policy_knob_of(t, KNOB_PURGE_DELAY_MS);
    size_t cap = (size_t)policy_knob_of(t, KNOB_BIGCACHE_MB) << 20;
    size_t kept = (delay >= 0 && now - grew >= (uint64_t)delay ? 0 : dirty) + (young[t] < cap ? young[t] : cap);
    L.cf_mib[t] = (double)kept / (1 << 20);
  }
}

/* Quiet time runs from the last sample at which the program had allocated a
 * Large or Huge block or faulted (more than a negligible cost's worth: a
 * sleeping program still touches a page now and then). An idle stretch is
 * judged on what was held in it alone, so a burst's last epoch does not hold
 * it up: that epoch, waiting for its allocations, had kept the burst's memory
 * for up to EPOCH_MAX epochs after the burst ended. */
static void quiet_restart(uint64_t now) {
  L.quiet_from = now;
  for (int t = 0; t < STRATEGIES; t++) L.quiet_cf_mib_ms[t] = 0;
}

static void quiet_sample(uint64_t now) {
  uint64_t n = atomic_load_explicit(&allocs, memory_order_relaxed), faults = os_minor_faults();
  uint64_t ms = now - L.quiet_since, epoch = (uint64_t)hak_option(OPT_LEARN_EPOCH_MS);
  if (n != L.quiet_allocs ||
      (double)(faults - L.quiet_faults) * L.fault_us >= NEGLIGIBLE_COST * (double)(ms > epoch ? ms : epoch)) {
    L.quiet_since = now;
    L.quiet_allocs = n;
    L.quiet_faults = faults;
    quiet_restart(now);
    return;
  }
  double dt = (double)(now - L.sample_ms);
  for (int t = 0; t < STRATEGIES; t++) L.quiet_cf_mib_ms[t] += L.cf_mib[t] * dt;
}

static void epoch_begin(uint64_t now) {
  L.start_ms = L.sample_ms = now;
  L.held_mib_ms = L.cache_mib_ms = 0;
  for (int t = 0; t < STRATEGIES; t++) L.cf_mib_ms[t] = 0;
  L.reused = atomic_load_explicit(&huge_reused_bytes, memory_order_relaxed);
  quiet_restart(now);
  sample_held(now); /* after a switch: what the new strategy keeps */
  L.faults = os_minor_faults();
  L.calls = os_calls_total();
  L.purged = (uint64_t)atomic_load_explicit(&hak_stats.bytes_purged, memory_order_relaxed);
  L.allocs = atomic_load_explicit(&allocs, memory_order_relaxed);
  L.bytes = atomic_load_explicit(&alloc_bytes, memory_order_relaxed);
}

static uint64_t epoch_allocs(void) { return atomic_load_explicit(&allocs, memory_order_relaxed) - L.allocs; }

static double epoch_secs(uint64_t now) { return (double)(now - L.start_ms + 1) / 1000; }

/* Whether the program has been idle for an epoch's length: it neither
 * allocated a Large or Huge block nor touched new pages (the allocator's own
 * unmapping and purging, which a switch to a leaner strategy sets off, do not
 * count). */
static bool quiet(uint64_t now) { return now - L.quiet_since >= (uint64_t)hak_option(OPT_LEARN_EPOCH_MS); }

/* Whether the epoch (or its warm-up, half) has run its course by now. */
static bool epoch_over(uint64_t now, uint64_t half) {
  uint64_t ms = now - L.start_ms, epoch = (uint64_t)hak_option(OPT_LEARN_EPOCH_MS), n = epoch_allocs();
  return ms << half >= epoch &&
         (quiet(now) || n << half >= EPOCH_MIN_ALLOCS || ms << half >= epoch * EPOCH_MAX);
}

/* The running strategy's cost so far this epoch: time in the OS and memory
 * held, per second or, when the program allocates Large and Huge blocks
 * faster than PACE_MIB_S, per PACE_MIB_S of them: a strategy that makes
 * every allocation fault must not look cheap because it slowed the program
 * down (per second, the memory strategy cost less than the default in the
 * large benchmark, at a thirtieth of its speed). Memory held takes that
 * measure as far as time counts (the weight W): with memory per second and
 * time in the OS per PACE_MIB_S, a caching strategy in a fast burst paid its
 * cache in full and its faults at a fraction, and the lean one won bursts it
 * ran at a tenth of the speed (phases, burst: 728-1,168 blocks and 852-928
 * ms in the OS a second against the default's 10,464-12,296 and 540-571);
 * at W = 0 only memory counts, however slowly the program runs. */
#define PACE_MIB_S 256.0
static double weight(void) {
  double w = (double)hak_option(OPT_LEARN_WEIGHT) / 100;
  return w < 0 ? 0 : w > 1 ? 1 : w;
}

/* The weighted price of holding mib_ms (MiB times milliseconds). */
static double held_price(double mib_ms) { return (1 - weight()) * (MIB_PRICE_MS * mib_ms / 1000); }

/* What the epoch's cost is priced per (see epoch_cost): its seconds or, when
 * faster, its PACE_MIB_S of allocation; sets *secs to its seconds. */
static double epoch_per(uint64_t now, double *secs) {
  double work = (double)(atomic_load_explicit(&alloc_bytes, memory_order_relaxed) - L.bytes) / (1 << 20) / PACE_MIB_S;
  *secs = epoch_secs(now);
  return work > *secs ? work : *secs;
}

static double epoch_cost(uint64_t now, double *os_part) {
  double secs, per = epoch_per(now, &secs);
  uint64_t faults = os_minor_faults(), calls = os_calls_total();
  uint64_t purged = (uint64_t)atomic_load_explicit(&hak_stats.bytes_purged, memory_order_relaxed);
  double os_ms = ((double)(faults - L.faults) * L.fault_us + (double)(calls - L.calls) * CALL_US +
                  (double)((purged - L.purged) / 4096) * PURGE_PAGE_US) / 1000;
  double w = weight(), held = held_price(L.held_mib_ms);
  *os_part = 0;
  if (w * os_ms + held < NEGLIGIBLE_COST * secs) return 0;
  *os_part = w * os_ms / per;
  return *os_part + held / (secs + w * (per - secs));
}

/* An exploring epoch past its warm-up ends as soon as it has clearly lost
 * (a known bad rival, explored while the workload stays the same, cost a
 * burst of huge blocks several times over). */
static bool exploring_lost(uint64_t now) {
  return L.lost_at > 0 && (now - L.start_ms) * 2 >= (uint64_t)hak_option(OPT_LEARN_EPOCH_MS) &&
         epoch_allocs() * 4 >= EPOCH_MIN_ALLOCS && epoch_cost(now, &(double){0}) > L.lost_at;
}

/* Runs strategy next from now on. Its bounds hold at once, not from the next
 * free or purge round; so only one that keeps more on some knob needs to warm
 * up (and a leaner rival, often a known loser, is judged at once). */
static void run_next(int s, int next, uint64_t now) {
  if (next != s) {
    policy_set(next);
    huge_purge(now, false, false, NULL);
    purge_soon();
    L.warming = keeps_more(next, s) ? 1 : 0;
  }
  epoch_begin(now);
}

/* Idle: what every strategy would have held in the quiet time is known
 * (sample_held), so the cheapest runs until the program allocates again,
 * and nothing is rated: ratings judge strategies under load, and scoring
 * idle epochs made the leanest the best rated, which then paid every
 * following burst in page faults until exploration had climbed back.
 * Returns the strategy to run. */
static int idle_choice(int s, uint64_t now) {
  double secs = (double)(now - L.quiet_from + 1) / 1000, mine = held_price(L.quiet_cf_mib_ms[s]) / secs;
  if (mine < NEGLIGIBLE_COST) return s;
  double least = mine * (1 - DRAW_MARGIN);
  int next = s;
  for (int t = 0; t < STRATEGIES; t++) {
    double c = held_price(L.quiet_cf_mib_ms[t]) / secs;
    if (t != s && c < least) next = t, least = c;
  }
  if (next != s && __atomic_load_n(&learn_resume_to, __ATOMIC_RELAXED) < 0)
    __atomic_store_n(&learn_resume_to, s, __ATOMIC_RELAXED);
  return next;
}

/* The program allocates, frees or faults again: back to the strategy that ran
 * before the idle stretch, unscored. */
static void idle_over(uint64_t now) {
  int s = policy_current();
  L.ran_ms[s] += now - L.start_ms;
  run_next(s, __atomic_exchange_n(&learn_resume_to, -1, __ATOMIC_RELAXED), now);
}

/* The least cost each leaner rival t could have had this epoch instead of s:
 * s's time in the OS, the faults for what s served from its cache beyond t's
 * bound (a share of the reused bytes: the cache held cache_mib_ms / ms on
 * average), and what t would have held (sample_held). A rival whose floor
 * loses to the best's cost is not explored (could_win): an epoch of a
 * strategy whose cache is smaller than what the program reuses purges that
 * cache and faults it back, whatever its rating. */
static void floors(uint64_t now, int s, double os_cost) {
  double secs, per = epoch_per(now, &secs), w = weight(), ms = (double)(now - L.start_ms + 1);
  double cache = L.cache_mib_ms / ms, reused = (double)(atomic_load_explicit(&huge_reused_bytes, memory_order_relaxed) - L.reused);
  for (int t = 0; t < STRATEGIES; t++) {
    L.floor_at[t] = 0;
    if (t == s || keeps_more(t, s)) continue;
    double cap = (double)policy_knob_of(t, KNOB_BIGCACHE_MB), lost = cache > cap ? reused * (cache - cap) / cache : 0;
    double os = os_cost + w * lost / (double)os_page_size() * L.fault_us / 1000 / per;
    learn_set_floor(t, os + held_price(L.cf_mib_ms[t]) / (secs + w * (per - secs)), reused == 0);
  }
}

static void epoch_end(uint64_t now) {
  int s = policy_current();
  bool idle = quiet(now);
  L.ran_ms[s] += now - L.start_ms;
  L.ran_epochs[s]++;
  int next = s;
  if (idle) {
    next = idle_choice(s, now);
  } else {
    double os, cost = epoch_cost(now, &os);
    floors(now, s, os);
    next = learn_rate(os, cost - os);
  }
  run_next(s, next, now);
}

/* A sample; event: the program allocated or freed, which ends an idle
 * stretch at once. */
static void sample(bool event, uint64_t now) {
  bool back = event && __atomic_load_n(&learn_resume_to, __ATOMIC_RELAXED) >= 0;
  if (!back && now - atomic_load_explicit(&last_sample_ms, memory_order_relaxed) < LEARN_SAMPLE_MS) return;
  if (atomic_exchange_explicit(&L.lock.held, 1, memory_order_acquire)) return;
  /* now was read before the lock: a thread that sampled in between may
   * have begun an epoch at a later time, and every span here is now minus
   * a time taken under the lock */
  if (now < L.sample_ms) now = L.sample_ms;
  atomic_store_explicit(&last_sample_ms, now, memory_order_relaxed);
  if (!L.started) {
    if (L.rng == 0) learn_reset();
    L.started = true;
    double us = fault_us();
    L.fault_us = us < FAULT_US_MIN ? FAULT_US_MIN : us > FAULT_US_MAX ? FAULT_US_MAX : us;
    if (weight() * L.fault_us >= START_FAST_US) learn_start(STRATEGY_SPEED);
    L.warming = START_WARM;
    L.quiet_since = now;
    L.quiet_allocs = atomic_load_explicit(&allocs, memory_order_relaxed);
    L.quiet_faults = os_minor_faults();
    epoch_begin(now);
  }
  /* left sums: the amount held since the last sample, over the time since */
  double dt = (double)(now - L.sample_ms);
  L.held_mib_ms += L.held_mib * dt;
  L.cache_mib_ms += L.cache_mib * dt;
  for (int t = 0; t < STRATEGIES; t++) L.cf_mib_ms[t] += L.cf_mib[t] * dt;
  quiet_sample(now);
  sample_held(now);
  L.sample_ms = now;
  if ((back || L.quiet_since == now) && __atomic_load_n(&learn_resume_to, __ATOMIC_RELAXED) >= 0) {
    idle_over(now);
  } else if (L.warming && epoch_over(now, 1)) {
    L.warming--;
    L.ran_ms[policy_current()] += now - L.start_ms;
    epoch_begin(now);
  } else if (!L.warming && (epoch_over(now, 0) || exploring_lost(now))) {
    epoch_end(now);
  }
  /* a free that found the lock taken (this very sample may have begun the
   * idle stretch) ends it now rather than at the next allocation */
  if (atomic_exchange_explicit(&woken, false, memory_order_relaxed) &&
      __atomic_load_n(&learn_resume_to, __ATOMIC_RELAXED) >= 0)
    idle_over(now);
  hak_unlock(&L.lock);
}

__thread learn_pending_t learn_pending __attribute__((tls_model("initial-exec")));

static void flush_pending(void) {
  atomic_fetch_add_explicit(&allocs, learn_pending.n, memory_order_relaxed);
  atomic_fetch_add_explicit(&alloc_bytes, learn_pending.bytes, memory_order_relaxed);
  learn_pending.n = 0;
  learn_pending.bytes = 0;
}

void learn_tick(size_t alloc, uint64_t now) {
  if (!learning()) return;
  if (alloc) {
    learn_pending.n++;
    learn_pending.bytes += alloc;
  }
  if (learn_pending.n) flush_pending();
  sample(alloc != 0, now ? now : os_now_ms());
}

void learn_wake(void) {
  atomic_store_explicit(&woken, true, memory_order_relaxed);
  sample(true, os_now_ms());
}

void learn_fork_child(void) { atomic_store_explicit(&L.lock.held, 0, memory_order_relaxed); }

void learn_print(out_t *o) {
  out_str(o, learning() ? "learned strategy (Large/Huge pools), running: " : "pinned strategy: ");
  out_str(o, policy_name(policy_current()));
  int back = learn_resume();
  if (back >= 0) {
    out_str(o, " while idle, then ");
    out_str(o, policy_name(back));
  }
  if (L.started) {
    out_str(o, "; a page fault priced at ");
    out_uint(o, (uint64_t)L.fault_us, 0);
    out_str(o, ".");
    out_uint(o, (uint64_t)(L.fault_us * 10) % 10, 0);
    out_str(o, " us");
  }
  out_str(o, "\n  strategy  purge-ms  cache-MiB  cache-ms  rating  epochs  run-ms  cost-ms/s\n");
  for (int i = 0; i < STRATEGIES; i++) {
    out_str(o, "  ");
    out_str(o, policy_name(i));
    out_str(o, &"          "[__builtin_strlen(policy_name(i)) < 8 ? __builtin_strlen(policy_name(i)) + 2 : 9]);
    static const int width[KNOB_COUNT] = {8, 11, 10};
    for (int j = 0; j < KNOB_COUNT; j++) {
      long v = policy_knob_of(i, (knob_t)j);
      if (v < 0) out_str(o, &"     never"[10 - width[j]]);
      else out_uint(o, (uint64_t)v, width[j]);
    }
    out_uint(o, (uint64_t)(L.rating[i] ? L.rating[i] : RATING_START), 8);
    out_uint(o, L.ran_epochs[i], 8);
    out_uint(o, L.ran_ms[i], 8);
    out_uint(o, (uint64_t)L.cost[i], 11);
    out_str(o, "\n");
  }
}
