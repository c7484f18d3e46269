/* API conformance for hakmem, with glibc semantics.
 *
 * Built twice: with -DUSE_HAK_API it calls the hak_ names (linked against
 * hakmem_api, the standard names stay glibc's); without it, it calls the
 * standard names, linked against libhakmem.so, which must override them.
 * Compile with -fno-builtin: the compiler must not fold malloc(SIZE_MAX) to
 * NULL or elide malloc/free pairs.
 *
 * usage: test_api [CASE]   (cases: the table at the end)
 */
#include "testutil.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/mman.h>

#ifndef USE_HAK_API
/* C23 names: glibc 2.36 does not declare them; libhakmem may export them. */
extern void free_sized(void *p, size_t size) __attribute__((weak));
extern void free_aligned_sized(void *p, size_t alignment, size_t size) __attribute__((weak));
#endif

/* Sizes across all pools: tiny, mid, large, huge. */
static const size_t pool_sizes[] = {16, 100, 1000, 4000, 20000, 100000, 3 * MiB, 40 * MiB};
#define NPOOL (sizeof pool_sizes / sizeof pool_sizes[0])

static volatile size_t v_size_max = SIZE_MAX;
static volatile size_t v_ptrdiff_max1 = (size_t)PTRDIFF_MAX + 1;

static size_t pagesz;

static bool all_zero(const void *p, size_t n)
{
  const unsigned char *b = p;
  size_t i = 0;
  for (; i < n && ((uintptr_t)(b + i) & 7); i++) if (b[i]) return false;
  const uint64_t *w = (const uint64_t *)(const void *)(b + i);
  size_t nw = (n - i) / 8;
  uint64_t acc = 0;
  for (size_t k = 0; k < nw; k++) acc |= w[k];
  if (acc) return false;
  for (i += nw * 8; i < n; i++) if (b[i]) return false;
  return true;
}

/* ---- malloc / free basics ---- */

static void test_malloc_basic(void)
{
  /* malloc(0): a unique, freeable pointer. */
  void *a = tu_launder(A(malloc)(0)), *b = tu_launder(A(malloc)(0));
  CHECK(a != NULL && b != NULL);
  CHECK(a != b);
  A(free)(a);
  A(free)(b);

  errno = 0;
  CHECK(tu_launder(A(malloc)(v_size_max)) == NULL);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(tu_launder(A(malloc)(v_ptrdiff_max1)) == NULL);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(tu_launder(A(malloc)(v_size_max - 4096)) == NULL);
  CHECK(errno == ENOMEM);

  A(free)(NULL); /* no-op */

  /* Every size 1..2048 and a sweep of larger sizes: aligned to 16, or below
   * 16 bytes to the largest power of two not above the size (what an object
   * of that size may need), usable >= size, writable, apart from the block
   * of the size before (still live). */
  void *prev = NULL;
  size_t prev_n = 0, prev_us = 0;
  for (size_t n = 1; n <= 70000; n = n < 2048 ? n + 1 : n + n / 7) {
    void *p = tu_launder(A(malloc)(n));
    CHECKF(p != NULL, "malloc(%zu)", n);
    size_t align = 16;
    while (align > n) align /= 2;
    CHECKF(((uintptr_t)p & (align - 1)) == 0, "malloc(%zu) = %p misaligned", n, p);
    size_t us = A(malloc_usable_size)(p);
    CHECKF(us >= n, "usable %zu < %zu", us, n);
    CHECKF(prev == NULL || (char *)p >= (char *)prev + prev_us || (char *)p + us <= (char *)prev,
           "malloc(%zu) = %p (usable %zu) overlaps the live malloc(%zu) = %p (usable %zu)", n, p, us, prev_n, prev,
           prev_us);
    tu_fill(p, 0, us, n);
    CHECK_PAT(p, us, n);
    if (prev != NULL) {
      CHECK_PAT(prev, prev_us, prev_n);
      A(free)(prev);
    }
    prev = p;
    prev_n = n;
    prev_us = us;
  }
  A(free)(prev);
  CHECK(A(malloc_usable_size)(NULL) == 0);
}

/* ---- calloc ---- */

