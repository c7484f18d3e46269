/* Huge blocks: above LARGE_MAX. Each has a header page at its start, found
 * from the block's address without a search.
 *
 * Blocks are cut from arenas: reservations of up to ARENA_UNITS units of 1
 * MiB (address space, which costs nothing until it is touched), a block
 * taking whole units. The ownership map marks an arena's regions MAP_ARENA; a
 * block's header lies at the start of its first unit, which a bit of the
 * arena marks as a block's start. A freed block's units stay resident as they
 * are and merge with their free neighbours (the BigCache), so a later block
 * of any size up to the free run they form is served from pages already
 * faulted in, without a system call. They are purged (madvise: the range
 * stays reserved) once older than HAKMEM_BIGCACHE_AGE_MS, and oldest first
 * beyond HAKMEM_BIGCACHE_MB. One mapping per block, as before, took a system
 * call for nearly every block and moved cached pages between mappings with
 * mremap to build larger ones: a burst of 8 blocks of 256 KiB-32 MiB written
 * and freed, again and again, made 27 k mapping calls for 16 k blocks and ran
 * at 51-57 us a block against tcmalloc's 29-31 (its page heap makes none).
 * Units of a whole region (4 MiB) left each block a tail that no other block
 * could use: kept resident as slack it held 20 % above the live bytes in
 * test_memory's churn, purged it made the bursts fault 70 times as often.
 *
 * Own mappings: blocks beyond ARENA_BLOCK_MAX units, those aligned to a
 * region or more, those no arena could take, and those realloc moved out of
 * an arena. Their header lies at a region boundary: MAP_HUGE, or for an
 * alignment of a region or more MAP_HUGE + log2(align) - 21, which says how
 * far back. They are unmapped when freed. */
#define _GNU_SOURCE
#include <string.h>

#include "internal.h"
#include "learn.h"
#include "options.h"
#include "stats.h"

#define HUGE_MAGIC 0x68616b6d656d4855ull
#define UNIT_BITS 18 /* 256 KiB units */
#define ARENA_UNIT ((size_t)1 << UNIT_BITS)
#define ARENA_UNITS 4096 /* 1 GiB; fewer (whole regions) where the OS refuses that much */
#define ARENA_WORDS (ARENA_UNITS / 64)
#define MAX_ARENAS 64
#define ARENA_BLOCK_MAX (ARENA_UNITS / 4) /* units; larger blocks are mapped on their own */
#define HUGE_RESERVE 2 /* an own mapping that realloc grows reserves twice its need */

typedef struct {
  char *base;                     /* NULL: the slot is unused */
  size_t units;
  uint64_t free[ARENA_WORDS];     /* bit i: unit i belongs to no block */
  uint64_t start[ARENA_WORDS];    /* bit i: a block starts at unit i */
  uint64_t cached[ARENA_WORDS];   /* bit i: unit i is free and may be resident */
  uint64_t reserved[ARENA_WORDS]; /* bit i: free unit i is kept for the growing block before it */
  uint64_t purging[ARENA_WORDS];  /* bit i: free unit i is being purged (cache_evict) */
  uint32_t resident[ARENA_UNITS]; /* bytes from unit i's start that may be resident */
  uint64_t freed_ms[ARENA_UNITS]; /* when free unit i was freed */
} arena_t;

typedef struct {
  uint64_t magic;
  char *block;     /* the pointer handed out */
  size_t map_size; /* bytes from the header on: whole units in an arena */
  size_t usable;   /* bytes the block offers */
  size_t resident; /* bytes from the header on that may be resident */
  arena_t *arena;  /* NULL: an own mapping */
  size_t reserve;  /* units after the block reserved for its growth */
} huge_header_t;

hak_lock_t hak_lock_huge; /* the arenas' bits, the cache's count */
hak_lock_t hak_lock_evict; /* one eviction at a time */
_Atomic size_t hak_huge_bytes;
_Atomic uint64_t hak_huge_reused;
static arena_t arenas[MAX_ARENAS];
static size_t cache_bytes; /* resident bytes of free units */
static uint64_t cache_since_ms; /* no free unit with resident pages was freed before */

