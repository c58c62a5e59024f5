// sparrow's own threads bound to the CPUs chosen for them: the worker pool's threads (not the
// caller's), the pool's size, and CPU lists as users write them.
#include "core/affinity.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/big_alloc.h"
#include "core/parallel.h"

namespace sparrow::affinity {
namespace {

// The calling thread's CPUs (allowed_cpus() reads this thread's mask).
std::vector<int> this_threads_cpus() { return allowed_cpus(); }

TEST(Affinity, CpuListsAsUsersWriteThem) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11").value(), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5,1,1-2").value(), (std::vector<int>{1, 2, 5}));
  for (const char* bad : {"", "a", "1-", "-1", "3-1", "1,,2", "1.5", "99999999"}) {
    auto r = parse_cpu_list(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(Affinity, ThePoolsThreadsRunOnTheChosenCpusAndTheCallerStaysAsItWas) {
  const std::vector<int> mine = this_threads_cpus();
  ASSERT_FALSE(mine.empty());
  set_cpus({mine.back()});
  EXPECT_EQ(kernel_threads(), 1) << "the pool is sized by the chosen CPUs";
  std::vector<std::vector<int>> seen(2);
  auto both_workers = [&] {  // two items, each held until the other started: one per thread
    std::atomic<int> arrived{0};
    std::mutex mu;
    parallel_for(2, 2, [&](size_t, int w) {
      auto c = this_threads_cpus();
      {
        std::lock_guard<std::mutex> lk(mu);
        seen[size_t(w)] = c;
      }
      arrived++;
      for (int i = 0; i < 5000 && arrived < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  };
  both_workers();
  EXPECT_EQ(seen[1], std::vector<int>{mine.back()}) << "a worker the pool started is bound";
  EXPECT_EQ(this_threads_cpus(), mine) << "the caller's thread is never bound";
  EXPECT_EQ(seen[0], mine);
  set_cpus({});
  EXPECT_EQ(kernel_threads(), int(mine.size()));
  both_workers();
  EXPECT_EQ(seen[1], mine) << "unbound again";
}

// Large buffers prefer the chosen NUMA node: the kernel's policy for their pages says so (this host's
// node 0; a node the host does not have is refused and leaves the default policy).
TEST(Affinity, LargeBuffersPreferTheChosenNumaNode) {
  auto policy_of = [](void* p, int* node) {
    int mode = -1;
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
    EXPECT_EQ(syscall(SYS_get_mempolicy, &mode, mask, 1024ul, p, unsigned(MPOL_F_ADDR)), 0) << strerror(errno);
    *node = (mask[0] & 1) ? 0 : -1;
    return mode;
  };
  ASSERT_TRUE(set_memory_node(0));
  {
    BigBytes b(size_t(8) << 20);  // mmap'd (>= 4 MiB)
    int node = -1;
    EXPECT_EQ(policy_of(b.data(), &node), MPOL_PREFERRED);
    EXPECT_EQ(node, 0);
  }
  EXPECT_FALSE(set_memory_node(4000)) << "no such node here";
  EXPECT_EQ(memory_node(), -1);
  {
    BigBytes b(size_t(8) << 20);
    int node = -1;
    EXPECT_EQ(policy_of(b.data(), &node), MPOL_DEFAULT);
  }
  EXPECT_TRUE(set_memory_node(-1));
}

}  // namespace
}  // namespace sparrow::affinity
