/* The allocation API: the hak_ functions, with the malloc and free fast
 * paths. override.c includes this file to give the same functions the
 * standard names. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <string.h>

#include "internal.h"
#include "options.h"
#include "stats.h"

/* ---- slow paths ----------------------------------------------------------- */

/* Everything malloc's fast path does not handle: first use by a thread, an
 * exhausted slab, sizes above the small classes, alignment, zeroing. The
 * size comes first, where malloc received it: the fast path then needs no
 * register move before its tail call (and likewise p for free_slow). */
static hak_noinline void *alloc_slow(size_t size, heap_t *heap, size_t align, bool zero) {
  if (heap == &hak_heap_empty && (heap = heap_init_thread()) == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  heap_slow_tick(heap);
  void *p = NULL;
  if (size <= SMALL_MAX && align <= MIN_ALIGN) {
    p = heap_alloc_small_slow(heap, size_class(secure_min_size(size)));
    if (p && zero) memset(p, 0, size);
  } else if (size <= LARGE_MAX && align <= REGION_SIZE / 2) {
    p = large_alloc(heap, size, align, zero);
  }
  if (p == NULL && (size > SMALL_MAX || align > MIN_ALIGN)) p = huge_alloc(size, align, zero, false);
  if (p == NULL) errno = ENOMEM;
  return p;
}

/* ---- fast paths ------------------------------------------------------------- */

hak_inline void *alloc_small(heap_t *heap, unsigned cls) {
  slab_t *s = heap->active[cls];
  if (likely(s->free != NULL)) return slab_pop(s);
  return NULL;
}

/* A tiny block's next one is fetched for writing (prefetch_write): mid
 * blocks lost 2 % by it (mid_large_mt), tiny ones passed between threads
 * gained 8 % (cross_thread). */
hak_inline void *alloc_inline(size_t size) {
  heap_t *heap = heap_get();
  slab_t *s;
  size = secure_min_size(size);
  if (size <= TINY_MAX) {
    s = heap->direct[(size + 7) >> 3];
    if (likely(s->free != NULL)) {
      void *p = slab_pop(s);
      prefetch_write(s->free);
      return p;
    }
  } else if (size <= SMALL_MAX) {
    s = heap->mid[(size + 255) >> 8];
    if (likely(s->free != NULL)) return slab_pop(s);
  }
  return alloc_slow(size, heap, 0, false);
}

static hak_noinline void free_slow(void *p, heap_t *heap) {
  if (p == NULL) return;
  uint8_t kind = region_map_kind(p);
  if (kind >= MAP_HUGE) {
    huge_free(p);
    return;
  }
  slab_t *s = kind == MAP_REGION ? slab_of(p) : NULL; /* read nothing of a foreign pointer */
  if (s == NULL || !slab_is_block(s, p)) {
    hak_report_bad_pointer("free", p);
    return;
  }
  bool local = slab_heap(s) == heap;
  if (s->kind == SLAB_SMALL) secure_on_free(s, p);
  stat_free(s->kind == SLAB_LARGE ? STAT_ROW_LARGE : s->cls, s->bsize, local);
  if (!local) slab_free_remote(s, p);
  else if (s->kind == SLAB_LARGE) large_free(heap, s);
  else heap_free_local_slow(heap, s, p);
}

hak_inline void free_inline(void *p) {
  heap_t *heap = heap_get();
  size_t i = region_map_index(p);
  if (likely(region_map_is_region(i))) {
    slab_t *s = slab_of_entry(i, p);
    if (likely(slab_owned_by(s, heap))) {
      block_t *b = p;
      secure_on_free(s, b);
      block_set_next(s, b, s->free);
      s->free = b;
      if (unlikely(--s->used == 0)) heap_slab_empty(heap, s);
      return;
    }
  }
  free_slow(p, heap);
}

/* ---- alignment ------------------------------------------------------------ */

/* Blocks of a class start at multiples of its size from a 64 KiB boundary,
 * so the first class at least max(size, align) whose size is a multiple of
 * align gives aligned blocks; it always lies within one alignment of the
 * size's own class. */
static void *alloc_aligned(size_t size, size_t align) {
  if (align <= 8 && size <= SMALL_MAX) return alloc_inline(size);
  heap_t *heap = heap_get();
  if (size <= SMALL_MAX && align <= SMALL_MAX) {
    unsigned cls = size_class(size < align ? align : size);
    while (cls < NUM_CLASSES && hak_class_size[cls] % align) cls++;
    if (cls < NUM_CLASSES) {
      void *p = alloc_small(heap, cls);
      if (likely(p != NULL)) return p;
      return alloc_slow(hak_class_size[cls], heap, 0, false);
    }
    size = SMALL_MAX + 1; /* no class fits: a large span does */
  }
  return alloc_slow(size, heap, align, false);
}

static bool is_pow2(size_t x) { return x && (x & (x - 1)) == 0; }

/* ---- the API -------------------------------------------------------------- */

HAK_API void *hak_malloc(size_t size) { return alloc_inline(size); }

HAK_API void hak_free(void *p) { free_inline(p); }

HAK_API void hak_free_sized(void *p, size_t size) { free_inline(p); }

HAK_API void hak_free_aligned_sized(void *p, size_t align, size_t size) { free_inline(p); }

HAK_API void *hak_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  heap_t *heap = heap_get();
  if (likely(total <= SMALL_MAX)) {
    void *p = alloc_small(heap, size_class(secure_min_size(total)));
    if (likely(p != NULL)) return memset(p, 0, total);
  }
  return alloc_slow(total, heap, 0, true);
}

