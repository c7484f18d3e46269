/* larson.c - server simulation after Larson & Krishnan (1998).
 *
 * Each of `threads` lanes owns an array of `chunks` blocks.  A worker thread
 * repeatedly picks a random slot, verifies and frees its block and allocates
 * a new one of random size in [min, max]; after rounds*chunks replacements it
 * starts a new thread that inherits the array (so blocks allocated by one
 * thread are freed by another, the way server connections migrate) and exits.
 * After `seconds` the lanes stop, everything is verified and freed.
 *
 * Figure: ops_per_sec = replacements (one free + one malloc) per second, all
 * threads together.  Working set: threads * chunks blocks of (min+max)/2 bytes
 * on average (defaults: 4 * 1000 * 516 B ~ 2 MiB).
 *
 * usage: larson [seconds=2] [min=8] [max=1024] [chunks=1000] [rounds=100]
 *               [seed=1] [threads=4]
 */
#include "bench.h"
#include <pthread.h>
#include <stdatomic.h>

/* A lane has a cache line of its own, and its worker keeps the per-step state
 * (rng, counters) in locals: lanes that share a line measured the allocator's
 * placement of this array (see worker_t in bench.h). */
typedef struct {
    _Alignas(64) void **ptr;
    size_t *size;
    uint64_t *tag;
    uint64_t rng, ops, next_tag;
    int lane, failed;
} lane_t;

static size_t g_min, g_max, g_chunks;
static uint64_t g_rounds;
static atomic_int g_stop, g_lanes_done;

static void *worker(void *arg)
{
    lane_t *L = arg;
    uint64_t n = g_rounds * g_chunks, rng = L->rng, ops = L->ops, next_tag = L->next_tag;
    for (uint64_t i = 0; i < n && !atomic_load_explicit(&g_stop, memory_order_relaxed); i++) {
        size_t v = (size_t)(rng_next(&rng) % g_chunks);
        if (!block_check(L->ptr[v], L->size[v], L->tag[v])) {
            L->failed = 1;
            atomic_store(&g_stop, 1);
            break;
        }
        free(L->ptr[v]);
        size_t sz = rng_range(&rng, g_min, g_max);
        void *p = malloc(sz);
        if (!p) {
            L->failed = 1;
            atomic_store(&g_stop, 1);
            break;
        }
        L->tag[v] = next_tag++;
        block_fill(p, sz, L->tag[v]);
        L->ptr[v] = p;
        L->size[v] = sz;
        ops++;
    }
    L->rng = rng;
    L->ops = ops;
    L->next_tag = next_tag;
    pthread_t next;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (atomic_load(&g_stop) || pthread_create(&next, &at, worker, L) != 0)
        atomic_fetch_add(&g_lanes_done, 1); /* this lane is finished */
    pthread_attr_destroy(&at);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_args(argc, argv, "seconds min max chunks rounds seed threads");
    double seconds = arg_f("seconds", 2);
    g_min = arg_u("min", 8);
    g_max = arg_u("max", 1024);
    g_chunks = arg_u("chunks", 1000);
    g_rounds = arg_u("rounds", 100);
    uint64_t seed = arg_u("seed", 1);
    int threads = (int)arg_u("threads", 4);
    if (g_min < 1 || g_max < g_min || g_chunks < 1 || threads < 1 || g_rounds < 1) {
        fprintf(stderr, "larson: bad parameters\n");
        return 2;
    }

    lane_t *lanes = aligned_alloc(64, (size_t)threads * sizeof *lanes);
    int ok = lanes != NULL;
    if (ok) memset(lanes, 0, (size_t)threads * sizeof *lanes);
    for (int t = 0; ok && t < threads; t++) {
        lane_t *L = &lanes[t];
        L->lane = t;
        L->rng = rng_seed(seed, (uint64_t)t);
        L->next_tag = ((uint64_t)t << 48) + 1;
        L->ptr = malloc(g_chunks * sizeof *L->ptr);
        L->size = malloc(g_chunks * sizeof *L->size);
        L->tag = malloc(g_chunks * sizeof *L->tag);
        ok = L->ptr && L->size && L->tag;
        for (size_t i = 0; ok && i < g_chunks; i++) { /* initial fill */
            L->size[i] = rng_range(&L->rng, g_min, g_max);
            L->tag[i] = L->next_tag++;
            ok = (L->ptr[i] = malloc(L->size[i])) != NULL;
            if (ok) block_fill(L->ptr[i], L->size[i], L->tag[i]);
        }
    }
    if (!ok) {
        printf("bench=larson error=initial-allocation-failed");
        return bench_finish(0);
    }

    double t0 = now_sec();
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int started = 0;
    for (int t = 0; t < threads; t++) {
        pthread_t th;
        if (pthread_create(&th, &at, worker, &lanes[t]) == 0) started++;
    }
    atomic_fetch_add(&g_lanes_done, threads - started);
    while (now_sec() - t0 < seconds && !atomic_load(&g_stop)) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&g_stop, 1);
    while (atomic_load(&g_lanes_done) < threads) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    double elapsed = now_sec() - t0;

    uint64_t ops = 0;
    ok = started == threads;
    for (int t = 0; t < threads; t++) {
        lane_t *L = &lanes[t];
        ops += L->ops;
        ok &= !L->failed;
        for (size_t i = 0; i < g_chunks; i++) {
            ok &= block_check(L->ptr[i], L->size[i], L->tag[i]);
            free(L->ptr[i]);
        }
        free(L->ptr);
        free(L->size);
        free(L->tag);
    }
    free(lanes);
    printf("bench=larson threads=%d min=%zu max=%zu chunks=%zu rounds=%llu seconds=%.2f ops=%llu ops_per_sec=%.0f",
           threads, g_min, g_max, g_chunks, (unsigned long long)g_rounds, elapsed,
           (unsigned long long)ops, ops / elapsed);
    return bench_finish(ok);
}
