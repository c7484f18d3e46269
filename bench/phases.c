/* phases - one program that goes through six phases, each `phase` seconds
 * long, for judging how an allocator trades time in the kernel against
 * memory held above what the program uses (what hakmem's learned Large/Huge
 * strategy is about):
 *
 *   churn   small-object churn: 65,536 slots, each op frees a random slot's
 *           block (verified first) and puts a new 16-1024 B block there
 *   burst   bursts of large blocks: 8 blocks of 256 KiB-32 MiB (log-uniform),
 *           every page written, verified, all freed; again and again
 *   idle    the program holds only 1 MiB of small blocks and sleeps (10 ms
 *           steps); nothing is allocated
 *   churn2  like churn with 1-32 KiB blocks over 8,192 slots
 *   burst2  32 slots, each op replaces one slot's block by a new one of
 *           64 KiB-4 MiB (log-uniform), every page written
 *   idle2   like idle
 *
 * Live state between phases: entering a burst phase the program frees the
 * churn's blocks but keeps 1 MiB of them (the first in slot order, so they
 * lie scattered over the churn's memory); entering idle it frees the burst's
 * blocks, so idle holds just those survivors; entering churn2 it frees them.
 * What a phase frees on entry is part of that phase.
 *
 * A sampler thread reads /proc/self/statm every 5 ms and integrates over each
 * phase: resident memory (less file-backed pages: rss_kib) minus the bytes the
 * program holds (requested sizes of its live blocks, an atomic counter), and
 * both alone (for the averages).
 * Per phase the result line gives (X = churn, burst, idle, churn2, burst2, idle2):
 *   p_X_ops      blocks allocated (churn, burst2: replacements; burst: blocks)
 *   p_X_wall_ms  wall time of the phase
 *   p_X_sys_ms   system (kernel) CPU time of the whole process (getrusage
 *                RUSAGE_SELF ru_stime), sampler thread and allocator threads included
 *   p_X_flt      minor page faults (ru_minflt)
 *   p_X_xs       integral of (resident - live) in MiB*s
 *   p_X_rss, p_X_live   average resident and live MiB
 * then total_wall_ms total_sys_ms total_flt total_xs, base_rss (resident MiB
 * before the first phase), sampler_sys_ms (the sampler thread's own kernel
 * time, included in the sys figures) and check=ok|FAIL.  The runner prices a
 * phase as cost_ms = W * sys_ms + (1 - W) * xs: one MiB held one second
 * weighs as much as one millisecond in the kernel.
 *
 * With PHASES_TRIM_IDLE=1 in the environment the program calls
 * malloc_trim(0) on entering each idle phase, as a program that knows it goes
 * idle can: the idle phases then show what an allocator told of the boundary
 * still pays there (purging what it kept for the burst before).
 *
 * usage: phases [phase=SECONDS] [seed=N]
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <math.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "bench.h"

#define NPHASES 6
#define MIB (1024.0 * 1024.0)
#define KEEP_BYTES ((size_t)1 << 20)

static const char *const phase_name[NPHASES] = {"churn", "burst", "idle", "churn2", "burst2", "idle2"};

typedef struct {
    void *p;
    size_t n;
    uint64_t tag;
} slot_t;

/* ---- state shared with the sampler ---------------------------------------- */
static _Atomic long live_bytes;   /* bytes the program holds (requested sizes) */
static _Atomic int current = -1;  /* phase being run, -1 between/outside */
static _Atomic int sampling = 1;
/* written by the sampler only, read by main after joining it */
static double acc_xs[NPHASES], acc_rss[NPHASES], acc_live[NPHASES], acc_time[NPHASES];
static double sampler_sys_ms;

static double ms_of(struct timeval tv) { return tv.tv_sec * 1e3 + tv.tv_usec / 1e3; }

static void *sampler(void *arg)
{
    (void)arg;
    double last = now_sec();
    while (atomic_load_explicit(&sampling, memory_order_relaxed)) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
        long rk = rss_kib();
        double t = now_sec(), dt = t - last;
        double rss = rk < 0 ? 0 : rk / 1024.0;
        double live = atomic_load_explicit(&live_bytes, memory_order_relaxed) / MIB;
        int k = atomic_load_explicit(&current, memory_order_relaxed);
        last = t;
        if (k < 0) continue;
        acc_xs[k] += (rss - live) * dt;
        acc_rss[k] += rss * dt;
        acc_live[k] += live * dt;
        acc_time[k] += dt;
    }
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    sampler_sys_ms = ms_of(ru.ru_stime);
    return NULL;
}

/* ---- blocks ---------------------------------------------------------------- */
static int failed;
static uint64_t next_tag;

static void hold(slot_t *s, size_t n)
{
    s->p = malloc(n);
    if (s->p == NULL) {
        printf("bench=phases malloc_failed=%zu", n);
        bench_finish(0);
        exit(1);
    }
    s->n = n;
    s->tag = ++next_tag;
    block_fill(s->p, n, s->tag);
    atomic_fetch_add_explicit(&live_bytes, (long)n, memory_order_relaxed);
}

static void release(slot_t *s)
{
    if (s->p == NULL) return;
    if (!block_check(s->p, s->n, s->tag)) {
        if (!failed) fprintf(stderr, "phases: block of %zu bytes at %p corrupted\n", s->n, s->p);
        failed = 1;
    }
    atomic_fetch_sub_explicit(&live_bytes, (long)s->n, memory_order_relaxed);
    free(s->p);
    s->p = NULL;
}

