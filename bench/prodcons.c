/* prodcons.c - one thread allocates, another frees: a pipeline stage.
 *
 * A producer thread allocates `blocks` small blocks of random size in
 * [min, max] (default 16-256 B), fills them and hands them to one consumer
 * thread through a ring of `ring` pointers; the consumer checks and frees
 * each.  Every free is a remote free, and with a ring this deep many
 * thousands of blocks are in flight: an allocator that parks remote frees
 * until its owner comes round, or sends them through a lock, shows it here
 * as time and as resident memory.
 *
 * The ring carries pointers only: the consumer draws the same sizes from its
 * own copy of the producer's random stream, and the tag is the block's index.
 * Each side publishes its position every `batch` blocks (and whenever it
 * would otherwise wait), so the ring's own cache-line traffic stays small
 * next to the allocator's.  A side that must wait yields the processor.
 * The threads are not pinned.
 *
 * Figure: ops_per_sec = blocks allocated, passed and freed per second.  In
 * flight: at most `ring` blocks (defaults: 4096 * 136 B ~ 0.5 MiB).
 *
 * usage: prodcons [blocks=3000000] [min=16] [max=256] [ring=4096] [batch=32]
 *                 [seed=1]
 */
#include "bench.h"
#include <sched.h>
#include <stdatomic.h>

typedef struct {
    _Alignas(64) atomic_size_t in;  /* blocks the producer has published */
    _Alignas(64) atomic_size_t out; /* blocks the consumer has taken */
    _Alignas(64) void **item;
    size_t mask, batch;
    int failed;
} ring_t;

static struct {
    uint64_t blocks, min, max, ring, batch, seed;
} P;

static void *producer(void *arg)
{
    ring_t *q = arg;
    uint64_t rng = rng_seed(P.seed, 0);
    size_t out = 0; /* the consumer's position as last seen */
    for (uint64_t i = 0; i < P.blocks; i++) {
        size_t n = rng_range(&rng, P.min, P.max);
        void *p = malloc(n);
        if (p) block_fill(p, n, i + 1);
        else q->failed = 1; /* a NULL item tells the consumer to stop */
        while (i - out > q->mask) {
            atomic_store_explicit(&q->in, i, memory_order_release);
            out = atomic_load_explicit(&q->out, memory_order_acquire);
            if (i - out > q->mask) sched_yield();
        }
        q->item[i & q->mask] = p;
        if ((i + 1) % q->batch == 0 || !p) atomic_store_explicit(&q->in, i + 1, memory_order_release);
        if (!p) return NULL;
    }
    atomic_store_explicit(&q->in, P.blocks, memory_order_release);
    return NULL;
}

static void *consumer(void *arg)
{
    ring_t *q = arg;
    uint64_t rng = rng_seed(P.seed, 0);
    size_t in = 0; /* the producer's position as last seen */
    int ok = 1;
    for (uint64_t i = 0; i < P.blocks; i++) {
        while (i == in) {
            atomic_store_explicit(&q->out, i, memory_order_release);
            in = atomic_load_explicit(&q->in, memory_order_acquire);
            if (i == in) sched_yield();
        }
        void *p = q->item[i & q->mask];
        size_t n = rng_range(&rng, P.min, P.max);
        if (!p) { /* the producer stopped: nothing follows */
            ok = 0;
            break;
        }
        ok &= block_check(p, n, i + 1); /* a bad block fails the run; the ring drains on */
        free(p);
        if ((i + 1) % q->batch == 0) atomic_store_explicit(&q->out, i + 1, memory_order_release);
    }
    if (!ok) q->failed = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "blocks=3000000 min=16 max=256 ring=4096 batch=32 seed=1", &P.blocks, &P.min, &P.max,
                 &P.ring, &P.batch, &P.seed);
    arg_need(P.min >= 1 && P.max >= P.min && P.ring >= 2 && !(P.ring & (P.ring - 1)) && P.batch >= 1 &&
                 P.batch <= P.ring,
             "ring a power of two, 1 <= batch <= ring, 1 <= min <= max");
    ring_t *q = aligned_alloc(64, sizeof *q);
    void **item = calloc(P.ring, sizeof *item);
    if (!q || !item) return 1;
    memset(q, 0, sizeof *q);
    q->item = item;
    q->mask = P.ring - 1;
    q->batch = P.batch;
    pthread_t pt, ct;
    double t0 = now_sec();
    if (pthread_create(&ct, NULL, consumer, q) || pthread_create(&pt, NULL, producer, q)) return 1;
    pthread_join(pt, NULL);
    pthread_join(ct, NULL);
    double elapsed = now_sec() - t0;
    int ok = !q->failed;
    free(item);
    free(q);
    printf("bench=prodcons blocks=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " ring=%" PRIu64 " batch=%" PRIu64
           " seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f",
           P.blocks, P.min, P.max, P.ring, P.batch, elapsed, P.blocks, P.blocks / elapsed);
    return bench_finish(ok);
}
