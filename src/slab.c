/* Slabs: carving, sparse pages, remote frees. */
#include "slab.h"

#include "size_class.h"
#include "stats.h"

void slab_init(slab_t *s, void *owner, uintptr_t flags, unsigned cls, bool fresh) {
  size_t bsize = hak_class_size[cls], bytes = (size_t)s->units * UNIT_SIZE;
  slab_set_list(s, NULL);
  atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
  s->used = 0;
  s->sparse[0] = s->sparse[1] = 0;
  s->sparse_seen = 0;
  s->idle = s->purged = 0;
  s->fresh = fresh;
  s->bsize = (uint32_t)bsize;
  s->divc = UINT64_MAX / bsize + 1;
  if (HAKMEM_SECURE) s->key = harden_random() | 1;
  s->cls = (uint8_t)cls;
  s->kind = SLAB_SMALL;
  s->queued = 0;
  char *start = slab_start(s);
  size_t pad = (bsize - (uint32_t)(uintptr_t)start % bsize) % bsize; /* up to the first block (slab_block_at) */
  s->capacity = (uint32_t)((bytes - pad) / bsize);
  s->end = start + pad + (size_t)s->capacity * bsize;
  __atomic_store_n(&s->bump, start + pad, __ATOMIC_RELAXED); /* remote frees read it to validate */
  s->next = s->prev = s->remote_next = NULL;
  atomic_store_explicit(&s->owner, (uintptr_t)owner | flags, memory_order_release);
}

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
  s->sparse[0] = s->sparse[1] = 0;
  s->sparse_seen = 0;
  __atomic_store_n(&s->bump, slab_first(s), __ATOMIC_RELAXED);
}

/* A trapped page fault costs several times what the same page costs inside
 * one madvise(MADV_POPULATE_WRITE): a hot class's carve of fresh pages has
 * them faulted in with one call (kernels before 5.14 refuse it, and are not
 * asked again). Only the carved blocks' pages: the rest of the slab may
 * never be needed. */
