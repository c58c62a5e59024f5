#include "core/bits.h"

#include <gtest/gtest.h>

namespace sparrow::bits {
namespace {

TEST(Leb128, RoundTripAndSizes) {
  std::vector<uint8_t> out;
  const uint64_t vals[] = {0, 1, 127, 128, 16383, 16384, (1ull << 32) - 1, ~0ull};
  for (uint64_t v : vals) EXPECT_EQ(put_leb128(out, v), leb128_size(v));
  ByteReader r(out, "test");
  for (uint64_t v : vals) {
    uint64_t got;
    ASSERT_TRUE(r.leb128(&got).ok());
    EXPECT_EQ(got, v);
  }
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(Leb128, RejectsOverlongOverflowAndTruncation) {
  uint64_t v;
  std::vector<uint8_t> overlong = {0x81, 0x00};
  EXPECT_EQ(ByteReader(overlong, "t").leb128(&v).code(), Code::kCorruptData);
  std::vector<uint8_t> big = {0xff, 0xff, 0xff, 0xff, 0x10};  // 2^32 and more: too big for 32 bits
  EXPECT_EQ(ByteReader(big, "t").leb128(&v, 32).code(), Code::kCorruptData);
  std::vector<uint8_t> ok32 = {0xff, 0xff, 0xff, 0xff, 0x0f};
  ASSERT_TRUE(ByteReader(ok32, "t").leb128(&v, 32).ok());
  EXPECT_EQ(v, 0xffffffffull);
  std::vector<uint8_t> trunc = {0x80, 0x80};
  Status s = ByteReader(trunc, "golomb index").leb128(&v);
  EXPECT_EQ(s.code(), Code::kCorruptData);
  EXPECT_NE(s.message().find("golomb index truncated"), std::string::npos) << s.message();
}

TEST(Bits, WriterReaderRoundTrip) {
  std::vector<uint8_t> out;
  BitWriter w(out);
  w.put(0b101, 3);
  w.put_zeros(70);
  w.put(1, 1);
  w.put(0x1234567, 28);
  w.flush();
  BitReader r(out);
  uint64_t v, q;
  ASSERT_TRUE(r.get(3, &v));
  EXPECT_EQ(v, 0b101u);
  ASSERT_TRUE(r.unary(1000, &q));
  EXPECT_EQ(q, 70u);
  ASSERT_TRUE(r.get(28, &v));
  EXPECT_EQ(v, 0x1234567u);
  EXPECT_LT(r.bits_left(), 8u);
  EXPECT_FALSE(r.get(8, &v));  // past the end: refused, not performed
}

TEST(Bits, UnaryRespectsLimitAndEnd) {
  std::vector<uint8_t> zeros(4, 0);
  BitReader r(zeros);
  uint64_t q;
  EXPECT_FALSE(r.unary(1000, &q));  // no terminating one bit
  std::vector<uint8_t> out;
  BitWriter w(out);
  w.put_zeros(40);
  w.put(1, 1);
  w.flush();
  BitReader r2(out);
  EXPECT_FALSE(r2.unary(39, &q));
}

}  // namespace
}  // namespace sparrow::bits
