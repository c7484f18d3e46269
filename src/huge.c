/* Huge blocks: above LARGE_MAX, one mapping each. The mapping starts at a
 * region-aligned address with a header page, so that masking the block's
 * address finds the header just as it finds a region's; the ownership map
 * marks the chunk MAP_HUGE. Freed mappings wait in the BigCache, bounded by
 * bytes (HAKMEM_BIGCACHE_MB) and by age (HAKMEM_BIGCACHE_AGE_MS).
 *
 * A fresh mapping reserves HUGE_RESERVE times the address space it needs
 * (untouched, so it costs no memory): freed, it can later serve a larger
 * block in place, its resident pages as they are and the rest faulting in.
 * Building that block instead by moving cached pages (mremap) into a new
 * mapping costs the kernel's page-table work and, on a virtual machine, more
 * when the moved pages are next touched (the large benchmark, pinned default
 * strategy: 500 -> 725 blocks/s, peak 290 -> 274 MB; and see MOVE_UNIT). So
 * the cache and its bounds count the bytes that may be resident, not the
 * mapping.
 *
 * Alignments of a region or more put the block at base + align; the map then
 * records how far back the header lies (MAP_HUGE + log2(align) - 21). */
#define _GNU_SOURCE
#include <string.h>

#include "internal.h"
#include "learn.h"
#include "options.h"
#include "stats.h"

#define HUGE_MAGIC 0x68616b6d656d4855ull
/* Cached pages are moved in whole, aligned page tables (2 MiB on x86-64):
 * mremap then hands over each table as it is. Moving part of a table copies
 * its entries one by one, and under shadow paging (this project's CI VMs)
 * the moved pages, and their neighbours, then fault again in the hypervisor
 * when next touched: moving cached pages into each new block that way made
 * the phases benchmark's bursts (8 blocks of 256 KiB-32 MiB written, freed,
 * again) run at 690 blocks/s against 1,800-2,300 with whole tables, and
 * 3,900 with no moves at all (but 340 MB peak instead of 180). A need
 * that ends inside a table takes that table whole where the rest of it is
 * at most a ROUND_UP_SHARE-th of the need: its last part had faulted in, 18
 * faults a block, and the same burst ran at 2,500 blocks/s a second into
 * it; so, 9,600-9,800 (tcmalloc 8,100). A whole last table for every need
 * raised the peak of test_memory's churn (16 B-4 MiB) from 278 to 291 MiB
 * for 256 MiB live. */
#define MOVE_UNIT ((size_t)2 << 20)
#define ROUND_UP_SHARE 16
#define CACHE_SLOTS 32
#define HUGE_RESERVE 2

/* The address space a mapping of need bytes reserves (need itself if the
 * product overflows). */
static size_t reserve_for(size_t need) {
  return need * HUGE_RESERVE / HUGE_RESERVE == need ? need * HUGE_RESERVE : need;
}

typedef struct {
  uint64_t magic;
  char *block;      /* the pointer handed out */
  size_t map_size;  /* bytes mapped from the header on */
  size_t usable;    /* bytes the block offers: a reused run may be larger */
  size_t resident;  /* bytes from the header on that are (or once the block
                       is written, will be) resident; usable slack the
                       program writes beyond its size is not counted */
  bool pieced;      /* built of several mappings: see cache_assemble */
} huge_header_t;

typedef struct {
  char *base;
  size_t size, resident;
  uint64_t freed_ms;
  bool pieced;
} cache_entry_t;

hak_lock_t hak_lock_huge;
_Atomic size_t hak_huge_bytes;
static cache_entry_t cache[CACHE_SLOTS]; /* under hak_lock_huge */
static size_t cache_bytes; /* resident bytes of the cached runs */

static huge_header_t *huge_header(const void *p, uint8_t kind) {
  char *chunk = (char *)region_of(p);
  if (kind > MAP_HUGE) chunk -= (size_t)1 << (kind - MAP_HUGE + REGION_SHIFT - 1);
  return (huge_header_t *)chunk;
}