/* Frees slots[0..n), keeping the first blocks in slot order up to keep bytes. */
static void release_all(slot_t *slots, size_t n, size_t keep)
{
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (slots[i].p && kept < keep) {
            kept += slots[i].n;
            continue;
        }
        release(&slots[i]);
    }
}

/* Outside the allocator: mmap'ed and touched before the first phase, so every
 * allocator sees the same baseline. */
static slot_t *map_slots(size_t n)
{
    void *p = mmap(NULL, n * sizeof(slot_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("phases: mmap");
        exit(2);
    }
    memset(p, 0, n * sizeof(slot_t));
    return p;
}

#define CHURN_SLOTS 65536
#define CHURN2_SLOTS 8192
#define BURST_BLOCKS 8
#define BURST2_SLOTS 32

int main(int argc, char **argv)
{
    bench_args(argc, argv, "phase seed");
    double phase = arg_f("phase", 1.0);
    uint64_t seed = arg_u("seed", 1);
    if (!(phase > 0)) {
        fprintf(stderr, "phases: phase must be > 0\n");
        return 2;
    }
    const char *trim_env = getenv("PHASES_TRIM_IDLE");
    int trim_idle = trim_env && strcmp(trim_env, "1") == 0;
    uint64_t rng = rng_seed(seed, 0);
    slot_t *churn = map_slots(CHURN_SLOTS), *big = map_slots(BURST2_SLOTS);
    double base_rss = rss_kib() / 1024.0;

    pthread_t th;
    if (pthread_create(&th, NULL, sampler, NULL) != 0) {
        fprintf(stderr, "phases: no sampler thread\n");
        return 2;
    }

    uint64_t ops[NPHASES] = {0};
    double wall_ms[NPHASES], sys_ms[NPHASES];
    long flt[NPHASES];
    for (int k = 0; k < NPHASES; k++) {
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        double t0 = now_sec(), end = t0 + phase;
        atomic_store(&current, k);
        switch (k) {
        case 0: /* churn */
        case 3: /* churn2 */ {
            size_t n = k == 0 ? CHURN_SLOTS : CHURN2_SLOTS, lo = k == 0 ? 16 : 1024, hi = k == 0 ? 1024 : 32768;
            if (k == 3) release_all(churn, CHURN_SLOTS, 0); /* idle's survivors */
            do {
                for (int i = 0; i < 64; i++) { /* the clock every 64 ops */
                    slot_t *s = &churn[rng_range(&rng, 0, n - 1)];
                    release(s);
                    hold(s, rng_range(&rng, lo, hi));
                }
                ops[k] += 64;
            } while (now_sec() < end);
            break;
        }
        case 1: /* burst */ {
            release_all(churn, CHURN_SLOTS, KEEP_BYTES);
            slot_t b[BURST_BLOCKS] = {{0}};
            do {
                for (int i = 0; i < BURST_BLOCKS; i++) hold(&b[i], rng_log_range(&rng, 256 << 10, 32 << 20));
                for (int i = 0; i < BURST_BLOCKS; i++) release(&b[i]);
                ops[k] += BURST_BLOCKS;
            } while (now_sec() < end);
            break;
        }
        case 4: /* burst2 */
            release_all(churn, CHURN2_SLOTS, KEEP_BYTES);
            do {
                slot_t *s = &big[rng_range(&rng, 0, BURST2_SLOTS - 1)];
                release(s);
                hold(s, rng_log_range(&rng, 64 << 10, 4 << 20));
                ops[k]++;
            } while (now_sec() < end);
            break;
        default: /* idle, idle2: hold only the survivors, allocate nothing */
            release_all(big, BURST2_SLOTS, 0);
            if (trim_idle) malloc_trim(0);
            while (now_sec() < end) {
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
            }
            break;
        }
        atomic_store(&current, -1);
        double t1 = now_sec();
        getrusage(RUSAGE_SELF, &r1);
        wall_ms[k] = (t1 - t0) * 1e3;
        sys_ms[k] = ms_of(r1.ru_stime) - ms_of(r0.ru_stime);
        flt[k] = r1.ru_minflt - r0.ru_minflt;
    }
    release_all(churn, CHURN_SLOTS, 0);
    release_all(big, BURST2_SLOTS, 0);
    atomic_store(&sampling, 0);
    pthread_join(th, NULL);

    double tw = 0, ts = 0, tx = 0;
    long tf = 0;
    printf("bench=phases phase_s=%.2f seed=%llu", phase, (unsigned long long)seed);
    for (int k = 0; k < NPHASES; k++) {
        const char *p = phase_name[k];
        double T = acc_time[k] > 0 ? acc_time[k] : 1;
        printf(" p_%s_ops=%llu p_%s_wall_ms=%.1f p_%s_sys_ms=%.1f p_%s_flt=%ld p_%s_xs=%.3f p_%s_rss=%.2f p_%s_live=%.2f",
               p, (unsigned long long)ops[k], p, wall_ms[k], p, sys_ms[k], p, flt[k], p, acc_xs[k], p,
               acc_rss[k] / T, p, acc_live[k] / T);
        tw += wall_ms[k], ts += sys_ms[k], tx += acc_xs[k], tf += flt[k];
    }
    printf(" total_wall_ms=%.1f total_sys_ms=%.1f total_flt=%ld total_xs=%.3f base_rss=%.2f sampler_sys_ms=%.1f",
           tw, ts, tf, tx, base_rss, sampler_sys_ms);
    if (atomic_load(&live_bytes) != 0) failed = 1; /* bookkeeping must come back to zero */
    return bench_finish(!failed);
}
