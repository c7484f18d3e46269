/* memory.c - resident-memory cost of many live blocks, and giving it back.
 *
 * Allocates `count` blocks of `size` bytes, fills each with the check pattern,
 * and reads the resident set (/proc/self/statm) while they live; then
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
 * usage: memory [count=1000000] [size=16] [settle_ms=1000]
 */
#define _GNU_SOURCE
#include "bench.h"
#include <dlfcn.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
    bench_args(argc, argv, "count size settle_ms");
    size_t count = arg_u("count", 1000000);
    size_t size = arg_u("size", 16);
    uint64_t settle_ms = arg_u("settle_ms", 1000);
    if (count < 1 || size < 1) {
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

    long base = rss_kib();
    int ok = 1;
    for (size_t i = 0; i < count; i++) {
        if (!(ptr[i] = malloc(size))) {
            ok = 0;
            count = i;
            break;
        }
        block_fill(ptr[i], size, i + 1);
    }
    long live = rss_kib() - base;
    for (size_t i = 0; i < count; i++) {
        ok &= block_check(ptr[i], size, i + 1);
        free(ptr[i]);
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
    double req_kib = (double)count * size / 1024.0;
    printf("bench=memory count=%zu size=%zu requested_kib=%.0f live_kib=%ld overhead_pct=%.1f "
           "freed_kib=%ld settled_kib=%ld settle_ms=%llu trimmed_kib=%s",
           count, size, req_kib, live, (live - req_kib) / req_kib * 100.0, freed, settled,
           (unsigned long long)settle_ms, trimmed);
    munmap(ptr, bytes);
    return bench_finish(ok);
}
