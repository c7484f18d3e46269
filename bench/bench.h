/* bench.h - helpers shared by the hakmem benchmark workloads.
 *
 * Every workload is a plain C11 program linked against the C library only;
 * the allocator under test is chosen with LD_PRELOAD.  This header gives
 * them: key=value argument parsing, a clock, a fast PRNG, the block
 * fill/verify pattern (so a broken allocator fails instead of winning),
 * resident-memory readers and the common result line.
 */
#ifndef HAKMEM_BENCH_H
#define HAKMEM_BENCH_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- arguments: "name=value" words; unknown names are an error ---------- */
static int bench_argc __attribute__((unused));
static char **bench_argv __attribute__((unused));

static inline void bench_args(int argc, char **argv, const char *known)
{
    bench_argc = argc;
    bench_argv = argv;
    for (int i = 1; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        size_t n = eq ? (size_t)(eq - argv[i]) : 0;
        const char *k = known;
        int ok = 0;
        while (eq && n && *k) { /* known is "a b c", or "a=1 b=2 c=3" */
            size_t kl = strcspn(k, " =");
            if (kl == n && strncmp(k, argv[i], n) == 0) ok = 1;
            k += strcspn(k, " ");
            k += strspn(k, " ");
        }
        if (!ok) {
            fprintf(stderr, "%s: bad argument '%s' (known: %s, as name=value)\n", argv[0], argv[i], known);
            exit(2);
        }
    }
}

static inline const char *arg_s(const char *name, const char *def)
{
    size_t n = strlen(name);
    for (int i = 1; i < bench_argc; i++)
        if (strncmp(bench_argv[i], name, n) == 0 && bench_argv[i][n] == '=') return bench_argv[i] + n + 1;
    return def;
}

/* Exits with status 2 and says what is wrong unless the parameters are ok. */
static inline void arg_need(int ok, const char *what)
{
    if (ok) return;
    fprintf(stderr, "%s: bad parameters: %s\n", bench_argv[0], what);
    exit(2);
}

static inline double arg_f(const char *name, double def)
{
    const char *v = arg_s(name, NULL);
    return v ? strtod(v, NULL) : def;
}

static inline uint64_t arg_u(const char *name, uint64_t def)
{
    return (uint64_t)arg_f(name, (double)def);
}

/* Parameters from a spec of "name=default" words: checks argv as bench_args
 * does, then stores the value of each numeric one (its default is a number),
 * in the spec's order, through the uint64_t pointers that follow the spec.
 * Others (a word default) are read with arg_s. */
#include <stdarg.h>
static inline void bench_params(int argc, char **argv, const char *spec, ...)
{
    bench_args(argc, argv, spec);
    va_list ap;
    va_start(ap, spec);
    for (const char *k = spec + strspn(spec, " "); *k; k += strspn(k, " ")) {
        char name[32], *end;
        size_t n = strcspn(k, "=");
        double def = strtod(k + n + 1, &end);
        snprintf(name, sizeof name, "%.*s", (int)n, k);
        if (end != k + n + 1) *va_arg(ap, uint64_t *) = (uint64_t)arg_f(name, def);
        k += strcspn(k, " ");
    }
    va_end(ap);
}

/* ---- time and random numbers --------------------------------------------- */
static inline double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline uint64_t rng_next(uint64_t *s) /* xorshift64* */
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline uint64_t rng_seed(uint64_t seed, uint64_t stream)
{
    uint64_t s = (seed + 1) * 0x9E3779B97F4A7C15ULL ^ (stream + 1) * 0xBF58476D1CE4E5B9ULL;
    return s ? s : 1;
}

static inline size_t rng_range(uint64_t *s, size_t lo, size_t hi) /* [lo, hi] */
{
    return lo + (size_t)(rng_next(s) % (hi - lo + 1));
}

