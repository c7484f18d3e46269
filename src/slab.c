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
  atomic_store_explicit(&s->remote, NULL, memory_order_relaxed);
  s->used = 0;
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
  __atomic_store_n(&s->bump, slab_start(s), __ATOMIC_RELAXED);
}

/* Makes s->free up to n fresh blocks (1 <= n <= CARVE_MAX_BLOCKS) of the
 * ones left (the caller checks that some are). */
void slab_carve(slab_t *s, size_t n) {
  hak_assert(n >= 1 && n <= CARVE_MAX_BLOCKS && s->bump < s->end);
  size_t bsize = s->bsize;
  char *b = s->bump, *last = b + (n - 1) * bsize;
  if (last >= s->end) last = s->end - bsize;
  n = (size_t)(last - b) / bsize + 1;
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

/* Another thread frees b: push it, and when the list was empty tell the
 * owning heap (whose collector then visits this slab once). */
void slab_free_remote(slab_t *s, block_t *b) {
  block_t *head = atomic_load_explicit(&s->remote, memory_order_relaxed);
  do {
    block_set_next(s, b, head);
  } while (!atomic_compare_exchange_weak_explicit(&s->remote, &head, b, memory_order_acq_rel,
                                                  memory_order_relaxed));
  if (head != NULL) return;
  heap_t *heap = slab_heap(s);
  slab_t *top = atomic_load_explicit(&heap->remote_slabs, memory_order_relaxed);
  do {
    s->remote_next = top;
  } while (!atomic_compare_exchange_weak_explicit(&heap->remote_slabs, &top, s, memory_order_release,
                                                  memory_order_relaxed));
}

/* Owner only, and only for a slab taken off the heap's remote stack: moves
 * the remote list to the free list. Returns the number of blocks moved. */
size_t slab_collect_remote(slab_t *s) {
  /* acq_rel: the caller's read of remote_next must happen before a pusher
   * that sees the emptied list links s onto the heap's stack again. */
  block_t *list = atomic_exchange_explicit(&s->remote, NULL, memory_order_acq_rel);
  if (list == NULL) return 0;
  size_t n = 1;
  block_t *tail = list;
  for (block_t *next; (next = block_next(s, tail)) != NULL; tail = next) n++;
  block_set_next(s, tail, s->free);
  s->free = list;
  hak_assert(s->used >= n);
  s->used -= (uint32_t)n;
  return n;
}

