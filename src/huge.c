/* Huge blocks: arenas of units, and mappings of their own. */
#define _GNU_SOURCE
#include "huge.h"

#include <string.h>

#include "heap.h"
#include "map.h"
#include "out.h"
#include "policy.h"
#include "region.h"
#include "run.h"
#include "stats.h"

#define UNIT_BITS 18 /* 256 KiB units */
#define ARENA_UNIT ((size_t)1 << UNIT_BITS)
#define ARENA_FIRST ((size_t)16 << 20)
#define ARENA_MAX ((size_t)1 << 30)
#define ARENA_BLOCK_MAX (ARENA_MAX / 4) /* larger blocks are mapped on their own */
#define HUGE_MAGIC 0x68616b6d656d4855ull
#define HUGE_RESERVE 2 /* an own mapping that realloc grows reserves twice its need */
/* Where the shard's probe finds blocks written at their head only, a block
 * of n units starts on a multiple of the largest power of two of units up
 * to n, at most this many (its grid): the program then writes its first
 * pages where freed blocks wrote theirs (run_alloc), and the pages it keeps
 * resident are bounded by the grid's points, not by every unit's. */
#define HUGE_GRID_UNITS 8

/* An arena's metadata, in a mapping of its own: the run chunk of its units
 * and, at each block's first unit, its usable size and how many of its units
 * may be resident: its usable ones, and any dirty ones it was given to grow
 * into (its free must not pass those as clean). */
typedef struct arena_s {
  run_chunk_t chunk;
  struct arena_s *next; /* the shard's arenas, under its lock */
  int slot;             /* its index in arenas[] (map kind MAP_ARENA + slot) */
  char *base;
  size_t size;   /* its address space, whose map entries name it */
  size_t mapped; /* the bytes mapped from base: its chunk's units */
  size_t *usable;
  uint32_t *touched;
  _Alignas(8) unsigned char meta[];
} arena_t;

static uint32_t units_of(size_t bytes) { return (uint32_t)((bytes + ARENA_UNIT - 1) >> UNIT_BITS); }

/* The units of the block at unit page of a that may be resident, within
 * its pages: those its uses touched, and its usable size's (what the
 * program may have written) at least. */
static uint32_t touched_units(const arena_t *a, uint32_t page, uint32_t pages) {
  return (uint32_t)MIN(MAX(a->touched[page], units_of(a->usable[page])), pages);
}

static size_t arena_meta_bytes(size_t units) {
  return os_page_round(sizeof(arena_t) + run_chunk_meta_bytes((uint32_t)units) + units * (sizeof(size_t) + sizeof(uint32_t)));
}

/* The header of a block with a mapping of its own: at the mapping's start,
 * a page before the block. */
typedef struct own_s {
  uint64_t magic;
  char *block;     /* the pointer handed out */
  char *map;       /* the mapping */
  size_t map_size;
  size_t usable;
  struct own_s *next, *prev; /* every own mapping, under huge_lock (statistics) */
} own_t;

/* The arenas are split in shards, each with its own lock, run heap and
 * BigCache, so that threads placing huge blocks at once do not queue on
 * one lock. A thread places its blocks in its heap's shard (heaps take the
 * shards in turn as they are made); a block goes back to the shard of its
 * arena, whichever thread frees it. Arena slot k belongs to shard
 * k % HUGE_SHARDS, so a pointer's map entry names its shard before anything
 * is read through it. */

typedef struct {
  _Alignas(64) hak_lock_t lock; /* its arenas, its run heap and what follows */
  run_heap_t runs;
  arena_t *arenas;  /* its arenas, linked */
  arena_t *growing; /* the arena arena_grow maps more of */
  _Atomic size_t next_arena; /* the next arena's size: written under the lock, read before it */
  _Atomic uint64_t hit_ms;   /* when a block was last placed on its cached pages */
} shard_t;

static shard_t shards[HUGE_SHARDS];
static _Atomic size_t shards_dirty; /* the shards' dirty pages (units), kept by their run heaps */
static hak_lock_t huge_lock; /* the arena slots and the own mappings' list */
static own_t *owns;
static arena_t *arenas[MAP_ARENAS];
_Atomic uint64_t huge_reused_bytes;

/* The calling thread's shard: its heap's, so that a thread that takes the
 * heap of one that exited finds the blocks that one freed. */
static shard_t *shard_mine(void) { return &shards[heap_get()->serial % HUGE_SHARDS]; }

void huge_init(void) {
  for (shard_t *sh = shards; sh < shards + HUGE_SHARDS; sh++) {
    run_heap_init(&sh->runs, UNIT_BITS);
    sh->runs.grid_probe = true;
    sh->runs.probe_resident = true; /* written whole until a probe finds otherwise: no gaps left before it looks */
    sh->runs.dirty_sum = &shards_dirty;
    atomic_store_explicit(&sh->next_arena, ARENA_FIRST, memory_order_relaxed);
  }
}

static size_t shards_cached_bytes(void) { return atomic_load_explicit(&shards_dirty, memory_order_relaxed) << UNIT_BITS; }

/* A held block serves a malloc of its units or up to a third fewer (it has
 * at most half more): buffers whose sizes vary by that much would otherwise
 * be cut and grown by turns, each under the lock. */
#define HELD_SLACK 2
_Static_assert(ARENA_MAX >> UNIT_BITS < ARENA_UNIT, "a held word's units fit below its address");

static char *held_block(uintptr_t w) { return (char *)(w & ~(ARENA_UNIT - 1)); }
static size_t held_units(uintptr_t w) { return w & (ARENA_UNIT - 1); }

/* The BigCache's bound in units, less what the other shards cache and the
 * block the calling thread holds (sh's own count holds still under its
 * lock, which the caller holds). */
