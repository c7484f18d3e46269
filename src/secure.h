/* The secure build's checks (HAKMEM_SECURE=1, libhakmem-secure.so). Each is an
 * inline helper that compiles to nothing in the default build.
 *
 * - Free lists are encoded with a per-slab random key, and every decoded
 *   pointer must fall inside its slab: an overwritten list cannot send malloc
 *   to an address of the attacker's choosing.
 * - A freed block carries a tag (its address mixed with the key) in its second
 *   word: freeing it again is caught. Blocks are at least 16 bytes for this.
 * - free() checks that the pointer starts a block of its slab.
 * - Fresh blocks are handed out in random order; region headers sit between
 *   guard pages (region.c).
 * Any failed check writes one line to stderr and aborts. */
#ifndef HAKMEM_SECURE_H
#define HAKMEM_SECURE_H

#ifndef HAKMEM_SECURE
#define HAKMEM_SECURE 0
#endif

#define SECURE_FREED_TAG 0x5eed5eed5eed5eedull

void secure_fail(const char *what, const void *p) __attribute__((noreturn, cold));
uint64_t secure_random(void);

hak_inline block_t *block_next(const slab_t *s, const block_t *b) {
  if (!HAKMEM_SECURE) return b->next;
  block_t *next = (block_t *)((uintptr_t)b->next ^ s->key);
  char *start = slab_start(s);
  if (next != NULL && ((char *)next < start || (char *)next >= s->end)) secure_fail("free list corrupted", b);
  return next;
}

hak_inline void block_set_next(const slab_t *s, block_t *b, block_t *next) {
  b->next = HAKMEM_SECURE ? (block_t *)((uintptr_t)next ^ s->key) : next;
}

hak_inline uint64_t secure_tag(const slab_t *s, const block_t *b) {
  return s->key ^ (uintptr_t)b ^ SECURE_FREED_TAG;
}

/* A block leaves its slab: clear the freed tag. */
hak_inline void secure_on_alloc(const slab_t *s, block_t *b) {
  if (HAKMEM_SECURE) ((uint64_t *)b)[1] = 0;
}

/* A block comes back to slab s: it must start a block and not be free. */
hak_inline void secure_on_free(const slab_t *s, block_t *b) {
  if (!HAKMEM_SECURE) return;
  size_t off = (size_t)((char *)b - slab_start(s));
  if ((char *)b >= s->end || ((off * s->recip) >> 48) * s->bsize != off) secure_fail("free of a pointer inside a block", b);
  if (((uint64_t *)b)[1] == secure_tag(s, b)) secure_fail("double free", b);
  ((uint64_t *)b)[1] = secure_tag(s, b);
}

/* Blocks are at least 16 bytes in the secure build (room for the tag). */
hak_inline size_t secure_min_size(size_t size) {
  return HAKMEM_SECURE && size < 16 ? 16 : size;
}

/* Pops a block from s->free, which must not be empty. */
hak_inline block_t *slab_pop(slab_t *s) {
  block_t *b = s->free;
  s->free = block_next(s, b);
  s->used++;
  secure_on_alloc(s, b);
  return b;
}

#endif
