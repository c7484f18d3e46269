/* Process start-up, fork, exit, and the report of invalid pointers. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/single_threaded.h>

#include "api.h"
#include "harden.h"
#include "heap.h"
#include "huge.h"
#include "large.h"
#include "learn.h"
#include "map.h"
#include "options.h"
#include "out.h"
#include "prof.h"
#include "purge.h"
#include "region.h"
#include "stats.h"

static _Atomic int init_state; /* 0 not started, 1 running, 2 done */

/* A thread's exit: the Large blocks it kept for reuse, on its lists and in
 * the cache by class, go back to the free runs and merge, so that the
 * blocks of other sizes that the heap's adopter asks for fit their
 * resident pages; its held huge block goes back to the BigCache. */
static void pools_abandon(heap_t *heap) {
  large_cache_release(heap);
  huge_held_release(heap);
}

void hak_process_init(void) {
  int expected = 0;
  if (atomic_load_explicit(&init_state, memory_order_acquire) == 2) return;
  if (!atomic_compare_exchange_strong(&init_state, &expected, 1)) {
    while (atomic_load_explicit(&init_state, memory_order_acquire) != 2) os_yield();
    return;
  }
  hak_options_init();
  hak_stats_init();
  heap_process_init();
  large_init();
  huge_init();
  heap_abandon_hook = pools_abandon;
  learn_init();
  atomic_store_explicit(&init_state, 2, memory_order_release);
}

/* A child forked from a multi-threaded parent must find no lock held: every
 * lock is taken, in the order the allocator takes them, around fork. A
 * process that never had a second thread (glibc's own flag) can hold none
 * in another thread: its forks take none and write none of the locks'
 * pages, each of which costs a page fault after a fork (in the child, a
 * copy). */
static bool fork_locked;

static void fork_prepare(void) {
  bool lock = !__libc_single_threaded;
  if (fork_locked != lock) fork_locked = lock; /* no write when unchanged: its page too */
  if (!lock) return;
  hak_lock(&purge_lock);
  heap_fork_lock(true);
  huge_fork_lock(true);
  region_fork_lock(true);
  map_fork_lock(true);
  prof_fork_lock(true);
}

static void fork_parent(void) {
  if (!fork_locked) return;
  prof_fork_lock(false);
  map_fork_lock(false);
  region_fork_lock(false);
  huge_fork_lock(false);
  heap_fork_lock(false);
  hak_unlock(&purge_lock);
}

/* A child of a one-thread process finds every count and flag as it should
 * be: its handlers write nothing either. */
static void fork_child(void) {
  if (!fork_locked) return;
  fork_parent();
  heap_fork_child();
  purge_fork_child();
  learn_fork_child();
}

__attribute__((constructor)) static void hak_constructor(void) {
  hak_process_init();
  hak_options_init(); /* again: the environment may not have been set before */
  hak_stats_init();
  report_init();
  prof_init();
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

__attribute__((destructor)) static void hak_destructor(void) {
  prof_at_exit();
  report_at_exit();
}

void hak_report_bad_pointer(const char *what, const void *p) {
  static _Atomic int reported;
  stat_inc(bad_frees);
  if (HAKMEM_SECURE)
    harden_fail(what[0] == 'f' ? "free of a pointer that is not a live block" : "realloc of a pointer that is not a live block", p);
  if (!hak_option_on(OPT_SHOW_ERRORS) || atomic_exchange(&reported, 1)) return;
  out_t o = OUT_FD(2);
  out_str(&o, "hakmem: ");
  out_str(&o, what);
  out_str(&o, "(): pointer ");
  out_hex(&o, (uintptr_t)p);
  out_str(&o, " was not allocated by hakmem; ignored (further reports suppressed)\n");
  out_flush(&o);
}

void hak_assert_fail(const char *expr, const char *file, int line) {
  out_t o = OUT_FD(2);
  out_str(&o, "hakmem: assertion failed: ");
  out_str(&o, expr);
  out_str(&o, " at ");
  out_str(&o, file);
  out_str(&o, ":");
  out_uint(&o, (uint64_t)line, 0);
  out_str(&o, "\n");
  out_flush(&o);
  abort();
}
