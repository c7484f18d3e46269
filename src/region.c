/* Regions: 4 MiB of address space aligned to its size, taken from the OS and
 * cut into 64 KiB units. Unit 0 holds the region header (one slab descriptor
 * per unit); spans of free units become slabs and large blocks. A region
 * belongs to one heap; only that heap's thread (or whoever holds an abandoned
 * heap) changes its spans. Empty regions wait, purged, in a bounded pool.
 *
 * The ownership map has one byte per 4 MiB of the address space: it tells
 * free() whether a pointer is hakmem's before anything is read through it. */
#include "internal.h"
#include "learn.h"
#include "options.h"
#include "stats.h"

#define ALL_UNITS (~(uint64_t)0)
#define HEADER_UNITS ((uint64_t)1)

uint8_t hak_region_map[MAP_ENTRIES]; /* in .bss: untouched pages cost nothing */
hak_lock_t hak_lock_regions;
_Atomic size_t hak_span_bytes;
_Atomic size_t hak_dirty_bytes;
_Atomic uint64_t hak_dirty_grew_ms;

/* Branch-free: a loop took 4 instructions a unit, and an 8-unit slab goes
 * idle and wakes once per batch in a program that fills and empties it. */
static size_t popcount64(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ull;
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (size_t)((x * 0x0101010101010101ull) >> 56);
}

static void dirty_sub(uint64_t units) {
  if (units) atomic_fetch_sub_explicit(&hak_dirty_bytes, (size_t)popcount64(units) * UNIT_SIZE, memory_order_relaxed);
}

static region_t *pool;      /* empty regions, most recent first */
static size_t pool_count;

void region_map_set(const void *p, uint8_t kind) {
  size_t i = region_map_index(p);
  if (i < MAP_ENTRIES) __atomic_store_n(&hak_region_map[i], kind, __ATOMIC_RELEASE);
}

static uint64_t span_bits(size_t first, size_t units) {
  return (units >= 64 ? ALL_UNITS : (((uint64_t)1 << units) - 1)) << first;
}

region_t *region_alloc(heap_t *heap) {
  hak_lock(&hak_lock_regions);
  region_t *r = pool;
  if (r) {
    pool = r->next;
    pool_count--;
  }
  hak_unlock(&hak_lock_regions);
  if (r) {
    stat_inc(regions_reused);
  } else {
    r = os_map_aligned(REGION_SIZE, REGION_SIZE);
    if (r == NULL && hak_release_cached()) r = os_map_aligned(REGION_SIZE, REGION_SIZE);
    if (r == NULL) return NULL;
    if (region_map_index(r) >= MAP_ENTRIES) { /* beyond the map: unusable */
      os_unmap(r, REGION_SIZE);
      return NULL;
    }
    /* Zeroed descriptors read as SLAB_NONE with no owner: a pointer into a
     * free unit (its descriptor its own head) fails free's owner test and is
     * reported, never trusted. */
    for (size_t i = 0; i < REGION_UNITS; i++) r->slabs[i].head = &r->slabs[i];
    r->free_units = ALL_UNITS & ~HEADER_UNITS;
    if (HAKMEM_SECURE) { /* guard pages on both sides of the header */
      os_protect_none(r, os_page_size());
      os_protect_none((char *)r + UNIT_SIZE - os_page_size(), os_page_size());
    }
    region_map_set(r, MAP_REGION);
    stat_inc(regions_mapped);
  }
  r->heap = heap;
  r->next = r->prev = NULL;
  return r;
}

size_t region_purge(region_t *r) {
  size_t purged = 0;
  uint64_t dirty = r->dirty_units;
  while (dirty) {
    unsigned first = (unsigned)__builtin_ctzll(dirty);
    uint64_t run = dirty >> first;
    unsigned len = ~run ? (unsigned)__builtin_ctzll(~run) : 64 - first;
    purged += os_purge((char *)r + (size_t)first * UNIT_SIZE, (size_t)len * UNIT_SIZE);
    dirty &= ~span_bits(first, len);
  }
  dirty_sub(r->dirty_units);
  r->dirty_units = 0;
  if (purged) stat_add(bytes_purged, purged);
  return purged;
}

static void region_unmap(region_t *r) {
  dirty_sub(r->dirty_units);
  region_map_set(r, MAP_NONE);
  os_unmap(r, REGION_SIZE);
  stat_inc(regions_unmapped);
}

/* An empty region goes to the pool, or back to the OS when the pool is full.
 * Pooled regions keep their dirty units until the purger's delay is up, so a
 * heap that empties a region and soon needs one again pays no page faults. */
void region_release(region_t *r) {
  hak_assert(r->free_units == (ALL_UNITS & ~HEADER_UNITS));
  if (learn_knob(KNOB_PURGE_DELAY_MS) == 0) region_purge(r);
  r->heap = NULL;
  hak_lock(&hak_lock_regions);
  if (pool_count < (size_t)hak_option(OPT_POOL_REGIONS)) {
    r->next = pool;
    pool = r;
    pool_count++;
    r = NULL;
  }
  hak_unlock(&hak_lock_regions);
  if (r) region_unmap(r);
}

/* Unmaps every pooled region; returns the bytes unmapped. */
size_t region_pool_unmap(void) {
  hak_lock(&hak_lock_regions);
  region_t *list = pool;
  pool = NULL;
  pool_count = 0;
  hak_unlock(&hak_lock_regions);
  size_t n = 0;
  for (region_t *next; list; list = next, n += REGION_SIZE) {
    next = list->next;
    region_unmap(list);
  }
  return n;
}

/* Purges pooled regions dirty for at least delay ms; returns whether dirty
 * ones remain. */
