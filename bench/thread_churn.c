/* thread_churn.c - short-lived threads whose blocks outlive them.
 *
 * `rounds` times, the main thread starts `threads` threads and joins them.
 * Each thread first takes up to `handed` blocks from a global pool (blocks
 * that threads of earlier rounds allocated and gave up: their owners have
 * exited), checks and frees them; then allocates `blocks` blocks of random
 * size in [min, max], frees all but `handed` of them in random order, and
 * puts those in the pool before it exits.  The pool is a mutex-protected
 * stack.  At the end the main thread empties it.
 *
 * What it exposes: per-thread state that is costly to set up or tear down,
 * memory of exited threads that is never reused (resident memory grows with
 * the number of threads ever started, not with the live set), and frees of
 * blocks whose owning thread is gone.
 *
 * Figure: ops_per_sec = blocks allocated (each also freed) per second over
 * the whole run, thread creation and joining included.  Live at any time:
 * about threads * blocks plus the pool (defaults: 8 * 2000 * 520 B ~ 8 MiB
 * plus 8 * 200 blocks).
 *
 * usage: thread_churn [rounds=100] [threads=8] [blocks=2000] [handed=200]
 *                     [min=16] [max=1024] [seed=1]
 */
#include "bench.h"

static struct {
    uint64_t rounds, threads, blocks, handed, min, max, seed;
} P;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static block_t *pool;
static size_t pool_n, pool_cap;

typedef struct {
    uint64_t stream; /* this thread's random stream and tag space */
    int failed;
} job_t;

static int pool_put(const block_t *b, size_t n)
{
    pthread_mutex_lock(&pool_lock);
    int ok = pool_n + n <= pool_cap;
    if (ok) {
        memcpy(pool + pool_n, b, n * sizeof *b);
        pool_n += n;
    }
    pthread_mutex_unlock(&pool_lock);
    return ok;
}

static size_t pool_take(block_t *b, size_t most)
{
    pthread_mutex_lock(&pool_lock);
    size_t n = pool_n < most ? pool_n : most;
    pool_n -= n;
    memcpy(b, pool + pool_n, n * sizeof *b);
    pthread_mutex_unlock(&pool_lock);
    return n;
}

static void *run(void *arg)
{
    job_t *j = arg;
    uint64_t rng = rng_seed(P.seed, j->stream), tag = j->stream << 32;
    block_t *b = malloc(P.blocks * sizeof *b);
    int ok = b != NULL;
    size_t got = ok ? pool_take(b, P.handed) : 0;
    for (size_t i = 0; i < got; i++) ok &= block_drop(&b[i]);
    for (size_t i = 0; ok && i < P.blocks; i++) ok = block_new(&b[i], rng_range(&rng, P.min, P.max), ++tag);
    /* free all but the last P.handed in random order: swap a random live one to the end of the live range */
    for (size_t live = P.blocks; ok && live > P.handed; live--) {
        size_t k = (size_t)(rng_next(&rng) % live);
        block_t t = b[k];
        b[k] = b[live - 1];
        ok &= block_drop(&t);
    }
    j->failed = !(ok && pool_put(b, P.handed));
    free(b);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "rounds=100 threads=8 blocks=2000 handed=200 min=16 max=1024 seed=1", &P.rounds,
                 &P.threads, &P.blocks, &P.handed, &P.min, &P.max, &P.seed);
    arg_need(P.threads >= 1 && P.handed <= P.blocks && P.min >= 1 && P.max >= P.min,
             "threads >= 1, handed <= blocks, 1 <= min <= max");
    /* a thread puts `handed` blocks only after taking, and takes `handed` whenever
     * the pool has them: it never holds more than one round's worth */
    pool_cap = P.threads * P.handed;
    pool = malloc(pool_cap * sizeof *pool);
    job_t *job = calloc(P.threads, sizeof *job);
    pthread_t *th = calloc(P.threads, sizeof *th);
    if (!pool || !job || !th) return 1;
    int ok = 1;
    double t0 = now_sec();
    for (uint64_t r = 0; ok && r < P.rounds; r++) {
        for (uint64_t t = 0; t < P.threads; t++) {
            job[t].stream = r * P.threads + t + 1;
            if (pthread_create(&th[t], NULL, run, &job[t]) != 0) {
                fprintf(stderr, "thread_churn: pthread_create failed\n");
                return 1;
            }
        }
        for (uint64_t t = 0; t < P.threads; t++) {
            pthread_join(th[t], NULL);
            ok &= !job[t].failed;
        }
    }
    block_t b;
    while (pool_take(&b, 1)) ok &= block_drop(&b);
    double elapsed = now_sec() - t0;
    uint64_t ops = P.rounds * P.threads * P.blocks;
    free(pool);
    free(job);
    free(th);
    printf("bench=thread-churn rounds=%" PRIu64 " threads=%" PRIu64 " blocks=%" PRIu64 " handed=%" PRIu64
           " min=%" PRIu64 " max=%" PRIu64 " seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f",
           P.rounds, P.threads, P.blocks, P.handed, P.min, P.max, elapsed, ops, ops / elapsed);
    return bench_finish(ok);
}