static bool on_region(const char *p) { return ((uintptr_t)p & (REGION_SIZE - 1)) == 0; }

/* Whether run e serves a mapping of need bytes in place: it starts at a
 * region boundary, holds need, and at least `least` bytes of it are
 * resident (in_place_least). */
static bool fits_in_place(const cache_entry_t *e, size_t need, size_t least) {
  return on_region(e->base) && e->size >= need && e->resident >= least;
}

/* The resident bytes a run needs to serve need in place (under the lock):
 * all of need while the cache holds that much, for a run that would fault
 * in part of it is better left to the resident pages of all the runs,
 * gathered in whole page tables with mremap, which costs next to nothing
 * when they are touched (the large benchmark, learning: in place from three
 * quarters resident 679/s, 88 k faults and 291 MB peak; only when all is
 * resident 835/s, 70 k faults and 274 MB, tcmalloc 863/s and 77 k). Three
 * quarters where gathering cannot give more (the cache holds less) or runs
 * stay whole (HAKMEM_BIGCACHE_WHOLE), whose alternative is a fresh mapping:
 * in a steady burst of 8 blocks of 256 KiB-32 MiB freed and allocated
 * again, each then finds a whole run and nothing faults (17,900-18,300
 * blocks/s against 9,600-9,800 gathering, tcmalloc 8,100), but where sizes
 * vary (the large benchmark) it faults half as much again. As a fifth
 * learned strategy its explorations cost the large benchmark a tenth. */
static size_t in_place_least(size_t need) {
  return hak_option_on(OPT_BIGCACHE_WHOLE) || cache_bytes < need ? need / 4 * 3 : need;
}

/* How well a cached run serves a mapping of need bytes (higher is better):
 * one that fits in place, the one whose resident pages come closest to need
 * first (fewest faults, then least to purge); one with need resident
 * elsewhere must be moved; another only contributes its resident pages, the
 * most first. */
static size_t fit_rank(const cache_entry_t *e, size_t need, size_t least) {
  if (fits_in_place(e, need, least)) {
    size_t r = e->resident;
    return ((size_t)3 << 52) + (r >= need ? ((size_t)1 << 50) - ((r - need) >> 12) : r >> 12);
  }
  if (e->resident >= need) return ((size_t)2 << 52) - (e->size >> 12);
  return e->resident >> 12;
}

/* Removes slot i's run from the cache (under the lock) and returns it. */
static cache_entry_t cache_remove(size_t i) {
  cache_entry_t e = cache[i];
  cache_bytes -= e.resident;
  cache[i].base = NULL;
  return e;
}

/* Takes the cached run that serves need bytes best; sets *leastp to what it
 * needs resident to serve in place. */
static bool cache_take(size_t need, cache_entry_t *out, size_t *leastp) {
  hak_lock(&hak_lock_huge);
  size_t best = CACHE_SLOTS, least = *leastp = in_place_least(need);
  for (size_t i = 0; i < CACHE_SLOTS; i++) {
    if (cache[i].base == NULL) continue;
    if (best == CACHE_SLOTS || fit_rank(&cache[i], need, least) > fit_rank(&cache[best], need, least)) best = i;
  }
  if (best < CACHE_SLOTS) *out = cache_remove(best);
  hak_unlock(&hak_lock_huge);
  return best < CACHE_SLOTS;
}

static void cache_put(char *base, size_t size, size_t resident, bool pieced);

/* The bytes of run e that may move into a block still short of want: whole
 * page tables of its resident prefix, none unless it starts on one (see
 * MOVE_UNIT). */
static size_t movable(const cache_entry_t *e, size_t want) {
  if ((uintptr_t)e->base & (MOVE_UNIT - 1)) return 0;
  return (e->resident < want ? e->resident : want) & ~(MOVE_UNIT - 1);
}

/* Puts back what lies from off on in run e, if it can serve again: in place
 * (from a region boundary) or moved (movable); otherwise unmaps it. */
