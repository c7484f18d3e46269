/* The allocation API: the hak_ functions, with the malloc and free fast
 * paths. override.c includes this file to give the same functions the
 * standard names. Layer 6. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <string.h>

#include "api.h"
#include "heap.h"
#include "huge.h"
#include "large.h"
#include "learn.h"
#include "map.h"
#include "options.h"
#include "prof.h"
#include "purge.h"
#include "region.h"
#include "size_class.h"
#include "stats.h"

/* ---- slow paths ----------------------------------------------------------- */

/* Every TICK_EVERY slow paths a thread looks at the clock, and once a
 * millisecond at most does its heap's periodic work, the learner's sample
 * and a purge round when one is due: all of it counts time, so a thread
 * whose slow paths run by the million a second does it no more often than
 * one that runs a thousand. A thread with no heap (it freed only Large and
 * Huge blocks) ticks all the same. */
#define TICK_EVERY 16
#define REALLOC_HUGE_MIN ((size_t)256 * 1024)
static __thread uint32_t slow_calls __attribute__((tls_model("initial-exec")));
static __thread uint64_t tick_ms __attribute__((tls_model("initial-exec")));

static hak_noinline void slow_tick(heap_t *heap) {
  uint64_t now = os_now_ms();
  if (now == tick_ms) return;
  tick_ms = now;
  learn_active();
  if (heap != &hak_heap_empty) {
    heap_tick(heap, now);
    large_tick(heap, now);
    large_hot_t *h = &heap->lhot; /* what malloc's fast path took from the Large lists */
    if (h->pushed > 0 && h->pushed_bytes > 0) {
      learn_count((uint32_t)h->pushed, (size_t)h->pushed_bytes);
      h->pushed = 0;
      h->pushed_bytes = 0;
    }
  }
  learn_tick(0, now);
  purge_tick(now);
}

hak_inline void maybe_tick(heap_t *heap) {
  if (unlikely((++slow_calls & (TICK_EVERY - 1)) == 0)) slow_tick(heap);
}

/* A block of the view's list (block_take: never one already handed out). */
hak_inline void *alloc_small(heap_t *heap, unsigned cls) {
  slab_t *s = heap->active[cls];
  block_t *b = s->free;
  if (likely(slab_take(s, b))) return slab_pop_taken(s, b);
  return NULL;
}

/* The first class of size bytes or more whose blocks are aligned to align,
 * a power of two from 16 to SMALL_MAX (their size a multiple of it:
 * slab_block_at); NUM_CLASSES when none lies within a page of the size's
 * own class (above 8 KiB an aligned page run wastes less). */
hak_inline unsigned class_aligned(size_t size, size_t align) {
  unsigned cls = size_class(size);
  if (cls && hak_class_size[cls - 1] >= size) cls--; /* a power of two's class (size_class.h) */
  return hak_aligned_class[__builtin_ctzll(align) - 4][cls];
}

/* Profiling: an allocation that takes the heap's sampling count below zero
 * is sampled. The profiling library's malloc counts on its fast path
 * (HAKMEM_PROFILING); the default library counts here, and its fast path
 * through proxies (heap.h), a Small size counting its class's bytes, as the
 * proxies do. A sampled block's free takes the slow path, which tells the
 * profiler (prof.h): in the profiling library a Small one lies inside a slab
 * block, at its size's alignment; any other is a page run of its own, and a Small
 * size whose class is a multiple of an alignment above a page
 * (alloc_aligned) gets that alignment. */
