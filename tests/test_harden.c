/* test_harden.c - what the default build catches (docs/security.md): a
 * double free of every size class, later or from two threads at once, and
 * a free list link overwritten after free or by an overflow. Each case runs
 * the bad program in a child, which must end with SIGABRT after one line
 * on stderr and never get the same block twice (it exits 3 if it does).
 * Case report_mode (CTest sets HAKMEM_ON_ERROR=report) checks the other
 * outcome: one line, the list dropped, every block still distinct.
 *
 * usage: test_harden [CASE|all]
 */
#include <pthread.h>

#include "testutil.h"

static const size_t class_sizes[] = {8,    16,   32,   48,   64,   80,   96,    112,   128,   160,   192,
                                     224,  256,  320,  384,  448,  512,  640,   768,   896,   1024,  1280,
                                     1536, 1792, 2048, 2560, 3072, 3584, 4096,  5120,  6144,  7168,  8192,
                                     10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768};

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

/* An overflow of a block into its free neighbour's link. */
static void overflow_into_free(void *arg)
{
  char *a = tu_launder(malloc(64)), *b = tu_launder(malloc(64));
  if (b != a + 64) _exit(4); /* not neighbours: the case cannot be made */
  free(b);
  memset(a, 'A', 72);
  take_distinct(64, 4);
}

/* Runs bad(arg) in a child: SIGABRT, one line on stderr naming the problem. */
static void expect_abort(void (*bad)(void *), void *arg, const char *what)
{
  char out[4096], why[64];
  int st = tu_child_output(bad, arg, 20, out, sizeof out);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: child ended with %s, not SIGABRT", what,
         tu_status_str(st, why, sizeof why));
  CHECKF(strstr(out, "hakmem") && strstr(out, "double free"), "%s: stderr was \"%s\"", what, out);
  CHECKF(strchr(out, '\n') == out + strlen(out) - 1, "%s: want one line, got \"%s\"", what, out);
}

static void test_double_free_every_class(void)
{
  for (size_t i = 0; i < sizeof class_sizes / sizeof *class_sizes; i++) {
    char what[64];
    snprintf(what, sizeof what, "double free of %zu B", class_sizes[i]);
    expect_abort(double_free_now, (void *)&class_sizes[i], what);
  }
  printf("test_harden: double free of each of %zu classes -> SIGABRT\n", sizeof class_sizes / sizeof *class_sizes);
}

static void test_double_free_later(void) { expect_abort(double_free_later, NULL, "free(a) free(b) free(a)"); }
static void test_double_free_threads(void) { expect_abort(double_free_threads, NULL, "two threads free one block"); }
static void test_overwritten_link(void) { expect_abort(overwritten_link, NULL, "link overwritten after free"); }
static void test_overflow_into_free(void) { expect_abort(overflow_into_free, NULL, "overflow into a free block"); }

/* HAKMEM_ON_ERROR=report: the same programs report, drop the list, go on. */
static void test_report_mode(void)
{
  const char *mode = getenv("HAKMEM_ON_ERROR");
  CHECKF(mode && strcmp(mode, "report") == 0, "run with HAKMEM_ON_ERROR=report (CTest's harden_report)");
  void (*progs[])(void *) = {double_free_now, double_free_later, double_free_threads, overwritten_link};
  size_t size = 64;
  for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) {
    char out[4096], why[64];
    int st = tu_child_output(progs[i], &size, 20, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "program %zu: %s (3: the same block twice)", i,
           tu_status_str(st, why, sizeof why));
    CHECKF(strstr(out, "dropped") && strchr(out, '\n') == out + strlen(out) - 1, "program %zu: stderr \"%s\"", i, out);
  }
}

static const tu_case_t cases[] = {
  {"double_free_every_class", test_double_free_every_class, 0},
  {"double_free_later", test_double_free_later, 0},
  {"double_free_threads", test_double_free_threads, 0},
  {"overwritten_link", test_overwritten_link, 0},
  {"overflow_into_free", test_overflow_into_free, 0},
  {"report_mode", test_report_mode, TU_BY_NAME},
};

int main(int argc, char **argv) { return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, ""); }
