/* cross_thread.c - blocks allocated on one thread and freed on another.
 *
 * `pairs` producer/consumer pairs.  Each producer allocates `blocks` blocks of
 * random size in [min, max], fills them and pushes them into a bounded
 * single-producer/single-consumer ring (`ring` entries) shared with its
 * consumer, which verifies and frees them.  Every free is therefore a remote
 * free: the allocator must hand the memory back to the owning thread/heap.
 * A full (or empty) ring makes the waiting side yield the CPU.
 *
 * With pin=1 (the default) a pair's producer and consumer run on different
 * processors of the affinity mask (producer i on the (2i)th, consumer on the
 * (2i+1)th, modulo their count), so every free crosses cores.  Unpinned, two
 * pairs on 2 cores swung between 4 and 25 M/s, run to run and for every
 * allocator, with where the scheduler put each pair: a producer and its
 * consumer sharing a core pass 1024 cache-hot blocks at each yield.
 *
 * Figures: ops_per_sec = blocks allocated+freed per second, all pairs
 * together; peak_rss_kib = VmHWM, which shows remote frees that are parked
 * instead of reused.  At most pairs * ring blocks are in flight (defaults:
 * 2 * 1024 * 520 B ~ 1 MiB).
 *
 * usage: cross_thread [pairs=2] [blocks=10000000] [min=16] [max=1024]
 *                     [ring=1024] [seed=1] [pin=1] (blocks are per producer)
 */
#define _GNU_SOURCE
#include "bench.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

typedef struct {
    void *p;
    size_t size;
} item_t;

typedef struct {
    _Alignas(64) atomic_size_t head; /* written by the consumer */
    _Alignas(64) atomic_size_t tail; /* written by the producer */
    _Alignas(64) item_t *slot;
    size_t mask;
    int id, failed;
    pthread_t prod, cons;
} pair_t;

static size_t g_min, g_max;
static uint64_t g_blocks, g_seed;

/* Sets attr to run a thread on the k-th processor (modulo their count) of cpus. */
static void pin_attr(pthread_attr_t *attr, const cpu_set_t *cpus, int k)
{
    cpu_set_t one = bench_cpu_nth(cpus, k);
    if (CPU_COUNT(&one)) pthread_attr_setaffinity_np(attr, sizeof one, &one);
}

static void *producer(void *arg)
{
    pair_t *q = arg;
    uint64_t rng = rng_seed(g_seed, (uint64_t)q->id);
    size_t tail = 0;
    for (uint64_t i = 0; i < g_blocks; i++) {
        size_t sz = rng_range(&rng, g_min, g_max);
        void *p = malloc(sz);
        if (!p) { /* a NULL item tells the consumer to fail */
            q->failed = 1;
            sz = 0;
        } else {
            block_fill(p, sz, ((uint64_t)q->id << 48) + i + 1);
        }
        while (tail - atomic_load_explicit(&q->head, memory_order_acquire) > q->mask) sched_yield();
        q->slot[tail & q->mask] = (item_t){p, sz};
        atomic_store_explicit(&q->tail, ++tail, memory_order_release);
        if (!p) break;
    }
    return NULL;
}

static void *consumer(void *arg)
{
    pair_t *q = arg;
    size_t head = 0;
    int ok = 1;
    for (uint64_t i = 0; i < g_blocks; i++) {
        while (atomic_load_explicit(&q->tail, memory_order_acquire) == head) sched_yield();
        item_t it = q->slot[head & q->mask];
        atomic_store_explicit(&q->head, ++head, memory_order_release);
        if (!it.p) {
            ok = 0;
            break;
        }
        ok &= block_check(it.p, it.size, ((uint64_t)q->id << 48) + i + 1);
        free(it.p);
    }
    if (!ok) q->failed = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_args(argc, argv, "pairs blocks min max ring seed pin");
    int pairs = (int)arg_u("pairs", 2);
    g_blocks = arg_u("blocks", 10000000);
    g_min = arg_u("min", 16);
    g_max = arg_u("max", 1024);
    size_t ring = arg_u("ring", 1024);
    g_seed = arg_u("seed", 1);
    int pin = (int)arg_u("pin", 1);
    cpu_set_t cpus;
    if (pin && (sched_getaffinity(0, sizeof cpus, &cpus) != 0 || CPU_COUNT(&cpus) < 2)) pin = 0;
    if (pairs < 1 || g_min < 1 || g_max < g_min || ring < 2 || (ring & (ring - 1))) {
        fprintf(stderr, "cross_thread: bad parameters (ring must be a power of two)\n");
        return 2;
    }
    pair_t *q = aligned_alloc(64, sizeof(pair_t) * (size_t)pairs);
    if (!q) return 1;
    memset(q, 0, sizeof(pair_t) * (size_t)pairs);
    int ok = 1;
    for (int i = 0; i < pairs; i++) {
        q[i].id = i;
        q[i].mask = ring - 1;
        if (!(q[i].slot = calloc(ring, sizeof(item_t)))) return 1;
    }
    double t0 = now_sec();
    for (int i = 0; i < pairs; i++) {
        pthread_attr_t ac, ap;
        pthread_attr_init(&ac);
        pthread_attr_init(&ap);
        if (pin) {
            pin_attr(&ap, &cpus, 2 * i);
            pin_attr(&ac, &cpus, 2 * i + 1);
        }
        int bad = pthread_create(&q[i].cons, &ac, consumer, &q[i]) != 0 ||
                  pthread_create(&q[i].prod, &ap, producer, &q[i]) != 0;
        pthread_attr_destroy(&ac);
        pthread_attr_destroy(&ap);
        if (bad) {
            fprintf(stderr, "cross_thread: pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < pairs; i++) {
        pthread_join(q[i].prod, NULL);
        pthread_join(q[i].cons, NULL);
        ok &= !q[i].failed;
        free(q[i].slot);
    }
    double elapsed = now_sec() - t0;
    free(q);
    uint64_t ops = g_blocks * (uint64_t)pairs;
    printf("bench=cross-thread pairs=%d blocks=%llu min=%zu max=%zu ring=%zu pin=%d seconds=%.3f ops=%llu "
           "ops_per_sec=%.0f peak_rss_kib=%ld",
           pairs, (unsigned long long)g_blocks, g_min, g_max, ring, pin, elapsed, (unsigned long long)ops,
           ops / elapsed, hwm_kib());
    return bench_finish(ok);
}
