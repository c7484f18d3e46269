/* hakmem internals: the types every layer shares and the functions each layer
 * offers the others. Layer order, lowest first:
 *   os.c (system calls) -> options.c, stats.c -> region.c (regions, spans, the
 *   ownership map) -> slab.c (blocks of one class) -> heap.c (thread heaps)
 *   -> large.c, huge.c (pools above 32 KiB) -> alloc.c (the API) -> override.c
 */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hakmem.h"
#include "os.h"

#ifndef HAKMEM_SECURE
#define HAKMEM_SECURE 0
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define hak_noinline __attribute__((noinline))
#define hak_inline static inline __attribute__((always_inline))
#define HAK_API __attribute__((visibility("default")))

/* Graded assertions: level 1 cheap checks, 2 internal consistency, 3 expensive. */
#ifndef HAKMEM_DEBUG
#define HAKMEM_DEBUG 0
#endif
void hak_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define hak_assert_level(lvl, e) \
  ((HAKMEM_DEBUG >= (lvl) && !(e)) ? hak_assert_fail(#e, __FILE__, __LINE__) : (void)0)
#define hak_assert(e) hak_assert_level(1, e)
#define hak_assert_internal(e) hak_assert_level(2, e)
#define hak_assert_expensive(e) hak_assert_level(3, e)

/* ---- geometry ---------------------------------------------------------- */

#define REGION_SHIFT 22 /* 4 MiB regions, aligned to their size */
#define REGION_SIZE ((size_t)1 << REGION_SHIFT)
#define UNIT_SHIFT 16 /* regions are cut into 64 KiB units; unit 0 holds the header */
#define UNIT_SIZE ((size_t)1 << UNIT_SHIFT)
#define REGION_UNITS (REGION_SIZE / UNIT_SIZE)
#define ADDRESS_BITS 47 /* user space on x86-64 and aarch64 without a hint */
#define MAP_ENTRIES ((size_t)1 << (ADDRESS_BITS - REGION_SHIFT))

#define SMALL_MAX 32768       /* Tiny (<= 1 KiB) and Mid (<= 32 KiB) classes */
#define TINY_MAX 1024
#define LARGE_MAX (REGION_SIZE / 2) /* spans of units; above this, Huge mappings */
#define REALLOC_HUGE_MIN ((size_t)256 * 1024) /* realloc growth from here on: Huge mappings */
#define NUM_CLASSES 41
#define MIN_ALIGN 16 /* what malloc guarantees for blocks of 16 bytes and more */

/* ---- blocks, slabs ----------------------------------------------------- */

typedef struct block_s {
  struct block_s *next;
} block_t;

/* Flags in the low bits of slab.owner; the heap address sits above them. A
 * set flag makes free's single owner comparison fail into the slow path. */
enum {
  SLAB_F_FULL = 1, /* not in the heap's queue: re-link on the next free */
  SLAB_F_SLOW = 2, /* every free takes the slow path (large spans, stats) */
  SLAB_F_MASK = 3,
};

enum slab_kind { SLAB_NONE = 0, SLAB_SMALL, SLAB_LARGE };

/* One descriptor per unit of a region. A slab spans one or more units; only
 * the head descriptor is used, and every descriptor points to its head (a
 * free unit's to itself), so that free finds the slab with one load.
 * Three cache lines, by who writes them: read-mostly fields every freeing
 * thread reads, the owner's hot lists, and the remote list other threads
 * push onto, so that producer and consumer threads do not fight over one
 * line. */
#define SLAB_MAX_PAGES 128 /* pages of 4 KiB in a slab of 8 units */
#define SPARSE_SEEN 0x80000000u

typedef struct slab_s {
  /* read-mostly */
  _Atomic uintptr_t owner;       /* heap address | SLAB_F_* */
  struct slab_s *head;           /* the slab's head descriptor */
  uint32_t bsize;                /* block size */
  uint64_t recip;                /* ceil(2^48 / bsize): block index without a division */
  uint64_t key;                  /* secure build: free-list encoding key */
  char *end;                     /* end of the last whole block */
  struct slab_s *next, *prev;    /* heap class queue */
  uint32_t capacity;
  uint8_t cls;
  uint8_t kind;
  uint8_t units;
  uint8_t queued;                /* in the heap's class queue */
  uint8_t fresh;                 /* span memory is known to read as zeros */
  /* the owner's */
  _Alignas(64) block_t *free;    /* the owner allocates from and frees onto here */
  uint32_t used;                 /* blocks handed out and not yet freed locally */
  uint32_t idle;                 /* empty, list kept: its units may be purged */
  char *bump;                    /* first never-used block (read by remote frees) */
  uint64_t purged[SLAB_MAX_PAGES / 64]; /* pages returned while the slab was sparse: their
                                            blocks are free but off the list */
  uint32_t sparse_seen;          /* used | SPARSE_SEEN when its pages were last looked at */
  /* other threads' */
  _Alignas(64) _Atomic uint64_t remote; /* other threads push here: see slab_free_remote */
  struct slab_s *remote_next;    /* heap's stack of slabs with remote frees */
} slab_t;

/* ---- regions ------------------------------------------------------------ */

typedef struct heap_s heap_t;

typedef struct region_s {
#if HAKMEM_SECURE
  char guard[4096];              /* PROT_NONE: nothing runs into the header from below */
#endif
  slab_t slabs[REGION_UNITS];    /* slabs[0] describes the header unit itself */
  uint64_t free_units;           /* bit i: unit i belongs to no slab */
  uint64_t dirty_units;          /* free units that may still be resident */
  heap_t *heap;                  /* owner; NULL while in the global pool */
  struct region_s *next, *prev;  /* heap's list, or the pool */
  uint64_t dirty_since_ms;       /* when dirty_units last became non-empty */
} region_t;

/* MAP_HUGE and above: a huge block's own mapping starts in the region (above
 * MAP_HUGE: aligned, see huge.c); MAP_ARENA: the region lies in an arena of
 * huge blocks. */
enum region_map_kind { MAP_NONE = 0, MAP_REGION = 1, MAP_HUGE = 2, MAP_ARENA = 255 };
extern uint8_t hak_region_map[MAP_ENTRIES];

hak_inline region_t *region_of(const void *p) {
  return (region_t *)((uintptr_t)p & ~(REGION_SIZE - 1));
}
hak_inline size_t region_map_index(const void *p) { return (uintptr_t)p >> REGION_SHIFT; }
/* Map entry i, or MAP_NONE for an index outside the map. */
hak_inline uint8_t region_map_entry(size_t i) {
  return i < MAP_ENTRIES ? __atomic_load_n(&hak_region_map[i], __ATOMIC_RELAXED) : MAP_NONE;
}
/* The map entry for p. */
hak_inline uint8_t region_map_kind(const void *p) { return region_map_entry(region_map_index(p)); }

/* Free's two tests compare a relaxed atomic in memory: one instruction on
 * x86-64, where an aligned load is atomic (the compiler would load an atomic
 * into a register first). Sanitizers see the C loads instead. */
#if defined(__x86_64__) && !HAK_UNDER_SANITIZER
#define HAK_ASM_EQ 1
#else
#define HAK_ASM_EQ 0
#endif
#define hak_asm_eq(sfx, x, v)                                                    \
  __extension__({                                                                \
    bool eq_;                                                                    \
    __asm__("cmp" sfx " %2, %1" : "=@cce"(eq_) : "m"(x), "ri"(v));               \
    eq_;                                                                         \
  })

/* Whether map entry i (region_map_index) is a region: free's first test. */
hak_inline bool region_map_is_region(size_t i) {
#if HAK_ASM_EQ
  return i < MAP_ENTRIES && hak_asm_eq("b", hak_region_map[i], MAP_REGION);
#else
  return region_map_entry(i) == MAP_REGION;
#endif
}
hak_inline slab_t *slab_in(region_t *r, const void *p) {
  return r->slabs[((uintptr_t)p >> UNIT_SHIFT) & (REGION_UNITS - 1)].head;
}
hak_inline slab_t *slab_of(const void *p) { return slab_in(region_of(p), p); }
/* slab_of(p) for p in map entry i: the region's address is i shifted back,
 * which the compiler would otherwise recompute from p (free: one
 * instruction less). The empty asm hides that i came from p. */
hak_inline slab_t *slab_of_entry(size_t i, const void *p) {
  __asm__("" : "+r"(i));
  return slab_in((region_t *)(i << REGION_SHIFT), p);
}
hak_inline char *slab_start(const slab_t *s) {
  region_t *r = region_of(s);
  return (char *)r + (size_t)(s - r->slabs) * UNIT_SIZE;
}

#include "secure.h"

region_t *region_alloc(heap_t *heap);
void region_release(region_t *r);
slab_t *region_span_alloc(region_t *r, size_t units, size_t align_units, size_t room, bool warm);
void region_span_free(region_t *r, slab_t *s);
bool region_span_grow(region_t *r, slab_t *s, size_t units);
size_t region_purge(region_t *r);
bool region_purge_due(region_t *r, uint64_t now, uint64_t delay);
void region_slab_idle(region_t *r, slab_t *s);
bool region_slab_wake(region_t *r, slab_t *s);
bool region_pool_purge_due(uint64_t now, uint64_t delay);
size_t region_pool_unmap(void);
/* Out of address space: unmaps every cache (region pool, BigCache) so that a
 * retried mapping may succeed. Returns whether anything was unmapped. */
bool hak_release_cached(void);
void region_map_set(const void *p, uint8_t kind);

/* ---- locks -------------------------------------------------------------- */

/* A spin lock for the few process-wide lists (region pool, abandoned heaps,
 * huge cache). Held briefly, never across a call that may allocate. */
typedef struct {
  _Atomic int held;
} hak_lock_t;
hak_inline void hak_lock(hak_lock_t *l) {
  while (atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
    while (atomic_load_explicit(&l->held, memory_order_relaxed)) os_yield();
}
hak_inline void hak_unlock(hak_lock_t *l) { atomic_store_explicit(&l->held, 0, memory_order_release); }
extern _Atomic size_t hak_span_bytes; /* bytes in spans handed to slabs and large blocks */
extern _Atomic size_t hak_huge_bytes;
extern _Atomic uint64_t hak_huge_reused; /* bytes of huge blocks served from cached resident pages */
extern _Atomic size_t hak_dirty_bytes; /* free units not yet purged */
extern _Atomic uint64_t hak_dirty_grew_ms; /* when units last became dirty */
size_t huge_cached_bytes(void);
/* The resident bytes the BigCache holds; young[k] gets those of its runs
 * freed less than age_ms[k] ago. */
size_t huge_cached_by_age(size_t n, const uint64_t age_ms[], size_t young[]);
extern hak_lock_t hak_lock_regions, hak_lock_heaps, hak_lock_huge, hak_lock_evict, hak_lock_purge;

/* ---- size classes ------------------------------------------------------- */

extern const uint8_t hak_tiny_class[TINY_MAX / 8 + 1];
extern const uint8_t hak_mid_class[SMALL_MAX / 128 + 1];
extern const uint32_t hak_class_size[NUM_CLASSES];
extern const uint8_t hak_class_units[NUM_CLASSES];

/* The class of a size of at most SMALL_MAX (see size_class.c). */
hak_inline unsigned size_class(size_t size) {
  if (likely(size <= TINY_MAX)) return hak_tiny_class[(size + 7) >> 3];
  return hak_mid_class[(size + 127) >> 7];
}

/* ---- slabs and heaps ----------------------------------------------------- */

typedef struct slab_queue_s {
  slab_t *head, *tail;
  slab_t *spare; /* one empty slab kept for reuse */
} slab_queue_t;

struct heap_s {
  slab_t *direct[TINY_MAX / 8 + 1]; /* malloc's view by (size + 7) / 8: active[] of the size's class */
  slab_t *mid[SMALL_MAX / 256 + 1]; /* the same by (size + 255) / 256, for Mid sizes */
  slab_t *active[NUM_CLASSES];     /* fast path view: a slab, or slab_empty */
  slab_t *cur[NUM_CLASSES];        /* the slab each class allocates from */
  _Atomic(slab_t *) remote_slabs;  /* slabs that received remote frees */
  slab_queue_t queue[NUM_CLASSES];
  region_t *regions;               /* owned regions, those with free units first */
  hak_lock_t lock;                 /* regions' spans and list: owner vs. purger */
  heap_t *next_abandoned;
  heap_t *next_all;
  uint32_t carves;                /* clock: fresh carves by this heap */
  uint32_t carve_at[NUM_CLASSES]; /* the clock at each class's last carve */
  uint16_t carve_n[NUM_CLASSES];  /* blocks of the class's next carve; 0: not yet */
  uint8_t kept;                   /* 1 + the class whose emptied current slab stays on the fast path; 0: none */
  uint32_t slow_calls;            /* slow paths taken: the sparse-slab clock */
  uint64_t sparse_at_ms;          /* when the sparse slabs were last purged */
} __attribute__((aligned(64)));

extern slab_t hak_slab_empty;
extern heap_t hak_heap_empty;
extern __thread heap_t *hak_tls_heap __attribute__((tls_model("initial-exec")));

/* Fetches p's line for writing (p may be NULL): malloc's next block, which
 * the program writes at once. A block another thread freed sits dirty in its
 * cache, and one transfer for writing costs less than a read and then an
 * upgrade. prefetchw is a NOP on x86-64 CPUs without it; without -mprfchw
 * the compiler would emit a read prefetch. */
hak_inline void prefetch_write(const void *p) {
#if defined(__x86_64__)
  __asm__("prefetchw (%0)" : : "r"(p));
#else
  __builtin_prefetch(p, 1);
#endif
}

hak_inline heap_t *heap_get(void) { return hak_tls_heap; }
hak_inline uintptr_t slab_owner(const slab_t *s) {
  return atomic_load_explicit(&s->owner, memory_order_relaxed);
}
/* Whether heap owns s with no flag set: free's owner test. */
hak_inline bool slab_owned_by(const slab_t *s, const heap_t *heap) {
#if HAK_ASM_EQ
  return hak_asm_eq("q", s->owner, (uintptr_t)heap);
#else
  return slab_owner(s) == (uintptr_t)heap;
#endif
}
hak_inline heap_t *slab_heap(const slab_t *s) {
  return (heap_t *)(slab_owner(s) & ~(uintptr_t)SLAB_F_MASK);
}

/* Whether p is the start of a block this slab has handed out. */
hak_inline bool slab_is_block(const slab_t *s, const void *p) {
  if (s->kind == SLAB_NONE || slab_owner(s) == 0) return false;
  char *start = slab_start(s);
  if ((const char *)p < start) return false;
  size_t off = (size_t)((const char *)p - start);
  if (s->kind == SLAB_LARGE) return off == 0;
  /* off < 512 KiB and bsize < 64 KiB keep the reciprocal exact */
  uint64_t index = (off * s->recip) >> 48;
  return index * s->bsize == off && (const char *)p < __atomic_load_n(&s->bump, __ATOMIC_RELAXED);
}

/* slab.c */
void slab_init(slab_t *s, heap_t *heap, unsigned cls, size_t units);
/* Fresh blocks per carve, learned per heap and class (heap.c): a cold class
 * carves about a page (at least one block), a hot one up to four pages or 32
 * blocks, whichever is more. */
#define CARVE_BYTES 4096
#define CARVE_HOT_BYTES 16384
#define CARVE_MIN_HOT 32
#define CARVE_MAX_BLOCKS (CARVE_HOT_BYTES / 8)
void slab_carve(slab_t *s, size_t n);
void slab_reset(slab_t *s);
size_t slab_purge_sparse(slab_t *s);
void slab_unpurge(slab_t *s);
hak_inline bool slab_has_purged(const slab_t *s) { return (s->purged[0] | s->purged[1]) != 0; }
void slab_free_remote(slab_t *s, block_t *b);
size_t slab_collect_remote(slab_t *s);

/* heap.c */
heap_t *heap_init_thread(void);
void *heap_alloc_small_slow(heap_t *heap, unsigned cls);
void heap_free_local_slow(heap_t *heap, slab_t *s, block_t *b);
void heap_slab_empty(heap_t *heap, slab_t *s);
void heap_collect_remote(heap_t *heap);
slab_t *heap_span_alloc(heap_t *heap, size_t units, size_t align_units, size_t room);
size_t heap_trim(heap_t *heap);
void heap_abandon(heap_t *heap);
/* Threads that hold a heap now (a heap is abandoned at its thread's exit). */
unsigned heap_threads_running(void);
size_t heap_trim_abandoned(void);
bool heap_span_grow(heap_t *heap, slab_t *s, size_t units);
bool heaps_purge_due(uint64_t now, uint64_t delay);
size_t heap_purge_sparse(heap_t *heap);
void heap_slow_tick(heap_t *heap);
void heap_process_init(void);
void heap_fork_child(void);

/* large.c */
void *large_alloc(heap_t *heap, size_t size, size_t align, bool zero);
void *large_alloc_growing(heap_t *heap, size_t size);
void large_free(heap_t *heap, slab_t *s);
bool large_resize_in_place(heap_t *heap, slab_t *s, size_t size);

/* huge.c */
void *huge_alloc(size_t size, size_t align, bool zero, bool growing);
void huge_free(void *p);
size_t huge_usable_size(const void *p);
void *huge_realloc(void *p, size_t size);
/* Purges the BigCache; with unmap, also unmaps arenas that hold no block. */
size_t huge_trim(bool unmap);
bool huge_cache_evict_aged(void);

/* purge.c */
void purge_notice_dirty(void);
void purge_fork_child(void);

/* init.c */
void hak_process_init(void);
void hak_report_bad_pointer(const char *what, const void *p);

#endif
