/* The sampling heap profiler (HAKMEM_PROFILE=PATH). Layer 5.
 *
 * Sampling. Each thread counts the bytes it allocates down from a random
 * interval (exponential, of mean HAKMEM_PROFILE_RATE); the allocation that
 * crosses zero is sampled. A block of s bytes is then sampled with
 * probability 1 - exp(-s/rate), and stands for 1/that blocks of its size:
 * the profile's figures are unbiased estimates of the live heap. The count
 * lives in the heap (heap.h, sample_left), or in the profiling library in
 * the thread's view of it, which malloc reads anyway. The default library's
 * fast path has no instruction of it: while profiling, it allocates from
 * proxies whose lists end where the next sample falls (heap.h), which costs
 * the slow path more often. The profiling library (libhakmem-profile.so, built with
 * HAKMEM_PROFILING=1, what `hakmem run --profile` preloads) counts on the
 * fast path instead, two instructions.
 *
 * A sampled block's free must reach the profiler with no test on the free
 * fast path: it takes the slow path. In the profiling library a sampled
 * Small block lies inside a slab block of a bigger class, as far in as the
 * alignment a block of its size has in its own class (at least PROF_INNER):
 * the fast path frees only a block's start (slab_block_at), and the slow
 * path finds the inner pointer in the table.
 * Any other sampled block (aligned, Large, the default and secure
 * libraries) gets a page run of its own (large.h), whose free is slow.
 *
 * Stacks. stackwalk.h walks the stack from the unwind tables (.eh_frame) that
 * every object carries on x86-64, so programs built without frame pointers
 * are profiled too, with each code address's rule read once and cached. An
 * allocation made while the thread is walking (libgcc's, if any) is not
 * sampled.
 *
 * The profile. gperftools' heap profile text (google-pprof reads it), the
 * estimates already scaled: "@ heapprofile" tells pprof to scale nothing.
 * Beside it, PATH.folded: one line per stack, its frames' symbols from the
 * outermost, then its live bytes (flame-graph viewers read it). */
#ifndef HAKMEM_PROF_H
#define HAKMEM_PROF_H

#include "base.h"

/* How far into its slab block a sampled Small block starts at least (the
 * profiling library): malloc's alignment. */
#define PROF_INNER 16

/* Whether profiling is on (set once, at start-up). */
extern bool prof_on;

/* Reads the options; turns profiling on when HAKMEM_PROFILE is set. */
void prof_init(void);
/* A random sampling interval, in bytes. */
int64_t prof_interval(void);
/* Whether the calling thread is inside the profiler (its allocations are
 * not sampled). */
bool prof_nested(void);
/* Block p of size bytes was sampled, counted as `counted` bytes. */
void prof_record(void *p, size_t size, size_t counted);
/* Block p is freed: forgets it, and says whether it was sampled. */
bool prof_forget(const void *p);
/* Whether block p is a live sampled block. */
bool prof_sampled(const void *p);
/* realloc moved or resized block old to p, now of size bytes. */
void prof_moved(const void *old, void *p, size_t size);
/* Writes the live heap to path and path.folded (path NULL: HAKMEM_PROFILE's);
 * 0, or an errno value. */
int prof_dump(const char *path);
/* The profile at exit, to HAKMEM_PROFILE. */
void prof_at_exit(void);
/* Takes (or releases) the profiler's locks around fork. */
void prof_fork_lock(bool take);

#endif
