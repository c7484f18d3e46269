/* Slabs: a span of units holding blocks of one size class, with two free
 * lists: `free`, which the owner allocates from and frees onto (last in,
 * first out: the block freed last is the one still in the cache), and
 * `remote`, an atomic list other threads push onto. Fresh blocks are carved
 * from the bump range a batch at a time, so untouched pages stay untouched. */
#include "internal.h"
#include "stats.h"

void slab_init(slab_t *s, heap_t *heap, unsigned cls, size_t units) {
  size_t bsize = hak_class_size[cls], bytes = units * UNIT_SIZE;
  s->free = NULL;
  atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
  s->used = 0;
  s->purged[0] = s->purged[1] = 0;
  s->sparse_seen = 0;
  s->idle = 0;
  s->bsize = (uint32_t)bsize;
  s->recip = (((uint64_t)1 << 48) + bsize - 1) / bsize;
  if (HAKMEM_SECURE) s->key = secure_random() | 1;
  s->cls = (uint8_t)cls;
  s->kind = SLAB_SMALL;
  s->queued = 0;
  s->capacity = (uint32_t)(bytes / bsize);
  char *start = slab_start(s);
  s->end = start + (size_t)s->capacity * bsize;
  __atomic_store_n(&s->bump, start, __ATOMIC_RELAXED); /* remote frees read it to validate */
  s->next = s->prev = s->remote_next = NULL;
  atomic_store_explicit(&s->owner, (uintptr_t)heap | (hak_stats_enabled ? SLAB_F_SLOW : 0), memory_order_release);
}

