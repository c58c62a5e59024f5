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

// N members of an elastic communicator (lease `lease_ms`) as threads, in `regions` (by rank; empty:
// none); null where an init failed. The caller destroys (or aborts) them.
inline std::vector<sparrowComm_t> open_elastic(int n, int lease_ms, const std::vector<const char*>& regions = {},
                                               sparrowUniqueId* id_out = nullptr) {
  std::vector<sparrowComm_t> c(size_t(n), nullptr);
  sparrowUniqueId id;
  if (sparrowGetUniqueId(&id) != sparrowSuccess) return c;
  if (id_out) *id_out = id;  // (for a rank that joins later: sparrowCommJoin)
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
      cfg.elastic = 1;
      cfg.leaseMs = lease_ms;
      if (!regions.empty()) cfg.region = regions[size_t(r)];
      (void)sparrowCommInitRankConfig(&c[size_t(r)], n, id, r, &cfg);
    });
  for (auto& t : ts) t.join();
  return c;
}

}  // namespace sparrow::test
