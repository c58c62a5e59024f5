#include "format/codec_choice.h"

#include <gtest/gtest.h>

#include <cstring>

#include "harness/util.h"

namespace sparrow::format {
namespace {

// bf16-like changes: most values move by one unit in the last place, as an RL step's do.
void ulp_steps(size_t k, uint64_t seed, std::vector<uint8_t>& oldv, std::vector<uint8_t>& newv) {
  oldv.resize(2 * k);
  newv.resize(2 * k);
  for (size_t i = 0; i < k; ++i) {
    uint16_t o = uint16_t(0x3c00 + test::rng_next(seed) % 0x300), n = uint16_t(o + (test::rng_next(seed) % 2 ? 1 : -1));
    memcpy(&oldv[2 * i], &o, 2);
    memcpy(&newv[2 * i], &n, 2);
  }
}

size_t smallest_of_all(const std::vector<uint8_t>& oldv, const std::vector<uint8_t>& newv, size_t k) {
  size_t least = newv.size();
  std::vector<uint8_t> zs, out;
  for (ValueCodec c : {ValueCodec::kSubZstd, ValueCodec::kXorZstd, ValueCodec::kOverwriteZstd}) {
    out.clear();
    EXPECT_TRUE(encode_values(c, oldv.data(), newv.data(), k, 2, 1, zs, out).ok());
    least = std::min(least, out.size());
  }
  return least;
}

void expect_decodes(ValueCodec c, const std::vector<uint8_t>& enc, const std::vector<uint8_t>& oldv,
                    const std::vector<uint8_t>& newv) {
  std::vector<uint8_t> got(newv.size()), zs;
  ASSERT_TRUE(decode_values(c, enc, oldv.data(), newv.size() / 2, 2, zs, got.data()).ok());
  EXPECT_EQ(got, newv);
}

TEST(CodecChoice, SmallChunkTakesTheSmallestOfEveryCodec) {
  std::vector<uint8_t> o, n, best;
  ulp_steps(1500, 1, o, n);
  CodecScratch s;
  auto c = choose_values(o.data(), n.data(), 1500, 2, true, {}, s, best);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(best.size(), smallest_of_all(o, n, 1500));
  expect_decodes(c.value(), best, o, n);
}

// A large chunk is judged on a sample: one full compression, and (for values alike throughout) the
// same codec and size as comparing every codec on everything.
TEST(CodecChoice, LargeChunkJudgedOnASampleMatchesTheFullComparison) {
  const size_t k = 50000;
  std::vector<uint8_t> o, n, sampled, full;
  ulp_steps(k, 2, o, n);
  CodecScratch s;
  auto a = choose_values(o.data(), n.data(), k, 2, true, {}, s, sampled);
  ValueChoiceOptions everything;
  everything.sample = 0;
  auto b = choose_values(o.data(), n.data(), k, 2, true, everything, s, full);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value(), b.value());
  EXPECT_EQ(sampled.size(), full.size());
  EXPECT_LT(sampled.size(), n.size() / 2);
  expect_decodes(a.value(), sampled, o, n);
}

// Values no codec packs stay raw, sampled or not, and never grow.
TEST(CodecChoice, IncompressibleValuesStayRaw) {
  for (size_t k : {size_t(1000), size_t(40000)}) {
    auto o = test::random_bytes(2 * k, 3), n = test::random_bytes(2 * k, 4);
    std::vector<uint8_t> best;
    CodecScratch s;
    auto c = choose_values(o.data(), n.data(), k, 2, true, {}, s, best);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c.value(), ValueCodec::kOverwrite) << k;
    EXPECT_EQ(best, n);
  }
}

// Chosen by estimated time at a link rate: where a byte costs far more than the CPU time packing
// saves (1 Mbit/s), the packed codec of the byte count wins; where bytes are nearly free (1 Pbit/s),
// raw values do, since any packing's encode and decode cost more than the bytes it saves. Either
// way the values decode to the same bits.
TEST(CodecChoice, ByTimeAtTheLinkRateRawWinsOnAFastLinkAndPackingOnASlowOne) {
  const size_t k = 40000;
  std::vector<uint8_t> o, n, by_bytes, slow, fast;
  ulp_steps(k, 11, o, n);
  CodecScratch s;
  auto b = choose_values(o.data(), n.data(), k, 2, true, {}, s, by_bytes);
  ASSERT_TRUE(b.ok());
  ValueChoiceOptions at;
  at.link_Bps = 1e6 / 8;
  auto c = choose_values(o.data(), n.data(), k, 2, true, at, s, slow);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value(), b.value()) << "1 Mbit/s: the fewest bytes are the quickest";
  EXPECT_EQ(slow, by_bytes);
  at.link_Bps = 1e15 / 8;
  auto f = choose_values(o.data(), n.data(), k, 2, true, at, s, fast);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f.value(), ValueCodec::kOverwrite) << "1 Pbit/s: no packing pays for its CPU time";
  EXPECT_EQ(fast, n);
  expect_decodes(c.value(), slow, o, n);
  // A chunk too small for a sample is judged on bytes, at any rate.
  std::vector<uint8_t> so, sn, small;
  ulp_steps(1000, 12, so, sn);
  auto t = choose_values(so.data(), sn.data(), 1000, 2, true, at, s, small);
  ASSERT_TRUE(t.ok());
  EXPECT_NE(t.value(), ValueCodec::kOverwrite);
  expect_decodes(t.value(), small, so, sn);
}

}  // namespace
}  // namespace sparrow::format