static size_t cache_cap_pages(const shard_t *sh) {
  size_t cap = ((size_t)policy_knob(KNOB_BIGCACHE_MB) << 20) >> UNIT_BITS;
  size_t others = (shards_cached_bytes() - run_heap_dirty_bytes(&sh->runs)) >> UNIT_BITS;
  others += held_units(atomic_load_explicit(&heap_get()->huge_held, memory_order_relaxed));
  return cap > others ? cap - others : 0;
}

/* ---- arenas ------------------------------------------------------------------ */

/* Maps an arena for at least n units. In the window an arena is a slot of
 * ARENA_MAX bytes of address space that maps the next size in the doubling
 * and then grows in place (arena_grow): its blocks share one run chunk,
 * whose free runs merge across what was mapped apart, while the address
 * space mapped follows use (RLIMIT_AS). Outside the window an arena is a
 * mapping of that size, or a smaller one (whole regions) where the OS
 * refuses that much. Called without the lock; returns whether one was
 * added. */
static bool arena_new(shard_t *sh, size_t n) {
  size_t need = align_up(n * ARENA_UNIT, REGION_SIZE), mapped;
  size_t size = MAX(atomic_load_explicit(&sh->next_arena, memory_order_relaxed), need);
  char *base = region_space_window(ARENA_MAX, size, &mapped); /* reserved until its slot is known */
  if (base) {
    size = ARENA_MAX;
  } else {
    while ((base = region_space(size, size, &mapped)) == NULL && size > need)
      size = MAX(align_up(size / 2, REGION_SIZE), need);
    if (base == NULL) return false;
  }
  size_t units = size >> UNIT_BITS;
  arena_t *a = os_map(arena_meta_bytes(units));
  if (a == NULL) {
    region_space_free(base, size, mapped);
    return false;
  }
  a->base = base;
  a->size = size;
  a->mapped = mapped;
  a->usable = (size_t *)(a->meta + run_chunk_meta_bytes((uint32_t)units));
  a->touched = (uint32_t *)(a->usable + units);
  int k = -1;
  hak_lock(&sh->lock);
  hak_lock(&huge_lock);
  for (int i = (int)(sh - shards); i < MAP_ARENAS && k < 0; i += HUGE_SHARDS)
    if (arenas[i] == NULL) k = i;
  if (k >= 0) {
    arenas[k] = a;
    a->slot = k;
    map_set(base, size, (uint8_t)(MAP_ARENA + k));
  }
  hak_unlock(&huge_lock);
  if (k >= 0) {
    run_chunk_add(&sh->runs, &a->chunk, base, (uint32_t)units, (uint32_t)(mapped >> UNIT_BITS), a->meta, 0);
    a->next = sh->arenas;
    sh->arenas = a;
    if (mapped < size) sh->growing = a;
    if (mapped >= sh->next_arena) atomic_store_explicit(&sh->next_arena, MIN(mapped * 2, ARENA_MAX), memory_order_relaxed);
  }
  hak_unlock(&sh->lock);
  if (k < 0) {
    os_unmap(a, arena_meta_bytes(units));
    region_space_free(base, size, mapped);
  }
  return k >= 0;
}

/* Maps more of the shard's growing arena's slot: twice what it has, and at
 * least n units more, up to its end. Under the shard's lock; false when it
 * cannot (its slot is all mapped, or something else lies in it). */
static bool arena_grow(shard_t *sh, size_t n) {
  arena_t *a = sh->growing;
  if (a == NULL) return false;
  size_t want = MIN(MAX(a->mapped * 2, a->mapped + align_up(n * ARENA_UNIT, REGION_SIZE)), a->size);
  bool taken;
  if (!region_space_grow(a->base, &a->mapped, want, &taken)) {
    if (taken) sh->growing = NULL; /* this arena stays as it is */
    return false;
  }
  run_chunk_grow(&a->chunk, (uint32_t)(a->mapped >> UNIT_BITS));
  if (a->mapped == a->size) sh->growing = NULL;
  return true;
}

/* Unmaps the shard's arenas that hold no block and no cached page (under
 * the locks; the unmapping after them). Returns how many. */
static size_t arenas_unmap_empty(shard_t *sh) {
  arena_t *gone = NULL;
  size_t n = 0;
  hak_lock(&sh->lock);
  for (arena_t **at = &sh->arenas, *a; (a = *at) != NULL;) {
    if (a->chunk.used) {
      at = &a->next;
      continue;
    }
    *at = a->next;
    run_chunk_remove(&a->chunk);
    hak_lock(&huge_lock);
    map_set(a->base, a->size, MAP_NONE);
    arenas[a->slot] = NULL;
    hak_unlock(&huge_lock);
    if (sh->growing == a) sh->growing = NULL;
    a->next = gone;
    gone = a;
    n++;
  }
  if (n) atomic_store_explicit(&sh->next_arena, ARENA_FIRST, memory_order_relaxed);
  hak_unlock(&sh->lock);
  for (arena_t *a = gone, *next; a != NULL; a = next) {
    next = a->next;
    size_t units = a->size >> UNIT_BITS;
    region_space_free(a->base, a->size, a->mapped);
    os_unmap(a, arena_meta_bytes(units));
  }
  return n;
}

/* The shard of a pointer whose map entry is kind, or NULL where it is no
 * arena's. */
static shard_t *shard_of(uint8_t kind) {
  bool in = kind >= MAP_ARENA && kind < MAP_ARENA + MAP_ARENAS;
  return in ? &shards[(kind - MAP_ARENA) % HUGE_SHARDS] : NULL;
}

/* The arena that p, whose map entry is kind, may start a block of, and the
 * block's first unit in *unit; NULL when p cannot start one. */
