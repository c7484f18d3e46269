/* The geometry and the types the layers share: blocks and the slab
 * descriptor, which the region layer stores and the slab layer fills.
 * Layer 0. */
#ifndef HAKMEM_TYPES_H
#define HAKMEM_TYPES_H

#include "base.h"

/* Regions: 4 MiB of address space aligned to their size, cut into 64 KiB
 * units; unit 0 holds the region's header. */
#define REGION_SHIFT 22
#define REGION_SIZE ((size_t)1 << REGION_SHIFT)
#define UNIT_SHIFT 16
#define UNIT_SIZE ((size_t)1 << UNIT_SHIFT)
#define REGION_UNITS (REGION_SIZE / UNIT_SIZE)
#define ADDRESS_BITS 47 /* user space on x86-64 and aarch64 without a hint */

#define SMALL_MAX 32768 /* Tiny (<= 1 KiB) and Mid (<= 32 KiB) classes */
#define TINY_MAX 1024
#define DIRECT_MAX 8192 /* malloc's fast path finds sizes up to this in one table, with one compare */
#define LARGE_MAX ((size_t)256 * 1024) /* page runs in classes; above this, Huge */
#define NUM_CLASSES 58
#define MIN_ALIGN 16 /* what malloc guarantees for blocks of 16 bytes and more */

typedef struct block_s {
  struct block_s *next;
} block_t;

/* Flags in the low bits of slab.owner; the heap's address sits above them.
 * A set flag makes free's single owner comparison fail into the slow path. */
enum {
  SLAB_F_FULL = 1, /* off the heap's queue: re-linked by the next local free */
  SLAB_F_SLOW = 2, /* every free takes the slow path (statistics) */
  SLAB_F_MASK = 3,
};

enum slab_kind { SLAB_NONE = 0, SLAB_SMALL };

/* A slab holds at most this many blocks a unit (the 8-byte class uses half
 * of each unit): the size of its remote-free bitmap. */
#define REMOTE_BITS_PER_UNIT (UNIT_SIZE / 16)

struct heap_s;

/* One descriptor per unit of a region. A slab spans one or more units; only
 * the head descriptor is used, and every descriptor points to its head (a
 * free unit's is NULL, read as itself: unit_head), so that free finds the
 * slab with one load. The other units' descriptors also mirror the head's
 * owner, divc and tc (slab_mirror), so that free's fast path reads its
 * unit's line alone. Three cache lines, padded to four: what malloc, free
 * and other threads' frees touch (one line a call: the owner's list beside
 * what tells a block and its owner), what only the owner's slow paths
 * touch, and the word other threads count remote frees in. */
#define SLAB_MAX_PAGES 128 /* 4 KiB pages in a slab of 8 units */

typedef struct slab_s {
  /* every call's */
  _Alignas(256) _Atomic uintptr_t owner; /* heap address | SLAB_F_*; 0: no owner */
  block_t *free;                 /* the owner allocates from and frees onto here */
  uint32_t used;                 /* blocks handed out and not freed locally */
  uint32_t bsize;                /* block size */
  uint64_t divc;                 /* ceil(2^64 / bsize): block_at's multiplier */
  struct slab_s *tc;             /* the list its owner's frees go onto: its class's tcache, or itself (heap.h) */
  char *bump;                    /* first never-carved block (read by remote frees) */
  struct slab_s *head;           /* the slab's head descriptor */
  uint32_t capacity;             /* blocks */
  uint8_t cls;
  uint8_t kind;
  /* the owner's slow paths' */
  _Alignas(64) uint64_t key;     /* free-list link key (harden.h) */
  struct slab_s *next, *prev;    /* the heap's class queue, or its idle list */
  uint64_t idle_ms;              /* idle: since when */
  uint32_t full_gen;             /* full: the owner's collect count when it was set aside */
  uint32_t sparse_seen;          /* used | SPARSE_SEEN when its pages were last looked at */
  uint64_t sparse[SLAB_MAX_PAGES / 64]; /* pages returned while sparse: their blocks are off the list */
  uint8_t units;
  uint8_t queued;                /* in the heap's class queue */
  uint8_t idle;                  /* empty and kept: its pages may be returned */
  uint8_t purged;                /* idle, and its pages were returned */
  uint8_t fresh;                 /* its pages beyond the bump were never touched */
  /* other threads' */
  _Alignas(64) _Atomic uint64_t remote; /* remote frees not yet collected, and flags (slab.c) */
  struct slab_s *remote_next;    /* the heap's stack of slabs with remote frees */
  char *first;                   /* the first block (slab_block_at): read with the remote word */
  /* the owner's carves' */
  _Alignas(64) char *populated;  /* fresh: its pages below this were faulted in ahead of the bump (slab_carve) */
} slab_t;
_Static_assert(sizeof(slab_t) == 256, "a power of two: free finds a unit's descriptor with a shift");

#endif
