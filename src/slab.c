/* Slabs: carving, sparse pages, remote frees. */
#include "slab.h"

#include "size_class.h"
#include "stats.h"

/* Secure build: links n fresh blocks from b in a random order. */
static block_t *carve_shuffled(slab_t *s, char *b, size_t n) {
  uint16_t order[CARVE_MAX_BLOCKS];
  uint64_t r = harden_random();
  for (size_t i = 0; i < n; i++) order[i] = (uint16_t)i;
  for (size_t i = n - 1; i > 0; i--) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    size_t j = r % (i + 1);
    uint16_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  block_t *head = NULL;
  for (size_t i = 0; i < n; i++) {
    block_t *blk = (block_t *)(b + (size_t)order[i] * s->bsize);
    block_set_next(s, blk, head);
    head = blk;
  }
  return head;
}

void slab_reset(slab_t *s) {
  slab_set_list(s, NULL);
  s->fresh = 1;
  s->populated = NULL;
  s->sparse[0] = s->sparse[1] = 0;
  s->sparse_seen = 0;
  __atomic_store_n(&s->bump, slab_first(s), __ATOMIC_RELAXED);
}

/* A trapped page fault costs several times what the same page costs inside
 * one madvise(MADV_POPULATE_WRITE): a hot class's carve of fresh pages has
 * them faulted in with one call (kernels before 5.14 refuse it, and are not
 * asked again), and `ahead` bytes of the slab past them, which its next
 * carves then find resident with no call of their own; s->populated marks
 * how far. */
size_t slab_carve(slab_t *s, size_t n, unsigned populate_pages, size_t ahead) {
  char *end = slab_blocks_end(s);
  hak_assert(n >= 1 && n <= CARVE_MAX_BLOCKS && s->bump < end);
  size_t bsize = s->bsize;
  char *b = s->bump, *last = b + (n - 1) * bsize;
  if (last >= end) last = end - bsize;
  n = (size_t)(last - b) / bsize + 1;
  if (s->fresh) { /* the page of b, when not its start, was faulted in by the carve before */
    uintptr_t from = MAX(os_page_round((uintptr_t)b), (uintptr_t)s->populated),
              to = os_page_round((uintptr_t)(last + bsize));
    /* one call instead of a fault a page, where there are enough pages */
    if (populate_pages && to >= from + (populate_pages << os_page_log2())) {
      to = MIN(os_page_round(to + ahead), (uintptr_t)slab_start(s) + (size_t)s->units * UNIT_SIZE);
      hak_assert((from | to) % os_page_size() == 0); /* else EINVAL, which turns populating off for good */
      os_populate((void *)from, to - from);
      s->populated = (char *)to;
    }
  }
  if (HAKMEM_SECURE) {
    s->free = carve_shuffled(s, b, n);
  } else {
    for (char *q = b; q < last; q += bsize) block_set_next(s, (block_t *)q, (block_t *)(q + bsize));
    block_set_next(s, (block_t *)last, NULL);
    s->free = (block_t *)b;
  }
  __atomic_store_n(&s->bump, last + bsize, __ATOMIC_RELAXED);
  stat_refill(s->cls);
  return n;
}

/* ---- pages of a sparse slab --------------------------------------------- */

static bool pages_hit(const uint64_t *mask, size_t first, size_t last) {
  for (size_t p = first; p <= last; p++)
    if (mask[p / 64] >> (p % 64) & 1) return true;
  return false;
}

/* When s is sparse (at most a quarter of its carved blocks in use), returns
 * its pages whose carved blocks are all on its free list (one live block
 * keeps its page), and takes the blocks that touch them off the list, since
 * their links go with the pages. A program that freed most of what it
 * allocated but keeps a scattered few blocks gets the rest of the pages
 * back. Owner only; not in the secure build, whose free blocks carry the
 * tag that catches a double free. */
