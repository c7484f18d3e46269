/* Thread heaps: class queues, refills, idle slabs, thread exit and adoption. */
#define _GNU_SOURCE
#include "heap.h"

#include <pthread.h>

#include "options.h"
#include "policy.h"
#include "size_class.h"
#include "stats.h"

slab_t hak_slab_empty = {.free = (block_t *)&hak_slab_empty.free};
_Atomic size_t heap_fresh_slab_bytes;
#define EMPTY_VIEWS {[0 ... NUM_CLASSES - 1] = &hak_slab_empty}
heap_t hak_heap_empty = {.active = EMPTY_VIEWS, .cur = EMPTY_VIEWS,
                         .empty = {.free = (block_t *)&hak_heap_empty.empty.free}};
__thread heap_t *hak_tls_heap __attribute__((tls_model("initial-exec"))) = &hak_heap_empty;
/* Set when the thread's heap went back at its exit (heap_thread_exit): what
 * the thread frees after that (glibc frees a detached thread's TLS vector
 * later in its exit) goes home at once, and a malloc takes a heap for that
 * call only, since no destructor would run again to hand back one bound then. */
static __thread bool heap_exited __attribute__((tls_model("initial-exec")));
/* A thread without a heap sends its first HEAPLESS_FREES remote frees home
 * at once before it takes a heap for them: glibc's late frees also come
 * from threads that never allocated (and so run no destructor of ours), a
 * few at each exit, while a consumer that frees many gathers them. */
#define HEAPLESS_FREES 16
static __thread uint32_t heapless_frees __attribute__((tls_model("initial-exec")));
__thread heap_view_t hak_tls_view __attribute__((tls_model("initial-exec"))) = {
    .direct = {[0 ... DIRECT_MAX / 8] = &hak_slab_empty},
    .mid = {[0 ... SMALL_MAX / 256] = &hak_slab_empty},
    .large = {[0 ... VIEW_LARGE_MAX / 4096] = &hak_slab_empty}};
uint8_t heap_large_view_class[VIEW_LARGE_MAX / 4096 + 1];
bool heap_large_view_ok;

static hak_lock_t heaps_lock;
static heap_t *abandoned;         /* under heaps_lock; stored atomically, for heap_lend_run's look */
static heap_t *_Atomic all_heaps; /* append-only */
static _Atomic unsigned heaps_running;
static char *meta_next, *meta_end; /* under heaps_lock */
/* The chunks heaps are cut from, each headed by its link and size. */
typedef struct meta_chunk_s {
  struct meta_chunk_s *next;
  size_t size;
} meta_chunk_t;
static meta_chunk_t *meta_chunks; /* under heaps_lock */
static pthread_key_t heap_key;

/* ---- class queues (owner only) ----------------------------------------- */

static void queue_push(heap_t *heap, slab_t *s) {
  slab_queue_t *q = &heap->queue[s->cls];
  s->next = NULL;
  s->prev = q->tail;
  if (q->tail) q->tail->next = s;
  else q->head = s;
  q->tail = s;
  s->queued = 1;
}

static void queue_remove(heap_t *heap, slab_t *s) {
  slab_queue_t *q = &heap->queue[s->cls];
  if (s->prev) s->prev->next = s->next;
  else q->head = s->next;
  if (s->next) s->next->prev = s->prev;
  else q->tail = s->prev;
  if (q->spare == s) q->spare = NULL;
  s->next = s->prev = NULL;
  s->queued = 0;
}

/* Points the entries of class cls's sizes in the calling thread's view at s
 * (a class that is not its own size's has none). */
static void view_set(unsigned cls, slab_t *s) {
  if (!class_plain(cls)) return;
  unsigned below = cls && !class_plain(cls - 1) ? cls - 2 : cls - 1;
  size_t size = hak_class_size[cls], prev = cls ? hak_class_size[below] : 0;
  for (size_t i = cls ? (prev + 8) >> 3 : 0; i <= (MIN(size, DIRECT_MAX) + 7) >> 3 && prev < DIRECT_MAX; i++)
    hak_tls_view.direct[i] = s;
  for (size_t i = (MAX(prev, DIRECT_MAX) >> 8) + 1; i <= size >> 8; i++) hak_tls_view.mid[i] = s;
}

/* The first and last view entry of each Large list (heap_large_view_index):
 * a thread binds and unbinds its lists' entries at start and exit. */
_Static_assert(VIEW_LARGE_MAX / 4096 <= UINT8_MAX, "a view entry fits a byte");
static uint8_t view_large_lo[LARGE_HOT_CLASSES], view_large_hi[LARGE_HOT_CLASSES];

void heap_large_view_index(void) {
  for (unsigned c = 0; c < LARGE_HOT_CLASSES; c++) view_large_lo[c] = 1, view_large_hi[c] = 0;
  for (size_t n = 0; n <= VIEW_LARGE_MAX / 4096; n++) {
    unsigned c = heap_large_view_class[n];
    if (c >= LARGE_HOT_CLASSES) continue;
    if (view_large_lo[c] > view_large_hi[c]) view_large_lo[c] = (uint8_t)n;
    view_large_hi[c] = (uint8_t)n;
  }
}

/* Points the view's entries of Large list c at s. */
static void view_set_large(unsigned c, slab_t *s) {
  for (size_t n = view_large_lo[c]; n <= view_large_hi[c]; n++)
    if (heap_large_view_class[n] == c) hak_tls_view.large[n] = s;
}

/* The calling thread's view starts or stops showing heap h's active[] and
 * its Large lists shown. A thread with no heap sees &hak_slab_empty for
 * every class, so only the classes h has a view of are written. */
static void view_bind(heap_t *h, bool bind) {
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++)
    if (h->active[cls] != &hak_slab_empty) view_set(cls, bind ? h->active[cls] : &hak_slab_empty);
  for (unsigned c = 0; c < LARGE_HOT_CLASSES; c++)
    if (h->lhot.shown >> c & 1) view_set_large(c, bind ? &h->lhot.list[c] : &hak_slab_empty);
}

void heap_show_large(heap_t *heap, unsigned c, bool show) {
  heap->lhot.shown = show ? heap->lhot.shown | (uint64_t)1 << c : heap->lhot.shown & ~((uint64_t)1 << c);
  if (heap == hak_tls_heap) view_set_large(c, show ? &heap->lhot.list[c] : &hak_slab_empty);
}

/* Points the fast paths of class cls at s (a slab, a proxy, or the heap's
 * empty view): its entry in active[] and, when the calling thread runs the
 * heap, its sizes' entries in the thread's view. */
static void heap_set_active(heap_t *heap, unsigned cls, slab_t *s) {
  heap->active[cls] = s;
  if (heap == hak_tls_heap) view_set(cls, s);
}

/* A slab set aside full remembers how often its owner had collected its
 * inbox: a remote free that empties it reads whether the owner still does. */
static void slab_set_full(heap_t *heap, slab_t *s) {
  /* read by remote frees (remote_publish): an atomic store */
  __atomic_store_n(&s->full_gen, atomic_load_explicit(&heap->collects, memory_order_relaxed), __ATOMIC_RELAXED);
  slab_mirror_owner(s, atomic_fetch_or_explicit(&s->owner, SLAB_F_FULL, memory_order_release) | SLAB_F_FULL);
}
static void slab_clear_full(slab_t *s) {
  slab_mirror_owner(s, atomic_fetch_and_explicit(&s->owner, ~(uintptr_t)SLAB_F_FULL, memory_order_relaxed) & ~(uintptr_t)SLAB_F_FULL);
}

