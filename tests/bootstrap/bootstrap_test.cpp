#include "bootstrap/bootstrap.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "core/params.h"
#include "harness/net_harness.h"
#include "sparrow/sparrow.h"

namespace sparrow::bootstrap {
namespace {

TEST(UniqueId, EncodeDecodeRoundTrip) {
  IdData d{0x1234, std::vector<uint8_t>(16, 3), "127.0.0.1:5555"};
  uint8_t buf[kIdBytes];
  encode_id(d, buf);
  auto back = decode_id(buf);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->comm_id, 0x1234u);
  EXPECT_EQ(back->secret, d.secret);
  EXPECT_EQ(back->store_address, d.store_address);
  uint8_t zeros[kIdBytes] = {};
  EXPECT_EQ(decode_id(zeros).status().code(), Code::kInvalidArgument);
  buf[4] = 9;  // version
  EXPECT_NE(decode_id(buf).status().message().find("version"), std::string::npos);
}

std::vector<Result<std::vector<RankInfo>>> run(const IdData& id, const std::vector<std::pair<int, int>>& rank_n,
                                               double secs = 10, std::vector<int> streams = {}) {
  std::vector<Result<std::vector<RankInfo>>> out(rank_n.size(), Status(Code::kInternalError, "not run"));
  std::vector<std::thread> ts;
  for (size_t i = 0; i < rank_n.size(); ++i)
    ts.emplace_back([&, i] {
      RankInfo me{"addr" + std::to_string(rank_n[i].first), "host", "r" + std::to_string(i % 2),
                  streams.empty() ? 4 : streams[i]};
      out[i] = exchange(id, rank_n[i].first, rank_n[i].second, me, transport::deadline_in(secs));
    });
  for (auto& t : ts) t.join();
  return out;
}

TEST(Store, EveryRankGetsEveryAddress) {
  auto id = create_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto res = run(id.value(), {{2, 4}, {0, 4}, {3, 4}, {1, 4}});
  for (auto& r : res) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 4u);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(r.value()[k].address, "addr" + std::to_string(k));
  }
}

TEST(Store, MismatchedCountsFailEveryRank) {
  auto id = create_id();
  ASSERT_TRUE(id.ok());
  auto res = run(id.value(), {{0, 3}, {1, 2}});
  for (auto& r : res) EXPECT_EQ(r.status().code(), Code::kInvalidUsage) << r.status().to_string();
}

TEST(Store, DuplicateRankAndStreamMismatchFail) {
  auto id = create_id();
  ASSERT_TRUE(id.ok());
  auto res = run(id.value(), {{0, 2}, {0, 2}});
  for (auto& r : res) EXPECT_EQ(r.status().code(), Code::kInvalidUsage) << r.status().to_string();
  auto id2 = create_id();
  ASSERT_TRUE(id2.ok());
  auto res2 = run(id2.value(), {{0, 2}, {1, 2}}, 10, {4, 2});
  for (auto& r : res2) {
    EXPECT_EQ(r.status().code(), Code::kInvalidUsage);
    EXPECT_NE(r.status().message().find("NSTREAMS"), std::string::npos) << r.status().message();
  }
}

TEST(Store, MissingRankTimesOut) {
  auto id = create_id();
  ASSERT_TRUE(id.ok());
  auto res = run(id.value(), {{0, 2}}, 0.5);
  EXPECT_EQ(res[0].status().code(), Code::kTimeout) << res[0].status().to_string();
}

TEST(Store, WrongSecretCannotJoin) {
  auto id = create_id();
  ASSERT_TRUE(id.ok());
  IdData forged = id.value();
  forged.secret[0] ^= 1;
  auto r = exchange(forged, 0, 1, RankInfo{"a", "h", "", 4}, transport::deadline_in(5));
  EXPECT_EQ(r.status().code(), Code::kAuthError) << r.status().to_string();
}

