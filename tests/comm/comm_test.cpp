// The communicator through the C API, ranks as threads.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "api/api_internal.h"
#include "core/params.h"
#include "sparrow/sparrow.h"

namespace {

struct Ranks {
  std::vector<sparrowComm_t> comms;
  std::vector<sparrowResult_t> rc;
};

Ranks init_all(int n, const sparrowUniqueId& id, std::vector<int> counts = {}) {
  Ranks r;
  r.comms.assign(n, nullptr);
  r.rc.assign(n, sparrowInternalError);
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] { r.rc[i] = sparrowCommInitRank(&r.comms[i], counts.empty() ? n : counts[i], id, i); });
  for (auto& t : ts) t.join();
  return r;
}

class CommTest : public ::testing::Test {
 protected:
  void SetUp() override { (void)sparrow::params::set_override("PROBE_MS", "100"); }
  void TearDown() override { sparrow::params::clear_overrides(); }
};

TEST_F(CommTest, InitCountRankProbeDestroy) {
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  Ranks r = init_all(4, id);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(r.rc[i], sparrowSuccess) << sparrowGetLastError(nullptr);
    int n = 0, me = -1;
    EXPECT_EQ(sparrowCommCount(r.comms[i], &n), sparrowSuccess);
    EXPECT_EQ(sparrowCommUserRank(r.comms[i], &me), sparrowSuccess);
    EXPECT_EQ(n, 4);
    EXPECT_EQ(me, i);
    sparrowResult_t async = sparrowInternalError;
    EXPECT_EQ(sparrowCommGetAsyncError(r.comms[i], &async), sparrowSuccess);
    EXPECT_EQ(async, sparrowSuccess);
  }
  for (auto c : r.comms) EXPECT_EQ(sparrowCommDestroy(c), sparrowSuccess);
}

TEST_F(CommTest, ProbeTableIsSharedAndPositive) {
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  Ranks r = init_all(3, id);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(r.rc[i], sparrowSuccess);
  // The C++ view: every rank holds the root's measurements.
  const auto& p0 = sparrow::comm_impl(r.comms[0])->probe();
  const auto& p2 = sparrow::comm_impl(r.comms[2])->probe();
  ASSERT_EQ(p0.bw_Bps.size(), 3u);
  for (int j = 1; j < 3; ++j) {
    EXPECT_GT(p0.rtt_s[j], 0);
    EXPECT_GT(p0.bw_Bps[j], 0);
    EXPECT_EQ(p0.bw_Bps[j], p2.bw_Bps[j]);
  }
  for (auto c : r.comms) sparrowCommDestroy(c);
}

TEST_F(CommTest, MismatchedRankCountsFailEveryRank) {
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  Ranks r = init_all(2, id, {2, 3});
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.rc[i], sparrowInvalidUsage);
    EXPECT_EQ(r.comms[i], nullptr);
  }
}

TEST_F(CommTest, BadArgumentsAreSpecificErrors) {
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  sparrowComm_t c = nullptr;
  EXPECT_EQ(sparrowCommInitRank(&c, 0, id, 0), sparrowInvalidArgument);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("nranks"), std::string::npos);
  EXPECT_EQ(sparrowCommInitRank(&c, 2, id, 2), sparrowInvalidArgument);
  EXPECT_EQ(sparrowCommInitRank(nullptr, 2, id, 0), sparrowInvalidArgument);
  sparrowUniqueId junk;
  memset(&junk, 0x5a, sizeof junk);
  EXPECT_EQ(sparrowCommInitRank(&c, 1, junk, 0), sparrowInvalidArgument);
  EXPECT_EQ(sparrowGetUniqueId(nullptr), sparrowInvalidArgument);
  EXPECT_EQ(sparrowCommCount(nullptr, nullptr), sparrowInvalidArgument);
}

TEST_F(CommTest, MissingRankTimesOut) {
  ASSERT_TRUE(sparrow::params::set_override("TIMEOUT_S", "1").ok());
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  sparrowComm_t c = nullptr;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(sparrowCommInitRank(&c, 2, id, 0), sparrowTimeout);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("rank"), std::string::npos);
}

TEST_F(CommTest, SingleRankAndAbort) {
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  sparrowComm_t c = nullptr;
  ASSERT_EQ(sparrowCommInitRank(&c, 1, id, 0), sparrowSuccess);
  EXPECT_EQ(sparrowCommAbort(c), sparrowSuccess);
}

}  // namespace
