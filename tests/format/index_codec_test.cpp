#include "format/index_codec.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/bits.h"
#include "harness/util.h"

namespace sparrow::format {
using namespace bits;
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

// The Golomb bytes themselves are the format: the encoder writes a codeword in one go when it fits in
// 56 bits, and must give exactly the bits of the definition (leb128 m; per gap q zeros, a one, the
// remainder in truncated binary: short ones in b - 1 bits, long ones as their high b - 1 bits then
// their low bit; LSB first), written here field by field. Parameters 1, powers of two and not, and
// quotients past 56 bits.
TEST(IndexCodec, GolombBytesAreTheDefinitionsBits) {
  uint64_t seed = 5;
  for (uint32_t m : {1u, 2u, 3u, 5u, 8u, 77u, 100u, 128u, 1000u, 65537u}) {
    std::vector<uint32_t> pos;
    uint32_t at = 0;
    for (int i = 0; i < 500; ++i) {
      const uint32_t gap = i % 50 == 7 ? 70 * m : uint32_t(test::rng_next(seed) % (3 * m + 1));
      pos.push_back(at);
      at += gap + 1;
    }
    const uint32_t n = at;
    std::vector<uint8_t> got, want;
    encode_index(IndexCodec::kGolomb, pos.data(), pos.size(), n, m, got);
    put_leb128(want, m);
    const int b = m <= 1 ? 0 : 64 - __builtin_clzll(uint64_t(m) - 1);
    const uint32_t u = uint32_t((1ull << b) - m);
    BitWriter bw(want);
    for (size_t i = 0; i < pos.size(); ++i) {
      const uint32_t g = i == 0 ? pos[0] : pos[i] - pos[i - 1] - 1, q = g / m, r = g % m;
      bw.put_zeros(q);
      bw.put(1, 1);
      if (b == 0) continue;
      if (r < u) {
        bw.put(r, b - 1);
      } else {
        bw.put((r + u) >> 1, b - 1);
        bw.put((r + u) & 1, 1);
      }
    }
    bw.flush();
    EXPECT_EQ(got, want) << "m " << m;
    std::vector<uint32_t> back(pos.size());
    ASSERT_TRUE(decode_index(IndexCodec::kGolomb, got, n, uint32_t(pos.size()), back.data()).ok()) << "m " << m;
    EXPECT_EQ(back, pos) << "m " << m;
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
