/* Thread heaps. Each thread allocates from its own heap, reached through
 * initial-exec TLS; a thread that has not allocated yet points at a static
 * empty heap whose every class reads as "empty, refill me", so the fast path
 * needs no "initialised?" test. A heap owns regions, their free pages in one
 * run heap that its slabs and its Large blocks are cut from; its slabs sit
 * in one queue per class. Heaps outlive their threads: at thread exit a
 * heap is abandoned, warm, and the next new thread adopts it whole. Layer 3. */
#ifndef HAKMEM_HEAP_H
#define HAKMEM_HEAP_H

#include "run.h"
#include "size_class.h"
#include "slab.h"
#include "types.h"

typedef struct heap_s heap_t;

/* Fresh blocks per carve, learned per class: a class carved again within
 * CARVE_HOT_GAP of the heap's carves doubles its batch, one left alone longer
 * halves it once per CARVE_COLD_GAP carves since. A cold class carves about a
 * page (at least one block), a hot one up to four pages or 32 blocks,
 * whichever is more. The clock counts carves, not time, so the batches are
 * deterministic. */
#define CARVE_BYTES 4096
#define CARVE_HOT_BYTES 16384
#define CARVE_MIN_HOT 32
#define CARVE_HOT_GAP 8
#define CARVE_COLD_GAP 64


typedef struct {
  slab_t *head, *tail;
  slab_t *spare; /* one empty slab kept for reuse */
} slab_queue_t;

/* The Large blocks of the classes up to 256 KiB that the owner freed last,
 * a list per class through the blocks themselves that only the owner
 * touches, without the lock: still allocated runs to every other thread
 * (large.c). Each list has a tcache's shape (heap_free_local): a free bit in
 * every link, its end at its head's own address, and used counting the room
 * left below cap, so that malloc's fast path takes from it as from a small
 * class's, through the view. A list's cap follows its demand, as the
 * tcache's does; a list is open once its head is set (never: NULL). */
#define LARGE_HOT_CLASSES 56 /* a page count each, 36 KiB to 256 KiB */
#define LARGE_HOT_DEPTH 256
#define LARGE_HOT_DEPTH_MIN 2
typedef struct {
  slab_t list[LARGE_HOT_CLASSES];
  uint16_t cap[LARGE_HOT_CLASSES]; /* blocks and room */
  run_demand_t demand[LARGE_HOT_CLASSES]; /* each list's cap, from LARGE_HOT_DEPTH_MIN */
  uint64_t shown; /* bit c: list c is in the view (heap_show_large) */
  uint64_t open;  /* bit c: list c is open (large.c's hot_open): the lists a count or a drain reads */
  uint32_t full_skip; /* frees to turn away before the bound is counted again (large.c) */
  /* blocks put on the lists since the learner counted them, less those that
   * left other than by malloc's fast path (taken on a slow path, which
   * counts its own, sent to the cache, lost): below 0, carried */
  int32_t pushed;
  int64_t pushed_bytes; /* their bytes, up to the last count */
  /* in all lists, as the owner last counted them (large.c's
   * hot_sync, at least at each of its ticks: malloc's fast path takes
   * blocks without counting); others read it with __atomic_load_n */
  size_t bytes;
  size_t unsynced; /* bytes pushed since that count */
  uint64_t drained_ms; /* when the tick last sent them back, or found them empty */
} large_hot_t;
_Static_assert(LARGE_HOT_CLASSES <= 64, "shown has a bit per list");

_Static_assert(NUM_CLASSES <= 64, "gathered_classes has a bit per class");

