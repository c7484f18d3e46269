/* Time-decayed purging. Free units of a region stay resident for
 * HAKMEM_PURGE_DELAY_MS so that a program that frees and allocates again
 * does not pay for page faults; then they go back to the OS with madvise.
 * The purging is done by a background thread, so that memory is returned
 * even when the program makes no further calls. It starts the first time
 * memory becomes dirty, takes each heap's lock only with a try (an owner
 * busy with its regions is simply visited next round), and sleeps on a futex
 * while there is nothing to purge. */
#include "internal.h"
#include "learn.h"
#include "options.h"

#define PURGE_TICK_MS 50
#define PURGE_IDLE_MS 10000

#define PURGE_BACKGROUND (!HAK_UNDER_SANITIZER)

static _Atomic int purger_started;
hak_lock_t hak_lock_purge; /* held for a round, so fork never splits one */
static _Atomic uint32_t purge_signal; /* 1: there may be something to purge */

/* Sleeps a tick; while learning, in steps that each sample the learner.
 * When the program stops, its quiet time then starts counting within a step
 * of its last allocation, not a tick, and the switch to the strategy that
 * holds least ends the sleep: the next round purges by it at once. A tick
 * each had held a burst's cache up to 100 ms longer into an idle stretch. */
static void purger_sleep(void) {
  if (!hak_option_on(OPT_LEARN)) {
    os_sleep_ms(PURGE_TICK_MS);
    return;
  }
  int s = learn_current();
  for (unsigned slept = 0; slept < PURGE_TICK_MS; slept += LEARN_SAMPLE_MS) {
    os_sleep_ms(LEARN_SAMPLE_MS);
    learn_tick(0);
    if (learn_current() != s) return;
  }
}

static int purger_main(void *arg) {
  for (;;) {
    long delay = learn_knob(KNOB_PURGE_DELAY_MS);
    uint64_t now = os_now_ms();
    atomic_store_explicit(&purge_signal, 0, memory_order_seq_cst);
    hak_lock(&hak_lock_purge);
    bool pending = heaps_purge_due(now, (uint64_t)delay);
    pending |= region_pool_purge_due(now, (uint64_t)delay);
    pending |= huge_cache_evict_aged();
    learn_tick(0);
    hak_unlock(&hak_lock_purge);
    if (pending) purger_sleep();
    else os_futex_wait(&purge_signal, 0, PURGE_IDLE_MS);
  }
  return 0;
}

/* The common case first: a running purger already signalled. */
void purge_notice_dirty(void) {
  if (!PURGE_BACKGROUND) return;
  bool started = atomic_load_explicit(&purger_started, memory_order_relaxed) != 0;
  if (started && atomic_load_explicit(&purge_signal, memory_order_relaxed) != 0) return;
  if (learn_knob(KNOB_PURGE_DELAY_MS) < 0) return;
  if (!started) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&purger_started, &expected, 1) && !os_spawn_background(purger_main, NULL))
      atomic_store(&purger_started, 0);
  }
  if (atomic_load_explicit(&purge_signal, memory_order_relaxed) == 0 &&
      atomic_exchange_explicit(&purge_signal, 1, memory_order_seq_cst) == 0)
    os_futex_wake(&purge_signal);
}

/* A forked child has no purger thread; the next dirty memory starts one. */
void purge_fork_child(void) {
  atomic_store(&purger_started, 0);
  atomic_store(&purge_signal, 0);
}