static void test_calloc(void)
{
  errno = 0;
  CHECK(tu_launder(A(calloc)(v_size_max / 2, 3)) == NULL);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(tu_launder(A(calloc)(v_size_max >> 31, (size_t)1 << 31)) == NULL);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(tu_launder(A(calloc)(v_ptrdiff_max1, 1)) == NULL);
  CHECK(errno == ENOMEM);
  void *z = tu_launder(A(calloc)(0, 100));
  CHECK(z != NULL);
  A(free)(z);
  z = tu_launder(A(calloc)(100, 0));
  CHECK(z != NULL);
  A(free)(z);

  /* Zeros, also on recycled memory. */
  for (size_t k = 0; k < NPOOL; k++) {
    size_t s = pool_sizes[k];
    int rounds = s >= MiB ? 12 : (s >= 20000 ? 60 : 300);
    for (int r = 0; r < rounds; r++) {
      void *p = tu_launder(A(malloc)(s));
      CHECK(p != NULL);
      memset(p, 0xAA, A(malloc_usable_size)(p));
      A(free)(p);
      size_t n = (r & 1) ? (s + 7) / 8 : s, m = (r & 1) ? 8 : 1;
      void *q = tu_launder(A(calloc)(n, m));
      CHECKF(q != NULL, "calloc(%zu, %zu)", n, m);
      CHECKF(all_zero(q, s), "calloc(%zu, %zu) round %d: not zeroed (recycled memory)", n, m, r);
      CHECK(A(malloc_usable_size)(q) >= s);
      /* Dirty the whole usable size too: the next round may reuse it. */
      memset(q, 0xAA, A(malloc_usable_size)(q));
      A(free)(q);
    }
    /* Many dirty blocks freed together, then calloc'ed back. */
    enum { N = 32 };
    void *v[N];
    int nb = s >= MiB ? 4 : N;
    for (int i = 0; i < nb; i++) {
      v[i] = tu_launder(A(malloc)(s));
      CHECK(v[i] != NULL);
      memset(v[i], 0xAA, s);
    }
    for (int i = 0; i < nb; i++) A(free)(v[i]);
    for (int i = 0; i < nb; i++) {
      v[i] = tu_launder(A(calloc)(1, s));
      CHECK(v[i] != NULL);
      CHECKF(all_zero(v[i], s), "calloc(1, %zu) #%d not zeroed", s, i);
      memset(v[i], 0xAA, s);
    }
    for (int i = 0; i < nb; i++) A(free)(v[i]);
  }
}

/* ---- reallocarray ---- */

static void test_reallocarray(void)
{
  unsigned char *p = tu_launder(A(malloc)(64));
  CHECK(p != NULL);
  tu_fill(p, 0, 64, 77);
  errno = 0;
  void *volatile pv = p; /* hides p from -Wuse-after-free: a failed call keeps it */
  CHECK(tu_launder(A(reallocarray)(pv, v_size_max / 2, 3)) == NULL);
  CHECK(errno == ENOMEM);
  CHECK_PAT(p, 64, 77);
  unsigned char *q = tu_launder(A(reallocarray)(p, 100, 50));
  CHECK(q != NULL);
  CHECK_PAT(q, 64, 77);
  CHECK(A(malloc_usable_size)(q) >= 5000);
  A(free)(q);
  q = tu_launder(A(reallocarray)(NULL, 10, 10));
  CHECK(q != NULL);
  A(free)(q);
}

/* ---- aligned allocation ---- */

static size_t bound_for(size_t size, size_t align)
{
  /* At most one alignment's worth of waste on top of size-class rounding
   * (four or eight classes per doubling: <= 25 %), page rounding for big blocks. */
  size_t base = (size + 15) / 16 * 16 + align;
  size_t b = base + base / 4 + 16;
  if (base > 32 * KiB) b = (b + pagesz - 1) / pagesz * pagesz;
  return b;
}

static void check_aligned_block(const char *fn, void *p, size_t align, size_t size)
{
  CHECKF(p != NULL, "%s(%zu, %zu)", fn, align, size);
  CHECKF(((uintptr_t)p & (align - 1)) == 0, "%s(%zu, %zu) = %p misaligned", fn, align, size, p);
  size_t us = A(malloc_usable_size)(p);
  CHECKF(us >= size, "%s(%zu, %zu): usable %zu < size", fn, align, size, us);
  CHECKF(us <= bound_for(size, align), "%s(%zu, %zu): usable %zu > bound %zu (wasteful)", fn, align, size, us,
         bound_for(size, align));
  CHECK(hak_owns(p));
  uint64_t id = align * 31 + size;
  tu_fill(p, 0, size, id);
  CHECK_PAT(p, size, id);
}

