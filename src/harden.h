/* Hardening hooks of the free lists and of free(). Each is an inline helper
 * that compiles to nothing where its build does not check. Layer 2.
 *
 * Every build: a free block's link has its top bit set, which no user-space
 * address has. malloc takes a block only when the bit is set, and clears
 * it: a block freed twice sits on its list twice, and its second taking
 * finds the bit the first one cleared; a link overwritten with an address
 * (a write after free, an overflow into a free neighbour) lacks the bit and
 * is refused before it is followed. Either writes one line and aborts
 * (HAKMEM_ON_ERROR=report: the list is dropped instead, its blocks lost).
 * free() takes a small block only at a block's start (slab_block_at: a
 * multiply and a compare on the fast path); a pointer inside a block writes
 * one line and aborts (report: the free is ignored).
 * See docs/security.md for what this does not catch.
 *
 * The secure build (HAKMEM_SECURE=1, libhakmem-secure.so):
 * - free lists are encoded with a per-slab random key, and every decoded
 *   link must fall inside its slab: an overwritten list cannot send malloc
 *   to an address of the attacker's choosing;
 * - a freed block carries a tag (its address mixed with the key) in its
 *   second word: freeing it again is caught; blocks are at least 16 bytes;
 * - free() also checks that the pointer lies before its slab's last block;
 * - fresh blocks are handed out in random order; region headers sit between
 *   guard pages (region.c).
 * A failed check writes one line to stderr and aborts. */
#ifndef HAKMEM_HARDEN_H
#define HAKMEM_HARDEN_H

#include "region.h"
#include "types.h"

#define SECURE_FREED_TAG 0x5eed5eed5eed5eedull

void harden_fail(const char *what, const void *p) __attribute__((noreturn, cold));
/* A free list found corrupted at p: one line on stderr, then abort, or
 * return with HAKMEM_ON_ERROR=report (the secure build always aborts). */
void harden_list_broken(const void *p) __attribute__((cold));
/* free(p) of a block whose remote free is pending: one line on stderr, then
 * abort, or return with HAKMEM_ON_ERROR=report (the free is ignored). */
void harden_double_free(const void *p) __attribute__((cold));
/* free(p) of a pointer inside a small block: one line on stderr, then abort,
 * or return with HAKMEM_ON_ERROR=report (the free is ignored). */
void harden_inside_block(const void *p) __attribute__((cold));
uint64_t harden_random(void);

#define BLOCK_FREE_BIT ((uintptr_t)1 << 63)

/* The end of slab s's list: the address of its head, not NULL, so that
 * block_take, the fast path's only test, finds it empty (the head's own
 * word has no free bit). block_next reads it as NULL. */
hak_inline block_t *slab_end(const slab_t *s) { return (block_t *)&s->free; }
hak_inline bool slab_has_free(const slab_t *s) { return s->free != slab_end(s); }
/* The list's first block, or NULL. */
hak_inline block_t *slab_list(const slab_t *s) { return slab_has_free(s) ? s->free : NULL; }
hak_inline void slab_set_list(slab_t *s, block_t *b) { s->free = b ? b : slab_end(s); }

/* The link of b as stored, decoded: a block, or slab_end(s). */
hak_inline block_t *block_link_of(const slab_t *s, const block_t *b) {
  if (!HAKMEM_SECURE) return (block_t *)((uintptr_t)b->next & ~BLOCK_FREE_BIT);
  block_t *next = (block_t *)((uintptr_t)b->next ^ s->key);
  char *start = slab_start(s);
  if (next != slab_end(s) && ((char *)next < start || (char *)next >= slab_blocks_end(s))) harden_fail("free list corrupted", b);
  return next;
}

/* The block after b on its list, or NULL. */
hak_inline block_t *block_next(const slab_t *s, const block_t *b) {
  block_t *next = block_link_of(s, b);
  return next == slab_end(s) ? NULL : next;
}

/* Links free block b to next: a block, or slab_end(s) (never NULL). */
hak_inline void block_link(const slab_t *s, block_t *b, block_t *next) {
  b->next = HAKMEM_SECURE ? (block_t *)((uintptr_t)next ^ s->key) : (block_t *)((uintptr_t)next | BLOCK_FREE_BIT);
}

/* The same, NULL ending the list. */
hak_inline void block_set_next(const slab_t *s, block_t *b, block_t *next) { block_link(s, b, next ? next : slab_end(s)); }

/* Takes block b, the head of a free list: clears its free bit, and says
 * whether it was set (false for the end of the list too, whose word is left
 * as it is). On x86-64 the test and the clear each take the word as a
 * memory operand (cmp, and): a plain load into a register worked on there,
 * or a btr on memory, makes the pop wait longer on some processors when the
 * block is out of L1 (docs/experiments.md, stop 60). */
hak_inline bool block_take(block_t *b) {
#if defined(__x86_64__) && !HAK_UNDER_SANITIZER
  bool was;
  __asm__("cmpq $0, %1" : "=@ccs"(was) : "m"(b->next));
  if (was) b->next = (block_t *)((uintptr_t)b->next & ~BLOCK_FREE_BIT);
  return was;
#else
  uintptr_t v = (uintptr_t)b->next;
  if (!(v & BLOCK_FREE_BIT)) return false;
  b->next = (block_t *)(v & ~BLOCK_FREE_BIT);
  return true;
#endif
}

/* Whether b, the head of s's list, may be handed out: a taken free block
 * (the secure build, whose links carry no free bit, checks on free). */
hak_inline bool slab_take(const slab_t *s, block_t *b) { return HAKMEM_SECURE ? b != slab_end(s) : block_take(b); }

/* The link of a block slab_take has taken: a block, or slab_end(s). */
hak_inline block_t *block_next_taken(const slab_t *s, const block_t *b) {
  return HAKMEM_SECURE ? block_link_of(s, b) : b->next;
}

hak_inline uint64_t secure_tag(const slab_t *s, const block_t *b) {
  return s->key ^ (uintptr_t)b ^ SECURE_FREED_TAG;
}

/* A block leaves its slab: clear the freed tag. */
hak_inline void harden_on_alloc(const slab_t *s, block_t *b) {
  if (HAKMEM_SECURE) ((uint64_t *)b)[1] = 0;
}

/* A block comes back to slab s: it must start a block and not be free. */
hak_inline void harden_on_free(const slab_t *s, block_t *b) {
  if (!HAKMEM_SECURE) return;
  if ((char *)b >= slab_blocks_end(s) || (char *)b < slab_first(s) || !slab_block_at(s, b))
    harden_fail("free of a pointer inside a block", b);
  if (((uint64_t *)b)[1] == secure_tag(s, b)) harden_fail("double free", b);
  ((uint64_t *)b)[1] = secure_tag(s, b);
}

/* Blocks are at least 16 bytes in the secure build (room for the tag). */
hak_inline size_t harden_min_size(size_t size) { return HAKMEM_SECURE && size < 16 ? 16 : size; }

#endif
