// The sparse root's choice of the rate its value codecs are judged at.
#include <gtest/gtest.h>

#include <vector>

#include "collectives/sparse/sparse_op.h"

namespace sparrow::coll {
namespace {

// The slowest probed receiver's rate is what one copy gets; the root sends every chunk once per
// child over the same uplink, so each copy is judged at that rate over the number of children.
TEST(SparseRoot, CodecRateIsTheSlowestProbedRateSharedByTheRootsCopies) {
  const std::vector<double> bw = {0, 8e8, 4e8, 1.25e9};  // by rank; rank 0 (the root) has none
  EXPECT_DOUBLE_EQ(codec_link_Bps(0, bw, 0, 1), 4e8);
  EXPECT_DOUBLE_EQ(codec_link_Bps(0, bw, 0, 4), 1e8);
  EXPECT_DOUBLE_EQ(codec_link_Bps(0, bw, 0, 0), 4e8) << "no children: one copy";
  EXPECT_DOUBLE_EQ(codec_link_Bps(0, bw, 2, 1), 8e8) << "its own entry is not a receiver";
  EXPECT_DOUBLE_EQ(codec_link_Bps(0, {0, 0, 0}, 0, 2), 0) << "nothing probed: by bytes";
  EXPECT_DOUBLE_EQ(codec_link_Bps(1000, bw, 0, 4), 1.25e8) << "SPARROW_CODEC_LINK_MBIT names the rate itself";
  EXPECT_DOUBLE_EQ(codec_link_Bps(-1, bw, 0, 4), 0) << "-1: the fewest bytes";
}

}  // namespace
}  // namespace sparrow::coll
