/* The statistics report (HAKMEM_STATS=1 at exit, hak_stats_print): counters,
 * where the memory is, system calls by kind, the learner; the same as one
 * JSON object (HAKMEM_STATS=json, hak_stats_json), with where every resident
 * byte is. */
#include "api.h"
#include "heap.h"
#include "huge.h"
#include "large.h"
#include "learn.h"
#include "options.h"
#include "out.h"
#include "region.h"
#include "run.h"
#include "size_class.h"
#include "stats.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static const char *const os_call_name[OS_CALL_KINDS] = {"mmap", "munmap", "madvise", "mremap", "mprotect", "mincore"};

/* Bytes of live blocks in slabs, as the counters have them (statistics on). */
static int64_t small_live(void) {
  int64_t small = 0;
  for (unsigned row = 0; row < NUM_CLASSES; row++) small += LOAD(hak_stats.rows[row].live_bytes);
  return small;
}

static void print_row_name(out_t *o, unsigned row) {
  if (row == STAT_ROW_LARGE) out_str(o, "   large");
  else if (row == STAT_ROW_HUGE) out_str(o, "    huge");
  else out_uint(o, hak_class_size[row], 8);
}

static void print_bytes(out_t *o, const char *label, uint64_t bytes) {
  out_str(o, "  ");
  out_str(o, label);
  out_str(o, ": ");
  out_uint(o, bytes, 0);
  out_str(o, "\n");
}

/* Resident bytes of the whole process, from /proc/self/statm; 0 if unreadable. */
static size_t resident_bytes(void) {
  char buf[128];
  long n = os_read_file("/proc/self/statm", buf, sizeof buf - 1);
  size_t pages = 0;
  int field = 0;
  for (long i = 0; i < n && field < 2; i++) {
    if (buf[i] == ' ') field++;
    else if (field == 1 && buf[i] >= '0' && buf[i] <= '9') pages = pages * 10 + (size_t)(buf[i] - '0');
  }
  return pages * os_page_size();
}

/* Where the memory is: what the program holds, what hakmem keeps for reuse,
 * what it gave back. */
static void print_memory(out_t *o) {
  size_t regions = LOAD(region_count), spans = LOAD(region_span_bytes);
  out_str(o, "memory (bytes):\n");
  print_bytes(o, "in slabs", spans);
  if (hak_stats_enabled) {
    int64_t small = small_live();
    print_bytes(o, "  of which live blocks", (uint64_t)(small > 0 ? small : 0));
  }
  print_bytes(o, "in large blocks", large_live_bytes());
  print_bytes(o, "in huge blocks", huge_live_bytes());
  print_bytes(o, "large blocks freed and kept for reuse", large_cached_bytes());
  print_bytes(o, "free and not yet purged (slab units, large pages)", heap_dirty_bytes(NULL));
  print_bytes(o, "huge blocks' pages cached for reuse (BigCache)", huge_cached_bytes());
  print_bytes(o, "purged so far", (uint64_t)LOAD(hak_stats.bytes_purged));
  print_bytes(o, "address space of regions", regions * REGION_SIZE);
  print_bytes(o, "resident (whole process)", resident_bytes());
}

static void print_calls(out_t *o) {
  out_str(o, "system calls:");
  for (int k = 0; k < OS_CALL_KINDS; k++) {
    out_str(o, " ");
    out_str(o, os_call_name[k]);
    out_str(o, " ");
    out_uint(o, LOAD(os_calls[k]), 0);
  }
  out_str(o, "\n");
}

HAK_API void hak_stats_print(int fd) {
  out_t o = OUT_FD(fd);
  out_str(&o, "hakmem statistics");
  if (!hak_stats_enabled) out_str(&o, " (per-class counts need HAKMEM_STATS=1)");
  out_str(&o, "\n   class");
#define X(name, label) out_str(&o, " "), out_str(&o, "            " label + (sizeof(label) > 13 ? 12 : sizeof(label) - 1));
  HAK_CLASS_STATS(X)
#undef X
  out_str(&o, "\n");
  for (unsigned row = 0; row < STAT_ROWS; row++) {
    stat_row_t *r = &hak_stats.rows[row];
    if (LOAD(r->allocs) == 0 && LOAD(r->frees) == 0 && LOAD(r->refills) == 0) continue;
    print_row_name(&o, row);
#define X(name, label) out_str(&o, " "), out_uint(&o, (uint64_t)LOAD(r->name), 12);
    HAK_CLASS_STATS(X)
#undef X
    out_str(&o, "\n");
  }
#define X(name, label) \
  out_str(&o, "  " label ": "), out_uint(&o, (uint64_t)LOAD(hak_stats.name), 0), out_str(&o, "\n");
  HAK_GLOBAL_STATS(X)
#undef X
  print_memory(&o);
  print_calls(&o);
  learn_print(&o);
  out_flush(&o);
}

