/* Runs of pages: the free-space manager under the slab units of a region,
 * the Large pool's pages and the huge arenas' units. Layer 1.
 *
 * A run heap owns chunks (a region, an arena); a chunk is cut into pages of
 * one size (4 KiB, 64 KiB, 256 KiB) and every page belongs to one run, free
 * or allocated. Free runs sit in bins by length (exact up to 64 pages, then
 * eight bins per doubling), and a bitmap of the bins that are not empty finds
 * the first that fits in a few instructions: no operation walks the chunks,
 * so none costs more as the heap grows. A freed run merges with its free
 * neighbours. A free run whose pages may be resident ("dirty") knows the
 * stretch of it that may be, and a block placed in it covers as much of that
 * stretch as it can; such runs also sit on a list oldest first, so that
 * purging by age takes the due ones from its head.
 *
 * Not thread-safe: the owner of the run heap holds its lock around every
 * call. */
#ifndef HAKMEM_RUN_H
#define HAKMEM_RUN_H

#include "types.h"

typedef struct run_chunk_s run_chunk_t;
typedef struct run_heap_s run_heap_t;

/* One per free run, from its chunk's pool (the entry of the run's first
 * page names its slot). */
typedef struct run_node_s {
  struct run_node_s *next, *prev;   /* the bin's list, most recently freed first */
  struct run_node_s *dnext, *dprev; /* the heap's dirty list, oldest first */
  uint64_t dirty_ms;                /* when it last became dirty; 0: clean (never touched, or purged) */
  run_chunk_t *chunk;
  uint32_t dlo, dhi;                /* dirty: its pages that may be resident lie in [dlo, dhi) */
  uint32_t page;                    /* the run's first page; in the pool's free stack, the next slot + 1 */
} run_node_t;

/* What a chunk knows of each of its pages, side by side, so that a chunk
 * that holds few runs touches the first page of this array, not one page of
 * each of four. */
typedef struct {
  uint32_t len;     /* at a run's first page (free or allocated): its length; 0 inside runs */
  /* at an allocated run's first page, not in a run cache: its length; 0
   * everywhere else, so that a chunk with no allocated run holds zeros
   * (run_live_pages reads this one word, not len's and the bitmap's) */
  uint32_t live;
  /* at a free run's last page: its first page (checked, not cleared); not
   * kept where the run ends the chunk, which no run follows */
  uint32_t last_of;
  uint32_t node;    /* at a free run's first page: its node's slot */
} run_page_t;

struct run_chunk_s {
  char *base;          /* page 0 */
  uint32_t pages;      /* pages the chunk may hold */
  uint32_t limit;      /* pages [0, limit) are managed; a chunk grows as its memory is mapped */
  uint32_t used;       /* pages in allocated runs */
  run_page_t *pg;      /* by page */
  /* two words per 64 pages, side by side: bit i % 64 of word RUN_FREE:
   * page i starts a free run; of word RUN_CACHED: it starts an allocated
   * run kept in a run cache (read and written under the lock) */
  uint64_t *bits;
  run_heap_t *heap;    /* in the first line, with the words above: what a lockless read needs */
  /* The nodes of the free runs: a chunk holds at most pages / 2 + 1 of them
   * (free runs are merged, so an allocated page lies between two), taken
   * from a pool that hands out the slots freed last first and fresh ones in
   * order, so that the pool's pages in use follow the free runs in use, not
   * the chunk's size. */
  run_node_t *node;
  uint32_t node_free;  /* the pool's stack of freed slots: the top's slot + 1, 0 when empty */
  uint32_t node_top;   /* slots ever handed out */
  run_chunk_t *next, *prev; /* the heap's chunks */
};

#define RUN_BINS 128 /* runs up to 16,384 pages */