// An elastic communicator that may grow (SPARROW_MAX_RANKS): the table has an entry per slot, those
// past the ranks vacant (no address, the communicator's kind); the store lists and hands out a
// vacant slot like a dropped member's. Ranks that disagree on the slots all fail, saying why.
TEST(Store, SlotsPastTheRanksAreVacantAndRanksMustAgreeOnThem) {
  auto id = create_id();
  ASSERT_TRUE(id.ok());
  auto early = lookup(id.value(), 3, transport::deadline_in(10));  // a joiner before the ranks: ask again
  EXPECT_EQ(early.status().code(), Code::kInvalidUsage);
  EXPECT_NE(early.status().message().find(kNotComplete), std::string::npos) << early.status().to_string();
  std::vector<Result<std::vector<RankInfo>>> res(2, Status(Code::kInternalError, "not run"));
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      res[size_t(r)] = exchange(id.value(), r, 2, RankInfo{"a" + std::to_string(r), "h", "", 4, 1, 1000},
                                transport::deadline_in(10), 4);
    });
  for (auto& t : ts) t.join();
  for (auto& r : res) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 4u);
    EXPECT_EQ(r.value()[1].address, "a1");
    for (int k : {2, 3}) {
      EXPECT_EQ(r.value()[size_t(k)].address, "");
      EXPECT_EQ(r.value()[size_t(k)].elastic, 1);
      EXPECT_EQ(r.value()[size_t(k)].lease_ms, 1000);
    }
  }
  auto table = lookup(id.value(), 3, transport::deadline_in(10));
  ASSERT_TRUE(table.ok()) << table.status().to_string();
  EXPECT_EQ(table->size(), 4u) << "a joiner sees every slot";
  {
    SlotBoard board(id.value());
    board.publish({2, 3});
    auto d = transport::deadline_in(10);
    auto first = claim_slot(id.value(), 5000, d);
    while (!first.ok() && first.status().message() == kNoFreeSlot && transport::Clock::now() < d)
      first = claim_slot(id.value(), 5000, d);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(first.value(), 2);
  }
  auto id2 = create_id();
  ASSERT_TRUE(id2.ok());
  ts.clear();
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      res[size_t(r)] = exchange(id2.value(), r, 2, RankInfo{"a", "h", "", 4, 1, 1000}, transport::deadline_in(10),
                                r == 0 ? 4 : 6);
    });
  for (auto& t : ts) t.join();
  for (auto& r : res) {
    EXPECT_EQ(r.status().code(), Code::kInvalidUsage);
    EXPECT_NE(r.status().message().find("SPARROW_MAX_RANKS must be the same"), std::string::npos) << r.status().to_string();
  }
}

// An elastic communicator's store hands rank 0's free slots to joiners, lowest first, each to one
// joiner at a time until its claim runs out; with nothing free it says so.
TEST(Store, FreeSlotsGoToOneJoinerAtATime) {
  auto id = create_id();
  ASSERT_TRUE(id.ok());
  std::vector<std::thread> ts;
  for (int r = 0; r < 4; ++r)
    ts.emplace_back([&, r] {
      EXPECT_TRUE(exchange(id.value(), r, 4, RankInfo{"a" + std::to_string(r), "h", "", 4, 1, 1000},
                           transport::deadline_in(10))
                      .ok());
    });
  for (auto& t : ts) t.join();
  auto d = transport::deadline_in(10);
  auto none = claim_slot(id.value(), 5000, d);
  EXPECT_EQ(none.status().code(), Code::kInvalidUsage);
  EXPECT_EQ(none.status().message(), kNoFreeSlot);
  {
    SlotBoard board(id.value());
    board.publish({3, 1});
    auto first = claim_slot(id.value(), 5000, d);
    while (!first.ok() && first.status().message() == kNoFreeSlot && transport::Clock::now() < d)
      first = claim_slot(id.value(), 5000, d);  // until the board's list arrived
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(first.value(), 1);
    auto second = claim_slot(id.value(), 0, d);  // a claim that runs out at once
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    EXPECT_EQ(second.value(), 3);
    auto again = claim_slot(id.value(), 5000, d);
    ASSERT_TRUE(again.ok()) << "slot 3's claim ran out: " << again.status().to_string();
    EXPECT_EQ(again.value(), 3);
    auto full = claim_slot(id.value(), 5000, d);
    EXPECT_EQ(full.status().message(), kAllClaimed);
  }
}

// The "make the id, then fork the workers" pattern: the forked ranks inherit a copy of the store
// without its thread. An elastic communicator's destroy ends its process's store; in a child that
// must not touch the inherited copy (it joined a thread that does not exist there: a hang for good).
// SIGALRM bounds each child: a hang fails the test instead of the suite.
int forked_elastic_rank(const sparrowUniqueId& id, int rank) {
  alarm(30);
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  cfg.elastic = 1;
  cfg.leaseMs = 3000;
  sparrowComm_t comm = nullptr;
  if (sparrowCommInitRankConfig(&comm, 2, id, rank, &cfg) != sparrowSuccess) return 2;
  std::vector<uint16_t> w(4096, uint16_t(0x3c00)), got(4096, 0);
  if (sparrowSparseBcast(rank == 0 ? w.data() : nullptr, rank == 0 ? nullptr : got.data(), w.size(), sparrowBfloat16,
                         0, comm, nullptr) != sparrowSuccess)
    return 3;
  if (rank == 1 && got != w) return 4;
  if (sparrowCommDestroy(comm) != sparrowSuccess) return 5;
  return 0;
}

TEST(Store, RanksForkedAfterTheIdWasMadeDestroyAtOnce) {
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    ASSERT_GE(pids[r], 0);
    if (pids[r] == 0) _exit(forked_elastic_rank(id, r));
  }
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    ASSERT_EQ(waitpid(pids[r], &st, 0), pids[r]);
    EXPECT_TRUE(WIFEXITED(st)) << "rank " << r << " was killed by signal " << WTERMSIG(st)
                               << (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (it hung)" : "");
    if (WIFEXITED(st)) EXPECT_EQ(WEXITSTATUS(st), 0) << "rank " << r;
  }
  // The parent's store still serves: a child's destroy did not end it.
  EXPECT_GE(live_stores(), 1u);
}

}  // namespace
}  // namespace sparrow::bootstrap
