/* mid_large_mt.c - multi-threaded churn of mid-range blocks (8-32 KiB).
 *
 * Each thread owns `slots` slots, all filled at the start.  Each cycle picks
 * a random slot, verifies and frees its block and allocates a new one of
 * random size in [min, max] (default 8-32 KiB).  This is the size range where
 * slabs that hold too few blocks, or lock-heavy bins, collapse.
 *
 * Figure: ops_per_sec = cycles (one free + one malloc) per second, all
 * threads together.  Working set: threads * slots blocks of 20 KiB on average
 * (reference: 4 * 256 * 20 KiB = 20 MiB, larger than the L2/L3 caches).
 * Reference run: threads=4 cycles=60000 slots=256 seed=1.
 *
 * usage: mid_large_mt [threads=4] [cycles=60000] [slots=256] [seed=1]
 *                     [min=8192] [max=32768]       (cycles are per thread)
 */
#include "bench.h"
#include <pthread.h>

static size_t g_slots, g_min, g_max;
static uint64_t g_cycles, g_seed;

static void *run(void *arg)
{
    worker_t *w = arg;
    void **ptr = calloc(g_slots, sizeof *ptr);
    size_t *size = calloc(g_slots, sizeof *size);
    uint64_t *tag = calloc(g_slots, sizeof *tag);
    uint64_t rng = rng_seed(g_seed, (uint64_t)w->id), next = ((uint64_t)w->id << 48) + 1, ops = 0;
    if (!ptr || !size || !tag) {
        w->failed = 1;
        return NULL;
    }
    for (size_t v = 0; v < g_slots; v++) {
        size[v] = rng_range(&rng, g_min, g_max);
        tag[v] = next++;
        if (!(ptr[v] = malloc(size[v]))) {
            w->failed = 1;
            break;
        }
        block_fill(ptr[v], size[v], tag[v]);
    }
    for (uint64_t i = 0; i < g_cycles && !w->failed; i++) {
        size_t v = (size_t)(rng_next(&rng) % g_slots);
        if (!block_check(ptr[v], size[v], tag[v])) {
            w->failed = 1;
            break;
        }
        free(ptr[v]);
        size[v] = rng_range(&rng, g_min, g_max);
        tag[v] = next++;
        if (!(ptr[v] = malloc(size[v]))) {
            w->failed = 1;
            break;
        }
        block_fill(ptr[v], size[v], tag[v]);
        ops++;
    }
    w->ops = ops;
    for (size_t v = 0; v < g_slots; v++) {
        if (!ptr[v]) continue;
        if (!block_check(ptr[v], size[v], tag[v])) w->failed = 1;
        free(ptr[v]);
    }
    free(ptr);
    free(size);
    free(tag);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_args(argc, argv, "threads cycles slots seed min max");
    int threads = (int)arg_u("threads", 4);
    g_cycles = arg_u("cycles", 60000);
    g_slots = arg_u("slots", 256);
    g_seed = arg_u("seed", 1);
    g_min = arg_u("min", 8192);
    g_max = arg_u("max", 32768);
    if (threads < 1 || g_slots < 1 || g_min < 1 || g_max < g_min) {
        fprintf(stderr, "mid_large_mt: bad parameters\n");
        return 2;
    }
    uint64_t ops;
    double elapsed;
    int ok = run_workers(threads, run, &ops, &elapsed);
    printf("bench=mid-large-mt threads=%d cycles=%llu slots=%zu min=%zu max=%zu seconds=%.3f ops=%llu ops_per_sec=%.0f",
           threads, (unsigned long long)g_cycles, g_slots, g_min, g_max, elapsed, (unsigned long long)ops,
           ops / elapsed);
    return bench_finish(ok);
}