static long purge_delay(void) { return policy_knob(KNOB_PURGE_DELAY_MS); }

/* ---- spans ---------------------------------------------------------------- */

/* A span of n units from the heap's regions, growing the newest region or
 * adding one when none has room. */
static slab_t *heap_span_alloc(heap_t *heap, size_t n, bool *dirty) {
  heap_lock(heap);
  slab_t *s = region_span_alloc(&heap->pages, n, dirty);
  while (s == NULL && (region_grow(&heap->pages) || region_new(&heap->pages, heap)))
    s = region_span_alloc(&heap->pages, n, dirty);
  if (s != NULL) {
    heap->span_bytes += n * UNIT_SIZE;
    heap->span_peak = MAX(heap->span_peak, heap->span_bytes);
  }
  heap_unlock(heap);
  return s;
}

/* Gives a span back to its region; a region left empty goes to the pool
 * unless it is the heap's last. */
static void heap_span_release(heap_t *heap, slab_t *s) {
  uint64_t now = os_now_ms();
  heap_lock(heap);
  if (heap->idle[s->cls] == s) heap->idle[s->cls] = NULL;
  heap->span_bytes -= (size_t)s->units * UNIT_SIZE;
  region_t *r = region_of(s);
  if (region_span_free(s, now) && region_spare(r)) region_release(r, now);
  heap_unlock(heap);
  if (purge_delay() == 0) heap_purge(heap, now, 0, true, NULL);
}

/* ---- idle slabs ------------------------------------------------------------- */

/* An empty slab kept by the heap goes idle: a purge may return its pages
 * once it has been idle for the delay. Its free list stays: taken back
 * before that, it serves its warm blocks again without carving them. */
static void slab_set_idle(heap_t *heap, slab_t *s) {
  uint64_t now = os_now_ms();
  heap_lock(heap);
  s->idle = 1;
  s->purged = 0;
  s->idle_ms = now;
  heap->idle[s->cls] = s;
  heap_unlock(heap);
  if (purge_delay() == 0) heap_purge(heap, now, 0, true, NULL);
}

/* Takes an idle slab back; one whose pages were returned starts afresh. */
static void slab_wake(heap_t *heap, slab_t *s) {
  heap_lock(heap);
  bool purged = s->purged;
  s->idle = s->purged = 0;
  if (heap->idle[s->cls] == s) heap->idle[s->cls] = NULL;
  heap_unlock(heap);
  if (purged) slab_reset(s);
}

/* ---- refills ---------------------------------------------------------------- */

_Static_assert(CARVE_HOT_BYTES / 8 <= CARVE_MAX_BLOCKS, "a carve fits CARVE_MAX_BLOCKS");

/* The batch of a hot class. */
static size_t carve_hot(unsigned cls) { return MAX(CARVE_HOT_BYTES / hak_class_size[cls], CARVE_MIN_HOT); }

static size_t heap_carve_count(heap_t *heap, unsigned cls) {
  size_t bsize = hak_class_size[cls];
  size_t lo = CARVE_BYTES / bsize ? CARVE_BYTES / bsize : 1, hi = carve_hot(cls);
  uint32_t gap = ++heap->carves - heap->carve_at[cls];
  heap->carve_at[cls] = heap->carves;
  size_t n = heap->carve_n[cls];
  if (n == 0) n = lo;
  else if (gap <= CARVE_HOT_GAP) n *= 2;
  else n >>= gap / CARVE_COLD_GAP < 16 ? gap / CARVE_COLD_GAP : 16;
  n = n < lo ? lo : n > hi ? hi : n;
  if (n < hi) heap->grown_classes &= ~(UINT64_C(1) << cls);
  heap->carve_n[cls] = (uint16_t)n;
  return n;
}

/* A class of blocks above a page has its carves populated only where the
 * program was seen writing its blocks whole: at least 7/8 of the pages of
 * the blocks carved from a fresh slab were resident by its next carve past
 * DENSITY_SAMPLE bytes, or once it ran out. The first slab of a class in a
 * heap, and one slab in DENSITY_PROBE_EVERY after it, are carved
 * unpopulated until that look, so that the evidence comes from the program
 * and follows it; the look marks s->populated, which the others start at
 * NULL. */
#define DENSITY_SAMPLE ((size_t)32 << 10)
#define DENSITY_PROBE_EVERY 8
static bool slab_probes_density(const heap_t *heap, const slab_t *s) {
  if (!(heap->density_known >> s->cls & 1)) return true;
  return ((uintptr_t)s >> 6) * UINT64_C(0x9E3779B97F4A7C15) >> 58 < 64 / DENSITY_PROBE_EVERY;
}
static void heap_learn_density(heap_t *heap, slab_t *s) {
  size_t carved = (size_t)(s->bump - slab_first(s));
  if (s->bsize <= os_page_size() || !s->fresh || s->populated != NULL || carved < DENSITY_SAMPLE ||
      !slab_probes_density(heap, s))
    return;
  uint64_t mask = UINT64_C(1) << s->cls;
  bool dense = os_resident_look(slab_first(s), carved) >= carved / 8 * 7;
  heap->density_known |= mask;
  heap->dense_classes = dense ? heap->dense_classes | mask : heap->dense_classes & ~mask;
  s->populated = (char *)os_page_round((uintptr_t)s->bump);
}
static bool slab_populates_whole(const heap_t *heap, const slab_t *s) {
  return heap->dense_classes >> s->cls & 1 && (s->populated != NULL || !slab_probes_density(heap, s));
}

/* A carve populates its pages in one call (a fault a page costs more)
 * where the class is hot or has run through a slab before; a class's first
 * carves leave them to fault: a call for its page or two saves nothing, and
 * would be a system call for every slab a class starts. Only where every
 * page holds a block's start, which the carve's link writes anyway, or
 * where the class's blocks were seen written whole (above): otherwise a
 * page inside a larger block stays untouched until the program writes it.
 * A populate holds the address space's lock (mmap_lock) for reading, where
 * a trapped fault locks only its mapping: with more than
 * POPULATE_MAX_RUNNING threads able to run at once (threads holding a
 * heap, processors in the affinity mask) the populating threads queue on
 * it, and carves leave their pages to fault. */
#define POPULATE_MAX_RUNNING 4
/* A class that ran through a slab while hot also has up to this much of its
 * slab past the carve populated: it carves it soon, and one call then
 * serves several carves. Any other class populates its carve alone, so that
 * one that stops growing leaves no page populated that no block holds. */
#define POPULATE_AHEAD ((size_t)64 << 10)
static unsigned carve_populate_pages(bool populate) {
  return populate && MIN(heap_threads_running(), os_cpu_count()) <= POPULATE_MAX_RUNNING;
}
static size_t carve_ahead(const heap_t *heap, const slab_t *s, bool populate) {
  return populate && s->bsize <= os_page_size() && heap->grown_classes >> s->cls & 1 ? POPULATE_AHEAD : 0;
}

/* Whether s can serve an allocation, carving fresh blocks if its list is
 * empty; an idle slab is first taken back. */
