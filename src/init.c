/* Process start-up, fork, exit, and error reporting. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"
#include "learn.h"
#include "options.h"
#include "stats.h"

static _Atomic int init_state; /* 0 not started, 1 running, 2 done */

/* Idempotent, and safe to call from inside malloc: nothing here allocates. */
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
  atomic_store_explicit(&init_state, 2, memory_order_release);
}

/* A child forked from a multi-threaded parent must find no lock held. */
static void fork_prepare(void) {
  hak_lock(&hak_lock_purge);
  hak_lock(&hak_lock_evict);
  hak_lock(&hak_lock_heaps);
  hak_lock(&hak_lock_regions);
  hak_lock(&hak_lock_huge);
}

static void fork_parent(void) {
  hak_unlock(&hak_lock_huge);
  hak_unlock(&hak_lock_regions);
  hak_unlock(&hak_lock_heaps);
  hak_unlock(&hak_lock_evict);
  hak_unlock(&hak_lock_purge);
}

static void fork_child(void) {
  fork_parent();
  heap_fork_child();
  purge_fork_child();
  learn_fork_child();
}

__attribute__((constructor)) static void hak_constructor(void) {
  hak_process_init();
  hak_options_init(); /* again: the environment may not have been set before */
  hak_stats_init();
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

__attribute__((destructor)) static void hak_destructor(void) {
  if (hak_stats_enabled) hak_stats_print(2);
}

static void write_pointer_line(const char *what, const char *problem, const void *p) {
  os_out_t o = {.fd = 2};
  os_out_str(&o, "hakmem: ");
  os_out_str(&o, what);
  os_out_str(&o, ": ");
  os_out_hex(&o, (uintptr_t)p);
  os_out_str(&o, problem);
  os_out_flush(&o);
}

void secure_fail(const char *what, const void *p) {
  write_pointer_line(what, " (secure build: aborting)\n", p);
  abort();
}

/* A SplitMix64 stream from a kernel seed: keys and shuffles of the secure
 * build. */
uint64_t secure_random(void) {
  static _Atomic uint64_t state;
  uint64_t s = atomic_load_explicit(&state, memory_order_relaxed);
  if (s == 0) {
    uint64_t seed = os_random_seed() | 1, expected = 0;
    atomic_compare_exchange_strong(&state, &expected, seed);
  }
  uint64_t z = atomic_fetch_add_explicit(&state, 0x9E3779B97F4A7C15ull, memory_order_relaxed);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void hak_report_bad_pointer(const char *what, const void *p) {
  static _Atomic int reported;
  stat_inc(bad_frees);
  if (HAKMEM_SECURE) secure_fail(what[0] == 'f' ? "free of a pointer that is not a live block" :
                                                  "realloc of a pointer that is not a live block", p);
  if (!hak_option_on(OPT_SHOW_ERRORS) || atomic_exchange(&reported, 1)) return;
  os_out_t o = {.fd = 2};
  os_out_str(&o, "hakmem: ");
  os_out_str(&o, what);
  os_out_str(&o, "(): pointer ");
  os_out_hex(&o, (uintptr_t)p);
  os_out_str(&o, " was not allocated by hakmem; ignored (further reports suppressed)\n");
  os_out_flush(&o);
}

void hak_assert_fail(const char *expr, const char *file, int line) {
  os_out_t o = {.fd = 2};
  os_out_str(&o, "hakmem: assertion failed: ");
  os_out_str(&o, expr);
  os_out_str(&o, " at ");
  os_out_str(&o, file);
  os_out_str(&o, ":");
  os_out_uint(&o, (uint64_t)line, 0);
  os_out_str(&o, "\n");
  os_out_flush(&o);
  abort();
}
