/* exchange.c - threads that mostly keep their blocks and now and then trade one.
 *
 * Each of `threads` threads keeps a window of `window` blocks of its own and
 * replaces a random one at each op: it checks and frees the old block and
 * allocates a new one, of 16-128 B seven times in ten, 128 B-2 KiB a
 * quarter of the time and 2-16 KiB otherwise, which it fills.  One op in
 * `hand` (when the slot holds a block) trades instead: the block goes into
 * a random slot of a shared exchange of `slots` pointers, and the block
 * found there, most often another thread's, is checked and freed.  The
 * shape of rptest and of servers whose workers hand a few objects on: most
 * frees are local, a few are remote, and the blocks a thread receives land
 * among its own.  shared_slots is the other end, where most frees are
 * remote.
 *
 * With pin=1 (the default) worker i runs on the ith processor of the
 * affinity mask (modulo their count), so that a traded block crosses cores.
 *
 * Figures: ops_per_sec = ops (replacements and trades) per second, all
 * threads together; peak_rss_kib = VmHWM.
 *
 * usage: exchange [threads=2] [ops=3000000] [window=4000] [slots=8192]
 *                 [hand=8] [seed=1] [pin=1] (ops per thread)
 */
#define _GNU_SOURCE
#include "bench.h"
#include <pthread.h>
#include <stdatomic.h>

static uint64_t g_ops, g_window, g_slots, g_hand, g_seed, g_pin;
static cpu_set_t g_cpus;
static _Atomic(void *) *g_slot;

/* The size of the block tagged tag: the checker recomputes it. */
static size_t size_of(uint64_t tag)
{
    uint64_t h = tag * 0x9E3779B97F4A7C15ULL, pick = (h >> 32) % 100, r = h >> 48;
    if (pick < 70) return 16 + r % 113;
    if (pick < 95) return 128 + r % 1921;
    return 2048 + (r * 37) % 14337;
}

static int drop(void *p) { return block_drop_tagged(p, size_of); }

static void *worker(void *arg)
{
    worker_t *w = arg;
    if (g_pin) bench_pin_self(&g_cpus, w->id);
    void **mine = calloc(g_window, sizeof *mine);
    if (!mine) {
        w->failed = 1;
        return NULL;
    }
    uint64_t rng = rng_seed(g_seed, (uint64_t)w->id);
    double t0 = now_sec();
    for (uint64_t i = 0; i < g_ops; i++) {
        uint64_t k = rng_next(&rng) % g_window, r = rng_next(&rng);
        if (mine[k] && r % g_hand == 0) {
            void *old = atomic_exchange_explicit(&g_slot[(r / g_hand) % g_slots], mine[k], memory_order_acq_rel);
            mine[k] = NULL;
            if (!drop(old)) w->failed = 1;
            continue;
        }
        if (!drop(mine[k])) w->failed = 1;
        uint64_t tag = ((uint64_t)w->id + 1) << 40 | i;
        size_t size = size_of(tag);
        if (!(mine[k] = malloc(size))) {
            w->failed = 1;
            break;
        }
        block_fill(mine[k], size, tag);
    }
    w->secs = now_sec() - t0;
    w->ops = g_ops;
    for (uint64_t k = 0; k < g_window; k++)
        if (!drop(mine[k])) w->failed = 1;
    free(mine);
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t threads;
    bench_params(argc, argv, "threads=2 ops=3000000 window=4000 slots=8192 hand=8 seed=1 pin=1", &threads, &g_ops,
                 &g_window, &g_slots, &g_hand, &g_seed, &g_pin);
    if (sched_getaffinity(0, sizeof g_cpus, &g_cpus) != 0) g_pin = 0;
    arg_need(threads >= 1 && threads <= 1024 && g_window >= 1 && g_slots >= 1 && g_hand >= 1,
             "threads 1-1024, window, slots, hand >= 1");
    uint64_t ops;
    double elapsed;
    int ok = run_over_slots((int)threads, worker, &g_slot, g_slots, size_of, &ops, &elapsed);
    printf("bench=exchange threads=%llu ops=%llu window=%llu slots=%llu hand=%llu pin=%llu seconds=%.3f "
           "ops_per_sec=%.0f peak_rss_kib=%ld",
           (unsigned long long)threads, (unsigned long long)ops, (unsigned long long)g_window,
           (unsigned long long)g_slots, (unsigned long long)g_hand, (unsigned long long)g_pin, elapsed,
           ops / elapsed, hwm_kib());
    return bench_finish(ok);
}
