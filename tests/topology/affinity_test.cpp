// SPARROW_CPU_AFFINITY on a 2-socket host (hwloc XML): the CPUs local to the chosen NIC within the
// process's mask, a restricted mask, a mask with no NIC-local CPU, no NIC locality, none, a list;
// and a communicator's threads bound by it.
#include "topology/affinity.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/affinity.h"
#include "core/params.h"
#include "topology/two_socket.h"
#include "harness/comm_harness.h"

namespace sparrow::topo {
namespace {

using fixtures::two_socket;

const std::vector<transport::net::Interface> kUp = {{"ens1f0", "10.0.0.1", false}, {"ens2f0", "10.1.0.1", false}};

#if SPARROW_HAVE_HWLOC

TEST(ThreadCpus, AutoTakesTheNicsLocalCpusWithinTheMask) {
  const std::vector<int> t = {0, 1, 2, 3, 4, 5, 6, 7};
  auto nic = choose_nic(two_socket({0, 1}), kUp);  // a thread on node 0: ens1f0, local CPUs 0-3
  ASSERT_TRUE(nic.has_value());
  auto c = choose_thread_cpus(t, nic, "auto");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(c->why.find("local to ens1f0"), std::string::npos) << c->why;
  EXPECT_EQ(c->numa, 0) << "buffers on the NIC's node";
  EXPECT_NE(c->why.find("buffers on NUMA node 0"), std::string::npos) << c->why;
  auto far = choose_thread_cpus(t, choose_nic(two_socket({4, 5}), kUp), "auto");  // a thread on node 1: ens2f0
  ASSERT_TRUE(far.ok());
  EXPECT_EQ(far->cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(far->numa, 1);
  // A restricted inherited mask (mpirun --bind-to, taskset) wins: only its NIC-local part.
  c = choose_thread_cpus({2, 3, 4, 5}, nic, "auto");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cpus, (std::vector<int>{2, 3}));
  // A cgroup-like mask with no CPU local to the NIC: left unbound, and said why.
  c = choose_thread_cpus({4, 5}, nic, "auto");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cpus.empty());
  EXPECT_EQ(c->numa, -1) << "no binding, no preferred node";
  EXPECT_NE(c->why.find("outside this process's mask (4-5)"), std::string::npos) << c->why;
}
#endif

TEST(ThreadCpus, NoLocalityNoneAndListsAsTheUserWrites) {
  const std::vector<int> t = {0, 1, 2, 3, 4, 5, 6, 7};
  auto c = choose_thread_cpus(t, std::nullopt, "auto");  // a VM whose NIC hwloc does not list
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cpus.empty());
  EXPECT_NE(c->why.find("no NIC locality is known"), std::string::npos) << c->why;
  c = choose_thread_cpus(t, std::nullopt, "none");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cpus.empty());
  c = choose_thread_cpus(t, std::nullopt, "1,3-4,9");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cpus, (std::vector<int>{1, 3, 4})) << "CPU 9 is not the process's: left out";
  for (const char* bad : {"9-12", "x", "3-1"}) {
    c = choose_thread_cpus(t, std::nullopt, bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
    EXPECT_NE(c.status().message().find("SPARROW_CPU_AFFINITY"), std::string::npos) << c.status().message();
  }
}

// The CPUs each thread of this process may run on ("Cpus_allowed_list" per task).
std::vector<std::string> threads_cpus() {
  std::vector<std::string> out;
  DIR* d = opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) out.push_back(line.substr(line.find_first_not_of(" \t", 18)));
  }
  closedir(d);
  return out;
}

TEST(ThreadCpus, ACommunicatorsProgressThreadsRunOnTheListedCpus) {
  ASSERT_TRUE(params::set_override("CPU_AFFINITY", "0").ok());
  const auto before = threads_cpus();
  {
    test::Comms comms(2);
    auto during = threads_cpus();
    const auto bound = std::count(during.begin(), during.end(), "0") - std::count(before.begin(), before.end(), "0");
    EXPECT_GE(bound, 2) << "each rank's TCP progress thread on CPU 0";
    EXPECT_EQ(affinity::cpus(), std::vector<int>{0});
  }
  ASSERT_TRUE(params::set_override("CPU_AFFINITY", "4096").ok());
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  sparrowComm_t c = nullptr;
  EXPECT_EQ(sparrowCommInitRank(&c, 1, id, 0), sparrowInvalidArgument) << "a CPU list naming no usable CPU fails init";
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("SPARROW_CPU_AFFINITY"), std::string::npos)
      << sparrowGetLastError(nullptr);
  if (c) sparrowCommDestroy(c);
  params::clear_overrides();
  affinity::set_cpus({});
}

}  // namespace
}  // namespace sparrow::topo
