// N ranks of a communicator as threads in one process, through the C API.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "sparrow/sparrow.h"

namespace sparrow::test {

struct Comms {
  std::vector<sparrowComm_t> c;
  explicit Comms(int n) : c(n, nullptr) {
    sparrowUniqueId id;
    EXPECT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
    std::vector<sparrowResult_t> rc(n);
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { rc[r] = sparrowCommInitRank(&c[r], n, id, r); });
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(rc[r], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(nullptr);
  }
  ~Comms() {
    for (auto x : c)
      if (x) sparrowCommDestroy(x);
  }
  int size() const { return int(c.size()); }
  // Runs fn(rank) on every rank concurrently; returns each rank's result.
  std::vector<sparrowResult_t> run(const std::function<sparrowResult_t(int)>& fn) {
    std::vector<sparrowResult_t> rc(c.size());
    std::vector<std::thread> ts;
    for (int r = 0; r < size(); ++r) ts.emplace_back([&, r] { rc[r] = fn(r); });
    for (auto& t : ts) t.join();
    return rc;
  }
};

}  // namespace sparrow::test
