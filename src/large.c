/* The Large pool: page runs in the heap's regions, beside its slabs, in size
 * classes with a cache of the runs freed last. */
#include "large.h"

#include <stddef.h>
#include <string.h>

#include "harden.h"
#include "policy.h"
#include "stats.h"

#define CALLOC_LOOK_MIN ((size_t)128 * 1024) /* calloc of dirty pages: os_zero, not memset, from here */
#define CACHE_PER_CLASS 64
#define CACHE_MIN_BYTES ((size_t)8 << 20) /* or half the heap's live Large bytes, if more */

/* The cache's classes: one per page count from SMALL_MAX to LARGE_CLASS_MAX
 * (the hot lists' classes), then one per page count up to SMALL_MAX (the
 * profiler's sampled small blocks). */
#define LARGE_CLASSES LARGE_HOT_CLASSES
_Static_assert(RUN_CACHE_CLASSES == LARGE_CLASSES + 8, "Large classes, then runs of 1 to 8 pages");

/* A class per 4 KiB page count above SMALL_MAX: a block's last byte falls on
 * its last page, which every earlier block of its class on the same run
 * wrote too, so that reusing a run of the class touches no new page. A
 * malloc whose class holds nothing freed takes a block up to an eighth
 * longer (large_reach), as coarser classes would serve it. */
static unsigned large_class(size_t bytes) { return (unsigned)((bytes - 1 - SMALL_MAX) >> 12); }

static size_t class_bytes(unsigned c) { return os_page_round(SMALL_MAX + ((size_t)c + 1) * 4096); }

/* The last class whose blocks serve a malloc of class c when c keeps none:
 * those up to an eighth longer. */
static unsigned large_reach(unsigned c) {
  unsigned last = c + (unsigned)(class_bytes(c) / 8 / 4096);
  return last < LARGE_CLASSES ? last : LARGE_CLASSES - 1;
}

/* The cache class of a run of bytes, or -1 when such runs are not cached
 * (between classes). */
static int cache_class_of(size_t bytes) {
  if (bytes <= SMALL_MAX) return LARGE_CLASSES + (int)(bytes >> os_page_log2()) - 1;
  unsigned c = large_class(bytes);
  return bytes <= LARGE_CLASS_MAX && bytes == class_bytes(c) ? (int)c : -1;
}

/* The run of a block of size bytes: its class's (aligned too: the class's
 * lists and cache then serve a program that asks aligned). */
static size_t block_bytes_of(size_t size) {
  size_t bytes = os_page_round(size ? size : 1);
  return bytes <= SMALL_MAX ? bytes : class_bytes(large_class(bytes));
}

/* Both, by page count up to LARGE_CLASS_MAX, made once at start-up (large_init):
 * every Large allocation and free asks. */
static uint8_t fit_pages[LARGE_HOT_TABLE + 1]; /* pages of the block for n pages asked */
static int8_t class_of_pages[LARGE_HOT_TABLE + 1];
uint8_t large_hot_of_pages[LARGE_HOT_OF_TABLE]; /* hot list of a block of n pages; LARGE_HOT_CLASSES: none */
uint8_t large_hot_for_pages[LARGE_HOT_TABLE + 1]; /* the same for a malloc of n pages */
size_t large_hot_bytes[LARGE_HOT_CLASSES];

