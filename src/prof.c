/* The sampling heap profiler: stacks, the table of sampled blocks, the
 * profile files. */
#define _GNU_SOURCE
#include "prof.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <math.h>
#include <unwind.h>

#include "harden.h"
#include "options.h"
#include "os.h"
#include "out.h"

#define MAX_DEPTH 48
#define SITE_BUCKETS 4096
#define ARENA_CHUNK ((size_t)1 << 20)
#define SAMPLES_MIN 4096

/* A call stack and what its sampled blocks stand for (estimates). */
typedef struct site_s {
  struct site_s *next; /* in its bucket */
  struct site_s *all;  /* every site, newest first */
  uint64_t hash;
  double live_n, live_b, alloc_n, alloc_b;
  double snap_n, snap_b, snap_an, snap_ab; /* copied under the lock for a dump */
  uint32_t depth;
  uintptr_t pc[]; /* innermost first: return addresses */
} site_t;

/* A live sampled block. */
typedef struct {
  uintptr_t addr; /* 0: an empty slot */
  site_t *site;
  size_t size;
  double weight; /* the blocks it stands for */
} sample_t;

bool prof_on;
static double rate;
static hak_lock_t lock;           /* the sites and the samples */
static hak_lock_t dump_lock;      /* one dump at a time */
static site_t **buckets;          /* SITE_BUCKETS */
static site_t *_Atomic sites;     /* append-only */
static char *arena_next, *arena_end;
static sample_t *samples;
static size_t sample_cap, sample_n;
static uintptr_t self_lo, self_hi; /* hakmem's own code, when it is a shared object */
static __thread bool busy __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

/* hakmem's executable segment, found through the loader: its frames are
 * left out of the stacks. Linked into the program itself, its range is the
 * program's, and its frames stay in. */
static int find_self(struct dl_phdr_info *info, size_t size, void *arg) {
  uintptr_t me = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (me < lo || me >= hi) continue;
    if (info->dlpi_name && info->dlpi_name[0]) self_lo = lo, self_hi = hi;
    return 1;
  }
  return 0;
}

void prof_init(void) {
  if (prof_on || !hak_option_on(OPT_PROFILE)) return;
  long r = hak_option(OPT_PROFILE_RATE);
  rate = r > 0 ? (double)r : 512.0 * 1024;
  buckets = os_map(os_page_round(SITE_BUCKETS * sizeof *buckets));
  if (buckets == NULL) return;
  dl_iterate_phdr(find_self, (void *)(uintptr_t)prof_init);
  prof_on = true;
}

bool prof_nested(void) { return busy; }

/* -ln(u) for u uniform in (0, 1], times the rate. */
int64_t prof_interval(void) {
  if (rng == 0) rng = harden_random() | 1;
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  double u = (double)((rng >> 11) + 1) * 0x1p-53;
  double x = -log(u) * rate;
  return x < 1 ? 1 : x > 0x1p60 ? INT64_C(1) << 60 : (int64_t)x;
}

/* ---- stacks ---------------------------------------------------------------- */

typedef struct {
  uintptr_t *pc;
  uint32_t n;
} walk_t;

static _Unwind_Reason_Code on_frame(struct _Unwind_Context *ctx, void *arg) {
  walk_t *w = arg;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  if (w->n == 0 && ip >= self_lo && ip < self_hi) return _URC_NO_REASON; /* still in hakmem */
  w->pc[w->n++] = ip;
  return w->n == MAX_DEPTH ? _URC_END_OF_STACK : _URC_NO_REASON;
}

static uint64_t stack_hash(const uintptr_t *pc, uint32_t n) {
  uint64_t h = n;
  for (uint32_t i = 0; i < n; i++) h = (h ^ pc[i]) * 0x100000001B3ull, h ^= h >> 29;
  return h;
}

/* The site of stack pc[0..n), made when new; NULL when out of memory. Under
 * the lock. */
static site_t *site_get(const uintptr_t *pc, uint32_t n) {
  uint64_t h = stack_hash(pc, n);
  site_t **b = &buckets[h & (SITE_BUCKETS - 1)];
  for (site_t *s = *b; s; s = s->next) {
    if (s->hash != h || s->depth != n) continue;
    uint32_t i = 0;
    while (i < n && s->pc[i] == pc[i]) i++;
    if (i == n) return s;
  }
  size_t need = (sizeof(site_t) + n * sizeof(uintptr_t) + 15) & ~(size_t)15;
  if (arena_next == NULL || arena_next + need > arena_end) {
    char *m = os_map(ARENA_CHUNK);
    if (m == NULL) return NULL;
    arena_next = m, arena_end = m + ARENA_CHUNK;
  }
  site_t *s = (site_t *)arena_next;
  arena_next += need;
  s->hash = h;
  s->depth = n;
  for (uint32_t i = 0; i < n; i++) s->pc[i] = pc[i];
  s->next = *b;
  *b = s;
  s->all = atomic_load_explicit(&sites, memory_order_relaxed);
  atomic_store_explicit(&sites, s, memory_order_release);
  return s;
}