bool region_pool_purge_due(uint64_t now, uint64_t delay) {
  bool pending = false;
  hak_lock(&hak_lock_regions);
  for (region_t *r = pool; r; r = r->next) pending |= region_purge_due(r, now, delay);
  hak_unlock(&hak_lock_regions);
  return pending;
}

/* Bit i set where the n units from unit i are all free, given m of the
 * runs of have units (have <= n). */
static uint64_t runs_of(uint64_t m, size_t have, size_t n) {
  for (size_t i = have; i < n && m; i++) m &= m >> 1;
  return m;
}

/* Finds units free units in a row, starting at a multiple of align_units,
 * and makes them a span whose head descriptor is returned; warm: only units
 * that are all dirty (likely still resident, so the span faults nothing).
 * Where it can, it starts the span where room units are free, so that it
 * can grow in place. */
slab_t *region_span_alloc(region_t *r, size_t units, size_t align_units, size_t room, bool warm) {
  uint64_t m = runs_of(r->free_units, 1, units);
  if (warm) m &= runs_of(r->dirty_units, 1, units);
  uint64_t roomy = room > units ? runs_of(m, units, room) : 0;
  if (align_units > 1) {
    uint64_t starts = 0;
    for (size_t i = 0; i < REGION_UNITS; i += align_units) starts |= (uint64_t)1 << i;
    m &= starts;
    roomy &= starts;
  }
  if (m == 0) return NULL;
  if (roomy) m = roomy;
  size_t first = (size_t)__builtin_ctzll(m);
  uint64_t bits = span_bits(first, units);
  slab_t *s = &r->slabs[first];
  s->fresh = (r->dirty_units & bits) == 0;
  r->free_units &= ~bits;
  dirty_sub(r->dirty_units & bits);
  r->dirty_units &= ~bits;
  atomic_fetch_add_explicit(&hak_span_bytes, units * UNIT_SIZE, memory_order_relaxed);
  for (size_t i = 1; i < units; i++) r->slabs[first + i].head = s;
  s->units = (uint8_t)units;
  return s;
}

/* Extends span s to units units if the units after it are free. */
bool region_span_grow(region_t *r, slab_t *s, size_t units) {
  size_t first = (size_t)(s - r->slabs);
  if (first + units > REGION_UNITS) return false;
  uint64_t more = span_bits(first + s->units, units - s->units);
  if ((r->free_units & more) != more) return false;
  atomic_fetch_add_explicit(&hak_span_bytes, (units - s->units) * UNIT_SIZE, memory_order_relaxed);
  r->free_units &= ~more;
  dirty_sub(r->dirty_units & more);
  r->dirty_units &= ~more;
  for (size_t i = s->units; i < units; i++) r->slabs[first + i].head = s;
  s->units = (uint8_t)units;
  return true;
}

/* Marks units dirty (free or idle, possibly resident): purged after the
 * delay, or at once with a delay of 0. */
static void region_mark_dirty(region_t *r, uint64_t bits) {
  long delay = learn_knob(KNOB_PURGE_DELAY_MS);
  uint64_t added = bits & ~r->dirty_units;
  if (delay == 0) {
    for (unsigned i = 0; i < REGION_UNITS; i++)
      if (added >> i & 1) os_purge((char *)r + (size_t)i * UNIT_SIZE, UNIT_SIZE);
    stat_add(bytes_purged, (size_t)popcount64(added) * UNIT_SIZE);
    return;
  }
  if (added == 0) return;
  uint64_t now = os_now_ms();
  if (r->dirty_units == 0 && delay > 0) {
    r->dirty_since_ms = now;
    purge_notice_dirty();
  }
  atomic_fetch_add_explicit(&hak_dirty_bytes, (size_t)popcount64(added) * UNIT_SIZE, memory_order_relaxed);
  atomic_store_explicit(&hak_dirty_grew_ms, now, memory_order_relaxed);
  r->dirty_units |= added;
}

/* Returns a span's units to the region. Its descriptors read as free again
 * (no kind, no owner), so a stale pointer into it is caught by free. */
void region_span_free(region_t *r, slab_t *s) {
  size_t first = (size_t)(s - r->slabs), units = s->units;
  for (size_t i = 0; i < units; i++) {
    slab_t *d = &r->slabs[first + i];
    atomic_store_explicit(&d->owner, 0, memory_order_relaxed);
    d->kind = SLAB_NONE;
    d->head = d;
  }
  uint64_t bits = span_bits(first, units);
  atomic_fetch_sub_explicit(&hak_span_bytes, units * UNIT_SIZE, memory_order_relaxed);
  r->free_units |= bits;
  region_mark_dirty(r, bits);
}

/* An empty slab's units may be purged while it stays its heap's (idle);
 * once the owner takes it back they must not be. Waking returns whether
 * any of them was purged meanwhile. */
void region_slab_idle(region_t *r, slab_t *s) {
  region_mark_dirty(r, span_bits((size_t)(s - r->slabs), s->units));
}

bool region_slab_wake(region_t *r, slab_t *s) {
  uint64_t bits = span_bits((size_t)(s - r->slabs), s->units), dirty = r->dirty_units & bits;
  dirty_sub(dirty);
  r->dirty_units &= ~bits;
  return dirty != bits;
}

/* Purges r's dirty units if they have been dirty for delay ms; returns
 * whether dirty units remain. Called with the owning heap's lock held. */
bool region_purge_due(region_t *r, uint64_t now, uint64_t delay) {
  if (r->dirty_units == 0) return false;
  if (now - r->dirty_since_ms < delay) return true;
  region_purge(r);
  return false;
}