void large_init(void) {
  unsigned shift = os_page_log2();
  /* 0: a page that starts no live run (inside a block, or freed); above
   * LARGE_CLASS_MAX: a block that no list holds */
  __builtin_memset(large_hot_of_pages, LARGE_HOT_CLASSES, sizeof large_hot_of_pages);
  for (size_t n = 1; n <= (LARGE_CLASS_MAX >> shift); n++) {
    fit_pages[n] = (uint8_t)(block_bytes_of(n << shift) >> shift);
    class_of_pages[n] = (int8_t)cache_class_of(n << shift);
    unsigned c = (unsigned)class_of_pages[n];
    large_hot_of_pages[n] = (uint8_t)((n << shift) > SMALL_MAX && c < LARGE_HOT_CLASSES ? c : LARGE_HOT_CLASSES);
  }
  for (size_t n = 1; n <= (LARGE_CLASS_MAX >> shift); n++) large_hot_for_pages[n] = large_hot_of_pages[fit_pages[n]];
  for (unsigned c = 0; c < LARGE_HOT_CLASSES; c++) large_hot_bytes[c] = class_bytes(c);
  heap_large_view_ok = !HAKMEM_SECURE && shift == 12 && !hak_stats_enabled;
  for (size_t n = 0; n <= VIEW_LARGE_MAX / 4096; n++)
    heap_large_view_class[n] = shift == 12 && n ? large_hot_for_pages[n] : LARGE_HOT_CLASSES;
  heap_large_view_index();
}

/* The tables hold LARGE_CLASS_MAX >> page shift entries (fewer than LARGE_HOT_TABLE
 * with pages above 4 KiB): their bound is in bytes. */
static int cache_class(size_t bytes) {
  return likely(bytes <= LARGE_CLASS_MAX) ? class_of_pages[bytes >> os_page_log2()] : cache_class_of(bytes);
}

static size_t block_bytes(size_t size) {
  if (likely(size - 1 < LARGE_CLASS_MAX)) return (size_t)fit_pages[(size + os_page_size() - 1) >> os_page_log2()] << os_page_log2();
  return block_bytes_of(size);
}

/* The heap's Large bytes, a block of `removed` bytes replaced by one of
 * `added` (either 0), under its lock (read without it by the total). */
static void live_add(heap_t *heap, size_t removed, size_t added) {
  __atomic_store_n(&heap->large_live, heap->large_live + added - removed, __ATOMIC_RELAXED);
  if (heap->large_live > heap->large_peak) heap->large_peak = heap->large_live;
}

/* The run of Large block p (in a region, on no slab's unit, not cached), its
 * heap's lock taken (and the heap set); {NULL} (the lock not held) when p
 * does not start a block. */
static run_t block_run(const void *p, heap_t **heapp) {
  region_t *r = region_of(p);
  if (slab_in(r, p)->kind != SLAB_NONE) return (run_t){0};
  for (;;) {
    heap_t *heap = __atomic_load_n(&r->owner, __ATOMIC_ACQUIRE);
    if (heap == NULL) return (run_t){0};
    heap_lock(heap);
    if (r->owner != heap) { /* the region changed hands meanwhile: p was no block */
      heap_unlock(heap);
      continue;
    }
    run_chunk_t *c = &r->pages;
    uintptr_t off = (uintptr_t)p - (uintptr_t)c->base;
    run_t run = {0};
    if ((const char *)p >= c->base && (off & (os_page_size() - 1)) == 0 && slab_in(r, p)->kind == SLAB_NONE)
      run = run_at(c, (uint32_t)(off >> os_page_log2()));
    if (run.chunk && run_cached(run)) run.chunk = NULL; /* freed already */
    if (run.chunk == NULL) heap_unlock(heap);
    *heapp = heap;
    return run;
  }
}

/* The cache holds at most half of what the heap holds in Large blocks, and
 * at least CACHE_MIN_BYTES; the blocks on the owner's lists count against
 * it. */
static size_t cache_pages(const heap_t *heap) {
  size_t bound = MAX(CACHE_MIN_BYTES, heap->large_live / 2), hot = __atomic_load_n(&heap->lhot.bytes, __ATOMIC_RELAXED);
  return (bound > hot ? bound - hot : 0) >> os_page_log2();
}

/* Frees allocated run r of heap (its lock held): to its class's cache, or
 * back to the free runs (an aligned one, one beyond the cache's bounds). */