/* The address space a growing mapping of need bytes reserves (need itself if
 * the product overflows). */
static size_t reserve_for(size_t need) {
  return need * HUGE_RESERVE / HUGE_RESERVE == need ? need * HUGE_RESERVE : need;
}

/* Moves hak_huge_bytes from a block's old resident bytes to its new. */
static void huge_bytes_update(size_t old, size_t now) {
  if (now > old) atomic_fetch_add_explicit(&hak_huge_bytes, now - old, memory_order_relaxed);
  else atomic_fetch_sub_explicit(&hak_huge_bytes, old - now, memory_order_relaxed);
}

/* ---- units of an arena ------------------------------------------------------ */

static bool bit_get(const uint64_t *w, size_t i) { return w[i / 64] >> (i % 64) & 1; }

static void bits_set(uint64_t *w, size_t first, size_t n, bool on) {
  for (size_t i = first, end = first + n; i < end;) {
    size_t b = i % 64, k = end - i < 64 - b ? end - i : 64 - b;
    uint64_t mask = (k == 64 ? ~(uint64_t)0 : (((uint64_t)1 << k) - 1)) << b;
    w[i / 64] = on ? w[i / 64] | mask : w[i / 64] & ~mask;
    i += k;
  }
}

/* A block's start bit is read without the lock (huge_lookup), written under
 * it: one unit's bit changes only with its block's owner, but its word's
 * others do meanwhile. */
static bool start_get(const arena_t *a, size_t i) {
  return __atomic_load_n(&a->start[i / 64], __ATOMIC_RELAXED) >> (i % 64) & 1;
}

static void start_set(arena_t *a, size_t i, bool on) {
  uint64_t bit = (uint64_t)1 << (i % 64);
  if (on) __atomic_fetch_or(&a->start[i / 64], bit, __ATOMIC_RELAXED);
  else __atomic_fetch_and(&a->start[i / 64], ~bit, __ATOMIC_RELAXED);
}

/* The first unit at or after i whose bit in w, less those in x (if any), is
 * on (want) or off (!want); a->units when none. */
static size_t next_bit(const arena_t *a, const uint64_t *w, const uint64_t *x, size_t i, bool want) {
  while (i < a->units) {
    uint64_t v = w[i / 64] & ~(x ? x[i / 64] : 0);
    v = (want ? v : ~v) >> (i % 64);
    if (v) {
      i += (size_t)__builtin_ctzll(v);
      break;
    }
    i = (i / 64 + 1) * 64;
  }
  return i < a->units ? i : a->units;
}

/* The first free unit at or after i (not reserved, with keep). */
static size_t next_free(const arena_t *a, size_t i, bool keep) {
  return next_bit(a, a->free, keep ? a->reserved : NULL, i, true);
}

/* The end of the free run that holds unit i (up to a reserved unit, with keep). */
static size_t run_end(const arena_t *a, size_t i, bool keep) {
  return next_bit(a, a->free, keep ? a->reserved : NULL, i, false);
}

/* The first free unit at or after i that may be resident. */
static size_t next_cached(const arena_t *a, size_t i) { return next_bit(a, a->cached, NULL, i, true); }

static char *unit_base(const arena_t *a, size_t i) { return a->base + i * ARENA_UNIT; }

/* The resident bytes of free units [first, first+n) (under the lock). */
static size_t cached_sum(const arena_t *a, size_t first, size_t n) {
  size_t sum = 0;
  for (size_t i = next_cached(a, first); i < first + n; i = next_cached(a, i + 1)) sum += a->resident[i];
  return sum;
}

static size_t units_for(size_t bytes) { return (bytes + ARENA_UNIT - 1) >> UNIT_BITS; }

/* The part of the first bytes of a run of units that falls in the unit at
 * offset off. */
static size_t unit_part(size_t bytes, size_t off) {
  return bytes <= off ? 0 : bytes - off < ARENA_UNIT ? bytes - off : ARENA_UNIT;
}

/* The arena that holds p, whose map entry is MAP_ARENA (NULL if none does:
 * it was unmapped meanwhile). */