/* ---- sampled blocks: open addressing, linear probing -------------------------------- */

static size_t slot_of(uintptr_t a, size_t cap) { return (size_t)((a >> 4) * 0x9E3779B97F4A7C15ull >> 17) & (cap - 1); }

static bool samples_grow(void) {
  size_t cap = sample_cap ? sample_cap * 2 : SAMPLES_MIN;
  sample_t *t = os_map(cap * sizeof *t);
  if (t == NULL) return false;
  for (size_t i = 0; i < sample_cap; i++) {
    if (samples[i].addr == 0) continue;
    size_t j = slot_of(samples[i].addr, cap);
    while (t[j].addr) j = (j + 1) & (cap - 1);
    t[j] = samples[i];
  }
  if (samples) os_unmap(samples, sample_cap * sizeof *samples);
  samples = t, sample_cap = cap;
  return true;
}

static sample_t *sample_find(uintptr_t a) {
  if (sample_cap == 0) return NULL;
  for (size_t i = slot_of(a, sample_cap);; i = (i + 1) & (sample_cap - 1)) {
    if (samples[i].addr == a) return &samples[i];
    if (samples[i].addr == 0) return NULL;
  }
}

static bool sample_put(sample_t e) {
  if ((sample_n + 1) * 2 > sample_cap && !samples_grow()) return false;
  size_t i = slot_of(e.addr, sample_cap);
  while (samples[i].addr) i = (i + 1) & (sample_cap - 1);
  samples[i] = e;
  sample_n++;
  return true;
}

/* Empties slot e, moving back the entries after it that probed past it. */
static void sample_del(sample_t *e) {
  size_t mask = sample_cap - 1, i = (size_t)(e - samples), j = i;
  for (;;) {
    samples[i].addr = 0;
    for (;;) {
      j = (j + 1) & mask;
      if (samples[j].addr == 0) {
        sample_n--;
        return;
      }
      size_t home = slot_of(samples[j].addr, sample_cap);
      /* j's entry may fill i when its home is not cyclically in (i, j] */
      if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) break;
    }
    samples[i] = samples[j];
    i = j;
  }
}

/* ---- the hooks ---------------------------------------------------------------------- */

void prof_record(void *p, size_t size, size_t counted) {
  uintptr_t pc[MAX_DEPTH];
  walk_t w = {pc, 0};
  busy = true;
  _Unwind_Backtrace(on_frame, &w);
  busy = false;
  double weight = 1.0 / -expm1(-(double)(counted ? counted : 1) / rate);
  hak_lock(&lock);
  site_t *s = site_get(pc, w.n);
  if (s && sample_put((sample_t){(uintptr_t)p, s, size, weight})) {
    s->live_n += weight, s->live_b += weight * (double)size;
    s->alloc_n += weight, s->alloc_b += weight * (double)size;
  }
  hak_unlock(&lock);
}

void prof_forget(const void *p) {
  hak_lock(&lock);
  sample_t *e = sample_find((uintptr_t)p);
  if (e) {
    e->site->live_n -= e->weight;
    e->site->live_b -= e->weight * (double)e->size;
    sample_del(e);
  }
  hak_unlock(&lock);
}

void prof_moved(const void *old, void *p, size_t size) {
  hak_lock(&lock);
  sample_t *e = sample_find((uintptr_t)old);
  if (e) {
    sample_t moved = *e;
    moved.site->live_b += moved.weight * ((double)size - (double)moved.size);
    moved.addr = (uintptr_t)p;
    moved.size = size;
    sample_del(e);
    if (!sample_put(moved)) moved.site->live_n -= moved.weight, moved.site->live_b -= moved.weight * (double)size;
  }
  hak_unlock(&lock);
}

/* ---- the profile files ---------------------------------------------------------------- */

static uint64_t rounded(double v) { return v > 0 ? (uint64_t)(v + 0.5) : 0; }

/* "N: B [N: B]" with gperftools' widths. */
static void counts(out_t *o, double n, double b, double an, double ab) {
  out_uint(o, rounded(n), 6);
  out_str(o, ": ");
  out_uint(o, rounded(b), 8);
  out_str(o, " [");
  out_uint(o, rounded(an), 6);
  out_str(o, ": ");
  out_uint(o, rounded(ab), 8);
  out_str(o, "]");
}

