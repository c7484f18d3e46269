/* Thread heaps. Each thread allocates from its own heap, reached through
 * initial-exec TLS; a thread that has not allocated yet points at a static
 * empty heap whose every class reads as "empty, refill me", so the fast path
 * needs no "initialised?" test. A heap owns regions; its slabs sit in one
 * queue per class. Heaps outlive their threads: at thread exit a heap is
 * abandoned (remote frees keep arriving on its stack) and the next new thread
 * adopts it whole, so nothing is leaked and memory is reused. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

#include "internal.h"
#include "learn.h"
#include "options.h"
#include "stats.h"

#define REGION_EMPTY (~(uint64_t)0 & ~(uint64_t)1)

slab_t hak_slab_empty;
#define EMPTY_VIEWS {[0 ... NUM_CLASSES - 1] = &hak_slab_empty}
heap_t hak_heap_empty = {.direct = {[0 ... TINY_MAX / 8] = &hak_slab_empty},
                         .mid = {[0 ... SMALL_MAX / 256] = &hak_slab_empty},
                         .active = EMPTY_VIEWS, .cur = EMPTY_VIEWS};
__thread heap_t *hak_tls_heap __attribute__((tls_model("initial-exec"))) = &hak_heap_empty;

hak_lock_t hak_lock_heaps;
static heap_t *abandoned; /* under hak_lock_heaps */
static heap_t *_Atomic all_heaps; /* append-only */
static _Atomic unsigned heaps_running; /* heaps with a live thread */
static char *meta_next, *meta_end;
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

/* Points the fast paths of class cls at s (a slab, or hak_slab_empty): its
 * entry in active[] and the direct[] (Tiny) or mid[] entries of its sizes
 * (malloc then needs no class lookup: 2 instructions less at 8 KiB). */
static void heap_set_active(heap_t *heap, unsigned cls, slab_t *s) {
  heap->active[cls] = s;
  size_t size = hak_class_size[cls], prev = cls ? hak_class_size[cls - 1] : 0;
  if (size > TINY_MAX)
    for (size_t i = (prev >> 8) + 1; i <= size >> 8; i++) heap->mid[i] = s;
  else
    for (size_t i = cls ? (prev + 8) >> 3 : 0; i <= (size + 7) >> 3; i++) heap->direct[i] = s;
}

static void slab_set_full(slab_t *s) {
  atomic_fetch_or_explicit(&s->owner, SLAB_F_FULL, memory_order_relaxed);
}

/* ---- regions and spans --------------------------------------------------- */