static inline double rng_unit(uint64_t *s) /* [0, 1), 53 random bits */
{
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Log-uniform in [lo, hi]: each doubling of the size is drawn as often as any
 * other, as many 256-512 KiB blocks as 4-8 MiB ones.  Needs -lm. */
#include <math.h>
static inline size_t rng_log_range(uint64_t *s, size_t lo, size_t hi)
{
    size_t n = (size_t)((double)lo * exp(rng_unit(s) * log((double)hi / (double)lo)));
    return n < lo ? lo : n > hi ? hi : n;
}

/* ---- block pattern --------------------------------------------------------
 * The first 8 bytes hold a 64-bit tag; blocks up to 1 KiB are filled
 * completely with a byte derived from the tag; larger blocks get their first
 * and last 256 bytes filled and one byte written on every 4 KiB page between
 * (so every page is really touched).  block_check verifies the same bytes.
 */
#define BENCH_FULL 1024
#define BENCH_EDGE 256

static inline unsigned char tag_byte(uint64_t tag) { return (unsigned char)((tag * 0x9E3779B97F4A7C15ULL) >> 56) | 1; }

static inline void block_fill(void *p, size_t n, uint64_t tag)
{
    unsigned char *b = (unsigned char *)p, c = tag_byte(tag);
    if (n <= BENCH_FULL) {
        memset(b, c, n);
    } else {
        memset(b, c, BENCH_EDGE);
        memset(b + n - BENCH_EDGE, c, BENCH_EDGE);
        for (size_t o = 4096 - ((uintptr_t)b & 4095); o < n - BENCH_EDGE; o += 4096) b[o] = c;
    }
    if (n >= 8) memcpy(b, &tag, 8);
}

static inline int range_is(const unsigned char *b, size_t n, unsigned char c)
{
    uint64_t w = 0x0101010101010101ULL * c, acc = 0, x;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&x, b + i, 8);
        acc |= x ^ w;
    }
    for (; i < n; i++) acc |= b[i] ^ c;
    return acc == 0;
}

/* Returns 1 when the block still holds what block_fill wrote. */
static inline int block_check(const void *p, size_t n, uint64_t tag)
{
    const unsigned char *b = (const unsigned char *)p;
    unsigned char c = tag_byte(tag);
    size_t skip = n >= 8 ? 8 : 0;
    if (skip && memcmp(b, &tag, 8) != 0) return 0;
    if (n <= BENCH_FULL) return range_is(b + skip, n - skip, c);
    if (!range_is(b + skip, BENCH_EDGE - skip, c) || !range_is(b + n - BENCH_EDGE, BENCH_EDGE, c)) return 0;
    for (size_t o = 4096 - ((uintptr_t)b & 4095); o < n - BENCH_EDGE; o += 4096)
        if (b[o] != c) return 0;
    return 1;
}

/* The bytes of a block of size bytes that a workload writing its first
 * 1/part uses: at least one. */
static inline size_t part_len(size_t size, size_t part)
{
    size_t n = size / part;
    return n ? n : 1;
}

/* ---- a live block and the tag its pattern was written with ----------------- */
typedef struct {
    void *p;
    size_t size;
    uint64_t tag;
} block_t;

/* Allocates and fills b; returns 0 when malloc gave NULL (b->p is then NULL). */
static inline int block_new(block_t *b, size_t size, uint64_t tag)
{
    b->size = size;
    b->tag = tag;
    b->p = malloc(size);
    if (!b->p) return 0;
    block_fill(b->p, size, tag);
    return 1;
}

/* Verifies and frees b (an empty b passes); returns whether it held its pattern. */
static inline int block_drop(block_t *b)
{
    if (!b->p) return 1;
    int ok = block_check(b->p, b->size, b->tag);
    free(b->p);
    b->p = NULL;
    return ok;
}

/* ---- memory readings (read(2) into a stack buffer: no malloc) ----------- */
#include <fcntl.h>
static inline int read_proc(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t r = read(fd, buf, n - 1);
    close(fd);
    buf[r > 0 ? r : 0] = 0;
    return r > 0;
}

/* Current resident set less its file-backed pages, from /proc/self/statm:
 * the memory the allocator holds. Code and data pages of libraries count
 * in the whole resident set as the kernel maps them around each fault, a
 * number that moves with where the library was loaded (ASLR). */
static inline long rss_kib(void)
{
    char buf[128];
    long pages, res, shared;
    if (!read_proc("/proc/self/statm", buf, sizeof buf) || sscanf(buf, "%ld %ld %ld", &pages, &res, &shared) != 3) return -1;
    return (res - shared) * (sysconf(_SC_PAGESIZE) / 1024);
}

static inline long hwm_kib(void) /* peak resident set, VmHWM from /proc/self/status */
{
    char buf[4096];
    const char *p;
    if (!read_proc("/proc/self/status", buf, sizeof buf) || !(p = strstr(buf, "VmHWM:"))) return -1;
    return strtol(p + 6, NULL, 10);
}

