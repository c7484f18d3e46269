/* large.c - large blocks (64 KiB to 64 MiB): allocate, touch every page, free.
 *
 * Keeps `slots` live blocks.  Each iteration picks a random slot, verifies and
 * frees its block, and allocates a new one whose size is log-uniform in
 * [min, max] (as many 64-128 KiB blocks as 32-64 MiB ones), then writes every
 * 4 KiB page of it.  Page faults and zeroing by the kernel are part of the
 * cost, so an allocator that reuses (or keeps) mapped memory wins.
 *
 * Figure: ops_per_sec = iterations (one free + one malloc + touching the new
 * block) per second.  Live memory: up to slots * max (defaults: 8 blocks,
 * about 9.4 MiB each on average, 512 MiB worst case).
 *
 * usage: large [iters=1000] [slots=8] [min=65536] [max=67108864] [seed=1]
 */
#include "bench.h"

int main(int argc, char **argv)
{
    bench_args(argc, argv, "iters slots min max seed");
    uint64_t iters = arg_u("iters", 1000);
    size_t slots = arg_u("slots", 8);
    double lo = (double)arg_u("min", 65536), hi = (double)arg_u("max", 64 << 20);
    uint64_t rng = rng_seed(arg_u("seed", 1), 0);
    if (slots < 1 || lo < 1024 || hi < lo) {
        fprintf(stderr, "large: bad parameters\n");
        return 2;
    }
    void **ptr = calloc(slots, sizeof *ptr);
    size_t *size = calloc(slots, sizeof *size);
    uint64_t *tag = calloc(slots, sizeof *tag);
    if (!ptr || !size || !tag) return 1;
    int ok = 1;
    double t0 = now_sec();
    uint64_t ops = 0;
    for (uint64_t i = 0; i < iters; i++) {
        size_t v = (size_t)(rng_next(&rng) % slots);
        if (ptr[v]) {
            ok &= block_check(ptr[v], size[v], tag[v]);
            free(ptr[v]);
        }
        size[v] = rng_log_range(&rng, (size_t)lo, (size_t)hi);
        tag[v] = i + 1;
        if (!(ptr[v] = malloc(size[v]))) {
            ok = 0;
            break;
        }
        block_fill(ptr[v], size[v], tag[v]); /* writes every page */
        ops++;
        if (!ok) break;
    }
    double elapsed = now_sec() - t0;
    for (size_t v = 0; v < slots; v++) {
        if (!ptr[v]) continue;
        ok &= block_check(ptr[v], size[v], tag[v]);
        free(ptr[v]);
    }
    free(ptr);
    free(size);
    free(tag);
    printf("bench=large iters=%llu slots=%zu min=%.0f max=%.0f seconds=%.3f ops=%llu ops_per_sec=%.1f",
           (unsigned long long)iters, slots, lo, hi, elapsed, (unsigned long long)ops, ops / elapsed);
    return bench_finish(ok);
}
