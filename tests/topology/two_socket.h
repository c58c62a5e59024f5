// The 2-socket hosts the topology tests use, with the process's CPU mask the test says:
// tests/topology/data/two_socket.xml (node 0 with CPUs 0-3, NIC ens1f0 and a GPU, node 1 with CPUs 4-7
// and NIC ens2f0, NIC eth9 under the machine) and tests/topology/data/gpu_switch.xml (a GPU server
// whose GPUs and NICs share PCIe switches; its header comment draws it).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topology/host.h"

namespace sparrow::topo::fixtures {

inline const std::string kTwoSocket = std::string(SPARROW_SOURCE_DIR) + "/tests/topology/data/two_socket.xml";
inline const std::string kGpuSwitch = std::string(SPARROW_SOURCE_DIR) + "/tests/topology/data/gpu_switch.xml";

#if SPARROW_HAVE_HWLOC
inline HostTopology host_from(const std::string& xml, std::vector<int> allowed) {
  auto t = discover(xml);
  EXPECT_TRUE(t.ok()) << t.status().message();
  HostTopology h = t.ok() ? t.value() : HostTopology{};
  h.allowed = std::move(allowed);
  return h;
}
inline HostTopology two_socket(std::vector<int> allowed) { return host_from(kTwoSocket, std::move(allowed)); }
inline HostTopology gpu_switch(std::vector<int> allowed) { return host_from(kGpuSwitch, std::move(allowed)); }
#endif

}  // namespace sparrow::topo::fixtures