static hak_noinline bool alloc_sampled(size_t size, heap_t *heap, size_t align, bool zero, void **out) {
  if (prof_nested()) return false;
  size_t counted = size;
  int64_t *left = HAKMEM_PROFILING ? &hak_tls_view.sample_left : &heap->sample_left;
  if (!HAKMEM_PROFILING) {
    if (heap->proxy == NULL && !heap_sampling_start(heap, prof_interval())) return false;
    if (size <= SMALL_MAX && align <= MIN_ALIGN) {
      unsigned cls = size_class(harden_min_size(size));
      heap_sample_settle(heap, cls);
      counted = hak_class_size[cls];
    }
    *left -= (int64_t)MIN(counted, (size_t)INT64_MAX / 2);
  } else if (!hak_tls_view.sampling) { /* a new thread: its first count starts */
    hak_tls_view.sampling = true;
    *left = prof_interval();
    return false;
  }
  if (*left >= 0) return false;
  *left = prof_interval();
  if (counted <= SMALL_MAX && (counted & -counted) > os_page_size()) align = MAX(align, counted & -counted);
  void *p = NULL;
  /* inner: the alignment a block of this size has in its own class (alloc_aligned relies on it) */
  size_t inner = MAX((size_t)PROF_INNER, counted & -counted);
  if (HAKMEM_PROFILING && !HAKMEM_SECURE && align <= MIN_ALIGN && size + inner <= SMALL_MAX) {
    unsigned cls = class_aligned(size + inner, inner);
    if (cls < NUM_CLASSES) { /* none: a page run, page-aligned */
      char *b = alloc_small(heap, cls);
      if (b == NULL && (b = heap_alloc_small_slow(heap, cls)) == NULL) return false;
      p = b + inner;
      if (zero) memset(p, 0, size);
    }
  }
  if (p == NULL && size <= LARGE_MAX && align <= LARGE_MAX) p = large_alloc(heap, size, align, zero);
  if (p == NULL) p = huge_alloc(size, align, zero);
  if (p == NULL) return false;
  prof_record(p, size, counted);
  *out = p;
  return true;
}

/* A page run of the heap's free pages for a small block (only of resident
 * pages with resident), aligned as a block of its size would be
 * (alloc_aligned asks for a class's size): a cold class's (heap_take_cold),
 * or any where no free unit is left whole for a new slab. free and realloc
 * take it as the Large block it is. */
static void *alloc_small_as_run(size_t size, heap_t *heap, bool zero, bool resident) {
  size_t align = size & -size;
  return resident ? large_alloc_resident(heap, size, align, zero) : large_alloc(heap, size, align, zero);
}

/* Everything malloc's fast path does not handle: first use by a thread, an
 * exhausted slab, sizes above the small classes, alignment, zeroing. The
 * size comes first, where malloc received it: the fast path then needs no
 * register move before its tail call (and likewise p for free_slow). */
static hak_noinline void *alloc_slow(size_t size, heap_t *heap, size_t align, bool zero) {
  if (heap == &hak_heap_empty) {
    hak_process_init();
    if ((heap = heap_init_thread()) == NULL) {
      errno = ENOMEM;
      return NULL;
    }
    if (unlikely(heap_thread_exited())) { /* no destructor runs again: the heap goes back now */
      void *p = alloc_slow(size, heap, align, zero);
      int e = errno;
      heap_thread_done();
      errno = e;
      return p;
    }
  }
  maybe_tick(heap);
  learn_active();
  void *p = NULL;
  if (unlikely(prof_on)) {
    if (alloc_sampled(size, heap, align, zero, &p)) return p;
  } else if (HAKMEM_PROFILING) {
    hak_tls_view.sample_left = INT64_MAX; /* not profiling: the count never runs out */
  }
  if (size > SMALL_MAX) {
    learn_alloc(size);
    if (size > LARGE_MAX || align > LARGE_MAX) { /* the loop below places one anew */
      if ((p = huge_alloc_held(size, align, zero)) != NULL) return p;
    } else if ((p = large_alloc_hot(heap, size, MAX(align, 1))) != NULL) {
      return zero ? large_zero(p, size) : p;
    }
  }
  bool small = size <= SMALL_MAX && align <= MIN_ALIGN;
  unsigned cls = small ? size_class(harden_min_size(size)) : 0;
  if (small && heap_take_cold(heap, cls) && (p = alloc_small_as_run(size, heap, zero, true))) return p;
  for (int tries = 0; tries < 2 && p == NULL; tries++) {
    /* out of address space: empty the caches, once */
    if (tries && !(large_cache_release(heap) | purge_release_cached())) break;
    if (small) {
      p = heap_alloc_small_slow(heap, cls);
      if (p && zero) memset(p, 0, size);
      continue;
    }
    if (size <= LARGE_MAX && align <= LARGE_MAX) p = large_alloc(heap, size, align, zero);
    if (p == NULL) p = huge_alloc(size, align, zero);
  }
  if (p == NULL && small) p = alloc_small_as_run(size, heap, zero, false);
  if (p == NULL) errno = ENOMEM;
  return p;
}

