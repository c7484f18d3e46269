/* Runs of pages: bins of free runs, merging, the dirty list. */
#include "run.h"

/* The node of the free run that starts at page. */
hak_inline run_node_t *run_node_at(const run_chunk_t *c, uint32_t page) { return &c->node[c->pg[page].node]; }

/* A node from c's pool for the free run that starts at page. */
static run_node_t *node_take(run_chunk_t *c, uint32_t page) {
  uint32_t i;
  if (c->node_free) {
    i = c->node_free - 1;
    c->node_free = c->node[i].page;
  } else {
    i = c->node_top++;
    hak_assert(i <= c->pages / 2);
  }
  c->pg[page].node = i;
  run_node_t *x = &c->node[i];
  x->page = page;
  return x;
}

static void node_give(run_chunk_t *c, run_node_t *x) {
  x->page = c->node_free;
  c->node_free = (uint32_t)(x - c->node) + 1;
}

/* ---- bins ---------------------------------------------------------------- */

/* The bin of a free run of n pages: exact up to 64, then eight per doubling
 * ((64 * 2^k, 64 * 2^(k+1)] in steps of 8 * 2^k). */
static unsigned bin_of(uint32_t n) {
  if (n <= 64) return n - 1;
  unsigned k = (unsigned)(63 - __builtin_clzll(n - 1)) - 6;
  return 64 + 8 * k + (unsigned)(((n - 1) >> (k + 3)) - 8);
}

/* The shortest run bin b holds. */
static uint32_t bin_low(unsigned b) {
  if (b < 64) return b + 1;
  unsigned k = (b - 64) / 8, j = (b - 64) % 8;
  return ((8 + j) << (k + 3)) + 1;
}

/* Dirty runs go to the head of their bin and clean ones to its tail: the
 * next allocation of the length takes pages that are likely resident. */
static void bin_push(run_heap_t *h, run_node_t *x, uint32_t n) {
  unsigned b = bin_of(n);
  hak_assert(b < RUN_BINS);
  if (x->dirty_ms || h->bin[b] == NULL) {
    x->prev = NULL;
    x->next = h->bin[b];
    if (x->next) x->next->prev = x;
    else h->bin_tail[b] = x;
    h->bin[b] = x;
  } else {
    x->next = NULL;
    x->prev = h->bin_tail[b];
    x->prev->next = x;
    h->bin_tail[b] = x;
  }
  h->nonempty[b / 64] |= (uint64_t)1 << (b % 64);
}

static void bin_remove(run_heap_t *h, run_node_t *x, uint32_t n) {
  unsigned b = bin_of(n);
  if (x->prev) x->prev->next = x->next;
  else h->bin[b] = x->next;
  if (x->next) x->next->prev = x->prev;
  else h->bin_tail[b] = x->prev;
  if (h->bin[b] == NULL) h->nonempty[b / 64] &= ~((uint64_t)1 << (b % 64));
}

/* The first non-empty bin at or after b, or RUN_BINS. */
static unsigned bin_next(const run_heap_t *h, unsigned b) {
  for (unsigned w = b / 64; w < RUN_BINS / 64; w++) {
    uint64_t m = h->nonempty[w] & (w == b / 64 ? ~(uint64_t)0 << (b % 64) : ~(uint64_t)0);
    if (m) return w * 64 + (unsigned)__builtin_ctzll(m);
  }
  return RUN_BINS;
}

/* ---- the dirty list, oldest first ------------------------------------------ */

/* Links x after `after` (at the head when after is NULL). */
static void dirty_insert(run_heap_t *h, run_node_t *after, run_node_t *x) {
  x->dprev = after;
  x->dnext = after ? after->dnext : h->dirty_head;
  if (x->dnext) x->dnext->dprev = x;
  else h->dirty_tail = x;
  if (after) after->dnext = x;
  else h->dirty_head = x;
}

static void dirty_remove(run_heap_t *h, run_node_t *x) {
  if (x->dprev) x->dprev->dnext = x->dnext;
  else h->dirty_head = x->dnext;
  if (x->dnext) x->dnext->dprev = x->dprev;
  else h->dirty_tail = x->dprev;
}