static bool heap_slab_ready(heap_t *heap, slab_t *s) {
  if (unlikely(s->idle)) slab_wake(heap, s);
  if (slab_has_free(s)) return true;
  if (slab_has_sparse(s)) { /* before any carve: carved blocks must not touch returned pages */
    slab_unpurge(s);
    return true;
  }
  if (s->bump >= slab_blocks_end(s)) {
    if (heap->carve_n[s->cls] >= carve_hot(s->cls)) heap->grown_classes |= UINT64_C(1) << s->cls;
    heap->filled_classes |= UINT64_C(1) << s->cls;
    heap_learn_density(heap, s);
    return false;
  }
  heap_learn_density(heap, s);
  size_t n = heap_carve_count(heap, s->cls);
  /* a class above a page populates where seen written whole, then even cold (a carve of it is pages), at most
   * POPULATE_AHEAD a carve: the blocks of a carve not yet taken stay absent */
  bool small = s->bsize <= os_page_size();
  bool populate = small ? n >= carve_hot(s->cls) || heap->filled_classes >> s->cls & 1
                        : s->fresh && slab_populates_whole(heap, s);
  if (populate && !small) n = MIN(n, MAX(1, POPULATE_AHEAD / s->bsize));
  heap->carved = (uint32_t)slab_carve(s, n, carve_populate_pages(populate), carve_ahead(heap, s, populate));
  return true;
}

/* ---- per-class views of the heap's own ------------------------------------ */

/* A slab_t per class, each list empty, for views the fast path takes from
 * that are not slabs: the sampler's proxies and the foreign lists. NULL
 * when out of memory. */
#define CLASS_VIEWS_BYTES os_page_round(sizeof(slab_t) * NUM_CLASSES)
static slab_t *class_views_map(void) {
  slab_t *v = os_map(CLASS_VIEWS_BYTES);
  if (v != NULL)
    for (unsigned cls = 0; cls < NUM_CLASSES; cls++) slab_set_list(&v[cls], NULL);
  return v;
}

/* ---- remote frees --------------------------------------------------------- */

/* A remote free emptied full slab s (f: what it read of s before). An
 * owner that collects its inbox takes it back soon, warm. One that has not
 * ticked for the purge delay, or has not collected since it set s aside
 * while UNCLAIMED_MAX bytes of such slabs piled up (it sleeps, or is gone: a
 * busy one collects when its current slab runs out), would keep it
 * resident: its pages go back now, the lock held so that the owner cannot
 * reuse it meanwhile. Only then is s touched again: an owner that collects
 * may have released it since. Where more threads hold heaps than there are
 * processors, a running owner may only be set aside by the scheduler for a
 * time slice (a few ms) while its consumers run: there the second rule also
 * needs the owner quiet for UNCLAIMED_QUIET_MS, and one that was just
 * descheduled takes the slabs back warm on its next slow path. */
#define IDLE_MIN_MS 100
#define UNCLAIMED_QUIET_MS 10
#define UNCLAIMED_MAX ((uint64_t)512 << 10)
static void heap_remote_full(slab_t *s, slab_full_t f) {
  heap_t *h = f.heap;
  long delay = purge_delay();
  if (delay < 0) return;
  uint32_t gen = atomic_load_explicit(&h->collects, memory_order_relaxed);
  uint64_t now = os_now_ms(), quiet = now - atomic_load_explicit(&h->active_ms, memory_order_relaxed);
  if (quiet < (uint64_t)MAX(delay, IDLE_MIN_MS)) {
    bool descheduled = quiet < UNCLAIMED_QUIET_MS && heap_threads_running() > os_cpu_count();
    if (gen != f.full_gen || descheduled ||
        atomic_fetch_add_explicit(&h->unclaimed, (uint64_t)f.units * UNIT_SIZE, memory_order_relaxed) < UNCLAIMED_MAX)
      return;
  }
  heap_lock(h);
  if (slab_wipe(s, f.word)) {
    stat_add(bytes_purged, os_purge(slab_start(s), (size_t)f.units * UNIT_SIZE));
    stat_inc(slabs_wiped);
  }
  heap_unlock(h);
}

static void heap_publish(heap_t *heap, unsigned cls) {
  slab_t *s = heap->gathered[cls].slab;
  heap->gathered_classes &= ~(UINT64_C(1) << cls);
  slab_full_t f = slab_batch_publish(&heap->gathered[cls]);
  if (unlikely(f.word != 0)) heap_remote_full(s, f);
}

static hak_noinline void heap_free_at_once(slab_t *s, block_t *b) {
  slab_full_t f = slab_free_remote(s, b);
  if (unlikely(f.word != 0)) heap_remote_full(s, f);
}

/* A class whose gathered word held one block when its next free went to
 * another (its remote frees do not run together) publishes its next
 * GATHER_SKIP frees at once, then tries again: gathering costs such frees
 * a second visit each. */
#define GATHER_SKIP 32
static hak_noinline void heap_gather(heap_t *heap, slab_t *s, block_t *b) {
  unsigned cls = s->cls;
  slab_batch_t *q = &heap->gathered[cls];
  if (!slab_batch_start(q, s, b)) {
    bool lone = q->n == 1;
    heap_publish(heap, cls);
    if (lone) {
      heap->gather_skip[cls] = GATHER_SKIP;
      heap_free_at_once(s, b);
      return;
    }
    slab_batch_start(q, s, b);
  }
  heap->gathered_classes |= UINT64_C(1) << cls;
}

/* Foreign lists (heap.h): a slab_t per class that the fast path takes from
 * as from a slab; free, its blocks; capacity - used, how many (capacity
 * counts the blocks kept, used those taken); bsize, its class's; full_gen,
 * the tick's mark (heap_foreign_tick). */
static bool heap_foreign_start(heap_t *heap) {
  if (HAKMEM_SECURE || heap->proxy != NULL || hak_stats_enabled) return false;
  slab_t *fc = class_views_map();
  if (fc == NULL) return false;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    fc[cls].bsize = (uint32_t)hak_class_size[cls];
    fc[cls].cls = (uint8_t)cls;
  }
  heap->foreign = fc;
  return true;
}

void heap_free_remote_slow(heap_t *heap, slab_t *s, block_t *b) {
  if (heap == &hak_heap_empty &&
      (heap_exited || heapless_frees++ < HEAPLESS_FREES || (heap = heap_init_thread()) == NULL)) {
    heap_free_at_once(s, b); /* past the thread's exit, one of its first, or out of memory */
    return;
  }
  if (heap->foreign == NULL && heap_foreign_start(heap)) {
    heap_free_remote(heap, s, b);
    return;
  }
  unsigned cls = s->cls;
  if (heap->foreign_skip[cls]) heap->foreign_skip[cls]--;
  if (heap->gathered[cls].slab == NULL && heap->gather_skip[cls]) {
    heap->gather_skip[cls]--;
    heap_free_at_once(s, b);
  } else {
    heap_gather(heap, s, b);
  }
}

/* Publishes every class's gathered frees (all) or those of the classes
 * with no new free since the last call, a millisecond or more ago. */
static void heap_publish_gathered(heap_t *heap, bool all, uint64_t now) {
  if (!all && now == heap->gathered_ms) return;
  heap->gathered_ms = now;
  for (uint64_t m = heap->gathered_classes; m; m &= m - 1) {
    unsigned cls = (unsigned)__builtin_ctzll(m);
    slab_batch_t *q = &heap->gathered[cls];
    if (all || q->n == q->seen) heap_publish(heap, cls);
    else q->seen = q->n;
  }
}

/* Sends a foreign list's blocks home. Walks count the blocks, so that a
 * block freed twice (on the list twice) is sent twice, and reported there.
 * A link that does not lead to a free block (written after its free) ends
 * the walk: reported, the rest of the list dropped, as a slab's. Each link
 * is cleared on the way: a block whose first word reads as a link sends
 * its owner's collector through its tcache (a double free's test), one
 * walk a block. */
