/* Regions: placement in the window, growth, the pool of empty regions, and
 * the units of slab regions. */
#include "region.h"

#include "options.h"
#include "policy.h"
#include "stats.h"

_Atomic size_t region_span_bytes;
_Atomic size_t region_count;

/* ---- placement in the window ---------------------------------------------- */

#define WINDOW_LO ((uintptr_t)1 << 32)
#define WINDOW_HI ((uintptr_t)MAP_FAST_ENTRIES << REGION_SHIFT)
#define WINDOW_START_SPAN ((uintptr_t)1 << 38) /* where the first region may start */
#define PLACE_TRIES 64

static hak_lock_t space_lock;
static uintptr_t cursor; /* next address tried; 0: not yet chosen */
static bool window_off;  /* the kernel does not place at fixed addresses */

/* Whether the map entries of [a, a+size) are all free; *next: past the last
 * one in use. */
static bool space_free(uintptr_t a, size_t size, uintptr_t *next) {
  for (uintptr_t e = a + size; e > a; e -= REGION_SIZE)
    if (map_kind((void *)(e - REGION_SIZE)) != MAP_NONE) {
      *next = e;
      return false;
    }
  return true;
}

/* Address space in the window, its first `first` bytes mapped; 0 when the
 * window has no room or the kernel will not place there. Under space_lock. */
static uintptr_t window_place(size_t size, size_t first) {
  if (HAK_UNDER_SANITIZER || window_off) return 0;
  if (cursor == 0) cursor = WINDOW_LO + (os_random_seed() % (WINDOW_START_SPAN >> REGION_SHIFT) << REGION_SHIFT);
  bool wrapped = false;
  for (int tries = 0; tries < PLACE_TRIES;) {
    if (cursor + size > WINDOW_HI) {
      if (wrapped) break;
      cursor = WINDOW_LO, wrapped = true;
    }
    uintptr_t next;
    if (!space_free(cursor, size, &next)) {
      cursor = next;
      continue;
    }
    uintptr_t a = cursor;
    bool taken;
    if (os_map_at((void *)a, first, &taken) != NULL) {
      cursor = a + size;
      return a;
    }
    if (!taken) return 0; /* out of memory or address space: not the window's fault */
    cursor = a + REGION_SIZE; /* someone else's mapping: step over it */
    tries++;
  }
  if (!wrapped) window_off = true; /* every try failed from a fresh start: not here */
  return 0;
}

/* Marks [p, p+size) reserved, or gives it back when the map cannot hold it
 * (outside the window, whose entries the fast map always holds). */
static char *space_mark(char *p, size_t size, size_t mapped) {
  if (map_set(p, size, MAP_RESERVED)) return p;
  region_space_free(p, size, mapped);
  return NULL;
}

char *region_space_window(size_t size, size_t first, size_t *mapped) {
  hak_assert(size % REGION_SIZE == 0 && first <= size);
  hak_lock(&space_lock);
  char *p = (char *)window_place(size, first);
  if (p) map_set(p, size, MAP_RESERVED); /* under the lock: the next placement skips it */
  hak_unlock(&space_lock);
  if (p) *mapped = first;
  return p;
}

char *region_space(size_t size, size_t first, size_t *mapped) {
  char *p = region_space_window(size, first, mapped);
  if (p || (p = os_map_aligned(size, REGION_SIZE)) == NULL) return p;
  *mapped = size;
  stat_inc(regions_outside);
  return space_mark(p, size, size);
}

bool region_space_grow(char *base, size_t *mapped, size_t want, bool *taken) {
  *taken = false;
  if (want <= *mapped) return true;
  if (os_map_at(base + *mapped, want - *mapped, taken) == NULL) return false;
  *mapped = want;
  return true;
}

void region_space_free(char *base, size_t size, size_t mapped) {
  map_set(base, size, MAP_NONE);
  os_unmap(base, mapped);
  hak_lock(&space_lock);
  if ((uintptr_t)base >= WINDOW_LO && (uintptr_t)base < cursor) cursor = (uintptr_t)base; /* reuse the hole first */
  hak_unlock(&space_lock);
}

