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
#include "policy.h"
#include "stats.h"

/* Blocks of up to LARGE_CLASS_MAX bytes come in classes, one per 4 KiB page
 * count: freed runs of a class are cached for the next block of it, and
 * the owner keeps its freed ones on a list per class (the hot lists, up to
 * LARGE_HOT_MAX_BYTES in all) that its mallocs take without the lock. */
#define LARGE_CLASS_MAX ((size_t)256 * 1024)
#define LARGE_HOT_MAX_BYTES ((size_t)16 << 20)
/* The lists' bytes are counted (h->bytes) only now and then: malloc's fast
 * path takes without counting, frees count what they push (h->unsynced).
 * While those pushes stay under LARGE_HOT_SLACK a block fits when it fits
 * the last count, so that lists at their bound are counted once per that
 * many bytes pushed, not at every free; they pass the bound by that much
 * at most. */
#define LARGE_HOT_SLACK (LARGE_HOT_MAX_BYTES / 16)
#define LARGE_HOT_TABLE (LARGE_CLASS_MAX / 4096)
_Static_assert(VIEW_LARGE_MAX == LARGE_CLASS_MAX, "malloc's view shows every list");

/* Makes the pool's tables (once, at start-up). */
void large_init(void);
/* A block of size bytes aligned to align (at most REGION_SIZE / 2); zeroed
 * with zero. NULL when out of memory. */
void *large_alloc(heap_t *heap, size_t size, size_t align, bool zero);
/* The same from pages the heap holds resident (a run its cache keeps, a
 * dirty free run), or NULL: nothing faulted in, no region taken. */
void *large_alloc_resident(heap_t *heap, size_t size, size_t align, bool zero);
/* Frees Large block p (in a region, on a unit no slab holds); it may be
 * kept for the next block of its class. False when p is not one. */
bool large_free(void *p);
/* The owner's malloc of size bytes (a Large size, aligned to align, a power
 * of two; not zeroed) from the blocks it freed last, where malloc's fast
 * path did not take one (its view does not show the list, or the
 * alignment is above a page); NULL when it keeps none of the size's class
 * that is aligned so at the head of its list. */
void *large_alloc_hot(heap_t *heap, size_t size, size_t align);
/* Zeroes p, a Large block of size bytes on pages that may hold old data
 * (calloc): returns p. */
void *large_zero(void *p, size_t size);
/* The owner's free of p, a Large block of its own (or any pointer into a
 * region, whose unit holds no slab), kept for its mallocs; false when the
 * locked path is to free it (large_free). */
bool large_free_hot(heap_t *heap, void *p);
/* ---- the hot lists, inline for free's slow path ------------------------------ */

/* A block on a list: its link (a list link, free bit set) and a tag of
 * both words, which tells a free that finds one (a double free, or the
 * program's own word) whether to look for the block on its list. */
typedef struct large_hot_block_s {
  struct large_hot_block_s *next;
  uintptr_t tag;
} large_hot_block_t;
#define LARGE_HOT_TAG_MIX ((uintptr_t)0x6c61726765686f74ull)
hak_inline uintptr_t large_hot_tag(const void *b, const void *next) {
  return (uintptr_t)b ^ (uintptr_t)next ^ LARGE_HOT_TAG_MIX;
}
hak_inline bool large_hot_intact(const large_hot_block_t *b) { return b->tag == large_hot_tag(b, b->next); }
/* Whether b, freed, looks like a block on a list: its link's free bit and
 * its tag (the program's own words seldom have both). */
hak_inline bool large_hot_listed_look(const large_hot_block_t *b) {
  return ((uintptr_t)b->next & BLOCK_FREE_BIT) && large_hot_intact(b);
}

/* By page count (large_init): the list of a block of n pages, for every
 * length a region's run may have (LARGE_HOT_CLASSES: none), and of a malloc
 * of n pages up to LARGE_CLASS_MAX; a list's block size. */
#define LARGE_HOT_OF_TABLE (REGION_SIZE / 4096)
_Static_assert((LARGE_HOT_OF_TABLE & (LARGE_HOT_OF_TABLE - 1)) == 0, "a mask bounds the table's index");
extern uint8_t large_hot_of_pages[LARGE_HOT_OF_TABLE];
extern uint8_t large_hot_for_pages[LARGE_HOT_TABLE + 1];
extern size_t large_hot_bytes[LARGE_HOT_CLASSES];