struct heap_s {
  slab_inbox_t inbox;               /* first: slabs with remote frees (slab.h) */
  int64_t sample_left;              /* heap profiler, default library: bytes before the next sample */
  slab_t *active[NUM_CLASSES];      /* the fast path's view: a slab, a sampling proxy, or &empty */
  slab_t *cur[NUM_CLASSES];         /* the slab each class allocates from; it holds one extra use
                                     * (other threads' frees read it: heap_free_remote) */
  slab_queue_t queue[NUM_CLASSES];
  /* under lock: what other threads may touch (purging, large frees) */
  hak_lock_t lock;
  run_heap_t pages;                 /* free pages of its regions: slabs and Large blocks */
  size_t large_live;                /* bytes of its live Large blocks (large.c) */
  size_t large_peak;                /* the most large_live held since its thread took it */
  size_t span_bytes;                /* bytes of its slabs' spans */
  size_t span_peak;                 /* the most span_bytes held since its thread took it */
  slab_t *idle[NUM_CLASSES];        /* the spare of each class while idle */
  /* the owner's clocks */
  uint32_t carves;                  /* fresh carves by this heap */
  uint32_t carve_at[NUM_CLASSES];   /* the clock at each class's last carve */
  uint16_t carve_n[NUM_CLASSES];    /* blocks of the class's next carve; 0: not yet */
  uint64_t grown_classes;           /* bit cls: hot since it ran through a slab's fresh blocks */
  uint64_t filled_classes;          /* bit cls: ran through a slab's fresh blocks, hot or not */
  uint64_t density_known;           /* bit cls: a fresh slab of it was sampled (heap_learn_density) */
  uint64_t dense_classes;           /* bit cls: the last sample found its pages nearly all resident */
  uint64_t sparse_at_ms;            /* when the sparse slabs were last purged */
  _Atomic uint64_t active_ms;       /* when the owner last looked at the clock (remote wipes read it) */
  _Atomic uint32_t collects;        /* times the owner took its inbox (remote wipes read it) */
  _Atomic uint64_t unclaimed;       /* bytes of slabs remote frees emptied since it last took it */
  /* its thread's frees into other heaps' slabs, not yet published: one
   * batch per class, since a consumer's frees mix the classes */
  slab_batch_t gathered[NUM_CLASSES];
  uint64_t gathered_classes;        /* bit cls: gathered[cls] holds blocks */
  uint64_t gathered_ms;             /* when the tick last looked at them */
  uint8_t gather_skip[NUM_CLASSES]; /* frees of the class still to publish at once (heap.c) */
  heap_t *next_abandoned;
  uint64_t abandoned_ms; /* when, while its tcaches are still to drain (under heaps_lock) */
  heap_t *next_all;
  uint32_t serial; /* heaps made before it (a pool layer picks by it: huge.c's shards) */
  slab_t *proxy; /* heap profiler: a proxy per class (NULL when not profiling) */
  /* blocks of other heaps' slabs that this thread freed, kept for its own
   * mallocs: a list per class that the fast path takes from first (heap.c);
   * NULL until the first such free, and while sampling or counting */
  slab_t *foreign;
  uint32_t foreign_frees; /* frees onto them: one in FOREIGN_HOME_EVERY goes home instead */
  uint16_t foreign_skip[NUM_CLASSES]; /* remote frees of the class that start a batch still to send home at once (heap.c) */
  uint16_t foreign_more[NUM_CLASSES]; /* bytes its list keeps past FOREIGN_TRY_BYTES: 0 until the thread took from it */
  /* the view of a class with no block at hand: its own, so that the fast
   * path's test (which writes the word it reads) stays in this heap */
  slab_t empty;
  uint64_t tc_refilled; /* bit cls: its tcache was refilled since it last filled up */
  uint16_t tc_batch[NUM_CLASSES]; /* blocks the class's next refill takes (heap.c) */
  uint16_t tc_run_cap[NUM_CLASSES];   /* a tcache's capacity when its run of frees began; 0: in none (heap.c) */
  uint16_t tc_run_frees[NUM_CLASSES]; /* and about how many frees the run has sent home */
  uint32_t carved;      /* blocks heap_find_slab carved onto the list it found, in address order (0: none) */
  /* From here on heap_new leaves the fields as fresh memory (zero), so
   * that only the classes a program frees into are ever touched. First
   * the owner's tcache, on the pages the fields above end on: a list per
   * class of the blocks it freed last, whichever slab they lie in, which
   * its mallocs take first (heap.c); zero until the class's first slab. */
  slab_t tc[NUM_CLASSES];
  large_hot_t lhot;   /* the owner's, without the lock (large.c) */
  /* the huge block the thread freed last, held for its next huge malloc:
   * its address | its units, 0 for none; any thread's purge round may take
   * it, so every access is atomic (huge.c) */
  _Atomic uintptr_t huge_held;
  uintptr_t huge_seen;   /* huge_held as a purge round last saw it (relaxed atomics) */
  uint64_t huge_seen_ms; /* and when */
  int64_t huge_live;     /* bytes of huge blocks its threads allocated, less those they freed (huge.c) */
  run_cache_t lcache; /* under lock: Large blocks freed last, by class (large.c) */
  uint8_t cold_runs[NUM_CLASSES]; /* times the class asked for a page run (heap_take_cold) */
} __attribute__((aligned(64)));

/* "No slab": the current slab of a class that has none, and the views of
 * hak_heap_empty, the heap of a thread that has not allocated yet. */
extern slab_t hak_slab_empty;
/* Bytes of slabs made on clean units (never touched, or purged), ever: how
 * far the heaps' small blocks have grown resident memory. */