static void free_locked(heap_t *heap, run_t r, uint64_t now, long delay) {
  size_t bytes = run_bytes(r);
  live_add(heap, bytes, 0);
  int c = cache_class(bytes);
  size_t bound = cache_pages(heap);
  bool cached = delay != 0 && c >= 0 && run_cache_push(&heap->lcache, (unsigned)c, r, now, CACHE_PER_CLASS, bound);
  if (heap->lcache.pages > bound) run_cache_trim(&heap->lcache, bound, now); /* the heap shrank */
  region_t *reg = region_of(run_addr(r));
  if (!cached && run_free(r, true, now) && region_spare(reg)) region_release(reg, now);
}

/* ---- the owner's hot lists (large_hot_t) ------------------------------------
 * The owner frees a block of a class up to LARGE_CLASS_MAX onto its class's list
 * and allocates from it, without the lock and without reading the run map
 * past the block's own length word: the run stays allocated, so no other
 * thread looks at it. A list holds what its class's demand asks for
 * (run_demand_t), so that a batch of blocks freed together comes back
 * without the lock; the tick sends every list to the cache once per purge
 * delay, from where the blocks go back as the cache's do. Off in the
 * secure build, whose frees are all checked under the lock. */
_Static_assert(LARGE_HOT_CLASSES == (LARGE_CLASS_MAX - SMALL_MAX) / 4096, "the classes up to LARGE_CLASS_MAX");
_Static_assert(LARGE_HOT_CLASSES <= 64, "a bit per list in lhot.open");
_Static_assert(LARGE_HOT_DEPTH <= UINT16_MAX && LARGE_HOT_DEPTH - LARGE_HOT_DEPTH_MIN <= UINT8_MAX, "counts fit");

/* Whether list l is open (its head set at its first free) and holds a block. */
static bool hot_holds(const slab_t *l) { return l->free != NULL && slab_has_free(l); }

/* Blocks on list c. */
static uint32_t hot_n(const large_hot_t *h, unsigned c) { return h->cap[c] - h->list[c].used; }

/* List c, found written to at b: one line (abort unless HAKMEM_ON_ERROR=
 * report), and the list is emptied, its blocks lost rather than handed out
 * twice. */
static hak_noinline void hot_broken(large_hot_t *h, unsigned c, const block_t *b) {
  harden_list_broken(b);
  uint32_t lost = hot_n(h, c);
  h->pushed -= (int32_t)lost;
  h->pushed_bytes -= (int64_t)(lost * large_hot_bytes[c]);
  h->list[c].free = slab_end(&h->list[c]);
  if (hak_stats_enabled) h->cap[c] = 0; /* no room: hot_count_off */
  h->list[c].used = h->cap[c];
}

/* The run of b, a block on a list (an allocated run of the caller's
 * heap). */
static run_t listed_run(const void *b) {
  run_chunk_t *ch = &region_of(b)->pages;
  return run_at(ch, (uint32_t)((uintptr_t)((const char *)b - ch->base) >> os_page_log2()));
}

/* A block of list c taken off other than by malloc's fast path: off the
 * lists' count (which may not hold it yet: the pushes since the last count
 * are in h->unsynced) and off the learner's, which counted it at its push.
 * With statistics on, the list keeps no room, which the take gave it:
 * large_free_quick counts nothing, so every free goes through hot_push. */
static void hot_count_off(large_hot_t *h, unsigned c) {
  __atomic_store_n(&h->bytes, h->bytes > large_hot_bytes[c] ? h->bytes - large_hot_bytes[c] : 0, __ATOMIC_RELAXED);
  h->pushed--;
  h->pushed_bytes -= (int64_t)large_hot_bytes[c];
  if (hak_stats_enabled) {
    h->cap[c]--;
    h->list[c].used--;
  }
}

/* Sends class c's list back under the lock (held), as freed at now. */
static void hot_send(heap_t *heap, unsigned c, uint64_t now, long delay) {
  large_hot_t *h = &heap->lhot;
  slab_t *l = &h->list[c];
  while (hot_holds(l)) {
    block_t *b = l->free;
    if (!block_take(b)) {
      hot_broken(h, c, b);
      return;
    }
    slab_pop_taken(l, b);
    hot_count_off(h, c); /* before the live count: large_live_bytes never sees both */
    free_locked(heap, listed_run(b), now, delay);
  }
}