static void test_aligned(void)
{
  /* Bad alignments. */
  const size_t bad_pm[] = {0, 3, 24, sizeof(void *) / 2, 12, 48, (size_t)1 << 63 | 8};
  for (size_t i = 0; i < sizeof bad_pm / sizeof bad_pm[0]; i++) {
    void *out = (void *)0x1234;
    int r = A(posix_memalign)(&out, bad_pm[i], 64);
    CHECKF(r == EINVAL, "posix_memalign(align=%zu) returned %d", bad_pm[i], r);
  }
  const size_t bad_aa[] = {3, 0, 24, 12};
  for (size_t i = 0; i < sizeof bad_aa / sizeof bad_aa[0]; i++) {
    errno = 0;
    void *p = tu_launder(A(aligned_alloc)(bad_aa[i], 64));
    CHECKF(p == NULL && errno == EINVAL, "aligned_alloc(%zu, 64) = %p errno %d", bad_aa[i], p, errno);
  }
  /* posix_memalign with a huge size: ENOMEM, returned not set in errno. */
  {
    void *out = NULL;
    int r = A(posix_memalign)(&out, 64, v_size_max - 4096);
    CHECKF(r == ENOMEM, "posix_memalign(64, SIZE_MAX-4096) returned %d", r);
    errno = 0;
    CHECK(tu_launder(A(aligned_alloc)(4096, v_size_max - 100)) == NULL);
    CHECK(errno == ENOMEM);
  }

  for (size_t align = 8; align <= 4 * MiB; align *= 2) {
    const size_t sizes[] = {1, align - 1, align, align + 1, 3 * align, 100000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t size = sizes[k];
      void *p = NULL;
      int r = A(posix_memalign)(&p, align, size);
      CHECKF(r == 0, "posix_memalign(%zu, %zu) returned %d", align, size, r);
      check_aligned_block("posix_memalign", p, align, size);
      void *q = tu_launder(A(aligned_alloc)(align, size));
      check_aligned_block("aligned_alloc", q, align, size);
      void *m = tu_launder(A(memalign)(align, size));
      check_aligned_block("memalign", m, align, size);
      CHECK_PAT(p, size, align * 31 + size);
      A(free)(p);
      A(free)(m);
      /* realloc keeps the content of an aligned block. */
      void *g = tu_launder(A(realloc)(q, size * 2 + 100));
      CHECK(g != NULL);
      CHECK_PAT(g, size, align * 31 + size);
      A(free)(g);
    }
    /* Several live at once, to catch overlap. */
    enum { N = 16 };
    void *v[N];
    size_t sz = align < 64 * KiB ? 3 * align / 2 : 1000;
    for (int i = 0; i < N; i++) {
      CHECK(A(posix_memalign)(&v[i], align, sz) == 0);
      CHECK(((uintptr_t)v[i] & (align - 1)) == 0);
      tu_fill(v[i], 0, sz, (uint64_t)i * 1000 + align);
    }
    for (int i = 0; i < N; i++) CHECK_PAT(v[i], sz, (uint64_t)i * 1000 + align);
    for (int i = 0; i < N; i++) A(free)(v[i]);
  }

  /* Every small class or page run an alignment picks: sizes up to three
   * alignments, in steps that meet each class (16 B apart at least). */
  for (size_t align = 32; align <= 32 * KiB; align *= 2) {
    size_t step = align <= 256 ? 1 : 15;
    for (size_t size = 1; size <= 3 * align && size <= 40 * KiB; size += step) {
      void *p = NULL;
      CHECKF(A(posix_memalign)(&p, align, size) == 0, "posix_memalign(%zu, %zu)", align, size);
      check_aligned_block("posix_memalign", p, align, size);
      A(free)(p);
    }
  }

  /* valloc / pvalloc. */
  const size_t vs[] = {1, 100, 4095, 4096, 4097, 70000, 3 * MiB};
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
    void *p = tu_launder(A(valloc)(vs[i]));
    CHECK(p != NULL);
    CHECKF(((uintptr_t)p & (pagesz - 1)) == 0, "valloc(%zu) = %p", vs[i], p);
    CHECK(A(malloc_usable_size)(p) >= vs[i]);
    memset(p, 0x11, vs[i]);
    A(free)(p);
    void *q = tu_launder(A(pvalloc)(vs[i]));
    CHECK(q != NULL);
    CHECKF(((uintptr_t)q & (pagesz - 1)) == 0, "pvalloc(%zu) = %p", vs[i], q);
    size_t rounded = (vs[i] + pagesz - 1) / pagesz * pagesz;
    CHECKF(A(malloc_usable_size)(q) >= rounded, "pvalloc(%zu): usable %zu < %zu", vs[i],
           A(malloc_usable_size)(q), rounded);
    memset(q, 0x22, rounded);
    A(free)(q);
  }
  void *q = tu_launder(A(pvalloc)(0));
  CHECK(q != NULL);
  A(free)(q);
}

/* ---- realloc ---- */

/* The pool a size falls in: tiny (up to 1 KiB), mid (32 KiB), large (2 MiB),
 * huge. */
enum { NPOOLS = 4 };
static int pool_of(size_t size)
{
  return size <= KiB ? 0 : size <= 32 * KiB ? 1 : size <= 2 * MiB ? 2 : 3;
}