#define SPARSE_SEEN 0x80000000u
#define SPARSE_DONE 0x40000000u
size_t slab_purge_sparse(slab_t *s, bool at_once) {
  size_t page = os_page_size(), bsize = s->bsize;
  char *start = slab_start(s);
  size_t pad = (size_t)(slab_first(s) - start), carved = (size_t)(s->bump - start - pad) / bsize;
  size_t npages = (pad + carved * bsize + page - 1) / page;
  if (HAKMEM_SECURE || !slab_has_free(s) || (size_t)s->used * 4 > carved || npages > SLAB_MAX_PAGES) return 0;
  /* A slab found sparse waits for the next look (a purge delay later) with
   * the same count in use: one its thread allocates from again, or whose
   * thread's successor adopts it, keeps its pages rather than faulting
   * them in again. After a purge, nothing until the count changes. */
  uint32_t seen = s->used | SPARSE_SEEN;
  if ((s->sparse_seen & ~SPARSE_DONE) != seen) {
    s->sparse_seen = seen;
    if (!at_once) return 0;
  } else if (s->sparse_seen & SPARSE_DONE) {
    return 0;
  }
  s->sparse_seen = seen | SPARSE_DONE;
  uint16_t nfree[SLAB_MAX_PAGES] = {0};
  for (block_t *b = slab_list(s); b; b = block_next(s, b)) {
    size_t off = (size_t)((char *)b - start);
    for (size_t p = off / page; p <= (off + bsize - 1) / page; p++) nfree[p]++;
  }
  uint64_t mask[SLAB_MAX_PAGES / 64] = {0};
  bool any = false;
  for (size_t p = 0; p < npages; p++) {
    size_t lo = p * page, hi = lo + page - 1; /* offsets in the slab; blocks start at pad */
    if (hi < pad) continue;
    size_t first = lo < pad ? 0 : (lo - pad) / bsize, last = (hi - pad) / bsize;
    if (last >= carved) last = carved - 1;
    if (nfree[p] == last - first + 1) mask[p / 64] |= (uint64_t)1 << (p % 64), any = true;
  }
  if (!any) return 0;
  block_t *head = NULL, *tail = NULL;
  for (block_t *b = slab_list(s), *next; b; b = next) {
    next = block_next(s, b);
    size_t off = (size_t)((char *)b - start);
    if (pages_hit(mask, off / page, (off + bsize - 1) / page)) continue;
    if (tail) block_set_next(s, tail, b);
    else head = b;
    tail = b;
  }
  if (tail) block_set_next(s, tail, NULL);
  slab_set_list(s, head);
  size_t purged = 0;
  for (size_t p = 0; p < npages;) {
    if (!pages_hit(mask, p, p)) {
      p++;
      continue;
    }
    size_t q = p;
    while (q < npages && pages_hit(mask, q, q)) q++;
    purged += os_purge(start + p * page, (q - p) * page);
    p = q;
  }
  s->sparse[0] |= mask[0];
  s->sparse[1] |= mask[1];
  stat_add(bytes_purged, purged);
  return purged;
}

void slab_unpurge(slab_t *s) {
  size_t page = os_page_size(), bsize = s->bsize;
  char *start = slab_start(s);
  size_t pad = (size_t)(slab_first(s) - start);
  block_t *head = s->free;
  for (size_t i = (size_t)(s->bump - start - pad) / bsize; i-- > 0;) {
    size_t off = pad + i * bsize;
    if (!pages_hit(s->sparse, off / page, (off + bsize - 1) / page)) continue;
    block_t *b = (block_t *)(start + off);
    block_link(s, b, head);
    head = b;
  }
  s->free = head;
  s->sparse[0] = s->sparse[1] = 0;
  s->sparse_seen = 0;
}

/* ---- remote frees ----------------------------------------------------------- */

/* Another thread frees a block by setting its bit in the slab's bitmap (in
 * the region's header), never writing the block: the owner reads no line
 * the freeing thread wrote but that bitmap's, and takes the bits a word at a
 * time. The remote word counts the frees whose bits are not yet taken, and
 * flags. A freeing thread counts its free before it sets the bit, and the
 * owner subtracts what it took after it took it: so a bit set is always
 * counted (the count may run ahead of the bits, never behind), and the
 * thread whose count found none is the one that pushes the slab onto its
 * owner's inbox. A slab is on the inbox, or about to be, while its count is
 * not zero; its block's bit is the last thing a freeing thread writes of a
 * slab it does not push, so a slab taken for empty has no free in flight. */
