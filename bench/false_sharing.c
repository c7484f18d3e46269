/* false_sharing.c - threads writing small blocks that share a cache line.
 *
 * Small blocks that different threads write must not share a cache line, or
 * every write bounces the line between cores.  Two shapes:
 *
 *   mode=scratch  The main thread allocates `threads` blocks of `size`
 *                 bytes one after the other (neighbours, as a single-thread
 *                 allocator places them) and hands one to each worker.  The
 *                 worker checks and frees it, then `iters` times allocates a
 *                 block of the same size, writes it `writes` times over and
 *                 frees it.  An allocator that gives a worker back the block
 *                 it just freed (one of the main thread's neighbours) makes
 *                 the workers write into one line for the whole run.
 *   mode=thrash   The same loop without the hand-over: each worker's blocks
 *                 come from the allocator alone; one that carves
 *                 concurrent threads' small blocks from one line loses.
 *
 * A write pass adds one to every byte of the block through a volatile
 * pointer; before the free each byte must equal the number of passes.  The
 * workers start together (a spin barrier), so their loops overlap.
 *
 * Figure: ops_per_sec = blocks allocated, written and freed per second, all
 * workers together (seconds = the slowest worker's loop).  The work is the
 * same for every allocator; only where the blocks lie differs.
 *
 * usage: false_sharing [mode=scratch|thrash] [threads=2] [iters=1000]
 *                      [writes=10000] [size=8]      (iters per worker)
 */
#include "bench.h"
#include <sched.h>
#include <stdatomic.h>

static struct {
    uint64_t threads, iters, writes, size;
} P;
static block_t *g_handed; /* scratch: the main thread's neighbours, one per worker */
static atomic_int g_waiting;

static void *run(void *arg)
{
    worker_t *w = arg;
    int ok = 1;
    if (g_handed) ok = block_drop(&g_handed[w->id]);
    atomic_fetch_sub(&g_waiting, 1);
    while (atomic_load(&g_waiting) > 0) sched_yield();
    double t0 = now_sec();
    uint64_t i = 0;
    for (; ok && i < P.iters; i++) {
        volatile unsigned char *c = malloc(P.size);
        if (!c) {
            ok = 0;
            break;
        }
        for (size_t k = 0; k < P.size; k++) c[k] = 0;
        for (uint64_t r = 0; r < P.writes; r++)
            for (size_t k = 0; k < P.size; k++) c[k]++;
        for (size_t k = 0; k < P.size; k++) ok &= c[k] == (unsigned char)P.writes;
        free((void *)c);
    }
    w->secs = now_sec() - t0;
    w->ops = i;
    w->failed = !ok;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "mode=scratch threads=2 iters=1000 writes=10000 size=8", &P.threads, &P.iters, &P.writes,
                 &P.size);
    const char *mode = arg_s("mode", "scratch");
    int scratch = strcmp(mode, "scratch") == 0;
    arg_need((scratch || strcmp(mode, "thrash") == 0) && P.threads >= 1 && P.size >= 1,
             "mode scratch or thrash, threads, size >= 1");
    int ok = 1;
    if (scratch) {
        block_t *h = calloc(P.threads, sizeof *h);
        if (!h) return 1;
        for (uint64_t t = 0; t < P.threads; t++) ok &= block_new(&h[t], P.size, t + 1);
        g_handed = h;
    }
    atomic_store(&g_waiting, (int)P.threads);
    uint64_t ops;
    double secs;
    ok &= run_workers((int)P.threads, run, &ops, &secs);
    free(g_handed);
    printf("bench=false-sharing mode=%s threads=%" PRIu64 " iters=%" PRIu64 " writes=%" PRIu64 " size=%" PRIu64
           " seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f",
           mode, P.threads, P.iters, P.writes, P.size, secs, ops, ops / secs);
    return bench_finish(ok);
}