/* Counts what the lists hold into h->bytes: malloc's fast path takes from
 * the lists without counting, their pushes count into h->unsynced. */
static void hot_sync(large_hot_t *h) {
  size_t sum = 0;
  for (uint64_t m = h->open; m; m &= m - 1) {
    unsigned c = (unsigned)__builtin_ctzll(m);
    sum += (size_t)hot_n(h, c) * large_hot_bytes[c];
  }
  __atomic_store_n(&h->bytes, sum, __ATOMIC_RELAXED);
  h->pushed_bytes += (int64_t)h->unsynced;
  h->unsynced = 0;
}

/* Whether bytes more fit the lists' bound, counted afresh when the count
 * kept says no; lists found full turn the next HOT_FULL_SKIP frees away
 * without counting (each count reads every open list's head). */
#define HOT_FULL_SKIP 16
static bool hot_fits(large_hot_t *h, size_t bytes) {
  if (large_hot_fits_counted(h, bytes)) return true;
  if (bytes > LARGE_HOT_MAX_BYTES) return false;
  if (h->full_skip) {
    h->full_skip--;
    return false;
  }
  hot_sync(h);
  bool fits = h->bytes + bytes <= LARGE_HOT_MAX_BYTES;
  if (!fits) h->full_skip = HOT_FULL_SKIP;
  return fits;
}

/* No room left on any list: purging at once, every free goes to the
 * locked path. */
static void hot_close(large_hot_t *h) {
  for (uint64_t m = h->open; m; m &= m - 1) {
    unsigned c = (unsigned)__builtin_ctzll(m);
    h->cap[c] = (uint16_t)hot_n(h, c);
    h->list[c].used = 0;
  }
}

/* When the blocks on the lists were freed, at the earliest: at the last
 * drain, or the last tick that found them empty. They age in the cache
 * from then, so that no block stays resident more than about a purge delay
 * after its free (a cached one stays that). */
static uint64_t hot_freed_ms(const heap_t *heap, uint64_t now) {
  uint64_t t = heap->lhot.drained_ms;
  return t && t < now ? t : now;
}

/* Every list back to the cache. */
static void hot_drain(heap_t *heap, uint64_t now) {
  uint64_t freed = hot_freed_ms(heap, now);
  heap->lhot.drained_ms = now;
  hot_sync(&heap->lhot);
  if (heap->lhot.bytes == 0) return;
  long delay = policy_knob(KNOB_PURGE_DELAY_MS);
  heap_lock(heap);
  for (uint64_t m = heap->lhot.open; m; m &= m - 1) hot_send(heap, (unsigned)__builtin_ctzll(m), freed, delay);
  heap_unlock(heap);
  hot_sync(&heap->lhot);
}

/* The calling thread's own lists counted now (the others' as their owners
 * last counted them). */
static void hot_sync_own(void) {
  heap_t *heap = heap_get();
  if (heap != &hak_heap_empty) hot_sync(&heap->lhot);
}

size_t large_live_bytes(void) {
  hot_sync_own();
  size_t sum = 0; /* blocks on the owners' lists are freed, though allocated runs */
  for (heap_t *h = heap_all(); h; h = h->next_all) {
    size_t live = __atomic_load_n(&h->large_live, __ATOMIC_RELAXED), hot = __atomic_load_n(&h->lhot.bytes, __ATOMIC_RELAXED);
    sum += live > hot ? live - hot : 0; /* hot as of the owner's last count */
  }
  return sum;
}

size_t large_cached_bytes(void) {
  hot_sync_own();
  size_t sum = 0;
  for (heap_t *h = heap_all(); h; h = h->next_all)
    sum += __atomic_load_n(&h->lhot.bytes, __ATOMIC_RELAXED) + (__atomic_load_n(&h->lcache.pages, __ATOMIC_RELAXED) << os_page_log2());
  return sum;
}