/* ---- where the resident bytes are ------------------------------------------ */

typedef struct {
  size_t total;         /* the process's resident set (the OS's figure) */
  size_t live;          /* blocks handed out */
  size_t free_in_slabs; /* free blocks in slabs (and slabs kept empty) */
  size_t free_pages;    /* free pages in regions not yet purged */
  size_t large_cached;  /* freed Large blocks kept for reuse */
  size_t bigcache;      /* freed huge blocks' pages kept for reuse */
  size_t pool;          /* empty regions kept for reuse */
  size_t metadata;      /* headers, heaps, the map */
  size_t outside;       /* not hakmem's: the program, its libraries and stacks, other mappings */
} resident_t;

/* Whether the mapping [lo, hi) holds memory of hakmem's. */
static bool ours(uintptr_t lo, uintptr_t hi) {
  return map_kind((void *)lo) != MAP_NONE || map_kind((void *)(hi - 1)) != MAP_NONE || region_pool_overlaps(lo, hi) ||
         heap_meta_overlaps(lo, hi) || huge_meta_overlaps(lo, hi) || map_meta_overlaps(lo, hi);
}

static uintptr_t parse_hex(const char **s) {
  uintptr_t v = 0;
  for (;; (*s)++) {
    char c = **s;
    if (c >= '0' && c <= '9') v = v * 16 + (uintptr_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v = v * 16 + (uintptr_t)(c - 'a' + 10);
    else return v;
  }
}

/* One line of /proc/self/smaps: a mapping's range starts a block, its Rss
 * line follows. */
static void smaps_line(const char *line, bool *counting, size_t *sum) {
  if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
    const char *s = line;
    uintptr_t lo = parse_hex(&s);
    if (*s != '-') return;
    s++;
    *counting = !ours(lo, parse_hex(&s));
  } else if (*counting && line[0] == 'R' && line[1] == 's' && line[2] == 's' && line[3] == ':') {
    size_t kb = 0;
    for (const char *s = line + 4; *s; s++)
      if (*s >= '0' && *s <= '9') kb = kb * 10 + (size_t)(*s - '0');
    *sum += kb * 1024;
  }
}

/* Resident bytes of the mappings that hold nothing of hakmem's; 0 when
 * /proc/self/smaps cannot be read. */
static size_t resident_outside(void) {
  int fd = os_open_read("/proc/self/smaps");
  if (fd < 0) return 0;
  char buf[4096], line[512];
  size_t len = 0, sum = 0;
  bool counting = false;
  long n;
  while ((n = os_read(fd, buf, sizeof buf)) > 0) {
    for (long i = 0; i < n; i++) {
      if (buf[i] != '\n') {
        if (len < sizeof line - 1) line[len++] = buf[i];
        continue;
      }
      line[len] = 0;
      smaps_line(line, &counting, &sum);
      len = 0;
    }
  }
  os_close(fd);
  /* the map's array lies in hakmem's own data, a mapping of the program's */
  size_t map = os_resident(map_fast, sizeof map_fast);
  return sum > map ? sum - map : 0;
}

