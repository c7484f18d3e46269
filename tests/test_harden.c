/* test_harden.c - what the default build catches (docs/security.md): a
 * double free of every size class, later, from two threads at once, twice
 * by another thread (at once, or after other frees), after its slab was
 * emptied and reused, or after a teardown; a free list link overwritten
 * after free (also on the list of a thread that freed another's blocks, and
 * on a thread's list of Large blocks) or by an overflow; a
 * free of a pointer inside a block of every size class, by its owner or
 * another thread. Each case runs the bad program in a child,
 * which must end with SIGABRT after one line on stderr and never get the
 * same block twice (it exits 3 if it does). Case report_mode (CTest sets
 * HAKMEM_ON_ERROR=report) checks the other outcome: one line, the list
 * dropped, every block still distinct; each interior free ignored, and no
 * block handed out over the live one it pointed into.
 *
 * usage: test_harden [CASE|all]
 */
#include <pthread.h>
#include <stdbool.h>

#include "testutil.h"

static const size_t class_sizes[] = {
  8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192,
  224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1040,
  1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048, 2064, 2304, 2560,
  2816, 3072, 3328, 3584, 3840, 4096, 4112, 4608, 5120, 5632, 6144,
  6656, 7168, 7680, 8192, 8448, 9984, 12032, 14080, 16384, 16640, 20224,
  24320, 28416, 32768};

/* n blocks of size bytes, kept: the child exits 3 if one comes twice. */
static void take_distinct(size_t size, size_t n)
{
  void **got = calloc(n, sizeof *got);
  for (size_t i = 0; i < n; i++) {
    got[i] = malloc(size);
    for (size_t j = 0; j < i; j++)
      if (got[j] == got[i]) {
        tu_say(1, "the same block twice: %p (blocks %zu and %zu of %zu B)\n", got[i], j, i, size);
        _exit(3);
      }
  }
}

static void double_free_now(void *arg)
{
  size_t size = *(size_t *)arg;
  char *p = tu_launder(malloc(size));
  free(p);
  free(p);
  take_distinct(size, 4);
}

static void double_free_later(void *arg)
{
  char *a = tu_launder(malloc(100)), *b = tu_launder(malloc(100));
  free(a);
  free(b);
  free(a);
  take_distinct(100, 8);
}

/* The owner and another thread free the same block at the same moment. */
static pthread_barrier_t both;
static void *free_too(void *p)
{
  pthread_barrier_wait(&both);
  free(p);
  return NULL;
}

static void double_free_threads(void *arg)
{
  char *p = tu_launder(malloc(64));
  pthread_t t;
  pthread_barrier_init(&both, NULL, 2);
  pthread_create(&t, NULL, free_too, p);
  pthread_barrier_wait(&both);
  free(p);
  pthread_join(t, NULL);
  take_distinct(64, 3000);
}

static char not_heap[256];

/* A write after free puts an address of the attacker's in the link. */
static void overwritten_link(void *arg)
{
  char *p = tu_launder(malloc(100));
  free(p);
  memcpy(p, &(void *){not_heap}, sizeof(void *));
  for (int i = 0; i < 4; i++)
    if ((char *)tu_launder(malloc(100)) == not_heap) _exit(3);
}

/* The same for a Large block, whose freed blocks the thread keeps on a list
 * per class through the blocks themselves. */
static void overwritten_large_link(void *arg)
{
  char *a = tu_launder(malloc(100000)), *b = tu_launder(malloc(100000));
  free(a);
  free(b);
  memcpy(b, &(void *){not_heap}, sizeof(void *));
  for (int i = 0; i < 4; i++)
    if ((char *)tu_launder(malloc(100000)) == not_heap) _exit(3);
}

/* Another thread, which has allocated (a thread with no heap sends its
 * first remote frees home at once), frees 6 of this thread's blocks, which
 * it keeps on its foreign list (heap.h; fewer than one in 32 goes home at
 * once, and none of a slab this thread still allocates from: the filler
 * moves it on), and overwrites their links; at its exit the list goes home
 * and finds the first link broken. */
enum { FOREIGN_N = 6 };
static void *free_then_overwrite(void *arg)
{
  char **blocks = arg;
  free(tu_launder(malloc(8)));
  for (int i = 0; i < FOREIGN_N; i++) free(blocks[i]);
  for (int i = 0; i < FOREIGN_N; i++) memcpy(blocks[i], &(void *){not_heap}, sizeof(void *));
  return NULL;
}

