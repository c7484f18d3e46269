/* The address map: one byte for every 4 MiB of the address space says what
 * hakmem keeps there, so that free() knows whether a pointer is hakmem's
 * before it reads anything through it. Layer 1.
 *
 * The first TiB of the address space (the window where the region layer
 * places hakmem's memory) has its entries in one array, map_fast, which
 * free's fast path reads with one comparison; entries beyond it live in
 * leaves of 16 KiB mapped when first needed. Nothing here is mapped for
 * address space hakmem never used. */
#ifndef HAKMEM_MAP_H
#define HAKMEM_MAP_H

#include "types.h"

enum map_kind {
  MAP_NONE = 0,
  MAP_REGION = 1,       /* a region (region.h): slabs and Large blocks */
  MAP_HUGE = 3,         /* a huge block's own mapping, its header at the 4 MiB boundary */
  MAP_HUGE_ALIGNED = 4, /* the same, aligned to 4 MiB or more: the header is the page before */
  MAP_RESERVED = 5,     /* placed, not yet set up: nothing of hakmem's to free() */
  MAP_ARENA = 64,       /* + k: arena k of huge blocks (huge.h) */
};
#define MAP_ARENAS 128

/* Whether kind holds huge blocks: an own mapping or an arena. */
hak_inline bool map_kind_is_huge(uint8_t kind) { return kind >= MAP_HUGE && kind != MAP_RESERVED; }

#define MAP_FAST_ENTRIES ((size_t)1 << 18) /* 1 TiB */
extern uint8_t map_fast[MAP_FAST_ENTRIES];

hak_inline size_t map_index(const void *p) { return (uintptr_t)p >> REGION_SHIFT; }

/* Free's fast-path test compares in memory: one instruction on x86-64, where
 * an aligned byte load is atomic (the compiler would first load an atomic
 * into a register). Sanitizers see the C load instead. */
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

/* Whether map entry i (map_index) lies in the window and is a region of
 * slabs: free's first test. */
hak_inline bool map_fast_is_region(size_t i) {
#if HAK_ASM_EQ
  return i < MAP_FAST_ENTRIES && hak_asm_eq("b", map_fast[i], MAP_REGION);
#else
  return i < MAP_FAST_ENTRIES && __atomic_load_n(&map_fast[i], __ATOMIC_RELAXED) == MAP_REGION;
#endif
}

/* The entry for any address (MAP_NONE beyond the user address space); the
 * window's entries inline, the rest from the leaves. */
uint8_t map_kind_leaf(size_t i);
hak_inline uint8_t map_kind(const void *p) {
  size_t i = map_index(p);
  if (likely(i < MAP_FAST_ENTRIES)) return __atomic_load_n(&map_fast[i], __ATOMIC_RELAXED);
  return map_kind_leaf(i);
}
/* Sets the entries of [p, p+size) (p and size multiples of 4 MiB are not
 * required: every 4 MiB block touched is set). False when a leaf could not be
 * mapped: nothing was set then. */
bool map_set(const void *p, size_t size, uint8_t kind);
/* Resident bytes of the map itself, and whether [lo, hi) overlaps one of its
 * leaves (statistics). */
size_t map_resident(void);
bool map_meta_overlaps(uintptr_t lo, uintptr_t hi);
/* Takes (or releases) the leaves' lock around fork. */
void map_fork_lock(bool lock);

#endif
