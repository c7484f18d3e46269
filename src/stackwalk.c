/* Stack walks: cached CFI rules, libgcc for the rest (stackwalk.h). */
#define _GNU_SOURCE
#include "stackwalk.h"

#include <dlfcn.h>
#include <link.h>
#include <unwind.h>

#include "base.h"

/* ---- libgcc ------------------------------------------------------------------ */

/* libgcc's FDE search: exported by libgcc_s (GCC_3.0) and libgcc_eh, declared
 * in no installed header. */
struct dwarf_eh_bases {
  void *tbase, *dbase, *func;
};
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases);

/* libgcc_s is not a dependency: loading it costs every process that preloads
 * hakmem at start-up and at each fork, and only the profiler walks stacks.
 * Its functions are weak references, there when the program loaded it (C++
 * does), else opened by stackwalk_init. */
#pragma weak _Unwind_Backtrace
#pragma weak _Unwind_GetIP
#pragma weak _Unwind_Find_FDE

static struct {
  _Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
  _Unwind_Ptr (*get_ip)(struct _Unwind_Context *);
  const void *(*find_fde)(void *, struct dwarf_eh_bases *);
} gcc;

static bool libgcc_open(void) {
  if (gcc.backtrace != NULL) return true;
  if (_Unwind_Backtrace != NULL && _Unwind_GetIP != NULL && _Unwind_Find_FDE != NULL) {
    gcc.get_ip = _Unwind_GetIP, gcc.find_fde = _Unwind_Find_FDE;
    gcc.backtrace = _Unwind_Backtrace;
    return true;
  }
  void *h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) return false;
  gcc.get_ip = (_Unwind_Ptr(*)(struct _Unwind_Context *))dlsym(h, "_Unwind_GetIP");
  gcc.find_fde = (const void *(*)(void *, struct dwarf_eh_bases *))dlsym(h, "_Unwind_Find_FDE");
  if (gcc.get_ip == NULL || gcc.find_fde == NULL) return false;
  gcc.backtrace = (_Unwind_Reason_Code(*)(_Unwind_Trace_Fn, void *))dlsym(h, "_Unwind_Backtrace");
  return gcc.backtrace != NULL;
}

/* ---- libgcc's walk ---------------------------------------------------------- */

enum { INNER = 4 }; /* at most this many walker frames before the first wanted one */

typedef struct {
  uintptr_t *pc;
  uint32_t n, max;
} walk_t;

