#include "core/parallel.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <thread>
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

// A thread bound to one CPU (as mpirun binds a rank) gets one kernel thread, not one per core.
TEST(Parallel, KernelThreadsFollowTheAffinityMask) {
  if (getenv("SPARROW_THREADS")) GTEST_SKIP() << "SPARROW_THREADS is set";
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(kernel_threads(), CPU_COUNT(&all));
  int one = -1;
  for (int c = 0; c < CPU_SETSIZE && one < 0; ++c)
    if (CPU_ISSET(c, &all)) one = c;
  int bound = 0;
  std::thread t([&] {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(one, &s);
    if (sched_setaffinity(0, sizeof s, &s) == 0) bound = kernel_threads();
  });
  t.join();
  EXPECT_EQ(bound, 1);
}

}  // namespace
}  // namespace sparrow
