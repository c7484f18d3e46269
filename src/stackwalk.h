/* Stack walks for the heap profiler. Layer 0: uses the OS layer only.
 *
 * The walk reads the unwind tables (.eh_frame) that every x86-64 object
 * carries, so programs built without frame pointers are walked too. A code
 * address's rule (where its caller's frame starts; where the return address
 * and rbp are saved) is read once from its FDE, found through libgcc's
 * _Unwind_Find_FDE, and kept in a table keyed by address: a walk over known
 * code costs a lookup and two loads per frame. A frame whose rule has
 * another shape (a DWARF expression, a signal frame, a frame addressed from
 * a third register) or whose code has no table hands the whole walk to
 * libgcc's _Unwind_Backtrace, which knows every case. Neither allocates for
 * the objects the loader knows.
 *
 * The table is emptied when the loader has unloaded an object since the
 * last walk, so code mapped later at the same address has its rules read
 * again. */
#ifndef HAKMEM_STACKWALK_H
#define HAKMEM_STACKWALK_H

#include <stdbool.h>
#include <stdint.h>

/* The deepest walk the libgcc path returns. */
#define STACKWALK_MAX 64

/* Finds libgcc's unwinder (opening libgcc_s when the program has not) and
 * maps the rule table (without it, walks go through libgcc alone). False
 * when there is no libgcc: every walk then returns no frame. */
bool stackwalk_init(void);
/* Up to max return addresses of the calling thread's stack, innermost first,
 * starting with stackwalk's own return address. Returns how many. */
uint32_t stackwalk(uintptr_t *pc, uint32_t max);
/* The same through libgcc alone: the reference the tests compare with. */
uint32_t stackwalk_libgcc(uintptr_t *pc, uint32_t max);
/* How many walks went to libgcc (a frame of another shape, code without
 * tables) and how many rules were read from the tables, since start-up. */
uint64_t stackwalk_libgcc_walks(void);
uint64_t stackwalk_rules_read(void);
/* Takes (or releases) the table's lock around fork. */
void stackwalk_fork_lock(bool take);

#endif
