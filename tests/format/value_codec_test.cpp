#include "format/value_codec.h"

#include <gtest/gtest.h>

#include <cstring>

#include "harness/util.h"

namespace sparrow::format {
namespace {

const ValueCodec kAll[] = {ValueCodec::kOverwrite, ValueCodec::kOverwriteZstd, ValueCodec::kXorZstd,
                           ValueCodec::kSubZstd};

void round_trip(ValueCodec c, const std::vector<uint8_t>& oldv, const std::vector<uint8_t>& newv, uint32_t es) {
  size_t k = newv.size() / es;
  std::vector<uint8_t> scratch, out;
  ASSERT_TRUE(encode_values(c, oldv.data(), newv.data(), k, es, 1, scratch, out).ok());
  std::vector<uint8_t> got(newv.size(), 0xAA);
  Status s = decode_values(c, out, oldv.data(), k, es, scratch, got.data());
  ASSERT_TRUE(s.ok()) << value_codec_name(c) << ": " << s.message();
  EXPECT_EQ(got, newv) << value_codec_name(c) << " es=" << es;
}

TEST(ValueCodec, RoundTripAllSizesRandom) {
  for (uint32_t es : {1u, 2u, 4u, 8u})
    for (size_t k : {size_t(1), size_t(2), size_t(1000), size_t(65537)}) {
      auto o = test::random_bytes(k * es, es * 1000 + k), n = test::random_bytes(k * es, es * 7 + k);
      for (ValueCodec c : kAll) round_trip(c, o, n, es);
    }
}

TEST(ValueCodec, SpecialFloatBitsSurvive) {
  // -0, +0, quiet/signalling NaN with payloads, inf, denormals: bits, not values, are coded.
  const uint32_t f32[] = {0x00000000, 0x80000000, 0x7fc00001, 0x7f800001, 0xffc12345, 0x7f800000,
                          0xff800000, 0x00000001, 0x807fffff, 0x3f800000};
  std::vector<uint8_t> n(sizeof f32), o(sizeof f32);
  memcpy(n.data(), f32, sizeof f32);
  for (size_t i = 0; i < o.size(); ++i) o[i] = n[(i + 4) % n.size()];
  for (ValueCodec c : kAll) round_trip(c, o, n, 4);
  const uint16_t bf16[] = {0x0000, 0x8000, 0x7fc1, 0xff81, 0x7f80, 0x0001, 0x8001};
  std::vector<uint8_t> nb(sizeof bf16), ob(sizeof bf16, 0);
  memcpy(nb.data(), bf16, sizeof bf16);
  for (ValueCodec c : kAll) round_trip(c, ob, nb, 2);
}

TEST(ValueCodec, SubCodecMakesUlpStepsTiny) {
  // bf16 values that each moved by one ulp up or down: sub_zstd should need ~1-2 bits per value.
  const size_t k = 20000;
  std::vector<uint8_t> o(k * 2), n(k * 2);
  uint64_t s = 5;
  for (size_t i = 0; i < k; ++i) {
    uint16_t v = uint16_t(0x3c00 + (test::rng_next(s) & 0x3ff)) | ((test::rng_next(s) & 1) << 15);
    uint16_t w = (test::rng_next(s) & 1) ? v + 1 : v - 1;
    memcpy(&o[2 * i], &v, 2);
    memcpy(&n[2 * i], &w, 2);
  }
  std::vector<uint8_t> scratch, sub, ow;
  ASSERT_TRUE(encode_values(ValueCodec::kSubZstd, o.data(), n.data(), k, 2, 1, scratch, sub).ok());
  ASSERT_TRUE(encode_values(ValueCodec::kOverwriteZstd, o.data(), n.data(), k, 2, 1, scratch, ow).ok());
  EXPECT_LT(8.0 * sub.size() / k, 2.5);
  EXPECT_LT(sub.size(), ow.size() / 4);
}

TEST(ValueCodec, RejectsMalformed) {
  auto o = test::random_bytes(400, 1), n = test::random_bytes(400, 2);
  std::vector<uint8_t> scratch, got(400);
  for (ValueCodec c : kAll) {
    std::vector<uint8_t> out;
    ASSERT_TRUE(encode_values(c, o.data(), n.data(), 100, 4, 1, scratch, out).ok());
    std::vector<uint8_t> trunc(out.begin(), out.end() - 1);
    EXPECT_EQ(decode_values(c, trunc, o.data(), 100, 4, scratch, got.data()).code(), Code::kCorruptData)
        << value_codec_name(c);
    auto extra = out;
    extra.push_back(0);
    EXPECT_EQ(decode_values(c, extra, o.data(), 100, 4, scratch, got.data()).code(), Code::kCorruptData)
        << value_codec_name(c);
    // Count mismatch: the frame's content size names the real count.
    EXPECT_EQ(decode_values(c, out, o.data(), 99, 4, scratch, got.data()).code(), Code::kCorruptData)
        << value_codec_name(c);
  }
  std::vector<uint8_t> junk = test::random_bytes(64, 9);
  EXPECT_EQ(decode_values(ValueCodec::kSubZstd, junk, o.data(), 16, 4, scratch, got.data()).code(), Code::kCorruptData);
  EXPECT_EQ(decode_values(ValueCodec(7), junk, o.data(), 16, 4, scratch, got.data()).code(), Code::kCorruptData);
}

}  // namespace
}  // namespace sparrow::format
