/* The learner: which strategy (policy.h) runs is chosen while the program
 * runs, from the cost each strategy showed: time in the OS and memory held,
 * weighed by HAKMEM_LEARN_WEIGHT. See docs/learning.md. Layer 5. */
#ifndef HAKMEM_LEARN_H
#define HAKMEM_LEARN_H

#include "out.h"
#include "options.h"
#include "policy.h"

/* The learner samples at most once per LEARN_SAMPLE_MS. */
#define LEARN_SAMPLE_MS 10

/* Called on slow paths (alloc_bytes: the size of a Large or Huge allocation,
 * else 0; now: os_now_ms() where the caller read it, else 0): samples the
 * memory held above live, and at the end of an epoch rates the strategy that
 * ran and picks the next. Cheap when no sample is due. */
void learn_tick(size_t alloc_bytes, uint64_t now);

/* The strategy to go back to when an idle stretch ends; -1 while not idle
 * (__atomic builtins). */
extern int learn_resume_to;
void learn_wake(void);
/* Called when the program frees or takes a slab or a huge block: ends an
 * idle stretch at once. One load when not idle. */
hak_inline void learn_active(void) {
  if (unlikely(__atomic_load_n(&learn_resume_to, __ATOMIC_RELAXED) >= 0)) learn_wake();
}

/* Each thread counts its Large and Huge allocations and adds them to the
 * process's counts every LEARN_COUNT_BATCH of them (or when an idle stretch
 * ends): a count shared by every thread, and the clock read to sample, cost
 * more than the allocation's own work. */
#define LEARN_COUNT_BATCH 16
typedef struct {
  uint32_t n;
  uint64_t bytes;
} learn_pending_t;
extern __thread learn_pending_t learn_pending __attribute__((tls_model("initial-exec")));
/* Whether q counts one allocation more inline: no batch and no idle
 * stretch's end due, learning on. */
hak_inline bool learn_count_inline(const learn_pending_t *q) {
  return q->n + 1 < LEARN_COUNT_BATCH && __atomic_load_n(&learn_resume_to, __ATOMIC_RELAXED) < 0 && hak_option_on(OPT_LEARN);
}
/* n Large allocations of bytes in all, counted after they were made (the
 * blocks malloc's fast path takes from the Large lists, as they go on):
 * added to the thread's count, which learn_tick adds to the process's. */
hak_inline void learn_count(uint32_t n, size_t bytes) {
  if (n == 0 || !hak_option_on(OPT_LEARN)) return;
  learn_pending.n += n;
  learn_pending.bytes += bytes;
}
/* learn_tick(bytes, 0) for an allocation of bytes, inline while nothing is due. */
hak_inline void learn_alloc(size_t bytes) {
  learn_pending_t *q = &learn_pending;
  if (likely(learn_count_inline(q))) {
    q->n++;
    q->bytes += bytes;
    return;
  }
  learn_tick(bytes, 0);
}

/* The rating step on its own: the strategy that ran showed a cost, os_cost
 * of it in the OS and mem_cost for memory held (both weighted); returns the
 * strategy to run next. Used by learn_tick and by the tests. */
int learn_rate(double os_cost, double mem_cost);
/* The least cost strategy t could have had in the epoch learn_rate rates
 * next: a rival whose floor loses to the best's cost is not explored.
 * exact: nothing was reused from the BigCache, so what the running strategy
 * kept beyond t's bounds saved no fault and the floor is t's cost (but for
 * Large pages t would have purged sooner): the running strategy plays t,
 * its leaner neighbour, on it. */
void learn_set_floor(int t, double floor, bool exact);
void learn_reset(void);         /* back to the start state (tests) */
void learn_start(int strategy); /* runs strategy from now on */
int learn_current(void);
/* In an idle stretch, the strategy that ran before it and runs again when the
 * program is active again; -1 otherwise. */
int learn_resume(void);
double learn_rating(int strategy);

/* At process start-up: maps the pages that price a fault (learning only). */
void learn_init(void);
void learn_print(out_t *o);
void learn_fork_child(void);

#endif