static arena_t *arena_of(const void *p) {
  for (size_t k = 0; k < MAX_ARENAS; k++) {
    arena_t *a = &arenas[k];
    char *base = __atomic_load_n(&a->base, __ATOMIC_ACQUIRE);
    if (base && (const char *)p >= base && (const char *)p < base + a->units * ARENA_UNIT) return a;
  }
  return NULL;
}

/* ---- choosing and taking units (under the lock) ------------------------------ */

typedef struct {
  arena_t *arena;
  size_t first, resident, excess, run;
} place_t;

/* The best place for a block of n units, need bytes: the window of a free
 * run whose resident pages cover most of need (fewest page faults), then the
 * one with least resident beyond need (least to purge or to hold as slack),
 * then the shortest run (long ones stay whole for larger blocks); the first
 * window that covers need with less than a unit to spare ends the search.
 * With keep, units reserved for growing blocks are left alone. */
static place_t place_find(size_t n, size_t need, bool keep) {
  place_t best = {0};
  for (size_t k = 0; k < MAX_ARENAS; k++) {
    arena_t *a = &arenas[k];
    if (a->base == NULL) continue;
    for (size_t i = next_free(a, 0, keep), end; i < a->units; i = next_free(a, end, keep)) {
      end = run_end(a, i, keep);
      size_t run = end - i;
      if (run < n) continue;
      /* Windows are weighed only where one differs from the window before
       * it (a resident unit leaves or enters): between, they tie, and a tie
       * keeps the first. */
      for (size_t j = i, sum = cached_sum(a, i, n); j + n <= end;) {
        place_t p = {a, j, sum < need ? sum : need, sum > need ? sum - need : 0, run};
        if (best.arena == NULL || p.resident > best.resident ||
            (p.resident == best.resident && (p.excess < best.excess || (p.excess == best.excess && run < best.run))))
          best = p;
        if (best.resident == need && best.excess < ARENA_UNIT) return best; /* no fault, under a unit over */
        size_t leave = next_cached(a, j) + 1, enter = next_cached(a, j + n) + 1 - n;
        size_t next = leave < enter ? leave : enter, step = next - j;
        if (next + n > end) break;
        sum = step < n ? sum - cached_sum(a, j, step) + cached_sum(a, j + n, step) : cached_sum(a, next, n);
        j = next;
      }
    }
  }
  return best;
}

/* Takes units [first, first+n) of a out of the free runs. */
static void units_take(arena_t *a, size_t first, size_t n) {
  cache_bytes -= cached_sum(a, first, n);
  bits_set(a->free, first, n, false);
  bits_set(a->cached, first, n, false);
  bits_set(a->reserved, first, n, false);
}

/* Reserves for the growing block that ends at unit end up to n free units
 * after it that nothing else reserved; returns how many. */
static size_t units_reserve(arena_t *a, size_t end, size_t n) {
  size_t stop = run_end(a, end, true);
  n = stop - end < n ? stop - end : n;
  bits_set(a->reserved, end, n, true);
  return n;
}

/* Gives up a block's reservation [first, first+n) (a unit another block
 * took meanwhile is no longer reserved: units_take). */
static void units_unreserve(arena_t *a, size_t first, size_t n) { bits_set(a->reserved, first, n, false); }

/* Gives units [first, first+n) of a back to the free runs. */
static void units_free(arena_t *a, size_t first, size_t n, uint64_t now) {
  size_t sum = 0;
  for (size_t i = first; i < first + n; i++) {
    a->freed_ms[i] = now;
    sum += a->resident[i];
    if (a->resident[i]) bits_set(a->cached, i, 1, true);
  }
  if (cache_bytes == 0 || now < cache_since_ms) cache_since_ms = now;
  cache_bytes += sum;
  bits_set(a->free, first, n, true);
}

/* Maps a new arena of at least n units (fewer than ARENA_UNITS, in whole
 * regions, where the OS refuses a full one). Called without the lock;
 * returns whether one was added. */
