/* Regions: 4 MiB of address space aligned to its size, the unit in which
 * hakmem takes memory from the OS. Layer 1.
 *
 * Placement. Regions (and huge arenas) go into a window of the address space
 * (4 GiB to 1 TiB, where the kernel places nothing of its own accord) at a
 * random start, one after another: map.h's fast map covers that window.
 * Where the kernel refuses (a mapping of someone else's there, an old
 * kernel, a sanitizer's fixed layout), a region goes wherever the kernel
 * puts it, and free takes a slower path for its blocks.
 *
 * Growth. A region in the window maps its first 256 KiB and grows by
 * doubling as its pages are needed: address space follows use (RLIMIT_AS),
 * and the rest of its 4 MiB stays free for it. A heap's fifth region and
 * later ones are mapped whole at once (region_new).
 *
 * Pages. A region's header comes first: one slab descriptor per 64 KiB unit
 * (so free finds a block's slab by masking and indexing) and the run chunk
 * of the pages after the header, which its heap's run heap hands out, as
 * slabs (whole units) and as Large blocks (whole pages) alike. A unit no
 * slab holds has a descriptor that is its own head (a NULL head, as a zero
 * header reads), with no owner.
 *
 * The pool. An empty region waits in a bounded pool, its pages returned
 * after the purge delay, before it is unmapped. */
#ifndef HAKMEM_REGION_H
#define HAKMEM_REGION_H

#include "map.h"
#include "run.h"
#include "types.h"

#define REGION_MAX_PAGES (REGION_SIZE / 4096) /* with the smallest page size */

typedef struct region_s {
#if HAKMEM_SECURE
  char guard[4096]; /* PROT_NONE: nothing runs into the header from below */
#endif
  slab_t slabs[REGION_UNITS]; /* those of the header's units describe no slab */
  /* The first lines of page-aligned blocks share one set of the L1 cache
   * (their offsets are multiples of 4 KiB, as this point's is); the chunk's
   * words, which every Large malloc and free reads, lie 7 lines past it. */
  char set_skew[7 * 64];
  run_chunk_t pages;          /* the pages after the header */
  size_t mapped;              /* bytes mapped from the region's start */
  void *owner;                /* the heap whose run heap holds it */
  /* Bit u: unit u's descriptor may have been written since the header last
   * read zero (sticky): a pooled region's reuse clears only those. */
  uint64_t slab_units;
  /* Bit u: unit u's row of remote_bits may have been written (sticky).
   * A slab's start clears only such rows: reading a never-written row
   * would make its page resident for nothing. */
  _Atomic uint64_t remote_units;
  /* the chunk's page metadata, right after it on the page after the
   * descriptors: a region that holds a few slabs touches three pages of
   * its header (the remote bits only where other threads free) */
  _Alignas(64) uint8_t page_meta[RUN_CHUNK_META_BYTES(REGION_MAX_PAGES)];
  /* Remote frees: one bit a block, by its index in its slab, a slab's bits
   * running on over its units (slab.c) */
  _Alignas(64) _Atomic uint64_t remote_bits[REGION_UNITS][REMOTE_BITS_PER_UNIT / 64];
} region_t;

hak_inline region_t *region_of(const void *p) { return (region_t *)((uintptr_t)p & ~(REGION_SIZE - 1)); }
/* The descriptor of p's unit in region r: a slab's head, one of its other
 * units (which mirror what free's fast path reads, slab.h), or a free unit. */
hak_inline slab_t *unit_in(region_t *r, const void *p) { return &r->slabs[((uintptr_t)p >> UNIT_SHIFT) & (REGION_UNITS - 1)]; }
/* The slab of unit descriptor d: its head's descriptor. One that no slab
 * has written yet (zero: a fresh region's header is touched only where its
 * units are used) heads itself. */
hak_inline slab_t *unit_head(slab_t *d) {
  slab_t *h = d->head;
  return h ? h : d;
}
hak_inline slab_t *slab_in(region_t *r, const void *p) { return unit_head(unit_in(r, p)); }
hak_inline slab_t *slab_of(const void *p) { return slab_in(region_of(p), p); }
/* unit_in for p in map entry i: the region's address is i shifted back,
 * which the compiler would otherwise recompute from p (free: one
 * instruction less). The empty asm hides that i came from p. No load. */
hak_inline slab_t *unit_of_entry(size_t i, const void *p) {
  __asm__("" : "+r"(i));
  return unit_in((region_t *)(i << REGION_SHIFT), p);
}
/* slab_of(p) for p in map entry i. */
hak_inline slab_t *slab_of_entry(size_t i, const void *p) { return unit_head(unit_of_entry(i, p)); }
hak_inline char *slab_start(const slab_t *s) {
  region_t *r = region_of(s);
  return (char *)r + (size_t)(s - r->slabs) * UNIT_SIZE;
}
/* A block starts where an address's low 32 bits are a multiple of the block
 * size; a slab's first block is the first such address in it. So whether p
 * starts a block takes one multiply and one compare, with no slab offset:
 * for n < 2^32, n * ceil(2^64 / d) mod 2^64 < ceil(2^64 / d) exactly when d
 * divides n. A size that is a multiple of an alignment keeps its blocks
 * aligned (2^32 is a multiple of the alignment too). */
