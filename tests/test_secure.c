/* test_secure.c - each detection of the secure build (libhakmem-secure.so)
 * fires. Every case runs in a child that does one bad thing; the parent
 * checks the child's one-line message on stderr and the signal that ended it
 * (SIGABRT for a detected misuse, SIGSEGV for a guard page). A last case
 * checks that fresh blocks come out in random order.
 *
 * usage: test_secure [CASE|all]   (cases: the table at the end)
 */
#include "testutil.h"

static void double_free_small(void *arg)
{
  char *p = tu_launder(malloc(100));
  free(p);
  free(p);
}

static void double_free_large(void *arg)
{
  char *p = tu_launder(malloc(200000));
  free(p);
  free(p);
}

static void double_free_huge(void *arg)
{
  char *p = tu_launder(malloc(8 << 20));
  free(p);
  free(p);
}

static void interior_free(void *arg)
{
  char *p = tu_launder(malloc(100));
  free(p + 16);
}

static void foreign_free(void *arg)
{
  char buf[64];
  free(tu_launder(buf + 8));
}

/* A use-after-free write over a free block's list pointer: malloc must
 * notice when the list reaches it, not return the attacker's address. */
static void overwritten_list(void *arg)
{
  char *p = tu_launder(malloc(100));
  free(p);
  memset(p, 0x41, 8);
  for (int i = 0; i < 100000; i++) tu_launder(malloc(100));
}

/* The page below each region's header is a guard. */
static void guard_page(void *arg)
{
  char *p = tu_launder(malloc(100));
  volatile char *region = (char *)((uintptr_t)p & ~(((uintptr_t)4 << 20) - 1));
  region[8] = 1;
}

/* Runs bad() in a child: it must end by signal sig, having written one line
 * on stderr that holds "hakmem" and message (when not NULL). */
static void expect(void (*bad)(void *), int sig, const char *message)
{
  char out[4096], why[64];
  int st = tu_child_output(bad, NULL, 20, out, sizeof out);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == sig, "%s: child ended with %s, want signal %d", tu_run.name,
         tu_status_str(st, why, sizeof why), sig);
  if (message) {
    CHECKF(strstr(out, message) != NULL && strstr(out, "hakmem") != NULL, "%s: stderr was \"%s\"", tu_run.name, out);
    CHECKF(strchr(out, '\n') == out + strlen(out) - 1, "%s: want one line, got \"%s\"", tu_run.name, out);
  }
  printf("test_secure: %-18s -> signal %d%s%s\n", tu_run.name, sig, message ? ", " : "", message ? message : "");
}

/* Fresh blocks in random order: 64 blocks of a class nothing else uses must
 * not come out in address order. */
static void test_random_order(void)
{
  char *b[64];
  int ascending = 1;
  for (int i = 0; i < 64; i++) b[i] = tu_launder(malloc(720));
  for (int i = 1; i < 64; i++) ascending &= b[i] > b[i - 1];
  CHECKF(!ascending, "fresh blocks came out in address order");
  for (int i = 0; i < 64; i++) free(b[i]);
  printf("test_secure: fresh blocks in random order: OK\n");
}

/* Each detection: the case's name, what its child does, the signal that
 * must end the child and what its line on stderr must say. */
#define DETECTIONS(X)                                                   \
  X(double_free, double_free_small, SIGABRT, "double free")             \
  X(large_double_free, double_free_large, SIGABRT, "not a live block")  \
  X(huge_double_free, double_free_huge, SIGABRT, "double free")         \
  X(interior_pointer, interior_free, SIGABRT, "inside a block")         \
  X(foreign_pointer, foreign_free, SIGABRT, "not a live block")         \
  X(overwritten_list, overwritten_list, SIGABRT, "free list corrupted") \
  X(guard_page, guard_page, SIGSEGV, NULL)

#define DETECTION_TEST(name, bad, sig, message) \
  static void test_##name(void) { expect(bad, sig, message); }
DETECTIONS(DETECTION_TEST)

#define DETECTION_CASE(name, bad, sig, message) {#name, test_##name, 0},
static const tu_case_t cases[] = {
  DETECTIONS(DETECTION_CASE)
  {"random_order", test_random_order, 0},
};

int main(int argc, char **argv) { return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, ""); }
