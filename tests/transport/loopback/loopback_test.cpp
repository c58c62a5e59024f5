// Deterministic failures through the loopback backend's fault injection.
#include "transport/loopback/loopback.h"

#include <gtest/gtest.h>

#include "harness/net_harness.h"
#include "harness/util.h"

namespace sparrow::transport {
namespace {

struct Pair {
  std::vector<std::unique_ptr<Net>> nets = test::make_nets("loopback", 2, 1);
  std::vector<uint8_t> msg = test::random_bytes(100000, 3);
  Payload p() { return Payload{msg.data(), msg.size(), nullptr}; }
  void establish() {
    ASSERT_TRUE(nets[0]->send(1, MsgKey{42, 0, 0}, Payload{}, test::soon()).ok());
    ASSERT_TRUE(nets[1]->recv(0, MsgKey{42, 0, 0}, test::soon()).ok());
  }
};

TEST(LoopbackFaults, DroppedConnectionIsPeerLostOnBothSides) {
  Pair p;
  p.establish();
  ASSERT_TRUE(set_loopback_faults(p.nets[1]->address(), LoopbackFaults{0, 0, false, false}));
  auto rq = p.nets[0]->send(1, MsgKey{42, 1, 0}, p.p(), test::soon());
  ASSERT_TRUE(rq.ok());
  auto got = p.nets[1]->recv(0, MsgKey{42, 1, 0}, test::soon());
  EXPECT_EQ(got.status().code(), Code::kPeerLost) << got.status().to_string();
  auto back = p.nets[0]->recv(1, MsgKey{42, 2, 0}, test::soon());
  EXPECT_EQ(back.status().code(), Code::kPeerLost) << back.status().to_string();
}

TEST(LoopbackFaults, OneShotSendError) {
  Pair p;
  p.establish();
  ASSERT_TRUE(set_loopback_faults(p.nets[0]->address(), LoopbackFaults{0, -1, true, false}));
  auto rq = p.nets[0]->send(1, MsgKey{42, 1, 0}, p.p(), test::soon());
  ASSERT_TRUE(rq.ok());
  EXPECT_EQ(rq.value()->wait(test::soon()).code(), Code::kSystemError);
  auto rq2 = p.nets[0]->send(1, MsgKey{42, 2, 0}, p.p(), test::soon());
  ASSERT_TRUE(rq2.ok());
  EXPECT_TRUE(rq2.value()->wait(test::soon()).ok());
  auto got = p.nets[1]->recv(0, MsgKey{42, 2, 0}, test::soon());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value(), p.msg);
}

TEST(LoopbackFaults, StallTimesOutThenDelivers) {
  Pair p;
  p.establish();
  ASSERT_TRUE(set_loopback_faults(p.nets[1]->address(), LoopbackFaults{0, -1, false, true}));
  ASSERT_TRUE(p.nets[0]->send(1, MsgKey{42, 1, 0}, p.p(), test::soon()).ok());
  EXPECT_EQ(p.nets[1]->recv(0, MsgKey{42, 1, 0}, deadline_in(0.2)).status().code(), Code::kTimeout);
  ASSERT_TRUE(set_loopback_faults(p.nets[1]->address(), LoopbackFaults{}));
  auto got = p.nets[1]->recv(0, MsgKey{42, 1, 0}, test::soon());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value(), p.msg);
}

TEST(LoopbackFaults, DelayedFramesStillArriveInOrder) {
  Pair p;
  p.establish();
  ASSERT_TRUE(set_loopback_faults(p.nets[1]->address(), LoopbackFaults{2000, -1, false, false}));
  for (uint32_t i = 0; i < 5; ++i) ASSERT_TRUE(p.nets[0]->send(1, MsgKey{42, 1, i}, p.p(), test::soon()).ok());
  for (uint32_t i = 0; i < 5; ++i) {
    auto got = p.nets[1]->recv(0, MsgKey{42, 1, i}, test::soon());
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.value(), p.msg);
  }
  EXPECT_FALSE(set_loopback_faults("loop:no-such", LoopbackFaults{}));
}

}  // namespace
}  // namespace sparrow::transport
