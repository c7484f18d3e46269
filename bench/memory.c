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
 * Threads form (threads > 0): `threads` threads, each on a 64 KiB stack,
 * allocate `count` blocks each, of uniform random size in [size, max] (or
 * size), fill them and wait; live_kib is read while all of them hold their
 * blocks, then each checks and frees its own and exits, and freed, settled
 * and trimmed are read after the last has exited. What a thread costs
 * beyond its data (heaps, caches, a slab per size class touched): a server
 * that runs a thread per connection pays it per connection. The threads'
 * stacks count in every allocator's figure alike. Reference: threads=256
 * count=4 size=16 max=2000.
 *
 * usage: memory [count=1000000] [size=16] [settle_ms=1000]
 *               [max=0] [total_mb=0] [rounds=1] [seed=1] [threads=0]
 */
#define _GNU_SOURCE
#include "bench.h"
#include <dlfcn.h>
#include <math.h>
#include <sys/mman.h>

/* The threads form: each worker's blocks, filled and held until `go`. */
typedef struct {
    pthread_t th;
    uint64_t seed, id;
    size_t count, min, max;
    double requested;
    int ok;
} holder_t;
static pthread_barrier_t held, go;

static void *holder(void *arg)
{
    holder_t *h = arg;
    uint64_t rng = rng_seed(h->seed, h->id);
    void *p[64];
    size_t sz[64];
    h->ok = 1;
    for (size_t i = 0; i < h->count; i++) {
        sz[i] = rng_range(&rng, h->min, h->max);
        if (!(p[i] = malloc(sz[i]))) {
            h->ok = 0;
            h->count = i;
            break;
        }
        block_fill(p[i], sz[i], i + 1);
        h->requested += (double)sz[i];
    }
    pthread_barrier_wait(&held);
    pthread_barrier_wait(&go);
    for (size_t i = 0; i < h->count; i++) {
        h->ok &= block_check(p[i], sz[i], i + 1);
        free(p[i]);
    }
    return NULL;
}

/* Starts n holders (a thread that cannot be made ends the run). */
static void holders_run(holder_t *h, size_t n)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_barrier_init(&held, NULL, (unsigned)n + 1);
    pthread_barrier_init(&go, NULL, (unsigned)n + 1);
    for (size_t i = 0; i < n; i++)
        if (pthread_create(&h[i].th, &attr, holder, &h[i]) != 0) {
            fprintf(stderr, "memory: thread %zu not started\n", i);
            exit(1);
        }
    pthread_attr_destroy(&attr);
}

int main(int argc, char **argv)
{
    bench_args(argc, argv, "count size settle_ms max total_mb rounds seed threads");
    size_t threads = arg_u("threads", 0);
    size_t count = arg_u("count", 1000000);
    size_t size = arg_u("size", 16), max = arg_u("max", 0);
    uint64_t settle_ms = arg_u("settle_ms", 1000), rounds = arg_u("rounds", 1);
    double total = (double)arg_u("total_mb", 0) * 1048576.0;
    uint64_t rng = rng_seed(arg_u("seed", 1), 0);
    int churn = max > size && threads == 0;
    if (churn) /* twice the expected number of blocks per round */
        count = (size_t)(2 * total / ((double)(max - size) / log((double)max / (double)size))) + 1000;
    if (count < 1 || size < 1 || rounds < 1 || (churn && total < 1) || (threads && (count > 64 || rounds != 1))) {
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
    holder_t *h = threads ? mmap(NULL, threads * sizeof *h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                          : NULL;
    if (h == MAP_FAILED) return 1;
    if (threads) { /* instead of the rounds below */
        for (size_t i = 0; i < threads; i++)
            h[i] = (holder_t){.seed = arg_u("seed", 1), .id = i, .count = count, .min = size, .max = max > size ? max : size};
        rounds = 0;
        holders_run(h, threads);
        pthread_barrier_wait(&held);
        live = rss_kib() - base;
        pthread_barrier_wait(&go);
        for (size_t i = 0; i < threads; i++) {
            pthread_join(h[i].th, NULL);
            ok &= h[i].ok;
            requested += h[i].requested;
        }
    }
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
    printf("bench=memory threads=%zu count=%zu size=%zu requested_kib=%.0f live_kib=%ld overhead_pct=%.1f "
           "freed_kib=%ld settled_kib=%ld settle_ms=%llu trimmed_kib=%s",
           threads, count, size, req_kib, live, (live - req_kib) / req_kib * 100.0, freed, settled,
           (unsigned long long)settle_ms, trimmed);
    munmap(ptr, bytes);
    return bench_finish(ok);
}