static void foreign_send(heap_t *heap, slab_t *fc) {
  uint32_t n = fc->capacity - fc->used;
  block_t *b = slab_list(fc);
  slab_set_list(fc, NULL);
  fc->capacity = fc->used = 0;
  for (uint32_t i = 0; i < n && b; i++) {
    slab_t *s = map_kind(b) == MAP_REGION ? slab_of(b) : NULL;
    if (s == NULL || !slab_is_block(s, b) || !((uintptr_t)b->next & BLOCK_FREE_BIT)) {
      harden_list_broken(b);
      return;
    }
    block_t *next = block_next(fc, b); /* before b goes home, where its owner may take it */
    b->next = NULL;
    if (!slab_batch_add(&heap->gathered[s->cls], s, b)) heap_gather(heap, s, b);
    b = next;
  }
}

#define FOREIGN_SKIP 4096
void heap_foreign_full(heap_t *heap, unsigned cls) {
  slab_t *fc = &heap->foreign[cls];
  uint32_t n = fc->capacity - fc->used;
  if (n * fc->bsize > FOREIGN_TRY_BYTES + heap->foreign_more[cls]) {
    /* none taken since the list last emptied: this thread frees the class
     * and does not allocate it (a consumer), so its frees go home at once */
    if (fc->used == 0) heap->foreign_skip[cls] = FOREIGN_SKIP;
    else if (heap->foreign_more[cls] == 0) { /* it allocates the class: keep more */
      heap->foreign_more[cls] = FOREIGN_KEEP_BYTES - FOREIGN_TRY_BYTES;
      return;
    }
    foreign_send(heap, fc);
    return;
  }
  heap_set_active(heap, cls, fc); /* heap_free_remote found it worth showing */
}

/* Once per purge delay: a foreign list that neither grew nor shrank since
 * the last look goes home, since a class the thread stopped using would
 * hold its owners' slabs up. A list's full_gen keeps capacity + used as
 * it was then (any push or pop moves it). */
static void heap_foreign_tick(heap_t *heap) {
  if (heap->foreign == NULL) return;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    slab_t *fc = &heap->foreign[cls];
    if (fc->capacity == fc->used) continue;
    uint32_t mark = fc->capacity + fc->used;
    if (mark == fc->full_gen) foreign_send(heap, fc);
    else fc->full_gen = mark;
  }
}

/* Every foreign block goes home (thread exit, trim, sampling). */
static void heap_foreign_flush(heap_t *heap) {
  if (heap->foreign == NULL) return;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++)
    if (heap->foreign[cls].capacity != heap->foreign[cls].used) foreign_send(heap, &heap->foreign[cls]);
}

/* ---- sampling views ------------------------------------------------------ */

/* A proxy's fields: free, the chain the fast path takes from (its used
 * counts what it took); head, the slab the chain came from; capacity, the
 * chain's length; bump, its last block; key and bsize, the slab's. */
bool heap_sampling_start(heap_t *heap, int64_t first) {
  if (heap->foreign != NULL) { /* the fast path's views become the sampler's */
    heap_foreign_flush(heap);
    for (unsigned cls = 0; cls < NUM_CLASSES; cls++)
      if (heap->active[cls] == &heap->foreign[cls]) heap_set_active(heap, cls, &heap->empty);
    os_unmap(heap->foreign, CLASS_VIEWS_BYTES);
    heap->foreign = NULL;
  }
  if (heap->proxy == NULL) {
    if ((heap->proxy = class_views_map()) == NULL) return false;
  }
  heap->sample_left = first;
  return true;
}

void heap_sample_settle(heap_t *heap, unsigned cls) {
  slab_t *px = &heap->proxy[cls], *s = px->head;
  if (s == NULL) return;
  uint32_t left = px->capacity - px->used;
  px->head = NULL;
  if (left == 0) return; /* the slab may be gone since: nothing to give back */
  block_link(s, (block_t *)px->bump, s->free);
  s->free = px->free;
  s->used -= left;
  px->free = slab_end(px);
  heap->sample_left += (int64_t)left * s->bsize;
}

/* Moves the first blocks of s's list, at most max (at least one: the list
 * is not empty), to a list of their own that ends at c's head, as if
 * allocated from s; their number, the last in *last. The first `ordered`
 * blocks of the list lie in address order, a carve's (slab_carve): those
 * are counted off without a walk. */
static uint32_t list_cut(slab_t *s, slab_t *c, uint32_t max, uint32_t ordered, block_t **last) {
  block_t *l = s->free;
  uint32_t n = 1;
  if (ordered > 1 && !HAKMEM_SECURE) {
    n = MIN(max, ordered);
    l = (block_t *)((char *)l + (size_t)(n - 1) * s->bsize);
  }
  for (block_t *b; n < max && (b = block_next(s, l)) != NULL; n++) l = b;
  slab_set_list(s, block_next(s, l));
  block_link(c, l, slab_end(c));
  s->used += n;
  *last = l;
  return n;
}

/* The view of slab s while sampling: a proxy holding the blocks of s->free
 * that fit before the next sample, charged to sample_left; the empty view
 * when not one does (the next allocation of the class is counted by the
 * slow path). The secure build's list checks need the slab's own address:
 * there every allocation takes the slow path. */
static slab_t *proxy_cut(heap_t *heap, slab_t *s) {
  int64_t fit = heap->sample_left / (int64_t)s->bsize;
  if (HAKMEM_SECURE || fit <= 0 || !slab_has_free(s)) return &heap->empty;
  slab_t *px = &heap->proxy[s->cls];
  block_t *first = s->free, *last;
  uint32_t n = list_cut(s, px, (uint32_t)MIN(fit, UINT32_MAX), 0, &last);
  heap->sample_left -= (int64_t)n * s->bsize;
  px->free = first;
  px->used = 0;
  px->capacity = n;
  px->head = s;
  px->bump = (char *)last;
  px->key = s->key;
  px->bsize = s->bsize;
  return px;
}

/* A slab's last block came back; s is not a current slab (those hold an
 * extra use). Keep one spare per class, idle; give anything more back. */
void heap_slab_empty(heap_t *heap, slab_t *s) {
  slab_queue_t *q = &heap->queue[s->cls];
  if (q->spare != NULL && q->spare != s) {
    queue_remove(heap, s);
    heap_span_release(heap, s);
    return;
  }
  q->spare = s;
  slab_set_idle(heap, s);
}

/* The current slab of cls stops being current; empty, it becomes a queued
 * slab like any other emptied one. The fast path still points at it: the
 * caller points it elsewhere before it returns (heap_drop_cur, or the slab
 * that heap_alloc_small_slow finds next). */
static void heap_set_aside_cur(heap_t *heap, unsigned cls) {
  slab_t *s = heap->cur[cls];
  __atomic_store_n(&heap->cur[cls], &hak_slab_empty, __ATOMIC_RELAXED);
  if (--s->used == 0) {
    queue_push(heap, s);
    heap_slab_empty(heap, s);
  } else {
    slab_set_full(heap, s);
  }
}

/* The current slab of cls leaves the fast path. */
static void heap_drop_cur(heap_t *heap, unsigned cls) {
  heap_set_aside_cur(heap, cls);
  heap_set_active(heap, cls, &heap->empty);
}

/* The chain head..tail of n of s's blocks, linked, goes onto s's list. */
static void slab_give(heap_t *heap, slab_t *s, block_t *head, block_t *tail, uint32_t n) {
  if (slab_owner(s) & SLAB_F_FULL) {
    slab_clear_full(s);
    queue_push(heap, s);
  }
  block_link(s, tail, s->free);
  s->free = head;
  if ((s->used -= n) == 0) heap_slab_empty(heap, s);
}