static void cache_put_tail(const cache_entry_t *e, size_t off) {
  cache_entry_t t = {.base = e->base + off, .size = e->size - off,
                     .resident = e->resident > off ? e->resident - off : 0, .pieced = e->pieced};
  if (t.resident && (on_region(t.base) || movable(&t, t.resident))) cache_put(t.base, t.size, t.resident, t.pieced);
  else if (e->size > off) os_unmap(t.base, t.size);
}

/* A mapping of at least need bytes built from cached runs; sets *sizep to
 * the bytes it has and *residentp to those that may be resident. One run
 * that fits at a region boundary is used as it is; otherwise (unless
 * HAKMEM_BIGCACHE_WHOLE keeps runs whole) the runs' pages are moved with
 * mremap (no copy, no page fault) into a fresh aligned mapping, whose rest
 * faults in as usual. Leftover tails go back to the
 * cache. A block that realloc grows keeps a run's resident pages whole: it
 * will write them (realloc bench: 16.0 k page faults -> 4.7 k). Returns
 * NULL when the cache is empty.
 *
 * A mapping built of moved pieces spans several kernel mappings (VMAs):
 * mremap moves such a range only unresized and since Linux 6.17, and before
 * that fails after it has unmapped its destination. So a pieced mapping
 * (*piecedp) is a source here only where the kernel allows it
 * (os_remap_spans), never of huge_realloc's resizing move, and a failed
 * move gives up the whole new mapping. */
static char *cache_assemble(size_t need, bool growing, size_t *sizep, size_t *residentp, bool *piecedp) {
  cache_entry_t e;
  size_t least;
  if (!cache_take(need, &e, &least)) return NULL;
  if (fits_in_place(&e, need, least)) {
    /* Up to twice the need, the whole run serves (no system call); beyond,
     * the rest goes back from the next region boundary, where it too can
     * serve in place. Resident slack beyond what the strategy lets stay
     * with the block is purged. */
    size_t keep = (need + REGION_SIZE - 1) & ~(REGION_SIZE - 1);
    if (e.size <= 2 * need || keep >= e.size) keep = e.size;
    else cache_put_tail(&e, keep);
    size_t resident = e.resident < keep ? e.resident : keep;
    size_t slack = os_page_round(need / 100 * (size_t)learn_knob(KNOB_HUGE_SLACK_PCT));
    if (resident > need + slack && !growing) {
      os_purge(e.base + need + slack, resident - need - slack);
      resident = need + slack;
    }
    *sizep = keep;
    *residentp = resident;
    *piecedp = e.pieced;
    return e.base;
  }
  /* the last table whole where that adds little (see MOVE_UNIT) */
  size_t up = (need + MOVE_UNIT - 1) & ~(MOVE_UNIT - 1), goal = up - need <= need / ROUND_UP_SHARE ? up : need;
  size_t size = reserve_for(need), n = hak_option_on(OPT_BIGCACHE_WHOLE) ? 0 : movable(&e, goal);
  bool spans = os_remap_spans();
  char *to = n == 0 || (e.pieced && !spans) ? NULL : os_map_aligned(size, REGION_SIZE);
  if (to == NULL) {
    cache_put_tail(&e, 0);
    return NULL;
  }
  size_t filled = 0;
  for (;;) {
    size_t moved = os_move(e.base, n, to + filled);
    if (moved < n) { /* the pieces moved are gone from the run */
      cache_put_tail(&e, moved);
      os_unmap(to, size);
      return NULL;
    }
    filled += n;
    cache_put_tail(&e, n);
    if (filled >= goal || !cache_take(goal - filled, &e, &least)) break;
    if ((e.pieced && !spans) || (n = movable(&e, goal - filled)) == 0) {
      cache_put_tail(&e, 0);
      break;
    }
  }
  *sizep = size;
  *residentp = filled > need ? filled : need;
  *piecedp = true;
  return to;
}

/* The slot of the run freed longest ago (CACHE_SLOTS when none). */
static size_t cache_oldest(void) {
  size_t oldest = CACHE_SLOTS;
  for (size_t i = 0; i < CACHE_SLOTS; i++)
    if (cache[i].base && (oldest == CACHE_SLOTS || cache[i].freed_ms < cache[oldest].freed_ms)) oldest = i;
  return oldest;
}