/* ---- free runs --------------------------------------------------------------- */

/* Adds d pages (wrapping: a removal) to h's dirty count and to the total it
 * shares, if any. The count is read without the lock: one store. */
static void dirty_add(run_heap_t *h, size_t d) {
  __atomic_store_n(&h->dirty_pages, h->dirty_pages + d, __ATOMIC_RELAXED);
  if (h->dirty_sum) atomic_fetch_add_explicit(h->dirty_sum, d, memory_order_relaxed);
}

static bool free_start(const run_chunk_t *c, uint32_t i) { return run_bit(c, i, RUN_FREE); }

/* Under the run heap's lock, as every read of the bitmap is (the lockless
 * reader, run_live_pages, reads live[]). */
static void set_bit(run_chunk_t *c, uint32_t i, unsigned which, bool on) {
  uint64_t *word = run_bits_word(c, i, which), bit = (uint64_t)1 << (i % 64);
  *word = on ? *word | bit : *word & ~bit;
}

/* Page i of c starts an allocated run of n pages, not cached (0: it does
 * not): an atomic store, read without the lock (run_live_pages). */
static void set_live(run_chunk_t *c, uint32_t i, uint32_t n) { __atomic_store_n(&c->pg[i].live, n, __ATOMIC_RELAXED); }

/* Makes [s, s+n) a free run dirty since t (0: clean) in [dlo, dhi); on the
 * dirty list after `after` (NULL: at the head), or at the tail if at_tail. */
static void free_insert(run_chunk_t *c, uint32_t s, uint32_t n, uint64_t t, uint32_t dlo, uint32_t dhi,
                        run_node_t *after, bool at_tail) {
  run_heap_t *h = c->heap;
  run_node_t *x = node_take(c, s);
  if (t && dlo >= dhi) t = 0;
  c->pg[s].len = n;
  if (s + n < c->pages) c->pg[s + n - 1].last_of = s; /* read by the free of the run after it */
  set_bit(c, s, RUN_FREE, true);
  x->chunk = c;
  x->dirty_ms = t;
  x->dlo = dlo, x->dhi = dhi;
  bin_push(h, x, n);
  h->free_pages += n;
  if (t) {
    /* a run dirty since before the newest goes first: it is the sooner due */
    if (at_tail) after = h->dirty_tail && t < h->dirty_tail->dirty_ms ? NULL : h->dirty_tail;
    dirty_insert(h, after, x);
    dirty_add(h, dhi - dlo);
    if (at_tail && t > h->grew_ms) __atomic_store_n(&h->grew_ms, t, __ATOMIC_RELAXED);
  }
}

/* Takes free run s out of the bins and the dirty list; returns the node
 * before it on the dirty list (where its pieces go back). */
static run_node_t *free_remove(run_chunk_t *c, uint32_t s) {
  run_heap_t *h = c->heap;
  run_node_t *x = run_node_at(c, s), *before = NULL;
  uint32_t n = c->pg[s].len;
  set_bit(c, s, RUN_FREE, false);
  bin_remove(h, x, n);
  h->free_pages -= n;
  if (x->dirty_ms) {
    before = x->dprev;
    dirty_remove(h, x);
    dirty_add(h, -(size_t)(x->dhi - x->dlo));
  }
  node_give(c, x);
  return before;
}

/* A piece [s, s+n) of a removed free run x (dirty since t in [lo, hi)) goes
 * back, dirty where its pages meet that stretch. */
static void free_piece(run_chunk_t *c, uint32_t s, uint32_t n, uint64_t t, uint32_t lo, uint32_t hi, run_node_t *after) {
  if (n == 0) return;
  free_insert(c, s, n, t, MAX(lo, s), MIN(hi, s + n), after, false);
}

/* ---- chunks -------------------------------------------------------------------- */

void run_heap_init(run_heap_t *h, unsigned page_shift) {
  *h = (run_heap_t){.page_shift = page_shift};
}