static arena_t *arena_for(const void *p, uint8_t kind, uint32_t *unit) {
  bool in = kind >= MAP_ARENA && kind < MAP_ARENA + MAP_ARENAS;
  arena_t *a = in ? __atomic_load_n(&arenas[kind - MAP_ARENA], __ATOMIC_RELAXED) : NULL;
  if (a == NULL || (const char *)p < a->base || ((uintptr_t)p & (ARENA_UNIT - 1))) return NULL;
  *unit = (uint32_t)(((const char *)p - a->base) >> UNIT_BITS);
  return a;
}

/* The run of arena block p, its shard's lock held; {NULL} when p does not
 * start one. */
static run_t arena_block(const void *p, uint8_t kind) {
  uint32_t unit;
  arena_t *a = arena_for(p, kind, &unit);
  return a ? run_at(&a->chunk, unit) : (run_t){0};
}

static arena_t *arena_of_run(run_t r) { return (arena_t *)((char *)r.chunk - offsetof(arena_t, chunk)); }

/* ---- the BigCache ------------------------------------------------------------- */

/* Purges the shard's runs older than age, then its oldest while it caches
 * more than keep units or has not shed cut units yet, each outside the
 * lock, which the caller holds. */
static size_t cache_purge_locked(shard_t *sh, uint64_t now, uint64_t age, size_t keep, size_t cut) {
  run_heap_t *h = &sh->runs;
  size_t n = run_purge_due(h, &sh->lock, now, age, MIN(keep, h->dirty_pages > cut ? h->dirty_pages - cut : 0));
  if (n) stat_add(bytes_purged, n);
  return n;
}

static size_t cache_purge(shard_t *sh, uint64_t now, uint64_t age, size_t keep, size_t cut) {
  hak_lock(&sh->lock);
  size_t n = cache_purge_locked(sh, now, age, keep, cut);
  hak_unlock(&sh->lock);
  return n;
}

/* Purges the shard's runs due by age or beyond the size bound (all with
 * force), its lock held. */
static size_t cache_evict_locked(shard_t *sh, uint64_t now, bool force) {
  uint64_t age = force ? 0 : (uint64_t)policy_knob(KNOB_BIGCACHE_AGE_MS);
  return cache_purge_locked(sh, now, age, force ? 0 : cache_cap_pages(sh), 0);
}

/* Huge blocks took n units of fresh pages: unless a block was placed on the
 * shard's cached pages within the cache's age, it sheds as many, oldest
 * first. A program whose blocks only grow (a table or a buffer doubled, the
 * old one freed) then keeps no more resident than with blocks unmapped at
 * free; one that reuses what it frees keeps its cache. */
static void cache_yield(shard_t *sh, size_t n) {
  if (n == 0 || policy_knob(KNOB_PURGE_DELAY_MS) < 0) return;
  uint64_t now = os_now_ms();
  if (now - atomic_load_explicit(&sh->hit_ms, memory_order_relaxed) >= (uint64_t)policy_knob(KNOB_BIGCACHE_AGE_MS))
    cache_purge(sh, now, UINT64_MAX, SIZE_MAX, n);
}

void huge_cached_by_age(uint64_t now, size_t n, const uint64_t age_ms[], size_t young[]) {
  for (size_t k = 0; k < n; k++) young[k] = 0;
  for (shard_t *sh = shards; sh < shards + HUGE_SHARDS; sh++) {
    hak_lock(&sh->lock);
    run_dirty_by_age(&sh->runs, now, n, age_ms, young);
    hak_unlock(&sh->lock);
  }
  for (size_t k = 0; k < n; k++) young[k] <<= UNIT_BITS;
}

/* ---- sizes and counts ----------------------------------------------------------------- */

/* The usable size of a block of bytes in a run of run_bytes: a quarter more
 * than asked, room that realloc grows into in place, within the run. */
static size_t usable_of(size_t run_bytes, size_t bytes) {
  size_t want = os_page_round(bytes + bytes / 4);
  return want ^ ((want ^ run_bytes) & -(size_t)(run_bytes < want)); /* the less, without a branch: sizes vary */
}

/* A huge block whose usable size went from old to now bytes (old 0: new,
 * now 0: freed), counted in the live bytes and the statistics. Each heap
 * counts its thread's calls, so that no huge malloc or free writes a line
 * that other threads write (huge_live_bytes adds them up). */
static _Atomic int64_t heapless_live; /* the calls of threads with no heap */
static void count_usable(size_t old, size_t now) {
  heap_t *h = heap_get();
  int64_t d = (int64_t)(now - old);
  if (h != &hak_heap_empty) __atomic_store_n(&h->huge_live, h->huge_live + d, __ATOMIC_RELAXED);
  else atomic_fetch_add_explicit(&heapless_live, d, memory_order_relaxed);
  if (old) stat_free(STAT_ROW_HUGE, old, true);
  if (now) stat_alloc(STAT_ROW_HUGE, now);
}

size_t huge_live_bytes(void) {
  int64_t n = atomic_load_explicit(&heapless_live, memory_order_relaxed);
  for (heap_t *h = heap_all(); h; h = h->next_all) n += __atomic_load_n(&h->huge_live, __ATOMIC_RELAXED);
  return n > 0 ? (size_t)n : 0;
}

/* The pages a block of size bytes takes; 0 when no block can be that big. */
static size_t block_bytes(size_t size) {
  return size > ((size_t)1 << ADDRESS_BITS) ? 0 : os_page_round(size ? size : 1);
}

/* Own mapping p (or NULL) counted live; arena_alloc counts its own. */
static void *counted(void *p) {
  if (p) count_usable(0, huge_usable_size(p, map_kind(p)));
  return p;
}

/* ---- blocks in arenas ------------------------------------------------------------ */

/* Places a run of units units aligned to align units in the shard, growing
 * its arena where grow allows; *took: the cached units it took, *fresh: the
 * usable units it took beyond them. */
