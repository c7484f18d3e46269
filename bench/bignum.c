/* bignum.c - arbitrary-precision arithmetic: many small short-lived arrays.
 *
 * Each thread keeps `live` numbers, each an array of 64-bit limbs of its own
 * allocation.  An operation picks two numbers a and b, computes a op b into
 * a newly allocated result of L limbs, L uniform in [2, 64] (16-512 B: the
 * result is the exact value reduced modulo 2^(64 L)), frees a and puts the
 * result in its place.  The operations are addition, subtraction,
 * multiplication by a one-limb number and multiplication, which also
 * allocates and frees a temporary for the partial product, as a bignum
 * library does.  The live set stays small (live * ~264 B); nearly every
 * block dies within a few operations of its birth.
 *
 * Every number carries a checksum of its limbs, set when it is made and
 * checked before it is freed, so a block the allocator disturbed fails the
 * run; the checksums of the numbers left at the end give `digest`, the same
 * for every allocator.
 *
 * Figure: ops_per_sec = operations (one result allocated, one operand freed,
 * plus the temporary for a quarter of them) per second, all threads together.
 *
 * usage: bignum [threads=1] [live=256] [ops=3000000] [seed=1]
 *               (live and ops per thread)
 */
#include "bench.h"

#define MAX_LIMBS 64
#define MUL_LIMBS 4 /* multiplication uses a's low limbs only: cost stays linear */

typedef struct {
    uint64_t *l;
    size_t n;
    uint64_t sum;
} num_t;

static struct {
    uint64_t threads, live, ops, seed;
} P;
static uint64_t digest_of_first; /* the first thread's, the same for every allocator */

static uint64_t limb_sum(const uint64_t *l, size_t n)
{
    uint64_t h = n;
    for (size_t i = 0; i < n; i++) h = (h ^ l[i]) * 0x100000001B3ULL + (h >> 29);
    return h;
}

static uint64_t limb(const num_t *x, size_t i) { return i < x->n ? x->l[i] : 0; }

/* r = a + b, or a - b (two's complement), over r's n limbs. */
static void add_sub(uint64_t *r, size_t n, const num_t *a, const num_t *b, int sub)
{
    unsigned __int128 carry = sub;
    for (size_t i = 0; i < n; i++) {
        unsigned __int128 t = (unsigned __int128)limb(a, i) + (sub ? ~limb(b, i) : limb(b, i)) + carry;
        r[i] = (uint64_t)t;
        carry = t >> 64;
    }
}

/* r = a * k over r's n limbs. */
static void mul_limb(uint64_t *r, size_t n, const num_t *a, uint64_t k)
{
    uint64_t carry = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned __int128 t = (unsigned __int128)limb(a, i) * k + carry;
        r[i] = (uint64_t)t;
        carry = (uint64_t)(t >> 64);
    }
}

/* r = (a mod 2^(64 MUL_LIMBS)) * b over r's n limbs, through a temporary
 * holding the whole partial product.  Returns 0 when malloc failed. */
static int mul(uint64_t *r, size_t n, const num_t *a, const num_t *b)
{
    size_t na = a->n < MUL_LIMBS ? a->n : MUL_LIMBS, nt = na + b->n;
    uint64_t *t = calloc(nt, sizeof *t);
    if (!t) return 0;
    for (size_t i = 0; i < na; i++) {
        uint64_t carry = 0;
        for (size_t j = 0; j < b->n; j++) {
            unsigned __int128 p = (unsigned __int128)a->l[i] * b->l[j] + t[i + j] + carry;
            t[i + j] = (uint64_t)p;
            carry = (uint64_t)(p >> 64);
        }
        t[i + b->n] = carry;
    }
    for (size_t i = 0; i < n; i++) r[i] = i < nt ? t[i] : 0;
    free(t);
    return 1;
}

static int num_new(num_t *x, size_t n)
{
    x->n = n;
    x->l = malloc(n * sizeof *x->l);
    return x->l != NULL;
}

static int num_drop(num_t *x)
{
    int ok = limb_sum(x->l, x->n) == x->sum;
    free(x->l);
    x->l = NULL;
    return ok;
}

static void *run(void *arg)
{
    worker_t *w = arg;
    uint64_t rng = rng_seed(P.seed, (uint64_t)w->id), i = 0;
    num_t *v = calloc(P.live, sizeof *v);
    int ok = v != NULL;
    for (size_t k = 0; ok && k < P.live; k++) {
        ok = num_new(&v[k], rng_range(&rng, 2, MAX_LIMBS));
        for (size_t j = 0; ok && j < v[k].n; j++) v[k].l[j] = rng_next(&rng);
        if (ok) v[k].sum = limb_sum(v[k].l, v[k].n);
    }
    for (; ok && i < P.ops; i++) {
        num_t *a = &v[rng_next(&rng) % P.live], *b = &v[rng_next(&rng) % P.live], r;
        uint64_t kind = rng_next(&rng) % 4;
        if (!num_new(&r, rng_range(&rng, 2, MAX_LIMBS))) {
            ok = 0;
            break;
        }
        if (kind < 2) add_sub(r.l, r.n, a, b, (int)kind);
        else if (kind == 2) mul_limb(r.l, r.n, a, b->l[0] | 1);
        else ok = mul(r.l, r.n, a, b);
        r.sum = limb_sum(r.l, r.n);
        ok &= num_drop(a);
        *a = r;
    }
    w->ops = i;
    uint64_t digest = 0;
    for (size_t k = 0; v && k < P.live; k++) {
        if (!v[k].l) continue;
        digest = digest * 31 + v[k].sum;
        ok &= num_drop(&v[k]);
    }
    if (w->id == 0) digest_of_first = digest;
    free(v);
    w->failed = !ok;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_params(argc, argv, "threads=1 live=256 ops=3000000 seed=1", &P.threads, &P.live, &P.ops, &P.seed);
    arg_need(P.threads >= 1 && P.live >= 1, "threads, live >= 1");
    uint64_t ops;
    double elapsed;
    int ok = run_workers((int)P.threads, run, &ops, &elapsed);
    printf("bench=bignum threads=%" PRIu64 " live=%" PRIu64 " ops_per_thread=%" PRIu64
           " seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f digest=%016" PRIx64,
           P.threads, P.live, P.ops, elapsed, ops, ops / elapsed, digest_of_first);
    return bench_finish(ok);
}