static _Unwind_Reason_Code on_frame(struct _Unwind_Context *ctx, void *arg) {
  walk_t *w = arg;
  uintptr_t ip = gcc.get_ip(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  w->pc[w->n++] = ip;
  return w->n == w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

static _Atomic uint64_t libgcc_walks, rules_read;

uint64_t stackwalk_libgcc_walks(void) { return atomic_load_explicit(&libgcc_walks, memory_order_relaxed); }
uint64_t stackwalk_rules_read(void) { return atomic_load_explicit(&rules_read, memory_order_relaxed); }

/* libgcc's walk from the frame that `from` returns to (the first return
 * address the caller wants): the walkers' own frames are dropped. */
static hak_noinline uint32_t walk_libgcc(uintptr_t *pc, uint32_t max, uintptr_t from) {
  atomic_fetch_add_explicit(&libgcc_walks, 1, memory_order_relaxed);
  uintptr_t buf[STACKWALK_MAX + INNER];
  max = MIN(max, (uint32_t)STACKWALK_MAX);
  walk_t w = {buf, 0, max + INNER};
  if (gcc.backtrace) gcc.backtrace(on_frame, &w);
  uint32_t first = 0;
  while (first < w.n && first < INNER && buf[first] != from) first++;
  if (first == w.n || buf[first] != from) first = 0;
  uint32_t n = 0;
  for (uint32_t i = first; i < w.n && n < max; i++) pc[n++] = buf[i];
  return n;
}

hak_noinline uint32_t stackwalk_libgcc(uintptr_t *pc, uint32_t max) {
  return walk_libgcc(pc, max, (uintptr_t)__builtin_return_address(0));
}

#if defined(__x86_64__)

/* ---- rules ---------------------------------------------------------------------
 * A rule, one word: its kind; whether the frame is addressed from rbp (else
 * rsp) and at which offset (the CFA: the caller's rsp); where rbp was saved,
 * from the CFA (0: not saved). The return address is always at CFA - 8. */
enum { RULE_NONE, RULE_STEP, RULE_END, RULE_LIBGCC };
#define RULE_KIND(r) ((unsigned)(r)&3)
#define RULE_FROM_BP(r) (((r) >> 2) & 1)
#define RULE_CFA_OFF(r) ((int64_t)(int32_t)(uint32_t)((r) >> 8))
#define RULE_BP_OFF(r) ((int64_t)(int16_t)(uint16_t)((r) >> 40))

static uint64_t rule_step(bool from_bp, int64_t cfa_off, int64_t bp_off) {
  return RULE_STEP | (uint64_t)from_bp << 2 | (uint64_t)(uint32_t)(int32_t)cfa_off << 8 |
         (uint64_t)(uint16_t)(int16_t)bp_off << 40;
}

/* ---- reading CFI (DWARF call frame information, as .eh_frame holds it) ---- */

enum { REG_BP = 6, REG_SP = 7, REG_RA = 16 };
enum { HOW_SAME, HOW_OFFSET, HOW_UNDEF, HOW_OTHER };

/* One row of the CFI table, for the registers a walk needs. */
typedef struct {
  uint64_t cfa_reg;
  int64_t cfa_off, bp_off, ra_off;
  uint8_t bp_how, ra_how;
  bool cfa_other; /* an expression */
} row_t;

/* Where a CIE's fields and its instructions are. */
typedef struct {
  const uint8_t *insns, *end;
  uint64_t code_align;
  int64_t data_align;
  uint8_t fde_enc;
  bool has_aug, ok;
} cie_t;

/* A LEB128 number at *p, stepped over; signed when sign. */
static uint64_t leb(const uint8_t **p, bool sign) {
  uint64_t r = 0;
  unsigned s = 0;
  uint8_t b;
  do {
    b = *(*p)++;
    if (s < 64) r |= (uint64_t)(b & 0x7f) << s;
    s += 7;
  } while (b & 0x80);
  if (sign && s < 64 && (b & 0x40)) r |= ~(uint64_t)0 << s;
  return r;
}
static uint64_t uleb(const uint8_t **p) { return leb(p, false); }
static int64_t sleb(const uint8_t **p) { return (int64_t)leb(p, true); }

/* Steps over a pointer of encoding enc (DW_EH_PE_*); false for an encoding
 * this reader does not know. */
static bool skip_encoded(const uint8_t **p, uint8_t enc) {
  if (enc == 0xff) return true; /* omitted */
  switch (enc & 0x0f) {
  case 0x00: case 0x04: case 0x0c: *p += 8; return true;
  case 0x02: case 0x0a: *p += 2; return true;
  case 0x03: case 0x0b: *p += 4; return true;
  case 0x01: uleb(p); return true;
  case 0x09: sleb(p); return true;
  default: return false;
  }
}

/* A length field: the end of its entry, or NULL for the 64-bit form (not
 * produced for x86-64 objects). */
static const uint8_t *entry_end(const uint8_t **p) {
  uint32_t len;
  __builtin_memcpy(&len, *p, 4);
  *p += 4;
  return len == 0xffffffffu ? NULL : *p + len;
}

static cie_t read_cie(const uint8_t *c) {
  cie_t cie = {0};
  cie.end = entry_end(&c);
  if (cie.end == NULL) return cie;
  c += 4; /* CIE id */
  uint8_t version = *c++;
  const char *aug = (const char *)c;
  while (*c) c++;
  c++;
  if (aug[0] == 'e' && aug[1] == 'h') c += sizeof(void *);
  cie.code_align = uleb(&c);
  cie.data_align = sleb(&c);
  uint64_t ra = version == 1 ? *c++ : uleb(&c);
  if (ra != REG_RA) return cie;
  if (aug[0] == 'z') {
    uint64_t len = uleb(&c);
    const uint8_t *data = c, *data_end = c + len;
    for (const char *a = aug + 1; *a; a++) {
      if (*a == 'R') cie.fde_enc = *data++;
      else if (*a == 'L') data++;
      else if (*a == 'P') {
        uint8_t enc = *data++;
        if (!skip_encoded(&data, enc)) return cie;
      } else if (*a == 'S') return cie; /* a signal frame: libgcc's */
      else if (*a != 'B' && *a != 'G') return cie;
    }
    c = data_end;
    cie.has_aug = true;
  } else if (aug[0] != 0 && !(aug[0] == 'e' && aug[1] == 'h' && aug[2] == 0)) {
    return cie;
  }
  cie.insns = c;
  cie.ok = true;
  return cie;
}

static void set_reg(row_t *r, uint64_t reg, uint8_t how, int64_t off) {
  if (reg == REG_BP) r->bp_how = how, r->bp_off = off;
  else if (reg == REG_RA) r->ra_how = how, r->ra_off = off;
}

static void restore_reg(row_t *r, const row_t *init, uint64_t reg) {
  if (reg == REG_BP) r->bp_how = init->bp_how, r->bp_off = init->bp_off;
  else if (reg == REG_RA) r->ra_how = init->ra_how, r->ra_off = init->ra_off;
}

enum { STATES = 8 };

/* Runs CFI instructions [p, end) from location *loc until the row for
 * target is reached. init: the CIE's row (NULL while running the CIE).
 * False for an instruction this reader does not take. */
static bool run_cfi(const uint8_t *p, const uint8_t *end, const cie_t *cie, uintptr_t *loc,
                    uintptr_t target, row_t *row, const row_t *init) {
  row_t saved[STATES];
  unsigned depth = 0;
  while (p < end) {
    uint8_t op = *p++, low = op & 0x3f;
    uint64_t reg, len, delta = 0;
    switch (op >> 6) {
    case 1: delta = low; goto advance;
    case 2: set_reg(row, low, HOW_OFFSET, (int64_t)uleb(&p) * cie->data_align); continue;
    case 3: if (init) restore_reg(row, init, low); continue;
    }
    switch (op) {
    case 0x00: continue; /* nop */
    case 0x02: delta = *p++; goto advance;
    case 0x03: { uint16_t d; __builtin_memcpy(&d, p, 2); p += 2; delta = d; goto advance; }
    case 0x04: { uint32_t d; __builtin_memcpy(&d, p, 4); p += 4; delta = d; goto advance; }
    case 0x05: reg = uleb(&p); set_reg(row, reg, HOW_OFFSET, (int64_t)uleb(&p) * cie->data_align); continue;
    case 0x06: reg = uleb(&p); if (init) restore_reg(row, init, reg); continue;
    case 0x07: set_reg(row, uleb(&p), HOW_UNDEF, 0); continue;
    case 0x08: set_reg(row, uleb(&p), HOW_SAME, 0); continue;
    case 0x09: reg = uleb(&p); uleb(&p); set_reg(row, reg, HOW_OTHER, 0); continue;
    case 0x0a: if (depth == STATES) return false; saved[depth++] = *row; continue;
    case 0x0b: {
      if (depth == 0) return false;
      *row = saved[--depth]; /* the CFA too, as libgcc and GCC's epilogues take it */
      continue;
    }
    case 0x0c: row->cfa_reg = uleb(&p); row->cfa_off = (int64_t)uleb(&p); row->cfa_other = false; continue;
    case 0x0d: row->cfa_reg = uleb(&p); row->cfa_other = false; continue;
    case 0x0e: row->cfa_off = (int64_t)uleb(&p); continue;
    case 0x0f: len = uleb(&p); p += len; row->cfa_other = true; continue;
    case 0x10: case 0x16: reg = uleb(&p); len = uleb(&p); p += len; set_reg(row, reg, HOW_OTHER, 0); continue;
    case 0x11: reg = uleb(&p); set_reg(row, reg, HOW_OFFSET, sleb(&p) * cie->data_align); continue;
    case 0x12: row->cfa_reg = uleb(&p); row->cfa_off = sleb(&p) * cie->data_align; row->cfa_other = false; continue;
    case 0x13: row->cfa_off = sleb(&p) * cie->data_align; continue;
    case 0x14: reg = uleb(&p); uleb(&p); set_reg(row, reg, HOW_OTHER, 0); continue;
    case 0x15: reg = uleb(&p); sleb(&p); set_reg(row, reg, HOW_OTHER, 0); continue;
    case 0x2e: uleb(&p); continue; /* GNU_args_size */
    case 0x2f: reg = uleb(&p); set_reg(row, reg, HOW_OFFSET, -(int64_t)uleb(&p) * cie->data_align); continue;
    default: return false; /* set_loc, vendor extensions */
    }
  advance:
    *loc += delta * cie->code_align;
    if (*loc > target) return true;
  }
  return true;
}

/* The rule at code address pc, read from its FDE. */
static uint64_t rule_read(uintptr_t pc) {
  atomic_fetch_add_explicit(&rules_read, 1, memory_order_relaxed);
  struct dwarf_eh_bases bases;
  const uint8_t *f = gcc.find_fde((void *)pc, &bases);
  if (f == NULL) return RULE_LIBGCC; /* no table: libgcc knows signal trampolines */
  const uint8_t *end = entry_end(&f);
  if (end == NULL) return RULE_LIBGCC;
  int32_t to_cie;
  __builtin_memcpy(&to_cie, f, 4);
  cie_t cie = read_cie(f - to_cie);
  f += 4;
  if (!cie.ok || !skip_encoded(&f, cie.fde_enc) || !skip_encoded(&f, cie.fde_enc & 0x0f)) return RULE_LIBGCC;
  if (cie.has_aug) {
    uint64_t len = uleb(&f);
    f += len;
  }
  row_t row = {.cfa_reg = REG_SP, .bp_how = HOW_SAME, .ra_how = HOW_SAME};
  uintptr_t loc = (uintptr_t)bases.func;
  if (!run_cfi(cie.insns, cie.end, &cie, &loc, UINTPTR_MAX, &row, NULL)) return RULE_LIBGCC;
  row_t init = row;
  loc = (uintptr_t)bases.func;
  if (!run_cfi(f, end, &cie, &loc, pc, &row, &init)) return RULE_LIBGCC;
  if (row.ra_how == HOW_UNDEF) return RULE_END; /* the outermost frame */
  if (row.cfa_other || (row.cfa_reg != REG_SP && row.cfa_reg != REG_BP)) return RULE_LIBGCC;
  if (row.ra_how != HOW_OFFSET || row.ra_off != -8) return RULE_LIBGCC;
  if (row.cfa_off < INT32_MIN || row.cfa_off > INT32_MAX) return RULE_LIBGCC;
  if (row.bp_how == HOW_SAME) return rule_step(row.cfa_reg == REG_BP, row.cfa_off, 0);
  if (row.bp_how != HOW_OFFSET || row.bp_off == 0 || row.bp_off < INT16_MIN || row.bp_off > INT16_MAX)
    return RULE_LIBGCC;
  return rule_step(row.cfa_reg == REG_BP, row.cfa_off, row.bp_off);
}

/* ---- the table of rules: open addressing, filled under a lock, read without -----
 * A reader checks the key again after the rule: a slot emptied and refilled
 * between its two loads is not taken for the old key. */
#define SLOTS 8192
#define PROBES 8

typedef struct {
  _Atomic uintptr_t pc;
  _Atomic uint64_t rule;
} slot_t;

static slot_t *table;
static hak_lock_t table_lock;
static unsigned long long unloads; /* the loader's count when the table was last emptied */

bool stackwalk_init(void) {
  if (!libgcc_open()) return false;
  if (table == NULL) table = os_map(SLOTS * sizeof *table);
  return true;
}

void stackwalk_fork_lock(bool take) {
  if (take) hak_lock(&table_lock);
  else hak_unlock(&table_lock);
}

static size_t home(uintptr_t pc) { return (size_t)(pc * 0x9E3779B97F4A7C15ull >> 51) & (SLOTS - 1); }

static uint64_t rule_of(uintptr_t pc) {
  size_t i = home(pc);
  for (unsigned n = 0; n < PROBES; n++, i = (i + 1) & (SLOTS - 1)) {
    uintptr_t k = atomic_load_explicit(&table[i].pc, memory_order_acquire);
    if (k == 0) break;
    if (k != pc) continue;
    uint64_t r = atomic_load_explicit(&table[i].rule, memory_order_acquire);
    if (r != RULE_NONE && atomic_load_explicit(&table[i].pc, memory_order_relaxed) == pc) return r;
    break;
  }
  uint64_t r = rule_read(pc); /* outside the lock: the FDE search may take the loader's */
  hak_lock(&table_lock);
  i = home(pc);
  for (unsigned n = 0; n < PROBES; n++, i = (i + 1) & (SLOTS - 1)) {
    uintptr_t k = atomic_load_explicit(&table[i].pc, memory_order_relaxed);
    if (k != 0 && k != pc) continue;
    atomic_store_explicit(&table[i].rule, r, memory_order_release);
    atomic_store_explicit(&table[i].pc, pc, memory_order_release);
    break;
  }
  hak_unlock(&table_lock);
  return r;
}

static int read_unloads(struct dl_phdr_info *info, size_t size, void *arg) {
  *(unsigned long long *)arg = info->dlpi_subs;
  return 1;
}

/* Empties the table when an object was unloaded since the last check. A
 * thread checks at its first walk and every UNLOAD_CHECK_EVERY walks after:
 * the loader's count is read under its lock, which every thread would take
 * at each walk otherwise. */
#define UNLOAD_CHECK_EVERY 32
static __thread uint32_t walks __attribute__((tls_model("initial-exec")));

static bool check_unloads(void) {
  if (walks++ % UNLOAD_CHECK_EVERY != 0) return false;
  unsigned long long now = 0;
  dl_iterate_phdr(read_unloads, &now);
  if (now == __atomic_load_n(&unloads, __ATOMIC_RELAXED)) return true;
  hak_lock(&table_lock);
  for (size_t i = 0; i < SLOTS; i++) {
    atomic_store_explicit(&table[i].pc, 0, memory_order_relaxed);
    atomic_store_explicit(&table[i].rule, RULE_NONE, memory_order_release);
  }
  __atomic_store_n(&unloads, now, __ATOMIC_RELAXED);
  hak_unlock(&table_lock);
  return true;
}

/* A frame's size is bounded: a step that moves the stack pointer down, or
 * by more than this, is a wrong rule, and the walk ends there. */
#define FRAME_MAX ((uintptr_t)1 << 28)

/* The highest frame a walk just after a check reached (its outermost): a
 * rule gone stale since the check could point a walk above it, where the
 * stack may end, so no walk reads there. 0 until known. */
static __thread uintptr_t stack_top __attribute__((tls_model("initial-exec")));

hak_noinline uint32_t stackwalk(uintptr_t *pc, uint32_t max) {
  uintptr_t from = (uintptr_t)__builtin_return_address(0);
  if (table == NULL) return walk_libgcc(pc, max, from);
  bool fresh = check_unloads();
  uintptr_t top = fresh || stack_top == 0 ? UINTPTR_MAX : stack_top;
  uintptr_t ip, sp, bp;
  __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(ip), "=r"(sp), "=r"(bp));
  uint32_t n = 0;
  for (uintptr_t at = ip; n < max; at = pc[n - 1] - 1) {
    uint64_t r = rule_of(at);
    if (RULE_KIND(r) == RULE_END) {
      if (fresh && sp > stack_top) stack_top = sp;
      break;
    }
    if (RULE_KIND(r) != RULE_STEP) return walk_libgcc(pc, max, from);
    uintptr_t cfa = (RULE_FROM_BP(r) ? bp : sp) + (uintptr_t)RULE_CFA_OFF(r);
    if (cfa <= sp || cfa - sp > FRAME_MAX || cfa > top) break;
    uintptr_t ra = *(const uintptr_t *)(cfa - 8);
    if (RULE_BP_OFF(r) != 0) bp = *(const uintptr_t *)(cfa + (uintptr_t)RULE_BP_OFF(r));
    sp = cfa;
    if (ra == 0) break;
    pc[n++] = ra;
  }
  return n;
}

#else /* other targets: libgcc's walk */

bool stackwalk_init(void) { return true; }
void stackwalk_fork_lock(bool take) { (void)take; }
hak_noinline uint32_t stackwalk(uintptr_t *pc, uint32_t max) {
  return walk_libgcc(pc, max, (uintptr_t)__builtin_return_address(0));
}

#endif
