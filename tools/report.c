/* hakmem report: the top allocation sites of a heap profile.
 *
 * The profile is in gperftools' heap-profile text format, which google-pprof
 * reads:
 *
 *   heap profile:   LIVE_N:   LIVE_B [ALLOC_N: ALLOC_B] @ heapprofile
 *        N:        B [     N:        B] @ 0xADDR 0xADDR ...     (one per site)
 *
 *   MAPPED_LIBRARIES:
 *   START-END PERMS OFFSET DEV INODE PATH                       (/proc/self/maps)
 *
 * With google-pprof on PATH the report is its --text output; without it, a
 * summary of our own: the totals, then the sites holding the most live
 * bytes, each address with the mapping (file + offset) it falls in. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tool.h"

enum { REPORT_TOP = 20 };

typedef struct {
  uint64_t live_n, live_bytes;   /* in use when the profile was written */
  uint64_t alloc_n, alloc_bytes; /* allocated since the start */
} counts_t;

typedef struct {
  counts_t counts;
  size_t frame0, depth; /* its addresses: frames[frame0 .. frame0 + depth) */
  size_t order;         /* place in the file, for a stable sort */
} site_t;

typedef struct {
  uint64_t start, end, offset;
  bool exec;
  char *path; /* "" for an anonymous mapping */
} mapping_t;

typedef struct {
  const char *file;
  counts_t total;
  site_t *sites;
  size_t nsites, sites_cap;
  uint64_t *frames;
  size_t nframes, frames_cap;
  mapping_t *maps;
  size_t nmaps, maps_cap;
} profile_t;

/* Grows array *items (of *cap elements of size bytes) to hold one more. */
static void *grow(void *items, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return items;
  *cap = *cap ? *cap * 2 : 64;
  items = realloc(items, *cap * size);
  if (items == NULL) tool_fail(1, "out of memory");
  return items;
}

static void skip_spaces(const char **s) {
  while (**s == ' ' || **s == '\t') (*s)++;
}

/* A decimal count; false if there is none or it overflows. */
static bool parse_count(const char **s, uint64_t *v) {
  skip_spaces(s);
  const char *p = *s;
  if (*p < '0' || *p > '9') return false;
  uint64_t x = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return false;
    x = x * 10 + (uint64_t)(*p - '0');
  }
  *v = x;
  *s = p;
  return true;
}

static bool expect(const char **s, char c) {
  skip_spaces(s);
  if (**s != c) return false;
  (*s)++;
  return true;
}

/* "N: B [N: B] @" (a site's counts, or the header's totals after its name). */
static bool parse_counts(const char **s, counts_t *c) {
  return parse_count(s, &c->live_n) && expect(s, ':') && parse_count(s, &c->live_bytes) && expect(s, '[') &&
         parse_count(s, &c->alloc_n) && expect(s, ':') && parse_count(s, &c->alloc_bytes) && expect(s, ']') &&
         expect(s, '@');
}

/* A hexadecimal number, with or without 0x, that ends at a space, a dash or
 * the end of the line. */
static bool parse_hex(const char **s, uint64_t *v) {
  skip_spaces(s);
  const char *p = *s;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) p += 2;
  uint64_t x = 0;
  int digits = 0;
  for (;; p++, digits++) {
    int d;
    if (*p >= '0' && *p <= '9') d = *p - '0';
    else if (*p >= 'a' && *p <= 'f') d = *p - 'a' + 10;
    else if (*p >= 'A' && *p <= 'F') d = *p - 'A' + 10;
    else break;
    if (x >> 60) return false;
    x = x << 4 | (uint64_t)d;
  }
  if (digits == 0 || (*p != 0 && *p != ' ' && *p != '\t' && *p != '-')) return false;
  *v = x;
  *s = p;
  return true;
}

static bool parse_site(profile_t *p, const char *line) {
  site_t site = {.frame0 = p->nframes, .order = p->nsites};
  if (!parse_counts(&line, &site.counts)) return false;
  for (skip_spaces(&line); *line; skip_spaces(&line)) {
    uint64_t addr;
    if (!parse_hex(&line, &addr) || *line == '-') return false;
    p->frames = grow(p->frames, &p->frames_cap, p->nframes, sizeof *p->frames);
    p->frames[p->nframes++] = addr;
    site.depth++;
  }
  p->sites = grow(p->sites, &p->sites_cap, p->nsites, sizeof *p->sites);
  p->sites[p->nsites++] = site;
  return true;
}

/* START-END PERMS OFFSET DEV INODE [PATH] */
static bool parse_mapping(profile_t *p, const char *line) {
  mapping_t m = {0};
  char perms[5] = {0};
  if (!parse_hex(&line, &m.start) || !expect(&line, '-') || !parse_hex(&line, &m.end) || m.end < m.start)
    return false;
  skip_spaces(&line);
  size_t len = strcspn(line, " \t");
  if (len != 4) return false;
  memcpy(perms, line, 4);
  line += 4;
  m.exec = perms[2] == 'x';
  if (!parse_hex(&line, &m.offset)) return false;
  for (int field = 0; field < 2; field++) { /* device, inode */
    skip_spaces(&line);
    size_t n = strcspn(line, " \t");
    if (n == 0) return false;
    line += n;
  }
  skip_spaces(&line);
  m.path = strdup(line);
  if (m.path == NULL) tool_fail(1, "out of memory");
  p->maps = grow(p->maps, &p->maps_cap, p->nmaps, sizeof *p->maps);
  p->maps[p->nmaps++] = m;
  return true;
}

