/* phases - a program that moves through distinct phases, for judging an
 * allocator's trade of time in the OS against memory held:
 *
 *   churn   steady small-object churn (16-1024 B, 65,536 slots)
 *   burst   bursts of 8 large blocks (256 KiB-32 MiB, log-uniform), every page
 *           written, freed and allocated again soon after
 *   idle    everything freed but 1 MiB of small blocks, then nothing for a while
 *   churn2, burst2, idle2   the same with other sizes: 1-32 KiB churn over
 *           8,192 slots; 32 slots replaced one at a time by 64 KiB-4 MiB blocks
 *
 * A sampler thread reads /proc/self/statm every 5 ms and integrates resident
 * memory above the bytes the program holds. Per phase the result line gives
 * ops, wall and system milliseconds, minor faults, that integral in MiB*s
 * (xs), and average resident and live MiB; the cost is computed by the runner:
 *   cost_ms = W * sys_ms + (1 - W) * xs        (1 MiB held 1 s = 1 ms in the kernel)
 *
 * usage: phases [phase=SECONDS] [seed=N]
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <sys/resource.h>

#include "bench.h"

#define MiB (1024.0 * 1024.0)

static _Atomic long live_bytes;
static _Atomic int sampling = 1;
static double xs_mib_s, rss_mib_s, live_mib_s; /* integrals, sampler only */
static pthread_mutex_t sample_lock = PTHREAD_MUTEX_INITIALIZER;
static int failed;

static void *sampler(void *arg)
{
    (void)arg;
    double last = now_sec();
    while (atomic_load(&sampling)) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
        double t = now_sec(), rss = rss_kib() * 1024.0, live = (double)atomic_load(&live_bytes);
        pthread_mutex_lock(&sample_lock);
        double dt = t - last;
        xs_mib_s += (rss > live ? rss - live : 0) / MiB * dt;
        rss_mib_s += rss / MiB * dt;
        live_mib_s += live / MiB * dt;
        pthread_mutex_unlock(&sample_lock);
        last = t;
    }
    return NULL;
}

typedef struct {
    void *p;
    size_t n;
    uint64_t tag;
} slot_t;

static void *take(size_t n, uint64_t tag)
{
    void *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "phases: malloc(%zu) failed\n", n);
        exit(1);
    }
    block_fill(p, n, tag);
    atomic_fetch_add(&live_bytes, (long)n);
    return p;
}

static void give(slot_t *s)
{
    if (s->p == NULL) return;
    if (!block_check(s->p, s->n, s->tag)) failed = 1;
    atomic_fetch_sub(&live_bytes, (long)s->n);
    free(s->p);
    s->p = NULL;
}

static size_t log_uniform(uint64_t *rng, size_t lo, size_t hi)
{
    double f = (double)(rng_next(rng) >> 11) / 9007199254740992.0;
    double v = (double)lo * __builtin_exp(f * __builtin_log((double)hi / (double)lo));
    return (size_t)v;
}

static slot_t *slots;
static size_t nslots;
static uint64_t tags;

static void free_all(size_t keep_bytes)
{
    size_t kept = 0;
    for (size_t i = 0; i < nslots; i++) {
        if (slots[i].p && slots[i].n <= 1024 && kept + slots[i].n <= keep_bytes) {
            kept += slots[i].n;
            continue;
        }
        give(&slots[i]);
    }
}

/* One step of a phase; returns ops done. */
static uint64_t step(const char *kind, uint64_t *rng)
{
    if (strncmp(kind, "churn", 5) == 0) {
        int small = kind[5] == 0;
        size_t n = small ? 65536 : 8192, i = rng_range(rng, 0, n - 1);
        size_t size = small ? rng_range(rng, 16, 1024) : rng_range(rng, 1024, 32768);
        give(&slots[i]);
        slots[i] = (slot_t){take(size, ++tags), size, tags};
        return 1;
    }
    if (strcmp(kind, "burst") == 0) {
        slot_t b[8];
        for (int i = 0; i < 8; i++) {
            size_t size = log_uniform(rng, 256 << 10, 32 << 20);
            b[i] = (slot_t){take(size, ++tags), size, tags};
        }
        for (int i = 0; i < 8; i++) give(&b[i]);
        return 8;
    }
    if (strcmp(kind, "burst2") == 0) {
        size_t i = rng_range(rng, 0, 31), size = log_uniform(rng, 64 << 10, 4 << 20);
        give(&slots[i]);
        slots[i] = (slot_t){take(size, ++tags), size, tags};
        return 1;
    }
    struct timespec ts = {0, 10000000}; /* idle */
    nanosleep(&ts, NULL);
    return 0;
}

static double ms_of(struct timeval tv) { return tv.tv_sec * 1e3 + tv.tv_usec / 1e3; }

int main(int argc, char **argv)
{
    bench_args(argc, argv, "phase seed");
    double phase = arg_f("phase", 1.0);
    uint64_t rng = rng_seed(arg_u("seed", 1), 0);
    static const char *kinds[] = {"churn", "burst", "idle", "churn2", "burst2", "idle2"};
    nslots = 65536;
    slots = calloc(nslots, sizeof *slots);
    pthread_t th;
    pthread_create(&th, NULL, sampler, NULL);
    printf("bench=phases phase_s=%.2f", phase);
    double total_sys = 0, total_xs = 0, total_wall = 0;
    for (int k = 0; k < 6; k++) {
        const char *kind = kinds[k];
        if (strncmp(kind, "idle", 4) == 0) free_all(1 << 20);
        else if (k > 0) free_all(0);
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        pthread_mutex_lock(&sample_lock);
        double xs0 = xs_mib_s, rss0 = rss_mib_s, live0 = live_mib_s;
        pthread_mutex_unlock(&sample_lock);
        double t0 = now_sec(), t;
        uint64_t ops = 0;
        while ((t = now_sec()) - t0 < phase) ops += step(kind, &rng);
        getrusage(RUSAGE_SELF, &r1);
        pthread_mutex_lock(&sample_lock);
        double xs = xs_mib_s - xs0, rss = rss_mib_s - rss0, live = live_mib_s - live0;
        pthread_mutex_unlock(&sample_lock);
        double wall = (t - t0) * 1e3, sys = ms_of(r1.ru_stime) - ms_of(r0.ru_stime);
        printf(" %s_ops=%llu %s_wall_ms=%.1f %s_sys_ms=%.1f %s_flt=%ld %s_xs=%.2f %s_rss=%.1f %s_live=%.1f", kind,
               (unsigned long long)ops, kind, wall, kind, sys, kind, r1.ru_minflt - r0.ru_minflt, kind, xs, kind,
               rss / (t - t0), kind, live / (t - t0));
        total_sys += sys, total_xs += xs, total_wall += wall;
    }
    free_all(0);
    atomic_store(&sampling, 0);
    pthread_join(th, NULL);
    printf(" total_wall_ms=%.1f total_sys_ms=%.1f total_xs=%.2f check=%s\n", total_wall, total_sys, total_xs,
           failed ? "FAIL" : "ok");
    return failed;
}
