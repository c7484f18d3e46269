/* calloc_reuse.c - big zeroed buffers, taken again and again.
 *
 * Keeps `slots` live blocks.  Each operation picks a random slot, checks and
 * frees its block, and callocs a new one of log-uniform size in [min, max]
 * (default 256 KiB-4 MiB), which it checks reads zero and then writes: all
 * of it (part=1: a program filling a table it zeroed) or its first 1/part
 * (a sparse table).  The blocks come back on pages the last ones left, and
 * those hold old data: the allocator zeroes them (memset: the program's
 * writes then fault nothing) or gives them back to the OS (a fault on every
 * page the program writes, none on those it leaves).
 *
 * Costs it exposes: an allocator that always gives pages back pays a page
 * fault for each one a filling program writes (ten or more times a memset
 * of it); one that always zeroes pays a memset of pages a sparse program
 * never reads or writes, and keeps them resident.
 *
 * Figure: ops_per_sec = blocks calloc'd, checked, written, checked and
 * freed per second.
 *
 * usage: calloc_reuse [ops=1000] [slots=4] [min=262144] [max=4194304]
 *                     [part=1] [seed=1]
 */
#include "bench.h"

#define PAGE 4096

/* Whether the first word of each page of [p, p + n), and its last byte,
 * read zero. */
static int reads_zero(const unsigned char *p, size_t n)
{
    uint64_t w;
    for (size_t o = 0; o + 8 <= n; o += PAGE) {
        memcpy(&w, p + o, 8);
        if (w != 0) return 0;
    }
    return p[n - 1] == 0;
}

int main(int argc, char **argv)
{
    uint64_t ops, slots, lo, hi, part, seed;
    bench_params(argc, argv, "ops=1000 slots=4 min=262144 max=4194304 part=1 seed=1", &ops, &slots, &lo, &hi, &part,
                 &seed);
    arg_need(slots >= 1 && part >= 1 && lo >= 1 && hi >= lo, "slots, part >= 1, 1 <= min <= max");
    uint64_t rng = rng_seed(seed, 0), tag = 0, done = 0;
    block_t *b = calloc(slots, sizeof *b);
    if (!b) return 1;
    int ok = 1;
    double bytes = 0, t0 = now_sec();
    for (uint64_t i = 0; ok && i < ops; i++) {
        block_t *s = &b[rng_next(&rng) % slots];
        if (s->p) {
            ok &= block_check(s->p, part_len(s->size, part), s->tag);
            free(s->p);
        }
        s->size = rng_log_range(&rng, lo, hi);
        s->tag = ++tag;
        if (!(s->p = calloc(1, s->size))) {
            ok = 0;
            break;
        }
        ok &= reads_zero(s->p, part_len(s->size, part));
        memset(s->p, tag_byte(s->tag), part_len(s->size, part));
        block_fill(s->p, part_len(s->size, part), s->tag);
        bytes += (double)s->size;
        done++;
    }
    double elapsed = now_sec() - t0;
    for (size_t i = 0; i < slots; i++) {
        if (!b[i].p) continue;
        ok &= block_check(b[i].p, part_len(b[i].size, part), b[i].tag);
        free(b[i].p);
    }
    free(b);
    printf("bench=calloc-reuse slots=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " part=%" PRIu64
           " mean_kib=%.0f seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f",
           slots, lo, hi, part, done ? bytes / done / 1024 : 0, elapsed, done, done / elapsed);
    return bench_finish(ok);
}