extern _Atomic size_t heap_fresh_slab_bytes;
extern heap_t hak_heap_empty;
extern __thread heap_t *hak_tls_heap __attribute__((tls_model("initial-exec")));

/* malloc's view of the thread's heap: active[] of each size's class, by
 * (size + 7) / 8 up to DIRECT_MAX and by (size + 255) / 256 beyond, then
 * the Large lists by 4 KiB pages, so that malloc needs no class lookup. It
 * lives in TLS, not in the heap, so that malloc reads it at a fixed offset
 * from the thread pointer without loading the heap's address first. Only
 * the thread running the heap writes it (heap_set_active,
 * heap_show_large); a thread with no heap sees every entry empty. */
#define VIEW_LARGE_MAX ((size_t)256 * 1024)
typedef struct {
  slab_t *direct[DIRECT_MAX / 8 + 1];
  slab_t *mid[SMALL_MAX / 256 + 1];
  slab_t *large[VIEW_LARGE_MAX / 4096 + 1]; /* by 4 KiB pages: the Large lists (heap_show_large) */
  /* the profiling library's count (alloc.c): bytes before the next sample,
   * beside the view so that malloc reaches both from one address */
  int64_t sample_left;
  bool sampling; /* the count has started */
} heap_view_t;
extern __thread heap_view_t hak_tls_view __attribute__((tls_model("initial-exec")));
/* The Large list of a malloc of n 4 KiB pages, n up to VIEW_LARGE_MAX / 4096
 * (LARGE_HOT_CLASSES: none, and for every n where pages are not 4 KiB):
 * large_init fills it, the view's entries follow it. */
extern uint8_t heap_large_view_class[VIEW_LARGE_MAX / 4096 + 1];
/* Indexes the table by list, once large_init has filled it. */
void heap_large_view_index(void);
/* Whether the view may show Large lists: pages of 4 KiB, and no count that
 * every malloc must make (statistics, the profiler's samples). large_init
 * sets it, the profiler clears it. */
extern bool heap_large_view_ok;
/* Shows heap's Large list c (open) in malloc's view, or hides it; heap is
 * the calling thread's. */
void heap_show_large(heap_t *heap, unsigned c, bool show);

hak_inline heap_t *heap_get(void) { return hak_tls_heap; }

/* The calling thread's heap, made or adopted (NULL when out of memory). A
 * thread gets one at its first malloc, or once it has freed a few of other
 * heaps' blocks, to gather such frees in (heap.c). */
heap_t *heap_init_thread(void);
/* A block of class cls after the fast path found its slab empty; NULL when
 * out of memory. */
void *heap_alloc_small_slow(heap_t *heap, unsigned cls);

/* Whether a malloc of class cls, which the fast path missed, takes a page
 * run of the heap's free pages instead of a slab (the caller then places
 * one): a class of two pages or more that the heap holds no slab of and
 * that asked fewer than COLD_RUN_BLOCKS times since its thread took the
 * heap (a run found or not: without resident pages, a slab). Such a
 * slab spans 256 KiB or more, and a thread that allocates a few of its
 * blocks and exits leaves it to be emptied, purged and faulted in again by
 * the next; page runs of any length share the heap's free pages. */
#define COLD_RUN_BLOCKS 4
hak_inline bool heap_take_cold(heap_t *heap, unsigned cls) {
  if (hak_class_size[cls] < 2 * os_page_size() || heap->cold_runs[cls] >= COLD_RUN_BLOCKS ||
      heap->cur[cls] != &hak_slab_empty || heap->queue[cls].head != NULL)
    return false;
  heap->cold_runs[cls]++;
  return true;
}
/* Sampling (the heap profiler) in the default library, whose malloc has no
 * count of its own. While it is on, the fast path of a class allocates from
 * a proxy slab whose free list is cut from its slab's: only as many blocks
 * as fit in sample_left. It finds the proxy empty where the next sample
 * falls, with no test of its own. heap_sampling_start turns it
 * on for a heap (false when out of memory); heap_sample_settle gives the
 * blocks the fast path did not take back to their slab, their bytes back
 * to sample_left, before the slow path counts an allocation of cls. */
bool heap_sampling_start(heap_t *heap, int64_t first);
void heap_sample_settle(heap_t *heap, unsigned cls);
/* Block b of slab s goes back onto s's own list (the tcache's overflow, and
 * the secure build's frees into a slab whose owner word carries flags). */
void heap_free_local_slow(heap_t *heap, slab_t *s, block_t *b);
/* s, set aside full, had a block freed by its owner: queued again, and
 * the owner's next frees into it take the fast path. */