static void chunk_extend(run_chunk_t *c, uint32_t limit, uint64_t dirty_ms) {
  hak_assert(limit > c->limit && limit <= c->pages);
  uint32_t s = c->limit;
  c->pg[s].len = limit - s;
  c->used += limit - s;
  c->limit = limit;
  run_free((run_t){.chunk = c, .page = s, .pages = limit - s, .dirty = false}, dirty_ms != 0, dirty_ms);
}

void run_chunk_add(run_heap_t *h, run_chunk_t *c, char *base, uint32_t pages, uint32_t limit, void *mem,
                   uint64_t dirty_ms) {
  /* the bitmap every operation reads, then the nodes, whose pool hands out
   * its first slots first, so that a chunk that holds a few runs touches
   * one page of both; then the pages' entries */
  char *m = mem;
  c->bits = (uint64_t *)m;
  m += (pages + 63) / 64 * 2 * sizeof(uint64_t);
  c->node = (run_node_t *)m;
  m += ((size_t)pages / 2 + 1) * sizeof(run_node_t);
  c->pg = (run_page_t *)m;
  c->node_free = c->node_top = 0;
  /* an entry's node and last_of are set before they are read; its len and
   * live, and the bitmap, read zero as mem is given */
  c->base = base;
  c->pages = pages;
  c->limit = 0;
  c->used = 0;
  c->heap = h;
  c->prev = NULL;
  c->next = h->chunks;
  if (c->next) c->next->prev = c;
  h->chunks = c;
  chunk_extend(c, limit, dirty_ms);
}

void run_chunk_grow(run_chunk_t *c, uint32_t limit) { chunk_extend(c, limit, 0); }

/* Whether c's page entries (len, live) and bitmap read zero. */
static bool chunk_reads_zero(const run_chunk_t *c) {
  for (uint32_t i = 0; i < c->pages; i++)
    if (c->pg[i].len || c->pg[i].live) return false;
  for (uint32_t i = 0; i < (c->pages + 63) / 64 * 2; i++)
    if (c->bits[i]) return false;
  return true;
}

void run_chunk_remove(run_chunk_t *c) {
  run_heap_t *h = c->heap;
  hak_assert(c->used == 0);
  for (uint32_t s = 0, n; s < c->limit; s += n) {
    n = c->pg[s].len;
    free_remove(c, s);
    c->pg[s].len = 0;
  }
  hak_assert_expensive(chunk_reads_zero(c));
  if (c->prev) c->prev->next = c->next;
  else h->chunks = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
}

/* ---- allocation ---------------------------------------------------------------------- */

/* A free run of at least n pages: one in n's own bin that fits (a few looked
 * at: that bin also holds shorter runs), else the first of the first
 * non-empty bin that only holds longer runs, or a few bins on where that
 * one is clean and a later one dirty (resident pages save faults). */
#define DIRTY_REACH 8
#define FIT_LOOKS 8
static run_node_t *find(run_heap_t *h, uint32_t n) {
  unsigned b = bin_of(n);
  unsigned sure = bin_low(b) >= n ? b : b + 1;
  if (sure != b) { /* runs of exactly n or a little more share bin b with shorter ones */
    int looked = 0;
    for (run_node_t *x = h->bin[b]; x && looked < FIT_LOOKS; x = x->next, looked++)
      if (x->chunk->pg[x->page].len >= n) return x;
  }
  unsigned found = bin_next(h, sure);
  if (found == RUN_BINS) return NULL;
  if (h->bin[found]->dirty_ms || h->dirty_head == NULL) return h->bin[found];
  for (unsigned k = bin_next(h, found + 1), steps = 0; k < RUN_BINS && steps < DIRTY_REACH; k = bin_next(h, k + 1), steps++)
    if (h->bin[k]->dirty_ms) return h->bin[k];
  return h->bin[found];
}

/* The first page at or after s of chunk c whose address is a multiple of
 * align pages. */
static uint32_t aligned_page(const run_chunk_t *c, uint32_t s, uint32_t align) {
  uintptr_t first = ((uintptr_t)c->base >> c->heap->page_shift) + s;
  return s + (uint32_t)((align - (first & (align - 1))) & (align - 1));
}

/* For an aligned request: a run shorter than n + align - 1 pages may still
 * hold n aligned ones (a slab's freed span does): the bins between are
 * looked at first, a few runs each. */