static bool shard_place(shard_t *sh, size_t units, uint32_t align, size_t bytes, bool grow, run_t *r, size_t *took,
                        size_t *fresh) {
  run_heap_t *h = &sh->runs;
  uint32_t grid = units >= HUGE_GRID_UNITS ? HUGE_GRID_UNITS : (uint32_t)1 << (31 - __builtin_clz((uint32_t)units));
  hak_lock(&sh->lock);
  if (!run_heap_written_whole(h)) align = MAX(align, grid);
  size_t dirty = h->dirty_pages;
  bool ok = run_alloc(h, (uint32_t)units, align, r);
  if (!ok && grow && arena_grow(sh, units + align - 1)) ok = run_alloc(h, (uint32_t)units, align, r);
  if (ok) {
    arena_t *ar = arena_of_run(*r);
    ar->usable[r->page] = usable_of(units << UNIT_BITS, bytes);
    ar->touched[r->page] = r->dirty ? r->pages : units_of(ar->usable[r->page]);
    *took = dirty > h->dirty_pages ? dirty - h->dirty_pages : 0;
    size_t usable = units_of(ar->usable[r->page]);
    *fresh = usable > *took ? usable - *took : 0;
  }
  hak_unlock(&sh->lock);
  return ok;
}

/* Where sh's BigCache holds fewer than n units: another shard whose cache
 * holds n, or with most, the one that caches the most if more than
 * sh's (read without the locks); else NULL. */
static shard_t *shard_caching(const shard_t *sh, size_t n, bool most) {
  size_t top = run_heap_dirty_bytes(&sh->runs) >> UNIT_BITS;
  shard_t *best = NULL;
  if (top >= n) return NULL;
  for (shard_t *o = shards; o < shards + HUGE_SHARDS; o++) {
    size_t k = run_heap_dirty_bytes(&o->runs) >> UNIT_BITS;
    if (o == sh || k <= top) continue;
    if (k >= n) return o;
    top = k, best = o;
  }
  return most ? best : NULL;
}

/* Frees arena block p (map kind kind, in shard sh) as freed at t: its
 * usable size, 0 when p is not one. */
static size_t arena_free(shard_t *sh, void *p, uint8_t kind, uint64_t t) {
  hak_lock(&sh->lock);
  run_t r = arena_block(p, kind);
  size_t usable = r.chunk ? arena_of_run(r)->usable[r.page] : 0;
  /* what may be resident: not the clean units it holds to grow into */
  if (r.chunk) {
    run_free_prefix(r, touched_units(arena_of_run(r), r.page, r.pages), t);
    cache_evict_locked(sh, os_now_ms(), false);
  }
  hak_unlock(&sh->lock);
  return usable;
}

/* ---- the held block ---------------------------------------------------------------
 * A thread's free of an arena block holds it in the thread's heap, still an
 * allocated run to the shard, and its next huge malloc takes it back where
 * it has about the units asked for (HELD_SLACK): a program that frees and
 * allocates buffers of one size pays no lock, no run search, no clock. Any
 * other huge malloc cuts or grows it in place under the lock, or frees it
 * first, so that its units serve the run search; one block only, for the
 * same reason. Purge rounds free a block they find held a purge delay
 * apart, as freed when first seen, and all on trim. The heap's word is the
 * block's address | its units (blocks start on units, and an arena holds
 * fewer units than one holds addresses). */

/* Frees the block of held word w, taken off its heap, as freed at t. Its
 * live bytes and statistics were counted off when it was held. */
static void held_release(uintptr_t w, uint64_t t) {
  char *p = held_block(w);
  uint8_t kind = map_kind(p);
  arena_free(shard_of(kind), p, kind, t);
}

/* Holds p, the calling thread's free of a block in an arena (map kind
 * kind); false where it does not hold p (no heap, purging at once, p
 * larger than the BigCache's bound, a block held already, p not a block's
 * start): the caller frees it then. */
static inline bool held_put(void *p, uint8_t kind) {
  heap_t *heap = heap_get();
  /* A block held already was not taken since: frees in a row (a burst
   * freed) gain nothing from holding, and the first one stays. Only the
   * owner makes the word non-zero: where it reads 0, a store holds p; a
   * purge round may empty it, never fill it. */
  uintptr_t old = atomic_load_explicit(&heap->huge_held, memory_order_relaxed);
  if (old != 0) {
    if (held_block(old) != p) return false;
    harden_double_free(p); /* returns only to ignore the second free */
    return true;
  }
  uint32_t unit;
  arena_t *a = heap != &hak_heap_empty ? arena_for(p, kind, &unit) : NULL;
  /* p's run is live while the program holds p: read without the lock */
  size_t units = a ? run_live_pages(&a->chunk, unit) : 0, cap = (size_t)policy_knob(KNOB_BIGCACHE_MB) << 20;
  if (units == 0 || (units << UNIT_BITS) > cap || policy_knob(KNOB_PURGE_DELAY_MS) == 0) return false;
  /* read before the word holds p: a purge round may free p from then on */
  size_t usable = __atomic_load_n(&a->usable[unit], __ATOMIC_RELAXED);
  atomic_store_explicit(&heap->huge_held, (uintptr_t)p | units, memory_order_release);
  count_usable(usable, 0);
  size_t cached = shards_cached_bytes() + (units << UNIT_BITS);
  if (cached > cap) huge_cache_shrink(cached - cap);
  return true;
}

/* The held block of word w cut to want units, its tail freed, or grown to
 * them over the free units after it where all of those may be resident
 * (clean ones would fault where a run in the bins might not), under its
 * shard's lock: its units now, or 0 where neither fits (it is freed then).
 * Where blocks are written whole, a cut to less than half is not made: it
 * would split the block's resident run, which a block of its size could
 * use whole, for one the run search places in the run that fits it best.
 * Written sparsely, the cut keeps the new block's head on written pages. */