void *large_zero(void *p, size_t size) {
  if (size >= CALLOC_LOOK_MIN) os_zero(p, size);
  else memset(p, 0, size);
  return p;
}

/* The block freed last on list c, for a malloc aligned to align; NULL when
 * the list holds none, or that one is not aligned so. */
static void *hot_take(large_hot_t *h, unsigned c, size_t align) {
  slab_t *l = &h->list[c];
  if (!hot_holds(l)) return NULL;
  block_t *b = l->free;
  if (((uintptr_t)b & (align - 1)) != 0) return NULL; /* the last freed one only: an aligned program frees aligned ones */
  if (unlikely(!block_take(b))) {
    hot_broken(h, c, b);
    hot_sync(h);
    return NULL;
  }
  slab_pop_taken(l, b);
  hot_count_off(h, c);
  stat_alloc(STAT_ROW_LARGE, large_hot_bytes[c]);
  return b;
}

/* The same from the first list after class c's, up to large_reach(c), that
 * holds a block. */
static void *hot_take_longer(large_hot_t *h, unsigned c, size_t align) {
  for (unsigned k = c + 1, last = large_reach(c); k <= last; k++)
    if (hot_holds(&h->list[k])) return hot_take(h, k, align);
  return NULL;
}

/* For a block of class c, n pages, that would fault its pages in (*r, when
 * found, clean): a run the cache keeps of twice its length or more, cut to
 * n pages, its tail freed dirty. A buffer grown in place past its class,
 * freed, is kept as its new length, which the next ones, asking the old,
 * would not take; the cache would hold such runs resident until their
 * purge while fresh pages served. Not a run only a little longer: its own
 * class would miss it next, and cut another in turn. */
static bool longer_cached(heap_t *heap, unsigned c, uint32_t n, uint32_t a, bool found, run_t *r) {
  run_t x;
  unsigned twice = large_class((size_t)n << (os_page_log2() + 1));
  if (twice >= LARGE_CLASSES || !run_cache_pop_within(&heap->lcache, twice, LARGE_CLASSES - 1, a, &x)) return found;
  uint64_t now = os_now_ms();
  if (found) run_free(*r, false, now); /* clean, as taken */
  run_shrink(&x, n, now);
  *r = x;
  return true;
}

void *large_alloc(heap_t *heap, size_t size, size_t align, bool zero) {
  unsigned shift = os_page_log2();
  size_t bytes = block_bytes(size);
  uint32_t n = (uint32_t)(bytes >> shift), a = align > os_page_size() ? (uint32_t)(align >> shift) : 1;
  if (n + a - 1 > (REGION_SIZE >> shift) - region_header_pages()) return NULL; /* no region is sure to hold it */
  int c = cache_class(bytes);
  run_t r;
  heap_lock(heap);
  bool ok = false;
  if (!ok && c >= 0) ok = run_cache_pop(&heap->lcache, (unsigned)c, a, &r);
  if (!ok && c >= 0 && (unsigned)c < LARGE_CLASSES && heap == hak_tls_heap) { /* a longer block the owner freed */
    void *p = hot_take_longer(&heap->lhot, (unsigned)c, a << shift);
    if (p) {
      heap_unlock(heap);
      return zero ? large_zero(p, size) : p;
    }
    ok = run_cache_pop_within(&heap->lcache, (unsigned)c + 1, large_reach((unsigned)c), a, &r);
  }
  if (!ok) ok = run_alloc(&heap->pages, n, a, &r);
  if ((!ok || !r.dirty) && c >= 0 && (unsigned)c + 1 < LARGE_CLASSES)
    ok = longer_cached(heap, (unsigned)c, n, a, ok, &r);
  heap_t *lender = NULL;
  if (!ok || !r.dirty) { /* pages to fault in: another heap's resident ones first */
    run_t lent;
    lender = heap_lend_run(heap, n, a, c, ok, &lent);
    if (lender && ok) run_free(r, false, os_now_ms()); /* clean, as taken */
    if (lender) r = lent;
  }
  if (lender) { /* the block is the lender's: its free goes back there */
    live_add(lender, 0, run_bytes(r));
    heap_unlock(lender);
    ok = true;
  }
  while (!ok && (region_grow(&heap->pages) || region_new(&heap->pages, heap))) ok = run_alloc(&heap->pages, n, a, &r);
  if (ok && !lender) live_add(heap, 0, run_bytes(r));
  heap_unlock(heap);
  if (!ok) return NULL;
  bytes = run_bytes(r); /* a cached run of the class may be longer than asked: free counts its length */
  char *p = run_addr(r);
  if (zero && r.dirty) large_zero(p, size);
  stat_alloc(STAT_ROW_LARGE, bytes);
  return p;
}

