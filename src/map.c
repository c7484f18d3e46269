/* The address map. */
#include "map.h"

#define LEAF_SHIFT 14 /* entries per leaf: 16 Ki, 64 GiB of address space */
#define LEAF_ENTRIES ((size_t)1 << LEAF_SHIFT)
#define MAP_ENTRIES ((size_t)1 << (ADDRESS_BITS - REGION_SHIFT))
#define LEAVES (MAP_ENTRIES >> LEAF_SHIFT)
#define FAST_LEAVES (MAP_FAST_ENTRIES >> LEAF_SHIFT)

uint8_t map_fast[MAP_FAST_ENTRIES]; /* in .bss: untouched pages cost nothing */
static uint8_t *_Atomic leaves[LEAVES];
static hak_lock_t leaves_lock;

uint8_t map_kind_leaf(size_t i) {
  if (i >= MAP_ENTRIES) return MAP_NONE;
  uint8_t *leaf = atomic_load_explicit(&leaves[i >> LEAF_SHIFT], memory_order_acquire);
  return leaf ? __atomic_load_n(&leaf[i & (LEAF_ENTRIES - 1)], __ATOMIC_RELAXED) : MAP_NONE;
}

/* Entry i's byte, mapping its leaf if need be (NULL when that fails). */
static uint8_t *entry(size_t i) {
  if (i < MAP_FAST_ENTRIES) return &map_fast[i];
  _Atomic(uint8_t *) *slot = &leaves[i >> LEAF_SHIFT];
  uint8_t *leaf = atomic_load_explicit(slot, memory_order_acquire);
  if (leaf == NULL) {
    hak_lock(&leaves_lock);
    leaf = atomic_load_explicit(slot, memory_order_relaxed);
    if (leaf == NULL && (leaf = os_map(LEAF_ENTRIES)) != NULL) atomic_store_explicit(slot, leaf, memory_order_release);
    hak_unlock(&leaves_lock);
    if (leaf == NULL) return NULL;
  }
  return &leaf[i & (LEAF_ENTRIES - 1)];
}

bool map_set(const void *p, size_t size, uint8_t kind) {
  size_t first = map_index(p), last = map_index((const char *)p + (size ? size - 1 : 0));
  if (last >= MAP_ENTRIES) return false;
  for (size_t i = first; i <= last; i++)
    if (entry(i) == NULL) return false;
  for (size_t i = first; i <= last; i++) __atomic_store_n(entry(i), kind, __ATOMIC_RELEASE);
  return true;
}

void map_fork_lock(bool lock) { lock ? hak_lock(&leaves_lock) : hak_unlock(&leaves_lock); }

size_t map_resident(void) {
  size_t n = os_resident(map_fast, sizeof map_fast);
  for (size_t k = FAST_LEAVES; k < LEAVES; k++) {
    uint8_t *leaf = atomic_load_explicit(&leaves[k], memory_order_acquire);
    if (leaf) n += os_resident(leaf, LEAF_ENTRIES);
  }
  return n;
}

bool map_meta_overlaps(uintptr_t lo, uintptr_t hi) {
  for (size_t k = FAST_LEAVES; k < LEAVES; k++) {
    uintptr_t leaf = (uintptr_t)atomic_load_explicit(&leaves[k], memory_order_acquire);
    if (leaf && leaf < hi && lo < leaf + LEAF_ENTRIES) return true;
  }
  return false;
}
