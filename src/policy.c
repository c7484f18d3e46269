/* The strategies and the one that runs. */
#include "policy.h"

#include "options.h"

#define FROM_OPTION (-1000000L) /* a knob left at its option's value */

static const struct {
  const char *name;
  long knob[KNOB_COUNT]; /* purge delay ms, BigCache MiB and age ms */
} strategies[STRATEGIES] = {
  [STRATEGY_DEFAULT] = {"default", {FROM_OPTION, FROM_OPTION, FROM_OPTION}},
  /* where memory costs nothing, a pause is no reason to hand back what the
   * next burst faults in again */
  [STRATEGY_SPEED] = {"speed", {10000, 1024, 10000}},
  [STRATEGY_LEAN] = {"lean", {50, 64, 100}},
  [STRATEGY_MEMORY] = {"memory", {0, 0, 0}},
};

static const hak_option_t knob_option[KNOB_COUNT] = {
  [KNOB_PURGE_DELAY_MS] = OPT_PURGE_DELAY_MS,
  [KNOB_BIGCACHE_MB] = OPT_BIGCACHE_MB,
  [KNOB_BIGCACHE_AGE_MS] = OPT_BIGCACHE_AGE_MS,
};

static _Atomic int current = -1;
static _Atomic long knobs[KNOB_COUNT]; /* the running strategy's, read on every free of a Large block */

static void knobs_of(int s) {
  for (int k = 0; k < KNOB_COUNT; k++) atomic_store_explicit(&knobs[k], policy_knob_of(s, (knob_t)k), memory_order_relaxed);
}

int policy_current(void) {
  int s = atomic_load_explicit(&current, memory_order_relaxed);
  if (likely(s >= 0)) return s;
  long pin = hak_option(OPT_LEARN_PIN);
  s = hak_option_on(OPT_LEARN) || pin < 0 || pin >= STRATEGIES ? STRATEGY_DEFAULT : (int)pin;
  knobs_of(s);
  atomic_store_explicit(&current, s, memory_order_release);
  return s;
}

void policy_set(int s) {
  if (s >= 0) knobs_of(s);
  atomic_store_explicit(&current, s, memory_order_release);
}

long policy_knob_of(int s, knob_t knob) {
  hak_option_t opt = knob_option[knob];
  long v = strategies[s].knob[knob];
  return v == FROM_OPTION || hak_option_given(opt) ? hak_option(opt) : v;
}

long policy_knob(knob_t knob) {
  if (unlikely(atomic_load_explicit(&current, memory_order_acquire) < 0)) policy_current();
  return atomic_load_explicit(&knobs[knob], memory_order_relaxed);
}

const char *policy_name(int s) { return strategies[s].name; }