#define REMOTE_COUNT_MASK ((UINT64_C(1) << 32) - 1)
#define REMOTE_COLLECTING (UINT64_C(1) << 32) /* the owner is taking bits: no wipe */
#define REMOTE_WIPED (UINT64_C(1) << 33)      /* every block free, the pages returned */
/* Bits 34-63 count the owner's collections and the slab's lives: a wipe's
 * compare-and-swap expects the word it read, so a thread delayed between
 * its free and its wipe cannot wipe a slab the owner took back, filled
 * and set aside again meanwhile, whose count came back to the same value. */
#define REMOTE_EPOCH (UINT64_C(1) << 34)
#define REMOTE_EPOCH_MASK (~(REMOTE_EPOCH - 1))
static uint64_t remote_next_epoch(uint64_t word) { return (word & REMOTE_EPOCH_MASK) + REMOTE_EPOCH; }

static size_t remote_count(uint64_t word) { return (size_t)(word & REMOTE_COUNT_MASK); }

static _Atomic uint64_t *remote_bits(const slab_t *s) {
  region_t *r = region_of(s);
  return r->remote_bits[s - r->slabs];
}

static size_t remote_words(const slab_t *s) { return (s->capacity + 63) / 64; }

/* The units whose rows hold s's bits, as remote_units bits. */
static uint64_t remote_unit_mask(const slab_t *s) {
  region_t *r = region_of(s);
  uint64_t units = s->units >= 64 ? UINT64_MAX : (UINT64_C(1) << s->units) - 1;
  return units << (s - r->slabs);
}

static void remote_clear(slab_t *s) {
  _Atomic uint64_t *bits = remote_bits(s);
  for (size_t i = 0, n = remote_words(s); i < n; i++) /* read first: a word is seldom set */
    if (atomic_load_explicit(&bits[i], memory_order_relaxed)) atomic_store_explicit(&bits[i], 0, memory_order_relaxed);
}

static void remote_init(slab_t *s) {
  /* bits are left only by a double free, and only in rows a remote free wrote */
  if (atomic_load_explicit(&region_of(s)->remote_units, memory_order_relaxed) & remote_unit_mask(s)) remote_clear(s);
  uint64_t w = atomic_load_explicit(&s->remote, memory_order_relaxed);
  atomic_store_explicit(&s->remote, remote_next_epoch(w), memory_order_relaxed);
}

void slab_init(slab_t *s, void *owner, uintptr_t flags, unsigned cls, bool fresh) {
  size_t bsize = hak_class_size[cls], bytes = (size_t)s->units * UNIT_SIZE;
  slab_set_list(s, NULL);
  s->used = 0;
  s->sparse[0] = s->sparse[1] = 0;
  s->sparse_seen = 0;
  s->idle = s->purged = 0;
  s->fresh = fresh;
  s->populated = NULL;
  s->bsize = (uint32_t)bsize;
  s->divc = UINT64_MAX / bsize + 1;
  if (HAKMEM_SECURE) s->key = harden_random() | 1;
  s->cls = (uint8_t)cls;
  s->kind = SLAB_SMALL;
  s->queued = 0;
  char *start = slab_start(s);
  size_t pad = (bsize - (uint32_t)(uintptr_t)start % bsize) % bsize; /* up to the first block (slab_block_at) */
  s->capacity = (uint32_t)MIN((bytes - pad) / bsize, s->units * REMOTE_BITS_PER_UNIT);
  s->first = start + pad;
  __atomic_store_n(&s->bump, start + pad, __ATOMIC_RELAXED); /* remote frees read it to validate */
  s->next = s->prev = s->remote_next = NULL;
  remote_init(s);
  atomic_store_explicit(&s->owner, (uintptr_t)owner | flags, memory_order_release);
}

static void inbox_push(slab_t *s) {
  slab_inbox_t *inbox = slab_heap(s);
  slab_t *top = atomic_load_explicit(&inbox->top, memory_order_relaxed);
  do {
    s->remote_next = top;
  } while (!atomic_compare_exchange_weak_explicit(&inbox->top, &top, s, memory_order_release, memory_order_relaxed));
}