/* ---- fast paths ------------------------------------------------------------- */

/* slow: the path taken where the fast one fails (alloc_slow, or C++ new's).
 * The profiling library (HAKMEM_PROFILING) counts each allocation against
 * the thread's sampling interval first. */
hak_inline void *alloc_fast(size_t size, void *(*slow)(size_t, heap_t *, size_t, bool)) {
  if (HAKMEM_PROFILING && unlikely((hak_tls_view.sample_left -= (int64_t)size) < 0))
    return slow(size, heap_get(), 0, false);
  slab_t *s;
  size = harden_min_size(size);
  block_t *b;
  if (size <= DIRECT_MAX) {
    s = hak_tls_view.direct[(size + 7) >> 3];
    b = s->free;
    if (likely(slab_take(s, b))) return slab_pop_taken(s, b);
  } else if (size <= SMALL_MAX) {
    s = hak_tls_view.mid[(size + 255) >> 8];
    b = s->free;
    if (likely(slab_take(s, b))) return slab_pop_taken(s, b);
  } else if (size <= VIEW_LARGE_MAX) {
    s = hak_tls_view.large[(size + 4095) >> 12];
    b = s->free;
    if (likely(slab_take(s, b))) return slab_pop_taken(s, b);
  }
  return slow(size, heap_get(), 0, false);
}

hak_inline void *alloc_inline(size_t size) { return alloc_fast(size, alloc_slow); }

/* The start of the block of slab s that p points inside, where a sampled
 * Small block of the profiling library lies (the profiler's table tells
 * whether p is one); NULL when p points inside no block. */
static inline char *sampled_block(const slab_t *s, const void *p) {
  if (!HAKMEM_PROFILING || HAKMEM_SECURE || likely(!prof_on) || !slab_is_inside_block(s, p)) return NULL;
  return (char *)p - (uint32_t)(uintptr_t)p % s->bsize; /* blocks start at multiples of bsize (slab_block_at) */
}

/* Frees b, a block of slab s, that free's fast path did not: another
 * heap's, or its own slab's with flags set. */
hak_inline void free_block(heap_t *heap, slab_t *s, block_t *b) {
  bool local = slab_heap(s) == heap;
  harden_on_free(s, b);
  stat_free(s->cls, s->bsize, local);
  if (local && HAKMEM_SECURE) { /* flags set: the slab may be full, set aside */
    heap_free_local_slow(heap, s, b);
  } else if (local) {
    if (slab_owner(s) & SLAB_F_FULL) heap_slab_unfull(heap, s);
    heap_free_local(heap, s, b);
  } else {
    heap_free_remote(heap, s, b);
  }
}

/* Every other free: NULL, Large and Huge blocks, a sampled block's inner
 * pointer, pointers inside a block or not hakmem's. */
static hak_noinline void free_rare(void *p, heap_t *heap) {
  if (p == NULL) return;
  uint8_t kind = map_kind(p);
  slab_t *s = kind == MAP_REGION ? slab_of(p) : NULL;
  bool ok = true;
  if (s && s->kind == SLAB_NONE) {
    if (unlikely(prof_on)) prof_forget(p);
    ok = large_free(p);
  } else if (s) {
    char *b = sampled_block(s, p);
    if (b && prof_forget(p)) p = b;
    if ((ok = slab_is_block(s, p))) {
      free_block(heap, s, p);
    } else if (slab_is_inside_block(s, p)) {
      stat_inc(bad_frees);
      harden_inside_block(p); /* returns only to ignore the free */
      ok = true;
    }
  } else if (map_kind_is_huge(kind)) {
    learn_active();
    if (unlikely(prof_on)) prof_forget(p);
    ok = huge_free(p, kind);
  } else {
    ok = false;
  }
  if (!ok) hak_report_bad_pointer("free", p);
  maybe_tick(heap);
}