void heap_slab_unfull(heap_t *heap, slab_t *s);
/* The tcache of a class holds capacity - used blocks, linked as a slab's
 * list. The owner's frees push onto it, so that the next malloc of the class
 * hands out the block freed last, still in the cache, whichever of its slabs
 * holds it; its blocks count as used in their slabs. A full one doubles
 * (after a refill) or sends the blocks freed just before the last to their
 * slabs; an empty one takes a batch from the current slab. A slab names the
 * list its frees go onto (s->tc): its class's tcache, or, once a long run
 * of frees (a teardown) has reached it, its own, until it is next made
 * current (heap.c). The secure build, whose links are keyed per slab, has
 * no tcache: its frees go onto the slab's own list. heap_tc_full: c, the
 * list the free of a block of s went onto, reached its limit (c is s's
 * head: the slab emptied). */
void heap_tc_full(heap_t *heap, slab_t *c, slab_t *s);
/* Pushes b onto list c (a tcache or a slab); whether it is full now. On
 * x86-64 its three accesses, each on the word the last free wrote, take c
 * as a base register alone: faster than with base and index
 * (docs/experiments.md, stop 60). */
#if HAK_ASM_EQ
#define tc_push(c, b)                                                                                  \
  __extension__({                                                                                     \
    uintptr_t link_ = BLOCK_FREE_BIT;                                                                 \
    bool full_;                                                                                       \
    __asm__("orq %c[f](%[c]), %[l]\n\tmovq %[l], (%[b])\n\t"                                          \
            "movq %[b], %c[f](%[c])\n\tsubl $1, %c[u](%[c])"                                            \
            : [l] "+&r"(link_), "=@ccz"(full_)                                                        \
            : [c] "r"(c), [b] "r"(b), [f] "i"(offsetof(slab_t, free)), [u] "i"(offsetof(slab_t, used)) \
            : "memory");                                                                              \
    full_;                                                                                            \
  })
#else
#define tc_push(c, b)                                           \
  __extension__({                                               \
    slab_t *c_ = (c);                                           \
    block_link(c_, (b), c_->free);                              \
    c_->free = (b);                                             \
    --c_->used == 0;                                            \
  })
#endif

/* The owner frees b, a block of its slab s. */
hak_inline void heap_free_local(heap_t *heap, slab_t *s, block_t *b) {
  if (HAKMEM_SECURE) {
    block_link(s, b, s->free);
    s->free = b;
    if (unlikely(--s->used == 0)) heap_tc_full(heap, s, s);
  } else {
    slab_t *c = s->tc;
    if (unlikely(tc_push(c, b))) heap_tc_full(heap, c, s);
  }
}
/* Slab s's last block came back (its used count fell to 0). */
void heap_slab_empty(heap_t *heap, slab_t *s);
/* The calling thread, whose heap is heap, frees b, a block of slab s that
 * another heap owns. It keeps the block on its class's foreign list, which
 * its mallocs of the class take from first: the block is in this thread's
 * cache now, and would reach its owner's only through a miss. One such free
 * in FOREIGN_HOME_EVERY goes home instead, so that blocks a thread took from
 * its list and frees itself do not stay foreign, each free a slow one, for
 * good. A block of its owner's current slab goes home too: the owner
 * writes its neighbours now, and this thread's data in it would share
 * their cache lines. A list past FOREIGN_KEEP_BYTES goes home whole, as
 * every list does at thread exit and on trim. Going home, frees of a class
 * into one word of a slab's remote bits are gathered and published
 * together: when the class's next goes to another word, on the heap's tick
 * after one with no new free of the class, at thread exit and on trim. */
#define FOREIGN_KEEP_BYTES 32768
#define FOREIGN_HOME_EVERY 32
/* Until the thread takes a block of the class off its list, the list keeps
 * FOREIGN_TRY_BYTES, not FOREIGN_KEEP_BYTES: a consumer's list of each
 * class it frees holds its owners' memory up for no malloc of its own. */
#define FOREIGN_TRY_BYTES 8192u
/* A list is shown to the fast path (made the class's view) once it keeps
 * FOREIGN_SHOW blocks or FOREIGN_SHOW_BYTES, not at each block: a list that
 * the next malloc empties would cost two view changes a block. */
#define FOREIGN_SHOW 8
#define FOREIGN_SHOW_BYTES 4096
void heap_free_remote_slow(heap_t *heap, slab_t *s, block_t *b);
/* cls's foreign list passed its bound (it goes home), or is worth
 * showing to the fast path and is not shown yet. */
