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

int policy_running = -1;
long policy_knobs[KNOB_COUNT];

static void knobs_of(int s) {
  for (int k = 0; k < KNOB_COUNT; k++) __atomic_store_n(&policy_knobs[k], policy_knob_of(s, (knob_t)k), __ATOMIC_RELAXED);
}

int policy_current(void) {
  int s = __atomic_load_n(&policy_running, __ATOMIC_RELAXED);
  if (likely(s >= 0)) return s;
  long pin = hak_option(OPT_LEARN_PIN);
  s = hak_option_on(OPT_LEARN) || pin < 0 || pin >= STRATEGIES ? STRATEGY_DEFAULT : (int)pin;
  knobs_of(s);
  __atomic_store_n(&policy_running, s, __ATOMIC_RELEASE);
  return s;
}

void policy_set(int s) {
  if (s >= 0) knobs_of(s);
  __atomic_store_n(&policy_running, s, __ATOMIC_RELEASE);
}

long policy_knob_of(int s, knob_t knob) {
  hak_option_t opt = knob_option[knob];
  long v = strategies[s].knob[knob];
  return v == FROM_OPTION || hak_option_given(opt) ? hak_option(opt) : v;
}

const char *policy_name(int s) { return strategies[s].name; }
