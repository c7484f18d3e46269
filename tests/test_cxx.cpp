/* C++ operators new and delete under libhakmem: every form hands out
 * hakmem's blocks, the sized and aligned deletes take them back, and a
 * failed new keeps the language's contract (the new-handler runs, then
 * std::bad_alloc, or nullptr for the nothrow forms). */
#include <dlfcn.h>

#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "testutil.h"

/* Past any heap: malloc fails at once with ENOMEM, no memory touched. */
static const size_t TOO_BIG = (size_t)1 << 62;

static const size_t sizes[] = {0, 1, 8, 24, 100, 1000, 8 * KiB, 33 * KiB, 100 * KiB, 300 * KiB, 5 * MiB};

static void check_block(void *p, size_t n, uint64_t id) {
  CHECKF(p != NULL, "size %zu", n);
  CHECKF(hak_owns(p), "%p (size %zu) is not hakmem's", p, n);
  CHECKF(malloc_usable_size(p) >= n, "usable %zu < %zu", malloc_usable_size(p), n);
  tu_fill(p, 0, n, id);
  CHECK_PAT(p, n, id);
}

/* Every form the program calls is libhakmem's, not the C++ runtime's
 * (which would reach hakmem's malloc through one more call). */
static void test_operators_are_hakmem(void) {
  static const char *const names[] = {
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
    "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t"};
  for (const char *name : names) {
    void *f = dlsym(RTLD_DEFAULT, name);
    Dl_info info;
    CHECKF(f && dladdr(f, &info) && info.dli_fname && strstr(info.dli_fname, "libhakmem"), "%s comes from %s", name,
           f && dladdr(f, &info) && info.dli_fname ? info.dli_fname : "nowhere");
  }
}

static void test_new_delete(void) {
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t n = sizes[i];
    void *a = tu_launder(::operator new(n));
    check_block(a, n, i);
    char *b = (char *)tu_launder(new char[n + 1]);
    check_block(b, n + 1, i + 100);
    void *c = tu_launder(::operator new(n, std::nothrow));
    check_block(c, n, i + 200);
    void *d = tu_launder(::operator new[](n, std::nothrow));
    check_block(d, n, i + 300);
    CHECK_PAT(a, n, i);
    ::operator delete(a);
    delete[] b;
    ::operator delete(c, std::nothrow);
    ::operator delete[](d, std::nothrow);
  }
}

static void test_sized_delete(void) {
  /* many rounds, so that a block taken back wrongly would come out twice */
  struct live_t {
    void *p;
    size_t n;
    uint64_t id;
  };
  std::vector<live_t> live;
  uint64_t seed = 7;
  for (uint64_t round = 0; round < 20000; round++) {
    size_t n = 1 + tu_xorshift(&seed) % (round % 100 == 0 ? 200 * KiB : 2 * KiB);
    void *p = tu_launder(round & 1 ? ::operator new(n) : ::operator new[](n));
    check_block(p, n, round);
    live.push_back({p, n, round});
    if (live.size() > 64) {
      size_t k = tu_xorshift(&seed) % live.size();
      live_t b = live[k];
      CHECK_PAT(b.p, b.n, b.id);
      live[k] = live.back();
      live.pop_back();
      if (b.id & 1) ::operator delete(b.p, b.n);
      else ::operator delete[](b.p, b.n);
    }
  }
  for (live_t b : live) {
    CHECK_PAT(b.p, b.n, b.id);
    ::operator delete(b.p, b.n);
  }
}

static void test_aligned(void) {
  static const size_t aligns[] = {16, 64, 256, 4096, 64 * KiB, 2 * MiB};
  for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++)
    for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
      size_t a = aligns[i], n = sizes[j];
      std::align_val_t al = std::align_val_t(a);
      void *p = tu_launder(::operator new(n, al));
      void *q = tu_launder(::operator new[](n, al, std::nothrow));
      CHECKF((uintptr_t)p % a == 0 && (uintptr_t)q % a == 0, "align %zu size %zu: %p %p", a, n, p, q);
      check_block(p, n, j);
      check_block(q, n, j + 1);
      if (j % 2) {
        ::operator delete(p, n, al);
        ::operator delete[](q, al, std::nothrow);
      } else {
        ::operator delete(p, al);
        ::operator delete[](q, n, al);
      }
    }
}

static void test_bad_alloc(void) {
  bool thrown = false;
  try {
    tu_launder(::operator new(TOO_BIG));
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  CHECK(thrown);
  thrown = false;
  try {
    tu_launder(::operator new[](TOO_BIG, std::align_val_t(64)));
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  CHECK(thrown);
  CHECK(tu_launder(::operator new(TOO_BIG, std::nothrow)) == NULL);
  CHECK(tu_launder(::operator new[](TOO_BIG, std::align_val_t(4096), std::nothrow)) == NULL);
  void *p = tu_launder(::operator new(100)); /* the heap is fine after */
  check_block(p, 100, 1);
  ::operator delete(p);
}

static int handler_calls;
static void handler(void) {
  if (++handler_calls == 3) std::set_new_handler(nullptr); /* then bad_alloc, or nullptr */
}

static void test_new_handler(void) {
  std::set_new_handler(handler);
  bool thrown = false;
  try {
    tu_launder(new char[TOO_BIG]);
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  CHECKF(thrown && handler_calls == 3, "thrown %d, handler called %d times", thrown, handler_calls);
  handler_calls = 0;
  std::set_new_handler(handler);
  CHECK(tu_launder(::operator new(TOO_BIG, std::nothrow)) == NULL);
  CHECKF(handler_calls == 3, "nothrow: handler called %d times", handler_calls);
}

/* The standard library's containers, and blocks deleted by another thread. */
static void test_containers(void) {
  std::map<std::string, std::vector<int>> m;
  for (int i = 0; i < 20000; i++) {
    std::string k = "key number " + std::to_string(i * 7919 % 20000);
    m[k].assign((size_t)(i % 50), i);
  }
  for (auto &[k, v] : m) {
    CHECK(hak_owns(v.data()) || v.empty());
    CHECK(k.size() < 16 || hak_owns(k.data()));
  }
  std::vector<std::string *> out;
  for (int i = 0; i < 10000; i++) out.push_back(new std::string(100 + (size_t)i % 300, (char)('a' + i % 26)));
  std::thread t([&out] {
    for (size_t i = 0; i < out.size(); i++) {
      CHECK(out[i]->size() == 100 + i % 300 && (*out[i])[99] == (char)('a' + i % 26));
      delete out[i];
    }
  });
  t.join();
  m.clear();
}

static const tu_case_t cases[] = {
  {"operators_are_hakmem", test_operators_are_hakmem, 0},
  {"new_delete", test_new_delete, 0},
  {"sized_delete", test_sized_delete, 0},
  {"aligned", test_aligned, 0},
  {"bad_alloc", test_bad_alloc, 0},
  {"new_handler", test_new_handler, 0},
  {"containers", test_containers, 0},
};

int main(int argc, char **argv) { return tu_main(argc, argv, cases, sizeof cases / sizeof *cases, ""); }
