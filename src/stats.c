/* Statistics counters. */
#include "stats.h"

#include "options.h"

hak_stats_t hak_stats;
bool hak_stats_enabled;

void hak_stats_init(void) { hak_stats_enabled = hak_option_on(OPT_STATS); }

void stat_row_alloc(unsigned row, size_t bytes) {
  stat_row_t *r = &hak_stats.rows[row];
  atomic_fetch_add_explicit(&r->allocs, 1, memory_order_relaxed);
  int64_t live = atomic_fetch_add_explicit(&r->live_bytes, (int64_t)bytes, memory_order_relaxed) + (int64_t)bytes;
  int64_t peak = atomic_load_explicit(&r->peak_bytes, memory_order_relaxed);
  while (live > peak &&
         !atomic_compare_exchange_weak_explicit(&r->peak_bytes, &peak, live, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

void stat_row_free(unsigned row, size_t bytes, bool local) {
  stat_row_t *r = &hak_stats.rows[row];
  atomic_fetch_add_explicit(&r->frees, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(local ? &r->local_frees : &r->remote_frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&r->live_bytes, (int64_t)bytes, memory_order_relaxed);
}
