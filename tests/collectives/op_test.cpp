// One operation's phases: the state itself, and a receiver's failure naming the phase it stopped in.
#include "collectives/op.h"

#include <gtest/gtest.h>

#include "api/api_internal.h"
#include "core/params.h"
#include "harness/comm_harness.h"
#include "harness/util.h"
#include "transport/loopback/loopback.h"

namespace sparrow::coll {
namespace {

TEST(OpState, AdvancesThroughNamedPhases) {
  OpState s(7, "receiver");
  EXPECT_EQ(s.phase(), Phase::kHeader);
  EXPECT_EQ(s.where(), "in phase header of operation 7");
  s.advance(Phase::kStream);
  s.received(12);
  s.verified(11);
  EXPECT_EQ(s.where(), "in phase stream of operation 7, 12 part(s) received, 11 verified");
  s.advance(Phase::kAck);
  EXPECT_STREQ(phase_name(s.phase()), "ack");
  s.advance(Phase::kDone);
  EXPECT_STREQ(phase_name(s.phase()), "done");
}

// Over the loopback backend: rank 2's connections drop in the middle of the second step. Its call
// fails naming the stream phase and how far it got, and its buffer still holds the first version.
TEST(OpState, ReceiverThatLosesItsParentMidStreamSaysWhere) {
  params::clear_overrides();
  ASSERT_TRUE(params::set_override("TRANSPORT", "loopback").ok());
  ASSERT_TRUE(params::set_override("ALGO", "chain").ok());
  ASSERT_TRUE(params::set_override("TIMEOUT_S", "3").ok());
  ASSERT_TRUE(params::set_override("PROBE_MS", "0").ok());
  ASSERT_TRUE(params::set_override("CHUNK_ELEMS", "65536").ok());
  const size_t n = 1 << 20;
  std::vector<uint16_t> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = uint16_t(i * 2654435761u >> 7);
  std::vector<std::vector<uint16_t>> dst(3, std::vector<uint16_t>(n, 0));
  sparrowResult_t rc2 = sparrowSuccess;
  std::string err2;
  {
    test::Comms cs(3);
    auto step = [&](int r) {
      return sparrowSparseBcast(src.data(), r == 0 ? src.data() : dst[r].data(), n, sparrowBfloat16, 0, cs.c[r], nullptr);
    };
    for (auto rc : cs.run(step)) ASSERT_EQ(rc, sparrowSuccess);
    ASSERT_EQ(dst[2], src);
    const auto v1 = src;
    for (size_t i = 0; i < n; i += 97) src[i] ^= 0x5a;
    transport::LoopbackFaults drop;
    drop.fail_after_frames = 3;  // the op header, the checkpoint header, one chunk
    ASSERT_TRUE(transport::set_loopback_faults(comm_impl(cs.c[2])->net().address(), drop));
    auto rc = cs.run(step);
    rc2 = rc[2];
    err2 = sparrowGetLastError(cs.c[2]);
    EXPECT_EQ(dst[2], v1) << "a failed step leaves the previous version, bit for bit";
  }
  params::clear_overrides();
  EXPECT_NE(rc2, sparrowSuccess);
  EXPECT_NE(err2.find("in phase stream of operation 2"), std::string::npos) << err2;
}

}  // namespace
}  // namespace sparrow::coll
