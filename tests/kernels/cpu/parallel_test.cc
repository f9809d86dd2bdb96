#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace qmm {
namespace {

// Every index in [0, n) is visited exactly once, in chunks no smaller than asked (but the
// last).
void ExpectCoversOnce(int64_t n, int64_t min_chunk, int threads) {
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int64_t> small_chunks{0};
  ParallelFor(n, min_chunk, threads, [&](int64_t begin, int64_t end) {
    ASSERT_LT(begin, end);
    if (end - begin < min_chunk && end != n) ++small_chunks;
    for (int64_t i = begin; i < end; ++i) hits[i]++;
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  EXPECT_EQ(small_chunks.load(), 0);
}

TEST(ParallelForTest, CoversEveryIndexOnce) {
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 4099}) {
    for (int64_t min_chunk : {1, 3, 100}) {
      for (int threads : {1, 2, 3, 8, 0}) ExpectCoversOnce(n, min_chunk, threads);
    }
  }
}

TEST(ParallelForTest, EmptyRangeCallsNothing) {
  bool called = false;
  ParallelFor(0, 1, 4, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ParallelForTest, ConcurrentAndNestedCallsComplete) {
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 6; ++t) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        ParallelFor(40, 1, 4, [&](int64_t begin, int64_t end) {
          // A nested call must not wait for pool threads that are all busy.
          ParallelFor(end - begin, 1, 4, [&](int64_t b, int64_t e) { total += e - b; });
        });
      }
    });
  }
  for (std::thread& c : callers) c.join();
  EXPECT_EQ(total.load(), 6 * 50 * 40);
}

}  // namespace
}  // namespace qmm
