/* The OS layer: every system call hakmem makes goes through these functions.
 * None of them allocates; all are safe to call with hakmem's locks held. */
#ifndef HAKMEM_OS_H
#define HAKMEM_OS_H

/* Sanitizers that track memory want to see every mapping change through the
 * C library's wrappers, and know nothing of threads made without it. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define HAK_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define HAK_UNDER_SANITIZER 1
#endif
#endif
#ifndef HAK_UNDER_SANITIZER
#define HAK_UNDER_SANITIZER 0
#endif

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Maps size bytes of zeroed read-write memory aligned to align (a power of
 * two, at least the page size). Returns NULL when the OS refuses. */
void *os_map_aligned(size_t size, size_t align);
/* Makes [p, p+size) inaccessible (a guard); page-aligned. */
bool os_protect_none(void *p, size_t size);
/* 64 random bits from the kernel (or, failing that, from the clock). */
uint64_t os_random_seed(void);
/* Unmaps [p, p+size); p and size page-aligned. This and os_purge free
 * memory in pieces of at most 2 MiB: see os.c. */
void os_unmap(void *p, size_t size);
/* Returns [p, p+size) to the OS; the range stays mapped and reads back as
 * zeros. Returns the number of bytes purged (0 when the call failed). */
size_t os_purge(void *p, size_t size);
/* Resizes a mapping in place or, with may_move, anywhere page-aligned.
 * Returns the new address or NULL (the old mapping is then unchanged). */
void *os_remap(void *p, size_t old_size, size_t new_size, void *fixed_at);
/* Moves the pages of [p, p+size) to [to, to+size), replacing what was mapped
 * there; [p, p+size) stays mapped and reads as zeros. Page-aligned. Returns
 * false when the kernel cannot (before Linux 5.7, or 5.13 for some
 * mappings); nothing has moved then. */
bool os_move_pages(void *p, size_t size, void *to);
/* Faults [p, p+size) in at once, ahead of writes that would fault it page
 * by page; page-aligned. A hint: it may do nothing. */
void os_populate(void *p, size_t size);
/* Writes len bytes to stderr, retrying short writes; never allocates. */
void os_write_stderr(const char *s, size_t len);
void os_write_fd(int fd, const char *s, size_t len);
size_t os_page_size(void);
/* Processors this process may run on (its affinity mask), at least 1. */
unsigned os_cpu_count(void);
/* size rounded up to whole pages (0 if that overflows) */
size_t os_page_round(size_t size);
uint64_t os_now_ms(void);
/* Minor page faults of the whole process so far (getrusage). */
uint64_t os_minor_faults(void);
/* Microseconds a first touch of a fresh anonymous page costs here, timed on
 * a few pages (the least of several batches, so preemption does not count):
 * 1.5 to 3 on one of our VMs, about 10 on another. */
double os_fault_us(void);
/* Mapping system calls (mmap, munmap, madvise, mremap) made so far. */
extern _Atomic uint64_t os_map_calls;
/* Resident pages of the process, from /proc/self/statm; 0 if unreadable. */
size_t os_resident_bytes(void);
/* The value of environment variable name, read without allocating, or NULL
 * (also before the C library has set up the environment). */
const char *os_getenv(const char *name);
/* Current thread's id, for messages. */
long os_thread_id(void);
void os_yield(void);
void os_sleep_ms(unsigned ms);
/* Sleeps while *word == expected, at most timeout_ms; wakes one sleeper. */
void os_futex_wait(_Atomic uint32_t *word, uint32_t expected, unsigned timeout_ms);
void os_futex_wake(_Atomic uint32_t *word);
/* Starts fn(arg) on a bare thread that shares the address space; see os.c
 * for what fn may do. Returns false when it cannot (or on an unknown CPU). */
bool os_spawn_background(int (*fn)(void *), void *arg);

/* A small formatting buffer on the stack, for messages and stats. */
typedef struct {
  char buf[512];
  size_t len;
  int fd;
} os_out_t;
void os_out_str(os_out_t *o, const char *s);
void os_out_uint(os_out_t *o, uint64_t v, int width);
void os_out_hex(os_out_t *o, uintptr_t v);
void os_out_flush(os_out_t *o);

#endif