hak_inline bool slab_block_at(const slab_t *s, const void *p) {
  uint64_t n = (uint32_t)(uintptr_t)p;
#if HAK_ASM_EQ /* both operands from memory: no register for divc on free's fast path */
  bool below;
  __asm__("imulq %2, %0\n\tcmpq %2, %0" : "+r"(n), "=@ccb"(below) : "m"(s->divc));
  return below;
#else
  return n * s->divc < s->divc;
#endif
}
hak_inline char *slab_first(const slab_t *s) { return s->first; }
/* The end of the slab's last whole block (NULL for an empty descriptor,
 * whose first is NULL). */
hak_inline char *slab_blocks_end(const slab_t *s) {
  return (char *)((uintptr_t)s->first + (size_t)s->capacity * s->bsize);
}

/* ---- region memory ----------------------------------------------------- */

/* Address space for `size` bytes (a multiple of REGION_SIZE) aligned to
 * REGION_SIZE, of which the first `first` bytes are mapped (all of it
 * outside the window: *mapped tells). Its map entries read MAP_RESERVED
 * until the caller sets them up: never MAP_NONE, which placement reads as
 * free address space (another thread would place there meanwhile, past
 * what is mapped). NULL when the OS refuses. */
char *region_space(size_t size, size_t first, size_t *mapped);
/* The same in the window only: NULL where it has no room or the kernel will
 * not place there (nothing is mapped then). */
char *region_space_window(size_t size, size_t first, size_t *mapped);
/* Maps more of a region's space, up to want bytes from its start; false
 * when it cannot (*taken: because something else is mapped there). */
bool region_space_grow(char *base, size_t *mapped, size_t want, bool *taken);
/* Unmaps [base, base+mapped) of space of `size` bytes and clears its entries. */
void region_space_free(char *base, size_t size, size_t mapped);

/* A region's memory: from the pool, or new (first bytes mapped). Its map
 * entries read MAP_RESERVED (region_space) until the caller sets them, its
 * header done. *advised: the bytes from its start that huge pages are
 * already kept off (a pooled region's, before it grew: 0 for a new one). */
char *region_get(size_t first, size_t *mapped, bool *dirty, size_t *advised);
/* An empty region to the pool (its pages dirty since now): past the pool's
 * bound it waits there until its purge, then goes back to the OS (at once
 * when the pool is full, or with purging at once or never). */
void region_put(char *base, size_t mapped, uint64_t now);
/* Purges pooled regions dirty for delay ms; unmap: unmaps them all. Returns
 * the bytes given back; *pending: whether dirty ones remain. */
size_t region_pool_purge(uint64_t now, uint64_t delay, bool unmap, bool *pending);
/* Resident bytes of the pooled regions (statistics). */
size_t region_pool_resident(void);
/* Takes (or releases) the pool's and the placement's locks around fork. */
void region_fork_lock(bool lock);

/* ---- regions of a heap --------------------------------------------------- */

/* The pages before a region's first page run (its header), in run pages. */
uint32_t region_header_pages(void);
/* A new region for run heap `pages` (owned by `owner`): false when the OS
 * refuses. */
bool region_new(run_heap_t *pages, void *owner);
/* Grows the newest region of the heap that can grow; false when none can. */
bool region_grow(run_heap_t *pages);
/* A span of n units made a slab's (its head descriptor returned, kind and
 * owner still unset); NULL when the run heap has no room. *dirty: its pages
 * may be resident. */
slab_t *region_span_alloc(run_heap_t *pages, size_t n, bool *dirty);
/* Gives span s back (its pages dirty); its descriptors read as free again, so
 * that a stale pointer into it is caught by free. Returns whether its region
 * now holds nothing. */
bool region_span_free(slab_t *s, uint64_t now);
/* Whether region r may go: it holds nothing and is not its heap's last. */
bool region_spare(region_t *r);
/* Takes empty region r out of its run heap and gives it to the pool. */
void region_release(region_t *r, uint64_t now);
/* Resident bytes of a region's parts (statistics). */
typedef struct {
  size_t meta;   /* its header */
  size_t slabs;  /* slab spans */
  size_t slab_used; /* of slabs: blocks handed out, by their descriptors (an estimate: remote frees not yet collected count) */
  size_t runs;   /* allocated runs that are not slabs: Large blocks, live or cached */
  size_t cached; /* of runs: those in a run cache (freed) */
  size_t free;   /* free runs */
} region_usage_t;
/* Adds region r's resident bytes to *u; the caller holds its heap's lock. */
void region_usage(region_t *r, region_usage_t *u);
/* Whether [lo, hi) overlaps a pooled region (statistics). */
bool region_pool_overlaps(uintptr_t lo, uintptr_t hi);
/* Bytes of slab spans handed out (all heaps). */
extern _Atomic size_t region_span_bytes;
/* Regions mapped now. */
extern _Atomic size_t region_count;

#endif