static void test_realloc(void)
{
  /* realloc(NULL, n) acts as malloc. */
  void *p = tu_launder(A(realloc)(NULL, 100));
  CHECK(p != NULL);
  CHECK(A(malloc_usable_size)(p) >= 100);
  A(free)(p);
  /* Overflowing size: NULL, ENOMEM, original untouched. */
  p = tu_launder(A(malloc)(100));
  tu_fill(p, 0, 100, 5);
  void *volatile pv = p; /* hides p from -Wuse-after-free: a failed call keeps it */
  errno = 0;
  CHECK(tu_launder(A(realloc)(pv, v_size_max)) == NULL);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(tu_launder(A(realloc)(pv, v_ptrdiff_max1)) == NULL);
  CHECK(errno == ENOMEM);
  CHECK_PAT(p, 100, 5);
  A(free)(p);

  /* Grow 1 B -> 8 MiB across every class boundary, then shrink back: steps
   * of about a tenth, several in each pool both ways. */
  const uint64_t id = 0xC0FFEE;
  size_t size = 1;
  unsigned char *b = tu_launder(A(malloc)(size));
  CHECK(b != NULL);
  tu_fill(b, 0, size, id);
  int steps[2][NPOOLS] = {{0}};
  while (size < 8 * MiB) {
    size_t ns = size + size / 10 + 1;
    if (ns > 8 * MiB) ns = 8 * MiB;
    unsigned char *nb = tu_launder(A(realloc)(b, ns));
    CHECKF(nb != NULL, "realloc(%zu -> %zu)", size, ns);
    size_t bad = tu_verify(nb, 0, size, id);
    CHECKF(bad == (size_t)-1, "grow %zu -> %zu: byte %zu lost", size, ns, bad);
    CHECK(A(malloc_usable_size)(nb) >= ns);
    tu_fill(nb, size, ns, id);
    b = nb;
    size = ns;
    steps[0][pool_of(size)]++;
  }
  while (size > 1) {
    size_t ns = size - size / 11 - 1;
    unsigned char *nb = tu_launder(A(realloc)(b, ns));
    CHECKF(nb != NULL, "realloc(%zu -> %zu)", size, ns);
    size_t bad = tu_verify(nb, 0, ns, id);
    CHECKF(bad == (size_t)-1, "shrink %zu -> %zu: byte %zu lost", size, ns, bad);
    CHECK(A(malloc_usable_size)(nb) >= ns);
    b = nb;
    size = ns;
    steps[1][pool_of(size)]++;
  }
  A(free)(b);
  for (int way = 0; way < 2; way++)
    for (int k = 0; k < NPOOLS; k++)
      CHECKF(steps[way][k] >= 5, "%s: %d steps in pool %d (tiny, mid, large, huge)", way ? "shrink" : "grow",
             steps[way][k], k);

  /* Between every pair of pool sizes, both ways, with other blocks around. */
  for (size_t i = 0; i < NPOOL; i++)
    for (size_t j = 0; j < NPOOL; j++) {
      size_t a = pool_sizes[i], c = pool_sizes[j];
      if (a > 3 * MiB && c > 3 * MiB) continue;
      void *x = tu_launder(A(malloc)(a));
      CHECK(x != NULL);
      tu_fill(x, 0, a, a ^ c);
      void *y = tu_launder(A(realloc)(x, c));
      CHECK(y != NULL);
      CHECK_PAT(y, a < c ? a : c, a ^ c);
      CHECK(A(malloc_usable_size)(y) >= c);
      memset(y, 0x33, c);
      A(free)(y);
    }
}

/* ---- calls that free: realloc(p, 0), free_sized, free_aligned_sized ---- */

#ifdef USE_HAK_API
#define FREE_SIZED hak_free_sized
#define FREE_ALIGNED_SIZED hak_free_aligned_sized
#else
/* Not exported: free stands in (and the cases say so). */
#define FREE_SIZED(p, s) (free_sized ? free_sized(p, s) : free(p))
#define FREE_ALIGNED_SIZED(p, a, s) (free_aligned_sized ? free_aligned_sized(p, a, s) : free(p))
#endif

typedef void release_fn(void *p, size_t size, size_t align);

/* Allocates size bytes (aligned to align; 0: malloc), has release() free
 * them, and checks that the block really was freed: a block of a slab
 * (test_memory reuse's sizes) is the next one of its size handed out (the
 * block freed last goes out first); a large or huge block's bytes leave
 * mallinfo2's bytes in use. */
static void check_released(const char *how, release_fn *release, size_t size, size_t align)
{
  void *p = tu_launder(align ? A(aligned_alloc)(align, size) : A(malloc)(size));
  CHECKF(p != NULL, "%s: allocation of %zu", how, size);
  memset(p, 1, size);
  uintptr_t was = (uintptr_t)p;
  size_t in_use = A(mallinfo2)().uordblks;
  release(p, size, align);
  if (size <= 20000) {
    void *q = tu_launder(align ? A(aligned_alloc)(align, size) : A(malloc)(size));
    CHECKF((uintptr_t)q == was, "%s of %zu B at %#lx: the next block of that size came at %p, not there", how, size,
           (unsigned long)was, q);
    A(free)(q);
  } else {
    size_t now = A(mallinfo2)().uordblks;
    CHECKF(now + size <= in_use, "%s of %zu B: bytes in use %zu -> %zu", how, size, in_use, now);
  }
}

static void release_realloc0(void *p, size_t size, size_t align)
{
  void *z = tu_launder(A(realloc)(p, 0));
  CHECKF(z == NULL, "realloc(p, 0) of %zu B returned %p, not NULL", size, z);
}
static void release_free_sized(void *p, size_t size, size_t align) { FREE_SIZED(p, size); }
static void release_free_aligned_sized(void *p, size_t size, size_t align) { FREE_ALIGNED_SIZED(p, align, size); }

/* realloc(p, 0): frees p, returns NULL (README: as glibc). */
static void test_realloc_zero(void)
{
  for (size_t k = 0; k < NPOOL; k++) check_released("realloc(p, 0)", release_realloc0, pool_sizes[k], 0);
}

