/* test_secure.c - each detection of the secure build (libhakmem-secure.so)
 * fires. Every case runs in a child that does one bad thing; the parent
 * checks the child's one-line message on stderr and the signal that ended it
 * (SIGABRT for a detected misuse, SIGSEGV for a guard page). Two last
 * cases check that fresh blocks come out in random order, and that threads
 * placing regions and huge arenas at once free every block they made.
 *
 * usage: test_secure [CASE|all]   (cases: the table at the end)
 */
#include "testutil.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

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

/* Placement: rounds of 4 threads that make blocks of 16 B to 20 MiB, free
 * about half and swap others through shared slots, so that regions and
 * huge arenas are placed, grown, emptied and unmapped (the secure build
 * unmaps a region at once, malloc_trim(0) the empty arenas) by several
 * threads at once; every block's last word survives and every free is
 * accepted. A region once placed inside an arena's slot while the arena was
 * set up lost its map entries to the arena, and a free of its block
 * aborted: a race that the shape of this case hit in about 1 % of runs. */
#define PLACE_SLOTS 16
static _Atomic(uint64_t *) place_slots[PLACE_SLOTS];
static _Atomic int place_bad;

static uint64_t *place_make(uint64_t *seed)
{
  uint64_t k = tu_xorshift(seed) % 100;
  size_t words = 2 + tu_xorshift(seed) % 64;
  if (k < 3) words = (1 + tu_xorshift(seed) % 2560) * 1024;
  else if (k < 10) words = 8192 + tu_xorshift(seed) % 65536;
  uint64_t *p = malloc(words * sizeof *p);
  if (p) p[0] = words, p[words - 1] = ~words;
  return p;
}

static void place_drop(uint64_t *p)
{
  if (p && p[p[0] - 1] != ~p[0]) atomic_store(&place_bad, 1);
  free(p);
}

static void *place_body(void *arg)
{
  enum { MADE = 3000 };
  uint64_t seed = (uintptr_t)arg * 7919 + 3, **held = calloc(MADE, sizeof *held);
  size_t n = 0;
  for (; held && n < MADE; n++) { /* about half freed as it goes: some 100 huge blocks live at the end */
    held[n] = place_make(&seed);
    size_t j = tu_xorshift(&seed) % (n + 1);
    if (tu_xorshift(&seed) % 2) place_drop(held[j]), held[j] = NULL;
    if (tu_xorshift(&seed) % 4 == 0)
      held[j] = atomic_exchange(&place_slots[tu_xorshift(&seed) % PLACE_SLOTS], held[j]);
  }
  for (size_t j = 0; j < n; j++) place_drop(held[j]);
  free(held);
  return NULL;
}

static void test_placement(void)
{
  for (int r = 0; r < 40; r++) {
    pthread_t th[4];
    for (int t = 0; t < 4; t++) CHECK(pthread_create(&th[t], NULL, place_body, (void *)(uintptr_t)(r * 4 + t + 1)) == 0);
    for (int t = 0; t < 4; t++) CHECK(pthread_join(th[t], NULL) == 0);
    malloc_trim(0); /* empty arenas unmapped: the next round places new ones */
  }
  for (int s = 0; s < PLACE_SLOTS; s++) place_drop(atomic_exchange(&place_slots[s], NULL));
  CHECKF(!atomic_load(&place_bad), "a block's last word changed");
  printf("test_secure: 40 rounds of 4 threads placing regions and arenas: every free accepted: OK\n");
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
  {"placement", test_placement, 0},
};

int main(int argc, char **argv) { return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, ""); }
