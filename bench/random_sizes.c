/* random_sizes.c - random replacement over a wide size range, at a chosen
 * heap size.
 *
 * Each thread owns `slots` slots, all filled before the clock starts with
 * blocks of uniform random size in [min, max] (default 16 B-256 KiB).  Each
 * operation picks a random slot, checks its block, frees it and allocates a
 * new one of random size.  Only the first and the last byte of a block are
 * written (and checked before the free): a program that keeps large buffers
 * it seldom fills.  Resident memory therefore shows what the allocator
 * itself touches (headers, zeroing, huge pages), not the data.
 *
 * The heap size can be given instead of the slot count: live_mb=M makes
 * slots = M MiB / threads / mean size, so the same shape runs at 16 MiB and
 * at 4 GiB live.  What should not grow with the heap is the time per
 * operation: lookups that scan, metadata that misses the cache, or
 * fragmentation that keeps asking the kernel for more show up as ns/op
 * rising with live_mb.
 *
 * Figures: ops_per_sec = replacements (one free + one malloc) per second, all
 * threads together, over the timed loop only (not the fill or the teardown);
 * ns_per_op = the slowest thread's loop time / its operations; live_mb =
 * requested bytes held (virtual: most of it is never touched).
 *
 * align=A allocates with posix_memalign(A) instead of malloc (and fails a
 * block not aligned so): buffers for direct I/O and SIMD.
 *
 * usage: random_sizes [threads=1] [slots=4096] [live_mb=0] [ops=1000000]
 *                     [min=16] [max=262144] [seed=1] [align=0]   (slots, ops per thread)
 */
#include "bench.h"

static struct {
    uint64_t threads, slots, live_mb, ops, min, max, seed, align;
} P;

/* The first and last byte of a block carry bytes derived from its tag. */
static void edge_fill(block_t *b)
{
    unsigned char *c = b->p;
    c[0] = tag_byte(b->tag);
    c[b->size - 1] = tag_byte(~b->tag);
}

static int edge_drop(block_t *b)
{
    const unsigned char *c = b->p;
    int ok = c[0] == tag_byte(b->tag) && c[b->size - 1] == tag_byte(~b->tag);
    free(b->p);
    b->p = NULL;
    return ok;
}

static int edge_new(block_t *b, size_t size, uint64_t tag)
{
    b->size = size;
    b->tag = tag;
    if (P.align ? posix_memalign(&b->p, P.align, size) != 0 : !(b->p = malloc(size))) return 0;
    if ((uintptr_t)b->p & (P.align ? P.align - 1 : 0)) return 0; /* not aligned as asked: a failure */
    edge_fill(b);
    return 1;
}

static void *run(void *arg)
{
    worker_t *w = arg;
    block_t *slot = calloc(P.slots, sizeof *slot);
    uint64_t rng = rng_seed(P.seed, (uint64_t)w->id), next = ((uint64_t)w->id << 48) + 1;
    int ok = slot != NULL;
    for (size_t v = 0; ok && v < P.slots; v++) ok = edge_new(&slot[v], rng_range(&rng, P.min, P.max), next++);
    double t0 = now_sec();
    uint64_t i = 0;
    for (; ok && i < P.ops; i++) {
        block_t *b = &slot[rng_next(&rng) % P.slots];
        ok = edge_drop(b) && edge_new(b, rng_range(&rng, P.min, P.max), next++);
    }
    w->secs = now_sec() - t0;
    w->ops = i;
    for (size_t v = 0; slot && v < P.slots; v++)
        if (slot[v].p && !edge_drop(&slot[v])) ok = 0;
    free(slot);
    w->failed = !ok;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "threads=1 slots=4096 live_mb=0 ops=1000000 min=16 max=262144 seed=1 align=0", &P.threads,
                 &P.slots, &P.live_mb, &P.ops, &P.min, &P.max, &P.seed, &P.align);
    arg_need(P.threads >= 1 && P.min >= 1 && P.max >= P.min, "threads >= 1, 1 <= min <= max");
    arg_need(P.align == 0 || (P.align >= sizeof(void *) && (P.align & (P.align - 1)) == 0),
             "align 0 (malloc) or a power of two of a pointer's size or more (posix_memalign)");
    double mean = (P.min + P.max) / 2.0;
    if (P.live_mb) P.slots = (uint64_t)(P.live_mb * 1048576.0 / P.threads / mean);
    arg_need(P.slots >= 1, "live_mb too small for one block a thread");
    uint64_t ops;
    double secs;
    int ok = run_workers((int)P.threads, run, &ops, &secs);
    printf("bench=random-sizes threads=%" PRIu64 " slots=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64
           " align=%" PRIu64 " live_mb=%.0f seconds=%.3f ops=%" PRIu64 " ns_per_op=%.1f ops_per_sec=%.0f",
           P.threads, P.slots, P.min, P.max, P.align, P.slots * P.threads * mean / 1048576.0, secs, ops,
           secs * 1e9 * P.threads / (ops ? ops : 1), ops / secs);
    return bench_finish(ok);
}