/* Secure build: links n fresh blocks from b in a random order. */
static block_t *carve_shuffled(slab_t *s, char *b, size_t n) {
  uint16_t order[CARVE_MAX_BLOCKS];
  uint64_t r = secure_random();
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

/* An empty slab whose pages the purger returned forgets its list (the links
 * now read as zeros): every block is fresh again. */
void slab_reset(slab_t *s) {
  s->free = NULL;
  s->purged[0] = s->purged[1] = 0;
  s->sparse_seen = 0;
  __atomic_store_n(&s->bump, slab_start(s), __ATOMIC_RELAXED);
}

/* Faults in the pages that start in [from, to), before the carve writes
 * its links: carved blocks go out next and are written, and one call costs
 * less than the page faults it saves (on a PVM VM, at 10 us a fault, filling
 * 30 MiB of 16-1024 B blocks: 102 -> 60 ms; mid_large_mt at 4 threads, 3.0
 * -> 4.1 M cycles/s, the same faults and peak RSS; on a 16-core VM, at
 * 1.6 us a fault, mid_large_mt at 1 thread: 4.70 -> 5.00). The page of
 * from, when from is not its start, was faulted in by the carve before.
 * The call holds the address space's lock (mmap_lock) for reading, where a
 * trapped fault locks only its mapping: on that 16-core VM mid_large_mt ran
 * 1.20x-1.30x faster without it at 8 threads and 1.23x-1.59x at 16 (4
 * threads: 0.95x-1.08x). So it is made only while at most
 * POPULATE_MAX_RUNNING threads can run at once. */
#define POPULATE_MAX_RUNNING 4
static void slab_populate(char *from, char *to) {
  unsigned running = heap_threads_running(), cpus = os_cpu_count();
  if ((running < cpus ? running : cpus) > POPULATE_MAX_RUNNING) return;
  uintptr_t a = os_page_round((uintptr_t)from), z = os_page_round((uintptr_t)to);
  if (z > a) os_populate((void *)a, z - a);
}

/* Makes s->free up to n fresh blocks (1 <= n <= CARVE_MAX_BLOCKS) of the
 * ones left (the caller checks that some are). */
void slab_carve(slab_t *s, size_t n) {
  hak_assert(n >= 1 && n <= CARVE_MAX_BLOCKS && s->bump < s->end);
  size_t bsize = s->bsize;
  char *b = s->bump, *last = b + (n - 1) * bsize;
  if (last >= s->end) last = s->end - bsize;
  n = (size_t)(last - b) / bsize + 1;
  slab_populate(b, last + bsize);
  if (HAKMEM_SECURE) {
    s->free = carve_shuffled(s, b, n);
  } else {
    for (char *q = b; q < last; q += bsize) ((block_t *)q)->next = (block_t *)(q + bsize);
    ((block_t *)last)->next = NULL;
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
 * to the OS its pages whose carved blocks are all on its free list (one live
 * block keeps its page), and takes the blocks that touch them off the list,
 * since their links go with the pages; slab_unpurge() puts them back when
 * the list runs dry. A program that freed most of what it allocated but
 * keeps a scattered few blocks gets the rest of those pages back. Owner
 * only; not in the secure build, whose free blocks carry the tag that
 * catches a double free. Returns the bytes purged. */
size_t slab_purge_sparse(slab_t *s) {
  size_t page = os_page_size(), bsize = s->bsize;
  char *start = slab_start(s);
  size_t carved = (size_t)(s->bump - start) / bsize, npages = (carved * bsize + page - 1) / page;
  if (HAKMEM_SECURE || s->free == NULL || (size_t)s->used * 4 > carved || npages > SLAB_MAX_PAGES) return 0;
  if (s->sparse_seen == (s->used | SPARSE_SEEN)) return 0; /* likely nothing new since */
  s->sparse_seen = s->used | SPARSE_SEEN;
  uint16_t nfree[SLAB_MAX_PAGES] = {0};
  for (block_t *b = s->free; b; b = block_next(s, b)) {
    size_t off = (size_t)((char *)b - start);
    for (size_t p = off / page; p <= (off + bsize - 1) / page; p++) nfree[p]++;
  }
  uint64_t mask[SLAB_MAX_PAGES / 64] = {0};
  bool any = false;
  for (size_t p = 0; p < npages; p++) {
    size_t first = p * page / bsize, last = ((p + 1) * page - 1) / bsize;
    if (last >= carved) last = carved - 1;
    if (nfree[p] == last - first + 1) mask[p / 64] |= (uint64_t)1 << (p % 64), any = true;
  }
  if (!any) return 0;
  block_t *head = NULL, *tail = NULL;
  for (block_t *b = s->free, *next; b; b = next) {
    next = block_next(s, b);
    size_t off = (size_t)((char *)b - start);
    if (pages_hit(mask, off / page, (off + bsize - 1) / page)) continue;
    if (tail) block_set_next(s, tail, b);
    else head = b;
    tail = b;
  }
  if (tail) block_set_next(s, tail, NULL);
  s->free = head;
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
  s->purged[0] |= mask[0];
  s->purged[1] |= mask[1];
  stat_add(bytes_purged, purged);
  return purged;
}

/* Puts the blocks of s's purged pages back on its free list. */
void slab_unpurge(slab_t *s) {
  size_t page = os_page_size(), bsize = s->bsize;
  char *start = slab_start(s);
  block_t *head = s->free;
  for (size_t i = (size_t)(s->bump - start) / bsize; i-- > 0;) {
    size_t off = i * bsize;
    if (!pages_hit(s->purged, off / page, (off + bsize - 1) / page)) continue;
    block_t *b = (block_t *)(start + off);
    block_set_next(s, b, head);
    head = b;
  }
  s->free = head;
  s->purged[0] = s->purged[1] = 0;
  s->sparse_seen = 0;
}

/* The remote word packs the list's head and tail, as offsets in the region
 * (0: the list is empty), and its length: the owner takes the list whole,
 * with no walk to count it and find its tail. The walk was a cache miss per
 * block, on lines the freeing thread had just written. */
#define REMOTE_OFF_BITS 22 /* log2 REGION_SIZE */
#define REMOTE_OFF_MASK ((UINT64_C(1) << REMOTE_OFF_BITS) - 1)
#define REMOTE_TAIL_SHIFT REMOTE_OFF_BITS
#define REMOTE_COUNT_SHIFT (2 * REMOTE_OFF_BITS)
_Static_assert(REGION_SIZE == UINT64_C(1) << REMOTE_OFF_BITS, "remote offsets span a region");
_Static_assert(REGION_SIZE / 8 < UINT64_C(1) << (64 - REMOTE_COUNT_SHIFT), "remote count holds a region's blocks");

static block_t *remote_block(const slab_t *s, uint64_t off) {
  return off ? (block_t *)((char *)region_of(s) + off) : NULL;
}

/* Another thread frees b: push it, and when the list was empty tell the
 * owning heap (whose collector then visits this slab once). */
void slab_free_remote(slab_t *s, block_t *b) {
  uint64_t off = (uint64_t)((char *)b - (char *)region_of(s));
  uint64_t old = atomic_load_explicit(&s->remote, memory_order_relaxed), new;
  do {
    block_set_next(s, b, remote_block(s, old & REMOTE_OFF_MASK));
    /* the first block pushed onto an empty list is its tail */
    uint64_t tail = old ? old & (REMOTE_OFF_MASK << REMOTE_TAIL_SHIFT) : off << REMOTE_TAIL_SHIFT;
    new = off | tail | ((old >> REMOTE_COUNT_SHIFT) + 1) << REMOTE_COUNT_SHIFT;
  } while (!atomic_compare_exchange_weak_explicit(&s->remote, &old, new, memory_order_acq_rel, memory_order_relaxed));
  if (old != 0) return;
  heap_t *heap = slab_heap(s);
  slab_t *top = atomic_load_explicit(&heap->remote_slabs, memory_order_relaxed);
  do {
    s->remote_next = top;
  } while (!atomic_compare_exchange_weak_explicit(&heap->remote_slabs, &top, s, memory_order_release,
                                                  memory_order_relaxed));
}

/* The length of a remote list, walked; 0 if it does not end at tail. */
static size_t remote_count(const slab_t *s, block_t *list, block_t *tail) {
  size_t n = 1;
  for (; list != tail; n++)
    if ((list = block_next(s, list)) == NULL) return 0;
  return block_next(s, tail) == NULL ? n : 0;
}

/* Owner only, and only for a slab taken off the heap's remote stack: moves
 * the remote list to the free list. Returns the number of blocks moved. */
size_t slab_collect_remote(slab_t *s) {
  /* acq_rel: the caller's read of remote_next must happen before a pusher
   * that sees the emptied list links s onto the heap's stack again. */
  uint64_t w = atomic_exchange_explicit(&s->remote, 0, memory_order_acq_rel);
  if (w == 0) return 0;
  block_t *list = remote_block(s, w & REMOTE_OFF_MASK);
  block_t *tail = remote_block(s, w >> REMOTE_TAIL_SHIFT & REMOTE_OFF_MASK);
  size_t n = (size_t)(w >> REMOTE_COUNT_SHIFT);
  hak_assert(list != NULL && tail != NULL && n > 0);
  hak_assert_expensive(remote_count(s, list, tail) == n);
  if (s->free) block_set_next(s, tail, s->free); /* else it ends the list already */
  s->free = list;
  hak_assert(s->used >= n);
  s->used -= (uint32_t)n;
  return n;
}