static void resident_measure(resident_t *r) {
  *r = (resident_t){.total = resident_bytes()};
  region_usage_t u = {0};
  for (heap_t *h = heap_all(); h; h = h->next_all) heap_usage(h, &u);
  int64_t small = small_live();
  /* live blocks in slabs: counted exactly with statistics on, else read
   * from the slabs' descriptors; their pages may not all be resident */
  size_t in_slabs = hak_stats_enabled ? (small > 0 ? MIN((size_t)small, u.slabs) : 0) : u.slab_used;
  size_t huge_live, huge_cached, huge_meta;
  huge_resident(&huge_live, &huge_cached, &huge_meta);
  r->live = in_slabs + (u.runs - u.cached) + huge_live;
  r->free_in_slabs = u.slabs - in_slabs;
  r->free_pages = u.free;
  r->large_cached = u.cached;
  r->bigcache = huge_cached;
  r->pool = region_pool_resident();
  r->metadata = u.meta + heap_meta_resident() + huge_meta + map_resident();
  r->outside = resident_outside();
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_key(out_t *o, bool *first, const char *key) {
  out_str(o, *first ? "\"" : ", \"");
  *first = false;
  out_str(o, key);
  out_str(o, "\": ");
}

static void json_uint(out_t *o, bool *first, const char *key, uint64_t v) {
  json_key(o, first, key);
  out_uint(o, v, 0);
}

static void json_int(out_t *o, bool *first, const char *key, int64_t v) {
  json_key(o, first, key);
  out_int(o, v);
}

static void json_resident(out_t *o, const resident_t *r) {
  bool first = true;
  out_str(o, "{");
#define R(name) json_uint(o, &first, #name, r->name);
  R(total) R(live) R(free_in_slabs) R(free_pages) R(large_cached) R(bigcache) R(pool) R(metadata) R(outside)
#undef R
  json_uint(o, &first, "sum", r->live + r->free_in_slabs + r->free_pages + r->large_cached + r->bigcache + r->pool +
                                   r->metadata + r->outside);
  out_str(o, "}");
}

static void json_row(out_t *o, unsigned row) {
  stat_row_t *r = &hak_stats.rows[row];
  bool first = true;
  out_str(o, "{");
  if (row == STAT_ROW_LARGE) json_key(o, &first, "class"), out_str(o, "\"large\"");
  else if (row == STAT_ROW_HUGE) json_key(o, &first, "class"), out_str(o, "\"huge\"");
  else json_uint(o, &first, "class", hak_class_size[row]);
#define X(name, label) json_int(o, &first, #name, LOAD(r->name));
  HAK_CLASS_STATS(X)
#undef X
  out_str(o, "}");
}

static void json_write(out_t *o) {
  bool first = true;
  out_str(o, "{");
  json_key(o, &first, "version");
  out_str(o, "\"" STR(HAKMEM_VERSION_MAJOR) "." STR(HAKMEM_VERSION_MINOR) "." STR(HAKMEM_VERSION_PATCH) "\"");
  json_key(o, &first, "counting");
  out_str(o, hak_stats_enabled ? "true" : "false");
  json_key(o, &first, "strategy");
  out_str(o, "\"");
  out_str(o, policy_name(learn_current()));
  out_str(o, "\"");
  json_key(o, &first, "counters");
  bool f = true;
  out_str(o, "{");
#define X(name, label) json_int(o, &f, #name, LOAD(hak_stats.name));
  HAK_GLOBAL_STATS(X)
#undef X
  out_str(o, "}");
  json_key(o, &first, "syscalls");
  f = true;
  out_str(o, "{");
  for (int k = 0; k < OS_CALL_KINDS; k++) json_uint(o, &f, os_call_name[k], LOAD(os_calls[k]));
  out_str(o, "}");
  json_key(o, &first, "bytes");
  f = true;
  out_str(o, "{");
  json_uint(o, &f, "slab_spans", LOAD(region_span_bytes));
  json_uint(o, &f, "large_live", large_live_bytes());
  json_uint(o, &f, "huge_live", huge_live_bytes());
  json_uint(o, &f, "dirty", heap_dirty_bytes(NULL));
  json_uint(o, &f, "bigcache", huge_cached_bytes());
  json_uint(o, &f, "purged", (uint64_t)LOAD(hak_stats.bytes_purged));
  json_uint(o, &f, "regions_address_space", LOAD(region_count) * REGION_SIZE);
  out_str(o, "}");
  json_key(o, &first, "classes");
  out_str(o, "[");
  bool any = false;
  for (unsigned row = 0; row < STAT_ROWS; row++) {
    stat_row_t *r = &hak_stats.rows[row];
    if (LOAD(r->allocs) == 0 && LOAD(r->frees) == 0 && LOAD(r->refills) == 0) continue;
    if (any) out_str(o, ", ");
    any = true;
    json_row(o, row);
  }
  out_str(o, "]");
  resident_t res;
  resident_measure(&res);
  json_key(o, &first, "resident");
  json_resident(o, &res);
  out_str(o, "}\n");
}

HAK_API size_t hak_stats_json(char *buf, size_t len) {
  out_t o = out_mem(buf, len);
  json_write(&o);
  return out_flush(&o);
}

/* ---- the report at exit ----------------------------------------------------- */

/* A copy of stderr taken at start: programs may close stderr on their way
 * out (coreutils do), before the report is written. */
static int saved_stderr = -1;

void report_init(void) {
  if (hak_option_on(OPT_STATS) && !hak_option_on(OPT_STATS_FILE) && saved_stderr < 0) saved_stderr = os_dup(2, 100);
}

void report_at_exit(void) {
  if (!hak_option_on(OPT_STATS)) return;
  int fd = 2;
  if (hak_option_on(OPT_STATS_FILE)) {
    char path[320];
    fd = hak_option_path(OPT_STATS_FILE, path, sizeof path) ? os_open_write(path) : -1;
    if (fd < 0) {
      out_t o = OUT_FD(2);
      out_str(&o, "hakmem: cannot open HAKMEM_STATS_FILE ");
      out_str(&o, hak_option_str(OPT_STATS_FILE));
      out_str(&o, "; no report\n");
      out_flush(&o);
      return;
    }
  } else if (saved_stderr >= 0 && os_file_id(saved_stderr) != 0) {
    fd = saved_stderr;
  }
  if (hak_option(OPT_STATS) == 2) {
    out_t o = OUT_FD(fd);
    json_write(&o);
    out_flush(&o);
  } else {
    hak_stats_print(fd);
  }
  if (fd != 2 && fd != saved_stderr) os_close(fd);
}
