// The 2-socket host the topology tests use (tests/topology/data/two_socket.xml: node 0 with CPUs 0-3
// and NIC ens1f0, node 1 with CPUs 4-7 and NIC ens2f0, NIC eth9 under the machine), with the
// process's CPU mask the test says.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topology/host.h"

namespace sparrow::topo::fixtures {

inline const std::string kTwoSocket = std::string(SPARROW_SOURCE_DIR) + "/tests/topology/data/two_socket.xml";

#if SPARROW_HAVE_HWLOC
inline HostTopology two_socket(std::vector<int> allowed) {
  auto t = discover(kTwoSocket);
  EXPECT_TRUE(t.ok()) << t.status().message();
  HostTopology h = t.ok() ? t.value() : HostTopology{};
  h.allowed = std::move(allowed);
  return h;
}
#endif

}  // namespace sparrow::topo::fixtures