/* Evicts entries older than the age bound and, oldest first, those beyond
 * the size bound (a strategy that keeps less may have just begun), or all
 * with force; unmaps them outside the lock. Returns bytes unmapped. */
static size_t cache_evict(bool force) {
  cache_entry_t out[CACHE_SLOTS];
  size_t n = 0, bytes = 0, limit = force ? 0 : (size_t)learn_knob(KNOB_BIGCACHE_MB) << 20;
  uint64_t now = os_now_ms(), age = (uint64_t)learn_knob(KNOB_BIGCACHE_AGE_MS);
  hak_lock(&hak_lock_huge);
  for (size_t i = 0; i < CACHE_SLOTS; i++)
    if (cache[i].base && (force || now - cache[i].freed_ms >= age)) out[n++] = cache_remove(i);
  while (cache_bytes > limit) out[n++] = cache_remove(cache_oldest());
  hak_unlock(&hak_lock_huge);
  for (size_t i = 0; i < n; i++) os_unmap(out[i].base, out[i].size), bytes += out[i].resident;
  return bytes;
}

/* Keeps a run of freed pages, evicting the oldest runs to stay within the
 * cache's bounds; a run with more resident than the whole cache may hold is
 * unmapped. */
static void cache_put(char *base, size_t size, size_t resident, bool pieced) {
  size_t limit = (size_t)learn_knob(KNOB_BIGCACHE_MB) << 20;
  cache_entry_t out[CACHE_SLOTS + 1];
  size_t n = 0;
  if (resident > limit) {
    out[n++] = (cache_entry_t){base, size, resident, 0, pieced};
  } else {
    hak_lock(&hak_lock_huge);
    for (;;) {
      size_t slot = 0;
      while (slot < CACHE_SLOTS && cache[slot].base) slot++;
      if (slot < CACHE_SLOTS && cache_bytes + resident <= limit) {
        cache[slot] = (cache_entry_t){base, size, resident, os_now_ms(), pieced};
        cache_bytes += resident;
        break;
      }
      out[n++] = cache_remove(cache_oldest());
    }
    hak_unlock(&hak_lock_huge);
    purge_notice_dirty();
  }
  for (size_t i = 0; i < n; i++) os_unmap(out[i].base, out[i].size);
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
  size_t map_size = need, resident = 0;
  bool pieced = false;
  char *base = kind == MAP_HUGE ? cache_assemble(need, growing, &map_size, &resident, &pieced) : NULL;
  bool cached = base != NULL;
  if (cached) {
    stat_inc(huge_cache_hits);
  } else {
    size_t map_align = kind == MAP_HUGE ? REGION_SIZE : align;
    if (kind == MAP_HUGE) map_size = reserve_for(need);
    base = os_map_aligned(map_size, map_align);
    if (base == NULL && map_size > need) base = os_map_aligned(map_size = need, map_align);
    if (base == NULL && hak_release_cached()) base = os_map_aligned(map_size, map_align);
    if (base == NULL) return NULL;
    if (region_map_index(base + map_size) >= MAP_ENTRIES) {
      os_unmap(base, map_size);
      return NULL;
    }
    stat_inc(huge_mapped);
  }
  huge_header_t *h = (huge_header_t *)base;
  h->magic = HUGE_MAGIC;
  h->block = base + offset;
  h->map_size = map_size;
  h->pieced = pieced;
  /* a larger cached run is not handed out whole: like a size class, at most
   * a quarter more than asked */
  size_t cap = os_page_round(size + size / 4), room = cached ? map_size : need;
  h->usable = room - offset < cap ? room - offset : cap;
  h->resident = resident > need ? resident : need;
  if (zero && cached) memset(h->block, 0, size);
  region_map_set(h->block, kind);
  atomic_fetch_add_explicit(&hak_huge_bytes, h->resident, memory_order_relaxed);
  stat_alloc(STAT_ROW_HUGE, h->usable);
  return h->block;
}

