/* batch.c - blocks allocated a batch at a time, then freed in order.
 *
 * Each of `threads` threads, `batches` times: allocates `count` blocks of
 * `size` bytes, writes a tag into the first and last word of each, then
 * checks and frees them in the order they were allocated.  The shape of
 * glibc's bench-malloc-simple and of any program that builds a structure
 * of many equal nodes and tears it down whole (a parse tree, a request's
 * objects, a frame's).
 *
 * What it exposes: a per-thread cache smaller than a batch.  Its frees
 * overflow the cache and its mallocs drain it each round, so every block
 * goes through the cache's overflow and refill, whatever they cost; an
 * allocator whose free puts the block where the next malloc finds it pays
 * nothing more than for a single malloc/free pair.
 *
 * Figure: ops_per_sec = blocks allocated and freed per second, all threads.
 *
 * usage: batch [threads=1] [count=1600] [size=64] [batches=20000] [seed=1]
 */
#include "bench.h"

static struct {
    uint64_t threads, count, size, batches, seed;
} P;

static void *worker(void *arg)
{
    worker_t *w = arg;
    void **p = malloc(P.count * sizeof *p);
    if (!p) {
        w->failed = 1;
        return NULL;
    }
    uint64_t rng = rng_seed(P.seed, (uint64_t)w->id), words = P.size / sizeof(uint64_t);
    for (uint64_t b = 0; b < P.batches && !w->failed; b++) {
        uint64_t tag = rng_next(&rng), n = 0;
        for (; n < P.count; n++) {
            uint64_t *q = malloc(P.size);
            if (!q) {
                w->failed = 1;
                break;
            }
            q[0] = q[words - 1] = tag + n;
            p[n] = q;
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t *q = p[i];
            if (q[0] != tag + i || q[words - 1] != tag + i) w->failed = 1;
            free(q);
        }
        w->ops += n;
    }
    free(p);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "threads=1 count=1600 size=64 batches=20000 seed=1", &P.threads, &P.count, &P.size,
                 &P.batches, &P.seed);
    arg_need(P.threads >= 1 && P.count >= 1 && P.size >= sizeof(uint64_t), "threads, count >= 1, size >= 8");
    uint64_t ops;
    double secs;
    int ok = run_workers((int)P.threads, worker, &ops, &secs);
    printf("bench=batch threads=%llu count=%llu size=%llu batches=%llu seconds=%.3f ops=%llu ops_per_sec=%.0f",
           (unsigned long long)P.threads, (unsigned long long)P.count, (unsigned long long)P.size,
           (unsigned long long)P.batches, secs, (unsigned long long)ops, (double)ops / secs);
    return bench_finish(ok);
}
