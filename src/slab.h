/* Slabs: a span of units holding blocks of one size class, with two free
 * lists: `free`, which the owning heap allocates from and frees onto (last
 * in, first out: the block freed last is the one still in the cache), and
 * a bitmap other threads set a block's bit in (counted in `remote`). Fresh blocks are carved
 * from the bump range a batch at a time, so untouched pages stay untouched.
 * Layer 2. */
#ifndef HAKMEM_SLAB_H
#define HAKMEM_SLAB_H

#include "harden.h"
#include "region.h"
#include "types.h"

/* Blocks carved at most at once. */
#define CARVE_MAX_BLOCKS 2048

/* The stack of a heap's slabs that received remote frees. It is the first
 * field of the heap (heap.h), so that a remote free reaches it from the
 * owner word alone. */
typedef struct {
  _Atomic(slab_t *) top;
} slab_inbox_t;

hak_inline uintptr_t slab_owner(const slab_t *s) { return atomic_load_explicit(&s->owner, memory_order_relaxed); }
/* Whether heap h owns s with no flag set: free's owner test. */
hak_inline bool slab_owned_by(const slab_t *s, const void *h) {
#if HAK_ASM_EQ
  return hak_asm_eq("q", s->owner, (uintptr_t)h);
#else
  return slab_owner(s) == (uintptr_t)h;
#endif
}
/* The owning heap (the owner word without its flags). */
hak_inline void *slab_heap(const slab_t *s) { return (void *)(slab_owner(s) & ~(uintptr_t)SLAB_F_MASK); }

/* Whether p lies in the blocks this slab has carved (handed out or free). */
hak_inline bool slab_carved(const slab_t *s, const void *p) {
  return s->kind == SLAB_SMALL && slab_owner(s) != 0 && (const char *)p >= slab_first(s) &&
         (const char *)p < __atomic_load_n(&s->bump, __ATOMIC_RELAXED);
}
/* Whether p is the start of a block this slab has handed out. */
hak_inline bool slab_is_block(const slab_t *s, const void *p) { return slab_carved(s, p) && slab_block_at(s, p); }
/* Whether p points inside one of its blocks, past the block's start. */
hak_inline bool slab_is_inside_block(const slab_t *s, const void *p) { return slab_carved(s, p) && !slab_block_at(s, p); }

/* Pops b, the head of s->free, which block_take has taken. */
hak_inline block_t *slab_pop_taken(slab_t *s, block_t *b) {
  s->free = block_next_taken(s, b);
  s->used++;
  harden_on_alloc(s, b);
  return b;
}

/* Copies what free's fast path reads of slab s (owner, divc, tc) to
 * the descriptors of its other units; with a new owner word, that alone.
 * Only the owner writes them and only its fast path acts on them: another
 * thread's free finds an owner not its own there, as at the head. */
hak_inline void slab_mirror_owner(slab_t *s, uintptr_t owner) {
  for (unsigned i = 1; i < s->units; i++) atomic_store_explicit(&s[i].owner, owner, memory_order_relaxed);
}
hak_inline void slab_mirror(slab_t *s) {
  for (unsigned i = 1; i < s->units; i++) {
    s[i].divc = s->divc;
    s[i].tc = s->tc;
  }
  slab_mirror_owner(s, slab_owner(s));
}
/* Points the frees of slab s's blocks (its owner's fast path) at list c:
 * its class's tcache, or s itself. */
hak_inline void slab_point(slab_t *s, slab_t *c) {
  for (unsigned i = 0; i < s->units; i++) s[i].tc = c;
}
/* Makes span s a slab of class cls owned by `owner` (a heap; flags:
 * SLAB_F_*); fresh: its pages were never touched (or were purged). */
void slab_init(slab_t *s, void *owner, uintptr_t flags, unsigned cls, bool fresh);
/* Makes s->free n fresh blocks (1 <= n <= CARVE_MAX_BLOCKS) of those left
 * (the caller checks that some are), in address order but in the secure
 * build; returns how many (fewer where the slab ends). The pages of a fresh
 * slab's new blocks are faulted in at once, in one call, where they span
 * populate_pages whole pages or more (0: never), with `ahead` bytes of the
 * slab past them. */
size_t slab_carve(slab_t *s, size_t n, unsigned populate_pages, size_t ahead);
/* Forgets every block: the slab reads as freshly made (its pages may have
 * been returned). */