static bool arena_new(size_t n) {
  size_t units = ARENA_UNITS, per_region = REGION_SIZE / ARENA_UNIT;
  n = (n + per_region - 1) / per_region * per_region;
  char *base;
  while ((base = os_map_aligned(units * ARENA_UNIT, REGION_SIZE)) == NULL && units > n)
    units = units / 2 > n ? units / 2 : n;
  if (base == NULL) return false;
  size_t size = units * ARENA_UNIT;
  if (region_map_index(base + size) >= MAP_ENTRIES) {
    os_unmap(base, size);
    return false;
  }
  hak_lock(&hak_lock_huge);
  arena_t *a = NULL;
  for (size_t k = 0; k < MAX_ARENAS && a == NULL; k++)
    if (arenas[k].base == NULL) a = &arenas[k];
  if (a) {
    memset(a, 0, sizeof *a); /* base stays NULL until published below */
    a->units = units;
    bits_set(a->free, 0, units, true);
    for (size_t off = 0; off < size; off += REGION_SIZE) region_map_set(base + off, MAP_ARENA);
    __atomic_store_n(&a->base, base, __ATOMIC_RELEASE);
  }
  hak_unlock(&hak_lock_huge);
  if (a == NULL) os_unmap(base, size);
  return a != NULL;
}

/* ---- purging ------------------------------------------------------------------ */

typedef struct {
  arena_t *a;
  size_t i;
} unit_ref_t;

/* The oldest free unit with resident pages, or {NULL}. */
static unit_ref_t oldest_cached(void) {
  unit_ref_t o = {0};
  for (size_t k = 0; k < MAX_ARENAS; k++) {
    arena_t *a = &arenas[k];
    for (size_t i = next_cached(a, 0); a->base && i < a->units; i = next_cached(a, i + 1))
      if (o.a == NULL || a->freed_ms[i] < o.a->freed_ms[o.i]) o = (unit_ref_t){a, i};
  }
  return o;
}

/* Takes free unit i of a out of the cache, to be purged. */
static void purge_mark(arena_t *a, size_t i) {
  units_take(a, i, 1);
  bits_set(a->purging, i, 1, true);
}

/* Purges free units older than the age bound and, oldest first, those
 * beyond the size bound (a strategy that keeps less may have just begun), or
 * all with force. All leave the cache at once (what it holds drops at once to
 * the bound), and their pages go back outside hak_lock_huge, so that blocks
 * are placed and freed meanwhile (elsewhere). One eviction at a time: it owns
 * the arenas' purging bits. Returns the bytes purged. */
static size_t cache_evict(bool force) {
  size_t total = 0, marked = 0;
  uint64_t now = os_now_ms(), age = (uint64_t)learn_knob(KNOB_BIGCACHE_AGE_MS);
  size_t limit = force ? 0 : (size_t)learn_knob(KNOB_BIGCACHE_MB) << 20;
  hak_lock(&hak_lock_huge);
  bool due = force || cache_bytes > limit || (cache_bytes && now - cache_since_ms >= age);
  hak_unlock(&hak_lock_huge);
  if (!due) return 0; /* the common case on a free: one look */
  hak_lock(&hak_lock_evict);
  hak_lock(&hak_lock_huge);
  uint64_t since = now;
  for (size_t k = 0; k < MAX_ARENAS; k++) {
    arena_t *a = &arenas[k];
    for (size_t i = next_cached(a, 0); a->base && i < a->units; i = next_cached(a, i + 1)) {
      if (force || now - a->freed_ms[i] >= age) purge_mark(a, i), marked++;
      else if (a->freed_ms[i] < since) since = a->freed_ms[i];
    }
  }
  cache_since_ms = since;
  for (unit_ref_t o; cache_bytes > limit && (o = oldest_cached()).a; marked++) purge_mark(o.a, o.i);
  hak_unlock(&hak_lock_huge);
  for (size_t k = 0; k < MAX_ARENAS && marked; k++) {
    arena_t *a = &arenas[k];
    for (size_t i = next_bit(a, a->purging, NULL, 0, true); a->base && i < a->units;
         i = next_bit(a, a->purging, NULL, i + 1, true)) {
      size_t first = i, bytes = a->resident[i]; /* a run of whole units and its last: one call */
      while (i + 1 < a->units && bit_get(a->purging, i + 1) && a->resident[i] == ARENA_UNIT) bytes += a->resident[++i];
      total += os_purge(unit_base(a, first), bytes);
      for (size_t j = first; j <= i; j++) a->resident[j] = 0;
    }
  }
  hak_lock(&hak_lock_huge);
  for (size_t k = 0; k < MAX_ARENAS && marked; k++) {
    arena_t *a = &arenas[k];
    for (size_t w = 0; w < ARENA_WORDS; w++) a->free[w] |= a->purging[w], a->purging[w] = 0;
  }
  hak_unlock(&hak_lock_huge);
  hak_unlock(&hak_lock_evict);
  return total;
}