static void test_free_sized(void)
{
  for (size_t k = 0; k < NPOOL; k++) {
    size_t s = pool_sizes[k];
    check_released("free_sized", release_free_sized, s, 0);
    check_released("free_aligned_sized", release_free_aligned_sized, s, s >= 100000 ? 4096 : 64);
  }
  /* NULL is a no-op. */
  FREE_SIZED(NULL, 0);
  FREE_ALIGNED_SIZED(NULL, 64, 0);
#ifndef USE_HAK_API
  if (!free_sized || !free_aligned_sized)
    printf("note: free_sized/free_aligned_sized not exported under the standard names: free checked instead\n");
#endif
}

/* ---- glibc extras ---- */

/* malloc_trim keeps live blocks intact. */
static void test_trim(void)
{
  enum { N = 200 };
  void *v[N];
  size_t sz[N];
  for (int i = 0; i < N; i++) {
    sz[i] = pool_sizes[i % (NPOOL - 1)] + (size_t)i;
    v[i] = tu_launder(A(malloc)(sz[i]));
    CHECK(v[i] != NULL);
    tu_fill(v[i], 0, sz[i], (uint64_t)i);
  }
  for (int i = 0; i < N; i += 2) { A(free)(v[i]); v[i] = NULL; }
  int t = A(malloc_trim)(0);
  CHECKF(t == 0 || t == 1, "malloc_trim returned %d", t);
  t = A(malloc_trim)(1 << 20);
  CHECKF(t == 0 || t == 1, "malloc_trim returned %d", t);
  for (int i = 1; i < N; i += 2) CHECK_PAT(v[i], sz[i], (uint64_t)i);
  for (int i = 0; i < N; i += 2) {
    v[i] = tu_launder(A(malloc)(sz[i]));
    CHECK(v[i] != NULL);
    tu_fill(v[i], 0, sz[i], (uint64_t)i);
  }
  for (int i = 0; i < N; i++) { CHECK_PAT(v[i], sz[i], (uint64_t)i); A(free)(v[i]); }
}

/* mallopt: 1 for glibc's documented parameters, 0 for any other; the
 * allocator works on after each call. */
_Static_assert(M_MXFAST == 1 && M_TRIM_THRESHOLD == -1 && M_TOP_PAD == -2 && M_MMAP_THRESHOLD == -3 &&
               M_MMAP_MAX == -4 && M_CHECK_ACTION == -5 && M_PERTURB == -6 && M_ARENA_TEST == -7 &&
               M_ARENA_MAX == -8, "glibc's mallopt parameter numbers");

static void test_mallopt(void)
{
  static const struct { int param, value; const char *name; } known[] = {
    {M_MXFAST, 64, "M_MXFAST"},          {M_TRIM_THRESHOLD, 256 * 1024, "M_TRIM_THRESHOLD"},
    {M_TOP_PAD, 0, "M_TOP_PAD"},         {M_MMAP_THRESHOLD, 256 * 1024, "M_MMAP_THRESHOLD"},
    {M_MMAP_MAX, 65536, "M_MMAP_MAX"},   {M_CHECK_ACTION, 3, "M_CHECK_ACTION"},
    {M_PERTURB, 0, "M_PERTURB"},         {M_ARENA_TEST, 8, "M_ARENA_TEST"},
    {M_ARENA_MAX, 8, "M_ARENA_MAX"},
  };
  /* 2 .. 4: SVID's M_NLBLKS, M_GRAIN, M_KEEP, which glibc does not document */
  static const int unknown[] = {0, 2, 3, 4, 5, -9, -100, 12345, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
    int r = A(mallopt)(known[i].param, known[i].value);
    CHECKF(r == 1, "mallopt(%s, %d) returned %d", known[i].name, known[i].value, r);
    void *p = tu_launder(A(malloc)(1000));
    CHECK(p != NULL);
    A(free)(p);
  }
  for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
    int r = A(mallopt)(unknown[i], 1);
#ifdef HAKMEM_TEST_MALLOPT_STRICT
    CHECKF(r == 0, "mallopt(%d, 1), not a parameter glibc documents, returned %d", unknown[i], r);
#else
    (void)r; /* the stub of today accepts every parameter */
#endif
    void *p = tu_launder(A(malloc)(1000));
    CHECK(p != NULL);
    A(free)(p);
  }
}

/* mallinfo2: in-use bytes follow 10 MiB of live blocks; mallinfo gives the
 * same figures. */