static size_t held_reshape(uintptr_t w, uint32_t want) {
  char *p = held_block(w);
  uint8_t kind = map_kind(p);
  shard_t *sh = shard_of(kind);
  uint64_t now = os_now_ms();
  hak_lock(&sh->lock);
  run_t r = arena_block(p, kind);
  arena_t *a = arena_of_run(r);
  uint32_t touched = touched_units(a, r.page, r.pages);
  bool dirty = false, ok = true;
  if (want < r.pages) {
    ok = want * 2 >= r.pages || !run_heap_written_whole(&sh->runs);
    if (ok) run_shrink(&r, want, now);
  } else {
    ok = run_grow(&r, want, true, &dirty);
  }
  if (ok) a->touched[r.page] = dirty ? r.pages : MIN(touched, r.pages);
  else run_free_prefix(r, touched, now);
  cache_evict_locked(sh, now, false);
  hak_unlock(&sh->lock);
  return ok ? r.pages : 0;
}

/* Held word w, taken off its heap, for a malloc of want units aligned to
 * align: its units, reshaped where it has too few or too many; 0, the block
 * freed, where that fails or the alignment is more than a unit's. */
static hak_noinline size_t held_refit(uintptr_t w, size_t want, size_t align) {
  if (align > ARENA_UNIT) {
    held_release(w, os_now_ms());
    return 0;
  }
  return held_reshape(w, (uint32_t)want);
}

/* The calling thread's held block for a huge malloc of bytes aligned to
 * align, with units for room bytes at least (realloc's growth), zeroed with
 * zero; NULL, the block freed, where it cannot serve, or none is held. */
static inline void *held_take(size_t bytes, size_t room, size_t align, bool zero) {
  heap_t *heap = heap_get();
  if (atomic_load_explicit(&heap->huge_held, memory_order_relaxed) == 0) return NULL;
  uintptr_t w = atomic_exchange_explicit(&heap->huge_held, 0, memory_order_acq_rel);
  size_t want = units_of(MAX(bytes, room)), have = held_units(w);
  if (w == 0) return NULL;
  if (unlikely(align > ARENA_UNIT || have < want || have - want > want / HELD_SLACK) &&
      (have = held_refit(w, want, align)) == 0)
    return NULL;
  char *p = held_block(w);
  uint32_t unit;
  arena_t *a = arena_for(p, map_kind(p), &unit);
  /* its free passes as dirty what its last use and this one may touch */
  a->touched[unit] = touched_units(a, unit, (uint32_t)have);
  size_t usable = usable_of(have << UNIT_BITS, bytes);
  __atomic_store_n(&a->usable[unit], usable, __ATOMIC_RELAXED);
  count_usable(0, usable);
  if (unlikely(hak_stats_enabled)) stat_inc(huge_held_hits);
  if (zero) os_zero(p, bytes);
  return p;
}

void huge_held_release(heap_t *heap) {
  uintptr_t w = atomic_exchange_explicit(&heap->huge_held, 0, memory_order_acq_rel);
  if (w) held_release(w, os_now_ms());
}

/* Bytes of the blocks the heaps hold. */
static size_t held_bytes(void) {
  size_t n = 0;
  for (heap_t *h = heap_all(); h; h = h->next_all) n += held_units(atomic_load_explicit(&h->huge_held, memory_order_relaxed)) << UNIT_BITS;
  return n;
}

/* Frees the blocks the heaps hold: those a purge delay old, as seen by
 * these calls, or all with force or over the BigCache's bound. Returns
 * their bytes. */
static size_t held_sweep(uint64_t now, bool force) {
  long delay = policy_knob(KNOB_PURGE_DELAY_MS);
  size_t n = 0;
  /* a bound lowered below what they hold (the learner's leaner strategies) frees them all */
  force |= held_bytes() + shards_cached_bytes() > (size_t)policy_knob(KNOB_BIGCACHE_MB) << 20;
  for (heap_t *h = heap_all(); h; h = h->next_all) {
    uintptr_t w = atomic_load_explicit(&h->huge_held, memory_order_relaxed);
    uint64_t seen = __atomic_load_n(&h->huge_seen_ms, __ATOMIC_RELAXED);
    if (w == 0) continue;
    if (!force && __atomic_load_n(&h->huge_seen, __ATOMIC_RELAXED) != w) {
      __atomic_store_n(&h->huge_seen, w, __ATOMIC_RELAXED);
      __atomic_store_n(&h->huge_seen_ms, now, __ATOMIC_RELAXED);
      continue;
    }
    if (!force && (delay < 0 || now - seen < (uint64_t)delay)) continue;
    if (!atomic_compare_exchange_strong_explicit(&h->huge_held, &w, 0, memory_order_acq_rel, memory_order_relaxed)) continue;
    held_release(w, force ? now : seen);
    n += held_units(w) << UNIT_BITS;
  }
  return n;
}

/* ---- placing blocks ---------------------------------------------------------------- */

/* A block in the thread's shard, which grows by a new arena where it must;
 * in another shard's cached units where its own cache holds too few (they
 * cost no page fault and no more memory), or where the OS refuses an
 * arena, in another shard's free units. A block of an arena's first size
 * or more goes to the shard that caches the most, which grows for it: such
 * blocks are few, each costs far more in page faults than in a lock shared
 * with other threads, and one cache then serves them all. The block is
 * counted live here, where its usable size is at hand. */