static void region_unlink(heap_t *heap, region_t *r) {
  if (r->prev) r->prev->next = r->next;
  else heap->regions = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

static void region_link_front(heap_t *heap, region_t *r) {
  r->prev = NULL;
  r->next = heap->regions;
  if (r->next) r->next->prev = r;
  heap->regions = r;
}

static void region_link_back(heap_t *heap, region_t *r) {
  region_t *last = heap->regions;
  if (last == NULL) {
    region_link_front(heap, r);
    return;
  }
  while (last->next) last = last->next;
  last->next = r;
  r->prev = last;
  r->next = NULL;
}

/* A span from the heap's regions: those with free units come first, so the
 * scan stops at the first full one. Units still resident go out first, in
 * any region: fresh units fault in while resident ones wait for the purger
 * (mid_large_mt, 1 thread: 3,326 -> 3,071 faults, peak RSS 13.6 -> 12.6
 * MiB; phases, burst2, speed pinned: 26.7-27.8 k -> 20.7-25.9 k faults).
 * Room: see region_span_alloc. */
slab_t *heap_span_alloc(heap_t *heap, size_t units, size_t align_units, size_t room) {
  slab_t *s = NULL;
  hak_lock(&heap->lock);
  for (int warm = 1; warm >= 0 && s == NULL; warm--) {
    for (region_t *r = heap->regions; r && r->free_units; r = r->next) {
      if (warm && r->dirty_units == 0) continue;
      s = region_span_alloc(r, units, align_units, room, warm);
      if (s == NULL) continue;
      if (r->free_units == 0 && r->next) {
        region_unlink(heap, r);
        region_link_back(heap, r);
      }
      break;
    }
  }
  if (s == NULL) {
    region_t *r = region_alloc(heap);
    if (r) {
      region_link_front(heap, r);
      s = region_span_alloc(r, units, align_units, room, false);
    }
  }
  hak_unlock(&heap->lock);
  return s;
}

bool heap_span_grow(heap_t *heap, slab_t *s, size_t units) {
  hak_lock(&heap->lock);
  bool ok = region_span_grow(region_of(s), s, units);
  hak_unlock(&heap->lock);
  return ok;
}

/* Gives a span back to its region; a region left empty goes to the pool
 * unless it is the heap's last. */
static void heap_span_release(heap_t *heap, slab_t *s) {
  region_t *r = region_of(s);
  hak_lock(&heap->lock);
  bool was_full = r->free_units == 0;
  region_span_free(r, s);
  bool empty = r->free_units == REGION_EMPTY && (r != heap->regions || r->next);
  if (empty || was_full) region_unlink(heap, r);
  if (was_full && !empty) region_link_front(heap, r);
  hak_unlock(&heap->lock);
  if (empty) region_release(r);
}

/* ---- slabs of a heap ------------------------------------------------------ */

/* An empty slab kept by the heap goes idle: the purger may return its pages
 * after the delay. Its free list stays: taken back before that, the slab
 * serves its hot blocks again without carving them afresh. */
static void slab_set_idle(heap_t *heap, slab_t *s) {
  s->idle = 1;
  hak_lock(&heap->lock);
  region_slab_idle(region_of(s), s);
  hak_unlock(&heap->lock);
}

/* Takes an idle slab back from the purger; a purge meanwhile (its units are
 * no longer dirty) has zeroed the list's links, so the slab starts afresh. */
static void slab_wake(heap_t *heap, slab_t *s) {
  s->idle = 0;
  hak_lock(&heap->lock);
  bool purged = region_slab_wake(region_of(s), s);
  hak_unlock(&heap->lock);
  if (purged) slab_reset(s);
}

/* How many fresh blocks the heap carves for cls now. A class carved again
 * within CARVE_HOT_GAP of the heap's carves doubles its batch; one left alone
 * longer halves it once per CARVE_COLD_GAP carves since. A thread that
 * touches a class now and then writes a page of it, not 32 Mid blocks (a
 * page each); a class in a hot loop fills its slab in a few carves. The clock
 * counts carves, not time or calls, so the batches are deterministic and the
 * same with statistics on. */
#define CARVE_HOT_GAP 8
#define CARVE_COLD_GAP 64
static size_t heap_carve_count(heap_t *heap, unsigned cls) {
  size_t bsize = hak_class_size[cls];
  size_t lo = CARVE_BYTES / bsize ? CARVE_BYTES / bsize : 1;
  size_t hi = CARVE_HOT_BYTES / bsize > CARVE_MIN_HOT ? CARVE_HOT_BYTES / bsize : CARVE_MIN_HOT;
  uint32_t gap = ++heap->carves - heap->carve_at[cls];
  heap->carve_at[cls] = heap->carves;
  size_t n = heap->carve_n[cls];
  if (n == 0) n = lo;
  else if (gap <= CARVE_HOT_GAP) n *= 2;
  else n >>= gap / CARVE_COLD_GAP < 16 ? gap / CARVE_COLD_GAP : 16;
  n = n < lo ? lo : n > hi ? hi : n;
  heap->carve_n[cls] = (uint16_t)n;
  return n;
}

/* Whether s can serve an allocation, carving fresh blocks if its list is
 * empty; an idle slab is first taken back from the purger. */
static bool heap_slab_ready(heap_t *heap, slab_t *s) {
  if (unlikely(s->idle)) slab_wake(heap, s);
  if (s->free) return true;
  if (slab_has_purged(s)) { /* before any carve: carved blocks must not touch purged pages */
    slab_unpurge(s);
    return true;
  }
  if (s->bump >= s->end) return false; /* before the carve clock ticks */
  slab_carve(s, heap_carve_count(heap, s->cls));
  return true;
}

/* The emptied current slab kept on the fast path (heap_keep) goes idle. */
static void heap_unkeep(heap_t *heap) {
  if (heap->kept == 0) return;
  unsigned cls = heap->kept - 1u;
  slab_t *s = heap->cur[cls];
  heap->kept = 0;
  if (s == &hak_slab_empty || s->used || s->idle) return;
  heap_set_active(heap, cls, &hak_slab_empty);
  slab_set_idle(heap, s);
}

/* Of the current slabs that carved more than 64 KiB, the last one to empty
 * stays on the fast path, not idle: a batch that fills and empties a Mid slab
 * (64 blocks of 8 KiB) paid an idle and a wake each round, 5.6 instructions
 * a malloc+free pair (fastpath). It goes idle when another slab takes its
 * place, at the sparse-slab purge (heap_slow_tick), or is released by trim;
 * a thread that stops allocating holds this one slab (at most 512 KiB). */
static void heap_keep(heap_t *heap, slab_t *s) {
  if (heap->kept != s->cls + 1u) heap_unkeep(heap);
  heap->kept = (uint8_t)(s->cls + 1u);
}

/* A slab's last block came back. Keep the class's current slab and one spare;
 * give anything more back to the region. The spare goes idle (its pages are
 * purged if it stays unused). The current slab stays on the fast path: a
 * program that allocates and frees a batch at a time empties it over and
 * over. One that carved at most 64 KiB costs that much per class; of the
 * bigger ones only the last to empty stays so (heap_keep). An idle current
 * slab leaves the fast path, whose next allocation of the class takes it
 * back. */
void heap_slab_empty(heap_t *heap, slab_t *s) {
  learn_active();
  if (s->kind == SLAB_LARGE) {
    heap_span_release(heap, s);
    return;
  }
  bool cur = s == heap->cur[s->cls];
  slab_queue_t *q = &heap->queue[s->cls];
  if (!cur && q->spare != NULL) {
    queue_remove(heap, s);
    heap_span_release(heap, s);
    return;
  }
  if (cur) {
    if (s->bump - slab_start(s) > (ptrdiff_t)UNIT_SIZE) heap_keep(heap, s);
    return;
  }
  q->spare = s;
  slab_set_idle(heap, s);
}

/* Purges the free pages of the heap's sparse slabs (slab_purge_sparse)
 * among its queued ones: not a class's current slab, not an idle one. Owner
 * only: the free lists are its own. */
size_t heap_purge_sparse(heap_t *heap) {
  size_t purged = 0;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++)
    for (slab_t *s = heap->queue[cls].head; s; s = s->next)
      if (!s->idle) purged += slab_purge_sparse(s);
  return purged;
}

