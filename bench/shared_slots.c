/* shared_slots.c - threads free each other's blocks at random.
 *
 * `threads` threads share one array of `slots` pointers.  Each op allocates a
 * block of random size in [min, max], fills it, and swaps it into a random
 * slot; the block it takes out (any thread's, most often another's) is
 * checked and freed.  With T threads a free is remote T-1 times in T, and
 * consecutive frees land in unrelated slabs: the shape of xmalloc-test and
 * of servers that hand requests between workers, where a cache of remote
 * frees has nothing to batch.  A block's size follows from the tag in its
 * first 8 bytes, so whoever frees it checks all of it.
 *
 * With pin=1 (the default) worker i runs on the ith processor of the
 * affinity mask (modulo their count), so that a block crosses cores; left to
 * the scheduler, two workers sharing a core ran twice as fast, and runs
 * swung between the two.
 *
 * Figures: ops_per_sec = blocks allocated, swapped and freed per second, all
 * threads together; peak_rss_kib = VmHWM.
 *
 * usage: shared_slots [threads=2] [ops=2000000] [slots=65536] [min=16]
 *                     [max=256] [seed=1] [pin=1] (ops per thread)
 */
#define _GNU_SOURCE
#include "bench.h"
#include <pthread.h>
#include <stdatomic.h>

static uint64_t g_ops, g_slots, g_min, g_max, g_seed, g_pin;
static cpu_set_t g_cpus;
static _Atomic(void *) *g_slot;

/* The size of the block tagged tag: the checker recomputes it. */
static size_t size_of(uint64_t tag)
{
    uint64_t h = tag * 0x9E3779B97F4A7C15ULL;
    return (size_t)(g_min + (h >> 32) % (g_max - g_min + 1));
}

static int drop(void *p) { return block_drop_tagged(p, size_of); }

static void *worker(void *arg)
{
    worker_t *w = arg;
    if (g_pin) bench_pin_self(&g_cpus, w->id);
    uint64_t rng = rng_seed(g_seed, (uint64_t)w->id);
    double t0 = now_sec();
    for (uint64_t i = 0; i < g_ops; i++) {
        uint64_t tag = ((uint64_t)w->id + 1) << 40 | i;
        size_t size = size_of(tag);
        void *p = malloc(size);
        if (!p) {
            w->failed = 1;
            break;
        }
        block_fill(p, size, tag);
        void *old = atomic_exchange_explicit(&g_slot[rng_next(&rng) % g_slots], p, memory_order_acq_rel);
        if (!drop(old)) w->failed = 1;
    }
    w->secs = now_sec() - t0;
    w->ops = g_ops;
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t threads;
    bench_params(argc, argv, "threads=2 ops=2000000 slots=65536 min=16 max=256 seed=1 pin=1", &threads, &g_ops,
                 &g_slots, &g_min, &g_max, &g_seed, &g_pin);
    if (sched_getaffinity(0, sizeof g_cpus, &g_cpus) != 0) g_pin = 0;
    arg_need(threads >= 1 && threads <= 1024 && g_slots >= 1 && g_min >= 8 && g_min <= g_max,
             "threads 1-1024, slots >= 1, 8 <= min <= max");
    uint64_t ops;
    double elapsed;
    int ok = run_over_slots((int)threads, worker, &g_slot, g_slots, size_of, &ops, &elapsed);
    printf("bench=shared-slots threads=%llu ops=%llu slots=%llu min=%llu max=%llu pin=%llu seconds=%.3f "
           "ops_per_sec=%.0f peak_rss_kib=%ld",
           (unsigned long long)threads, (unsigned long long)ops, (unsigned long long)g_slots,
           (unsigned long long)g_min, (unsigned long long)g_max, (unsigned long long)g_pin, elapsed, ops / elapsed,
           hwm_kib());
    return bench_finish(ok);
}