static void overwritten_foreign_link(void *arg)
{
  char *blocks[FOREIGN_N];
  for (int i = 0; i < FOREIGN_N; i++) blocks[i] = tu_launder(malloc(100));
  tu_filler(100);
  pthread_t t;
  pthread_create(&t, NULL, free_then_overwrite, blocks);
  pthread_join(t, NULL);
  for (int i = 0; i < 2 * FOREIGN_N; i++)
    if ((char *)tu_launder(malloc(100)) == not_heap) _exit(3);
}

/* An overflow of a block into its free neighbour's link. */
static void overflow_into_free(void *arg)
{
  char *a = tu_launder(malloc(64)), *b = tu_launder(malloc(64));
  if (b != a + 64) _exit(4); /* not neighbours: the case cannot be made */
  free(b);
  memset(a, 'A', 72);
  take_distinct(64, 4);
}

/* A block of size bytes, freed by a pointer into it (16 bytes in, or half
 * way for the smallest classes); then the block's neighbours. */
static size_t interior_offset(size_t size) { return size >= 32 ? 16 : size / 2; }

static void interior_free(void *arg)
{
  size_t size = *(size_t *)arg;
  char *p = tu_launder(malloc(size));
  free(p + interior_offset(size));
  take_distinct(size, 4);
}

static void *free_it(void *p)
{
  free(p);
  return NULL;
}

/* The same, by a thread that does not own the block's slab. */
static void interior_free_remote(void *arg)
{
  char *p = tu_launder(malloc(64));
  pthread_t t;
  pthread_create(&t, NULL, free_it, p + 16);
  pthread_join(t, NULL);
  take_distinct(64, 4);
}

/* Another thread frees a block twice before its owner collects: the second
 * free finds the block's remote bit set. Blocks of every class. */
static void *free_twice(void *p)
{
  free(p);
  free(p);
  return NULL;
}

static void double_free_remote(void *arg)
{
  size_t size = *(size_t *)arg;
  char *p = tu_launder(malloc(size));
  pthread_t t;
  pthread_create(&t, NULL, free_twice, p);
  pthread_join(t, NULL);
  take_distinct(size, 4);
}

/* Another thread frees a block, then 299 others (so that its free is
 * published, not held with the rest), then the block again. */
enum { LATER_N = 300 };
static void *free_then_others_then_again(void *arg)
{
  char **blocks = arg;
  for (int i = 0; i < LATER_N; i++) free(blocks[i]);
  free(blocks[0]);
  return NULL;
}

static void double_free_remote_later(void *arg)
{
  size_t size = *(size_t *)arg;
  char **blocks = calloc(LATER_N, sizeof *blocks);
  for (int i = 0; i < LATER_N; i++) blocks[i] = tu_launder(malloc(size));
  pthread_t t;
  pthread_create(&t, NULL, free_then_others_then_again, blocks);
  pthread_join(t, NULL);
  take_distinct(size, 4);
}

/* A slab emptied and its memory reused (by its class and another) before a
 * block of it is freed again: a stale pointer that does not start a live
 * block. Every block handed out after must be new (exit 3 if not). */
enum { REUSE_N = 3000 };
static char *reuse_old[REUSE_N], *reuse_held[REUSE_N];

static bool reuse_is_held(const char *q)
{
  for (size_t i = 0; i < REUSE_N; i++)
    if (reuse_held[i] == q) return true;
  return false;
}

static void double_free_after_reuse(void *arg)
{
  for (size_t i = 0; i < REUSE_N; i++) reuse_old[i] = tu_launder(malloc(64));
  for (size_t i = 0; i < REUSE_N; i++) free(reuse_old[i]); /* every slab of the class empties */
  for (size_t i = 0; i < REUSE_N; i++) reuse_held[i] = tu_launder(malloc(i % 2 ? 64 : 48));
  size_t stale = 0;
  while (stale < REUSE_N && reuse_is_held(reuse_old[stale])) stale++;
  if (stale == REUSE_N) _exit(4); /* every old block is live again: the case cannot be made */
  free(reuse_old[stale]);
  for (size_t size = 48; size <= 64; size += 16)
    for (size_t i = 0; i < 2 * REUSE_N; i++) {
      char *q = tu_launder(malloc(size));
      if (reuse_is_held(q)) {
        tu_say(1, "a live block handed out again: %p (%zu B)\n", q, size);
        _exit(3);
      }
    }
}

/* A teardown: a run of frees longer than the tcache points each slab it
 * reaches at its own list (docs/security.md). Half the blocks stay live, so
 * that no slab empties; then a double free of a block of those slabs, at
 * once (arg NULL) or with another free between. */