/* Unmaps the arenas that hold no block (after a forced eviction: nothing in
 * them is resident). Returns whether any was. */
static bool arenas_unmap_empty(void) {
  char *base[MAX_ARENAS];
  size_t size[MAX_ARENAS], n = 0;
  hak_lock(&hak_lock_huge);
  for (size_t k = 0; k < MAX_ARENAS; k++) {
    arena_t *a = &arenas[k];
    if (a->base == NULL || run_end(a, 0, false) != a->units) continue;
    cache_bytes -= cached_sum(a, 0, a->units);
    base[n] = a->base, size[n] = a->units * ARENA_UNIT;
    for (size_t off = 0; off < size[n]; off += REGION_SIZE) region_map_set(base[n] + off, MAP_NONE);
    __atomic_store_n(&a->base, NULL, __ATOMIC_RELEASE);
    n++;
  }
  hak_unlock(&hak_lock_huge);
  for (size_t m = 0; m < n; m++) os_unmap(base[m], size[m]);
  return n > 0;
}

/* ---- blocks in arenas ------------------------------------------------------------ */

/* Units [first, first+n) of a now hold a block of need bytes (header
 * included) that may write extent bytes (its usable size): what a freed
 * block left resident beyond need + slack goes back, and the resident bytes
 * the block accounts for (an upper bound: what it may write) are returned.
 * With zero, what may be non-zero of [from, to) is cleared. */
static size_t block_settle(arena_t *a, size_t first, size_t n, size_t need, size_t extent, size_t slack, char *from,
                           char *to) {
  size_t total = 0;
  for (size_t i = first; i < first + n; i++) {
    size_t off = (i - first) * ARENA_UNIT;
    char *u = unit_base(a, i);
    if (from < to && a->resident[i]) { /* calloc: what a freed block left */
      char *lo = u > from ? u : from, *hi = u + a->resident[i] < to ? u + a->resident[i] : to;
      if (lo < hi) memset(lo, 0, (size_t)(hi - lo));
    }
    size_t keep = unit_part(need + slack, off), covered = unit_part(extent, off);
    if (a->resident[i] > keep) {
      os_purge(u + keep, a->resident[i] - keep);
      a->resident[i] = (uint32_t)keep;
    }
    if (a->resident[i] < covered) a->resident[i] = (uint32_t)covered;
    total += a->resident[i];
  }
  return total;
}

/* A block of need bytes (header included) in n units of an arena, that may
 * write extent bytes (its usable size and header); sets *residentp, *arenap
 * and *reservep. NULL when no arena could be had. What a freed block left
 * resident beyond need stays with it up to HAKMEM_HUGE_SLACK_PCT of need. A
 * block that realloc grows is placed like any other and reserves up to n
 * free units after it: other blocks go elsewhere while there is room, so it
 * grows in place, and the reserved units' pages stay in the cache meanwhile
 * (taken into the block instead, eight buffers grown to 1 MiB held twice
 * their size: realloc bench peak 14.7 -> 19-21 MB). */