/* free_slow's paths that go on after a call, apart: in free_slow itself
 * every call is the last thing done (a tail call), so that its common paths
 * save and restore no registers. */
static hak_noinline void free_large_or_rare(void *p, heap_t *heap) {
  /* the profiling library's sampled blocks are freed by inner pointers */
  if (likely(!prof_on) && large_free_hot(heap, p)) return;
  free_rare(p, heap);
}

/* free_block out of line: the secure build, statistics, a full slab of the
 * heap's own taken back. */
static hak_noinline void free_block_apart(heap_t *heap, slab_t *s, block_t *b) { free_block(heap, s, b); }

/* free_slow without its tick: a block of another heap's slab, else a Large
 * block, or a block of the heap's own slab with flags set (the owner word
 * differs from the heap's address in its flags alone). */
hak_inline void free_slow_body(void *p, heap_t *heap, slab_t *s, bool at_start) {
  if (unlikely(s->kind != SLAB_SMALL)) {
    if (!prof_on && large_free_quick(heap, p)) return;
    free_large_or_rare(p, heap);
  } else if (unlikely((HAKMEM_PROFILING && prof_on) || !slab_carved(s, p) || (!at_start && !slab_block_at(s, p)))) {
    free_rare(p, heap);
  } else if (unlikely(HAKMEM_SECURE || hak_stats_enabled || (slab_owner(s) ^ (uintptr_t)heap) <= SLAB_F_MASK)) {
    free_block_apart(heap, s, p);
  } else {
    heap_free_remote(heap, s, p);
  }
}

static hak_noinline void free_slow_ticked(void *p, heap_t *heap, slab_t *s) {
  slow_tick(heap);
  free_slow_body(p, heap, s, false);
}

/* free's slow path for p in a region, whose unit's slab (or Large pages)
 * the fast path found as s. p comes first and s third, where the fast path
 * holds them: no register move before its tail call but heap's. at_start:
 * p is at a block's start by s's divc (a slab's units mirror its head's), as
 * the fast path found before it found the owner not its heap. */
hak_inline void free_slow_at(void *p, heap_t *heap, slab_t *s, bool at_start) {
  s = unit_head(s); /* the fast path read p's unit's own descriptor */
  if (unlikely((++slow_calls & (TICK_EVERY - 1)) == 0)) {
    free_slow_ticked(p, heap, s);
    return;
  }
  free_slow_body(p, heap, s, at_start);
}
static hak_noinline void free_slow(void *p, heap_t *heap, slab_t *s) { free_slow_at(p, heap, s, false); }
static hak_noinline void free_slow_foreign(void *p, heap_t *heap, slab_t *s) { free_slow_at(p, heap, s, !HAKMEM_SECURE); }

hak_inline void free_inline(void *p) {
  heap_t *heap = heap_get();
  size_t i = map_index(p);
  if (likely(map_fast_is_region(i))) {
    /* p's unit's own descriptor (the secure build's frees go onto the
     * head's list: they take it) */
    slab_t *s = HAKMEM_SECURE ? slab_of_entry(i, p) : unit_of_entry(i, p);
    /* the secure build checks the pointer with the rest (harden_on_free) */
    if (likely(HAKMEM_SECURE || slab_block_at(s, p))) {
      if (likely(slab_owned_by(s, heap))) {
        harden_on_free(s, p);
        heap_free_local(heap, s, p);
        return;
      }
      free_slow_foreign(p, heap, s);
      return;
    }
    free_slow(p, heap, s);
    return;
  }
  free_rare(p, heap);
}

/* ---- alignment ------------------------------------------------------------ */

/* Blocks of a class start at multiples of its size (slab_block_at), so the
 * first class at least max(size, align) whose size is a multiple of
 * align gives aligned blocks; it always lies within one alignment of the
 * size's own class. */
