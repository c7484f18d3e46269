/* Statistics counters: one list of them, counted by every layer. Per-class
 * rows are kept only with HAKMEM_STATS set, which routes every call through
 * the slow paths so that the fast paths carry no counting; the process-wide
 * counters are counted on slow paths always. The report is report.c's.
 * Layer 0. */
#ifndef HAKMEM_STATS_H
#define HAKMEM_STATS_H

#include "types.h"

/* One list generates the fields, the counting and the reports. */
#define HAK_CLASS_STATS(X)        \
  X(allocs, "allocs")             \
  X(frees, "frees")               \
  X(local_frees, "local")         \
  X(remote_frees, "remote")       \
  X(refills, "refills")           \
  X(live_bytes, "live-bytes")     \
  X(peak_bytes, "peak-bytes")

#define HAK_GLOBAL_STATS(X)                                          \
  X(regions_mapped, "regions mapped")                                \
  X(regions_unmapped, "regions unmapped")                            \
  X(regions_reused, "regions reused from the pool")                  \
  X(regions_outside, "regions placed outside the window")            \
  X(huge_mapped, "huge blocks given a mapping of their own")         \
  X(huge_arena_blocks, "huge blocks placed in arenas")               \
  X(huge_cache_hits, "huge blocks placed on cached pages")           \
  X(huge_held_hits, "huge blocks taken back by the thread that freed them") \
  X(bytes_purged, "bytes purged (returned with madvise)")            \
  X(purge_rounds, "purge rounds")                                    \
  X(slabs_wiped, "slabs emptied by other threads and returned")      \
  X(heaps_created, "thread heaps created")                           \
  X(heaps_adopted, "thread heaps adopted after thread exit")         \
  X(bad_frees, "invalid pointers passed to free/realloc")

/* Rows: the small classes, then the Large and Huge pools. */
#define STAT_ROW_LARGE NUM_CLASSES
#define STAT_ROW_HUGE (NUM_CLASSES + 1)
#define STAT_ROWS (NUM_CLASSES + 2)

typedef struct {
#define X(name, label) _Atomic int64_t name;
  HAK_CLASS_STATS(X)
#undef X
} stat_row_t;

typedef struct {
#define X(name, label) _Atomic int64_t name;
  HAK_GLOBAL_STATS(X)
#undef X
  stat_row_t rows[STAT_ROWS];
} hak_stats_t;

extern hak_stats_t hak_stats;
extern bool hak_stats_enabled;

#define stat_inc(field) atomic_fetch_add_explicit(&hak_stats.field, 1, memory_order_relaxed)
#define stat_add(field, n) atomic_fetch_add_explicit(&hak_stats.field, (int64_t)(n), memory_order_relaxed)

/* Per-class counting; compiled in always, run only with statistics on. */
void stat_row_alloc(unsigned row, size_t bytes);
void stat_row_free(unsigned row, size_t bytes, bool local);
hak_inline void stat_alloc(unsigned row, size_t bytes) {
  if (unlikely(hak_stats_enabled)) stat_row_alloc(row, bytes);
}
hak_inline void stat_free(unsigned row, size_t bytes, bool local) {
  if (unlikely(hak_stats_enabled)) stat_row_free(row, bytes, local);
}
hak_inline void stat_refill(unsigned row) {
  if (unlikely(hak_stats_enabled)) atomic_fetch_add_explicit(&hak_stats.rows[row].refills, 1, memory_order_relaxed);
}

void hak_stats_init(void);

#endif