static char *arena_alloc(size_t n, size_t need, size_t extent, size_t offset, size_t size, bool zero, bool growing,
                         size_t *residentp, arena_t **arenap, size_t *reservep) {
  place_t p;
  size_t r = 0;
  for (int tries = 0;; tries++) {
    hak_lock(&hak_lock_huge);
    p = place_find(n, need, true);
    if (p.arena == NULL) p = place_find(n, need, false);
    if (p.arena) {
      units_take(p.arena, p.first, n);
      start_set(p.arena, p.first, true);
      if (growing) r = units_reserve(p.arena, p.first + n, n);
    }
    hak_unlock(&hak_lock_huge);
    if (p.arena || tries > 0 || !arena_new(n)) break;
  }
  if (p.arena == NULL) return NULL;
  char *base = unit_base(p.arena, p.first);
  size_t slack = os_page_round(need / 100 * (size_t)learn_knob(KNOB_HUGE_SLACK_PCT));
  char *from = zero ? base + offset : NULL, *to = zero ? base + offset + size : NULL;
  if (p.resident) stat_inc(huge_cache_hits);
  else stat_inc(huge_mapped);
  atomic_fetch_add_explicit(&hak_huge_reused, p.resident, memory_order_relaxed);
  *residentp = block_settle(p.arena, p.first, n, need, extent, slack, from, to);
  *arenap = p.arena;
  *reservep = r;
  return base;
}

static size_t header_unit(const huge_header_t *h) { return (size_t)((char *)h - h->arena->base) >> UNIT_BITS; }

/* ---- the pool's interface ----------------------------------------------------------- */

/* The header of huge block p, or NULL when p is not one. */
static huge_header_t *huge_lookup(const void *p) {
  uint8_t kind = region_map_kind(p);
  huge_header_t *h;
  if (kind == MAP_ARENA) {
    arena_t *a = arena_of(p);
    if (a == NULL) return NULL;
    size_t i = (size_t)((const char *)p - a->base) >> UNIT_BITS;
    if (!start_get(a, i)) return NULL; /* inside a block, or in a free run */
    h = (huge_header_t *)unit_base(a, i);
  } else if (kind >= MAP_HUGE) {
    char *chunk = (char *)region_of(p);
    if (kind > MAP_HUGE) chunk -= (size_t)1 << (kind - MAP_HUGE + REGION_SHIFT - 1);
    h = (huge_header_t *)chunk;
  } else {
    return NULL;
  }
  return h->magic == HUGE_MAGIC && h->block == p ? h : NULL;
}

void *huge_alloc(size_t size, size_t align, bool zero, bool growing) {
  size_t page = os_page_size();
  if (size == 0) size = 1; /* the block must lie inside its mapping */
  if (align < page) align = page;
  size_t offset = align, need = offset + size + page - 1;
  if (size > ((size_t)1 << ADDRESS_BITS) || need < size) return NULL;
  need &= ~(page - 1);
  uint8_t kind = MAP_HUGE;
  if (align >= REGION_SIZE) kind = (uint8_t)(MAP_HUGE + __builtin_ctzl(align) - REGION_SHIFT + 1);
  learn_tick(size);
  /* the last unit may be far from full: like a size class, a block offers at
   * most a quarter more than asked */
  size_t cap = os_page_round(size + size / 4), map_size = need, resident = need;
  arena_t *arena = NULL;
  char *base = NULL;
  size_t units = units_for(need), reserve = 0;
  if (align < ARENA_UNIT && units <= ARENA_BLOCK_MAX) {
    map_size = units * ARENA_UNIT;
    size_t extent = offset + cap < map_size ? offset + cap : map_size; /* what it may write */
    base = arena_alloc(units, need, extent, offset, size, zero, growing, &resident, &arena, &reserve);
  }
  if (base == NULL) {
    size_t map_align = kind == MAP_HUGE ? REGION_SIZE : align;
    map_size = growing ? reserve_for(need) : need;
    base = os_map_aligned(map_size, map_align);
    if (base == NULL && map_size > need) base = os_map_aligned(map_size = need, map_align);
    if (base == NULL && hak_release_cached()) base = os_map_aligned(map_size = need, map_align);
    if (base == NULL) return NULL;
    if (region_map_index(base + map_size) >= MAP_ENTRIES) {
      os_unmap(base, map_size);
      return NULL;
    }
    resident = need;
    stat_inc(huge_mapped);
    region_map_set(base + offset, kind);
  }
  huge_header_t *h = (huge_header_t *)base;
  h->magic = HUGE_MAGIC;
  h->block = base + offset;
  h->map_size = map_size;
  h->arena = arena;
  h->reserve = reserve;
  size_t room = arena ? map_size : need;
  h->usable = room - offset < cap ? room - offset : cap;
  h->resident = resident;
  atomic_fetch_add_explicit(&hak_huge_bytes, h->resident, memory_order_relaxed);
  stat_alloc(STAT_ROW_HUGE, h->usable);
  return h->block;
}