void heap_free_local_slow(heap_t *heap, slab_t *s, block_t *b) { slab_give(heap, s, b, b, 1); }

void heap_slab_unfull(heap_t *heap, slab_t *s) {
  slab_clear_full(s);
  queue_push(heap, s);
}

/* ---- the tcache (owner only) ------------------------------------------------- */

/* Blocks a class's tcache holds at most (its capacity): at first TC_BYTES
 * of them, at least TC_MIN blocks and at most TC_MAX; half of it moves at
 * once, either way. One that fills up after a refill (a program that frees
 * batches as large as it allocates) doubles instead, up to TC_GROW_BYTES or
 * TC_GROW_MAX blocks, and at least TC_GROW_MIN (the largest classes' slabs
 * hold 8 blocks: a batch past the bound empties and makes a slab every 8
 * blocks); the tick takes it back to the start. A batch larger
 * than that pays each of its blocks four walks of a list (the cut and the
 * send on overflow, the refill's cut), each load waiting on the last. */
#define TC_BYTES 65536
#define TC_MIN 8
#define TC_MAX 128
#define TC_GROW_BYTES (4 << 20)
#define TC_GROW_MAX 16384
#define TC_GROW_MIN 256
/* A refill takes TC_BATCH_MIN blocks at first, twice as many at each next
 * one up to half the capacity, half as many after the tcache filled up:
 * a thread that allocates a few blocks of a class does not take (and give
 * back at exit) a batch it never uses. */
#define TC_BATCH_MIN 8
static uint32_t tc_limit(unsigned cls) { return MIN(MAX(TC_BYTES / hak_class_size[cls], TC_MIN), TC_MAX); }
static uint32_t tc_grow_limit(unsigned cls) { return MIN(MAX(TC_GROW_BYTES / hak_class_size[cls], TC_GROW_MIN), TC_GROW_MAX); }

/* Takes the slabs that received remote frees and moves their blocks to
 * their free lists; with to_tc, to their class's tcache first where it has
 * grown (the thread frees batches of the class itself, and allocates as
 * many), whose next mallocs then take them without a refill's walk of a
 * slab's list. Not with sampling's proxies, which are cut from the slabs'
 * lists, nor in the secure build. A wiped slab is taken back once the
 * thread that wiped it has returned its pages (it holds the lock until
 * then). */
static void heap_collect_remote(heap_t *heap, bool to_tc) {
  slab_t *s = atomic_exchange_explicit(&heap->inbox.top, NULL, memory_order_acquire);
  to_tc = to_tc && !HAKMEM_SECURE && heap->proxy == NULL;
  if (s) {
    atomic_fetch_add_explicit(&heap->collects, 1, memory_order_relaxed);
    atomic_store_explicit(&heap->unclaimed, 0, memory_order_relaxed);
  }
  while (s) {
    slab_t *next = s->remote_next; /* read first: s may be pushed again at once */
    bool wiped;
    slab_t *tc = &heap->tc[s->cls];
    bool to = to_tc && tc->capacity > tc_limit(s->cls); /* grown: in use, its list set */
    if (slab_collect_remote(s, HAKMEM_SECURE ? NULL : tc, to ? tc : NULL, &wiped)) {
      if (wiped) heap_lock(heap), heap_unlock(heap);
      if (slab_owner(s) & SLAB_F_FULL) {
        slab_clear_full(s);
        queue_push(heap, s);
      }
      if (s->used == 0) heap_slab_empty(heap, s);
    }
    s = next;
  }
}

/* Sends up to max blocks of c's list, from b on, to their slabs' own
 * lists, and returns the first block it left (c's end where the list ended
 * or broke), with the count sent in *sent (when not NULL). Each is taken
 * first, all of them before any goes: a block freed twice, listed twice, is
 * found (harden_list_broken: the rest is dropped) and goes once. */
static block_t *tc_send(heap_t *heap, slab_t *c, block_t *b, uint32_t max, uint32_t *sent) {
  block_t *end = slab_end(c), *first = b;
  uint32_t n = 0;
  for (; n < max && b != end; n++) {
    if (unlikely(!block_take(b))) {
      harden_list_broken(b); /* returns only to drop the rest */
      b = end;
      break;
    }
    b = b->next;
  }
  if (sent) *sent = n;
  /* runs of blocks of one slab (freed in the order they were allocated)
   * go onto its list as they are linked */
  slab_t *xs = n ? slab_of(first) : NULL, *ns = NULL;
  for (block_t *x = first; n; xs = ns) {
    block_t *tail = x, *next = x->next;
    uint32_t k = 1;
    for (n--; n && (ns = slab_of(next)) == xs; n--, k++) {
      block_link(xs, tail, next);
      tail = next;
      next = next->next;
    }
    slab_give(heap, xs, x, tail, k);
    x = next;
  }
  return b;
}

/* Full c sends the TC_SEND_RECENT blocks freed before its last to their
 * slabs while they are still in the cache (an older half, sent instead, is
 * walked again out of cache) and keeps the last for the next malloc: a run
 * of frees calls here once in TC_SEND_RECENT frees, not at each. The
 * tcache keeps the rest for the mallocs after the run. A run longer than
 * the tcache (a teardown, not a batch the next mallocs take back) sends
 * those home too, so that the slabs it empties go back whole, and goes on
 * with a capacity of 1: the next free into each slab comes here and points
 * the slab's frees at its own list (tc_give_last). The refill that finds
 * the tcache empty ends the run; a slab goes back to the tcache when it is
 * next made current. */
#define TC_SEND_RECENT 8
#define TC_RUN_DIRECT 1
_Static_assert(TC_GROW_MAX + TC_SEND_RECENT <= UINT16_MAX, "tc_run_cap and tc_run_frees fit");
static void tc_send_recent(heap_t *heap, slab_t *c) {
  block_t *b = c->free;
  uint32_t sent;
  block_t *rest = tc_send(heap, c, block_link_of(c, b), MIN(TC_SEND_RECENT, c->capacity / 2), &sent);
  block_link(c, b, rest);
  c->used = rest == slab_end(c) ? c->capacity - 1 : c->used + sent;
}

/* In a teardown, c's one block, freed into slab s, goes onto s's list, and
 * s's next frees go there straight from the fast path: out of cache, a
 * free waits on the stores queued behind its block's missing line, and a
 * call a free (or a send) adds several (docs/experiments.md, stop 84). The
 * block is not read: a read of its line would wait for free's write. */
static void tc_give_last(heap_t *heap, slab_t *c, slab_t *s) {
  block_t *b = c->free;
  slab_set_list(c, NULL);
  c->used = TC_RUN_DIRECT;
  slab_point(s, s);
  slab_give(heap, s, b, b, 1);
}

void heap_tc_full(heap_t *heap, slab_t *c, slab_t *s) {
  if (c == unit_head(s)) { /* the slab's own list */
    heap_slab_empty(heap, c);
    return;
  }
  if (c->capacity == TC_RUN_DIRECT) {
    tc_give_last(heap, c, unit_head(s));
    return;
  }
  uint64_t bit = UINT64_C(1) << c->cls;
  if ((heap->tc_refilled & bit) && c->capacity < tc_grow_limit(c->cls)) {
    heap->tc_refilled &= ~bit;
    uint32_t count = c->capacity; /* full: used is 0 */
    c->capacity = MIN(count * 2, tc_grow_limit(c->cls));
    c->used = c->capacity - count;
    return;
  }
  heap->tc_refilled &= ~bit;
  heap->tc_batch[c->cls] /= 2;
  if (heap->tc_run_cap[c->cls] == 0) { /* a capacity is at least TC_MIN */
    heap->tc_run_cap[c->cls] = (uint16_t)c->capacity;
    heap->tc_run_frees[c->cls] = 0;
  } else if ((heap->tc_run_frees[c->cls] += TC_SEND_RECENT) >= heap->tc_run_cap[c->cls]) { /* a teardown */
    block_t *b = c->free;
    slab_set_list(c, NULL);
    c->capacity = c->used = TC_RUN_DIRECT;
    tc_send(heap, c, b, UINT32_MAX, NULL);
    return;
  }
  tc_send_recent(heap, c);
}

