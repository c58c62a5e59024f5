#include "topology/probe.h"

#include <gtest/gtest.h>

#include <thread>

#include "harness/net_harness.h"

namespace sparrow::topology {
namespace {

TEST(Probe, StarFromRootOverEveryBackend) {
  for (const char* be : {"tcp", "loopback"}) {
    auto nets = test::make_nets(be, 3, 2);
    ASSERT_EQ(nets.size(), 3u);
    std::vector<Result<ProbeResult>> res(3, Status(Code::kInternalError, "not run"));
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; ++r)
      ts.emplace_back([&, r] { res[r] = probe_star(*nets[r], 42, 0, 0.3, test::soon(30)); });
    for (auto& t : ts) t.join();
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(res[r].ok()) << be << ": " << res[r].status().to_string();
      for (int j = 1; j < 3; ++j) {
        EXPECT_GT(res[r]->rtt_s[j], 0) << be;
        EXPECT_LT(res[r]->rtt_s[j], 0.1) << be;
        EXPECT_GT(res[r]->bw_Bps[j], 1e6) << be;  // loopback moves far more than 1 MB/s
        EXPECT_EQ(res[r]->bw_Bps[j], res[0]->bw_Bps[j]) << "every rank holds the root's table";
      }
    }
    EXPECT_NE(res[0]->format().find("bw_Gbit/s"), std::string::npos);
  }
}

}  // namespace
}  // namespace sparrow::topology