struct run_heap_s {
  run_node_t *bin[RUN_BINS], *bin_tail[RUN_BINS]; /* dirty runs first, then clean ones */
  uint64_t nonempty[RUN_BINS / 64];
  run_node_t *dirty_head, *dirty_tail;
  size_t dirty_pages; /* pages of dirty free runs (run_heap_dirty_bytes) */
  _Atomic size_t *dirty_sum; /* not NULL: a total of several heaps' dirty_pages, kept with it */
  size_t free_pages;  /* pages of free runs */
  run_chunk_t *chunks;
  unsigned page_shift;
  uint64_t grew_ms;   /* when a run last joined the dirty list's tail (run_heap_grew_ms) */
  /* run_alloc moves an aligned block past dirty pages to the next
   * multiple only where the heap's blocks are not written whole, as a probe
   * of the dirty pages (mincore) finds now and then: written whole, the
   * pages it skipped would stay resident, unused. */
  bool grid_probe;
  bool probe_resident;  /* the last verdict */
  uint8_t probe_agreed; /* probes in a row that agreed (run.c bounds the count) */
  uint16_t probe_reuse; /* placements left on the verdict */
};

/* h's dirty free bytes and when they last grew, read without its lock (by
 * the learner and the statistics, for every thread's heap). Each heap keeps
 * its own: one total that every thread's Large frees updated made the
 * threads take its cache line in turn. */
hak_inline size_t run_heap_dirty_bytes(const run_heap_t *h) {
  return __atomic_load_n(&h->dirty_pages, __ATOMIC_RELAXED) << h->page_shift;
}
hak_inline uint64_t run_heap_grew_ms(const run_heap_t *h) { return __atomic_load_n(&h->grew_ms, __ATOMIC_RELAXED); }

/* Whether h's blocks are written whole, as its last grid probe found
 * (grid_probe heaps; before the first probe, as its owner set it). Read
 * under the heap's lock. */
hak_inline bool run_heap_written_whole(const run_heap_t *h) { return h->probe_resident; }

/* An allocated run. */
typedef struct {
  run_chunk_t *chunk;
  uint32_t page, pages;
  bool dirty;         /* some of its pages may be resident and hold old data */
  uint32_t dlo, dhi;  /* run_purge_take: the stretch to purge */
} run_t;

#define RUN_FREE 0
#define RUN_CACHED 1
/* The word of chunk c's bitmap `which` (RUN_FREE, RUN_CACHED) that holds
 * page i's bit, and the bit. */
hak_inline uint64_t *run_bits_word(const run_chunk_t *c, uint32_t i, unsigned which) { return &c->bits[i / 64 * 2 + which]; }
hak_inline bool run_bit(const run_chunk_t *c, uint32_t i, unsigned which) { return *run_bits_word(c, i, which) >> (i % 64) & 1; }

/* The metadata bytes of a chunk of `pages` pages (run_chunk_add's mem). */
#define RUN_CHUNK_META_BYTES(pages)                                                                   \
  (((size_t)(pages) / 2 + 1) * sizeof(run_node_t) + (size_t)(pages) * sizeof(run_page_t) +              \
   ((size_t)(pages) + 63) / 64 * 2 * sizeof(uint64_t))
hak_inline size_t run_chunk_meta_bytes(uint32_t pages) { return RUN_CHUNK_META_BYTES(pages); }

void run_heap_init(run_heap_t *h, unsigned page_shift);
/* Adds chunk c, its metadata in mem (run_chunk_meta_bytes(pages) bytes, 8-byte
 * aligned, reading zero: fresh, purged, or left so by run_chunk_remove; it
 * is touched only where used), its pages at base. Pages [0, limit) start
 * as one free run, dirty since dirty_ms (0: clean, never touched or
 * purged). */
void run_chunk_add(run_heap_t *h, run_chunk_t *c, char *base, uint32_t pages, uint32_t limit, void *mem,
                   uint64_t dirty_ms);
/* Manages pages [c->limit, limit) too (now mapped), as a clean free run. */
void run_chunk_grow(run_chunk_t *c, uint32_t limit);
/* Takes c, which holds no allocated run, out of its heap; its metadata
 * reads zero then, for run_chunk_add again. */
void run_chunk_remove(run_chunk_t *c);

/* A run of n pages whose address is a multiple of align pages (a power of
 * two); false when no free run fits. Placed in a dirty stretch, it covers
 * as much of it as it can; aligned, in a heap with grid_probe, it starts on
 * the first multiple of align from the stretch's start, so that blocks of
 * which a program writes only the first pages start where freed ones did,
 * on pages it wrote, not in the middle of a freed block (where the heap's
 * blocks are written whole: on the one before, which covers the stretch's
 * start). */
