/* The sampling heap profiler: stacks, the table of sampled blocks, the
 * profile files. */
#define _GNU_SOURCE
#include "prof.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>

#include "harden.h"
#include "heap.h"
#include "options.h"
#include "os.h"
#include "out.h"
#include "stackwalk.h"

#define MAX_DEPTH 48
#define INNER_MAX 8 /* hakmem's own frames above the program's */
#define SITE_BUCKETS 4096
#define ARENA_CHUNK ((size_t)1 << 20)
#define SAMPLES_MIN 256
#define SHARD_BITS 6
#define SHARDS (1 << SHARD_BITS)
#define FIXED 16.0 /* the sites' running totals count sixteenths of blocks and bytes */

/* A call stack and what its sampled blocks stand for (estimates). Sites are
 * never removed, so a lookup reads the buckets without a lock. What a site's
 * blocks hold now is summed from the live samples at a dump; what they have
 * allocated in all is counted here. */
typedef struct site_s {
  struct site_s *_Atomic next; /* in its bucket */
  struct site_s *all;          /* every site, newest first */
  uint64_t hash;
  _Atomic int64_t alloc_n, alloc_b;        /* in 1/FIXED */
  double snap_n, snap_b, snap_an, snap_ab; /* a dump's figures, under dump_lock */
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

/* The live samples in shards by address (a block may be freed by another
 * thread than the one that sampled it). */
typedef struct {
  hak_lock_t lock;
  sample_t *slots;
  size_t cap, n;
} __attribute__((aligned(64))) shard_t;

bool prof_on;
static double rate;
static hak_lock_t lock;              /* making a site */
static hak_lock_t dump_lock;         /* one dump at a time */
static site_t *_Atomic *buckets;     /* SITE_BUCKETS */
static site_t *_Atomic sites;        /* append-only */
static char *arena_next, *arena_end; /* under lock */
static shard_t shards[SHARDS];
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
  if (!stackwalk_init()) {
    out_t o = OUT_FD(2);
    out_str(&o, "hakmem: HAKMEM_PROFILE: libgcc_s.so.1 (the stack unwinder) not found; not profiling\n");
    out_flush(&o);
    return;
  }
  buckets = os_map(os_page_round(SITE_BUCKETS * sizeof *buckets));
  if (buckets == NULL) return;
  dl_iterate_phdr(find_self, (void *)(uintptr_t)prof_init);
  heap_large_view_ok = false; /* every Large malloc counts towards the next sample */
  prof_on = true;
}

bool prof_nested(void) { return busy; }

/* ln(x) for x > 0 (normal), to about 1e-7 relative: the exponent, and the
 * series of atanh for the mantissa. libm's log costs a sample about as much
 * as the rest of its bookkeeping. */
static double ln(double x) {
  uint64_t bits;
  __builtin_memcpy(&bits, &x, 8);
  int e = (int)((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m;
  __builtin_memcpy(&m, &bits, 8);
  if (m > 1.4142135623730951) m *= 0.5, e++; /* m in [0.71, 1.42): t below 0.18 */
  double t = (m - 1) / (m + 1), t2 = t * t;
  return e * 0.6931471805599453 + 2 * t * (1 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 + t2 / 9))));
}

/* 1 - e^-x for x >= 0, to about 1e-7 relative: the series below 1/8, else
 * e^-x from 2^-k and the series of e^r, |r| <= ln(2) / 2. */
static double one_minus_exp_neg(double x) {
  if (x < 0.125) return x * (1 - x / 2 * (1 - x / 3 * (1 - x / 4 * (1 - x / 5 * (1 - x / 6)))));
  if (x > 40) return 1;
  double k = (double)(int64_t)(x * 1.4426950408889634 + 0.5), r = k * 0.6931471805599453 - x; /* e^-x = 2^-k e^r */
  double er = 1 + r * (1 + r / 2 * (1 + r / 3 * (1 + r / 4 * (1 + r / 5 * (1 + r / 6 * (1 + r / 7))))));
  uint64_t bits = (uint64_t)(1023 - (int64_t)k) << 52;
  double scale;
  __builtin_memcpy(&scale, &bits, 8);
  return 1 - er * scale;
}

/* -ln(u) for u uniform in (0, 1], times the rate. */
int64_t prof_interval(void) {
  if (rng == 0) rng = harden_random() | 1;
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  double u = (double)((rng >> 11) + 1) * 0x1p-53;
  double x = -ln(u) * rate;
  return x < 1 ? 1 : x > 0x1p60 ? INT64_C(1) << 60 : (int64_t)x;
}

/* ---- stacks ---------------------------------------------------------------- */

static uint64_t stack_hash(const uintptr_t *pc, uint32_t n) {
  uint64_t h = n;
  for (uint32_t i = 0; i < n; i++) h = (h ^ pc[i]) * 0x100000001B3ull, h ^= h >> 29;
  return h;
}