static hak_noinline void *alloc_aligned_slow(size_t size, size_t align) {
  heap_t *heap = heap_get();
  bool sample = HAKMEM_PROFILING && (hak_tls_view.sample_left -= (int64_t)size) < 0;
  if (size <= SMALL_MAX && align <= SMALL_MAX) {
    unsigned cls = class_aligned(size < align ? align : size, align);
    if (cls < NUM_CLASSES) {
      void *p = sample ? NULL : alloc_small(heap, cls);
      if (likely(p != NULL)) return p;
      if (class_plain(cls)) return alloc_slow(hak_class_size[cls], heap, 0, false);
      /* a power of two's class, which alloc_slow would not find from the size:
       * its slow path here, else a page run aligned as its blocks are */
      if (!sample && heap != &hak_heap_empty && (p = heap_alloc_small_slow(heap, cls)) != NULL) return p;
      return alloc_slow(hak_class_size[cls], heap, hak_class_size[cls], false);
    }
    /* no class fits: a page run does (alloc_slow's small classes take
     * only alignments of MIN_ALIGN) */
  }
  return alloc_slow(size, heap, align, false);
}

/* The alignments malloc's own blocks have take malloc's fast path. */
hak_inline void *alloc_aligned(size_t size, size_t align) {
  /* every class from MIN_ALIGN up is a multiple of it, as malloc's guarantee needs */
  if (align <= MIN_ALIGN && size <= SMALL_MAX) return alloc_inline(size < align ? align : size);
  /* every block above the small classes starts on a page: malloc's own */
  if (align <= os_page_size() && size > SMALL_MAX) return alloc_inline(size);
  return alloc_aligned_slow(size, align);
}

/* ---- the API -------------------------------------------------------------- */

HAK_API HAK_HOT_FIRST void *hak_malloc(size_t size) { return alloc_inline(size); }

HAK_API HAK_HOT void hak_free(void *p) { free_inline(p); }

HAK_API HAK_HOT void hak_free_sized(void *p, size_t size) { free_inline(p); }

HAK_API void hak_free_aligned_sized(void *p, size_t align, size_t size) { free_inline(p); }

HAK_API void *hak_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  heap_t *heap = heap_get();
  if (HAKMEM_PROFILING && unlikely((hak_tls_view.sample_left -= (int64_t)total) < 0)) return alloc_slow(total, heap, 0, true);
  if (likely(total <= SMALL_MAX)) {
    void *p = alloc_small(heap, size_class(harden_min_size(total)));
    if (likely(p != NULL)) return memset(p, 0, total);
  }
  return alloc_slow(total, heap, 0, true);
}


/* The usable size of p, whose map entry is kind; 0 when p is not a block. */
static size_t usable_size(const void *p, uint8_t kind) {
  if (kind == MAP_REGION) {
    slab_t *s = slab_of(p);
    if (s->kind == SLAB_NONE) {
      size_t n = large_live_size(p);
      return likely(n != 0) ? n : large_usable_size(p);
    }
    const char *b = sampled_block(s, p);
    if (b && prof_sampled(p)) return s->bsize - (size_t)((const char *)p - b);
    return slab_is_block(s, p) ? s->bsize : 0;
  }
  if (map_kind_is_huge(kind)) return huge_usable_size(p, kind);
  return 0;
}

HAK_API size_t hak_malloc_usable_size(const void *p) { return p ? usable_size(p, map_kind(p)) : 0; }

/* Whether a realloc to size keeps a block of old usable bytes where it is:
 * it fits, and a class (or Large pages) of half of it or less would not
 * serve it. */
hak_inline bool realloc_fits(size_t size, size_t old) { return size <= old && (size > old / 2 || old <= 64); }