/* The tcache of cls empty, at its first capacity and refill size. */
static void tc_reset(heap_t *heap, unsigned cls) {
  slab_t *c = &heap->tc[cls];
  slab_set_list(c, NULL);
  c->capacity = c->used = tc_limit(cls);
  heap->tc_batch[cls] = 0;
  heap->tc_run_cap[cls] = 0;
}

/* Every block of the tcache of cls goes back to its slab. */
static void tc_drain(heap_t *heap, unsigned cls) {
  slab_t *c = &heap->tc[cls];
  block_t *b = c->free;
  if (b == NULL) return;
  tc_reset(heap, cls);
  if (b != slab_end(c)) tc_send(heap, c, b, UINT32_MAX, NULL);
}

static slab_t *heap_slab_new(heap_t *heap, unsigned cls) {
  bool dirty;
  slab_t *s = heap_span_alloc(heap, hak_class_units[cls], &dirty);
  if (s == NULL) return NULL;
  if (!dirty) atomic_fetch_add_explicit(&heap_fresh_slab_bytes, (size_t)s->units * UNIT_SIZE, memory_order_relaxed);
  slab_init(s, heap, hak_stats_enabled ? SLAB_F_SLOW : 0, cls, !dirty);
  s->tc = &heap->tc[cls];
  slab_mirror(s);
  slab_t *c = &heap->tc[cls];
  if (c->free == NULL) { /* the class's first slab: its tcache starts empty */
    tc_reset(heap, cls);
    c->bsize = hak_class_size[cls];
    c->cls = (uint8_t)cls;
  }
  return s;
}

/* Whether blocks other threads freed are to be collected before a slab of
 * the class whose current slab is cur is looked for: cur is dry, and they
 * go out again before fresh ones are carved. */
static bool heap_collect_due(const heap_t *heap, const slab_t *cur) {
  return !slab_has_free(cur) && atomic_load_explicit(&heap->inbox.top, memory_order_relaxed);
}

/* A slab of class cls with a non-empty free list, made current, or NULL when
 * out of memory. */
static slab_t *heap_find_slab(heap_t *heap, unsigned cls) {
  slab_t *s = heap->cur[cls];
  heap->carved = 0;
  if (heap_collect_due(heap, s)) heap_collect_remote(heap, false);
  if (heap_slab_ready(heap, s)) return s;
  if (s != &hak_slab_empty) heap_set_aside_cur(heap, cls);
  slab_queue_t *q = &heap->queue[cls];
  while ((s = q->head) != NULL) {
    queue_remove(heap, s);
    if (heap_slab_ready(heap, s)) break;
    slab_set_full(heap, s);
  }
  if (s == NULL && (s = heap_slab_new(heap, cls)) == NULL) return NULL;
  s->used++; /* the current slab's extra use: it never empties on the fast path */
  if (s->tc != &heap->tc[cls]) slab_point(s, &heap->tc[cls]); /* a teardown pointed it at itself */
  __atomic_store_n(&heap->cur[cls], s, __ATOMIC_RELAXED);
  return heap_slab_ready(heap, s) ? s : NULL;
}

/* An allocation of cls from its tcache, refilled from the current slab
 * when empty; the fast path is pointed at it (with statistics on, at none:
 * every allocation is counted here). */
static void *heap_tc_alloc(heap_t *heap, unsigned cls) {
  slab_t *c = &heap->tc[cls];
  block_t *b = c->free;
  /* where heap_find_slab would collect: onto the tcache first */
  if (b == slab_end(c) && heap_collect_due(heap, heap->cur[cls])) {
    heap_collect_remote(heap, true);
    b = c->free;
  }
  if (b == NULL || b == slab_end(c)) {
    slab_t *s = heap_find_slab(heap, cls);
    if (s == NULL) {
      if (heap->active[cls] != &heap->empty) heap_set_active(heap, cls, &heap->empty);
      return NULL;
    }
    b = s->free;
    if (heap->tc_run_cap[cls] != 0) { /* the run of frees is over */
      c->capacity = heap->tc_run_cap[cls];
      heap->tc_run_cap[cls] = 0;
    }
    uint32_t want = MIN(MAX(heap->tc_batch[cls], TC_BATCH_MIN), c->capacity / 2);
    heap->tc_batch[cls] = (uint16_t)MIN(want * 2, c->capacity / 2);
    c->used = c->capacity - list_cut(s, c, want, heap->carved, &(block_t *){NULL});
    c->free = b;
    heap->tc_refilled |= UINT64_C(1) << cls;
  }
  if (unlikely(!slab_take(c, b))) {
    harden_list_broken(b); /* returns only to drop the list: its blocks are lost, not handed out twice */
    slab_set_list(c, NULL);
    c->used = c->capacity;
    return heap_tc_alloc(heap, cls);
  }
  slab_pop_taken(c, b);
  slab_t *view = hak_stats_enabled ? &heap->empty : c;
  if (heap->active[cls] != view) heap_set_active(heap, cls, view);
  stat_alloc(cls, c->bsize);
  return b;
}

/* The fast path is pointed at the slab found (with statistics on, at none:
 * every allocation is counted here), and only when that changes. */
void *heap_alloc_small_slow(heap_t *heap, unsigned cls) {
  slab_t *fc = heap->foreign ? &heap->foreign[cls] : NULL;
  if (fc && fc->capacity != fc->used) { /* foreign blocks first, as on the fast path */
    block_t *b = fc->free;
    if (likely(slab_take(fc, b))) {
      if (heap->active[cls] != fc) heap_set_active(heap, cls, fc);
      return slab_pop_taken(fc, b);
    }
    harden_list_broken(b); /* returns only to drop the list, as a slab's below */
    slab_set_list(fc, NULL);
  }
  if (fc) fc->capacity = fc->used = 0;
  if (!HAKMEM_SECURE && likely(heap->proxy == NULL)) return heap_tc_alloc(heap, cls);
  tc_drain(heap, cls); /* sampling: the proxies are cut from the slabs' lists */
  slab_t *s = heap_find_slab(heap, cls);
  if (s == NULL) {
    if (heap->active[cls] != &heap->empty) heap_set_active(heap, cls, &heap->empty);
    return NULL;
  }
  block_t *b = s->free;
  if (unlikely(!slab_take(s, b))) {
    harden_list_broken(b); /* returns only to drop the list: its blocks are lost, not handed out twice */
    slab_set_list(s, NULL);
    return heap_alloc_small_slow(heap, cls);
  }
  slab_pop_taken(s, b);
  slab_t *view = s;
  if (hak_stats_enabled) view = &heap->empty;
  else if (unlikely(heap->proxy != NULL)) view = proxy_cut(heap, s);
  if (heap->active[cls] != view) heap_set_active(heap, cls, view);
  stat_alloc(cls, s->bsize);
  return b;
}

/* ---- the owner's tick ------------------------------------------------------------ */

/* Purges the free pages of the heap's sparse slabs among its queued ones.
 * Owner only: the free lists are its own. */
