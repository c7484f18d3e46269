/* handoff.c - producers fill batches of blocks, consumers free them.
 *
 * `pairs` producer threads each make `batches` batches of `per` blocks of
 * random size in [min, max] (each filled) and push every batch (a heap array
 * of the block pointers) onto one queue that all threads share, under a
 * mutex with two condition variables; the queue holds at most `depth`
 * batches. `pairs` consumer threads pop batches, check and free each block,
 * then the array. The shape of xmalloc-test, and of a server whose workers
 * free the requests an acceptor thread allocated.
 *
 * What it exposes: with more threads than processors, a producer loses its
 * processor, or sleeps on a full queue, while the consumers empty its slabs
 * one after another, far from the place it fills. An allocator that takes
 * an owner it has not heard from for a few milliseconds for one that has
 * gone, and hands its emptied pages back to the OS, faults them in again at
 * the producer's next batches: time in the kernel, and system calls (the
 * bench counts them). One that keeps every emptied slab shows it as peak
 * RSS (at most depth + 2 * pairs batches are in flight).
 *
 * Each batch carries the seed its sizes came from, so that a consumer
 * replays them to check every block whole.
 *
 * Figure: ops_per_sec = blocks allocated, passed and freed per second.
 *
 * usage: handoff [pairs=2] [batches=1000] [per=4096] [depth=100] [min=64]
 *                [max=64] [seed=1]
 */
#include "bench.h"

typedef struct batch_s {
    struct batch_s *next;
    uint64_t seed, tag; /* its sizes' random stream; the first block's tag */
    void *block[];
} batch_t;

static struct {
    uint64_t pairs, batches, per, depth, min, max, seed;
} P;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t filled, drained;
    batch_t *head;
    uint64_t queued, taken, total; /* batches on the queue, popped, to pop in all */
} Q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0};

static void queue_push(batch_t *b)
{
    pthread_mutex_lock(&Q.lock);
    while (Q.queued >= P.depth) pthread_cond_wait(&Q.drained, &Q.lock);
    b->next = Q.head;
    Q.head = b;
    Q.queued++;
    pthread_cond_signal(&Q.filled);
    pthread_mutex_unlock(&Q.lock);
}

/* The next batch, or NULL once every batch was taken. */
static batch_t *queue_pop(void)
{
    pthread_mutex_lock(&Q.lock);
    while (Q.head == NULL && Q.taken < Q.total) pthread_cond_wait(&Q.filled, &Q.lock);
    batch_t *b = Q.head;
    if (b) {
        Q.head = b->next;
        Q.queued--;
        if (++Q.taken == Q.total) pthread_cond_broadcast(&Q.filled); /* the other consumers stop */
        pthread_cond_signal(&Q.drained);
    }
    pthread_mutex_unlock(&Q.lock);
    return b;
}

static void out_of_memory(void)
{
    printf("bench=handoff error=malloc-null");
    exit(bench_finish(0));
}

static void *producer(void *arg)
{
    worker_t *w = arg;
    uint64_t rng = rng_seed(P.seed, (uint64_t)w->id), tag = (uint64_t)w->id << 40;
    for (uint64_t k = 0; k < P.batches; k++) {
        batch_t *b = malloc(sizeof *b + P.per * sizeof(void *));
        if (!b) out_of_memory(); /* the consumers would wait for the batch for ever */
        b->seed = rng_next(&rng);
        b->tag = tag;
        uint64_t sizes = b->seed;
        for (uint64_t i = 0; i < P.per; i++) {
            size_t n = rng_range(&sizes, P.min, P.max);
            if (!(b->block[i] = malloc(n))) out_of_memory();
            block_fill(b->block[i], n, tag++);
        }
        queue_push(b);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    worker_t *w = arg;
    for (batch_t *b; (b = queue_pop()) != NULL;) {
        uint64_t sizes = b->seed;
        for (uint64_t i = 0; i < P.per; i++) {
            size_t n = rng_range(&sizes, P.min, P.max);
            if (!block_check(b->block[i], n, b->tag + i)) w->failed = 1;
            free(b->block[i]);
        }
        free(b);
        w->ops += P.per;
    }
    return NULL;
}

/* Even workers consume, odd ones produce: pair i is workers 2i and 2i + 1.
 * The consumers count the blocks. */
static void *worker(void *arg)
{
    worker_t *w = arg;
    int produces = w->id % 2;
    w->id /= 2;
    return produces ? producer(w) : consumer(w);
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "pairs=2 batches=1000 per=4096 depth=100 min=64 max=64 seed=1", &P.pairs,
                 &P.batches, &P.per, &P.depth, &P.min, &P.max, &P.seed);
    arg_need(P.pairs >= 1 && P.pairs <= 64 && P.batches >= 1 && P.per >= 1 && P.depth >= 1 && P.min >= 8 &&
                 P.max >= P.min,
             "1 <= pairs <= 64, batches, per, depth >= 1, 8 <= min <= max");
    Q.total = P.pairs * P.batches;
    uint64_t ops;
    double secs;
    int ok = run_workers((int)(2 * P.pairs), worker, &ops, &secs);
    ok &= ops == P.pairs * P.batches * P.per;
    printf("bench=handoff pairs=%" PRIu64 " batches=%" PRIu64 " per=%" PRIu64 " depth=%" PRIu64 " min=%" PRIu64
           " max=%" PRIu64 " seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f",
           P.pairs, P.batches, P.per, P.depth, P.min, P.max, secs, ops, (double)ops / secs);
    return bench_finish(ok);
}