/* Reads the profile at path; a file that cannot be read or does not parse
 * ends the command with a message naming the line. */
static void profile_read(profile_t *p, const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) tool_fail(1, "report: cannot read %s: %s", path, strerror(errno));
  p->file = path;
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  ssize_t len;
  bool in_maps = false;
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    const char *s = line;
    bool ok;
    if (lineno == 1) {
      static const char header[] = "heap profile:";
      ok = strncmp(s, header, sizeof header - 1) == 0;
      s += sizeof header - 1;
      if (!ok || !parse_counts(&s, &p->total))
        tool_fail(1, "report: %s is not a heap profile (its first line is not \"heap profile: N: B [N: B] @ ...\")", path);
      continue;
    }
    skip_spaces(&s);
    if (*s == 0) continue;
    if (!in_maps && strcmp(s, "MAPPED_LIBRARIES:") == 0) {
      in_maps = true;
      continue;
    }
    ok = in_maps ? parse_mapping(p, s) : parse_site(p, s);
    if (!ok)
      tool_fail(1, "report: %s:%zu: not a %s", path, lineno,
                in_maps ? "mapping line (START-END PERMS OFFSET DEV INODE PATH)" : "site line (N: B [N: B] @ ADDR...)");
  }
  int err = ferror(f) ? errno : 0;
  free(line);
  fclose(f);
  if (err) tool_fail(1, "report: cannot read %s: %s", path, strerror(err));
  if (lineno == 0) tool_fail(1, "report: %s is empty", path);
}

static const mapping_t *mapping_of(const profile_t *p, uint64_t addr) {
  for (size_t i = 0; i < p->nmaps; i++)
    if (addr >= p->maps[i].start && addr < p->maps[i].end) return &p->maps[i];
  return NULL;
}

/* The program the profile was taken of: the first executable mapping's
 * file, where it can still be read; NULL otherwise. */
static const char *profile_program(const profile_t *p) {
  for (size_t i = 0; i < p->nmaps; i++) {
    const mapping_t *m = &p->maps[i];
    if (m->exec) return m->path[0] == '/' && access(m->path, R_OK) == 0 ? m->path : NULL;
  }
  return NULL;
}

/* Most live bytes first; then most live blocks; then the file's order. */
static int by_live_bytes(const void *a, const void *b) {
  const site_t *x = a, *y = b;
  if (x->counts.live_bytes != y->counts.live_bytes) return x->counts.live_bytes > y->counts.live_bytes ? -1 : 1;
  if (x->counts.live_n != y->counts.live_n) return x->counts.live_n > y->counts.live_n ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static void print_summary(profile_t *p) {
  size_t live_sites = 0;
  for (size_t i = 0; i < p->nsites; i++) live_sites += p->sites[i].counts.live_bytes > 0;
  qsort(p->sites, p->nsites, sizeof *p->sites, by_live_bytes);
  size_t shown = live_sites < REPORT_TOP ? live_sites : REPORT_TOP;

  printf("heap profile %s\n", p->file);
  printf("live: %" PRIu64 " bytes in %" PRIu64 " blocks (allocated in all: %" PRIu64 " bytes in %" PRIu64 " blocks)\n",
         p->total.live_bytes, p->total.live_n, p->total.alloc_bytes, p->total.alloc_n);
  printf("top %zu of %zu sites holding live memory, by live bytes:\n", shown, live_sites);
  for (size_t i = 0; i < shown; i++) {
    const site_t *s = &p->sites[i];
    double share = p->total.live_bytes ? 100.0 * (double)s->counts.live_bytes / (double)p->total.live_bytes : 0;
    printf("\n#%zu %" PRIu64 " bytes (%.1f%%) in %" PRIu64 " blocks\n", i + 1, s->counts.live_bytes, share,
           s->counts.live_n);
    for (size_t d = 0; d < s->depth; d++) {
      uint64_t addr = p->frames[s->frame0 + d];
      const mapping_t *m = mapping_of(p, addr);
      if (m != NULL && m->path[0] != 0)
        printf("    0x%016" PRIx64 "  %s+0x%" PRIx64 "\n", addr, m->path, addr - m->start + m->offset);
      else
        printf("    0x%016" PRIx64 "\n", addr);
    }
  }
}

int cmd_report(int argc, char **argv) {
  if (argc != 2 || argv[1][0] == '-')
    tool_fail(EXIT_USAGE, "report takes one argument, a heap profile's path (see hakmem --help)");
  profile_t p = {0};
  profile_read(&p, argv[1]);

  char *pprof = tool_which("google-pprof");
  if (pprof != NULL) {
    const char *program = profile_program(&p);
    if (program != NULL) {
      char *args[] = {"google-pprof", "--text", (char *)program, argv[1], NULL};
      fflush(NULL);
      execv(pprof, args);
      tool_fail(EXIT_CANNOT_RUN, "cannot run %s: %s", pprof, strerror(errno));
    }
    /* pprof wants the program to name functions; without it, it refuses. */
    fprintf(stderr, "hakmem: report: the profiled program cannot be read; summary without google-pprof\n");
  }
  print_summary(&p);
  if (fflush(stdout) != 0 || ferror(stdout)) tool_fail(1, "report: cannot write: %s", strerror(errno));
  return 0;
}