static hak_noinline void *arena_place(size_t bytes, size_t align, bool zero, size_t room) {
  size_t units = units_of(MAX(bytes, room)), took = 0, fresh = 0;
  uint32_t a = align > ARENA_UNIT ? (uint32_t)(align >> UNIT_BITS) : 1;
  bool big = units >= ARENA_FIRST >> UNIT_BITS;
  shard_t *mine = shard_mine(), *sh = shard_caching(mine, units, big);
  run_t r;
  bool ok = sh != NULL && shard_place(sh, units, a, bytes, big, &r, &took, &fresh);
  if (!ok) {
    sh = mine;
    ok = shard_place(sh, units, a, bytes, true, &r, &took, &fresh) ||
         (arena_new(sh, units + a - 1) && shard_place(sh, units, a, bytes, true, &r, &took, &fresh));
  }
  for (int i = 0; i < HUGE_SHARDS && !ok; i++)
    if (&shards[i] != mine) ok = shard_place(sh = &shards[i], units, a, bytes, false, &r, &took, &fresh);
  if (!ok) return NULL;
  /* a hit: placed on cached pages more than on fresh ones */
  if (took > fresh) atomic_store_explicit(&sh->hit_ms, os_now_ms(), memory_order_relaxed);
  else cache_yield(sh, fresh);
  char *p = run_addr(r);
  count_usable(0, arena_of_run(r)->usable[r.page]); /* the block's: only its owner's calls write it */
  if (r.dirty) {
    stat_inc(huge_cache_hits);
    atomic_fetch_add_explicit(&huge_reused_bytes, bytes, memory_order_relaxed);
    if (zero) os_zero(p, bytes);
  }
  stat_inc(huge_arena_blocks);
  return p;
}

/* The thread's held block where it serves, else a block placed anew. */
static inline void *arena_alloc(size_t bytes, size_t align, bool zero, size_t room) {
  void *held = held_take(bytes, room, align, zero);
  return held ? held : arena_place(bytes, align, zero, room);
}

/* ---- own mappings ----------------------------------------------------------------- */

/* The header of own-mapping block p (map kind `kind`), or NULL. The header is
 * read at the 4 MiB boundary below p (MAP_HUGE) or the page before it
 * (MAP_HUGE_ALIGNED, where p is on the boundary): both mapped whenever the
 * entry is set, so a foreign pointer reads nothing unmapped. */
static own_t *own_lookup(const void *p, uint8_t kind) {
  char *edge = (char *)((uintptr_t)p & ~(REGION_SIZE - 1));
  own_t *h = kind == MAP_HUGE ? (own_t *)edge : kind == MAP_HUGE_ALIGNED ? (own_t *)(edge - os_page_size()) : NULL;
  return h && h->magic == HUGE_MAGIC && h->block == p ? h : NULL;
}

static void own_link(own_t *h) {
  hak_lock(&huge_lock);
  h->prev = NULL;
  h->next = owns;
  if (owns) owns->prev = h;
  owns = h;
  hak_unlock(&huge_lock);
}

static void own_unlink(own_t *h) {
  hak_lock(&huge_lock);
  if (h->prev) h->prev->next = h->next;
  else owns = h->next;
  if (h->next) h->next->prev = h->prev;
  hak_unlock(&huge_lock);
}

/* The address space a growing mapping of need bytes reserves. */
static size_t reserve_for(size_t need) {
  return need * HUGE_RESERVE / HUGE_RESERVE == need ? need * HUGE_RESERVE : need;
}

static void *own_alloc(size_t size, size_t align, size_t reserve) {
  size_t page = os_page_size(), bytes = os_page_round(size);
  bool aligned = align >= REGION_SIZE;
  size_t offset = aligned ? page : MAX(page, align), need = offset + bytes;
  if (need < bytes) return NULL;
  size_t map_size = MAX(need, reserve);
  char *map, *block;
  if (aligned) { /* the block on the boundary, its header the page before: the rest trimmed */
    size_t over = map_size + align;
    char *raw = over > map_size ? os_map(over) : NULL;
    if (raw == NULL) return NULL;
    block = (char *)align_up((uintptr_t)raw + page, align);
    map = block - page;
    if (map > raw) os_unmap(raw, (size_t)(map - raw));
    if (raw + over > map + map_size) os_unmap(map + map_size, (size_t)(raw + over - (map + map_size)));
  } else {
    if ((map = os_map_aligned(map_size, REGION_SIZE)) == NULL) return NULL;
    block = map + offset;
  }
  if (!map_set(block, 1, aligned ? MAP_HUGE_ALIGNED : MAP_HUGE)) {
    os_unmap(map, map_size);
    return NULL;
  }
  own_t *h = (own_t *)map;
  *h = (own_t){HUGE_MAGIC, block, map, map_size, bytes, NULL, NULL};
  own_link(h);
  stat_inc(huge_mapped);
  cache_yield(shard_mine(), units_of(bytes));
  return block;
}

static void own_free(own_t *h) {
  char *map = h->map;
  size_t size = h->map_size;
  own_unlink(h);
  h->magic = 0;
  map_set(h->block, 1, MAP_NONE);
  os_unmap(map, size);
}

/* ---- the interface ------------------------------------------------------------------ */

size_t huge_purge(uint64_t now, bool force, bool unmap, bool *pending) {
  size_t n = held_sweep(now, force);
  for (shard_t *sh = shards; sh < shards + HUGE_SHARDS; sh++) {
    hak_lock(&sh->lock);
    n += cache_evict_locked(sh, now, force);
    bool clean = sh->runs.dirty_pages == 0; /* its arenas that hold no block now hold nothing */
    hak_unlock(&sh->lock);
    if (unmap || clean) n += arenas_unmap_empty(sh);
  }
  if (pending) *pending |= shards_cached_bytes() + held_bytes() != 0;
  return n;
}

size_t huge_cache_shrink(size_t bytes) {
  size_t n = 0;
  uint64_t now = os_now_ms();
  for (int round = 0; round < 2 && n < bytes; round++) {
    if (round) held_sweep(now, true); /* the held blocks give way too, where the caches fall short */
    for (shard_t *sh = shards; sh < shards + HUGE_SHARDS && n < bytes; sh++)
      n += cache_purge(sh, now, UINT64_MAX, SIZE_MAX, (bytes - n + ARENA_UNIT - 1) >> UNIT_BITS);
  }
  return n;
}

size_t huge_cached_bytes(void) { return shards_cached_bytes() + held_bytes(); }

