/* What tests/report.sh runs under LD_PRELOAD=libhakmem.so: allocations of
 * known sizes from known functions, and hakmem's report calls found with
 * dlsym (the probe links the C library only). Built without frame pointers:
 * the profiler must unwind from the unwind tables.
 *
 *   report_probe json    live blocks of each pool (after two threads in turn
 *                        allocated and freed Large and huge blocks),
 *                        hak_stats_json on stdout, then the expected live
 *                        bytes in Large blocks, in huge ones and in all on
 *                        stderr's last three lines
 *   report_probe closed  closes stderr and exits (coreutils do that)
 *   report_probe sites PATH
 *                        five functions hold 64, 32, 16, 8 and 4 MiB in
 *                        Small, Large, Tiny and huge blocks; the profile is
 *                        dumped to PATH, then everything freed
 *   report_probe dump    hak_profile_dump(NULL); prints its return value
 *   report_probe sampled PATH
 *                        (a small HAKMEM_PROFILE_RATE) blocks of every Small
 *                        size and some others through malloc, calloc,
 *                        realloc and posix_memalign, their contents and
 *                        usable sizes checked, half freed by another thread;
 *                        the profile of what is left (nothing) to PATH */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void *sym(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  if (f == NULL) {
    fprintf(stderr, "report_probe: %s not found (is libhakmem preloaded?)\n", name);
    exit(2);
  }
  return f;
}

/* n blocks of size bytes, written through. */
static void **hold(size_t n, size_t size) {
  void **v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) {
    v[i] = malloc(size);
    memset(v[i], 0x5a, size);
  }
  return v;
}

static void release(void **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* Rounds of Large and huge blocks allocated and freed, in a thread whose
 * heap the next such thread adopts: every one counts (the owner's lists,
 * the block it holds). */
static void *freed_rounds(void *arg) {
  (void)arg;
  for (int r = 0; r < 100; r++) {
    release(hold(16, 100 * 1024), 16);
    release(hold(2, 3 * MiB + r * 4096), 2);
  }
  return NULL;
}

/* The profiled sites: each holds its total in blocks of its own size. */
#define SITES(X) X(64, 1000) X(32, 100) X(16, 64 * 1024) X(8, 48) X(4, 4 * MiB)
#define SITE(m, size) \
  __attribute__((noinline, visibility("default"))) void **site_##m##mib(void) { return hold(m * MiB / (size), size); }
SITES(SITE)

/* ---- sampled: blocks the profiler samples, used and freed every way ---- */

#define SAMPLED_N 4096

static int bad;

static void expect(int ok, const char *what, size_t size) {
  if (!ok && bad++ < 10) fprintf(stderr, "report_probe: %s (size %zu)\n", what, size);
}

static size_t sampled_size(size_t i) { return i % 7 == 0 ? 1 + i * 37 % 300000 : 1 + i * 8 % 32768; }

static int holds(const unsigned char *p, size_t n, unsigned char c) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != c) return 0;
  return 1;
}

static void *free_half(void *arg) {
  void **v = arg;
  for (size_t i = 0; i < SAMPLED_N; i += 2) free(v[i]);
  return NULL;
}

/* The blocks, from a function the profile names. */
__attribute__((noinline, visibility("default"))) void sampled_blocks(void **v) {
  for (size_t i = 0; i < SAMPLED_N; i++) {
    size_t size = sampled_size(i);
    unsigned char c = (unsigned char)(i | 1);
    unsigned char *p = NULL;
    switch (i % 4) {
    case 0: p = malloc(size); break;
    case 1:
      p = calloc(1, size);
      expect(p && holds(p, size, 0), "calloc: not zeroed", size);
      break;
    case 2: /* grown then shrunk in place or moved: the contents follow */
      p = malloc(size / 2 + 1);
      if (p) memset(p, c, size / 2 + 1);
      p = realloc(p, size);
      expect(p && holds(p, size / 2 + 1, c), "realloc: contents lost", size);
      break;
    default: { /* every alignment from 16 B to a page */
      size_t align = (size_t)16 << (i / 4 % 9);
      expect(posix_memalign((void **)&p, align, size) == 0 && ((uintptr_t)p & (align - 1)) == 0, "posix_memalign", size);
    }
    }
    expect(p != NULL, "no block", size);
    if (p == NULL) continue;
    expect(malloc_usable_size(p) >= size, "usable size below the size", size);
    memset(p, c, size);
    v[i] = p;
  }
}

static int sampled(const char *path) {
  int (*dump)(const char *) = (int (*)(const char *))sym("hak_profile_dump");
  void **v = malloc(SAMPLED_N * sizeof *v);
  sampled_blocks(v);
  for (size_t i = 0; i < SAMPLED_N; i++)
    expect(holds(v[i], sampled_size(i), (unsigned char)(i | 1)), "contents overwritten", sampled_size(i));
  pthread_t t; /* the even ones freed remotely, the odd ones here */
  pthread_create(&t, NULL, free_half, v);
  for (size_t i = 1; i < SAMPLED_N; i += 2) free(v[i]);
  pthread_join(t, NULL);
  free(v);
  int err = dump(path);
  expect(err == 0, "hak_profile_dump failed", 0);
  return bad != 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "json") == 0) {
    size_t (*stats_json)(char *, size_t) = (size_t (*)(char *, size_t))sym("hak_stats_json");
    void **small = hold(100000, 200), **large = hold(200, 100 * 1024), **huge = hold(4, 8 * MiB);
    release(hold(1000, 300 * 1024), 1000); /* freed Large and huge pages, cached or dirty */
    for (int i = 0; i < 2; i++) {
      pthread_t t;
      if (pthread_create(&t, NULL, freed_rounds, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
    }
    /* the figures move between two calls: room for a few more digits, in a
     * buffer from mmap (one from malloc could add a class's row) */
    size_t need = stats_json(NULL, 0) + 64;
    char *buf = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 1;
    size_t n = stats_json(buf, need);
    if (n >= need || strlen(buf) != n) {
      fprintf(stderr, "report_probe: hak_stats_json wrote %zu bytes, said %zu\n", strlen(buf), n);
      return 1;
    }
    fputs(buf, stdout);
    fprintf(stderr, "large %zu\n", (size_t)200 * 100 * 1024);
    fprintf(stderr, "huge %zu\n", 4 * 8 * MiB);
    fprintf(stderr, "live %zu\n", (size_t)100000 * 200 + (size_t)200 * 100 * 1024 + 4 * 8 * MiB);
    (void)small, (void)large, (void)huge;
    return 0;
  }
  if (strcmp(mode, "closed") == 0) {
    release(hold(1000, 64), 1000);
    close(2);
    return 0;
  }
  if (strcmp(mode, "sites") == 0 && argc > 2) {
    int (*dump)(const char *) = (int (*)(const char *))sym("hak_profile_dump");
#define CALL(m, size) void **v##m = site_##m##mib();
    SITES(CALL)
    int err = dump(argv[2]);
    if (err) {
      fprintf(stderr, "report_probe: hak_profile_dump = %d\n", err);
      return 1;
    }
#define RELEASE(m, size) release(v##m, m * MiB / (size));
    SITES(RELEASE)
    return 0;
  }
  if (strcmp(mode, "dump") == 0) {
    int (*dump)(const char *) = (int (*)(const char *))sym("hak_profile_dump");
    printf("%d\n", dump(NULL));
    return 0;
  }
  if (strcmp(mode, "sampled") == 0 && argc > 2) return sampled(argv[2]);
  fprintf(stderr, "usage: report_probe json|closed|sites PATH|dump|sampled PATH\n");
  return 2;
}
