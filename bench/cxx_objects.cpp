/* cxx_objects.cpp - a C++ program's objects: the standard containers'
 * allocations through operator new and delete.
 *
 * Each thread keeps a std::map of `live` records. A record holds a
 * std::string name of 8-100 characters (the shorter ones fit the string's
 * own buffer, the rest take a block), a std::vector<uint32_t> grown by
 * push_back to 0-100 elements (each doubling is a new block, the old one
 * deleted sized), and a std::shared_ptr to a payload made with make_shared
 * that every fourth record shares with the one before it. An operation
 * erases a random record (its map node, string, vector and, when the last
 * owner goes, its payload) and inserts a new one under a new key. Sizes are
 * those of real C++ code: 16-512 B, most under 128 B, allocated and freed in
 * the order the containers choose.
 *
 * Every record carries a checksum of its contents, set when it is made and
 * checked before it is erased; the checksums of the records left at the end
 * give `digest`, the same for every allocator.
 *
 * Figure: ops_per_sec = records replaced per second, all threads together.
 *
 * usage: cxx_objects [threads=1] [live=4096] [ops=2000000] [seed=1]
 *                    (live and ops per thread)
 */
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"

struct payload_t {
  uint64_t a, b, c;
};

struct record_t {
  std::string name;
  std::vector<uint32_t> values;
  std::shared_ptr<payload_t> shared;
  uint64_t sum;
};

static struct {
  uint64_t threads, live, ops, seed;
} P;
static uint64_t digest_of_first; /* the first thread's, the same for every allocator */

static uint64_t record_sum(const record_t &r) {
  uint64_t h = r.name.size() * 0x9E3779B97F4A7C15ULL + (unsigned char)r.name[0] + (unsigned char)r.name.back();
  for (uint32_t v : r.values) h += v;
  return h ^ r.shared->a ^ (r.shared->b << 1) ^ (r.shared->c << 2);
}

static record_t make_record(uint64_t *rng, const std::shared_ptr<payload_t> &share) {
  record_t r;
  uint64_t x = rng_next(rng);
  size_t len = 8 + x % 93, n = (x >> 8) % 101;
  r.name.assign(len, (char)('a' + (x >> 16) % 26));
  r.name.back() = (char)('a' + (x >> 24) % 26);
  for (size_t i = 0; i < n; i++) r.values.push_back((uint32_t)(x >> 32) + (uint32_t)i);
  if (share && (x >> 40) % 4 == 0) {
    r.shared = share;
  } else {
    r.shared = std::make_shared<payload_t>(payload_t{x, x >> 7, x >> 13});
  }
  r.sum = record_sum(r);
  return r;
}

static void *run(void *arg) {
  worker_t *w = (worker_t *)arg;
  uint64_t rng = rng_seed(P.seed, (uint64_t)w->id), i = 0, next_key = 0;
  int ok = 1;
  {
    std::map<uint64_t, record_t> m;
    std::shared_ptr<payload_t> last;
    for (; next_key < P.live; next_key++) {
      auto it = m.emplace(next_key, make_record(&rng, last)).first;
      last = it->second.shared;
    }
    for (; ok && i < P.ops; i++) {
      /* the first record at or after a random key of the last 2 live made
       * (past the end: the oldest, so that old records die too) */
      uint64_t lo = next_key > P.live * 2 ? next_key - P.live * 2 : 0;
      auto it = m.lower_bound(lo + rng_next(&rng) % (next_key - lo));
      if (it == m.end()) it = m.begin();
      ok &= record_sum(it->second) == it->second.sum;
      m.erase(it);
      auto in = m.emplace(next_key++, make_record(&rng, last)).first;
      last = in->second.shared;
    }
    uint64_t digest = 0;
    for (auto &[k, r] : m) {
      ok &= record_sum(r) == r.sum;
      digest = digest * 31 + r.sum + k;
    }
    if (w->id == 0) digest_of_first = digest;
  }
  w->ops = i;
  w->failed = !ok;
  return NULL;
}

int main(int argc, char **argv) {
  bench_params(argc, argv, "threads=1 live=4096 ops=2000000 seed=1", &P.threads, &P.live, &P.ops, &P.seed);
  arg_need(P.threads >= 1 && P.live >= 1, "threads, live >= 1");
  uint64_t ops;
  double elapsed;
  int ok = run_workers((int)P.threads, run, &ops, &elapsed);
  printf("bench=cxx_objects threads=%" PRIu64 " live=%" PRIu64 " ops_per_thread=%" PRIu64
         " seconds=%.3f ops=%" PRIu64 " ops_per_sec=%.0f digest=%016" PRIx64,
         P.threads, P.live, P.ops, elapsed, ops, ops / elapsed, digest_of_first);
  return bench_finish(ok);
}
