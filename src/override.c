/* The standard names. An alias must sit in the translation unit that defines
 * its target, so this file is alloc.c plus the aliases; the drop-in libraries
 * build it in alloc.c's place. The aliases cost nothing: malloc *is*
 * hak_malloc, without a jump between them. */
#include "alloc.c"

#include <dlfcn.h>
#include <stdlib.h>

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

/* ---- C++ operators ---------------------------------------------------------- */

/* new and delete under their Itanium ABI names (size_t is `m`): without them
 * each C++ allocation passes through the C++ runtime's operator, one more
 * call and a PLT jump each way. C cannot throw, so a failed new is handed to
 * the next definition of the same operator, the C++ runtime's: it calls
 * malloc again, runs the new-handler, and throws std::bad_alloc (or returns
 * NULL for the nothrow forms). Exceptions unwind through these frames on
 * their unwind tables (-funwind-tables). */
typedef enum { NEW_PLAIN, NEW_NOTHROW, NEW_ALIGNED, NEW_ALIGNED_NOTHROW } new_form_t;

static hak_noinline void *new_failed(const char *name, new_form_t form, size_t size, size_t align, const void *nt) {
  union {
    void *sym;
    void *(*plain)(size_t);
    void *(*nothrow)(size_t, const void *);
    void *(*aligned)(size_t, size_t);
    void *(*aligned_nothrow)(size_t, size_t, const void *);
  } next = {.sym = dlsym(RTLD_NEXT, name)};
  if (next.sym == NULL) { /* no C++ runtime after this library (a static link) */
    if (form == NEW_NOTHROW || form == NEW_ALIGNED_NOTHROW) return NULL;
    out_t o = OUT_FD(2);
    out_str(&o, "hakmem: ");
    out_str(&o, name);
    out_str(&o, ": out of memory, and no C++ runtime to throw std::bad_alloc\n");
    out_flush(&o);
    abort();
  }
  switch (form) {
  case NEW_PLAIN: return next.plain(size);
  case NEW_NOTHROW: return next.nothrow(size, nt);
  case NEW_ALIGNED: return next.aligned(size, align);
  default: return next.aligned_nothrow(size, align, nt);
  }
}

/* The slow paths of new: malloc's, then the C++ runtime's where it failed
 * (new[] fails as new does: the runtime's own new[] calls new). */
static hak_noinline void *new_slow(size_t size, heap_t *heap, size_t align, bool zero) {
  void *p = alloc_slow(size, heap, align, zero);
  return p ? p : new_failed("_Znwm", NEW_PLAIN, size, 0, NULL);
}

static const char nothrow_tag; /* std::nothrow_t is empty: its address is all a call passes */
static hak_noinline void *new_nothrow_slow(size_t size, heap_t *heap, size_t align, bool zero) {
  void *p = alloc_slow(size, heap, align, zero);
  return p ? p : new_failed("_ZnwmRKSt9nothrow_t", NEW_NOTHROW, size, 0, &nothrow_tag);
}

/* An alignment that is not a power of two is undefined behaviour; the C++
 * runtime's operator answers it. name: the operator's own (__func__), for
 * the next definition of it. */
hak_inline void *new_aligned(size_t size, size_t align, const char *name, new_form_t form, const void *nt) {
  void *p = is_pow2(align) ? alloc_aligned(size, align) : NULL;
  if (likely(p != NULL)) return p;
  return new_failed(name, form, size, align, nt);
}

#define NEW_API __attribute__((visibility("default"), used))
NEW_API HAK_HOT void *_Znwm(size_t n) { return alloc_fast(n, new_slow); }
NEW_API HAK_HOT void *_Znam(size_t n) { return alloc_fast(n, new_slow); }
NEW_API void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt) { return alloc_fast(n, new_nothrow_slow); }
NEW_API void *_ZnamRKSt9nothrow_t(size_t n, const void *nt) { return alloc_fast(n, new_nothrow_slow); }
NEW_API void *_ZnwmSt11align_val_t(size_t n, size_t a) {
  return new_aligned(n, a, __func__, NEW_ALIGNED, NULL);
}
NEW_API void *_ZnamSt11align_val_t(size_t n, size_t a) {
  return new_aligned(n, a, __func__, NEW_ALIGNED, NULL);
}
NEW_API void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *nt) {
  return new_aligned(n, a, __func__, NEW_ALIGNED_NOTHROW, nt);
}
NEW_API void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *nt) {
  return new_aligned(n, a, __func__, NEW_ALIGNED_NOTHROW, nt);
}

/* delete: free, whatever else the form passes (a size, an alignment, a
 * nothrow tag: all in registers free's aliases ignore). */
void _ZdlPv(void *p) ALIAS(hak_free);
void _ZdaPv(void *p) ALIAS(hak_free);
void _ZdlPvm(void *p, size_t n) ALIAS(hak_free_sized);
void _ZdaPvm(void *p, size_t n) ALIAS(hak_free_sized);
void _ZdlPvSt11align_val_t(void *p, size_t a) ALIAS(hak_free_sized);
void _ZdaPvSt11align_val_t(void *p, size_t a) ALIAS(hak_free_sized);
void _ZdlPvRKSt9nothrow_t(void *p, size_t nt) ALIAS(hak_free_sized);
void _ZdaPvRKSt9nothrow_t(void *p, size_t nt) ALIAS(hak_free_sized);
void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) ALIAS(hak_free_aligned_sized);
void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) ALIAS(hak_free_aligned_sized);
void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, size_t nt) ALIAS(hak_free_aligned_sized);
void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, size_t nt) ALIAS(hak_free_aligned_sized);
