/* Base: what every layer uses. Compiler helpers, graded assertions and the
 * spin lock of the few process-wide structures. Layer 0: includes only the
 * OS layer. */
#ifndef HAKMEM_BASE_H
#define HAKMEM_BASE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os.h"

#ifndef HAKMEM_PROFILING /* the profiling library: malloc counts toward the profiler's next sample */
#define HAKMEM_PROFILING 0
#endif
#ifndef HAKMEM_SECURE
#define HAKMEM_SECURE 0
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define hak_noinline __attribute__((noinline))
#define hak_inline static inline __attribute__((always_inline))
#define HAK_API __attribute__((visibility("default")))
/* malloc's and free's fast paths sit together in a section of their own
 * that starts a page (HAK_HOT_FIRST, then HAK_HOT): their addresses' low
 * bits, which the front end's caches and predictors index by, then do not
 * move with the code linked before them. */
#define HAK_HOT __attribute__((section(".text.hakmem_hot"), aligned(64)))
#define HAK_HOT_FIRST __attribute__((section(".text.hakmem_hot"), aligned(4096)))

/* Graded assertions: level 1 cheap checks, 2 internal consistency, 3 expensive. */
#ifndef HAKMEM_DEBUG
#define HAKMEM_DEBUG 0
#endif
void hak_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn, cold));
#define hak_assert_level(lvl, e) \
  ((HAKMEM_DEBUG >= (lvl) && !(e)) ? hak_assert_fail(#e, __FILE__, __LINE__) : (void)0)
#define hak_assert(e) hak_assert_level(1, e)
#define hak_assert_internal(e) hak_assert_level(2, e)
#define hak_assert_expensive(e) hak_assert_level(3, e)

/* A spin lock for the few shared structures (region pool, abandoned heaps,
 * huge arenas, a heap's spans against other threads). Held briefly, never
 * across a call that may allocate or block for long. */
typedef struct {
  _Atomic int held;
} hak_lock_t;

hak_inline void hak_lock(hak_lock_t *l) {
  while (atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
    while (atomic_load_explicit(&l->held, memory_order_relaxed)) os_yield();
}
hak_inline bool hak_trylock(hak_lock_t *l) {
  return atomic_load_explicit(&l->held, memory_order_relaxed) == 0 &&
         !atomic_exchange_explicit(&l->held, 1, memory_order_acquire);
}
hak_inline void hak_unlock(hak_lock_t *l) { atomic_store_explicit(&l->held, 0, memory_order_release); }

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

hak_inline bool is_pow2(size_t x) { return x && (x & (x - 1)) == 0; }
hak_inline size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

#endif
