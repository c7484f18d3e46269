/* slow_leak.c - a live set that grows steadily under churn.
 *
 * A window of `window` slots holds blocks of random size in [min, max]
 * (default 16 B-4 KiB).  Each operation picks a random slot; its block is
 * checked and freed, except one time in `keep`, when it is kept for good
 * (moved to a list that is only freed at exit), and a new block takes the
 * slot.  The kept blocks were born among short-lived neighbours, so they lie
 * scattered over memory the churn keeps reusing: a long-running server's
 * caches and leaks.  An allocator that cannot reuse the space around them
 * grows resident memory faster than the live set.
 *
 * Figures: ops_per_sec = operations (one malloc, and a free unless kept) per
 * second; live_kib = bytes the program holds at the end (window and kept
 * blocks); rss_kib = resident set less file pages then (statm), base_kib =
 * before the first allocation (after the bookkeeping arrays, mapped outside
 * the allocator, were touched); overhead_pct = (rss - base - live) / live.
 *
 * usage: slow_leak [ops=4000000] [window=4096] [keep=64] [min=16] [max=4096]
 *                  [seed=1]
 */
#include "bench.h"
#include <sys/mman.h>

/* Bookkeeping outside the allocator, touched before the baseline is read. */
static void *map_touched(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, 0, bytes);
    return p;
}

int main(int argc, char **argv)
{
    uint64_t ops, window, keep, min, max, seed;
    bench_params(argc, argv, "ops=4000000 window=4096 keep=64 min=16 max=4096 seed=1", &ops, &window, &keep, &min,
                 &max, &seed);
    uint64_t rng = rng_seed(seed, 0), tag = 0;
    arg_need(window >= 1 && keep >= 1 && min >= 1 && max >= min, "window, keep >= 1, 1 <= min <= max");
    size_t cap = (size_t)(ops / keep) + ops / (keep * 8) + 64; /* the kept count's mean, with room to spare */
    block_t *win = map_touched(window * sizeof *win), *kept = map_touched(cap * sizeof *kept);
    if (!win || !kept) return 1;
    long base = rss_kib();
    double live = 0, t0 = now_sec();
    size_t nkept = 0;
    int ok = 1;
    for (size_t v = 0; ok && v < window; v++) {
        ok = block_new(&win[v], rng_range(&rng, min, max), ++tag);
        live += (double)win[v].size;
    }
    uint64_t i = 0;
    for (; ok && i < ops; i++) {
        block_t *b = &win[rng_next(&rng) % window];
        if (rng_next(&rng) % keep == 0 && nkept < cap) {
            kept[nkept++] = *b;
        } else {
            live -= (double)b->size;
            ok = block_drop(b);
        }
        ok = ok && block_new(b, rng_range(&rng, min, max), ++tag);
        live += (double)b->size;
    }
    double elapsed = now_sec() - t0;
    long rss = rss_kib();
    for (size_t v = 0; v < window; v++) ok &= block_drop(&win[v]);
    for (size_t v = 0; v < nkept; v++) ok &= block_drop(&kept[v]);
    printf("bench=slow-leak ops=%" PRIu64 " window=%" PRIu64 " keep=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64
           " seconds=%.3f ops_per_sec=%.0f kept=%zu live_kib=%.0f rss_kib=%ld base_kib=%ld overhead_pct=%.1f",
           i, window, keep, min, max, elapsed, i / elapsed, nkept, live / 1024, rss, base,
           100.0 * ((rss - base) * 1024.0 - live) / live);
    return bench_finish(ok);
}