/* The usable size of p, whose map entry is kind; 0 when p is not a block. */
hak_inline size_t usable_size(const void *p, uint8_t kind) {
  if (kind >= MAP_HUGE) return huge_usable_size(p);
  if (kind != MAP_REGION) return 0;
  slab_t *s = slab_of(p);
  return slab_is_block(s, p) ? s->bsize : 0;
}

HAK_API size_t hak_malloc_usable_size(const void *p) { return usable_size(p, region_map_kind(p)); }

HAK_API void *hak_realloc(void *p, size_t size) {
  if (p == NULL) return alloc_inline(size);
  if (size == 0) {
    free_inline(p);
    return NULL;
  }
  uint8_t kind = region_map_kind(p);
  size_t old = usable_size(p, kind);
  if (old == 0) {
    hak_report_bad_pointer("realloc", p);
    errno = EINVAL;
    return NULL;
  }
  if (size <= old && (size > old / 2 || old <= 64)) return p;
  heap_t *heap = heap_get();
  if (kind == MAP_REGION && size > SMALL_MAX && size <= LARGE_MAX * 2) {
    slab_t *s = slab_of(p);
    if (s->kind == SLAB_LARGE && large_resize_in_place(heap, s, size)) return p;
  } else if ((kind == MAP_HUGE || kind == MAP_ARENA) && size >= REALLOC_HUGE_MIN) {
    void *q = huge_realloc(p, size);
    if (q) return q;
  }
  /* A block that grows to REALLOC_HUGE_MIN and cannot grow in place becomes
   * a Huge mapping: later growth is in place or by mremap, which moves its
   * pages instead of copying them and leaves no freed copy resident
   * (realloc bench: peak RSS 21.5 -> 14.9 MiB; memcpy 115 M -> 22 M
   * instructions over 4 rounds).
   * Smaller, it moves to a span with free units after it. */
  void *q = NULL;
  if (size > old && size >= REALLOC_HUGE_MIN) q = huge_alloc(size, MIN_ALIGN, false, true);
  else if (size > old && size > SMALL_MAX && heap != &hak_heap_empty) q = large_alloc_growing(heap, size);
  if (q == NULL && (q = alloc_inline(size)) == NULL) return NULL;
  memcpy(q, p, old < size ? old : size);
  free_inline(p);
  return q;
}

HAK_API void *hak_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return hak_realloc(p, total);
}

HAK_API int hak_posix_memalign(void **out, size_t align, size_t size) {
  if (!is_pow2(align) || align < sizeof(void *)) return EINVAL;
  void *p = alloc_aligned(size, align);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

HAK_API void *hak_aligned_alloc(size_t align, size_t size) {
  if (!is_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return alloc_aligned(size, align);
}

/* glibc's memalign rounds an alignment that is not a power of two up. */
HAK_API void *hak_memalign(size_t align, size_t size) {
  if (align > ((size_t)1 << (ADDRESS_BITS - 1))) {
    errno = EINVAL;
    return NULL;
  }
  size_t a = 1;
  while (a < align) a <<= 1;
  return alloc_aligned(size, a);
}

HAK_API void *hak_valloc(size_t size) { return alloc_aligned(size, os_page_size()); }

HAK_API void *hak_pvalloc(size_t size) {
  size_t page = os_page_size(), rounded = (size + page - 1) & ~(page - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return NULL;
  }
  return alloc_aligned(rounded ? rounded : page, page);
}

/* Gives back everything free: this thread's cached slabs, abandoned heaps,
 * resident free units, the BigCache. Other threads' heaps are theirs. */
HAK_API int hak_malloc_trim(size_t pad) {
  size_t n = 0;
  heap_t *heap = heap_get();
  if (heap != &hak_heap_empty) {
    n += heap_trim(heap); /* first: it collects remote frees */
    n += heap_purge_sparse(heap);
  }
  n += heap_trim_abandoned();
  region_pool_purge_due(0, 0);
  n += huge_trim(false);
  return n > 0;
}

bool hak_release_cached(void) {
  size_t n = huge_trim(true);
  n += region_pool_unmap();
  return n > 0;
}

HAK_API int hak_mallopt(int param, int value) { return 1; }

HAK_API void hak_malloc_stats(void) { hak_stats_print(2); }

HAK_API struct mallinfo2 hak_mallinfo2(void) {
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  size_t mapped = (size_t)(atomic_load(&hak_stats.regions_mapped) - atomic_load(&hak_stats.regions_unmapped)) * REGION_SIZE;
  size_t spans = atomic_load(&hak_span_bytes), huge = atomic_load(&hak_huge_bytes);
  mi.arena = mapped;
  mi.hblkhd = huge;
  mi.hblks = (size_t)atomic_load(&hak_stats.huge_mapped);
  mi.uordblks = spans + huge;
  mi.fordblks = mapped > spans ? mapped - spans : 0;
  mi.keepcost = 0;
  return mi;
}

HAK_API struct mallinfo hak_mallinfo(void) {
  struct mallinfo2 m2 = hak_mallinfo2();
  struct mallinfo mi;
#define MI_INT(x) ((x) > INT_MAX ? INT_MAX : (int)(x))
  mi.arena = MI_INT(m2.arena);
  mi.ordblks = MI_INT(m2.ordblks);
  mi.smblks = MI_INT(m2.smblks);
  mi.hblks = MI_INT(m2.hblks);
  mi.hblkhd = MI_INT(m2.hblkhd);
  mi.usmblks = MI_INT(m2.usmblks);
  mi.fsmblks = MI_INT(m2.fsmblks);
  mi.uordblks = MI_INT(m2.uordblks);
  mi.fordblks = MI_INT(m2.fordblks);
  mi.keepcost = MI_INT(m2.keepcost);
#undef MI_INT
  return mi;
}

HAK_API int hak_owns(const void *p) { return region_map_kind(p) != MAP_NONE; }
