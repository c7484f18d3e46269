/* Learned policies: the Large and Huge pools' strategy (how long freed
 * memory stays resident, how much the BigCache keeps and for how long) is
 * chosen while the program runs, from a small set of complete settings
 * rated against each other by the cost each showed (see learn.c). */
#ifndef HAKMEM_LEARN_H
#define HAKMEM_LEARN_H

#include <stdbool.h>
#include <stdint.h>

#include "os.h"

typedef enum {
  KNOB_PURGE_DELAY_MS, /* HAKMEM_PURGE_DELAY_MS */
  KNOB_BIGCACHE_MB,    /* HAKMEM_BIGCACHE_MB */
  KNOB_BIGCACHE_AGE_MS, /* HAKMEM_BIGCACHE_AGE_MS */
  KNOB_HUGE_SLACK_PCT, /* HAKMEM_HUGE_SLACK_PCT */
  KNOB_COUNT
} learn_knob_t;

#define LEARN_STRATEGIES 4

/* The running strategy's setting of a knob; an option the user set in the
 * environment wins over every strategy. */
long learn_knob(learn_knob_t knob);

/* The learner samples at most once per LEARN_SAMPLE_MS. */
#define LEARN_SAMPLE_MS 10

/* Called by the purger (each round, and each LEARN_SAMPLE_MS between), by
 * Large/Huge slow paths (alloc_bytes: the size of a Large or Huge
 * allocation, else 0) and when a heap takes a new slab: samples the memory
 * held above live, and at the end of an epoch rates the strategy that ran
 * and picks the next. Cheap when no epoch ends. */
void learn_tick(size_t alloc_bytes);

/* Called on slow paths of a running program (a new slab, a slab emptied, a
 * huge block freed before it is cached): ends an idle stretch at once, so
 * that its lean strategy does not return memory the program is about to
 * reuse. One load when not idle. */
void learn_active(void);

/* The rating step on its own: the strategy that ran showed a cost (ms per
 * second, or per 256 MiB allocated: see learn.c), os_cost of it in the OS
 * and mem_cost for memory held (both weighted); returns the strategy to run
 * next. Used by learn_tick and by the tests, which feed it synthetic costs. */
int learn_rate(double os_cost, double mem_cost);
/* The least cost strategy t could have had in the epoch learn_rate rates
 * next (see floors in learn.c): a rival whose floor loses to the best's
 * cost is not explored. Used by learn_tick and by the tests. */
void learn_set_floor(int t, double floor);
void learn_reset(void); /* back to the start state (tests) */
void learn_start(int strategy); /* runs strategy from now on (the start on speed; tests) */
int learn_current(void);
/* In an idle stretch, the strategy that ran before it and runs again at the
 * next Large or Huge allocation; -1 otherwise. */
int learn_resume(void);
double learn_rating(int strategy);

void learn_print(os_out_t *o);
void learn_fork_child(void);

#endif