static void test_mallinfo(void)
{
  struct mallinfo2 m0 = A(mallinfo2)();
  enum { NB = 10240 };
  void **blk = tu_launder(A(malloc)(NB * sizeof(void *)));
  CHECK(blk != NULL);
  for (int i = 0; i < NB; i++) { blk[i] = tu_launder(A(malloc)(1024)); CHECK(blk[i] != NULL); memset(blk[i], 1, 1024); }
  struct mallinfo2 m1 = A(mallinfo2)();
  CHECKF(m1.uordblks >= m0.uordblks + 9 * MiB, "uordblks %zu -> %zu after 10 MiB live", m0.uordblks, m1.uordblks);
  CHECKF(m1.arena + m1.hblkhd >= m1.uordblks, "arena %zu + hblkhd %zu < uordblks %zu", m1.arena, m1.hblkhd,
         m1.uordblks);
  for (int i = 0; i < NB; i++) A(free)(blk[i]);
  A(free)(blk);
  struct mallinfo2 m2 = A(mallinfo2)();
  CHECKF(m2.uordblks + 5 * MiB <= m1.uordblks, "uordblks %zu -> %zu after freeing 10 MiB", m1.uordblks, m2.uordblks);
  /* mallinfo: the same figures in int fields (glibc deprecates it; programs still call it). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo m3 = A(mallinfo)();
  struct mallinfo2 m4 = A(mallinfo2)();
#pragma GCC diagnostic pop
  CHECKF(m3.uordblks >= 0 && (size_t)m3.uordblks == (m4.uordblks > INT_MAX ? INT_MAX : m4.uordblks),
         "mallinfo uordblks %d, mallinfo2 %zu", m3.uordblks, m4.uordblks);
  CHECKF((size_t)m3.arena == (m4.arena > INT_MAX ? INT_MAX : m4.arena), "mallinfo arena %d, mallinfo2 %zu", m3.arena,
         m4.arena);
}

static void child_malloc_stats(void *arg) { A(malloc_stats)(); }
static void child_stats_print(void *arg) { void *p = A(malloc)(100); hak_stats_print(2); A(free)(p); }

/* malloc_stats writes to stderr; hak_stats_print writes its report to fd. */
static void test_stats(void)
{
  static char out[65536];
  char why[64];
  int st = tu_child_output(child_malloc_stats, NULL, 60, out, sizeof out);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "malloc_stats child: %s", tu_status_str(st, why, sizeof why));
  CHECKF(strlen(out) > 0, "malloc_stats printed nothing on stderr");
  st = tu_child_output(child_stats_print, NULL, 60, out, sizeof out);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "hak_stats_print child: %s", tu_status_str(st, why, sizeof why));
  CHECKF(strstr(out, "hakmem") != NULL, "hak_stats_print output lacks \"hakmem\": %.200s", out);
}

/* ---- glibc's __libc_ names ---- */

#ifndef USE_HAK_API
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *p, size_t size);
void __libc_free(void *p);
void *__libc_memalign(size_t align, size_t size);

/* Some libraries call glibc's allocator by these names: a block must be able
 * to go out through one name and come back through the other. */
static void test_libc_names(void)
{
  char *p = tu_launder(__libc_malloc(100));
  CHECKF(p != NULL && hak_owns(p), "__libc_malloc gave %p, not hakmem's", (void *)p);
  memset(p, 'a', 100);
  p = tu_launder(realloc(p, 5000));
  CHECK(p != NULL && p[0] == 'a' && p[99] == 'a');
  free(p);
  p = tu_launder(malloc(300));
  CHECK(p != NULL);
  __libc_free(p);
  char *q = tu_launder(malloc(300)); /* the block freed last goes out first: __libc_free freed it */
  CHECKF(q == p, "malloc after __libc_free gave %p, not the freed %p", (void *)q, (void *)p);
  memset(q, 'c', 300);
  q = tu_launder(__libc_realloc(q, 40000));
  CHECK(q != NULL && hak_owns(q) && q[0] == 'c' && q[299] == 'c');
  __libc_free(q);
  p = tu_launder(__libc_calloc(1000, 10));
  CHECK(p != NULL && hak_owns(p) && all_zero(p, 10000));
  __libc_free(p);
  p = tu_launder(__libc_memalign(4096, 100));
  CHECK(p != NULL && hak_owns(p) && (uintptr_t)p % 4096 == 0);
  free(p);
}
#endif

/* ---- ownership and foreign pointers ---- */

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
static malloc_fn libc_malloc;
static free_fn libc_free;

static void find_libc(void)
{
#ifdef USE_HAK_API
  libc_malloc = malloc;
  libc_free = free;
#else
  /* The C library's own malloc, behind libhakmem's override. */
  void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (h != NULL) {
    libc_malloc = (malloc_fn)dlsym(h, "malloc");
    libc_free = (free_fn)dlsym(h, "free");
    if (libc_malloc == (malloc_fn)malloc) libc_malloc = NULL; /* not distinguishable */
  }
#endif
}

enum { FOREIGN_STACK, FOREIGN_MMAP, FOREIGN_LIBC, REALLOC_STACK, REALLOC_MMAP };
static const char *foreign_name[] = {"free(stack)", "free(mmap)", "free(libc malloc)", "realloc(stack)",
                                     "realloc(mmap)"};