/* Whether an arena may hold a block of bytes aligned to align (else it
 * gets a mapping of its own). */
static bool arena_may_hold(size_t bytes, size_t align) { return bytes <= ARENA_BLOCK_MAX && align <= REGION_SIZE; }

/* A block placed in the arenas where it fits one, else a mapping of its own. */
static hak_noinline void *huge_place(size_t size, size_t bytes, size_t align, bool zero) {
  void *p = arena_may_hold(bytes, align) ? arena_place(bytes, align, zero, 0) : NULL;
  return p ? p : counted(own_alloc(size, align, 0));
}

/* The held block for a block of bytes, where an arena may hold one. */
static inline void *held_for(size_t bytes, size_t align, bool zero) {
  return arena_may_hold(bytes, align) ? held_take(bytes, 0, align, zero) : NULL;
}

void *huge_alloc_held(size_t size, size_t align, bool zero) {
  size_t bytes = block_bytes(size);
  return bytes != 0 ? held_for(bytes, align, zero) : NULL;
}

void *huge_alloc(size_t size, size_t align, bool zero) {
  size_t bytes = block_bytes(size);
  if (bytes == 0) return NULL;
  void *p = held_for(bytes, align, zero);
  return p ? p : huge_place(size, bytes, align, zero);
}

void *huge_alloc_growing(size_t size) {
  size_t bytes = block_bytes(size);
  if (bytes == 0) return NULL;
  size_t room = bytes * 4 / 4 == bytes ? bytes * 4 : bytes; /* room to grow in place: buffers grow by doubling */
  void *p = room <= ARENA_BLOCK_MAX ? arena_alloc(bytes, 0, false, room) : NULL;
  return p ? p : counted(own_alloc(size, 0, reserve_for(os_page_size() + bytes)));
}

/* huge_free's blocks that the thread does not hold. */
static hak_noinline bool huge_release(void *p, uint8_t kind) {
  if (kind == MAP_HUGE || kind == MAP_HUGE_ALIGNED) {
    own_t *h = own_lookup(p, kind);
    if (h == NULL) return false;
    count_usable(h->usable, 0);
    own_free(h);
    return true;
  }
  shard_t *sh = shard_of(kind);
  if (sh == NULL) return false;
  size_t usable = arena_free(sh, p, kind, os_now_ms());
  if (usable == 0) return false;
  count_usable(usable, 0);
  return true;
}

bool huge_free(void *p, uint8_t kind) { return held_put(p, kind) || huge_release(p, kind); }

size_t huge_usable_size(const void *p, uint8_t kind) {
  if (kind == MAP_HUGE || kind == MAP_HUGE_ALIGNED) {
    own_t *h = own_lookup(p, kind);
    return h ? h->usable : 0;
  }
  /* A caller that holds the block reads what only its own calls write, so
   * without the lock (a realloc by small steps asks at every call); any
   * other pointer takes the locked lookup, which says whether it is one. */
  uint32_t unit;
  arena_t *a = arena_for(p, kind, &unit);
  size_t n = a && run_live_pages(&a->chunk, unit) ? __atomic_load_n(&a->usable[unit], __ATOMIC_RELAXED) : 0;
  shard_t *sh = shard_of(kind);
  if (n || sh == NULL) return n;
  hak_lock(&sh->lock);
  run_t r = arena_block(p, kind);
  n = r.chunk ? arena_of_run(r)->usable[r.page] : 0;
  hak_unlock(&sh->lock);
  return n;
}

/* Moves an arena block that cannot grow in place to a mapping of its own
 * that reserves room to grow, its pages moved, not copied. The units it
 * leaves stay mapped (a hole in the arena could be taken by another
 * thread's mmap at once) and read as untouched. NULL where the kernel
 * cannot move pages that way (nothing changed: the caller copies). */
static void *arena_move_out(shard_t *sh, void *p, run_t r, size_t old_usable, size_t size) {
  size_t bytes = os_page_round(size), page = os_page_size(), moved = MIN(old_usable, run_bytes(r));
  char *to = own_alloc(size, page, reserve_for(page + bytes));
  if (to == NULL) return NULL;
  if (!os_move_pages(p, moved, to)) {
    own_free(own_lookup(to, MAP_HUGE));
    return NULL;
  }
  /* the units moved whole read as untouched; what lies beyond may be
   * resident still */
  uint32_t whole = (uint32_t)(moved >> UNIT_BITS);
  uint64_t now = os_now_ms();
  hak_lock(&sh->lock);
  if (whole > 0 && whole < r.pages) run_shrink(&r, whole, now);
  run_free(r, whole == 0, now);
  hak_unlock(&sh->lock);
  return to;
}

/* Maps the addresses after h's mapping up to size bytes, where nothing is
 * mapped: its own pages may lie in several of the kernel's mappings (a
 * block moved out of an arena, or moved in pieces), which mremap does not
 * grow. */
static bool own_extend(own_t *h, size_t size) {
  bool taken;
  if (size <= h->map_size || os_map_at(h->map + h->map_size, size - h->map_size, &taken) == NULL) return false;
  h->map_size = size;
  return true;
}

/* An own mapping resized in place or moved (its pages, not copied). */
static own_t *own_resize(own_t *h, size_t bytes) {
  size_t offset = (size_t)(h->block - h->map), need = offset + bytes, old = h->map_size;
  if (need <= old) {
    if (need < old / 2) { /* only a real shrink gives the tail back */
      os_unmap(h->map + need, old - need);
      h->map_size = need;
    }
  } else if (own_extend(h, reserve_for(need))) {
    /* grown in place */
  } else {
    if (h->map + offset != h->block || (uintptr_t)h->map & (REGION_SIZE - 1)) return NULL;
    size_t want = reserve_for(need);
    char *to = os_map_aligned(want, REGION_SIZE), *from = h->map;
    if (to == NULL) return NULL;
    /* unmark first: once unmapped, the old range may be mapped (and marked)
     * by another thread at once */
    map_set(h->block, 1, MAP_NONE);
    own_unlink(h);
    if (!os_move_pages(from, old, to)) {
      own_link(h);
      map_set(h->block, 1, MAP_HUGE);
      os_unmap_untouched(to, want);
      return NULL;
    }
    os_unmap_untouched(from, old);
    h = (own_t *)to;
    h->map = to;
    h->block = to + offset;
    h->map_size = want;
    own_link(h);
    map_set(h->block, 1, MAP_HUGE);
  }
  h->usable = bytes;
  return h;
}

