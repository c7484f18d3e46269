/* The Large pool: blocks above SMALL_MAX up to LARGE_MAX, each a run of
 * pages in one of its heap's regions, beside the slabs. Page-granular: a
 * block takes the pages its size needs, and only the pages it touches become
 * resident. Free runs are found through the heap's run
 * heap (run.h) in a few instructions whatever the heap's size; freed runs
 * merge with their free neighbours and stay resident until purged with the
 * delay. The owner frees and reuses its blocks up to 256 KiB without the
 * lock (a list per class); every other operation takes the owning heap's
 * lock, so that any thread frees a block at once, its owner asleep or
 * gone. Layer 4. */
#ifndef HAKMEM_LARGE_H
#define HAKMEM_LARGE_H

#include "heap.h"

/* Makes the pool's tables (once, at start-up). */
void large_init(void);
/* A block of size bytes aligned to align (at most REGION_SIZE / 2); zeroed
 * with zero. NULL when out of memory. */
void *large_alloc(heap_t *heap, size_t size, size_t align, bool zero);
/* Frees Large block p (in a region, on a unit no slab holds); it may be
 * kept for the next block of its class. False when p is not one. */
bool large_free(void *p);
/* The owner's malloc of size bytes (a Large size, no alignment, not zeroed)
 * from the blocks it freed last, without the lock; NULL when it keeps none
 * of the size's class. */
void *large_alloc_hot(heap_t *heap, size_t size);
/* The owner's free of p, a Large block of its own (or any pointer into a
 * region, whose unit holds no slab), kept for its mallocs; false when the
 * locked path is to free it (large_free). */
bool large_free_hot(heap_t *heap, void *p);
/* Whether the calling thread keeps a freed block of the class of Large
 * blocks of bytes (on its list or in its cache). */
bool large_class_kept(size_t bytes);
/* The owner's periodic work (its slow paths' tick): once per purge delay,
 * the blocks it keeps without the lock go to the cache, which ages them. */
void large_tick(heap_t *heap, uint64_t now);
/* The same at once (trim, thread exit): the calling thread's own heap. */
void large_hot_release(heap_t *heap);
/* Out of address space: the heap's cached runs go back to its free runs,
 * where slabs and page runs can take them. Whether it held any. */
bool large_cache_release(heap_t *heap);
/* The usable size of large block p, under its heap's lock; 0 when p is not
 * one. */
size_t large_usable_size(const void *p);
/* The same for a live block, read without the lock (run_live_pages): 0 when
 * the read does not confirm one (large_usable_size then decides). */
hak_inline size_t large_live_size(const void *p) {
  const run_chunk_t *c = &region_of(p)->pages;
  uintptr_t off = (uintptr_t)p - (uintptr_t)c->base;
  if ((const char *)p < c->base || (off & (os_page_size() - 1)) != 0) return 0;
  unsigned shift = os_page_log2();
  return (size_t)run_live_pages(c, (uint32_t)MIN(off >> shift, (uintptr_t)UINT32_MAX)) << shift;
}
/* Resizes block p in place to size bytes (<= LARGE_MAX); false when the
 * pages after it are not free. */
bool large_resize(void *p, size_t size);

/* Bytes of Large blocks live now, all heaps (each counts its own, so that
 * no Large operation writes a line that other threads write). */
size_t large_live_bytes(void);
/* Bytes of freed Large blocks the heaps keep for reuse (their lists and
 * caches), all heaps; read without their locks. */
size_t large_cached_bytes(void);

#endif
