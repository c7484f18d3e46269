/* The OS layer: every system call hakmem makes goes through these functions,
 * and this file makes nothing else. None of them allocates, touches errno or
 * takes a lock; all are safe to call with hakmem's locks held.
 *
 * Memory is returned to the OS in pieces of at most 2 MiB where it may be
 * resident (os_unmap, os_purge): see os.c for why. */
#ifndef HAKMEM_OS_H
#define HAKMEM_OS_H

/* Sanitizers that track memory want to see every mapping change through the
 * C library's wrappers. */
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

/* Read-write anonymous memory, zeroed, reserved lazily (MAP_NORESERVE):
 * anywhere, or NULL when the OS refuses. */
void *os_map(size_t size);
/* The same at exactly addr (page-aligned), never replacing a mapping: addr,
 * or NULL when anything is mapped there (*taken set) or the OS refuses (out
 * of memory or address space, an old kernel that takes addr for a hint). */
void *os_map_at(void *addr, size_t size, bool *taken);
/* The same aligned to align (a power of two, at least the page size). */
void *os_map_aligned(size_t size, size_t align);
/* Unmaps [p, p+size); page-aligned. */
void os_unmap(void *p, size_t size);
/* The same for a range that holds no page (never touched, or its pages
 * moved out): one call whatever its size. */
void os_unmap_untouched(void *p, size_t size);
/* Returns [p, p+size) to the OS; the range stays mapped and reads back as
 * zeros. Page-aligned. Returns the bytes purged (0 when the call failed). */
size_t os_purge(void *p, size_t size);
/* Zeroes [p, p+size) (page-aligned p), memory that may hold old data: its
 * resident pages with memset, its absent ones by purging them (os.c says
 * why). */
void os_zero(void *p, size_t size);
/* Faults [p, p+size) in at once, ahead of writes that would fault it page
 * by page; page-aligned. A hint: it may do nothing. */
void os_populate(void *p, size_t size);
/* Keeps transparent huge pages off [p, p+size) (page-aligned), memory that
 * hakmem touches a page at a time: where THP is "always", the first touch
 * of a 2 MiB stretch would make all of it resident. A hint: it may do
 * nothing. */
void os_no_huge_pages(void *p, size_t size);
/* Makes [p, p+size) inaccessible (a guard); page-aligned. */
bool os_protect_none(void *p, size_t size);
/* Moves the pages of [p, p+size) to [to, to+size), replacing what was mapped
 * there, whatever mappings the range spans; [p, p+size) stays mapped and
 * reads as zeros. Returns false, nothing moved, when the kernel cannot
 * (before Linux 5.7, or 5.13 for some mappings). */
bool os_move_pages(void *p, size_t size, void *to);

/* System calls about memory made so far, by kind (statistics, and the
 * learner's price of time in the OS). */
enum { OS_MMAP, OS_MUNMAP, OS_MADVISE, OS_MREMAP, OS_MPROTECT, OS_MINCORE, OS_CALL_KINDS };
extern _Atomic uint64_t os_calls[OS_CALL_KINDS];
uint64_t os_calls_total(void);

/* The page size, and its log2 (read once). */
extern size_t os_page;
extern unsigned os_page_shift;
size_t os_page_init(void);
static inline size_t os_page_size(void) { return __builtin_expect(os_page != 0, 1) ? os_page : os_page_init(); }
static inline unsigned os_page_log2(void) { return os_page_size(), os_page_shift; }
/* size rounded up to whole pages (0 if that overflows). */
static inline size_t os_page_round(size_t size) {
  size_t page = os_page_size();
  return (size + page - 1) & ~(page - 1);
}
/* Processors this process may run on (its affinity mask), at least 1. */
unsigned os_cpu_count(void);
/* 64 random bits from the kernel (or, failing that, from the clock). */
uint64_t os_random_seed(void);

uint64_t os_now_ms(void);
uint64_t os_now_ns(void);
/* Minor page faults of the whole process so far. */
uint64_t os_minor_faults(void);
void os_yield(void);
void os_sleep_ms(unsigned ms);

/* Writes len bytes to fd, retrying short writes. */
void os_write_fd(int fd, const char *s, size_t len);
/* Reads up to len bytes of the file at path into buf (opened and closed
 * here); returns the bytes read, or -1. */
long os_read_file(const char *path, char *buf, size_t len);
/* Opens path for writing (created or truncated, mode 0644), or for reading;
 * fd or -1. */
int os_open_write(const char *path);
int os_open_read(const char *path);
/* Reads up to len bytes; the bytes read, 0 at the end, -1 on an error. */
long os_read(int fd, char *buf, size_t len);
void os_close(int fd);
/* A copy of fd at min or above, closed on exec; -1 when it cannot. */
int os_dup(int fd, int min);
long os_getpid(void);
/* Device and inode of the file fd is open on, as one number (0 on error). */
uint64_t os_file_id(int fd);
/* Resident bytes of [p, p+size) (mincore); page-aligned p. os_resident
 * for the statistics; os_resident_look for the allocator's own decisions,
 * which count among its system calls. */
size_t os_resident(const void *p, size_t size);
size_t os_resident_look(const void *p, size_t size);

#endif
