/* The hardening hooks' failure and random numbers. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "harden.h"
#include "options.h"
#include "out.h"

void harden_fail(const char *what, const void *p) {
  out_pointer_line(what, p, HAKMEM_SECURE ? " (secure build: aborting)\n" : " (aborting)\n");
  abort();
}

/* Aborts unless HAKMEM_ON_ERROR=report, where it writes the line with `then`. */
static void fail_unless_report(const char *what, const void *p, const char *then) {
  if (HAKMEM_SECURE || hak_option_str(OPT_ON_ERROR)[0] != 'r') harden_fail(what, p);
  out_pointer_line(what, p, then);
}

void harden_list_broken(const void *p) {
  fail_unless_report("malloc: a double free, or a write to a freed block: its free list is corrupted at", p,
                     "; that list is dropped (HAKMEM_ON_ERROR=report)\n");
}

void harden_double_free(const void *p) {
  fail_unless_report("free: a double free of", p, "; ignored (HAKMEM_ON_ERROR=report)\n");
}

void harden_inside_block(const void *p) {
  fail_unless_report("free of a pointer inside a block", p, "; ignored (HAKMEM_ON_ERROR=report)\n");
}

/* A SplitMix64 stream from a kernel seed: the keys and shuffles of the
 * secure build. */
uint64_t harden_random(void) {
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