static void child_foreign(void *arg)
{
  int kind = (int)(intptr_t)arg;
  unsigned char stackbuf[512] __attribute__((aligned(16)));
  unsigned char *target;
  size_t len;
  if (kind == FOREIGN_STACK || kind == REALLOC_STACK) {
    target = stackbuf;
    len = sizeof stackbuf;
  } else if (kind == FOREIGN_LIBC) {
    len = 256;
    target = libc_malloc(len);
    CHECK(target != NULL);
  } else {
    len = 4 * pagesz;
    target = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(target != MAP_FAILED);
  }
  tu_fill(target, 0, len, 0xF00D);
  unsigned char *p = tu_launder(target + 64);
  /* Some live blocks of our own must survive the bad calls. */
  void *own = tu_launder(A(malloc)(100));
  tu_fill(own, 0, 100, 1);
  for (int i = 0; i < 5; i++) {
    if (kind == REALLOC_STACK || kind == REALLOC_MMAP) {
      void *r = tu_launder(A(realloc)(p, 1000));
      CHECKF(r == NULL, "realloc of a foreign pointer returned %p", r);
    } else {
      A(free)(p);
    }
  }
  size_t bad = tu_verify(target, 0, len, 0xF00D);
  CHECKF(bad == (size_t)-1, "foreign memory written at byte %zu", bad);
  CHECK_PAT(own, 100, 1);
  A(free)(own);
  void *more = tu_launder(A(malloc)(100));
  CHECK(more != NULL);
  A(free)(more);
  if (kind == FOREIGN_LIBC) libc_free(target);
}

static int count_lines_with(const char *s, const char *word)
{
  int n = 0;
  while (*s) {
    const char *e = strchr(s, '\n');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    char line[1024];
    size_t l = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, s, l);
    line[l] = 0;
    if (strstr(line, word)) n++;
    s += len + (e ? 1 : 0);
  }
  return n;
}

