/* Purge rounds: on slow paths, or on the opt-in background thread. */
#define _GNU_SOURCE
#include "purge.h"

#include <pthread.h>
#include <signal.h>

#include "heap.h"
#include "huge.h"
#include "large.h"
#include "learn.h"
#include "options.h"
#include "policy.h"
#include "region.h"
#include "stats.h"

hak_lock_t purge_lock; /* one round at a time; held around fork */
static _Atomic uint64_t next_round_ms;
static _Atomic int background; /* 0 none, 1 starting or running */

/* One round: every heap (those busy now are visited next round), the pool
 * of empty regions, the BigCache. Returns whether dirty memory remains. */
static bool purge_round(uint64_t now) {
  long delay = policy_knob(KNOB_PURGE_DELAY_MS);
  bool pending = false;
  if (delay >= 0) {
    heap_tick_abandoned(now, (uint64_t)delay);
    for (heap_t *h = heap_all(); h; h = h->next_all) heap_purge(h, now, (uint64_t)delay, false, &pending);
    region_pool_purge(now, (uint64_t)delay, false, &pending);
  }
  huge_purge(now, false, false, &pending);
  stat_inc(purge_rounds);
  return pending;
}

static void *background_main(void *arg) {
  for (;;) {
    os_sleep_ms(PURGE_TICK_MS);
    uint64_t now = os_now_ms();
    learn_tick(0, now);
    hak_lock(&purge_lock);
    purge_round(now);
    hak_unlock(&purge_lock);
  }
  return arg;
}

/* The opt-in thread, made with the C library's pthread_create (so that it
 * takes part in setxid, fork and the rest like any thread), with every
 * signal blocked, and only once the program runs a second thread itself:
 * a single-threaded program stays single-threaded. Called with no lock
 * held: pthread_create may allocate. */
static void background_start(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&background, &expected, 1)) return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_t t;
  if (pthread_create(&t, &attr, background_main, NULL) != 0) atomic_store(&background, 0);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The BigCache keeps freed huge blocks resident for huge blocks to come.
 * While the heaps' slabs grow onto fresh pages instead, each MiB they take
 * costs the cache as much, oldest first: memory that only huge blocks can
 * reuse does not stay resident beside the small blocks' growth. (Slabs, not
 * Large runs: a steady program's Large runs also come back clean after a
 * purge, and its huge blocks would pay for them.) */
#define FRESH_STEP ((size_t)1 << 20)
static _Atomic size_t fresh_seen;

static void cache_yield_to_heaps(void) {
  size_t fresh = atomic_load_explicit(&heap_fresh_slab_bytes, memory_order_relaxed);
  size_t seen = atomic_load_explicit(&fresh_seen, memory_order_relaxed);
  if (fresh - seen < FRESH_STEP || policy_knob(KNOB_PURGE_DELAY_MS) < 0 ||
      !atomic_compare_exchange_strong_explicit(&fresh_seen, &seen, fresh, memory_order_relaxed, memory_order_relaxed))
    return;
  huge_cache_shrink(fresh - seen);
}

void purge_tick(uint64_t now) {
  cache_yield_to_heaps();
  if (now < atomic_load_explicit(&next_round_ms, memory_order_relaxed)) return;
  /* the opt-in thread starts at a round's time, once a second thread runs */
  if (unlikely(hak_option_on(OPT_BACKGROUND_THREAD)) && atomic_load_explicit(&background, memory_order_relaxed) == 0 &&
      heap_threads_running() >= 2)
    background_start();
  if (!hak_trylock(&purge_lock)) return;
  atomic_store_explicit(&next_round_ms, now + PURGE_TICK_MS, memory_order_relaxed);
  bool pending = purge_round(now);
  if (!pending) atomic_store_explicit(&next_round_ms, now + 4 * PURGE_TICK_MS, memory_order_relaxed);
  hak_unlock(&purge_lock);
}

void purge_soon(void) { atomic_store_explicit(&next_round_ms, 0, memory_order_relaxed); }

bool purge_all(void) {
  uint64_t now = os_now_ms();
  size_t n = 0;
  heap_t *self = heap_get();
  if (self != &hak_heap_empty) {
    large_hot_release(self);
    n += heap_trim(self);
  }
  heap_trim_abandoned(); /* before the loop below purges their heaps */
  for (heap_t *h = heap_all(); h; h = h->next_all)
    if (h != self) n += heap_purge(h, now, 0, true, NULL);
  n += region_pool_purge(now, 0, false, NULL);
  n += huge_purge(now, true, false, NULL);
  return n > 0;
}

bool purge_release_cached(void) {
  size_t n = huge_purge(os_now_ms(), true, true, NULL);
  return n + region_pool_purge(0, 0, true, NULL) > 0;
}

/* A forked child has no background thread; it starts one again if asked. */
void purge_fork_child(void) {
  atomic_store(&background, 0);
  atomic_store(&next_round_ms, 0);
}