/* The header of huge block p, or NULL when p is not one. */
static huge_header_t *huge_lookup(const void *p) {
  uint8_t kind = region_map_kind(p);
  if (kind < MAP_HUGE) return NULL;
  huge_header_t *h = huge_header(p, kind);
  return h->magic == HUGE_MAGIC && h->block == p ? h : NULL;
}

void huge_free(void *p) {
  huge_header_t *h = huge_lookup(p);
  if (h == NULL) {
    hak_report_bad_pointer("free", p);
    return;
  }
  stat_free(STAT_ROW_HUGE, h->usable, true);
  atomic_fetch_sub_explicit(&hak_huge_bytes, h->resident, memory_order_relaxed);
  region_map_set(p, MAP_NONE);
  h->magic = 0;
  learn_active();
  cache_put((char *)h, h->map_size, h->resident, h->pieced);
  cache_evict(false);
  learn_tick(0);
}

size_t huge_usable_size(const void *p) {
  huge_header_t *h = huge_lookup(p);
  return h ? h->usable : 0;
}

/* Resizes in place, or moves the pages (no copy) to a new aligned address.
 * Returns NULL when neither works; p is then unchanged. */
void *huge_realloc(void *p, size_t size) {
  huge_header_t *h = huge_lookup(p);
  if (h == NULL || region_map_kind(p) != MAP_HUGE) return NULL;
  size_t offset = (size_t)(h->block - (char *)h);
  size_t need = os_page_round(offset + size);
  if (need < size) return NULL;
  size_t old = h->map_size, old_usable = h->usable, old_resident = h->resident;
  /* Only a shrink gives the tail back: a block taken from the BigCache can be
   * far smaller than its mapping, and growing it must keep the room. */
  if (need > old || (need < old / 2 && size < old_usable)) {
    /* Growth reserves twice what it needs, as a new mapping does: a block
     * grown a page at a time then takes a system call per doubling, not
     * per page (realloc bench: 1,258 mremap calls -> 6). */
    size_t want = need;
    if (need < old) { /* shrink: unmap the tail */
      os_unmap((char *)h + need, old - need);
    } else if (os_remap(h, old, want = reserve_for(need), NULL) == NULL &&
               os_remap(h, old, want = need, NULL) == NULL) {
      if (h->pieced) return NULL; /* see cache_assemble: the caller copies */
      char *to = os_map_aligned(want = reserve_for(need), REGION_SIZE);
      if (to == NULL) return NULL;
      /* Unmark first: once moved, the old range may be mapped (and marked)
       * by another thread at once. */
      region_map_set(p, MAP_NONE);
      if (os_remap(h, old, want, to) == NULL) {
        region_map_set(p, MAP_HUGE);
        os_unmap(to, want);
        return NULL;
      }
      h = (huge_header_t *)to;
      h->block = to + offset;
      h->pieced = false; /* one range, moved and grown whole */
      region_map_set(h->block, MAP_HUGE);
    }
    h->map_size = want;
  }
  h->usable = need - offset;
  size_t resident = old_resident > need ? old_resident : need;
  h->resident = resident < h->map_size ? resident : h->map_size;
  stat_free(STAT_ROW_HUGE, old_usable, true);
  stat_alloc(STAT_ROW_HUGE, h->usable);
  if (h->resident > old_resident) atomic_fetch_add_explicit(&hak_huge_bytes, h->resident - old_resident, memory_order_relaxed);
  else atomic_fetch_sub_explicit(&hak_huge_bytes, old_resident - h->resident, memory_order_relaxed);
  return h->block;
}

size_t huge_trim(void) { return cache_evict(true); }

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
  for (size_t i = 0; i < CACHE_SLOTS; i++)
    for (size_t k = 0; cache[i].base && k < n; k++)
      if (now - cache[i].freed_ms < age_ms[k]) young[k] += cache[i].resident;
  size_t all = cache_bytes;
  hak_unlock(&hak_lock_huge);
  return all;
}

/* Evicts aged entries; returns whether any remain cached. */
bool huge_cache_evict_aged(void) {
  cache_evict(false);
  return huge_cached_bytes() != 0;
}