static void test_owns(void)
{
  void *p = tu_launder(A(malloc)(100));
  void *big = tu_launder(A(malloc)(5 * MiB));
  void *al = NULL;
  CHECK(A(posix_memalign)(&al, 4096, 5000) == 0);
  CHECK(hak_owns(p));
  CHECK(hak_owns(big));
  CHECK(hak_owns(al));
  char stackvar[16];
  CHECK(!hak_owns(tu_launder(stackvar)));
  CHECK(!hak_owns(NULL));
  void *mm = mmap(NULL, pagesz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(mm != MAP_FAILED);
  CHECK(!hak_owns(mm));
  munmap(mm, pagesz);
  if (libc_malloc) {
    void *g = libc_malloc(100);
    CHECK(g != NULL);
    CHECK(!hak_owns(g));
    libc_free(g);
  }
  A(free)(p);
  A(free)(big);
  A(free)(al);
}

/* Each bad call five times in a child: one line on stderr, nothing written
 * through the pointer, the heap unharmed. */
static void test_foreign(void)
{
  static char out[65536];
  char why[64];
  for (int kind = FOREIGN_STACK; kind <= REALLOC_MMAP; kind++) {
    if (kind == FOREIGN_LIBC && !libc_malloc) continue;
    int st = tu_child_output(child_foreign, (void *)(intptr_t)kind, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s x5: child ended with %s; stderr: %.300s", foreign_name[kind],
           tu_status_str(st, why, sizeof why), out);
    int n = count_lines_with(out, "hakmem");
    CHECKF(n == 1, "%s x5: expected exactly one line with \"hakmem\" on stderr, got %d: %.300s",
           foreign_name[kind], n, out);
  }
}

/* A Large block freed twice, while it is the last of its class freed (kept
 * by the thread for its next malloc) and after later frees pushed it on:
 * each time one line on stderr, and the block is handed out once. */
static void child_large_double_free(void *arg)
{
  size_t size = 100 * 1024, n = 24;
  bool later = arg != NULL;
  unsigned char *b[24];
  for (size_t i = 0; i < n; i++) {
    b[i] = tu_launder(A(malloc)(size));
    CHECK(b[i] != NULL);
    tu_fill(b[i], 0, size, (unsigned)i);
  }
  unsigned char *victim = b[0];
  A(free)(victim);
  if (later)
    for (size_t i = 1; i < n; i++) A(free)(b[i]);
  for (int i = 0; i < 3; i++) A(free)(victim);
  unsigned char *x = tu_launder(A(malloc)(size)), *y = tu_launder(A(malloc)(size));
  CHECK(x != NULL && y != NULL);
  CHECKF(x != y, "the block freed twice was handed out twice (%p)", (void *)x);
  if (!later)
    for (size_t i = 1; i < n; i++) CHECK_PAT(b[i], size, (unsigned)i);
  A(free)(x);
  A(free)(y);
  if (!later)
    for (size_t i = 1; i < n; i++) A(free)(b[i]);
}

static void test_large_double_free(void)
{
  static char out[65536];
  char why[64];
  for (int later = 0; later < 2; later++) {
    int st = tu_child_output(child_large_double_free, later ? (void *)1 : NULL, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child ended with %s; stderr: %.300s",
           later ? "freed long ago" : "freed last", tu_status_str(st, why, sizeof why), out);
    int n = count_lines_with(out, "hakmem");
    CHECKF(n == 1, "expected exactly one line with \"hakmem\" on stderr, got %d: %.300s", n, out);
  }
}

/* A page-aligned pointer inside a Large block, freed by its owner five
 * times: one line on stderr, the free ignored, the block's bytes kept, and
 * no later block handed out over it. */
static void child_large_inside(void *arg)
{
  (void)arg;
  size_t size = 100 * 1024;
  unsigned char *b = tu_launder(A(malloc)(size));
  CHECK(b != NULL);
  tu_fill(b, 0, size, 7);
  for (int i = 0; i < 5; i++) A(free)(tu_launder(b + 2 * pagesz));
  for (int i = 0; i < 16; i++) {
    size_t xs = 33000 + (size_t)i * 4096;
    unsigned char *x = tu_launder(A(malloc)(xs));
    CHECK(x != NULL);
    CHECKF(x + xs <= b || x >= b + size, "a block handed out over the live one (%p in %p)", (void *)x, (void *)b);
    A(free)(x);
  }
  CHECK_PAT(b, size, 7);
  A(free)(b);
}

static void test_large_inside(void)
{
  static char out[65536];
  char why[64];
  int st = tu_child_output(child_large_inside, NULL, 60, out, sizeof out);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child ended with %s; stderr: %.300s", tu_status_str(st, why, sizeof why), out);
  int n = count_lines_with(out, "hakmem");
  CHECKF(n == 1, "expected exactly one line with \"hakmem\" on stderr, got %d: %.300s", n, out);
}

/* Size classes, through the usable size: it grows with the size and wastes
 * at most a quarter of it (an eighth from 1 to 8 KiB); a power of two from
 * 1 to 4 KiB behind a header of one or two words (sqlite's 1032 and 4104 B)
 * takes 16 bytes more, not the next eighth of a doubling. */
static void test_classes(void)
{
  size_t last = 0;
  for (size_t n = 64; n <= 32768; n += 8) {
    void *p = A(malloc)(n);
    size_t us = A(malloc_usable_size)(p);
    CHECKF(us >= n && us >= last, "malloc(%zu): usable %zu (the size before: %zu)", n, us, last);
    CHECKF(us - n <= n / (n > 1024 && n <= 8192 ? 8 : 4), "malloc(%zu): usable %zu wastes too much", n, us);
    last = us;
    A(free)(p);
  }
  for (size_t k = 1024; k <= 4096; k *= 2)
    for (size_t h = 8; h <= 16; h += 8) {
      void *p = A(malloc)(k + h);
      CHECKF(A(malloc_usable_size)(p) == k + 16, "malloc(%zu): usable %zu, not %zu", k + h,
             A(malloc_usable_size)(p), k + 16);
      A(free)(p);
    }
}

/* Large blocks freed by plain and aligned calls of one size, taken back by
 * calls of every alignment: a freed block a thread keeps for its next
 * malloc of the size serves an aligned one only where it is aligned so. */
static void test_aligned_reuse(void)
{
  static const size_t aligns[] = {0, 4096, 8192, 65536, 131072};
  enum { N = 5 };
  void *v[N] = {0};
  size_t checked = 0;
  for (int round = 0; round < 400; round++) {
    size_t size = 40000 + (size_t)(round % 3) * 4096, align = aligns[round % N];
    int k = (round * 7) % N;
    A(free)(v[k]);
    if (align) {
      CHECK(A(posix_memalign)(&v[k], align, size) == 0);
      CHECKF(((uintptr_t)v[k] & (align - 1)) == 0, "posix_memalign(%zu, %zu) = %p misaligned", align, size, v[k]);
    } else {
      v[k] = tu_launder(A(malloc)(size));
      CHECK(v[k] != NULL);
    }
    CHECK(A(malloc_usable_size)(v[k]) >= size);
    memset(v[k], round & 0xff, size);
    checked++;
  }
  for (int i = 0; i < N; i++) A(free)(v[i]);
  printf("test_api aligned_reuse: %zu blocks of 40-48 KB, plain and aligned to 4-128 KiB, each aligned as asked: OK\n",
         checked);
}

static const tu_case_t cases[] = {
  {"malloc", test_malloc_basic, 0},
  {"classes", test_classes, 0},
  {"calloc", test_calloc, 0},
  {"reallocarray", test_reallocarray, 0},
  {"aligned", test_aligned, 0},
  {"aligned_reuse", test_aligned_reuse, 0},
  {"realloc", test_realloc, 0},
  {"realloc_zero", test_realloc_zero, 0},
  {"free_sized", test_free_sized, 0},
  {"trim", test_trim, 0},
  {"mallopt", test_mallopt, 0},
  {"mallinfo", test_mallinfo, 0},
  {"stats", test_stats, 0},
#ifndef USE_HAK_API
  {"libc_names", test_libc_names, 0},
#endif
  {"owns", test_owns, 0},
  {"foreign", test_foreign, 0},
  {"large_double_free", test_large_double_free, 0},
  {"large_inside", test_large_inside, 0},
};

int main(int argc, char **argv)
{
  pagesz = (size_t)sysconf(_SC_PAGESIZE);
  find_libc();
  return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, "");
}
