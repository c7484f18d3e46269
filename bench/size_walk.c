/* size_walk.c - arrays of blocks whose sizes walk up and down a range, a
 * share of them freed by another thread.
 *
 * The shape of sh6bench and sh8bench.  Each of `threads` workers runs
 * `rounds` rounds over an array of `count` blocks.  Sizes walk from min to
 * max and back in steps of `step` bytes, one step a block, so that
 * neighbours in time are neighbours in size and every class comes round
 * again and again.  A round: first the blocks that the previous worker
 * handed over are checked and freed (remote frees); then `count` blocks are
 * allocated, every other one from the end is freed and replaced, the first
 * half is freed and allocated again; last, `hand` percent of the array
 * (chosen at random) goes to the next worker's mailbox and the rest is freed
 * from the end.  A mailbox holds at most 4 * count blocks; what does not fit
 * is freed by its owner.
 *
 * What it exposes: with hand > 0 every thread frees, in batches of
 * thousands, blocks of every class that another thread allocated, and
 * allocates as many of the same classes itself.  An allocator that sends
 * each such block back to its owner pays for it again when the owner takes
 * it: a cache miss where it links the block, and another where it walks
 * the list it put it on.  One that keeps it in the freeing thread's cache
 * hands it out warm.
 *
 * Figure: ops_per_sec = mallocs and frees (one op each) per second, all
 * workers together (the blocks left in the mailboxes at the end are freed
 * after the clock stops, uncounted).
 *
 * usage: size_walk [threads=2] [rounds=2000] [count=1000] [min=1]
 *                  [max=4000] [step=13] [hand=90] [seed=1]
 */
#include "bench.h"

static struct {
    uint64_t threads, rounds, count, min, max, step, hand, seed;
} P;

typedef struct {
    pthread_mutex_t lock;
    block_t *block;
    size_t n;
    char pad[64];
} mailbox_t;
static mailbox_t *boxes;

typedef struct {
    size_t size;
    int up;
} walk_t;

static size_t walk_next(walk_t *w)
{
    size_t s = w->size;
    if (w->up && w->size + P.step > P.max) w->up = 0;
    else if (!w->up && w->size < P.min + P.step) w->up = 1;
    w->size = w->up ? w->size + P.step : w->size - P.step;
    return s;
}

/* One op each: a block allocated, its first and last bytes written; the
 * same bytes checked and the block freed.  Programs of this shape (the
 * two benchmarks time malloc and free alone) hardly touch their blocks:
 * what an allocator reads and writes of them is its own cost. */
static void get(worker_t *w, block_t *b, size_t size, uint64_t *tag)
{
    b->size = size;
    b->tag = (*tag)++;
    unsigned char *c = b->p = malloc(size);
    w->ops++;
    if (!c) {
        w->failed = 1;
        return;
    }
    c[size - 1] = tag_byte(~b->tag);
    c[0] = tag_byte(b->tag);
}
static void put(worker_t *w, block_t *b)
{
    const unsigned char *c = b->p;
    if (!c) return; /* a malloc that failed (w->failed set) */
    w->failed |= c[0] != tag_byte(b->tag) || (b->size > 1 && c[b->size - 1] != tag_byte(~b->tag));
    free(b->p);
    b->p = NULL;
    w->ops++;
}

/* Frees what the previous worker handed over. */
static void drain(worker_t *w, block_t *tmp)
{
    mailbox_t *m = &boxes[w->id];
    pthread_mutex_lock(&m->lock);
    size_t n = m->n;
    memcpy(tmp, m->block, n * sizeof *tmp);
    m->n = 0;
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < n; i++) put(w, &tmp[i]);
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    size_t n = P.count, cap = 4 * n;
    block_t *a = calloc(n, sizeof *a), *out = calloc(n, sizeof *out), *tmp = calloc(cap, sizeof *tmp);
    uint64_t rng = rng_seed(P.seed, (uint64_t)w->id), tag = (uint64_t)w->id << 48;
    walk_t walk = {P.min + (size_t)w->id * 37 % (P.max - P.min + 1), 1};
    if (!a || !out || !tmp) {
        w->failed = 1;
        return NULL;
    }
    for (uint64_t r = 0; r < P.rounds && !w->failed; r++) {
        drain(w, tmp);
        for (size_t i = 0; i < n; i++) get(w, &a[i], walk_next(&walk), &tag);
        for (size_t i = n; i > 0; i = i > 2 ? i - 2 : 0) { /* every other one, from the end */
            put(w, &a[i - 1]);
            get(w, &a[i - 1], walk_next(&walk), &tag);
        }
        for (size_t i = 0; i < n / 2; i++) put(w, &a[i]);
        for (size_t i = 0; i < n / 2; i++) get(w, &a[i], walk_next(&walk), &tag);
        size_t handed = 0;
        for (size_t i = n; i-- > 0;) {
            if (P.threads > 1 && rng_next(&rng) % 100 < P.hand) {
                out[handed++] = a[i];
                a[i].p = NULL;
            } else {
                put(w, &a[i]);
            }
        }
        mailbox_t *m = &boxes[(w->id + 1) % P.threads];
        pthread_mutex_lock(&m->lock);
        size_t k = handed < cap - m->n ? handed : cap - m->n;
        memcpy(m->block + m->n, out, k * sizeof *out);
        m->n += k;
        pthread_mutex_unlock(&m->lock);
        for (size_t i = k; i < handed; i++) put(w, &out[i]);
    }
    free(a);
    free(out);
    free(tmp);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "threads=2 rounds=2000 count=1000 min=1 max=4000 step=13 hand=90 seed=1", &P.threads,
                 &P.rounds, &P.count, &P.min, &P.max, &P.step, &P.hand, &P.seed);
    arg_need(P.threads >= 1 && P.threads <= 64 && P.rounds >= 1 && P.count >= 2 && P.min >= 1 && P.max > P.min &&
                 P.step >= 1 && P.step <= P.max - P.min && P.hand <= 100,
             "1 <= threads <= 64, rounds >= 1, count >= 2, 1 <= min < max, 1 <= step <= max - min, hand <= 100");
    boxes = calloc(P.threads, sizeof *boxes);
    if (!boxes) return 2;
    for (uint64_t i = 0; i < P.threads; i++) {
        pthread_mutex_init(&boxes[i].lock, NULL);
        if (!(boxes[i].block = calloc(4 * P.count, sizeof(block_t)))) return 2;
    }
    uint64_t ops;
    double secs;
    int ok = run_workers((int)P.threads, worker, &ops, &secs);
    worker_t rest = {0}; /* what the last rounds handed over */
    for (uint64_t i = 0; i < P.threads; i++)
        for (size_t k = 0; k < boxes[i].n; k++) put(&rest, &boxes[i].block[k]);
    ok &= !rest.failed;
    printf("bench=size_walk threads=%" PRIu64 " rounds=%" PRIu64 " count=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64
           " step=%" PRIu64 " hand=%" PRIu64 " seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f",
           P.threads, P.rounds, P.count, P.min, P.max, P.step, P.hand, secs, ops, (double)ops / secs);
    return bench_finish(ok);
}
