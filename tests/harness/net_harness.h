// Builds N ranks' Nets in one process (ranks as threads) over a named backend.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/auth.h"
#include "transport/net.h"

namespace sparrow::test {

inline transport::Identity make_identity(int rank, uint64_t comm_id = 42, uint8_t secret_byte = 7) {
  transport::Identity id;
  id.comm_id = comm_id;
  id.rank = rank;
  id.secret.assign(16, secret_byte);
  return id;
}

inline std::vector<std::unique_ptr<transport::Net>> make_nets(const std::string& backend, int n, int streams = 2,
                                                              uint64_t comm_id = 42) {
  std::vector<std::unique_ptr<transport::Net>> nets;
  std::vector<std::string> addrs;
  for (int r = 0; r < n; ++r) {
    auto net = transport::Net::create(make_identity(r, comm_id), n, streams, backend);
    EXPECT_TRUE(net.ok()) << net.status().to_string();
    if (!net.ok()) return {};
    addrs.push_back(net.value()->address());
    nets.push_back(std::move(net.value()));
  }
  for (auto& net : nets) net->set_addresses(addrs);
  return nets;
}

inline transport::Deadline soon(double s = 20) { return transport::deadline_in(s); }

}  // namespace sparrow::test
