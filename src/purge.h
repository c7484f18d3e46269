/* Time-decayed purging. Freed memory stays resident for the purge delay
 * (HAKMEM_PURGE_DELAY_MS, or the learner's strategy), so that a program that
 * frees and allocates again pays no page faults; then it goes back to the OS.
 * The rounds run on hakmem's own slow paths: a thread that allocates or
 * frees returns, every PURGE_TICK_MS at most, what is due in every heap. No
 * thread of hakmem's own runs unless HAKMEM_BACKGROUND_THREAD=1 asks for one
 * (made with pthread_create once the program has a second thread). Layer 5. */
#ifndef HAKMEM_PURGE_H
#define HAKMEM_PURGE_H

#include "base.h"

#define PURGE_TICK_MS 10

/* A slow path's look at the clock: runs a round when one is due. */
void purge_tick(uint64_t now);
/* The next tick runs a round (the strategy changed). */
void purge_soon(void);
/* Everything free goes back now (malloc_trim). Returns whether anything did. */
bool purge_all(void);
/* Unmaps every cache (pooled regions, empty arenas): out of address space. */
bool purge_release_cached(void);
void purge_fork_child(void);
extern hak_lock_t purge_lock;

#endif
