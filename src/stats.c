/* Statistics: counting helpers and the report. */
#include "stats.h"

#include "learn.h"
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

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static void print_row_name(os_out_t *o, unsigned row) {
  if (row == STAT_ROW_LARGE) os_out_str(o, "   large");
  else if (row == STAT_ROW_HUGE) os_out_str(o, "    huge");
  else os_out_uint(o, hak_class_size[row], 8);
}

static void print_bytes(os_out_t *o, const char *label, uint64_t bytes) {
  os_out_str(o, "  ");
  os_out_str(o, label);
  os_out_str(o, ": ");
  os_out_uint(o, bytes, 0);
  os_out_str(o, "\n");
}

/* Where the memory is: what the program holds, what hakmem keeps for reuse,
 * what it gave back. */
static void print_memory(os_out_t *o) {
  int64_t live = 0;
  for (unsigned row = 0; row < STAT_ROWS; row++) live += LOAD(hak_stats.rows[row].live_bytes);
  int64_t regions = LOAD(hak_stats.regions_mapped) - LOAD(hak_stats.regions_unmapped);
  size_t spans = atomic_load(&hak_span_bytes), huge = atomic_load(&hak_huge_bytes);
  os_out_str(o, "memory (bytes):\n");
  print_bytes(o, "in slabs and large blocks", spans);
  if (hak_stats_enabled) {
    uint64_t in_blocks = (uint64_t)(live > 0 ? live : 0) - (uint64_t)LOAD(hak_stats.rows[STAT_ROW_HUGE].live_bytes);
    print_bytes(o, "  of which live blocks", in_blocks);
    print_bytes(o, "  of which free blocks cached in thread heaps' slabs", spans > in_blocks ? spans - in_blocks : 0);
  }
  print_bytes(o, "in huge blocks", huge);
  print_bytes(o, "free or idle units not yet purged", atomic_load(&hak_dirty_bytes));
  print_bytes(o, "huge blocks cached for reuse (BigCache)", huge_cached_bytes());
  print_bytes(o, "purged so far (returned with madvise)", (uint64_t)LOAD(hak_stats.bytes_purged));
  print_bytes(o, "metadata (region headers)", (uint64_t)(regions > 0 ? regions : 0) * sizeof(region_t));
  print_bytes(o, "address space of regions", (uint64_t)(regions > 0 ? regions : 0) * REGION_SIZE);
  print_bytes(o, "resident (whole process)", os_resident_bytes());
}

HAK_API void hak_stats_print(int fd) {
  os_out_t o = {.fd = fd};
  os_out_str(&o, "hakmem statistics");
  if (!hak_stats_enabled) os_out_str(&o, " (per-class counts need HAKMEM_STATS=1)");
  os_out_str(&o, "\n   class");
#define X(name, label) os_out_str(&o, " "), os_out_str(&o, "            " label + (sizeof(label) > 13 ? 12 : sizeof(label) - 1));
  HAK_CLASS_STATS(X)
#undef X
  os_out_str(&o, "\n");
  for (unsigned row = 0; row < STAT_ROWS; row++) {
    stat_row_t *r = &hak_stats.rows[row];
    if (LOAD(r->allocs) == 0 && LOAD(r->frees) == 0 && LOAD(r->refills) == 0) continue;
    print_row_name(&o, row);
#define X(name, label) os_out_str(&o, " "), os_out_uint(&o, (uint64_t)LOAD(r->name), 12);
    HAK_CLASS_STATS(X)
#undef X
    os_out_str(&o, "\n");
  }
#define X(name, label) \
  os_out_str(&o, "  " label ": "), os_out_uint(&o, (uint64_t)LOAD(hak_stats.name), 0), os_out_str(&o, "\n");
  HAK_GLOBAL_STATS(X)
#undef X
  print_memory(&o);
  learn_print(&o);
  os_out_flush(&o);
}