void huge_free(void *p) {
  huge_header_t *h = huge_lookup(p);
  if (h == NULL) {
    hak_report_bad_pointer("free", p);
    return;
  }
  stat_free(STAT_ROW_HUGE, h->usable, true);
  atomic_fetch_sub_explicit(&hak_huge_bytes, h->resident, memory_order_relaxed);
  h->magic = 0;
  learn_active();
  arena_t *a = h->arena;
  if (a == NULL) {
    region_map_set(p, MAP_NONE);
    os_unmap(h, h->map_size);
  } else {
    size_t first = header_unit(h), n = h->map_size >> UNIT_BITS;
    hak_lock(&hak_lock_huge);
    start_set(a, first, false);
    units_unreserve(a, first + n, h->reserve);
    units_free(a, first, n, os_now_ms());
    hak_unlock(&hak_lock_huge);
    purge_notice_dirty();
    cache_evict(false);
  }
  learn_tick(0);
}

size_t huge_usable_size(const void *p) {
  huge_header_t *h = huge_lookup(p);
  return h ? h->usable : 0;
}

/* Resizes an arena block in place to hold need bytes (header included) and
 * offer up to extent: growing, it takes the free units after it (its
 * reservation first) and reserves as many again; below half its units, it
 * gives the trailing ones back. Returns false when too few units after it
 * are free. */
static bool arena_resize(huge_header_t *h, size_t need, size_t extent) {
  arena_t *a = h->arena;
  size_t first = header_unit(h), old = h->map_size >> UNIT_BITS, n = units_for(need);
  hak_lock(&hak_lock_huge);
  if (n > old && run_end(a, first + old, false) < first + n) {
    hak_unlock(&hak_lock_huge);
    return false;
  }
  if (n > old || n < old / 2) {
    units_unreserve(a, first + old, h->reserve);
    if (n > old) units_take(a, first + old, n - old);
    else units_free(a, first + n, old - n, os_now_ms());
    h->reserve = n > old ? units_reserve(a, first + n, n) : 0;
  } else {
    n = old;
  }
  hak_unlock(&hak_lock_huge);
  if (extent > n * ARENA_UNIT) extent = n * ARENA_UNIT;
  size_t resident = block_settle(a, first, n, need, extent, n * ARENA_UNIT, NULL, NULL);
  huge_bytes_update(h->resident, resident);
  h->resident = resident;
  h->map_size = n * ARENA_UNIT;
  h->usable = extent - (size_t)(h->block - (char *)h);
  return true;
}

/* Moves an arena block that cannot grow in place to an own mapping of want
 * bytes, its pages moved, not copied. The units it leaves stay mapped (a hole
 * in the arena could be taken by another thread's mmap at once) and read as
 * untouched. Returns the new header, or NULL where the kernel cannot move
 * pages that way (nothing changed: the caller copies). */
static huge_header_t *arena_move_out(huge_header_t *h, size_t want) {
  arena_t *a = h->arena;
  size_t first = header_unit(h), n = h->map_size >> UNIT_BITS, offset = (size_t)(h->block - (char *)h);
  char *to = os_map_aligned(want, REGION_SIZE);
  if (to == NULL) return NULL;
  if (!os_move_pages(h, h->map_size, to)) {
    os_unmap(to, want);
    return NULL;
  }
  /* Mark the new place before the old is freed: another thread may take
   * that at once. */
  huge_header_t *moved = (huge_header_t *)to;
  moved->block = to + offset;
  moved->arena = NULL;
  moved->map_size = want;
  region_map_set(moved->block, MAP_HUGE);
  for (size_t i = first; i < first + n; i++) a->resident[i] = 0;
  hak_lock(&hak_lock_huge);
  start_set(a, first, false);
  units_unreserve(a, first + n, moved->reserve);
  units_free(a, first, n, os_now_ms());
  hak_unlock(&hak_lock_huge);
  moved->reserve = 0;
  return moved;
}

