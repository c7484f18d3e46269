/* batch.c - blocks allocated a batch at a time, then freed in order.
 *
 * Each of `threads` threads, `batches` times: allocates `count` blocks of
 * `size` bytes, writes a tag into the first and last word of each, then
 * checks and frees them in the order they were allocated (shuffle=0) or in
 * a random order (shuffle=1).  The shape of glibc's bench-malloc-simple
 * and of any program that builds a structure of many equal nodes and
 * tears it down whole (a parse tree, a request's objects, a frame's); in
 * random order, a hash table's or a graph's teardown.
 *
 * What it exposes: a per-thread cache smaller than a batch.  Its frees
 * overflow the cache and its mallocs drain it each round, so every block
 * goes through the cache's overflow and refill, whatever they cost; an
 * allocator whose free puts the block where the next malloc finds it pays
 * nothing more than for a single malloc/free pair.  Shuffled, each free
 * lands on a block and a slab far from the last one's, and the next
 * batch's mallocs find the blocks in the order they were freed.
 *
 * Figure: ops_per_sec = blocks allocated and freed per second, all threads.
 *
 * usage: batch [threads=1] [count=1600] [size=64] [batches=20000] [seed=1]
 *              [shuffle=0]
 */
#include "bench.h"

static struct {
    uint64_t threads, count, size, batches, seed, shuffle;
} P;

static void *worker(void *arg)
{
    worker_t *w = arg;
    void **p = malloc(P.count * sizeof *p);
    uint32_t *order = malloc(P.count * sizeof *order);
    if (!p || !order) {
        w->failed = 1;
        free(p);
        free(order);
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
        for (uint64_t i = 0; i < n; i++) order[i] = (uint32_t)i;
        for (uint64_t i = n; P.shuffle && i > 1; i--) {
            uint64_t j = rng_next(&rng) % i;
            uint32_t t = order[i - 1];
            order[i - 1] = order[j];
            order[j] = t;
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t k = order[i], *q = p[k];
            if (q[0] != tag + k || q[words - 1] != tag + k) w->failed = 1;
            free(q);
        }
        w->ops += n;
    }
    free(order);
    free(p);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "threads=1 count=1600 size=64 batches=20000 seed=1 shuffle=0", &P.threads, &P.count,
                 &P.size, &P.batches, &P.seed, &P.shuffle);
    arg_need(P.threads >= 1 && P.count >= 1 && P.count <= UINT32_MAX && P.size >= sizeof(uint64_t),
             "threads, count >= 1, count < 2^32, size >= 8");
    uint64_t ops;
    double secs;
    int ok = run_workers((int)P.threads, worker, &ops, &secs);
    printf("bench=batch threads=%llu count=%llu size=%llu batches=%llu shuffle=%llu seconds=%.3f ops=%llu "
           "ops_per_sec=%.0f",
           (unsigned long long)P.threads, (unsigned long long)P.count, (unsigned long long)P.size,
           (unsigned long long)P.batches, (unsigned long long)P.shuffle, secs, (unsigned long long)ops,
           (double)ops / secs);
    return bench_finish(ok);
}