/* Copies a file (the process's maps) into o. */
static void copy_file(out_t *o, const char *path) {
  int fd = os_open_read(path);
  if (fd < 0) return;
  char buf[1024];
  long n;
  while ((n = os_read(fd, buf, sizeof buf - 1)) > 0) {
    buf[n] = 0;
    out_str(o, buf);
  }
  os_close(fd);
}

static void write_heap(out_t *o, site_t *first) {
  double n = 0, b = 0, an = 0, ab = 0;
  for (site_t *s = first; s; s = s->all) n += s->snap_n, b += s->snap_b, an += s->snap_an, ab += s->snap_ab;
  out_str(o, "heap profile: ");
  counts(o, n, b, an, ab);
  out_str(o, " @ heapprofile\n");
  for (site_t *s = first; s; s = s->all) {
    if (rounded(s->snap_an) == 0) continue;
    counts(o, s->snap_n, s->snap_b, s->snap_an, s->snap_ab);
    out_str(o, " @");
    for (uint32_t i = 0; i < s->depth; i++) out_char(o, ' '), out_hex(o, s->pc[i]);
    out_char(o, '\n');
  }
  out_str(o, "\nMAPPED_LIBRARIES:\n");
  copy_file(o, "/proc/self/maps");
}

/* A frame's name: its symbol, else its object and offset, else its address.
 * The address before the return address lies in the call. */
static void frame_name(out_t *o, uintptr_t pc) {
  Dl_info info = {0};
  bool found = dladdr((void *)(pc - 1), &info) != 0;
  if (found && info.dli_sname) {
    out_str(o, info.dli_sname);
  } else if (found && info.dli_fname && info.dli_fname[0]) {
    const char *base = info.dli_fname;
    for (const char *c = base; *c; c++)
      if (*c == '/') base = c + 1;
    out_str(o, base);
    out_char(o, '+');
    out_hex(o, pc - (uintptr_t)info.dli_fbase);
  } else {
    out_hex(o, pc);
  }
}

static void write_folded(out_t *o, site_t *first) {
  for (site_t *s = first; s; s = s->all) {
    if (rounded(s->snap_b) == 0) continue;
    if (s->depth == 0) out_str(o, "[unknown]");
    for (uint32_t i = s->depth; i > 0; i--) {
      frame_name(o, s->pc[i - 1]);
      if (i > 1) out_char(o, ';');
    }
    out_char(o, ' ');
    out_uint(o, rounded(s->snap_b), 0);
    out_char(o, '\n');
  }
}

int prof_dump(const char *path) {
  if (!prof_on) return EINVAL;
  char folded[512];
  out_t f = out_mem(folded, sizeof folded);
  out_str(&f, path);
  out_str(&f, ".folded");
  if (out_flush(&f) >= sizeof folded) return ENAMETOOLONG;
  int heap_fd = os_open_write(path);
  if (heap_fd < 0) return EACCES;
  int folded_fd = os_open_write(folded);
  if (folded_fd < 0) {
    os_close(heap_fd);
    return EACCES;
  }
  /* Counts are copied under the lock; the files are written outside it (the
   * symbols' lookup takes the loader's lock, which an allocating thread
   * may hold). Sites are never removed. */
  hak_lock(&dump_lock);
  hak_lock(&lock);
  site_t *first = atomic_load_explicit(&sites, memory_order_acquire);
  for (site_t *s = first; s; s = s->all)
    s->snap_n = s->live_n, s->snap_b = s->live_b, s->snap_an = s->alloc_n, s->snap_ab = s->alloc_b;
  hak_unlock(&lock);
  busy = true; /* the loader may allocate: not a sample */
  out_t o = OUT_FD(heap_fd);
  write_heap(&o, first);
  out_flush(&o);
  o = OUT_FD(folded_fd);
  write_folded(&o, first);
  out_flush(&o);
  busy = false;
  hak_unlock(&dump_lock);
  os_close(heap_fd);
  os_close(folded_fd);
  return 0;
}

void prof_at_exit(void) {
  if (!prof_on) return;
  char path[480];
  int err = hak_option_path(OPT_PROFILE, path, sizeof path) ? prof_dump(path) : ENAMETOOLONG;
  if (err == 0) return;
  out_t o = OUT_FD(2);
  out_str(&o, "hakmem: cannot write the heap profile to ");
  out_str(&o, hak_option_str(OPT_PROFILE));
  out_str(&o, "\n");
  out_flush(&o);
}

void prof_fork_lock(bool take) {
  if (take) hak_lock(&dump_lock), hak_lock(&lock);
  else hak_unlock(&lock), hak_unlock(&dump_lock);
}
