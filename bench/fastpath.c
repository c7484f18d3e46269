/* fastpath.c - the allocator's fast path: 64 mallocs then 64 frees, repeated.
 *
 * One size, `iters` batches of 64 malloc(size) followed by the 64 frees.  Each
 * block gets one byte written after malloc and checked before free (so the
 * compiler cannot drop the calls and a broken allocator fails).
 *
 * Meant to be run under `valgrind --tool=callgrind` twice with different
 * `iters`: (instructions(iters2) - instructions(iters1)) / (64*(iters2-iters1))
 * is the instruction count of one malloc+free pair, with program start-up
 * cancelled out (bench/run.sh does this).  The count includes this loop's own
 * few instructions (store, load, compare, loop counters) per pair.  Run
 * natively it also prints pairs per second, and in either case malloc_from=
 * (the object that `malloc` resolves to), which shows whether a preload applied.
 *
 * usage: fastpath [size=32] [iters=100000]
 */
#define _GNU_SOURCE
#include "bench.h"
#include <dlfcn.h>

#define BATCH 64

int main(int argc, char **argv)
{
    bench_args(argc, argv, "size iters");
    size_t size = arg_u("size", 32);
    uint64_t iters = arg_u("iters", 100000);
    if (size < 1) {
        fprintf(stderr, "fastpath: bad parameters\n");
        return 2;
    }
    void *volatile keep; /* makes each pointer escape */
    unsigned char *p[BATCH];
    int ok = 1;
    double t0 = now_sec();
    for (uint64_t i = 0; i < iters; i++) {
        for (int j = 0; j < BATCH; j++) {
            p[j] = malloc(size);
            if (!p[j]) return printf("bench=fastpath error=malloc-null"), bench_finish(0);
            p[j][0] = (unsigned char)j;
            keep = p[j];
        }
        for (int j = 0; j < BATCH; j++) {
            ok &= p[j][0] == (unsigned char)j;
            free(p[j]);
        }
    }
    double elapsed = now_sec() - t0;
    (void)keep;
    double pairs = (double)iters * BATCH;
    Dl_info di;
    const char *from = dladdr(dlsym(RTLD_DEFAULT, "malloc"), &di) && di.dli_fname ? di.dli_fname : "?";
    printf("bench=fastpath size=%zu iters=%llu pairs=%.0f seconds=%.3f ops_per_sec=%.0f malloc_from=%s", size,
           (unsigned long long)iters, pairs, elapsed, elapsed > 0 ? pairs / elapsed : 0.0,
           strrchr(from, '/') ? strrchr(from, '/') + 1 : from);
    return bench_finish(ok);
}