/* A full slab's owner handed out every block and looks at it again only
 * through its inbox: once all of them came back, no one else may touch its
 * blocks. capacity and owner: s's, read before the publish that made
 * `word`, while the blocks it frees hold s up: after it, the owner may take
 * s back, release it and its region, and another thread's last free may
 * wipe s and its units make a new slab. A flag set after the read only
 * leaves s to its owner's collector. */
static bool remote_full(uint32_t capacity, uintptr_t owner, uint64_t word) {
  return !(word & (REMOTE_COLLECTING | REMOTE_WIPED)) && remote_count(word) == capacity && (owner & SLAB_F_FULL);
}

bool slab_batch_start(slab_batch_t *q, slab_t *s, block_t *b) {
  uint32_t i = slab_block_index(s, b);
  if (q->slab != s || q->word != i / 64 || slab_batch_full(q, s)) {
    if (q->slab) return false;
    *q = (slab_batch_t){.slab = s, .word = i / 64};
  }
  uint64_t bit = UINT64_C(1) << (i % 64);
  if (q->bits & bit) {
    harden_double_free(b); /* returns only to ignore the free */
  } else {
    q->bits |= bit;
    q->n++;
  }
  return true;
}

/* Frees the n blocks of s whose bits are `bits` in word w of its remote
 * bits: counted first, then set (a bit already set is a double free,
 * reported and not counted). */
hak_inline slab_full_t remote_publish(slab_t *s, uint32_t w, uint64_t bits, uint64_t n) {
  _Atomic uint64_t *units = &region_of(s)->remote_units;
  uint64_t mask = remote_unit_mask(s);
  /* while the blocks not yet counted hold s up */
  uint32_t capacity = s->capacity;
  uintptr_t owner = slab_owner(s);
  slab_full_t full = {.heap = (void *)(owner & ~(uintptr_t)SLAB_F_MASK),
                      .full_gen = __atomic_load_n(&s->full_gen, __ATOMIC_RELAXED), .units = s->units};
  if ((atomic_load_explicit(units, memory_order_relaxed) & mask) != mask)
    atomic_fetch_or_explicit(units, mask, memory_order_relaxed);
  uint64_t old = atomic_fetch_add_explicit(&s->remote, n, memory_order_acq_rel);
  /* release: the blocks' last writes reach the owner that takes their bits */
  uint64_t twice = atomic_fetch_or_explicit(&remote_bits(s)[w], bits, memory_order_release) & bits;
  if (unlikely(twice)) {
    for (uint64_t v = twice; v; v &= v - 1) {
      atomic_fetch_sub_explicit(&s->remote, 1, memory_order_relaxed); /* the first free's count holds it up */
      n--;
      harden_double_free(slab_block_by_index(s, (size_t)w * 64 + (unsigned)__builtin_ctzll(v)));
    }
    if (n == 0) return full;
  }
  if (remote_count(old) == 0) inbox_push(s); /* the owner's collector then visits this slab once */
  if (remote_full(capacity, owner, old + n)) full.word = old + n;
  return full;
}

slab_full_t slab_batch_publish(slab_batch_t *q) {
  slab_t *s = q->slab;
  q->slab = NULL;
  return remote_publish(s, q->word, q->bits, q->n);
}

slab_full_t slab_free_remote(slab_t *s, block_t *b) {
  uint32_t i = slab_block_index(s, b);
  return remote_publish(s, i / 64, UINT64_C(1) << (i % 64), 1);
}

/* Whether every block's bit is set: every free counted has landed. */
static bool remote_all_set(const slab_t *s) {
  _Atomic uint64_t *bits = remote_bits(s);
  size_t n = remote_words(s), tail = s->capacity % 64;
  for (size_t i = 0; i < n; i++) {
    uint64_t want = i + 1 == n && tail ? (UINT64_C(1) << tail) - 1 : UINT64_MAX;
    if (atomic_load_explicit(&bits[i], memory_order_acquire) != want) return false;
  }
  return true;
}