void *huge_realloc(void *p, size_t size) {
  size_t bytes = os_page_round(size);
  if (bytes == 0) return NULL;
  uint8_t kind = map_kind(p);
  if (kind == MAP_HUGE) {
    own_t *h = own_lookup(p, kind);
    if (h == NULL) return NULL;
    size_t old = h->usable;
    if ((h = own_resize(h, bytes)) == NULL) return NULL;
    count_usable(old, h->usable);
    if (h->usable > old) cache_yield(shard_mine(), units_of(h->usable - old));
    return h->block;
  }
  shard_t *sh = shard_of(kind);
  if (sh == NULL) return NULL;
  hak_lock(&sh->lock);
  run_t r = arena_block(p, kind);
  if (r.chunk == NULL) {
    hak_unlock(&sh->lock);
    return NULL;
  }
  arena_t *a = arena_of_run(r);
  size_t old = a->usable[r.page];
  uint32_t n = units_of(bytes);
  bool dirty = false, ok = true;
  uint32_t roomy = (uint32_t)MIN((size_t)n * HUGE_RESERVE, r.chunk->limit - r.page); /* room to grow again in place */
  if (n > r.pages) {
    ok = (roomy > n && run_grow(&r, roomy, false, &dirty)) || run_grow(&r, n, false, &dirty);
    /* a block at the end of its shard's growing arena grows with the arena
     * (up to an arena block's bound: beyond, it moves to a mapping of its own) */
    if (!ok && sh->growing == a && bytes <= ARENA_BLOCK_MAX && run_ends_chunk(r) && arena_grow(sh, n - r.pages))
      ok = run_grow(&r, n, false, &dirty);
  } else if (n < r.pages / 4) {
    run_shrink(&r, n, os_now_ms());
  }
  uint32_t fresh = 0;
  if (ok) {
    uint32_t t = touched_units(a, r.page, r.pages); /* its usable size still the old one */
    a->usable[r.page] = usable_of(run_bytes(r), bytes);
    a->touched[r.page] = dirty ? r.pages : MAX(t, units_of(a->usable[r.page]));
    fresh = dirty ? 0 : a->touched[r.page] - t;
  }
  size_t now_usable = a->usable[r.page];
  hak_unlock(&sh->lock);
  cache_yield(sh, fresh);
  void *q = p;
  if (!ok) {
    if ((q = arena_move_out(sh, p, r, old, size)) == NULL) return NULL;
    now_usable = huge_usable_size(q, map_kind(q));
  }
  count_usable(old, now_usable);
  return q;
}

/* ---- statistics ---------------------------------------------------------------------- */

void huge_resident(size_t *live, size_t *cached, size_t *meta) {
  *live = *cached = *meta = 0;
  for (shard_t *sh = shards; sh < shards + HUGE_SHARDS; sh++) {
    hak_lock(&sh->lock);
    for (arena_t *a = sh->arenas; a; a = a->next) {
      *meta += os_resident(a, arena_meta_bytes(a->size >> UNIT_BITS));
      run_chunk_t *c = &a->chunk;
      for (uint32_t s = 0; s < c->limit; s += c->pg[s].len ? c->pg[s].len : 1) {
        size_t n = os_resident(c->base + ((size_t)s << UNIT_BITS), (size_t)c->pg[s].len << UNIT_BITS);
        if (run_at(c, s).chunk) *live += n;
        else *cached += n;
      }
    }
    hak_unlock(&sh->lock);
  }
  /* a held block is a live run to its shard, cached to the program */
  for (heap_t *h = heap_all(); h; h = h->next_all) {
    uintptr_t w = atomic_load_explicit(&h->huge_held, memory_order_relaxed);
    size_t n = w ? MIN(os_resident(held_block(w), held_units(w) << UNIT_BITS), *live) : 0;
    *live -= n;
    *cached += n;
  }
  hak_lock(&huge_lock);
  for (own_t *h = owns; h; h = h->next) *live += os_resident(h->map, h->map_size);
  hak_unlock(&huge_lock);
}

bool huge_meta_overlaps(uintptr_t lo, uintptr_t hi) {
  bool hit = false;
  for (shard_t *sh = shards; sh < shards + HUGE_SHARDS && !hit; sh++) {
    hak_lock(&sh->lock);
    for (arena_t *a = sh->arenas; a && !hit; a = a->next)
      hit = (uintptr_t)a < hi && lo < (uintptr_t)a + arena_meta_bytes(a->size >> UNIT_BITS);
    hak_unlock(&sh->lock);
  }
  hak_lock(&huge_lock);
  for (own_t *h = owns; h && !hit; h = h->next) hit = (uintptr_t)h->map < hi && lo < (uintptr_t)h->map + h->map_size;
  hak_unlock(&huge_lock);
  return hit;
}

void huge_fork_lock(bool lock) {
  for (int i = 0; i < HUGE_SHARDS; i++) {
    shard_t *sh = &shards[lock ? i : HUGE_SHARDS - 1 - i];
    if (lock) hak_lock(&sh->lock);
    else hak_unlock(&sh->lock);
  }
  if (lock) hak_lock(&huge_lock);
  else hak_unlock(&huge_lock);
}