static run_node_t *find_aligned(run_heap_t *h, uint32_t n, uint32_t align) {
  for (unsigned b = bin_of(n), last = bin_of(n + align - 1); b <= last; b = bin_next(h, b + 1)) {
    if (b >= RUN_BINS) break;
    int looked = 0;
    for (run_node_t *x = h->bin[b]; x && looked < FIT_LOOKS; x = x->next, looked++) {
      run_chunk_t *c = x->chunk;
      uint32_t s = x->page;
      if (aligned_page(c, s, align) + n <= s + c->pg[s].len) return x;
    }
  }
  return find(h, n + align - 1);
}

/* Whether h's blocks are written whole, for heaps with grid_probe (others:
 * never), found on placing a block in dirty run x: half of the first
 * PROBE_BYTES of x's dirty stretch at least is resident where the freed
 * blocks there were written whole (the room a growing block did not reach
 * aside), little where only their heads were. Once PROBE_TRUST probes in a
 * row agree, the placements that follow take the verdict as it is, twice as
 * many after each probe that agrees again (PROBE_REUSE, PROBE_DOUBLINGS times):
 * a program writes its blocks whole or sparsely for long stretches, and
 * each probe is a system call; one that disagrees starts the count over. */
#define PROBE_BYTES ((size_t)4 << 20)
#define PROBE_TRUST 4
#define PROBE_REUSE 63
#define PROBE_DOUBLINGS 4 /* up to 1,023 placements */
static bool written_whole(run_heap_t *h, const run_node_t *x) {
  if (!h->grid_probe) return false;
  if (h->probe_reuse) {
    h->probe_reuse--;
    return h->probe_resident;
  }
  size_t len = MIN((size_t)(x->dhi - x->dlo) << h->page_shift, PROBE_BYTES);
  bool resident = os_resident_look(x->chunk->base + ((size_t)x->dlo << h->page_shift), len) >= len / 2;
  if (resident != h->probe_resident) h->probe_agreed = 0;
  else if (h->probe_agreed < PROBE_TRUST + PROBE_DOUBLINGS) h->probe_agreed++;
  h->probe_resident = resident;
  if (h->probe_agreed >= PROBE_TRUST)
    h->probe_reuse = (uint16_t)(((PROBE_REUSE + 1) << (h->probe_agreed - PROBE_TRUST)) - 1);
  return resident;
}

/* An aligned block's first page in a dirty run whose aligned pages start
 * at first and hold it up to last: the aligned page after the dirty
 * stretch's start lo (the heads that freed blocks wrote lie on aligned
 * pages), or the one before where the blocks are written whole (it covers
 * the resident pages from lo). */
static uint32_t aligned_in_dirty(uint32_t first, uint32_t last, uint32_t lo, uint32_t after, uint32_t align,
                                 bool whole) {
  if (lo <= first) return first;
  uint32_t at = after == lo || !whole ? after : after - align;
  return at <= last ? at : first;
}

/* run_alloc and run_alloc_resident: the latter only where the free run
 * found is dirty. */
static bool alloc_found(run_heap_t *h, uint32_t n, uint32_t align, bool resident, run_t *out) {
  hak_assert(n >= 1 && is_pow2(align));
  if (resident && h->dirty_head == NULL) return false;
  run_node_t *x = align > 1 ? find_aligned(h, n, align) : find(h, n);
  if (x == NULL || (resident && x->dirty_ms == 0)) return false;
  run_chunk_t *c = x->chunk;
  uint32_t s = x->page, m = c->pg[s].len, lo = x->dlo, hi = x->dhi;
  uint64_t t = x->dirty_ms;
  uint32_t at = s;
  bool whole = t && written_whole(h, x); /* probed at every dirty placement: the arenas align by its verdict */
  if (align > 1) {
    at = aligned_page(c, s, align);
    if (t && h->grid_probe) at = aligned_in_dirty(at, s + m - n, lo, aligned_page(c, lo, align), align, whole);
  } else if (t) { /* over as much of the dirty stretch as it holds */
    at = hi - lo >= n ? lo : hi > n ? hi - n : 0;
    at = MAX(at, s);
    at = MIN(at, s + m - n);
  }
  run_node_t *before = free_remove(c, s);
  /* the pieces keep the run's place among the dirty ones: the tail after
   * the head, both where the run was */
  if (at > s) {
    free_piece(c, s, at - s, t, lo, hi, before);
    if (run_node_at(c, s)->dirty_ms) before = run_node_at(c, s);
  }
  free_piece(c, at + n, s + m - at - n, t, lo, hi, before);
  c->pg[at].len = n;
  set_live(c, at, n);
  c->used += n;
  *out = (run_t){.chunk = c, .page = at, .pages = n, .dirty = t && MAX(lo, at) < MIN(hi, at + n)};
  return true;
}

