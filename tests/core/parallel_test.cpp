#include "core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace sparrow {
namespace {

TEST(Parallel, EveryIndexExactlyOnce) {
  for (int threads : {1, 2, 7}) {
    std::vector<std::atomic<int>> hits(1000);
    std::atomic<int> bad_worker{0};
    parallel_for(hits.size(), threads, [&](size_t i, int w) {
      hits[i]++;
      if (w < 0 || w >= threads) bad_worker++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    EXPECT_EQ(bad_worker.load(), 0);
  }
}

TEST(Parallel, EmptyRangeCallsNothing) {
  int calls = 0;
  parallel_for(0, 4, [&](size_t, int) { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_GE(kernel_threads(), 1);
}

}  // namespace
}  // namespace sparrow