/* The list of p, a live block of heap's own with pages of 1 << shift bytes,
 * and its size in *bytes (0: not heap's, not a block's start);
 * LARGE_HOT_CLASSES where it has none (those, and blocks above
 * LARGE_CLASS_MAX). Reads the chunk's heap, not the region's owner: a line
 * that the length's read needs anyway. */
hak_inline unsigned large_hot_class_of(const heap_t *heap, const void *p, unsigned shift, size_t *bytes) {
  const run_chunk_t *ch = &region_of(p)->pages;
  uintptr_t off = (uintptr_t)p - (uintptr_t)ch->base; /* below base: above REGION_SIZE */
  *bytes = 0;
  /* off below REGION_SIZE and a multiple of a page: one mask */
  if (__atomic_load_n(&ch->heap, __ATOMIC_RELAXED) != &heap->pages ||
      (off & ~((uintptr_t)REGION_SIZE - ((uintptr_t)1 << shift))) != 0)
    return LARGE_HOT_CLASSES;
  /* p at or above base and below the region's end: a page the chunk was
   * added with, whose word holds 0 or a run's length, within the table.
   * Masked: the quick free's 4 KiB index, with larger pages, reads some
   * other word of the header, and no list has room then (hot_push). */
  uint32_t pages = run_chunk_live(ch, (uint32_t)(off >> shift));
  *bytes = (size_t)pages << shift;
  return large_hot_of_pages[pages & (LARGE_HOT_OF_TABLE - 1)];
}

/* Pushes b, a block of bytes, on list l of h (with room), tagged for
 * large_hot_listed_look. The learner counts the block as allocated here,
 * since malloc's fast path, which takes it, counts nothing. */
hak_inline void large_hot_put(large_hot_t *h, slab_t *l, block_t *b, size_t bytes) {
  block_link(l, b, l->free);
  ((large_hot_block_t *)b)->tag = large_hot_tag(b, b->next);
  l->free = b;
  l->used--;
  h->unsynced += bytes;
  h->pushed++;
}

/* Whether a block of bytes fits the lists' bound as last counted. */
hak_inline bool large_hot_fits_counted(const large_hot_t *h, size_t bytes) {
  size_t pushed = h->unsynced > LARGE_HOT_SLACK ? h->unsynced : 0;
  return h->bytes + pushed + bytes <= LARGE_HOT_MAX_BYTES;
}

/* large_free_hot where it calls nothing: true when p went on its list;
 * false with nothing changed where that would call (a list full or not
 * open, the lists at their bound as last counted, p tagged as a listed
 * block, which may be a double free): large_free_hot then decides. A list
 * has room only where a free needs nothing more (hot_push, hot_count_off):
 * not with statistics on, nor with purging at once (large_tick). */
hak_inline bool large_free_quick(heap_t *heap, void *p) {
  size_t bytes;
  /* 4 KiB pages: with others no list has room (hot_push), whatever class
   * this finds */
  unsigned c = HAKMEM_SECURE ? LARGE_HOT_CLASSES : large_hot_class_of(heap, p, 12, &bytes);
  if (c >= LARGE_HOT_CLASSES) return false;
  large_hot_t *h = &heap->lhot;
  slab_t *l = &h->list[c];
  const large_hot_block_t *b = p;
  if (l->used == 0 || !large_hot_fits_counted(h, bytes) || large_hot_listed_look(b)) return false;
  large_hot_put(h, l, p, bytes);
  return true;
}

/* The owner's periodic work (its slow paths' tick): once per purge delay,
 * the blocks it keeps without the lock go to the cache, which ages them. */
void large_tick(heap_t *heap, uint64_t now);
/* The same at once (trim): the calling thread's own heap. */
void large_hot_release(heap_t *heap);
/* That, and the heap's cached runs go back to its free runs, where slabs
 * and page runs of any size can take them (out of address space, thread
 * exit). Whether it held any. */
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
 * no Large operation writes a line that other threads write; another
 * thread's lists as its last tick counted them). */
size_t large_live_bytes(void);
/* Bytes of freed Large blocks the heaps keep for reuse (their lists and
 * caches), all heaps; read without their locks (another thread's lists as
 * its last tick counted them). */
size_t large_cached_bytes(void);

#endif