/* ---- the pool of empty regions -------------------------------------------------- */

#define POOL_MAX 256

typedef struct {
  char *base;
  size_t mapped;
  uint64_t dirty_ms; /* 0: purged */
} pooled_t;

static hak_lock_t region_pool_lock;
static pooled_t pool[POOL_MAX]; /* oldest first */
static size_t pool_n;

static void pool_remove(size_t i) {
  for (; i + 1 < pool_n; i++) pool[i] = pool[i + 1];
  pool_n--;
}

static void region_unmap(char *base, size_t mapped) {
  region_space_free(base, REGION_SIZE, mapped);
  atomic_fetch_sub_explicit(&region_count, 1, memory_order_relaxed);
  stat_inc(regions_unmapped);
}

char *region_get(size_t first, size_t *mapped, bool *dirty, size_t *advised) {
  hak_lock(&region_pool_lock);
  pooled_t got = {0};
  if (pool_n) got = pool[--pool_n]; /* the newest: the likeliest resident */
  hak_unlock(&region_pool_lock);
  if (got.base) {
    stat_inc(regions_reused);
    map_set(got.base, REGION_SIZE, MAP_RESERVED);
    *mapped = *advised = got.mapped;
    *dirty = got.dirty_ms != 0;
    bool taken;
    if (got.mapped < first) region_space_grow(got.base, mapped, first, &taken);
    return got.base;
  }
  char *p = region_space(REGION_SIZE, first, mapped);
  if (p == NULL) return NULL;
  atomic_fetch_add_explicit(&region_count, 1, memory_order_relaxed);
  stat_inc(regions_mapped);
  *dirty = false;
  *advised = 0;
  return p;
}

/* The pool's bound on the regions it keeps once purged (0: none kept). */
static size_t pool_cap(void) { return MIN((size_t)hak_option(OPT_POOL_REGIONS), POOL_MAX); }

/* Past the bound, a region freed within the purge delay still waits in the
 * pool, resident, until its purge, when it goes: a program that frees and
 * takes back more regions than the bound at a time (a batch of big blocks)
 * takes them back with no system call. Once the pool is full, or with
 * purging at once or never, the oldest goes at once. */
void region_put(char *base, size_t mapped, uint64_t now) {
  long delay = policy_knob(KNOB_PURGE_DELAY_MS);
  if (delay == 0) os_purge(base, mapped), now = 0;
  pooled_t old = {0};
  hak_lock(&region_pool_lock);
  size_t cap = pool_cap();
  if (cap == 0) {
    old = (pooled_t){base, mapped, 0};
  } else {
    if (pool_n >= cap && (delay <= 0 || pool[0].dirty_ms == 0 || pool_n == POOL_MAX)) old = pool[0], pool_remove(0);
    pool[pool_n++] = (pooled_t){base, mapped, now};
  }
  hak_unlock(&region_pool_lock);
  if (old.base) region_unmap(old.base, old.mapped);
}

size_t region_pool_purge(uint64_t now, uint64_t delay, bool unmap, bool *pending) {
  size_t n = 0;
  for (;;) {
    pooled_t p = {0};
    hak_lock(&region_pool_lock);
    for (size_t i = 0; i < pool_n; i++)
      if (unmap || (pool[i].dirty_ms && now - pool[i].dirty_ms >= delay)) {
        p = pool[i];
        pool_remove(i);
        break;
      }
    bool left = false;
    for (size_t i = 0; i < pool_n; i++) left |= pool[i].dirty_ms != 0;
    if (pending) *pending = left;
    bool keep = !unmap && pool_n < pool_cap(); /* past the bound: unmapped, not purged */
    hak_unlock(&region_pool_lock);
    if (p.base == NULL) return n;
    if (!keep) {
      region_unmap(p.base, p.mapped);
      n += p.mapped;
      continue;
    }
    n += os_purge(p.base, p.mapped);
    hak_lock(&region_pool_lock);
    bool kept = pool_n < POOL_MAX;
    if (kept) { /* purged ones wait behind those still resident */
      for (size_t i = pool_n++; i > 0; i--) pool[i] = pool[i - 1];
      pool[0] = (pooled_t){p.base, p.mapped, 0};
    }
    hak_unlock(&region_pool_lock);
    if (!kept) region_unmap(p.base, p.mapped);
  }
}

