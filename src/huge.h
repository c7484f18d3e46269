/* Huge blocks: above LARGE_MAX. Layer 4.
 *
 * Most are runs of 256 KiB units in arenas: reservations of address space
 * that start at 16 MiB and double, up to 1 GiB, as the program's huge
 * blocks need them. A freed block's units keep their pages (the BigCache)
 * and merge with free neighbours, so that a later block of any size up to
 * the run they form is served from pages already faulted in, without a
 * system call; they are purged once older than HAKMEM_BIGCACHE_AGE_MS,
 * oldest first beyond HAKMEM_BIGCACHE_MB, and as many as fresh pages that
 * huge blocks take while none was placed on cached ones within the age.
 * The arenas fall in shards, each with its own lock and run heap (run.h),
 * which finds free runs whatever the number of arenas and runs: a thread
 * places its blocks in its own shard, so threads do not queue on one lock.
 * A thread holds the arena block it freed last for its next huge malloc of
 * about the size, which takes it back without a lock.
 *
 * Blocks beyond an arena's largest, or aligned beyond a region, have a
 * mapping of their own, unmapped when freed. */
#ifndef HAKMEM_HUGE_H
#define HAKMEM_HUGE_H

#include "heap.h"
#include "types.h"

/* The arenas' shards: arena k (map kind MAP_ARENA + k) is shard k's modulo
 * this. */
#define HUGE_SHARDS 4

/* Sets up the shards' run heaps (process start). */
void huge_init(void);
/* A block of size bytes aligned to align; zeroed with zero. NULL when the OS
 * refuses. */
void *huge_alloc(size_t size, size_t align, bool zero);
/* The block the calling thread holds (its last huge free) for such a
 * malloc, reshaped in place where it must be; NULL where none is held or it
 * cannot serve (it is freed then). */
void *huge_alloc_held(size_t size, size_t align, bool zero);
/* A block that realloc grows past REALLOC_HUGE_MIN: a mapping of its own that
 * reserves room to grow in place (later growth moves its pages, never copies
 * them). NULL when the OS refuses. */
void *huge_alloc_growing(size_t size);
/* Frees the block heap holds for its thread's next huge malloc (the thread
 * exits). */
void huge_held_release(heap_t *heap);
/* Frees huge block p, whose map kind (map_kind) is kind; false when p is
 * not one. */
bool huge_free(void *p, uint8_t kind);
/* The usable size of huge block p, whose map kind (map_kind) is kind; 0
 * when p is not one. */
size_t huge_usable_size(const void *p, uint8_t kind);
/* Resizes in place, or moves the pages (no copy) to a new mapping. Returns
 * the block's address, or NULL when neither works (p is then unchanged). */
void *huge_realloc(void *p, size_t size);

/* Purges cached units due by age or beyond the size bound (force: all of
 * them), then unmaps the arenas that hold no block where their shard
 * caches no unit (unmap: whatever it caches). Returns the bytes given
 * back; *pending: whether cached units remain. */
size_t huge_purge(uint64_t now, bool force, bool unmap, bool *pending);
/* Resident bytes of free units (the BigCache). */
size_t huge_cached_bytes(void);
/* Purges the BigCache's oldest runs until it holds bytes fewer, or none. */
size_t huge_cache_shrink(size_t bytes);
/* The same split by age: young[k] gets those freed less than age_ms[k] ago. */
void huge_cached_by_age(uint64_t now, size_t n, const uint64_t age_ms[], size_t young[]);
/* Resident bytes of huge blocks (live), of the BigCache (cached) and of the
 * arenas' metadata; whether [lo, hi) overlaps an arena's metadata or a
 * mapping of a block's own (statistics). */
void huge_resident(size_t *live, size_t *cached, size_t *meta);
bool huge_meta_overlaps(uintptr_t lo, uintptr_t hi);
/* Bytes of huge blocks live now. */
size_t huge_live_bytes(void);
/* Bytes of huge blocks placed on the BigCache's pages so far. */
extern _Atomic uint64_t huge_reused_bytes;
/* Takes (lock) or releases every lock of this layer, around fork. */
void huge_fork_lock(bool lock);

#endif