bool run_alloc(run_heap_t *h, uint32_t n, uint32_t align, run_t *out);
/* run_alloc where the run it finds holds resident pages (it is dirty):
 * false otherwise, nothing taken. */
bool run_alloc_resident(run_heap_t *h, uint32_t n, uint32_t align, run_t *out);
/* Frees allocated run r (whole); dirty: its pages may be resident. Returns
 * whether the chunk now holds no allocated run. */
bool run_free(run_t r, bool dirty, uint64_t now);
/* The same, of which only the first `dirty` pages may be resident. */
bool run_free_prefix(run_t r, uint32_t dirty, uint64_t now);
/* Grows r in place to n pages by taking the free pages after it; false when
 * too few follow, or (dirty_only) when any of those lies outside their run's
 * dirty stretch. *dirty is set when any taken page was dirty. */
bool run_grow(run_t *r, uint32_t n, bool dirty_only, bool *dirty);
/* Whether no allocated run follows r in its chunk: r ends at the chunk's
 * limit, or the free run after it does (growing the chunk lets r grow). */
bool run_ends_chunk(run_t r);
/* Shrinks r in place to n pages (0 < n <= r->pages), freeing the tail dirty. */
void run_shrink(run_t *r, uint32_t n, uint64_t now);
/* Calls fn for every run of c in address order: free, or allocated (ctx is
 * fn's). Under the run heap's lock. */
void run_chunk_walk(run_chunk_t *c, void (*fn)(void *ctx, run_t r, bool free), void *ctx);
/* The length of the allocated run that starts at page of c, read without
 * the lock: exact when the caller holds a live block there (no other
 * thread writes these words then); otherwise 0, or a length that the locked
 * calls will not confirm. Not in a cache (a cached run's node has its time). */
hak_inline uint32_t run_live_pages(const run_chunk_t *c, uint32_t page) {
  if (page >= c->pages) return 0;
  uint32_t n = __atomic_load_n(&c->pg[page].live, __ATOMIC_RELAXED);
  return n <= c->pages - page ? n : 0;
}
/* run_live_pages for a page below the length c was added with (its live
 * words cover that, whatever its limit or a later lower length): one read,
 * no bound. */
hak_inline uint32_t run_chunk_live(const run_chunk_t *c, uint32_t page) {
  return __atomic_load_n(&c->pg[page].live, __ATOMIC_RELAXED);
}
/* The allocated run that starts at page of c; {NULL} when none does. */
run_t run_at(run_chunk_t *c, uint32_t page);

hak_inline char *run_addr(run_t r) { return r.chunk->base + ((size_t)r.page << r.chunk->heap->page_shift); }
hak_inline size_t run_bytes(run_t r) { return (size_t)r.pages << r.chunk->heap->page_shift; }
/* The address and size of what run_purge_take's run may hold resident. */
hak_inline char *run_dirty_addr(run_t r) { return r.chunk->base + ((size_t)r.dlo << r.chunk->heap->page_shift); }
hak_inline size_t run_dirty_bytes_of(run_t r) { return (size_t)(r.dhi - r.dlo) << r.chunk->heap->page_shift; }

/* ---- a cache of freed runs by size class ------------------------------------
 * Freed runs of the same class kept whole, last in first out, before they
 * merge into the free runs: the next block of the class takes the pages the
 * last one freed (at the same place, so its first and last pages are the
 * ones already resident), as a slab's free list does for smaller blocks. A
 * class is a stack of slots in the cache itself and a cached run is marked
 * in its chunk's bitmap (RUN_CACHED): pushing, popping and the double-free test read
 * no page node (a node is a cache miss a run; the bitmap's word is not). */
#define RUN_CACHE_CLASSES 64
#define RUN_CACHE_DEPTH 64

/* How many blocks a cache's class keeps at most, following demand as a
 * thread cache's list length does: min at first, one more each time an
 * allocation finds the class empty (up to max), one less each time the class
 * turns away as many blocks as it keeps. A class freed into more than it is
 * allocated from (the final size of a buffer that grew past the others)
 * keeps few. Used by the run cache and by the Large pool's stacks. */
