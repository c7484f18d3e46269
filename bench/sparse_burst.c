/* sparse_burst.c - bursts of big blocks of which only the head is used.
 *
 * Each burst allocates `blocks` blocks of log-uniform size in [min, max]
 * (default 64 of 256 KiB-8 MiB), writes one byte on each page of the first
 * 1/`part` of every block (default 1/64; at least the first byte), checks
 * them all and frees them all; `bursts` times.  A program that reserves
 * generous buffers and fills a little of each, such as a parser sizing for
 * the worst case, does this.
 *
 * Costs it exposes: an allocator that touches what the program does not
 * (zeroing, headers spread over the block, huge pages that fault in 2 MiB
 * for one byte) pays page faults and resident memory for the untouched
 * 63/64; one that maps and unmaps every block pays the system calls; one
 * that caches freed blocks whole keeps the touched pages warm.
 *
 * Figure: ops_per_sec = blocks allocated, touched, checked and freed per
 * second.  Address space per burst: blocks * (max - min) / ln(max / min) on
 * average; resident: about 1/part of that plus what the allocator adds.
 *
 * usage: sparse_burst [bursts=200] [blocks=64] [min=262144] [max=8388608]
 *                     [part=64] [seed=1]
 */
#include "bench.h"

#define PAGE 4096

/* The byte written at offset o of a block with tag t: changes with both, so
 * a page handed to two live blocks at once, or a stale page, is caught. */
static unsigned char mark(uint64_t t, size_t o) { return tag_byte(t + o / PAGE); }

static void head_fill(block_t *b, size_t part)
{
    unsigned char *c = b->p;
    for (size_t o = 0, n = part_len(b->size, part); o < n; o += PAGE) c[o] = mark(b->tag, o);
}

static int head_check(const block_t *b, size_t part)
{
    const unsigned char *c = b->p;
    for (size_t o = 0, n = part_len(b->size, part); o < n; o += PAGE)
        if (c[o] != mark(b->tag, o)) return 0;
    return 1;
}

int main(int argc, char **argv)
{
    uint64_t bursts, nb, lo, hi, part, seed;
    bench_params(argc, argv, "bursts=200 blocks=64 min=262144 max=8388608 part=64 seed=1", &bursts, &nb, &lo, &hi,
                 &part, &seed);
    arg_need(nb >= 1 && lo >= 1 && hi >= lo && part >= 1, "blocks, part >= 1, 1 <= min <= max");
    uint64_t rng = rng_seed(seed, 0), tag = 0, ops = 0;
    block_t *b = calloc(nb, sizeof *b);
    if (!b) return 1;
    int ok = 1;
    double bytes = 0, t0 = now_sec();
    for (uint64_t r = 0; ok && r < bursts; r++) {
        for (size_t i = 0; i < nb; i++) {
            b[i].size = rng_log_range(&rng, lo, hi);
            b[i].tag = ++tag;
            if (!(b[i].p = malloc(b[i].size))) {
                ok = 0;
                break;
            }
            head_fill(&b[i], part);
            bytes += (double)b[i].size;
            ops++;
        }
        for (size_t i = 0; i < nb; i++) {
            if (!b[i].p) continue;
            ok &= head_check(&b[i], part);
            free(b[i].p);
            b[i].p = NULL;
        }
    }
    double elapsed = now_sec() - t0;
    free(b);
    printf("bench=sparse-burst bursts=%" PRIu64 " blocks=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " part=%" PRIu64
           " mean_kib=%.0f seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f",
           bursts, nb, lo, hi, part, ops ? bytes / ops / 1024 : 0, elapsed, ops, ops / elapsed);
    return bench_finish(ok);
}