void *large_alloc_resident(heap_t *heap, size_t size, size_t align, bool zero) {
  size_t bytes = block_bytes(size);
  unsigned shift = os_page_log2();
  uint32_t n = (uint32_t)(bytes >> shift), a = align > os_page_size() ? (uint32_t)(align >> shift) : 1;
  int c = cache_class(bytes);
  run_t r;
  heap_lock(heap);
  bool ok = (c >= 0 && run_cache_pop(&heap->lcache, (unsigned)c, a, &r)) || run_alloc_resident(&heap->pages, n, a, &r);
  if (ok) live_add(heap, 0, run_bytes(r));
  heap_unlock(heap);
  if (!ok) return NULL;
  stat_alloc(STAT_ROW_LARGE, run_bytes(r));
  return zero ? large_zero(run_addr(r), size) : run_addr(r);
}

void *large_alloc_hot(heap_t *heap, size_t size, size_t align) {
  large_hot_t *h = &heap->lhot;
  unsigned c = large_hot_for_pages[(size + os_page_size() - 1) >> os_page_log2()];
  if (c >= LARGE_HOT_CLASSES) return NULL;
  if (!hot_holds(&h->list[c])) {
    run_demand_missed(&h->demand[c], LARGE_HOT_DEPTH_MIN, LARGE_HOT_DEPTH);
    return NULL;
  }
  return hot_take(h, c, align);
}

/* Whether b, tagged as a listed block, is on list l: a double free. */
static hak_noinline bool hot_listed(const slab_t *l, const block_t *b) {
  for (const block_t *x = l->free; x != slab_end(l) && ((uintptr_t)x->next & BLOCK_FREE_BIT); x = block_link_of(l, x))
    if (x == b) return true;
  return false;
}

/* Opens list c of heap, the calling thread's (its first free), and shows it
 * in the view where the view may show it. */
static void hot_open(heap_t *heap, unsigned c) {
  slab_t *l = &heap->lhot.list[c];
  l->free = slab_end(l);
  l->used = heap->lhot.cap[c] = 0;
  heap->lhot.open |= (uint64_t)1 << c;
  if (heap_large_view_ok && !hak_stats_enabled) heap_show_large(heap, c, true);
}

/* Hides heap's lists from the view, once statistics or the profiler count
 * every malloc (both may start after a list was shown). */
static hak_noinline void hot_hide(heap_t *heap) {
  for (unsigned c = 0; c < LARGE_HOT_CLASSES; c++)
    if (heap->lhot.shown >> c & 1) heap_show_large(heap, c, false);
}

/* The owner's free of p (on a unit no slab holds) onto its list: 1 when
 * kept, 0 when the locked path is to free it (not one of heap's blocks of a
 * hot class, the list at its demand's cap), -1 when p is listed already (a
 * double free). */