bool run_alloc(run_heap_t *h, uint32_t n, uint32_t align, run_t *out) { return alloc_found(h, n, align, false, out); }

bool run_alloc_resident(run_heap_t *h, uint32_t n, uint32_t align, run_t *out) {
  return alloc_found(h, n, align, true, out);
}

/* A freed run merges with its free neighbours; the dirty stretch of the run
 * they form spans theirs. */
bool run_free(run_t r, bool dirty, uint64_t now) { return run_free_prefix(r, dirty ? r.pages : 0, now); }

/* Frees run r, dirty since t (0: clean) in [lo, hi) (empty: clean). */
static bool run_free_stretch(run_t r, uint32_t lo, uint32_t hi, uint64_t t) {
  run_chunk_t *c = r.chunk;
  uint32_t s = r.page, n = c->pg[s].len;
  hak_assert(n == r.pages && !free_start(c, s) && (lo >= hi || (s <= lo && hi <= s + n)));
  set_live(c, s, 0);
  c->used -= n;
  if (lo >= hi || t == 0) t = 0, lo = UINT32_MAX, hi = 0;
  if (s > 0) {
    uint32_t f = c->pg[s - 1].last_of;
    if (f < s && free_start(c, f) && f + c->pg[f].len == s) {
      run_node_t *x = run_node_at(c, f);
      if (x->dirty_ms) t = MAX(t, x->dirty_ms), lo = MIN(lo, x->dlo), hi = MAX(hi, x->dhi);
      free_remove(c, f);
      c->pg[s].len = 0;
      n += s - f;
      s = f;
    }
  }
  uint32_t r2 = s + n;
  if (r2 < c->limit && free_start(c, r2)) {
    run_node_t *x = run_node_at(c, r2);
    if (x->dirty_ms) t = MAX(t, x->dirty_ms), lo = MIN(lo, x->dlo), hi = MAX(hi, x->dhi);
    uint32_t rn = c->pg[r2].len;
    free_remove(c, r2);
    c->pg[r2].len = 0;
    n += rn;
  }
  free_insert(c, s, n, t, lo, hi, NULL, true);
  return c->used == 0;
}

bool run_free_prefix(run_t r, uint32_t dirty, uint64_t now) {
  hak_assert(dirty <= r.pages);
  return run_free_stretch(r, r.page, r.page + dirty, now ? now : 1);
}

bool run_grow(run_t *r, uint32_t n, bool dirty_only, bool *dirty) {
  run_chunk_t *c = r->chunk;
  uint32_t end = r->page + r->pages, want = n - r->pages;
  if (n <= r->pages) return true;
  if (end >= c->limit || !free_start(c, end) || c->pg[end].len < want) return false;
  run_node_t *x = run_node_at(c, end);
  uint32_t m = c->pg[end].len, lo = x->dlo, hi = x->dhi;
  uint64_t t = x->dirty_ms;
  if (dirty_only && !(t && lo <= end && end + want <= hi)) return false;
  run_node_t *before = free_remove(c, end);
  c->pg[end].len = 0;
  free_piece(c, end + want, m - want, t, lo, hi, before);
  c->pg[r->page].len = n;
  set_live(c, r->page, n);
  c->used += want;
  r->pages = n;
  *dirty = t && MAX(lo, end) < MIN(hi, end + want);
  return true;
}