static size_t heap_purge_sparse(heap_t *heap, bool at_once) {
  size_t purged = 0;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++)
    for (slab_t *s = heap->queue[cls].head; s; s = s->next)
      if (!s->idle) purged += slab_purge_sparse(s, at_once);
  return purged;
}

/* Once per purge delay (at least TICK_MIN_MS), the owner hands back its
 * emptied current slabs that carved more than a unit (those of a unit or
 * less stay on the fast path: a batch that fills and empties one would pay
 * an idle and a wake each time) and purges its sparse slabs, which nobody
 * else may do. */
#define TICK_MIN_MS 50
void heap_tick(heap_t *heap, uint64_t now) {
  atomic_store_explicit(&heap->active_ms, now, memory_order_relaxed);
  heap_publish_gathered(heap, false, now);
  if (atomic_load_explicit(&heap->inbox.top, memory_order_relaxed)) heap_collect_remote(heap, true);
  long delay = purge_delay();
  if (delay < 0 || now - heap->sparse_at_ms < (uint64_t)MAX(delay, TICK_MIN_MS)) return;
  heap->sparse_at_ms = now;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    tc_drain(heap, cls);
    slab_t *s = heap->cur[cls];
    if (s != &hak_slab_empty && s->used == 1 && s->bump - slab_start(s) > (ptrdiff_t)UNIT_SIZE)
      heap_drop_cur(heap, cls);
  }
  heap_foreign_tick(heap);
  heap_purge_sparse(heap, false);
}

/* ---- purging, by any thread --------------------------------------------------------- */

size_t heap_purge(heap_t *h, uint64_t now, uint64_t delay, bool wait, bool *pending) {
  if (wait) heap_lock(h);
  else if (!hak_trylock(&h->lock)) {
    if (pending) *pending = true;
    return 0;
  }
  size_t n = 0;
  bool left = false;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    slab_t *s = h->idle[cls];
    if (s == NULL || s->purged) continue;
    if (now - s->idle_ms >= delay) { /* under the lock: the owner's wake waits */
      n += os_purge(slab_start(s), (size_t)s->units * UNIT_SIZE);
      s->purged = 1;
    } else {
      left = true;
    }
  }
  left |= run_cache_flush(&h->lcache, now, delay);
  n += run_purge_due(&h->pages, &h->lock, now, delay, SIZE_MAX);
  left |= h->pages.dirty_head != NULL;
  heap_unlock(h);
  if (n) stat_add(bytes_purged, n);
  if (pending) *pending |= left;
  return n;
}

/* ---- heap life cycle ----------------------------------------------------------------- */

static heap_t *heap_new(void) {
  const size_t align = _Alignof(heap_t); /* its slab_t's, a power of two */
  size_t need = (sizeof(heap_t) + align - 1) & ~(align - 1);
  hak_lock(&heaps_lock);
  if (meta_next == NULL || meta_next + need > meta_end) {
    size_t chunk = MAX((size_t)64 * 1024, os_page_round(need + align));
    char *m = os_map(chunk);
    if (m == NULL) {
      hak_unlock(&heaps_lock);
      return NULL;
    }
    meta_chunk_t *c = (meta_chunk_t *)m;
    *c = (meta_chunk_t){meta_chunks, chunk};
    meta_chunks = c;
    meta_next = m + align; /* after the chunk's link and size */
    meta_end = m + chunk;
  }
  heap_t *h = (heap_t *)meta_next;
  meta_next += need;
  __builtin_memcpy(h, &hak_heap_empty, offsetof(heap_t, tc)); /* the caches: zero, as mapped */
  slab_set_list(&h->empty, NULL);
  run_heap_init(&h->pages, (unsigned)__builtin_ctzl(os_page_size()));
  static uint32_t made;
  h->serial = made++;
  h->next_all = all_heaps;
  atomic_store_explicit(&all_heaps, h, memory_order_release);
  hak_unlock(&heaps_lock);
  stat_inc(heaps_created);
  return h;
}

heap_t *heap_init_thread(void) {
  hak_lock(&heaps_lock);
  heap_t *h = abandoned;
  if (h) __atomic_store_n(&abandoned, h->next_abandoned, __ATOMIC_RELAXED);
  hak_unlock(&heaps_lock);
  if (h) {
    h->next_abandoned = NULL;
    __builtin_memset(h->carve_n, 0, sizeof h->carve_n); /* a new thread starts small */
    __builtin_memset(h->cold_runs, 0, sizeof h->cold_runs);
    __builtin_memset(h->foreign_more, 0, sizeof h->foreign_more);
    h->grown_classes = h->filled_classes = h->density_known = h->dense_classes = 0;
    stat_inc(heaps_adopted);
  } else if ((h = heap_new()) == NULL) {
    return NULL;
  }
  atomic_store_explicit(&h->active_ms, os_now_ms(), memory_order_relaxed);
  hak_tls_heap = h;
  view_bind(h, true);
  pthread_setspecific(heap_key, h);
  atomic_fetch_add_explicit(&heaps_running, 1, memory_order_relaxed);
  return h;
}

/* Empty slabs the heap keeps (its spares, emptied current slabs) go back. */
static void heap_release_empty(heap_t *heap, bool tc) {
  heap_collect_remote(heap, false);
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    if (tc) tc_drain(heap, cls);
    if (heap->proxy) {
      heap_sample_settle(heap, cls);
      heap_set_active(heap, cls, &heap->empty); /* not a proxy's stale view */
    }
    if (heap->cur[cls] != &hak_slab_empty && heap->cur[cls]->used == 1) heap_drop_cur(heap, cls);
    slab_t *s = heap->queue[cls].spare;
    if (s) {
      queue_remove(heap, s);
      heap_span_release(heap, s);
    }
  }
}

size_t heap_trim(heap_t *heap) {
  heap_foreign_flush(heap);
  heap_publish_gathered(heap, true, 0);
  heap_release_empty(heap, true);
  size_t n = heap_purge_sparse(heap, true);
  return n + heap_purge(heap, os_now_ms(), 0, true, NULL);
}

size_t heap_meta_resident(void) {
  size_t n = 0;
  hak_lock(&heaps_lock);
  for (meta_chunk_t *c = meta_chunks; c; c = c->next) n += os_resident(c, c->size);
  hak_unlock(&heaps_lock);
  return n;
}

void heap_usage(heap_t *h, region_usage_t *u) {
  heap_lock(h);
  for (run_chunk_t *c = h->pages.chunks; c; c = c->next) region_usage(region_of(c), u);
  heap_unlock(h);
}

bool heap_meta_overlaps(uintptr_t lo, uintptr_t hi) {
  bool hit = false;
  hak_lock(&heaps_lock);
  for (meta_chunk_t *c = meta_chunks; c && !hit; c = c->next) hit = (uintptr_t)c < hi && lo < (uintptr_t)c + c->size;
  hak_unlock(&heaps_lock);
  return hit;
}

heap_t *heap_all(void) { return atomic_load_explicit(&all_heaps, memory_order_acquire); }

size_t heap_dirty_bytes(uint64_t *grew_ms) {
  size_t n = 0;
  uint64_t grew = 0;
  for (heap_t *h = heap_all(); h; h = h->next_all) {
    n += run_heap_dirty_bytes(&h->pages);
    grew = MAX(grew, run_heap_grew_ms(&h->pages));
  }
  if (grew_ms) *grew_ms = grew;
  return n;
}

unsigned heap_threads_running(void) { return atomic_load_explicit(&heaps_running, memory_order_relaxed); }