/* Threads that each run fn(worker) and count their operations.  Each worker
 * has a cache line of its own, and counts in a local until it finishes:
 * workers sharing a line that each writes per operation would measure where
 * the allocator under test happened to place this array, not the allocator.
 * A worker that times only part of its work (after an untimed set-up) puts
 * that part's seconds in `secs`. */
#include <pthread.h>
typedef struct {
    int id __attribute__((aligned(64)));
    int failed;
    uint64_t ops;
    double secs;
    pthread_t th;
} worker_t;

/* Runs fn on `threads` workers; returns whether none failed, with the total
 * operations and the wall time, or, where the workers timed their own part,
 * the longest of those parts. */
static inline int run_workers(int threads, void *(*fn)(void *), uint64_t *ops, double *elapsed)
{
    worker_t *w = (worker_t *)aligned_alloc(64, (size_t)threads * sizeof *w);
    *ops = 0;
    *elapsed = 0;
    if (!w) return 0;
    memset(w, 0, (size_t)threads * sizeof *w);
    int ok = 1;
    double t0 = now_sec();
    for (int t = 0; t < threads; t++) {
        w[t].id = t;
        if (pthread_create(&w[t].th, NULL, fn, &w[t]) != 0) {
            w[t].failed = 1;
            w[t].th = 0;
        }
    }
    double part = 0;
    for (int t = 0; t < threads; t++) {
        if (w[t].th) pthread_join(w[t].th, NULL);
        *ops += w[t].ops;
        ok &= !w[t].failed;
        if (w[t].secs > part) part = w[t].secs;
    }
    *elapsed = part > 0 ? part : now_sec() - t0;
    free(w);
    return ok;
}

#ifdef _GNU_SOURCE
#include <sched.h>
/* The set holding only the kth processor (modulo their count) of cpus: a
 * worker pinned there crosses cores with its neighbour k+1 on any machine. */
static inline cpu_set_t bench_cpu_nth(const cpu_set_t *cpus, int k)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    int n = CPU_COUNT(cpus), seen = 0;
    for (int c = 0; c < CPU_SETSIZE && n > 0; c++) {
        if (!CPU_ISSET(c, cpus) || seen++ != k % n) continue;
        CPU_SET(c, &one);
        break;
    }
    return one;
}

/* Pins the calling thread to the kth processor of cpus (bench_cpu_nth). */
static inline void bench_pin_self(const cpu_set_t *cpus, int k)
{
    cpu_set_t one = bench_cpu_nth(cpus, k);
    if (CPU_COUNT(&one)) pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}
#endif

/* Checks and frees p, a block whose first 8 bytes hold the tag it was filled
 * with (block_fill) and whose size follows from that tag; returns whether
 * it held its pattern.  NULL passes. */
static inline int block_drop_tagged(void *p, size_t (*size_of)(uint64_t))
{
    if (!p) return 1;
    uint64_t tag;
    memcpy(&tag, p, 8);
    int ok = block_check(p, size_of(tag), tag);
    free(p);
    return ok;
}

#ifndef __cplusplus
#include <stdatomic.h>
/* Runs fn on `threads` workers (run_workers) around a shared array of n
 * slots, zeroed, at *slots while they run; then checks and frees the blocks
 * left in it (block_drop_tagged).  Whether no worker failed and every block
 * held its pattern. */
static inline int run_over_slots(int threads, void *(*fn)(void *), _Atomic(void *) **slots, uint64_t n,
                                 size_t (*size_of)(uint64_t), uint64_t *ops, double *elapsed)
{
    *ops = 0;
    *elapsed = 0;
    if (!(*slots = (_Atomic(void *) *)calloc(n, sizeof **slots))) return 0;
    int ok = run_workers(threads, fn, ops, elapsed);
    for (uint64_t i = 0; i < n; i++) ok &= block_drop_tagged(atomic_load(&(*slots)[i]), size_of);
    free(*slots);
    *slots = NULL;
    return ok;
}
#endif

/* Prints "check=ok|FAIL" at the end of the result line; returns the exit code. */
static inline int bench_finish(int ok)
{
    printf(" check=%s\n", ok ? "ok" : "FAIL");
    fflush(stdout);
    return ok ? 0 : 1;
}

#endif