/* Every SPARSE_CALLS slow paths, the owner looks at the clock; once per
 * purge delay (at least SPARSE_MIN_MS) it purges its sparse slabs, which
 * nobody else may do. */
#define SPARSE_CALLS 64
#define SPARSE_MIN_MS 50
void heap_slow_tick(heap_t *heap) {
  if (++heap->slow_calls % SPARSE_CALLS) return;
  long delay = learn_knob(KNOB_PURGE_DELAY_MS);
  uint64_t now = os_now_ms();
  if (delay < 0 || now - heap->sparse_at_ms < (uint64_t)(delay > SPARSE_MIN_MS ? delay : SPARSE_MIN_MS)) return;
  heap->sparse_at_ms = now;
  heap_unkeep(heap);
  heap_purge_sparse(heap);
}

/* Takes the stack of slabs that received remote frees and moves their blocks
 * to the slabs' local lists. */
void heap_collect_remote(heap_t *heap) {
  slab_t *s = atomic_exchange_explicit(&heap->remote_slabs, NULL, memory_order_acquire);
  while (s) {
    slab_t *next = s->remote_next; /* read first: s may be pushed again at once */
    if (slab_collect_remote(s)) {
      if (s->kind == SLAB_SMALL && (slab_owner(s) & SLAB_F_FULL)) {
        atomic_fetch_and_explicit(&s->owner, ~(uintptr_t)SLAB_F_FULL, memory_order_relaxed);
        queue_push(heap, s);
      }
      if (s->used == 0) heap_slab_empty(heap, s);
    }
    s = next;
  }
}

