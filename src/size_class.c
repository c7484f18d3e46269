/* Size classes: 8 and 16 bytes, then multiples of 16 up to 64 bytes, then
 * four classes per doubling up to 32 KiB (internal waste at most 25 %, 12.5 %
 * on average). Every class from 16 bytes on is a multiple of 16, so every
 * block of 16 bytes or more is 16-byte aligned, as glibc's are. Classes up to
 * 1 KiB are the Tiny pool, the rest the Mid pool. A slab spans enough 64 KiB
 * units to hold at least 256 blocks up to 1 KiB and 64 up to 8 KiB, and 4
 * units above that (8 blocks of 32 KiB): with 8, each class's slabs kept
 * more of its free blocks out of the others' reach (mid_large_mt, 8-32 KiB,
 * peak RSS 1 thread 12.6 -> 11.4 MiB, 2 threads 23.8 -> 20.9, mimalloc 12.6
 * and 22.5; 2 % slower at 1 thread; with 2 units, 25 % slower). Blocks
 * freed into a slab other than the class's current one wait until it is
 * current again, by then out of the cache: few slabs per class keep the
 * blocks handed out hot (random_mixed, 16-1024 B, simulated 512 KiB L2
 * misses 3.18M -> 1.81M with 256 blocks, tcmalloc's per-class lists 1.63M).
 * A loop of 64 allocations then 64 frees stays in one slab (fastpath at
 * 8 KiB: 87.7 -> 72.6 instructions per pair). */
#include "internal.h"

const uint32_t hak_class_size[NUM_CLASSES] = {
  8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192,
  224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280,
  1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192,
  10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768
};

const uint8_t hak_class_units[NUM_CLASSES] = {
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4,
  2, 2, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4
};

/* size_class() for sizes up to TINY_MAX, indexed by (size + 7) / 8. */
const uint8_t hak_tiny_class[TINY_MAX / 8 + 1] = {
  0, 0, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 9, 9, 10, 10, 10,
  10, 11, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14,
  14, 15, 15, 15, 15, 15, 15, 15, 15, 16, 16, 16, 16, 16, 16, 16, 16, 17, 17, 17, 17, 17, 17, 17,
  17, 17, 17, 17, 17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 18, 18, 18, 18, 18, 18, 18, 18, 18, 18,
  18, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 20, 20, 20, 20, 20, 20, 20,
  20, 20, 20, 20, 20, 20, 20, 20, 20
};

/* size_class() for sizes up to SMALL_MAX, indexed by (size + 127) / 128 (the
 * Mid classes are multiples of 256, so this is exact above TINY_MAX). */
const uint8_t hak_mid_class[SMALL_MAX / 128 + 1] = {
  0, 8, 12, 14, 16, 17, 18, 19, 20, 21, 21, 22, 22, 23, 23, 24, 24, 25, 25, 25, 25, 26, 26, 26,
  26, 27, 27, 27, 27, 28, 28, 28, 28, 29, 29, 29, 29, 29, 29, 29, 29, 30, 30, 30, 30, 30, 30, 30,
  30, 31, 31, 31, 31, 31, 31, 31, 31, 32, 32, 32, 32, 32, 32, 32, 32, 33, 33, 33, 33, 33, 33, 33,
  33, 33, 33, 33, 33, 33, 33, 33, 33, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34,
  34, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 36, 36, 36, 36, 36, 36, 36,
  36, 36, 36, 36, 36, 36, 36, 36, 36, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37,
  37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 38, 38, 38, 38, 38, 38, 38,
  38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38,
  38, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39, 39,
  39, 39, 39, 39, 39, 39, 39, 39, 39, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40,
  40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40
};
