/* The standard names. An alias must sit in the translation unit that defines
 * its target, so this file is alloc.c plus the aliases; the drop-in libraries
 * build it in alloc.c's place. The aliases cost nothing: malloc *is*
 * hak_malloc, without a jump between them. */
#include "alloc.c"

#define ALIAS(name) __attribute__((alias(#name), visibility("default"), used))

void *malloc(size_t size) ALIAS(hak_malloc);
void *calloc(size_t count, size_t size) ALIAS(hak_calloc);
void *realloc(void *p, size_t size) ALIAS(hak_realloc);
void *reallocarray(void *p, size_t count, size_t size) ALIAS(hak_reallocarray);
void free(void *p) ALIAS(hak_free);
void cfree(void *p) ALIAS(hak_free);
void free_sized(void *p, size_t size) ALIAS(hak_free_sized);
void free_aligned_sized(void *p, size_t align, size_t size) ALIAS(hak_free_aligned_sized);
int posix_memalign(void **out, size_t align, size_t size) ALIAS(hak_posix_memalign);
void *aligned_alloc(size_t align, size_t size) ALIAS(hak_aligned_alloc);
void *memalign(size_t align, size_t size) ALIAS(hak_memalign);
void *valloc(size_t size) ALIAS(hak_valloc);
void *pvalloc(size_t size) ALIAS(hak_pvalloc);
size_t malloc_usable_size(void *p) ALIAS(hak_malloc_usable_size);
int malloc_trim(size_t pad) ALIAS(hak_malloc_trim);
int mallopt(int param, int value) ALIAS(hak_mallopt);
void malloc_stats(void) ALIAS(hak_malloc_stats);
struct mallinfo2 mallinfo2(void) ALIAS(hak_mallinfo2);
struct mallinfo mallinfo(void) ALIAS(hak_mallinfo);

/* glibc's own names for its allocator, which some libraries call directly: a
 * block that went out through one name and came back through the other would
 * otherwise cross allocators. */
void *__libc_malloc(size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(1) ALIAS(hak_malloc);
void *__libc_calloc(size_t count, size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(1, 2) ALIAS(hak_calloc);
void *__libc_realloc(void *p, size_t size) HAK_ALLOC_SIZE(2) ALIAS(hak_realloc);
void __libc_free(void *p) ALIAS(hak_free);
void *__libc_memalign(size_t align, size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(2) ALIAS(hak_memalign);
void *__libc_valloc(size_t size) HAK_MALLOC_ATTR HAK_ALLOC_SIZE(1) ALIAS(hak_valloc);
void *__libc_pvalloc(size_t size) HAK_MALLOC_ATTR ALIAS(hak_pvalloc);
int __libc_mallopt(int param, int value) ALIAS(hak_mallopt);
struct mallinfo __libc_mallinfo(void) ALIAS(hak_mallinfo);
