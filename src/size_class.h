/* Size classes: 8 and 16 bytes, multiples of 16 up to 64, then four classes
 * per doubling up to 1 KiB, eight from 1 to 8 KiB (where programs put a
 * page and its header: 1032, 4104, 4368 B), four again up to 32 KiB
 * (internal waste at most 25 %, 12.5 % from 1 to 8 KiB). A power of two
 * from 1 to 4 KiB has a class 16 bytes above it too, for the payload of a
 * power of two behind a header of a word or two (1040, 2064, 4112 B), and
 * 8 and 16 KiB one 256 bytes above. The sizes of 2048, 4096, 8192 and 16384
 * go there too, their power-of-two classes taking only aligned requests; the
 * other classes above 8 KiB are odd multiples of 256 (9984, 12032, ...):
 * blocks start at multiples of their size, and blocks a page or half a
 * page apart would all start at one or two offsets in a page, where one
 * pop's store and the next pop's load alias on 4 KiB and the blocks' first
 * lines share an L1 set. Every class from 16 bytes on is a multiple of 16,
 * so every block of 16 bytes or more is 16-byte aligned. Classes up to 1
 * KiB are the Tiny pool, the rest the Mid pool. Layer 2. */
#ifndef HAKMEM_SIZE_CLASS_H
#define HAKMEM_SIZE_CLASS_H

#include "types.h"

extern const uint8_t hak_tiny_class[TINY_MAX / 8 + 1];
extern const uint8_t hak_mid_class[SMALL_MAX / 128 + 1];
extern const uint32_t hak_class_size[NUM_CLASSES];
extern const uint8_t hak_class_units[NUM_CLASSES];
#define ALIGNED_ROWS 12 /* alignments 16 B to SMALL_MAX */
extern const uint8_t hak_aligned_class[ALIGNED_ROWS][NUM_CLASSES];

/* The class of a size of at most SMALL_MAX. hak_mid_class holds the classes
 * that are multiples of 128; the one below may be a power of two's +16. */
hak_inline unsigned size_class(size_t size) {
  if (likely(size <= TINY_MAX)) return hak_tiny_class[(size + 7) >> 3];
  unsigned c = hak_mid_class[(size + 127) >> 7];
  return c - (size <= hak_class_size[c - 1]);
}

/* Whether cls is the class of its own size (not 2048, 4096, 8192 or 16384). */
hak_inline bool class_plain(unsigned cls) { return size_class(hak_class_size[cls]) == cls; }

#endif