size_t region_pool_resident(void) {
  size_t n = 0;
  hak_lock(&region_pool_lock);
  for (size_t i = 0; i < pool_n; i++) n += os_resident(pool[i].base, pool[i].mapped);
  hak_unlock(&region_pool_lock);
  return n;
}

void region_fork_lock(bool lock) {
  if (lock) hak_lock(&region_pool_lock), hak_lock(&space_lock);
  else hak_unlock(&space_lock), hak_unlock(&region_pool_lock);
}

/* ---- regions of a heap ------------------------------------------------------- */

#define REGION_FIRST ((size_t)256 * 1024)

/* The secure build puts a guard page after the header too. */
uint32_t region_header_pages(void) {
  static _Atomic uint32_t cached; /* the same value, whichever thread computes it */
  uint32_t pages = atomic_load_explicit(&cached, memory_order_relaxed);
  if (likely(pages)) return pages;
  pages = (uint32_t)(os_page_round(sizeof(region_t)) >> os_page_log2()) + (HAKMEM_SECURE ? 1 : 0);
  atomic_store_explicit(&cached, pages, memory_order_relaxed);
  return pages;
}

/* The process's first region maps REGION_FIRST and grows by doubling, so
 * that the address space at start-up stays near the C library's; every
 * later one maps whole, or REGION_FIRST when that fails (RLIMIT_AS). Each
 * mmap call waits for the address space's lock (mmap_lock) that every other
 * thread's populate holds: one call a region, not five. */
bool region_new(run_heap_t *pages, void *owner) {
  size_t mapped, advised;
  size_t first = atomic_load_explicit(&region_count, memory_order_relaxed) ? REGION_SIZE : REGION_FIRST;
  bool dirty;
  char *base = region_get(first, &mapped, &dirty, &advised);
  if (base == NULL && first > REGION_FIRST) base = region_get(REGION_FIRST, &mapped, &dirty, &advised);
  if (base == NULL) return false;
  region_t *r = (region_t *)base;
  /* the advice stays with the mapping (a purge keeps it): a pooled
   * region's only where it grew */
  if (mapped > advised) os_no_huge_pages(base + advised, mapped - advised);
  uint32_t hp = region_header_pages(), total = (uint32_t)(REGION_SIZE >> os_page_log2());
  /* A unit no slab holds reads zero, its own head with no owner: a pointer
   * into it fails free's owner test and is looked up, never trusted. A
   * fresh or purged region's header is zero already, untouched; a pooled
   * one's, but for the descriptors its slabs wrote. */
  if (dirty)
    for (uint64_t m = r->slab_units; m; m &= m - 1) __builtin_memset(&r->slabs[__builtin_ctzll(m)], 0, sizeof(slab_t));
  r->slab_units = 0;
  if (HAKMEM_SECURE) { /* guard pages on both sides of the header */
    os_protect_none(base, os_page_size());
    os_protect_none(base + ((size_t)(hp - 1) << os_page_log2()), os_page_size());
  }
  r->mapped = mapped;
  r->owner = owner;
  run_chunk_add(pages, &r->pages, base + ((size_t)hp << os_page_log2()), total - hp,
                (uint32_t)(mapped >> os_page_log2()) - hp, r->page_meta, dirty ? os_now_ms() : 0);
  map_set(base, REGION_SIZE, MAP_REGION);
  return true;
}

bool region_grow(run_heap_t *pages) {
  run_chunk_t *c = pages->chunks; /* the newest region: the others grew before it was made */
  if (c == NULL || c->limit == c->pages) return false;
  region_t *r = region_of(c);
  size_t want = MIN(r->mapped * 2, REGION_SIZE), old = r->mapped;
  bool taken;
  if (!region_space_grow((char *)r, &r->mapped, want, &taken)) {
    if (taken) c->pages = c->limit; /* something else lies beyond: this region stays as it is */
    return false;
  }
  os_no_huge_pages((char *)r + old, r->mapped - old);
  run_chunk_grow(c, (uint32_t)(r->mapped >> os_page_log2()) - region_header_pages());
  return true;
}

