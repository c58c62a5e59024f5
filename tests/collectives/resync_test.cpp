// SPDX-License-Identifier: Apache-2.0
// The resync policy (collectives/resync.h): what a receiver's acknowledgement asks for, and how the
// root reads it.
#include "collectives/resync.h"

#include <gtest/gtest.h>

namespace sparrow::coll {
namespace {

TEST(Resync, SuccessAsksForNothingAndReadsAsSuccess) {
  const Ack a = ack_for(Status::Ok(), false, false, 7);
  EXPECT_FALSE(a.resync);
  EXPECT_TRUE(read_ack(a, 3, 9).ok());
}

TEST(Resync, ARankThatFailedAsksForTheDeltasItMissedAndIsNoFailureOfTheRoot) {
  for (Code c : {Code::kTimeout, Code::kPeerLost, Code::kCorruptData}) {
    const Ack a = ack_for(Status(c, "x"), false, false, 7);
    EXPECT_TRUE(a.resync);
    EXPECT_EQ(a.holds, 7u) << "its buffers hold version 7, untouched";
    EXPECT_TRUE(read_ack(a, 3, 9).ok());
  }
}

TEST(Resync, AFailedResyncAsksForAFullSnapshot) {
  for (Code c : {Code::kTimeout, Code::kInvalidUsage, Code::kVersionMismatch}) {
    const Ack a = ack_for(Status(c, "x"), true, true, 7);
    EXPECT_TRUE(a.resync);
    EXPECT_EQ(a.holds, 0u);
  }
}

TEST(Resync, ARefusedStepAsksForTheMissedStepsWhenBehindElseASnapshot) {
  const Ack behind = ack_for(Status(Code::kVersionMismatch, "x"), false, true, 5);
  EXPECT_TRUE(behind.resync);
  EXPECT_EQ(behind.holds, 5u);
  const Ack written = ack_for(Status(Code::kVersionMismatch, "x"), false, false, 5);
  EXPECT_TRUE(written.resync);
  EXPECT_EQ(written.holds, 0u);
  EXPECT_TRUE(read_ack(written, 3, 9).ok()) << "repaired by the next operation";
}

TEST(Resync, AMismatchOfArgumentsIsTheRootsFailureNamingTheRank) {
  const Ack a = ack_for(Status(Code::kInvalidUsage, "count differs"), false, false, 5);
  EXPECT_FALSE(a.resync);
  const Status s = read_ack(a, 3, 9);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.message().find("rank 3 failed operation 9"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace sparrow::coll