void heap_fork_lock(bool lock) {
  if (lock) hak_lock(&heaps_lock);
  for (heap_t *h = heap_all(); h; h = h->next_all) lock ? heap_lock(h) : heap_unlock(h);
  if (!lock) hak_unlock(&heaps_lock);
}

/* Only the forking thread runs in the child (after heap_fork_lock(false)). */
void heap_fork_child(void) {
  atomic_store_explicit(&heaps_running, 1, memory_order_relaxed);
}

/* An abandoned heap keeps its partly used slabs, and of its free dirty pages
 * twice as many as its thread held at most in Large blocks, or as many as
 * in slab spans (up to ABANDON_SPANS_MAX of those), whichever is more, a
 * region's worth at least, and ABANDON_SLACK more, warm for the thread that
 * adopts it (in thread churn at once: the next thread, like the last, takes
 * them again). Twice: blocks of other sizes than the last thread's fit its
 * pages only with room to spare, and those it handed to other threads come
 * back to the heap after its exit; the slack: the few pages past that bound
 * are the ones its adopter would otherwise fault in again at each exit.
 * Those go back with age, as any heap's, in the purge rounds of the threads
 * that still run; the rest (the oldest: fragments no block of its thread's
 * sizes took) and what is due by age go now. The bound on spans keeps a
 * wave of exiting threads, whose adopters take back only part of what they
 * inherit, from holding every slab for a delay. */
#define ABANDON_KEEP_MIN REGION_SIZE
#define ABANDON_SLACK ((size_t)2 << 20)
#define ABANDON_SPANS_MAX ((size_t)4 << 20)
void (*heap_abandon_hook)(heap_t *heap);

static void heap_abandon(heap_t *heap) {
  if (heap == &hak_heap_empty) return;
  if (heap_abandon_hook) heap_abandon_hook(heap);
  heap_foreign_flush(heap);
  heap_publish_gathered(heap, true, 0);
  atomic_fetch_sub_explicit(&heaps_running, 1, memory_order_relaxed);
  heap_release_empty(heap, false); /* the tcaches stay, warm, for the adopter (heap_tick_abandoned) */
  heap->abandoned_ms = os_now_ms();
  long delay = purge_delay();
  heap_lock(heap);
  size_t spans = MIN(heap->span_peak, ABANDON_SPANS_MAX);
  size_t keep = (MAX(MAX(2 * heap->large_peak, spans), ABANDON_KEEP_MIN) + ABANDON_SLACK) >> heap->pages.page_shift;
  size_t purged = delay < 0 ? 0 : run_purge_due(&heap->pages, &heap->lock, heap->abandoned_ms, (uint64_t)delay, keep);
  heap->large_peak = heap->large_live; /* the adopter's own from here, purging on or off */
  heap->span_peak = heap->span_bytes;
  heap_unlock(heap);
  if (purged) stat_add(bytes_purged, purged);
  atomic_store_explicit(&heap->active_ms, 0, memory_order_relaxed); /* idle: remote wipes return pages at once */
  hak_lock(&heaps_lock);
  heap->next_abandoned = abandoned;
  __atomic_store_n(&abandoned, heap, __ATOMIC_RELAXED);
  hak_unlock(&heaps_lock);
}

/* On trim, an abandoned heap's regions that hold nothing go back to the
 * pool, its last one too (a running heap keeps that): an exited thread's
 * region header and address space are not held for an adopter that may
 * never come, which takes a region from the pool when it allocates. Not by
 * age: where threads come and go, each adopter would map and fault a
 * region afresh while the last one waited in the pool. */
static void heap_release_regions(heap_t *heap) {
  uint64_t now = os_now_ms();
  heap_lock(heap);
  for (run_chunk_t *c = heap->pages.chunks, *next; c; c = next) {
    next = c->next;
    if (c->used == 0) region_release(region_of(c), now);
  }
  heap_unlock(heap);
}

void heap_trim_abandoned(void) {
  hak_lock(&heaps_lock);
  for (heap_t *h = abandoned; h; h = h->next_abandoned) {
    heap_release_empty(h, true);
    heap_release_regions(h);
  }
  hak_unlock(&heaps_lock);
}

void heap_tick_abandoned(uint64_t now, uint64_t delay) {
  if (!hak_trylock(&heaps_lock)) return; /* a thread starting or ending: the next round */
  for (heap_t *h = abandoned; h; h = h->next_abandoned)
    if (h->abandoned_ms && now - h->abandoned_ms >= delay) {
      heap_release_empty(h, true);
      h->abandoned_ms = 0;
    }
  hak_unlock(&heaps_lock);
}

/* Whether h lends the run, a freed run of class cls that its cache keeps
 * or resident free pages: locked then, and only then. */
static bool heap_lends(heap_t *h, const heap_t *self, uint32_t n, uint32_t align, int cls, bool resident,
                       run_t *r) {
  if (h == self) return false;
  bool cached = cls >= 0 && __atomic_load_n(&h->lcache.pages, __ATOMIC_RELAXED) >= n,
       dirty = run_heap_dirty_bytes(&h->pages) >= ((size_t)n << h->pages.page_shift);
  if (!(cached || dirty) || !hak_trylock(&h->lock)) return false;
  if ((cached && run_cache_pop_within(&h->lcache, (unsigned)cls, (unsigned)cls, align, r)) ||
      (dirty && (resident ? run_alloc_resident : run_alloc)(&h->pages, n, align, r)))
    return true;
  heap_unlock(h);
  return false;
}

/* Heaps whose thread runs lend too, after the abandoned ones, where the
 * caller has no free run: where more threads run than there are
 * processors, other threads' frees give a waiting thread's heap the pages
 * that the running ones need. At most LEND_LOOK heaps of each kind are
 * looked at, newest first, so that the look costs no more as threads come. */
#define LEND_LOOK 64

/* Only trylocks: the caller holds its own heap's lock, and heap_fork_lock
 * takes heaps_lock before the heaps' locks. */
heap_t *heap_lend_run(const heap_t *self, uint32_t n, uint32_t align, int cls, bool resident, run_t *r) {
  heap_t *lender = NULL;
  unsigned looked = 0;
  /* read without the lock: none to look at is the common case */
  if (__atomic_load_n(&abandoned, __ATOMIC_RELAXED) != NULL && hak_trylock(&heaps_lock)) {
    for (heap_t *h = abandoned; h && !lender && looked < LEND_LOOK; h = h->next_abandoned, looked++)
      if (heap_lends(h, self, n, align, cls, resident, r)) lender = h;
    hak_unlock(&heaps_lock);
  }
  looked = 0; /* active_ms 0: abandoned, looked at above */
  for (heap_t *h = heap_all(); h && !lender && !resident && looked < LEND_LOOK; h = h->next_all, looked++)
    if (atomic_load_explicit(&h->active_ms, memory_order_relaxed) != 0 && heap_lends(h, self, n, align, cls, false, r))
      lender = h;
  return lender;
}

bool heap_thread_exited(void) { return heap_exited; }

static void heap_thread_exit(void *arg) {
  heap_t *heap = arg;
  heap_exited = true;
  if (hak_tls_heap == heap) {
    hak_tls_heap = &hak_heap_empty;
    view_bind(heap, false);
  }
  heap_abandon(heap);
}

void heap_thread_done(void) {
  heap_t *heap = hak_tls_heap;
  if (heap == &hak_heap_empty) return;
  hak_tls_heap = &hak_heap_empty;
  view_bind(heap, false);
  pthread_setspecific(heap_key, NULL);
  heap_abandon(heap);
}

void heap_process_init(void) { pthread_key_create(&heap_key, heap_thread_exit); }
