/* The heap profiler's stack walk (src/stackwalk.h) against libgcc's
 * _Unwind_Backtrace, frame for frame: through frames addressed from rsp and
 * from rbp (alloca), big frames, the C library (qsort), a signal handler, a
 * new thread, and a walk cut short. The program is built without frame
 * pointers, as most are. Each case also checks that the walk read its rules
 * from the tables and did not hand every walk to libgcc. */
#include "testutil.h"

#include <alloca.h>
#include <pthread.h>

#include "../src/stackwalk.h"

#define NOINLINE __attribute__((noinline))
#define DEPTH 64

/* Walks here with both walkers; the first return addresses are two call
 * sites in this function, the rest must be the same. Fails the case on a
 * difference; returns the depth. */
static NOINLINE uint32_t compare_here(uint32_t max, uint32_t at_least)
{
  uintptr_t a[DEPTH], b[DEPTH];
  uint32_t na = stackwalk(a, max);
  uint32_t nb = stackwalk_libgcc(b, max);
  CHECKF(na == nb, "stackwalk found %u frames, libgcc %u", na, nb);
  CHECKF(na >= at_least, "%u frames, expected at least %u", na, at_least);
  CHECKF(a[0] != b[0] && (a[0] > b[0] ? a[0] - b[0] : b[0] - a[0]) < 256, "first frames %#lx, %#lx: not both here",
         (unsigned long)a[0], (unsigned long)b[0]);
  for (uint32_t i = 1; i < na; i++)
    CHECKF(a[i] == b[i], "frame %u of %u: stackwalk %#lx, libgcc %#lx", i, na, (unsigned long)a[i], (unsigned long)b[i]);
  return na;
}

/* Three frame shapes, called in turn: a small frame from rsp, a frame from
 * rbp (alloca of a varying size), a 64 KiB frame. */
static NOINLINE uint32_t shape_rsp(int depth, uint32_t max, uint32_t at_least);
static NOINLINE uint32_t shape_rbp(int depth, uint32_t max, uint32_t at_least);
static NOINLINE uint32_t shape_big(int depth, uint32_t max, uint32_t at_least);

static uint32_t next(int depth, uint32_t max, uint32_t at_least)
{
  if (depth == 0) return compare_here(max, at_least);
  switch (depth % 3) {
  case 0: return shape_rsp(depth - 1, max, at_least);
  case 1: return shape_rbp(depth - 1, max, at_least);
  default: return shape_big(depth - 1, max, at_least);
  }
}

static NOINLINE uint32_t shape_rsp(int depth, uint32_t max, uint32_t at_least)
{
  volatile int local[4] = {depth, 1, 2, 3};
  uint32_t n = next(depth, max, at_least);
  return n + (uint32_t)local[1] - 1; /* no tail call */
}

static NOINLINE uint32_t shape_rbp(int depth, uint32_t max, uint32_t at_least)
{
  volatile char *buf = alloca(16 + (size_t)depth * 24);
  buf[0] = 1;
  uint32_t n = next(depth, max, at_least);
  return n + (uint32_t)buf[0] - 1;
}

static NOINLINE uint32_t shape_big(int depth, uint32_t max, uint32_t at_least)
{
  volatile char buf[64 * 1024];
  buf[0] = 1, buf[sizeof buf - 1] = 1;
  uint32_t n = next(depth, max, at_least);
  return n + (uint32_t)buf[0] - 1;
}

/* The walk must not have gone to libgcc for every frame shape above. */
static void check_fast(uint64_t libgcc_before, uint64_t walks)
{
  uint64_t handed = stackwalk_libgcc_walks() - libgcc_before - walks; /* less the reference walks */
  CHECKF(handed == 0, "%llu of %llu walks went to libgcc", (unsigned long long)handed, (unsigned long long)walks);
  CHECKF(stackwalk_rules_read() > 0, "no rule read from the tables");
}

static NOINLINE void every_depth(void)
{
  for (int depth = 0; depth <= 40; depth++) {
    uint32_t n = next(depth, DEPTH, (uint32_t)depth + 2);
    CHECKF(n >= (uint32_t)depth + 2, "depth %d: %u frames", depth, n);
  }
}

static void test_frame_shapes(void)
{
  CHECK(stackwalk_init());
  uint64_t before = stackwalk_libgcc_walks();
  uint64_t read[2];
  for (volatile int round = 0; round < 2; round++) { /* one call site; the second round over known code */
    every_depth();
    read[round] = stackwalk_rules_read();
  }
  CHECKF(read[1] == read[0], "%llu rules read again for the same code", (unsigned long long)(read[1] - read[0]));
  check_fast(before, 2 * 41);
}

/* max frames, no more, the same as libgcc's first max. */
static void test_cut_short(void)
{
  CHECK(stackwalk_init());
  for (uint32_t max = 1; max <= 12; max++) CHECK(next(30, max, max) == max);
}

static uint32_t in_qsort;
static int by_value(const void *x, const void *y)
{
  if (in_qsort == 0) in_qsort = compare_here(DEPTH, 3);
  return *(const int *)x - *(const int *)y;
}

static void test_through_libc(void)
{
  CHECK(stackwalk_init());
  uint64_t before = stackwalk_libgcc_walks();
  int v[64];
  for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
  qsort(v, 64, sizeof *v, by_value);
  CHECK(in_qsort >= 3);
  check_fast(before, 1);
}

static volatile uint32_t in_handler;
static void on_signal(int sig) { in_handler = compare_here(DEPTH, 4); }

/* A signal frame is libgcc's to walk: the same stack either way. */
static void test_signal_handler(void)
{
  CHECK(stackwalk_init());
  signal(SIGUSR1, on_signal);
  raise(SIGUSR1);
  CHECK(in_handler >= 4);
}

static void *thread_walk(void *arg)
{
  *(uint32_t *)arg = next(10, DEPTH, 12);
  return NULL;
}

/* A new thread's stack ends in clone: the walk stops where libgcc does. */
static void test_thread(void)
{
  CHECK(stackwalk_init());
  uint64_t before = stackwalk_libgcc_walks();
  pthread_t t;
  uint32_t n = 0;
  CHECK(pthread_create(&t, NULL, thread_walk, &n) == 0);
  pthread_join(t, NULL);
  CHECK(n >= 12);
  check_fast(before, 1);
}

static const tu_case_t cases[] = {
  {"frame_shapes", test_frame_shapes, 0},
  {"cut_short", test_cut_short, 0},
  {"through_libc", test_through_libc, 0},
  {"signal_handler", test_signal_handler, 0},
  {"thread", test_thread, 0},
};

int main(int argc, char **argv) { return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, ""); }