slab_t *region_span_alloc(run_heap_t *pages, size_t n, bool *dirty) {
  unsigned shift = os_page_log2();
  uint32_t per_unit = (uint32_t)(UNIT_SIZE >> shift);
  run_t run;
  if (!run_alloc(pages, (uint32_t)n * per_unit, per_unit, &run)) return NULL;
  region_t *r = region_of(run.chunk);
  size_t first = (size_t)(run_addr(run) - (char *)r) >> UNIT_SHIFT;
  slab_t *s = &r->slabs[first];
  r->slab_units |= (n < 64 ? ((uint64_t)1 << n) - 1 : ~(uint64_t)0) << first;
  for (size_t i = 1; i < n; i++) r->slabs[first + i].head = s;
  s->units = (uint8_t)n;
  *dirty = run.dirty;
  atomic_fetch_add_explicit(&region_span_bytes, n * UNIT_SIZE, memory_order_relaxed);
  return s;
}

bool region_span_free(slab_t *s, uint64_t now) {
  region_t *r = region_of(s);
  size_t first = (size_t)(s - r->slabs), n = s->units;
  for (size_t i = 0; i < n; i++) {
    slab_t *d = &r->slabs[first + i];
    atomic_store_explicit(&d->owner, 0, memory_order_relaxed);
    d->kind = SLAB_NONE;
    d->head = NULL;
  }
  atomic_fetch_sub_explicit(&region_span_bytes, n * UNIT_SIZE, memory_order_relaxed);
  unsigned shift = os_page_log2();
  uint32_t page = (uint32_t)(((char *)r + first * UNIT_SIZE - r->pages.base) >> shift);
  return run_free((run_t){.chunk = &r->pages, .page = page, .pages = (uint32_t)(n * UNIT_SIZE >> shift)}, true, now);
}

bool region_spare(region_t *r) {
  return r->pages.used == 0 && (r->pages.heap->chunks != &r->pages || r->pages.next != NULL);
}

void region_release(region_t *r, uint64_t now) {
  run_chunk_remove(&r->pages);
  r->owner = NULL;
  if (HAKMEM_SECURE) { /* the pool's regions carry no guard pages */
    region_unmap((char *)r, r->mapped);
    return;
  }
  region_put((char *)r, r->mapped, now);
}

/* ---- statistics ---------------------------------------------------------------------- */

static void usage_of_run(void *ctx, run_t run, bool free) {
  region_usage_t *u = ctx;
  char *p = run_addr(run);
  size_t n = os_resident(p, run_bytes(run));
  region_t *r = region_of(p);
  slab_t *d = unit_in(r, p);
  if (free) u->free += n;
  else if (((uintptr_t)p & (UNIT_SIZE - 1)) == 0 && unit_head(d) == d && atomic_load_explicit(&d->owner, memory_order_relaxed)) {
    u->slabs += n;
    u->slab_used += MIN(n, (size_t)__atomic_load_n(&d->used, __ATOMIC_RELAXED) * d->bsize);
  } else {
    u->runs += n;
    if (run_cached(run)) u->cached += n;
  }
}

void region_usage(region_t *r, region_usage_t *u) {
  u->meta += os_resident(r, (size_t)region_header_pages() << os_page_log2());
  run_chunk_walk(&r->pages, usage_of_run, u);
}

bool region_pool_overlaps(uintptr_t lo, uintptr_t hi) {
  bool hit = false;
  hak_lock(&region_pool_lock);
  for (size_t i = 0; i < pool_n && !hit; i++) hit = (uintptr_t)pool[i].base < hi && lo < (uintptr_t)pool[i].base + pool[i].mapped;
  hak_unlock(&region_pool_lock);
  return hit;
}