#define TEARDOWN_N 20000
static void *teardown_block[TEARDOWN_N];
static void double_free_after_teardown(void *arg)
{
  for (size_t i = 0; i < TEARDOWN_N; i++) teardown_block[i] = tu_launder(malloc(48));
  for (size_t i = 0; i < TEARDOWN_N / 2; i++) {
    size_t k = 2 * (i * 7919 % (TEARDOWN_N / 2)) + 1; /* each odd block once, in scattered order */
    free(teardown_block[k]);
    teardown_block[k] = NULL;
  }
  char *a = teardown_block[TEARDOWN_N / 2], *b = teardown_block[TEARDOWN_N / 2 + 2];
  free(a);
  if (arg) free(b);
  free(a);
  take_distinct(48, TEARDOWN_N);
}

/* Runs bad(arg) in a child: SIGABRT, one line on stderr naming the problem. */
static void expect_abort_with(void (*bad)(void *), void *arg, const char *what, const char *problem)
{
  char out[4096], why[64];
  int st = tu_child_output(bad, arg, 20, out, sizeof out);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: child ended with %s, not SIGABRT", what,
         tu_status_str(st, why, sizeof why));
  CHECKF(strstr(out, "hakmem") && strstr(out, problem), "%s: stderr was \"%s\"", what, out);
  CHECKF(strchr(out, '\n') == out + strlen(out) - 1, "%s: want one line, got \"%s\"", what, out);
}

static void expect_abort(void (*bad)(void *), void *arg, const char *what)
{
  expect_abort_with(bad, arg, what, "double free");
}

/* bad(&size) for the size of every class; what: a format for the size. */
static void expect_abort_every_class(void (*bad)(void *), const char *what_fmt)
{
  for (size_t i = 0; i < sizeof class_sizes / sizeof *class_sizes; i++) {
    char what[64];
    snprintf(what, sizeof what, what_fmt, class_sizes[i]);
    expect_abort(bad, (void *)&class_sizes[i], what);
  }
}

static void test_double_free_every_class(void)
{
  expect_abort_every_class(double_free_now, "double free of %zu B");
  printf("test_harden: double free of each of %zu classes -> SIGABRT\n", sizeof class_sizes / sizeof *class_sizes);
}

static void test_double_free_later(void) { expect_abort(double_free_later, NULL, "free(a) free(b) free(a)"); }
static void test_double_free_threads(void) { expect_abort(double_free_threads, NULL, "two threads free one block"); }
static void test_overwritten_link(void) { expect_abort(overwritten_link, NULL, "link overwritten after free"); }
static void test_overwritten_large_link(void) { expect_abort(overwritten_large_link, NULL, "Large link overwritten"); }
static void test_overwritten_foreign_link(void)
{
  expect_abort(overwritten_foreign_link, NULL, "link overwritten after another thread's free");
}
static void test_double_free_after_teardown(void)
{
  expect_abort(double_free_after_teardown, NULL, "free(p) free(p) after a teardown");
  expect_abort(double_free_after_teardown, "", "free(a) free(b) free(a) after a teardown");
}
static void test_overflow_into_free(void) { expect_abort(overflow_into_free, NULL, "overflow into a free block"); }

/* The sizes of the program (48, 64, 5,000, 20,000 B) and every class. */
static void test_interior_free_every_class(void)
{
  static const size_t odd[] = {5000, 20000};
  for (size_t i = 0; i < sizeof class_sizes / sizeof *class_sizes + 2; i++) {
    const size_t *size = i < 2 ? &odd[i] : &class_sizes[i - 2];
    char what[64];
    snprintf(what, sizeof what, "free(p + %zu) of %zu B", interior_offset(*size), *size);
    expect_abort_with(interior_free, (void *)size, what, "inside a block");
  }
  printf("test_harden: free of a pointer inside a block, %zu sizes -> SIGABRT\n",
         sizeof class_sizes / sizeof *class_sizes + 2);
}

/* Caught (a double free when the block is taken, or a pointer inside a
 * block), or reported and ignored where the block's memory is no block now. */
static void test_double_free_after_reuse(void)
{
  char out[4096], why[64];
  int st = tu_child_output(double_free_after_reuse, NULL, 20, out, sizeof out);
  bool caught = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && (strstr(out, "double free") || strstr(out, "inside a block"));
  bool ignored = WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "not allocated by hakmem");
  CHECKF(caught || ignored, "child ended with %s; stderr \"%s\" (3: a live block handed out again)",
         tu_status_str(st, why, sizeof why), out);
  CHECKF(strchr(out, '\n') == out + strlen(out) - 1, "want one line, got \"%s\"", out);
  printf("test_harden: double free after the slab was reused: %s\n", caught ? "caught" : "reported, ignored");
}

static void test_double_free_remote(void)
{
  expect_abort_every_class(double_free_remote, "another thread frees %zu B twice");
}

