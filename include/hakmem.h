/* hakmem: a general-purpose memory allocator.
 *
 * Every standard allocation function is also available under a hak_ prefix,
 * so a program (or a test under ThreadSanitizer) can call hakmem explicitly
 * while the standard names stay with the C library. Linking libhakmem (or
 * preloading it) additionally replaces the standard names themselves.
 */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HAKMEM_VERSION_MAJOR 0
#define HAKMEM_VERSION_MINOR 1
#define HAKMEM_VERSION_PATCH 0

#if defined(__GNUC__)
#define HAK_MALLOC_ATTR __attribute__((malloc))
#define HAK_ALLOC_SIZE(...) __attribute__((alloc_size(__VA_ARGS__)))
#else
#define HAK_MALLOC_ATTR
#define HAK_ALLOC_SIZE(...)
#endif

/* The malloc family, with the C library's semantics and errno values. */
void *hak_malloc(size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(1);
void *hak_calloc(size_t count, size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(1, 2);
void *hak_realloc(void *p, size_t size) HAK_ALLOC_SIZE(2);
void *hak_reallocarray(void *p, size_t count, size_t size) HAK_ALLOC_SIZE(2, 3);
void hak_free(void *p);
void hak_free_sized(void *p, size_t size);
void hak_free_aligned_sized(void *p, size_t alignment, size_t size);
int hak_posix_memalign(void **out, size_t alignment, size_t size);
void *hak_aligned_alloc(size_t alignment, size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(2);
void *hak_memalign(size_t alignment, size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(2);
void *hak_valloc(size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(1);
void *hak_pvalloc(size_t size) HAK_MALLOC_ATTR;
size_t hak_malloc_usable_size(const void *p);

/* glibc extras. */
struct mallinfo;
struct mallinfo2;
int hak_malloc_trim(size_t pad);
int hak_mallopt(int param, int value);
void hak_malloc_stats(void);
struct mallinfo2 hak_mallinfo2(void);
/* mallinfo2's figures in glibc's older int fields, each at most INT_MAX. */
struct mallinfo hak_mallinfo(void);

/* hakmem's own. */
/* Nonzero when p points into memory hakmem manages (any block, live or not). */
int hak_owns(const void *p);
/* Writes the statistics report (as HAKMEM_STATS=1 prints at exit) to fd. */
void hak_stats_print(int fd);
/* Writes the same report as one JSON object (as HAKMEM_STATS=json prints at
 * exit) into buf, cut short and NUL-terminated if it does not fit; returns its
 * full length, as snprintf does. Its "resident" object says where each byte
 * of the process's resident set is. */
size_t hak_stats_json(char *buf, size_t len);
/* Writes the heap profile (HAKMEM_PROFILE) of the blocks live now to path,
 * and its collapsed stacks to path.folded; path NULL: HAKMEM_PROFILE's.
 * Returns 0, or an errno value: EINVAL when profiling is off. */
int hak_profile_dump(const char *path);
/* Hands the calling thread's heap back now, as thread exit does. */
void hak_thread_done(void);
/* Writes every HAKMEM_* option to fd, one a line: its value in effect, its
 * default and its meaning. */
void hak_options_print(int fd);

#ifdef __cplusplus
}
#endif

#endif