void slab_carve(slab_t *s, size_t n, bool populate) {
  hak_assert(n >= 1 && n <= CARVE_MAX_BLOCKS && s->bump < s->end);
  size_t bsize = s->bsize;
  char *b = s->bump, *last = b + (n - 1) * bsize;
  if (last >= s->end) last = s->end - bsize;
  n = (size_t)(last - b) / bsize + 1;
  if (s->fresh) { /* the page of b, when not its start, was faulted in by the carve before */
    uintptr_t from = os_page_round((uintptr_t)b), to = os_page_round((uintptr_t)(last + bsize));
    /* one call instead of a fault a page, where there are two pages or more (a hot class's
     * batch, or blocks of pages) */
    if (to > from + os_page_size() || (populate && to > from)) os_populate((void *)from, to - from);
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
size_t slab_purge_sparse(slab_t *s) {
  size_t page = os_page_size(), bsize = s->bsize;
  char *start = slab_start(s);
  size_t pad = (size_t)(slab_first(s) - start), carved = (size_t)(s->bump - start - pad) / bsize;
  size_t npages = (pad + carved * bsize + page - 1) / page;
  if (HAKMEM_SECURE || !slab_has_free(s) || (size_t)s->used * 4 > carved || npages > SLAB_MAX_PAGES) return 0;
  if (s->sparse_seen == (s->used | SPARSE_SEEN)) return 0; /* likely nothing new since */
  s->sparse_seen = s->used | SPARSE_SEEN;
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

/* The remote word packs the list's head and tail, as offsets in the region
 * (0: none), and its length: the owner takes the list whole, with no walk to
 * count it and find its tail. A word with a length and no head is a wiped
 * slab (every block free, nothing listed). */
#define REMOTE_OFF_BITS 22 /* log2 REGION_SIZE */
#define REMOTE_OFF_MASK ((UINT64_C(1) << REMOTE_OFF_BITS) - 1)
#define REMOTE_TAIL_SHIFT REMOTE_OFF_BITS
#define REMOTE_COUNT_SHIFT (2 * REMOTE_OFF_BITS)
_Static_assert(REGION_SIZE == UINT64_C(1) << REMOTE_OFF_BITS, "remote offsets span a region");
_Static_assert(REGION_SIZE / 8 < UINT64_C(1) << (64 - REMOTE_COUNT_SHIFT), "the count holds a region's blocks");

static block_t *remote_block(const slab_t *s, uint64_t off) {
  return off ? (block_t *)((char *)region_of(s) + off) : NULL;
}

uint64_t slab_free_remote(slab_t *s, block_t *b) {
  uint64_t off = (uint64_t)((char *)b - (char *)region_of(s));
  uint64_t old = atomic_load_explicit(&s->remote, memory_order_relaxed), new;
  do {
    block_set_next(s, b, remote_block(s, old & REMOTE_OFF_MASK));
    /* the first block pushed onto an empty list is its tail */
    uint64_t tail = old ? old & (REMOTE_OFF_MASK << REMOTE_TAIL_SHIFT) : off << REMOTE_TAIL_SHIFT;
    new = off | tail | ((old >> REMOTE_COUNT_SHIFT) + 1) << REMOTE_COUNT_SHIFT;
  } while (!atomic_compare_exchange_weak_explicit(&s->remote, &old, new, memory_order_acq_rel, memory_order_relaxed));
  if (old == 0) { /* tell the owner, whose collector then visits this slab once */
    slab_inbox_t *inbox = slab_heap(s);
    slab_t *top = atomic_load_explicit(&inbox->top, memory_order_relaxed);
    do {
      s->remote_next = top;
    } while (!atomic_compare_exchange_weak_explicit(&inbox->top, &top, s, memory_order_release, memory_order_relaxed));
  }
  return new;
}

/* A full slab's owner handed out every block and looks at it again only
 * through its inbox: once all of them came back, no one else may touch its
 * blocks. */
bool slab_remote_full(const slab_t *s, uint64_t word) {
  return (word >> REMOTE_COUNT_SHIFT) == s->capacity && (slab_owner(s) & SLAB_F_FULL);
}

bool slab_wipe(slab_t *s, uint64_t word) {
  uint64_t wiped = (uint64_t)s->capacity << REMOTE_COUNT_SHIFT;
  return atomic_compare_exchange_strong_explicit(&s->remote, &word, wiped, memory_order_acq_rel, memory_order_relaxed);
}

/* Whether a remote list of n blocks is sound: n blocks of this slab, each
 * still free (its free bit set: a block its owner took meanwhile was freed
 * twice, here and on the owner's list), ending at tail. Walked before it
 * joins the owner's list, so that a block freed twice is never handed out
 * twice: the fast path could not tell once the splice sets its bit again. */
static bool remote_sound(const slab_t *s, block_t *list, block_t *tail, size_t n) {
  for (size_t i = 1;; i++) {
    if (!slab_is_block(s, list) || (!HAKMEM_SECURE && !((uintptr_t)list->next & BLOCK_FREE_BIT))) return false;
    if (list == tail) return i == n && block_next(s, tail) == NULL;
    if (i == n || (list = block_next(s, list)) == NULL) return false;
  }
}

size_t slab_collect_remote(slab_t *s, bool *wiped) {
  /* acq_rel: the caller's read of remote_next must happen before a pusher
   * that sees the emptied list links s onto the inbox again. */
  uint64_t w = atomic_exchange_explicit(&s->remote, 0, memory_order_acq_rel);
  *wiped = false;
  if (w == 0) return 0;
  size_t n = (size_t)(w >> REMOTE_COUNT_SHIFT);
  block_t *list = remote_block(s, w & REMOTE_OFF_MASK);
  if (list == NULL) {
    hak_assert(n == s->used);
    slab_reset(s);
    s->used = 0;
    *wiped = true;
    return n;
  }
  block_t *tail = remote_block(s, w >> REMOTE_TAIL_SHIFT & REMOTE_OFF_MASK);
  hak_assert(tail != NULL && n > 0);
  if (unlikely(!remote_sound(s, list, tail, n))) {
    harden_list_broken(list); /* returns only to drop the list: its blocks are lost, not handed out twice */
    return 0;
  }
  block_link(s, tail, s->free);
  s->free = list;
  hak_assert(s->used >= n);
  s->used -= (uint32_t)n;
  return n;
}
