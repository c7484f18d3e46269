/* realloc.c - strings and arrays grown by small steps up to megabytes.
 *
 * `objects` objects are grown round-robin (so their growth interleaves, as in
 * a program building several buffers at once) from empty to `target` bytes:
 * even objects are strings that gain 1..64 characters per realloc, odd ones
 * are uint64_t arrays that gain 1..8 elements per realloc.  Each step checks
 * the last element written before the realloc (the move must keep content);
 * when an object is complete its whole content is verified and it is freed.
 * The whole thing is repeated `reps` times.
 *
 * Figure: ops_per_sec = realloc calls per second (copying included: an
 * allocator that grows in place or remaps wins here).  Live data: up to
 * objects * target bytes (defaults: 8 * 1 MiB).
 *
 * usage: realloc [objects=8] [target=1048576] [reps=20] [seed=1]
 */
#include "bench.h"

typedef struct {
    unsigned char *p;
    size_t len; /* bytes used */
} obj_t;

static unsigned char str_char(size_t obj, size_t j) { return (unsigned char)('a' + (j * 7 + obj) % 26); }
static uint64_t arr_elem(size_t obj, size_t j) { return (uint64_t)j * 0x9E3779B97F4A7C15ULL ^ obj; }

static int tail_ok(const obj_t *o, size_t i) /* last element still there? */
{
    if (o->len == 0) return 1;
    if (i % 2 == 0) return o->p[o->len - 1] == str_char(i, o->len - 1);
    uint64_t x;
    memcpy(&x, o->p + o->len - 8, 8);
    return x == arr_elem(i, o->len / 8 - 1);
}

static int all_ok(const obj_t *o, size_t i)
{
    for (size_t j = 0; j < o->len; j += (i % 2 == 0) ? 1 : 8) {
        if (i % 2 == 0 && o->p[j] != str_char(i, j)) return 0;
        if (i % 2 == 1) {
            uint64_t x;
            memcpy(&x, o->p + j, 8);
            if (x != arr_elem(i, j / 8)) return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv)
{
    bench_args(argc, argv, "objects target reps seed");
    size_t objects = arg_u("objects", 8);
    size_t target = arg_u("target", 1 << 20);
    uint64_t reps = arg_u("reps", 20);
    uint64_t rng = rng_seed(arg_u("seed", 1), 0);
    if (objects < 1 || target < 64) {
        fprintf(stderr, "realloc: bad parameters\n");
        return 2;
    }
    obj_t *o = calloc(objects, sizeof *o);
    if (!o) return 1;
    uint64_t ops = 0;
    int ok = 1;
    double t0 = now_sec();
    for (uint64_t r = 0; r < reps && ok; r++) {
        size_t done = 0;
        while (done < objects && ok) {
            done = 0;
            for (size_t i = 0; i < objects && ok; i++) {
                obj_t *b = &o[i];
                if (b->len >= target) {
                    done++;
                    continue;
                }
                size_t add = (i % 2 == 0) ? rng_range(&rng, 1, 64) : 8 * rng_range(&rng, 1, 8);
                unsigned char *np = realloc(b->p, b->len + add);
                ops++;
                if (!np) {
                    ok = 0;
                    break;
                }
                b->p = np;
                ok &= tail_ok(b, i);
                for (size_t j = b->len; j < b->len + add; j += (i % 2 == 0) ? 1 : 8) {
                    if (i % 2 == 0) {
                        b->p[j] = str_char(i, j);
                    } else {
                        uint64_t x = arr_elem(i, j / 8);
                        memcpy(b->p + j, &x, 8);
                    }
                }
                b->len += add;
                if (b->len >= target) { /* complete: verify all, then free */
                    ok &= all_ok(b, i);
                    free(b->p);
                    b->p = NULL;
                    b->len = target; /* stays "complete" until the next rep */
                }
            }
        }
        for (size_t i = 0; i < objects; i++) o[i].len = 0;
    }
    double elapsed = now_sec() - t0;
    for (size_t i = 0; i < objects; i++) free(o[i].p);
    free(o);
    printf("bench=realloc objects=%zu target=%zu reps=%llu seconds=%.3f ops=%llu ops_per_sec=%.0f", objects, target,
           (unsigned long long)reps, elapsed, (unsigned long long)ops, ops / elapsed);
    return bench_finish(ok);
}