void heap_foreign_full(heap_t *heap, unsigned cls);
hak_inline void heap_free_remote(heap_t *heap, slab_t *s, block_t *b) {
  unsigned cls = s->cls;
  if (likely(heap->foreign != NULL && heap->foreign_skip[cls] == 0 &&
             __atomic_load_n(&((heap_t *)slab_heap(s))->cur[cls], __ATOMIC_RELAXED) != s &&
             ++heap->foreign_frees % FOREIGN_HOME_EVERY)) {
    slab_t *fc = &heap->foreign[cls]; /* capacity - used blocks (heap.c) */
    block_link(fc, b, fc->free);
    fc->free = b;
    uint32_t n = ++fc->capacity - fc->used, bytes = n * fc->bsize;
    if (unlikely(bytes > FOREIGN_TRY_BYTES + heap->foreign_more[cls] ||
                 (heap->active[cls] != fc && (n >= FOREIGN_SHOW || bytes >= FOREIGN_SHOW_BYTES))))
      heap_foreign_full(heap, cls);
    return;
  }
  /* a class gathering (its bit in gathered_classes set) gathers in slab_batch_add;
   * hak_heap_empty never gathers */
  if (likely(slab_batch_add(&heap->gathered[cls], s, b))) return;
  heap_free_remote_slow(heap, s, b);
}
/* The owner's periodic work on its slow paths: remote frees, sparse slabs,
 * emptied current slabs. Cheap when nothing is due. */
void heap_tick(heap_t *heap, uint64_t now);

/* Purges what heap h holds free and dirty for delay ms or more (free units,
 * free Large pages, idle slabs); with delay 0, all of it. Any thread; skips a
 * heap whose lock is busy unless wait. Returns the bytes purged; *pending:
 * whether dirty memory remains. */
size_t heap_purge(heap_t *h, uint64_t now, uint64_t delay, bool wait, bool *pending);
/* Gives back what the calling thread's heap holds and does not use. */
size_t heap_trim(heap_t *heap);
/* Resident bytes of the heaps' own structures, and whether [lo, hi)
 * overlaps them (statistics). */
size_t heap_meta_resident(void);
bool heap_meta_overlaps(uintptr_t lo, uintptr_t hi);
/* The dirty free bytes of every heap's pages (slab units, Large pages), and
 * in *grew_ms (when not NULL) when they last grew. */
size_t heap_dirty_bytes(uint64_t *grew_ms);
/* Adds the resident bytes of heap h's regions to *u. */
void heap_usage(heap_t *h, region_usage_t *u);
/* The first of every heap made (then h->next_all). */
heap_t *heap_all(void);
/* Threads that hold a heap now. */
unsigned heap_threads_running(void);
/* Abandoned heaps' remote frees collected and empty slabs released (their
 * pages then purged as every heap's are). */
void heap_trim_abandoned(void);
/* The same for those abandoned a purge delay ago or more, once each: their
 * tcaches, which an abandoned heap keeps for the thread that adopts it. */
void heap_tick_abandoned(uint64_t now, uint64_t delay);

/* A free run of n pages (align: run_alloc) for a Large block of heap
 * self, taken from another heap, an abandoned one's first: a run of cache
 * class cls (-1: none) that its cache keeps, or its dirty free pages. A
 * thread takes the pages that threads which exited or wait left, instead
 * of mapping more, as a shared page heap would give them. resident: self
 * holds a free run of clean pages; only an abandoned heap's resident pages
 * do better (a running heap keeps its own for its next blocks). Returns
 * that heap, its lock held (the block is its: its free goes there), or
 * NULL. */
heap_t *heap_lend_run(const heap_t *self, uint32_t n, uint32_t align, int cls, bool resident, run_t *r);

/* Hands the calling thread's heap back now, as thread exit does. */
void heap_thread_done(void);
/* Whether the calling thread's heap went back at its exit: it runs the last
 * of its exit code (heap_init_thread's heap is for one call then). */
bool heap_thread_exited(void);
/* Set at start-up (init.c): returns the blocks the pools kept for the
 * thread's reuse (large.h, huge.h), before its heap is abandoned. */
extern void (*heap_abandon_hook)(heap_t *heap);

void heap_process_init(void);
/* Takes (or releases) every heap's lock around fork; in the child,
 * heap_fork_child releases them. */
void heap_fork_lock(bool lock);
void heap_fork_child(void);

/* The heap's lock taken to change its run heaps (Large pool). */
hak_inline void heap_lock(heap_t *h) { hak_lock(&h->lock); }
hak_inline void heap_unlock(heap_t *h) { hak_unlock(&h->lock); }

#endif