void slab_reset(slab_t *s);
/* Returns the pages of a sparse slab that hold no live block; the blocks
 * on them leave the free list until slab_unpurge. Only once the slab was
 * found sparse at the last call too, with as many blocks in use, unless
 * at_once (a trim). Returns the bytes purged. */
size_t slab_purge_sparse(slab_t *s, bool at_once);
void slab_unpurge(slab_t *s);
hak_inline bool slab_has_sparse(const slab_t *s) { return (s->sparse[0] | s->sparse[1]) != 0; }

/* Remote frees a thread gathers before it publishes them: blocks of one
 * word of one slab's remote bits. A consumer frees a producer's blocks in
 * about the order they were handed out, so runs of them share a word and
 * cost one atomic update of the count and one of the bits a run. Only the
 * gathering thread touches it; its blocks still count as used, so a batch
 * holds at most GATHER_BYTES: a word of big blocks would keep its owner
 * from them while it takes new slabs. */
#define GATHER_BYTES 65536
typedef struct {
  slab_t *slab; /* NULL: none gathered */
  uint64_t bits;
  uint32_t word;
  uint16_t n;    /* bits set */
  uint16_t seen; /* n at the gathering thread's last look (heap_tick) */
} slab_batch_t;

/* The index of block b in its slab: (b - first) / bsize by divc's multiply,
 * exact for offsets under 2^32. */
hak_inline uint32_t slab_block_index(const slab_t *s, const block_t *b) {
  return (uint32_t)(((unsigned __int128)(uint64_t)((const char *)b - slab_first(s)) * s->divc) >> 64);
}
/* Whether q holds GATHER_BYTES of s's blocks: it publishes before it takes more. */
hak_inline bool slab_batch_full(const slab_batch_t *q, const slab_t *s) {
  return (uint32_t)q->n * s->bsize >= GATHER_BYTES;
}

/* Block i of s: the inverse of slab_block_index. */
hak_inline block_t *slab_block_by_index(const slab_t *s, size_t i) { return (block_t *)(slab_first(s) + i * s->bsize); }

/* Adds b, a block of s, to q: slab_batch_add only where q gathers b's word,
 * b is not in it yet and q has room (false, nothing done, otherwise),
 * slab_batch_start in any case but one: false when q holds blocks of another
 * word, or is full, to be published first. A second free of a block already
 * gathered is reported and ignored. */
hak_inline bool slab_batch_add(slab_batch_t *q, slab_t *s, block_t *b) {
  if (q->slab != s) return false;
  uint32_t i = slab_block_index(s, b);
  uint64_t bit = UINT64_C(1) << (i % 64);
  if (q->word != i / 64 || (q->bits & bit) || slab_batch_full(q, s)) return false;
  q->bits |= bit;
  q->n++;
  return true;
}
bool slab_batch_start(slab_batch_t *q, slab_t *s, block_t *b);
/* A publish that brought back every block of a slab its owner had set aside
 * full (and so touches only through its inbox): the remote word after it,
 * and what the publisher read of the slab before its blocks went (after, the
 * owner may take the slab back and release it). word 0: not such a publish. */
typedef struct {
  uint64_t word;
  void *heap;        /* the owner then */
  uint32_t full_gen; /* its collect count when it set the slab aside */
  uint32_t units;
} slab_full_t;
/* Publishes q's blocks as freed and empties it (a double free is reported
 * and ignored). */
slab_full_t slab_batch_publish(slab_batch_t *q);
/* Another thread frees b (a block of s) at once: a batch of one. */
slab_full_t slab_free_remote(slab_t *s, block_t *b);
/* Marks such a slab wiped (every block free, its bits cleared), if its word
 * is still `word`: its pages may be returned, and its owner, which takes it
 * back reset, first takes the heap's lock. */
bool slab_wipe(slab_t *s, uint64_t word);
/* Owner only, for a slab taken off its inbox: moves the blocks of the remote
 * bits onto list `to` (the owner's list of its class, whose next mallocs
 * then walk no slab list for them; NULL: none) while it has room, the rest
 * onto the slab's free list, and returns those; a wiped slab is reset, all
 * its blocks free (*wiped set). A block already on list `held` (the
 * owner's own list of freed blocks of its class; NULL: none) was freed
 * twice: it is reported (harden_double_free) and stays where it is. */
size_t slab_collect_remote(slab_t *s, const slab_t *held, slab_t *to, bool *wiped);

#endif