/* A local free into a slab whose owner word carries flags. */
void heap_free_local_slow(heap_t *heap, slab_t *s, block_t *b) {
  if (slab_owner(s) & SLAB_F_FULL) {
    atomic_fetch_and_explicit(&s->owner, ~(uintptr_t)SLAB_F_FULL, memory_order_relaxed);
    queue_push(heap, s);
  }
  block_set_next(s, b, s->free);
  s->free = b;
  if (--s->used == 0) heap_slab_empty(heap, s);
}

/* A new slab ends an idle stretch, and samples the learner: it starts with
 * the program's first slab, so that its first explorations fall in whatever
 * the program does first, not in its first burst of huge blocks (phases,
 * learning's cost over the run against the best pinned strategy: 0.97x
 * started here, 1.10x started at the first Large/Huge allocation; the
 * price is the learner's own 64 KiB in a program without Large/Huge
 * blocks: memory 1M x 16 B 1.6 % -> 2.0 %, mimalloc's 2.0-2.2 %). */
static slab_t *heap_slab_new(heap_t *heap, unsigned cls) {
  learn_active();
  learn_tick(0);
  size_t units = hak_class_units[cls];
  slab_t *s = heap_span_alloc(heap, units, 1, 0);
  if (s) slab_init(s, heap, cls, units);
  return s;
}

/* A slab of class cls with a non-empty free list, or NULL when out of memory. */
static slab_t *heap_find_slab(heap_t *heap, unsigned cls) {
  slab_t *s = heap->cur[cls];
  /* Blocks other threads freed go out again before fresh ones are carved:
   * a producer whose consumers free its blocks carved its whole slab first
   * (cross_thread, 1 pair: peak RSS 2.6 -> 3.1 MiB with 256 KiB slabs). */
  if (!s->free && atomic_load_explicit(&heap->remote_slabs, memory_order_relaxed)) heap_collect_remote(heap);
  if (heap_slab_ready(heap, s)) return s;
  if (s != &hak_slab_empty) slab_set_full(s);
  slab_queue_t *q = &heap->queue[cls];
  while ((s = q->head) != NULL) {
    queue_remove(heap, s);
    if (heap_slab_ready(heap, s)) break;
    slab_set_full(s);
  }
  if (s == NULL) s = heap_slab_new(heap, cls);
  heap->cur[cls] = s ? s : &hak_slab_empty;
  return s && heap_slab_ready(heap, s) ? s : NULL;
}

/* The fast path is pointed at the slab found (with statistics on, at none:
 * every allocation is counted here), and only when that changes: a Mid
 * class has up to 16 entries in mid[]. */
void *heap_alloc_small_slow(heap_t *heap, unsigned cls) {
  slab_t *s = heap_find_slab(heap, cls);
  slab_t *view = s && likely(!hak_stats_enabled) ? s : &hak_slab_empty;
  if (heap->active[cls] != view) heap_set_active(heap, cls, view);
  if (s == NULL) return NULL;
  block_t *b = slab_pop(s);
  stat_alloc(cls, s->bsize);
  return b;
}

/* ---- heap life cycle ------------------------------------------------------ */

static heap_t *heap_new(void) {
  size_t need = (sizeof(heap_t) + 63) & ~(size_t)63;
  hak_lock(&hak_lock_heaps);
  if (meta_next == NULL || meta_next + need > meta_end) {
    size_t chunk = 64 * 1024;
    char *m = os_map_aligned(chunk, os_page_size());
    if (m == NULL) {
      hak_unlock(&hak_lock_heaps);
      return NULL;
    }
    meta_next = m;
    meta_end = m + chunk;
  }
  heap_t *h = (heap_t *)meta_next;
  meta_next += need;
  *h = hak_heap_empty;
  h->next_all = all_heaps;
  atomic_store_explicit(&all_heaps, h, memory_order_release);
  hak_unlock(&hak_lock_heaps);
  stat_inc(heaps_created);
  return h;
}