/* An own mapping resized in place or moved (its pages, not copied) to a new
 * aligned address of want bytes. Returns NULL when neither works. */
static huge_header_t *own_resize(huge_header_t *h, size_t need) {
  size_t old = h->map_size, want = need, offset = (size_t)(h->block - (char *)h);
  if (need < old) { /* shrink: unmap the tail */
    os_unmap((char *)h + need, old - need);
  } else if (os_remap(h, old, want = reserve_for(need), NULL) == NULL &&
             os_remap(h, old, want = need, NULL) == NULL) {
    char *to = os_map_aligned(want = reserve_for(need), REGION_SIZE);
    if (to == NULL) return NULL;
    /* Unmark first: once moved, the old range may be mapped (and marked) by
     * another thread at once. */
    region_map_set(h->block, MAP_NONE);
    if (os_remap(h, old, want, to) == NULL) {
      region_map_set(h->block, MAP_HUGE);
      os_unmap(to, want);
      return NULL;
    }
    h = (huge_header_t *)to;
    h->block = to + offset;
    region_map_set(h->block, MAP_HUGE);
  }
  h->map_size = want;
  return h;
}

/* Resizes in place, or moves the pages (no copy) to a new aligned address.
 * Returns NULL when neither works; p is then unchanged. */
void *huge_realloc(void *p, size_t size) {
  huge_header_t *h = huge_lookup(p);
  uint8_t kind = region_map_kind(p);
  if (h == NULL || (kind != MAP_HUGE && kind != MAP_ARENA)) return NULL;
  size_t offset = (size_t)(h->block - (char *)h);
  size_t need = os_page_round(offset + size);
  if (need < size) return NULL;
  size_t old_usable = h->usable, old_resident = h->resident;
  if (h->arena) {
    /* In place, offering a quarter more (a buffer grown a few bytes at a
     * time comes back every quarter, not every page), or out to an own
     * mapping that reserves room to grow. */
    if (!arena_resize(h, need, offset + os_page_round(size + size / 4)) &&
        (h = arena_move_out(h, reserve_for(need))) == NULL)
      return NULL;
  } else if (need > h->map_size || (need < h->map_size / 2 && size < old_usable)) {
    /* Only a shrink gives the tail back; growth reserves twice what it needs
     * (a block grown a page at a time takes a system call per doubling, not
     * per page: realloc bench, 1,258 mremap calls -> 6). */
    if ((h = own_resize(h, need)) == NULL) return NULL;
  }
  if (h->arena == NULL) { /* arena_resize accounts for its own */
    size_t resident = old_resident > need ? old_resident : need;
    h->resident = resident < h->map_size ? resident : h->map_size;
    huge_bytes_update(old_resident, h->resident);
    h->usable = need - offset;
  }
  stat_free(STAT_ROW_HUGE, old_usable, true);
  stat_alloc(STAT_ROW_HUGE, h->usable);
  return h->block;
}

size_t huge_trim(bool unmap) {
  size_t n = cache_evict(true);
  if (unmap && arenas_unmap_empty()) n++;
  return n;
}

size_t huge_cached_bytes(void) {
  hak_lock(&hak_lock_huge);
  size_t n = cache_bytes;
  hak_unlock(&hak_lock_huge);
  return n;
}

size_t huge_cached_by_age(size_t n, const uint64_t age_ms[], size_t young[]) {
  uint64_t now = os_now_ms();
  for (size_t k = 0; k < n; k++) young[k] = 0;
  hak_lock(&hak_lock_huge);
  for (size_t j = 0; j < MAX_ARENAS; j++) {
    arena_t *a = &arenas[j];
    for (size_t i = next_cached(a, 0); a->base && i < a->units; i = next_cached(a, i + 1))
      for (size_t k = 0; k < n; k++)
        if (now - a->freed_ms[i] < age_ms[k]) young[k] += a->resident[i];
  }
  size_t all = cache_bytes;
  hak_unlock(&hak_lock_huge);
  return all;
}

/* Purges aged units; returns whether any resident ones remain free. */
bool huge_cache_evict_aged(void) {
  cache_evict(false);
  return huge_cached_bytes() != 0;
}
