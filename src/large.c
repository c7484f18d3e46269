/* The Large pool: blocks above 32 KiB and up to LARGE_MAX, each a span of
 * 64 KiB units in its heap's regions. Only the pages a block touches become
 * resident, so the unit rounding costs address space, not memory. Freed spans
 * go back to their region, where they stay resident (a cache of recently
 * freed runs) until purged. */
#include <string.h>

#include "internal.h"
#include "learn.h"
#include "stats.h"

/* A block of size bytes placed, where a region has them, before free units
 * up to room bytes, so that it can grow in place. */
static void *large_span_alloc(heap_t *heap, size_t size, size_t room, size_t align, bool zero) {
  size_t units = (size + UNIT_SIZE - 1) >> UNIT_SHIFT;
  size_t align_units = align > UNIT_SIZE ? align >> UNIT_SHIFT : 1;
  if (units == 0) units = 1;
  if (units >= REGION_UNITS || align_units > REGION_UNITS / 2) return NULL;
  learn_tick(size);
  slab_t *s = heap_span_alloc(heap, units, align_units, (room + UNIT_SIZE - 1) >> UNIT_SHIFT);
  if (s == NULL) return NULL;
  s->kind = SLAB_LARGE;
  s->cls = 0;
  /* usable size: rounded to pages, the span's remaining pages are never
   * touched, so they cost address space only */
  s->bsize = (uint32_t)os_page_round(size ? size : 1);
  s->capacity = 1;
  s->used = 1;
  s->free = NULL;
  atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
  s->bump = s->end = NULL;
  s->queued = 0;
  atomic_store_explicit(&s->owner, (uintptr_t)heap | SLAB_F_SLOW, memory_order_release);
  void *p = slab_start(s);
  if (zero && !s->fresh) memset(p, 0, size);
  stat_alloc(STAT_ROW_LARGE, s->bsize);
  return p;
}

void *large_alloc(heap_t *heap, size_t size, size_t align, bool zero) {
  return large_span_alloc(heap, size, size, align, zero);
}

/* realloc's new block for one that grows to size (below REALLOC_HUGE_MIN)
 * and could not grow in place: placed, where a region has them, before free
 * units for half as much again (realloc bench, without the move to Huge
 * mappings: peak RSS 21.5 -> 18.5 MiB). */
void *large_alloc_growing(heap_t *heap, size_t size) {
  return large_span_alloc(heap, size, size + size / 2, MIN_ALIGN, false);
}

/* The owner frees a large block. */
void large_free(heap_t *heap, slab_t *s) {
  s->used = 0;
  heap_slab_empty(heap, s);
}

/* Grows the owner's large block in place when the units after it are free. */
bool large_resize_in_place(heap_t *heap, slab_t *s, size_t size) {
  size_t units = (size + UNIT_SIZE - 1) >> UNIT_SHIFT;
  if (slab_heap(s) != heap || (units > s->units && !heap_span_grow(heap, s, units))) return false;
  stat_free(STAT_ROW_LARGE, s->bsize, true);
  s->bsize = (uint32_t)os_page_round(size);
  stat_alloc(STAT_ROW_LARGE, s->bsize);
  return true;
}