static int hot_push(heap_t *heap, void *p) {
  size_t bytes = 0;
  unsigned c = HAKMEM_SECURE ? LARGE_HOT_CLASSES : large_hot_class_of(heap, p, os_page_log2(), &bytes);
  large_hot_t *h = &heap->lhot;
  if (c >= LARGE_HOT_CLASSES) return 0;
  if (unlikely(h->shown && (!heap_large_view_ok || hak_stats_enabled))) hot_hide(heap);
  slab_t *l = &h->list[c];
  if (l->free == NULL) hot_open(heap, c);
  if (large_hot_listed_look(p) && hot_listed(l, p)) return -1;
  if (!hot_fits(h, bytes)) return 0;
  uint32_t n = hot_n(h, c), cap = run_demand_depth(&h->demand[c], LARGE_HOT_DEPTH_MIN);
  if (n >= cap) { /* past its demand: to the locked path */
    run_demand_turned_away(&h->demand[c], LARGE_HOT_DEPTH_MIN);
    return 0;
  }
  /* room for large_free_quick up to the demand; none where each free is
   * counted (statistics), nor where pages are not the 4 KiB it assumes */
  h->cap[c] = (uint16_t)(hak_stats_enabled || os_page_log2() != 12 ? n + 1 : cap);
  l->used = h->cap[c] - n;
  large_hot_put(h, l, p, bytes);
  stat_free(STAT_ROW_LARGE, bytes, true);
  return 1;
}

bool large_free_hot(heap_t *heap, void *p) { return policy_knob(KNOB_PURGE_DELAY_MS) != 0 && hot_push(heap, p) > 0; }

bool large_free(void *p) {
  heap_t *heap = heap_get();
  long delay = policy_knob(KNOB_PURGE_DELAY_MS);
  int hot = delay != 0 ? hot_push(heap, p) : 0;
  if (hot) return hot > 0;
  run_t r = block_run(p, &heap);
  if (r.chunk == NULL) return false;
  stat_free(STAT_ROW_LARGE, run_bytes(r), true);
  uint64_t now = os_now_ms();
  free_locked(heap, r, now, delay);
  heap_unlock(heap);
  if (delay == 0) heap_purge(heap, now, 0, true, NULL);
  return true;
}

#define HOT_TICK_MIN_MS 50
void large_tick(heap_t *heap, uint64_t now) {
  long delay = policy_knob(KNOB_PURGE_DELAY_MS);
  if (delay == 0) hot_close(&heap->lhot);
  hot_sync(&heap->lhot);
  if (heap->lhot.bytes == 0) {
    heap->lhot.drained_ms = now; /* what is pushed from now on was freed after it */
    return;
  }
  if (delay >= 0 && now - heap->lhot.drained_ms >= (uint64_t)MAX(delay, HOT_TICK_MIN_MS)) hot_drain(heap, now);
}

void large_hot_release(heap_t *heap) { hot_drain(heap, os_now_ms()); }

bool large_cache_release(heap_t *heap) {
  large_hot_release(heap);
  heap_lock(heap);
  bool held = heap->lcache.pages != 0;
  if (held) run_cache_flush(&heap->lcache, os_now_ms(), 0);
  heap_unlock(heap);
  return held;
}

size_t large_usable_size(const void *p) {
  heap_t *heap;
  run_t r = block_run(p, &heap);
  if (r.chunk == NULL) return 0;
  size_t n = run_bytes(r);
  heap_unlock(heap);
  return n;
}

bool large_resize(void *p, size_t size) {
  heap_t *heap;
  run_t r = block_run(p, &heap);
  if (r.chunk == NULL) return false;
  size_t old = run_bytes(r);
  unsigned shift = os_page_log2();
  uint32_t n = (uint32_t)(block_bytes(size) >> shift);
  bool dirty, ok = true;
  if (n > r.pages) ok = run_grow(&r, n, false, &dirty);
  else if (n < r.pages) run_shrink(&r, n, os_now_ms());
  n = r.pages;
  if (ok) live_add(heap, old, (size_t)n << shift);
  heap_unlock(heap);
  if (ok) {
    stat_free(STAT_ROW_LARGE, old, true);
    stat_alloc(STAT_ROW_LARGE, (size_t)n << shift);
  }
  return ok;
}