typedef struct {
  uint8_t extra; /* depth - min */
  uint8_t over;  /* blocks turned away since the depth last changed */
} run_demand_t;
hak_inline uint32_t run_demand_depth(const run_demand_t *d, uint32_t min) { return min + d->extra; }
hak_inline void run_demand_missed(run_demand_t *d, uint32_t min, uint32_t max) {
  if (min + d->extra < max) d->extra++, d->over = 0;
}
hak_inline void run_demand_turned_away(run_demand_t *d, uint32_t min) {
  if (++d->over >= min + d->extra) {
    d->over = 0;
    if (d->extra) d->extra--;
  }
}

typedef struct {
  run_chunk_t *chunk;
  uint32_t page;
  uint32_t ms; /* when it was freed: the clock's low 32 bits (ages are differences) */
} run_cache_slot_t;

typedef struct {
  uint32_t n[RUN_CACHE_CLASSES];
  run_demand_t demand[RUN_CACHE_CLASSES]; /* each class's depth, from RUN_CACHE_DEPTH_MIN */
  size_t pages;   /* in all classes (atomic stores: read without the lock) */
  unsigned evict; /* the class run_cache_trim takes from next */
  run_cache_slot_t slot[RUN_CACHE_CLASSES][RUN_CACHE_DEPTH]; /* oldest first */
} run_cache_t;

/* Keeps allocated run r in class cls, freed at now, unless the class holds
 * max_n runs (at most RUN_CACHE_DEPTH), or its depth (run_demand_t: a pop
 * that finds the class empty is a miss), or the cache max_pages pages
 * already; false then. */
#define RUN_CACHE_DEPTH_MIN 2
bool run_cache_push(run_cache_t *k, unsigned cls, run_t r, uint64_t now, uint32_t max_n, size_t max_pages);
/* The run freed last in class cls, no longer cached, where its first page
 * is a multiple of align pages (a power of two); false when none is kept,
 * or that one is not aligned so. */
bool run_cache_pop(run_cache_t *k, unsigned cls, uint32_t align, run_t *out);
/* The same of the first class from first to last that keeps a run, with
 * no miss counted to any class's demand. */
bool run_cache_pop_within(run_cache_t *k, unsigned first, unsigned last, uint32_t align, run_t *out);
/* Frees the oldest run of each class in turn until the cache holds at most
 * max_pages: a bound that shrank with the heap's live bytes. */
void run_cache_trim(run_cache_t *k, size_t max_pages, uint64_t now);
/* Frees (dirty, since they were cached) the runs kept for age ms or more;
 * returns whether any run stays cached. */
bool run_cache_flush(run_cache_t *k, uint64_t now, uint64_t age);
/* Whether allocated run r sits in a cache (freed). */
hak_inline bool run_cached(run_t r) { return run_bit(r.chunk, r.page, RUN_CACHED); }

/* Purges the dirty free runs due, oldest first: those dirty delay ms or
 * more, and as many more as bring the heap's dirty pages down to keep, each
 * taken out like an allocated run (nothing is placed on it or merged into it
 * meanwhile) and returned clean, with lock (held on entry and on return)
 * released around its system call; a run due for the excess alone sheds the
 * excess from the top of its stretch and keeps the rest. What a run sheds
 * counts against the excess once: a purged run that merges with dirty
 * neighbours on both sides counts as dirty again (the stretch spans it),
 * and purging it again would empty the heap. Returns the bytes purged. */
size_t run_purge_due(run_heap_t *h, hak_lock_t *lock, uint64_t now, uint64_t delay, size_t keep);
/* The age (ms) of the oldest dirty free run, or UINT64_MAX when none is. */
uint64_t run_dirty_since(const run_heap_t *h);
/* Adds the dirty pages of runs dirty for less than age_ms[k], for k < n, to
 * young[k]. */
void run_dirty_by_age(const run_heap_t *h, uint64_t now, size_t n, const uint64_t age_ms[], size_t young[]);

#endif
