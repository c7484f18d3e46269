/* random_mixed.c - random mix of mallocs and frees over a private working set.
 *
 * Each thread owns `slots` slots.  Each step picks a random slot: an empty
 * slot gets a new block of random size in [min, max]; a full slot has its
 * block verified and freed.  Slots therefore stay about half full, and
 * mallocs and frees of all sizes interleave in random order.
 *
 * Figure: ops_per_sec = mallocs per second (every block is also freed, so one
 * op is a malloc+free pair), all threads together.  Working set: about
 * threads * slots/2 live blocks of (min+max)/2 bytes (defaults: 4 * 1024 *
 * 520 B ~ 2 MiB, i.e. L2/L3-resident).
 *
 * usage: random_mixed [threads=4] [slots=2048] [steps=10000000] [min=16]
 *                     [max=1024] [seed=1]          (steps are per thread)
 */
#include "bench.h"
#include <pthread.h>

static size_t g_slots, g_min, g_max;
static uint64_t g_steps, g_seed;

static void *run(void *arg)
{
    worker_t *w = arg;
    void **ptr = calloc(g_slots, sizeof *ptr);
    uint32_t *size = calloc(g_slots, sizeof *size);
    uint64_t *tag = calloc(g_slots, sizeof *tag);
    uint64_t rng = rng_seed(g_seed, (uint64_t)w->id), next = ((uint64_t)w->id << 48) + 1, ops = 0;
    if (!ptr || !size || !tag) {
        w->failed = 1;
        return NULL;
    }
    for (uint64_t i = 0; i < g_steps; i++) {
        size_t v = (size_t)(rng_next(&rng) % g_slots);
        if (ptr[v]) {
            if (!block_check(ptr[v], size[v], tag[v])) {
                w->failed = 1;
                break;
            }
            free(ptr[v]);
            ptr[v] = NULL;
        } else {
            size_t sz = rng_range(&rng, g_min, g_max);
            if (!(ptr[v] = malloc(sz))) {
                w->failed = 1;
                break;
            }
            size[v] = (uint32_t)sz;
            tag[v] = next++;
            block_fill(ptr[v], sz, tag[v]);
            ops++;
        }
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
    bench_args(argc, argv, "threads slots steps min max seed");
    int threads = (int)arg_u("threads", 4);
    g_slots = arg_u("slots", 2048);
    g_steps = arg_u("steps", 10000000);
    g_min = arg_u("min", 16);
    g_max = arg_u("max", 1024);
    g_seed = arg_u("seed", 1);
    if (threads < 1 || g_slots < 1 || g_min < 1 || g_max < g_min || g_max > UINT32_MAX) {
        fprintf(stderr, "random_mixed: bad parameters\n");
        return 2;
    }
    uint64_t ops;
    double elapsed;
    int ok = run_workers(threads, run, &ops, &elapsed);
    printf("bench=random-mixed threads=%d slots=%zu steps=%llu min=%zu max=%zu seconds=%.3f ops=%llu ops_per_sec=%.0f",
           threads, g_slots, (unsigned long long)g_steps, g_min, g_max, elapsed, (unsigned long long)ops,
           ops / elapsed);
    return bench_finish(ok);
}
