/* Size classes: exact multiples of 8 up to 64 bytes, then four classes per
 * doubling up to 32 KiB (internal waste at most 25 %, 12.5 % on average).
 * Classes up to 1 KiB are the Tiny pool, the rest the Mid pool. A slab spans
 * enough 64 KiB units to hold at least 32 blocks (16 for the largest
 * classes), so that refills stay rare at every size. */
#include "internal.h"

const uint32_t hak_class_size[NUM_CLASSES] = {
  8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112,
  128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768,
  896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120,
  6144, 7168, 8192, 10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768
};

const uint8_t hak_class_units[NUM_CLASSES] = {
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8
};

/* size_class() for sizes up to TINY_MAX, indexed by (size + 7) / 8. */
const uint8_t hak_tiny_class[TINY_MAX / 8 + 1] = {
  0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 12, 12, 13, 13, 13,
  13, 14, 14, 14, 14, 15, 15, 15, 15, 16, 16, 16, 16, 16, 16, 16, 16, 17, 17, 17, 17, 17, 17, 17,
  17, 18, 18, 18, 18, 18, 18, 18, 18, 19, 19, 19, 19, 19, 19, 19, 19, 20, 20, 20, 20, 20, 20, 20,
  20, 20, 20, 20, 20, 20, 20, 20, 20, 21, 21, 21, 21, 21, 21, 21, 21, 21, 21, 21, 21, 21, 21, 21,
  21, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 23, 23, 23, 23, 23, 23, 23,
  23, 23, 23, 23, 23, 23, 23, 23, 23
};