bool run_ends_chunk(run_t r) {
  const run_chunk_t *c = r.chunk;
  uint32_t end = r.page + r.pages;
  return end == c->limit || (end < c->limit && free_start(c, end) && end + c->pg[end].len == c->limit);
}

void run_shrink(run_t *r, uint32_t n, uint64_t now) {
  run_chunk_t *c = r->chunk;
  if (n >= r->pages) return;
  uint32_t tail = r->page + n, k = r->pages - n;
  c->pg[r->page].len = n;
  set_live(c, r->page, n);
  c->pg[tail].len = k;
  r->pages = n;
  run_free((run_t){.chunk = c, .page = tail, .pages = k, .dirty = true}, true, now);
}

void run_chunk_walk(run_chunk_t *c, void (*fn)(void *ctx, run_t r, bool free), void *ctx) {
  for (uint32_t s = 0; s < c->limit;) {
    uint32_t n = c->pg[s].len ? c->pg[s].len : 1;
    fn(ctx, (run_t){.chunk = c, .page = s, .pages = n}, free_start(c, s));
    s += n;
  }
}

run_t run_at(run_chunk_t *c, uint32_t page) {
  if (page >= c->limit || c->pg[page].len == 0 || free_start(c, page)) return (run_t){0};
  return (run_t){.chunk = c, .page = page, .pages = c->pg[page].len, .dirty = true};
}

/* ---- the cache of freed runs -------------------------------------------------- */

bool run_cache_push(run_cache_t *k, unsigned cls, run_t r, uint64_t now, uint32_t max_n, size_t max_pages) {
  uint32_t n = k->n[cls];
  if (n >= run_demand_depth(&k->demand[cls], RUN_CACHE_DEPTH_MIN) && n < MIN(max_n, RUN_CACHE_DEPTH) &&
      k->pages + r.pages <= max_pages) {
    run_demand_turned_away(&k->demand[cls], RUN_CACHE_DEPTH_MIN);
    return false;
  }
  if (n >= MIN(max_n, RUN_CACHE_DEPTH) || k->pages + r.pages > max_pages) return false;
  k->slot[cls][n] = (run_cache_slot_t){.chunk = r.chunk, .page = r.page, .ms = (uint32_t)now};
  set_bit(r.chunk, r.page, RUN_CACHED, true);
  set_live(r.chunk, r.page, 0);
  k->n[cls] = n + 1;
  __atomic_store_n(&k->pages, k->pages + r.pages, __ATOMIC_RELAXED);
  return true;
}

/* Takes slot x's run out of the cache. */
static run_t uncache(run_cache_t *k, const run_cache_slot_t *x) {
  run_chunk_t *c = x->chunk;
  set_bit(c, x->page, RUN_CACHED, false);
  run_t r = {.chunk = c, .page = x->page, .pages = c->pg[x->page].len, .dirty = true};
  set_live(c, x->page, r.pages);
  __atomic_store_n(&k->pages, k->pages - r.pages, __ATOMIC_RELAXED);
  return r;
}

/* Pops class cls's last run (it keeps one) where it is aligned so. */
static bool cache_pop_top(run_cache_t *k, unsigned cls, uint32_t align, run_t *out) {
  uint32_t n = k->n[cls];
  const run_cache_slot_t *x = &k->slot[cls][n - 1];
  if (aligned_page(x->chunk, x->page, align) != x->page) return false;
  k->n[cls] = n - 1;
  *out = uncache(k, x);
  return true;
}

bool run_cache_pop(run_cache_t *k, unsigned cls, uint32_t align, run_t *out) {
  if (k->n[cls] == 0) {
    run_demand_missed(&k->demand[cls], RUN_CACHE_DEPTH_MIN, RUN_CACHE_DEPTH);
    return false;
  }
  return cache_pop_top(k, cls, align, out);
}

bool run_cache_pop_within(run_cache_t *k, unsigned first, unsigned last, uint32_t align, run_t *out) {
  for (unsigned cls = first; cls <= last; cls++)
    if (k->n[cls] != 0) return cache_pop_top(k, cls, align, out);
  return false;
}

/* Frees slot x's run, dirty since it was cached (its time from the clock's
 * low 32 bits). */
