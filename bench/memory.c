/* memory.c - resident-memory cost of many live blocks, and giving it back.
 *
 * Allocates `count` blocks of `size` bytes, fills each with the check pattern,
 * and reads the resident set less its file-backed pages (/proc/self/statm:
 * rss_kib) while they live; then
 * verifies and frees them all and reads it again: at once, after `settle_ms`
 * (for allocators that purge on a timer), and after malloc_trim(0).
 * malloc_trim is looked up with dlsym(RTLD_DEFAULT) and only used when it
 * comes from the same object as malloc (otherwise trim is reported n/a:
 * calling glibc's malloc_trim under another allocator would measure nothing).
 * The pointer array comes from mmap and is faulted in before the baseline, so
 * it is not counted.
 *
 * Figures (all KiB above the baseline read before the first allocation):
 *   live_kib, overhead_pct = (live - requested) / requested * 100,
 *   freed_kib, settled_kib, trimmed_kib.
 * Reference runs: count=1000000 size=16; count=10000000 size=16;
 * count=100000 size=1024.
 *
 * Churn form (max > size): sizes log-uniform in [size, max], blocks added
 * until total_mb MiB are live, all freed, `rounds` times over; live_kib is
 * then the peak over the rounds (read after each round's allocations) and
 * freed/settled/trimmed are read after the last round. Reference: size=16
 * max=4194304 total_mb=1024 rounds=5 (peak at most 1.1x live, end < 10 %).
 *
 * usage: memory [count=1000000] [size=16] [settle_ms=1000]
 *               [max=0] [total_mb=0] [rounds=1] [seed=1]
 */
#define _GNU_SOURCE
#include "bench.h"
#include <dlfcn.h>
#include <math.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
    bench_args(argc, argv, "count size settle_ms max total_mb rounds seed");
    size_t count = arg_u("count", 1000000);
    size_t size = arg_u("size", 16), max = arg_u("max", 0);
    uint64_t settle_ms = arg_u("settle_ms", 1000), rounds = arg_u("rounds", 1);
    double total = (double)arg_u("total_mb", 0) * 1048576.0;
    uint64_t rng = rng_seed(arg_u("seed", 1), 0);
    int churn = max > size;
    if (churn) /* twice the expected number of blocks per round */
        count = (size_t)(2 * total / ((double)(max - size) / log((double)max / (double)size))) + 1000;
    if (count < 1 || size < 1 || rounds < 1 || (churn && total < 1)) {
        fprintf(stderr, "memory: bad parameters\n");
        return 2;
    }
    size_t bytes = count * sizeof(void *);
    void **ptr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) return 1;
    memset(ptr, 0, bytes); /* fault the array in: it belongs to the baseline */

    /* Resolve malloc_trim (and decide whether it is the allocator's own). */
    int (*trim)(size_t) = (int (*)(size_t))dlsym(RTLD_DEFAULT, "malloc_trim");
    void *mal = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info di_trim, di_mal;
    if (trim && mal && dladdr((void *)trim, &di_trim) && dladdr(mal, &di_mal) &&
        strcmp(di_trim.dli_fname, di_mal.dli_fname) != 0)
        trim = NULL;

    long base = rss_kib(), live = 0;
    int ok = 1;
    double requested = 0;
    size_t *sizes = churn ? mmap(NULL, count * sizeof *sizes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : NULL;
    if (sizes == MAP_FAILED) return 1;
    for (uint64_t r = 0; r < rounds; r++) {
        size_t n = 0;
        requested = 0;
        for (; n < count && (!churn || requested < total); n++) {
            size_t sz = churn ? (size_t)exp(log((double)size) + (log((double)max) - log((double)size)) *
                                                 (double)(rng_next(&rng) >> 11) / 9007199254740992.0)
                              : size;
            if (churn) sizes[n] = sz;
            if (!(ptr[n] = malloc(sz))) {
                ok = 0;
                break;
            }
            block_fill(ptr[n], sz, n + 1);
            requested += (double)sz;
        }
        long now = rss_kib() - base;
        if (now > live) live = now;
        for (size_t i = 0; i < n; i++) {
            ok &= block_check(ptr[i], churn ? sizes[i] : size, i + 1);
            free(ptr[i]);
        }
        if (!churn) count = n;
    }
    long freed = rss_kib() - base;
    struct timespec ts = {(time_t)(settle_ms / 1000), (long)(settle_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    long settled = rss_kib() - base;
    char trimmed[32] = "n/a";
    if (trim) {
        trim(0);
        snprintf(trimmed, sizeof trimmed, "%ld", rss_kib() - base);
    }
    double req_kib = requested / 1024.0;
    printf("bench=memory count=%zu size=%zu requested_kib=%.0f live_kib=%ld overhead_pct=%.1f "
           "freed_kib=%ld settled_kib=%ld settle_ms=%llu trimmed_kib=%s",
           count, size, req_kib, live, (live - req_kib) / req_kib * 100.0, freed, settled,
           (unsigned long long)settle_ms, trimmed);
    munmap(ptr, bytes);
    return bench_finish(ok);
}
