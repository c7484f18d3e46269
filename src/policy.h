/* Policy: the knobs that trade time in the OS for memory held (how long
 * freed memory stays resident, how much of freed huge blocks stays cached and
 * for how long), set as one of a few complete strategies. The learner (learn.c)
 * picks the strategy; the pools only read the knobs. Layer 0. */
#ifndef HAKMEM_POLICY_H
#define HAKMEM_POLICY_H

#include "base.h"

typedef enum {
  KNOB_PURGE_DELAY_MS,  /* HAKMEM_PURGE_DELAY_MS */
  KNOB_BIGCACHE_MB,     /* HAKMEM_BIGCACHE_MB */
  KNOB_BIGCACHE_AGE_MS, /* HAKMEM_BIGCACHE_AGE_MS */
  KNOB_COUNT
} knob_t;

enum { STRATEGY_DEFAULT, STRATEGY_SPEED, STRATEGY_LEAN, STRATEGY_MEMORY, STRATEGIES };

/* Strategy s's setting of the knob. */
long policy_knob_of(int s, knob_t knob);
int policy_current(void);
/* The running strategy (-1 until first asked) and its knobs, read on every
 * free of a Large block (__atomic builtins). */
extern int policy_running;
extern long policy_knobs[KNOB_COUNT];
/* The running strategy's setting of a knob; an option the user set in the
 * environment wins over every strategy. */
hak_inline long policy_knob(knob_t knob) {
  if (unlikely(__atomic_load_n(&policy_running, __ATOMIC_ACQUIRE) < 0)) policy_current();
  return __atomic_load_n(&policy_knobs[knob], __ATOMIC_RELAXED);
}
void policy_set(int s);
const char *policy_name(int s);

#endif