static site_t *site_find(site_t *_Atomic *b, uint64_t h, const uintptr_t *pc, uint32_t n) {
  for (site_t *s = atomic_load_explicit(b, memory_order_acquire); s;
       s = atomic_load_explicit(&s->next, memory_order_acquire)) {
    if (s->hash != h || s->depth != n) continue;
    uint32_t i = 0;
    while (i < n && s->pc[i] == pc[i]) i++;
    if (i == n) return s;
  }
  return NULL;
}

/* A new site for stack pc[0..n), published whole; NULL when out of memory.
 * Under the lock. */
static site_t *site_new(site_t *_Atomic *b, uint64_t h, const uintptr_t *pc, uint32_t n) {
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
  atomic_store_explicit(&s->next, atomic_load_explicit(b, memory_order_relaxed), memory_order_relaxed);
  s->all = atomic_load_explicit(&sites, memory_order_relaxed);
  atomic_store_explicit(b, s, memory_order_release);
  atomic_store_explicit(&sites, s, memory_order_release);
  return s;
}

/* The site of stack pc[0..n), made when new; NULL when out of memory. */
static site_t *site_get(const uintptr_t *pc, uint32_t n) {
  uint64_t h = stack_hash(pc, n);
  site_t *_Atomic *b = &buckets[h & (SITE_BUCKETS - 1)];
  site_t *s = site_find(b, h, pc, n);
  if (s) return s;
  hak_lock(&lock);
  s = site_find(b, h, pc, n);
  if (s == NULL) s = site_new(b, h, pc, n);
  hak_unlock(&lock);
  return s;
}

/* ---- sampled blocks: a shard's table, open addressing, linear probing ---- */

/* By the 4 MiB of address space a block lies in: a thread's blocks lie in
 * its own regions, so threads seldom share a shard. */
static shard_t *shard_of(uintptr_t a) { return &shards[(a >> 22) * 0x9E3779B97F4A7C15ull >> (64 - SHARD_BITS)]; }

static size_t slot_of(uintptr_t a, size_t cap) { return (size_t)((a >> 4) * 0x9E3779B97F4A7C15ull >> 17) & (cap - 1); }

static bool samples_grow(shard_t *sh) {
  size_t cap = sh->cap ? sh->cap * 2 : SAMPLES_MIN;
  sample_t *t = os_map(cap * sizeof *t);
  if (t == NULL) return false;
  for (size_t i = 0; i < sh->cap; i++) {
    if (sh->slots[i].addr == 0) continue;
    size_t j = slot_of(sh->slots[i].addr, cap);
    while (t[j].addr) j = (j + 1) & (cap - 1);
    t[j] = sh->slots[i];
  }
  if (sh->slots) os_unmap(sh->slots, sh->cap * sizeof *sh->slots);
  sh->slots = t, sh->cap = cap;
  return true;
}

static sample_t *sample_find(shard_t *sh, uintptr_t a) {
  if (sh->cap == 0) return NULL;
  for (size_t i = slot_of(a, sh->cap);; i = (i + 1) & (sh->cap - 1)) {
    if (sh->slots[i].addr == a) return &sh->slots[i];
    if (sh->slots[i].addr == 0) return NULL;
  }
}

static bool sample_put(shard_t *sh, sample_t e) {
  if ((sh->n + 1) * 2 > sh->cap && !samples_grow(sh)) return false;
  size_t i = slot_of(e.addr, sh->cap);
  while (sh->slots[i].addr) i = (i + 1) & (sh->cap - 1);
  sh->slots[i] = e;
  sh->n++;
  return true;
}

/* Empties slot e, moving back the entries after it that probed past it. */
static void sample_del(shard_t *sh, sample_t *e) {
  sample_t *t = sh->slots;
  size_t mask = sh->cap - 1, i = (size_t)(e - t), j = i;
  for (;;) {
    t[i].addr = 0;
    for (;;) {
      j = (j + 1) & mask;
      if (t[j].addr == 0) {
        sh->n--;
        return;
      }
      size_t home = slot_of(t[j].addr, sh->cap);
      /* j's entry may fill i when its home is not cyclically in (i, j] */
      if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) break;
    }
    t[i] = t[j];
    i = j;
  }
}

/* ---- the hooks ---------------------------------------------------------------------- */

/* A thread's allocated figures not yet added to their site: threads that
 * sample the same site would otherwise write its line by turns. Added when
 * the thread samples another site, every PENDING_MAX samples, and at the
 * thread's own dumps; a dump lacks at most PENDING_MAX - 1 samples of each
 * other thread in its cumulative figures (the live ones are exact). */
#define PENDING_MAX 16
typedef struct {
  site_t *site;
  int64_t n, b;
  uint32_t count;
} pending_t;
static __thread pending_t pending __attribute__((tls_model("initial-exec")));