static void cache_free(run_cache_t *k, const run_cache_slot_t *x, uint64_t now) {
  run_free(uncache(k, x), true, now - ((uint32_t)now - x->ms));
}

void run_cache_trim(run_cache_t *k, size_t max_pages, uint64_t now) {
  for (unsigned empty = 0; k->pages > max_pages && empty < RUN_CACHE_CLASSES;) {
    unsigned cls = k->evict;
    k->evict = (cls + 1) % RUN_CACHE_CLASSES;
    uint32_t n = k->n[cls];
    if (n == 0) {
      empty++;
      continue;
    }
    empty = 0;
    run_cache_slot_t *slot = k->slot[cls];
    cache_free(k, &slot[0], now);
    __builtin_memmove(slot, slot + 1, (n - 1) * sizeof *slot);
    k->n[cls] = n - 1;
  }
}

bool run_cache_flush(run_cache_t *k, uint64_t now, uint64_t age) {
  bool left = false;
  for (unsigned cls = 0; cls < RUN_CACHE_CLASSES; cls++) {
    run_cache_slot_t *slot = k->slot[cls];
    uint32_t n = k->n[cls], old = n; /* the newest runs kept for less than age stay */
    while (old > 0 && (uint32_t)now - slot[old - 1].ms < age) old--;
    for (uint32_t i = 0; i < old; i++) cache_free(k, &slot[i], now);
    __builtin_memmove(slot, slot + old, (n - old) * sizeof *slot);
    k->n[cls] = n - old;
    left |= n > old;
  }
  return left;
}

/* ---- purging -------------------------------------------------------------------------- */

/* The oldest dirty free run if it is due (dirty delay ms or more, or *over
 * pages still to shed), taken out: its stretch to purge in r.dlo, r.dhi,
 * and in *left the pages of its stretch below that stay dirty (as old as
 * they were, *since). A run due for the excess alone sheds no more than the
 * excess, from the top of its stretch, which allocations reach last. False
 * when none is due. */
static bool run_purge_take(run_heap_t *h, uint64_t now, uint64_t delay, size_t *over, run_t *out, uint32_t *left,
                           uint64_t *since) {
  run_node_t *x = h->dirty_head;
  bool aged = x != NULL && now - x->dirty_ms >= delay;
  if (x == NULL || (!aged && *over == 0)) return false;
  run_chunk_t *c = x->chunk;
  uint32_t s = x->page, n = c->pg[s].len, lo = x->dlo, hi = x->dhi;
  *left = 0;
  *since = x->dirty_ms;
  if (!aged && *over < hi - lo) {
    *left = hi - (uint32_t)*over - lo;
    lo += *left;
  }
  free_remove(c, s);
  c->used += n;
  *over -= MIN(*over, (size_t)(hi - lo));
  *out = (run_t){.chunk = c, .page = s, .pages = n, .dirty = true, .dlo = lo, .dhi = hi};
  return true;
}

size_t run_purge_due(run_heap_t *h, hak_lock_t *lock, uint64_t now, uint64_t delay, size_t keep) {
  size_t n = 0, over = h->dirty_pages > keep ? h->dirty_pages - keep : 0;
  run_t r;
  uint32_t left;
  uint64_t since;
  while (run_purge_take(h, now, delay, &over, &r, &left, &since)) {
    hak_unlock(lock);
    n += os_purge(run_dirty_addr(r), run_dirty_bytes_of(r));
    hak_lock(lock);
    run_free_stretch(r, r.dlo - left, r.dlo, since);
  }
  return n;
}

uint64_t run_dirty_since(const run_heap_t *h) { return h->dirty_head ? h->dirty_head->dirty_ms : UINT64_MAX; }

void run_dirty_by_age(const run_heap_t *h, uint64_t now, size_t n, const uint64_t age_ms[], size_t young[]) {
  for (const run_node_t *x = h->dirty_tail; x; x = x->dprev) {
    size_t pages = x->dhi - x->dlo;
    for (size_t k = 0; k < n; k++)
      if (now - x->dirty_ms < age_ms[k]) young[k] += pages;
  }
}
