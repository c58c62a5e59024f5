// The ack window over the in-process loopback backend (real frames, injected faults).
#include "collectives/ack_window.h"

#include <gtest/gtest.h>

#include <chrono>

#include "harness/net_harness.h"
#include "transport/loopback/loopback.h"

namespace sparrow::coll {
namespace {

struct Resync {
  int rank;
  uint64_t holds;
};

OpWire wire_of(transport::Net& n, uint64_t seq, double timeout_s) {
  return OpWire{n, 42, seq, transport::deadline_in(timeout_s)};
}

void ack(transport::Net& n, uint64_t seq, const Ack& a) {
  Status s = wire_of(n, seq, 5).send({0}, kAckSub, share(a.encode()));
  ASSERT_TRUE(s.ok()) << s.to_string();
}

// Lower ranks open the connections (as a root's op header does): rank 0 greets every other rank.
void connect(std::vector<std::unique_ptr<transport::Net>>& nets) {
  std::vector<int> others;
  for (int r = 1; r < int(nets.size()); ++r) others.push_back(r);
  ASSERT_TRUE(wire_of(*nets[0], 1000, 5).send(others, 0, share({1, 2, 3})).ok());
  for (int r = 1; r < int(nets.size()); ++r) ASSERT_TRUE(wire_of(*nets[r], 1000, 5).recv(0, 0).ok());
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(AckWindow, DrainTakesWhatArrivedAndReportsResyncs) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  connect(nets);
  std::vector<Resync> seen;
  AckWindow w([&](const BufferKey&, int r, uint64_t holds) { seen.push_back({r, holds}); });
  w.post(1, {}, {1, 2});
  ack(*nets[1], 1, Ack{});
  // Non-blocking while within the window: rank 2 has not acknowledged, the drain does not wait.
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200 && w.missing(1).size() == 2; ++i) (void)w.drain(wire_of(*nets[0], 0, 5), 0, 4);
  EXPECT_EQ(w.missing(1), std::vector<int>{2});
  EXPECT_LT(since(t0), 4.0);
  ack(*nets[2], 1, Ack{Status(Code::kTimeout, "parent silent"), true, 17});
  // Window 0: waits for the rest. A rank that failed but asks for a resync is not an error here.
  EXPECT_TRUE(w.drain(wire_of(*nets[0], 0, 5), 0, 0).ok());
  EXPECT_EQ(w.outstanding(), 0u);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rank, 2);
  EXPECT_EQ(seen[0].holds, 17u);
}

// A model's step runs several operations on different buffers back to back: the next one waits for
// the acknowledgements of its own buffers' earlier operations only, and takes the others as they come.
TEST(AckWindow, DrainForWaitsOnlyForTheSameBuffers) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  connect(nets);
  int a = 0, b = 0;
  const BufferKey ka = {&a}, kb = {&b};
  AckWindow w;
  w.post(1, ka, {1, 2});
  w.post(2, kb, {1, 2});  // nobody acknowledges operation 2 (it is still on its way)
  ack(*nets[1], 1, Ack{});
  ack(*nets[2], 1, Ack{});
  auto t0 = std::chrono::steady_clock::now();
  Status s = w.drain_for(wire_of(*nets[0], 0, 3), 0, ka);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_LT(since(t0), 2.0) << "operation 2 is on other buffers: not waited for";
  EXPECT_TRUE(w.missing(1).empty());
  EXPECT_EQ(w.missing(2), (std::vector<int>{1, 2}));
  // On operation 2's buffers it waits: for the deadline, when they never come.
  t0 = std::chrono::steady_clock::now();
  s = w.drain_for(wire_of(*nets[0], 0, 0.3), 0, kb);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.to_string();
  EXPECT_GE(since(t0), 0.25);
  EXPECT_EQ(w.outstanding(), 0u);
}

TEST(AckWindow, MissingAcknowledgementsCostOneDeadlineTogether) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  connect(nets);
  AckWindow w;
  for (uint64_t seq = 1; seq <= 3; ++seq) w.post(seq, {}, {1, 2});  // nobody acknowledges
  auto t0 = std::chrono::steady_clock::now();
  Status s = w.drain(wire_of(*nets[0], 0, 0.5), 0, 0);
  const double took = since(t0);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.to_string();
  EXPECT_NE(s.message().find("acknowledgement of operation 1"), std::string::npos) << s.message();
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 1.5) << "six missing acknowledgements must share one deadline";
  EXPECT_EQ(w.outstanding(), 0u);  // given up on: not waited for again
}

TEST(AckWindow, FailureNamesTheRankAndAgreeWaitsForEveryone) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  connect(nets);
  AckWindow w;
  ack(*nets[1], 5, Ack{});
  ack(*nets[2], 5, Ack{Status(Code::kInvalidUsage, "arguments differ"), false, 0});
  Status s = w.agree(wire_of(*nets[0], 5, 5), {1, 2});
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.message().find("rank 2 failed operation 5: arguments differ"), std::string::npos) << s.message();
  // A version mismatch is resynced at the next operation: not a failure of the root's call.
  ack(*nets[1], 6, Ack{Status(Code::kVersionMismatch, "buffer changed"), true, 0});
  ack(*nets[2], 6, Ack{});
  EXPECT_TRUE(w.agree(wire_of(*nets[0], 6, 5), {1, 2}).ok());
}

TEST(AckWindow, LostPeerEndsTheWaitAtOnce) {
  auto nets = test::make_nets("loopback", 2);
  ASSERT_EQ(nets.size(), 2u);
  connect(nets);
  AckWindow w;
  w.post(1, {}, {1});  // rank 1 never acknowledges: its connections drop
  transport::LoopbackFaults f;
  f.fail_after_frames = 0;
  ASSERT_TRUE(transport::set_loopback_faults(nets[0]->address(), f));
  (void)wire_of(*nets[1], 999, 5).send({0}, 0, share({1}));  // the next frame to arrive drops everything
  auto t0 = std::chrono::steady_clock::now();
  Status s = w.drain(wire_of(*nets[0], 0, 20), 0, 0);
  EXPECT_FALSE(s.ok());
  EXPECT_LT(since(t0), 10.0) << s.to_string();
}

}  // namespace
}  // namespace sparrow::coll