static hak_noinline void *realloc_slow(void *p, size_t size) {
  if (p == NULL) return alloc_inline(size);
  if (size == 0) {
    free_inline(p);
    return NULL;
  }
  uint8_t kind = map_kind(p);
  size_t old = usable_size(p, kind);
  if (old == 0) {
    hak_report_bad_pointer("realloc", p);
    errno = EINVAL;
    return NULL;
  }
  if (realloc_fits(size, old)) return p;
  bool large = kind == MAP_REGION && slab_of(p)->kind == SLAB_NONE;
  if (large && size > SMALL_MAX && size <= LARGE_MAX && large_resize(p, size)) {
    if (unlikely(prof_on)) prof_moved(p, p, size);
    return p;
  }
  if (kind != MAP_REGION && size >= REALLOC_HUGE_MIN) {
    void *q = huge_realloc(p, size);
    if (q && unlikely(prof_on)) prof_moved(p, q, size);
    if (q) return q;
  }
  /* A block that grows out of its place to REALLOC_HUGE_MIN or more moves to
   * a mapping of its own, where later growth is in place or moves its pages
   * instead of copying them. Below that it moves to Large pages of twice its
   * size (up to REALLOC_HUGE_MIN), to a unit's end, and grows into them in
   * place (pages it does not reach are never touched): copied a few times on
   * its way, not at every unit. The copies it leaves are kept for the next
   * blocks of their classes, as any freed block is: buffers grown again the
   * same way (the next request, record, round) take them back where they
   * were, where merged runs would be cut elsewhere each time. So is the copy
   * left by the move out of Large, as large as the block: the next buffers
   * to grow there find it resident. */
  bool grows = size > old && size > SMALL_MAX;
  void *q = NULL;
  bool to_huge = grows && size >= REALLOC_HUGE_MIN && kind != MAP_HUGE;
  if (to_huge) q = huge_alloc_growing(size);
  else if (grows && size < REALLOC_HUGE_MIN) q = alloc_inline(align_up(MAX(size, MIN(2 * old, REALLOC_HUGE_MIN)), UNIT_SIZE));
  if (q == NULL && (q = alloc_inline(size)) == NULL) return NULL;
  memcpy(q, p, old < size ? old : size);
  free_inline(p);
  return q;
}

/* A realloc whose block keeps its place and size (realloc_fits), found
 * inline: most calls of a buffer grown by small steps are such; a NULL p
 * lies in no region. Every other case (and a pointer not at a live block's
 * start, reported there) takes realloc_slow. */
hak_inline bool realloc_keeps(const void *p, size_t size) {
  size_t i = map_index(p);
  if (!map_fast_is_region(i) || size == 0) return false;
  const slab_t *s = slab_of_entry(i, p);
  size_t old;
  if (s->kind == SLAB_NONE) old = size > SMALL_MAX ? large_live_size(p) : 0;
  else old = slab_is_block(s, p) ? s->bsize : 0; /* a sampled block at its slab block's start has it all */
  return realloc_fits(size, old);
}

HAK_API void *hak_realloc(void *p, size_t size) {
  if (likely(realloc_keeps(p, size))) return p;
  return realloc_slow(p, size);
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

HAK_API int hak_malloc_trim(size_t pad) { return purge_all(); }

/* glibc's parameters are accepted (hakmem has no arenas, trim threshold or
 * mmap threshold to set: its purging is time-decayed); any other is an
 * error, as in glibc. */
HAK_API int hak_mallopt(int param, int value) {
  switch (param) {
  case M_MXFAST: case M_TRIM_THRESHOLD: case M_TOP_PAD: case M_MMAP_THRESHOLD: case M_MMAP_MAX:
  case M_CHECK_ACTION: case M_PERTURB: case M_ARENA_TEST: case M_ARENA_MAX:
    return 1;
  default:
    return 0;
  }
}

HAK_API int hak_profile_dump(const char *path) { return prof_dump(path); }

HAK_API void hak_malloc_stats(void) { hak_stats_print(2); }

HAK_API struct mallinfo2 hak_mallinfo2(void) {
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  size_t mapped = atomic_load(&region_count) * REGION_SIZE;
  size_t spans = atomic_load(&region_span_bytes) + large_live_bytes(), huge = huge_live_bytes();
  mi.arena = mapped;
  mi.hblkhd = huge;
  mi.hblks = (size_t)atomic_load(&hak_stats.huge_mapped);
  mi.uordblks = spans + huge;
  mi.fordblks = mapped > spans ? mapped - spans : 0;
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

HAK_API int hak_owns(const void *p) {
  uint8_t kind = map_kind(p);
  return kind != MAP_NONE && kind != MAP_RESERVED;
}

HAK_API void hak_thread_done(void) { heap_thread_done(); }