static void test_double_free_remote_later(void)
{
  expect_abort_every_class(double_free_remote_later, "another thread frees %zu B, 299 others, the first again");
}

static void test_interior_free_remote(void)
{
  expect_abort_with(interior_free_remote, NULL, "free(p + 16) by another thread", "inside a block");
}

/* Report mode: every 8-byte offset inside a live block (the first 256 bytes
 * and its last word) freed; each is ignored, and no block handed out after
 * overlaps the live one. The child writes one line per free. */
static size_t interior_offsets(size_t size, size_t *offs)
{
  size_t n = 0;
  for (size_t off = 8; off < size && off < 256; off += 8) offs[n++] = off;
  if (size - 8 >= 256) offs[n++] = size - 8;
  return n;
}

static void interior_every_offset(void *arg)
{
  size_t size = *(size_t *)arg, offs[40];
  char *p = tu_launder(malloc(size));
  for (size_t i = 0, n = interior_offsets(size, offs); i < n; i++) free(p + offs[i]);
  for (int i = 0; i < 256; i++) {
    char *q = tu_launder(malloc(size));
    if (q < p + size && p < q + size) {
      tu_say(1, "block %p overlaps the live %p (%zu B)\n", q, p, size);
      _exit(3);
    }
  }
}

/* HAKMEM_ON_ERROR=report: the same programs report, drop the list, go on. */
static void test_report_mode(void)
{
  const char *mode = getenv("HAKMEM_ON_ERROR");
  CHECKF(mode && strcmp(mode, "report") == 0, "run with HAKMEM_ON_ERROR=report (CTest's harden_report)");
  void (*progs[])(void *) = {double_free_now, double_free_later, double_free_threads, overwritten_link,
                             overwritten_foreign_link, overwritten_large_link};
  size_t size = 64;
  for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) {
    char out[4096], why[64];
    int st = tu_child_output(progs[i], &size, 20, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "program %zu: %s (3: the same block twice)", i,
           tu_status_str(st, why, sizeof why));
    /* a list dropped, or a second free ignored; one line each (program 2, a
     * block freed by its owner and by another thread at once, may show both) */
    const char *nl = strchr(out, '\n');
    bool lines_ok = nl == out + strlen(out) - 1 || (progs[i] == double_free_threads && nl && strchr(nl + 1, '\n') == out + strlen(out) - 1);
    CHECKF((strstr(out, "dropped") || strstr(out, "ignored")) && lines_ok, "program %zu: stderr \"%s\"", i, out);
  }
  {
    char out[4096], why[64];
    int st = tu_child_output(double_free_remote, &size, 20, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "remote double free: %s (3: the same block twice)",
           tu_status_str(st, why, sizeof why));
    CHECKF(strstr(out, "double free") && strstr(out, "ignored") && strchr(out, '\n') == out + strlen(out) - 1,
           "remote double free: stderr \"%s\"", out);
  }
  static const size_t sizes[] = {48, 64, 5000, 20000};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    char out[8192], why[64];
    int st = tu_child_output(interior_every_offset, (void *)&sizes[i], 20, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "interior frees of %zu B: %s (3: a block over the live one)",
           sizes[i], tu_status_str(st, why, sizeof why));
    size_t lines = 0, offs[40], want = interior_offsets(sizes[i], offs);
    for (const char *c = out; (c = strstr(c, "inside a block")) != NULL; c++) lines++;
    CHECKF(lines == want && strstr(out, "ignored"), "interior frees of %zu B: %zu reports of %zu; stderr \"%.200s\"",
           sizes[i], lines, want, out);
  }
}

static const tu_case_t cases[] = {
  {"double_free_every_class", test_double_free_every_class, 0},
  {"double_free_later", test_double_free_later, 0},
  {"double_free_threads", test_double_free_threads, 0},
  {"double_free_after_reuse", test_double_free_after_reuse, 0},
  {"double_free_after_teardown", test_double_free_after_teardown, 0},
  {"overwritten_link", test_overwritten_link, 0},
  {"overwritten_foreign_link", test_overwritten_foreign_link, 0},
  {"overwritten_large_link", test_overwritten_large_link, 0},
  {"overflow_into_free", test_overflow_into_free, 0},
  {"interior_free_every_class", test_interior_free_every_class, 0},
  {"double_free_remote", test_double_free_remote, 0},
  {"double_free_remote_later", test_double_free_remote_later, 0},
  {"interior_free_remote", test_interior_free_remote, 0},
  {"report_mode", test_report_mode, TU_BY_NAME},
};

int main(int argc, char **argv) { return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, ""); }