heap_t *heap_init_thread(void) {
  hak_process_init();
  hak_lock(&hak_lock_heaps);
  heap_t *h = abandoned;
  if (h) abandoned = h->next_abandoned;
  hak_unlock(&hak_lock_heaps);
  if (h) {
    h->next_abandoned = NULL;
    memset(h->carve_n, 0, sizeof h->carve_n); /* a new thread starts small */
    stat_inc(heaps_adopted);
  } else if ((h = heap_new()) == NULL) {
    return NULL;
  }
  hak_tls_heap = h;
  pthread_setspecific(heap_key, h);
  atomic_fetch_add_explicit(&heaps_running, 1, memory_order_relaxed);
  return h;
}

/* Gives back what the heap holds but does not use: remote frees, empty
 * slabs, empty regions, resident free units. Owner (or abandoned-list
 * holder) only. Returns bytes purged. */
size_t heap_trim(heap_t *heap) {
  heap_collect_remote(heap);
  heap->kept = 0; /* released below if still empty */
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    slab_queue_t *q = &heap->queue[cls];
    if (q->spare) {
      slab_t *s = q->spare;
      queue_remove(heap, s);
      heap_span_release(heap, s);
    }
    slab_t *cur = heap->cur[cls];
    if (cur != &hak_slab_empty && cur->used == 0) {
      heap->cur[cls] = &hak_slab_empty;
      heap_set_active(heap, cls, &hak_slab_empty);
      heap_span_release(heap, cur);
    }
  }
  size_t purged = 0;
  region_t *empty = NULL;
  hak_lock(&heap->lock);
  for (region_t *r = heap->regions, *next; r; r = next) {
    next = r->next;
    purged += region_purge(r);
    if (r->free_units == REGION_EMPTY) {
      region_unlink(heap, r);
      r->next = empty;
      empty = r;
    }
  }
  hak_unlock(&heap->lock);
  while (empty) {
    region_t *r = empty;
    empty = r->next;
    region_release(r);
  }
  return purged;
}

/* The purger's round: purges the regions of every heap whose dirty units
 * are due, skipping heaps whose owner holds the lock right now. Returns
 * whether dirty memory remains. */
bool heaps_purge_due(uint64_t now, uint64_t delay) {
  bool pending = false;
  for (heap_t *h = atomic_load_explicit(&all_heaps, memory_order_acquire); h; h = h->next_all) {
    if (atomic_exchange_explicit(&h->lock.held, 1, memory_order_acquire)) {
      pending = true;
      continue;
    }
    for (region_t *r = h->regions; r; r = r->next) pending |= region_purge_due(r, now, delay);
    hak_unlock(&h->lock);
  }
  return pending;
}

unsigned heap_threads_running(void) { return atomic_load_explicit(&heaps_running, memory_order_relaxed); }

/* Only the forking thread runs in the child; the other heaps stay held. */
void heap_fork_child(void) { atomic_store_explicit(&heaps_running, 1, memory_order_relaxed); }

void heap_abandon(heap_t *heap) {
  if (heap == &hak_heap_empty) return;
  atomic_fetch_sub_explicit(&heaps_running, 1, memory_order_relaxed);
  heap_trim(heap);
  hak_lock(&hak_lock_heaps);
  heap->next_abandoned = abandoned;
  abandoned = heap;
  hak_unlock(&hak_lock_heaps);
}

size_t heap_trim_abandoned(void) {
  size_t n = 0;
  hak_lock(&hak_lock_heaps);
  for (heap_t *h = abandoned; h; h = h->next_abandoned) n += heap_trim(h);
  hak_unlock(&hak_lock_heaps);
  return n;
}

static void heap_thread_exit(void *arg) {
  heap_t *heap = arg;
  if (hak_tls_heap == heap) hak_tls_heap = &hak_heap_empty;
  heap_abandon(heap);
}

HAK_API void hak_thread_done(void) {
  heap_t *heap = hak_tls_heap;
  if (heap == &hak_heap_empty) return;
  hak_tls_heap = &hak_heap_empty;
  pthread_setspecific(heap_key, NULL);
  heap_abandon(heap);
}

void heap_process_init(void) { pthread_key_create(&heap_key, heap_thread_exit); }
