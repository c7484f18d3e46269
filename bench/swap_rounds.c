/* swap_rounds.c - threads started each round that swap blocks through a
 * shared array and grow their own arrays with realloc.
 *
 * `rounds` times, the main thread starts `threads` threads and joins them.
 * Each thread makes `allocs` blocks and `retains` more: sizes of 1-64 words,
 * one in 100 forty times that, one in 10,000 a thousand times; each block is
 * filled with a pattern of its size. Blocks it makes go on an array that it
 * grows by doubling with realloc (its other list, of retained blocks, is
 * sized once). After each block it frees a random block of its array one
 * time in 4, and one time in 8 swaps a random one with a random slot of a
 * shared array of `slots` blocks (an atomic exchange): it then holds a
 * block another thread made, often one whose thread has exited. At its end
 * it checks and frees what it holds. The shared array is freed at the end.
 * The shape of mimalloc's stress test (mstress): a thread pool's tasks.
 *
 * What it exposes: blocks freed by threads that did not make them, whose
 * makers are gone; heaps of exited threads taken over by new ones; buffers
 * grown past the Large sizes each round; memory returned and faulted in
 * again when a thread ends and the next begins.
 *
 * Figure: ops_per_sec = blocks made per second over the whole run, thread
 * creation and joining included.
 *
 * usage: swap_rounds [rounds=50] [threads=4] [allocs=25000] [retains=500]
 *                    [slots=1000] [seed=1]
 */
#include "bench.h"
#include <stdatomic.h>

static struct {
    uint64_t rounds, threads, allocs, retains, slots, seed;
} P;

static _Atomic(uintptr_t *) *shared;
static atomic_int failed;

/* A block of `words` words, each holding words ^ its index. */
static uintptr_t *make(uint64_t *rng)
{
    size_t words = rng_range(rng, 1, 64);
    if (rng_next(rng) % 100 == 0) words *= 40;
    if (rng_next(rng) % 10000 == 0) words *= 1000;
    uintptr_t *p = malloc(words * sizeof *p);
    if (!p) return NULL;
    p[0] = words;
    for (size_t i = 1; i < words; i++) p[i] = words ^ i;
    return p;
}

static int check_free(uintptr_t *p)
{
    if (!p) return 1;
    size_t words = p[0];
    int ok = words >= 1 && words <= 64 * 40 * 1000;
    for (size_t i = 1; ok && i < words; i++) ok = p[i] == (words ^ i);
    free(p);
    return ok;
}

static void *task(void *arg)
{
    uint64_t rng = rng_seed(P.seed, (uintptr_t)arg);
    size_t cap = 64, n = 0, kept = 0;
    uintptr_t **data = malloc(cap * sizeof *data), **retained = malloc((P.retains + 1) * sizeof *retained);
    int ok = data && retained;
    uint64_t allocs = P.allocs, retains = P.retains;
    while (ok && (allocs > 0 || retains > 0)) {
        if (retains == 0 || (allocs > 0 && rng_next(&rng) % 2 == 0)) {
            if (n == cap) {
                uintptr_t **grown = realloc(data, 2 * cap * sizeof *data);
                if (!grown) {
                    ok = 0;
                    break;
                }
                data = grown;
                cap *= 2;
            }
            ok = (data[n++] = make(&rng)) != NULL;
            allocs--;
        } else {
            ok = (retained[kept++] = make(&rng)) != NULL;
            retains--;
        }
        if (n > 0 && rng_next(&rng) % 4 == 0) {
            size_t i = rng_next(&rng) % n;
            ok &= check_free(data[i]);
            data[i] = NULL;
        }
        if (n > 0 && rng_next(&rng) % 8 == 0) {
            size_t i = rng_next(&rng) % n, s = rng_next(&rng) % P.slots;
            data[i] = atomic_exchange(&shared[s], data[i]);
        }
    }
    for (size_t i = 0; data && i < n; i++) ok &= check_free(data[i]);
    for (size_t i = 0; retained && i < kept; i++) ok &= check_free(retained[i]);
    free(data);
    free(retained);
    if (!ok) atomic_store(&failed, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "rounds=50 threads=4 allocs=25000 retains=500 slots=1000 seed=1", &P.rounds, &P.threads,
                 &P.allocs, &P.retains, &P.slots, &P.seed);
    arg_need(P.rounds >= 1 && P.threads >= 1 && P.threads <= 1024 && P.slots >= 1,
             "rounds, slots >= 1, 1 <= threads <= 1024");
    shared = calloc(P.slots, sizeof *shared);
    pthread_t th[1024];
    if (!shared) return 1;
    double t0 = now_sec();
    for (uint64_t r = 0; r < P.rounds && !atomic_load(&failed); r++) {
        uint64_t started = 0;
        for (; started < P.threads; started++)
            if (pthread_create(&th[started], NULL, task, (void *)(uintptr_t)(r * P.threads + started + 1)) != 0) {
                atomic_store(&failed, 1);
                break;
            }
        for (uint64_t t = 0; t < started; t++) pthread_join(th[t], NULL);
    }
    double secs = now_sec() - t0;
    int ok = !atomic_load(&failed);
    for (uint64_t s = 0; s < P.slots; s++) ok &= check_free(atomic_exchange(&shared[s], NULL));
    free(shared);
    uint64_t ops = P.rounds * P.threads * (P.allocs + P.retains);
    printf("bench=swap_rounds rounds=%llu threads=%llu allocs=%llu retains=%llu slots=%llu seconds=%.3f ops=%llu "
           "ops_per_sec=%.0f",
           (unsigned long long)P.rounds, (unsigned long long)P.threads, (unsigned long long)P.allocs,
           (unsigned long long)P.retains, (unsigned long long)P.slots, secs, (unsigned long long)ops,
           (double)ops / secs);
    return bench_finish(ok);
}