bool slab_wipe(slab_t *s, uint64_t word) {
  if (!remote_all_set(s) ||
      !atomic_compare_exchange_strong_explicit(&s->remote, &word, word | REMOTE_WIPED, memory_order_acq_rel,
                                               memory_order_relaxed))
    return false;
  remote_clear(s);
  return true;
}

/* Whether block b is on list c (a list of the owner's that holds blocks of
 * several slabs, as a slab's does its own). Its link tells first: a block
 * on a list links to a block or a list's head, an aligned user-space
 * address with the free bit set, which a block handed out rarely holds
 * there (the program's data; a foreign list clears its links on the way
 * home); only such a word takes the walk. */
#define LINK_SHAPE_MASK (~BLOCK_FREE_BIT & ~((UINT64_C(1) << 47) - 1))
static bool list_holds(const slab_t *c, const block_t *b) {
  uintptr_t v = (uintptr_t)b->next;
  if (!(v & BLOCK_FREE_BIT) || (v & LINK_SHAPE_MASK) || (v & 7)) return false;
  const block_t *x = slab_list(c);
  for (uint32_t left = c->capacity - c->used; x && left; left--, x = block_next(c, x))
    if (x == b) return true;
  return false;
}

/* Takes the bits set and puts their blocks, in address order (the list runs
 * up through memory), at the head of list `to` while it has room (its used
 * count kept at 1 or more, as its frees need), the rest at the head of s's
 * own; returns the blocks, those on s's list in *pushed. */
static size_t remote_take(slab_t *s, const slab_t *held, slab_t *to, size_t *pushed) {
  _Atomic uint64_t *bits = remote_bits(s);
  size_t twice = 0, k = 0, bsize = s->bsize, room = to && to->used > 1 ? to->used - 1 : 0;
  block_t *head = NULL, *tail = NULL, *cut = NULL; /* cut: the last block for `to` */
  for (size_t i = 0, words = remote_words(s); i < words; i++) {
    if (!atomic_load_explicit(&bits[i], memory_order_relaxed)) continue;
    uint64_t v = atomic_exchange_explicit(&bits[i], 0, memory_order_acquire);
    char *base = slab_first(s) + i * 64 * bsize;
    for (; v; v &= v - 1) {
      block_t *b = (block_t *)(base + (size_t)__builtin_ctzll(v) * bsize);
      if (unlikely(held && list_holds(held, b))) {
        harden_double_free(b); /* returns only to ignore the second free */
        twice++;
        continue;
      }
      if (tail) block_link(s, tail, b);
      else head = b;
      tail = b;
      if (++k == room) cut = b;
    }
  }
  size_t given = MIN(k, room);
  if (given) { /* head..cut (or tail) onto `to` */
    block_t *last = cut ? cut : tail, *rest = cut && cut != tail ? block_next(s, cut) : NULL;
    block_link(to, last, to->free);
    to->free = head;
    to->used -= (uint32_t)given;
    head = rest;
  }
  if (head) {
    block_link(s, tail, s->free);
    s->free = head;
  }
  *pushed = k - given;
  return k + twice;
}

size_t slab_collect_remote(slab_t *s, const slab_t *held, slab_t *to, bool *wiped) {
  uint64_t w = atomic_fetch_or_explicit(&s->remote, REMOTE_COLLECTING, memory_order_acq_rel);
  *wiped = false;
  if (w & REMOTE_WIPED) {
    size_t n = remote_count(w);
    hak_assert(n == s->used);
    slab_reset(s);
    s->used = 0;
    atomic_store_explicit(&s->remote, remote_next_epoch(w), memory_order_release);
    *wiped = true;
    return n;
  }
  size_t pushed, n = remote_take(s, held, to, &pushed);
  uint64_t after = atomic_fetch_add_explicit(&s->remote, REMOTE_EPOCH - (n | REMOTE_COLLECTING), memory_order_acq_rel) - n;
  /* frees counted whose bits had not landed: the slab waits on the inbox for the next visit */
  if (remote_count(after)) inbox_push(s);
  hak_assert(s->used >= pushed);
  s->used -= (uint32_t)pushed;
  return pushed;
}