static void pending_flush(void) {
  if (pending.site == NULL) return;
  atomic_fetch_add_explicit(&pending.site->alloc_n, pending.n, memory_order_relaxed);
  atomic_fetch_add_explicit(&pending.site->alloc_b, pending.b, memory_order_relaxed);
  pending = (pending_t){0};
}

static void sample_add(sample_t e) {
  shard_t *sh = shard_of(e.addr);
  hak_lock(&sh->lock);
  bool kept = sample_put(sh, e);
  hak_unlock(&sh->lock);
  if (!kept) return;
  if (pending.site != e.site || pending.count == PENDING_MAX) pending_flush(), pending.site = e.site;
  pending.n += (int64_t)(e.weight * FIXED);
  pending.b += (int64_t)(e.weight * (double)e.size * FIXED);
  pending.count++;
}

void prof_record(void *p, size_t size, size_t counted) {
  uintptr_t pc[MAX_DEPTH + INNER_MAX];
  busy = true;
  uint32_t n = stackwalk(pc, MAX_DEPTH + INNER_MAX), skip = 0;
  busy = false;
  while (skip < n && skip < INNER_MAX && pc[skip] >= self_lo && pc[skip] < self_hi) skip++; /* still in hakmem */
  n = MIN(n - skip, (uint32_t)MAX_DEPTH);
  double weight = 1.0 / one_minus_exp_neg((double)(counted ? counted : 1) / rate);
  site_t *s = site_get(pc + skip, n);
  if (s) sample_add((sample_t){(uintptr_t)p, s, size, weight});
}

/* Whether p is a live sampled block; forgets it when forget. */
static bool sample_lookup(const void *p, bool forget) {
  shard_t *sh = shard_of((uintptr_t)p);
  hak_lock(&sh->lock);
  sample_t *e = sample_find(sh, (uintptr_t)p);
  if (e && forget) sample_del(sh, e);
  hak_unlock(&sh->lock);
  return e != NULL;
}

bool prof_forget(const void *p) { return sample_lookup(p, true); }

bool prof_sampled(const void *p) { return sample_lookup(p, false); }

void prof_moved(const void *old, void *p, size_t size) {
  shard_t *sh = shard_of((uintptr_t)old);
  hak_lock(&sh->lock);
  sample_t *e = sample_find(sh, (uintptr_t)old), moved = {0};
  if (e) moved = *e, sample_del(sh, e);
  hak_unlock(&sh->lock);
  if (moved.addr == 0) return;
  moved.addr = (uintptr_t)p;
  moved.size = size;
  sh = shard_of((uintptr_t)p);
  hak_lock(&sh->lock);
  sample_put(sh, moved);
  hak_unlock(&sh->lock);
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
  char opt[480];
  if (path == NULL && !hak_option_path(OPT_PROFILE, opt, sizeof opt)) return ENAMETOOLONG;
  if (path == NULL) path = opt;
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
  /* The live figures are summed from each shard under its lock; the files
   * are written outside them (the symbols' lookup takes the loader's lock,
   * which an allocating thread may hold). A site newer than `first` may
   * gather figures here: it is not written, and the next dump clears it. */
  pending_flush();
  hak_lock(&dump_lock);
  site_t *first = atomic_load_explicit(&sites, memory_order_acquire);
  for (site_t *s = first; s; s = s->all) {
    s->snap_n = s->snap_b = 0;
    s->snap_an = (double)atomic_load_explicit(&s->alloc_n, memory_order_relaxed) / FIXED;
    s->snap_ab = (double)atomic_load_explicit(&s->alloc_b, memory_order_relaxed) / FIXED;
  }
  for (shard_t *sh = shards; sh < shards + SHARDS; sh++) {
    hak_lock(&sh->lock);
    for (size_t i = 0; i < sh->cap; i++) {
      sample_t *e = &sh->slots[i];
      if (e->addr) e->site->snap_n += e->weight, e->site->snap_b += e->weight * (double)e->size;
    }
    hak_unlock(&sh->lock);
  }
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
  if (prof_dump(NULL) == 0) return;
  out_t o = OUT_FD(2);
  out_str(&o, "hakmem: cannot write the heap profile to ");
  out_str(&o, hak_option_str(OPT_PROFILE));
  out_str(&o, "\n");
  out_flush(&o);
}

void prof_fork_lock(bool take) {
  if (take) {
    hak_lock(&dump_lock), hak_lock(&lock);
    for (shard_t *sh = shards; sh < shards + SHARDS; sh++) hak_lock(&sh->lock);
    stackwalk_fork_lock(true);
  } else {
    stackwalk_fork_lock(false);
    for (shard_t *sh = shards; sh < shards + SHARDS; sh++) hak_unlock(&sh->lock);
    hak_unlock(&lock), hak_unlock(&dump_lock);
  }
}
