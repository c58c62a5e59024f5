#include "format/index_codec.h"

#include <gtest/gtest.h>

#include <cmath>

#include "harness/util.h"

namespace sparrow::format {
namespace {

const IndexCodec kSparse[] = {IndexCodec::kLeb128, IndexCodec::kGolomb, IndexCodec::kBitmap};

std::vector<uint8_t> enc(IndexCodec c, const std::vector<uint32_t>& pos, uint32_t n) {
  std::vector<uint8_t> out;
  encode_index(c, pos.data(), pos.size(), n, golomb_parameter(pos.data(), pos.size()), out);
  return out;
}

TEST(IndexCodec, RoundTripOverDensities) {
  const uint32_t n = 100003;
  for (double p : {0.0, 1e-5, 0.001, 0.01, 0.05, 0.3, 0.9, 1.0}) {
    auto pos = test::random_positions(n, p, uint64_t(p * 1e6) + 1);
    for (IndexCodec c : kSparse) {
      auto bytes = enc(c, pos, n);
      std::vector<uint32_t> got(pos.size());
      Status s = decode_index(c, bytes, n, uint32_t(pos.size()), got.data());
      ASSERT_TRUE(s.ok()) << index_codec_name(c) << " p=" << p << ": " << s.message();
      EXPECT_EQ(got, pos) << index_codec_name(c) << " p=" << p;
      if (c == IndexCodec::kLeb128) EXPECT_EQ(bytes.size(), leb128_index_size(pos.data(), pos.size()));
      if (c == IndexCodec::kGolomb)
        EXPECT_EQ(bytes.size(), golomb_index_size(pos.data(), pos.size(), golomb_parameter(pos.data(), pos.size())));
      if (c == IndexCodec::kBitmap) EXPECT_EQ(bytes.size(), bitmap_index_size(n));
    }
  }
}

TEST(IndexCodec, EdgePositions) {
  for (uint32_t n : {1u, 2u, 7u, 8u, 9u, 64u, 65u}) {
    std::vector<std::vector<uint32_t>> cases = {{0}, {n - 1}, {0, n - 1}};
    for (auto pos : cases) {
      if (pos.size() == 2 && n == 1) continue;
      for (IndexCodec c : kSparse) {
        auto bytes = enc(c, pos, n);
        std::vector<uint32_t> got(pos.size());
        ASSERT_TRUE(decode_index(c, bytes, n, uint32_t(pos.size()), got.data()).ok()) << index_codec_name(c) << " n=" << n;
        EXPECT_EQ(got, pos);
      }
    }
  }
}

TEST(IndexCodec, GolombNearEntropyAtOnePercent) {
  const uint32_t n = 1 << 20;
  auto pos = test::random_positions(n, 0.01, 11);
  double bound = index_entropy_bits(n, pos.size()) / double(pos.size());
  double golomb = 8.0 * double(enc(IndexCodec::kGolomb, pos, n).size()) / double(pos.size());
  double leb = 8.0 * double(enc(IndexCodec::kLeb128, pos, n).size()) / double(pos.size());
  EXPECT_NEAR(bound, 8.08, 0.05);
  EXPECT_LT(golomb, 1.05 * bound) << "golomb " << golomb << " bits/change vs bound " << bound;
  EXPECT_GT(leb, golomb);
}

TEST(IndexCodec, DenseCodec) {
  std::vector<uint32_t> got(5);
  ASSERT_TRUE(decode_index(IndexCodec::kDense, {}, 5, 5, got.data()).ok());
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(decode_index(IndexCodec::kDense, {}, 5, 4, got.data()).code(), Code::kCorruptData);
  uint8_t junk = 1;
  EXPECT_EQ(decode_index(IndexCodec::kDense, {&junk, 1}, 5, 5, got.data()).code(), Code::kCorruptData);
}

TEST(IndexCodec, RejectsMalformedInput) {
  const uint32_t n = 5000;
  auto pos = test::random_positions(n, 0.02, 5);
  const uint32_t k = uint32_t(pos.size());
  std::vector<uint32_t> got(k + 1);
  for (IndexCodec c : kSparse) {
    auto bytes = enc(c, pos, n);
    // Truncated.
    std::vector<uint8_t> t(bytes.begin(), bytes.end() - 1);
    EXPECT_EQ(decode_index(c, t, n, k, got.data()).code(), Code::kCorruptData) << index_codec_name(c);
    // Trailing garbage.
    auto extra = bytes;
    extra.push_back(0xff);
    EXPECT_EQ(decode_index(c, extra, n, k, got.data()).code(), Code::kCorruptData) << index_codec_name(c);
    // Wrong count either way.
    EXPECT_EQ(decode_index(c, bytes, n, k + 1, got.data()).code(), Code::kCorruptData) << index_codec_name(c);
    // Smaller chunk: positions run past the end.
    EXPECT_EQ(decode_index(c, bytes, pos.back(), k, got.data()).code(), Code::kCorruptData) << index_codec_name(c);
  }
  // Golomb parameter zero.
  std::vector<uint8_t> zero_m = {0x00, 0xff};
  EXPECT_EQ(decode_index(IndexCodec::kGolomb, zero_m, n, 1, got.data()).code(), Code::kCorruptData);
  // Non-zero padding bits.
  std::vector<uint32_t> one = {3};
  auto g = enc(IndexCodec::kGolomb, one, 10);
  g.back() |= 0x80;
  EXPECT_EQ(decode_index(IndexCodec::kGolomb, g, 10, 1, got.data()).code(), Code::kCorruptData);
  // Bitmap bits beyond n.
  std::vector<uint8_t> bm = {0x00, 0x80};
  EXPECT_EQ(decode_index(IndexCodec::kBitmap, bm, 12, 1, got.data()).code(), Code::kCorruptData);
  // Unknown codec id.
  EXPECT_EQ(decode_index(IndexCodec(9), {}, 10, 1, got.data()).code(), Code::kCorruptData);
}

TEST(IndexCodec, EntropyBound) {
  EXPECT_EQ(index_entropy_bits(100, 0), 0.0);
  EXPECT_EQ(index_entropy_bits(100, 100), 0.0);
  EXPECT_NEAR(index_entropy_bits(4, 2), std::log2(6.0), 1e-9);
}

}  // namespace
}  // namespace sparrow::format
