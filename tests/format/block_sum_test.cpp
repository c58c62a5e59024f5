#include "format/block_sum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "format/digest.h"
#include "harness/util.h"

namespace sparrow::format {
namespace {

// Every length (odd ones and partial windows included) and offset: the AVX2 path equals the
// portable one.
TEST(BlockSum, VectorPathEqualsScalarForEveryLengthAndOffset) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 on this CPU";
  auto buf = test::random_bytes(40000, 3);
  uint64_t seed = 5;
  for (size_t len : {1024ul, 1025ul, 2048ul, 3000ul, 4095ul, 32768ul}) EXPECT_EQ(block_sum_avx2(buf.data(), len), block_sum_scalar(buf.data(), len)) << len;
  for (int trial = 0; trial < 200; ++trial) {
    const size_t off = test::rng_next(seed) % 1000, len = 1024 + test::rng_next(seed) % 30000;
    ASSERT_EQ(block_sum_avx2(buf.data() + off, len), block_sum_scalar(buf.data() + off, len)) << off << " " << len;
    ASSERT_EQ(block_sum(buf.data() + off, len), block_sum_scalar(buf.data() + off, len));
  }
}

// The point of the sum: a block's sum after random element changes equals its old sum moved by the
// changes' deltas, for every element size (several changes per word, windows and blocks with a
// partial last window included).
TEST(BlockSum, ChangesMoveTheSumByTheirDeltas) {
  uint64_t seed = 17;
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    for (uint64_t n : {1ull, 7ull, 511ull, 512ull, 513ull, 5000ull}) {
      auto buf = test::random_bytes(n * es, es + uint32_t(n));
      uint64_t sum = block_sum(buf.data(), buf.size());
      for (int k = 0; k < 300; ++k) {
        const uint64_t i = test::rng_next(seed) % n;
        const uint64_t old_bits = load_elem(&buf[i * es], es);
        uint64_t new_bits = test::rng_next(seed);
        if (k % 3 == 0) new_bits = old_bits ^ (uint64_t(1) << (test::rng_next(seed) % (8 * es)));  // one bit
        store_elem(&buf[i * es], es, new_bits);
        sum = block_sum_add(sum, block_sum_delta(i, es, old_bits, load_elem(&buf[i * es], es)));
      }
      EXPECT_EQ(sum, block_sum(buf.data(), buf.size())) << "es " << es << " n " << n;
      EXPECT_EQ(sum, block_sum_scalar(buf.data(), buf.size()));
    }
  }
}

// A chunk's changes at once (block_sum_deltas: for 2-byte elements the window keys multiply once per
// window) move the sum exactly as block_sum_delta change by change: every element size, positions
// within one window and across many, unchanged elements among them, and positions out of order.
TEST(BlockSum, DeltasOfManyChangesEqualTheFoldOfEach) {
  uint64_t seed = 29;
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    for (uint32_t gap : {1u, 7u, 300u, 5000u}) {
      for (size_t k : {0u, 1u, 2u, 100u}) {
        std::vector<uint32_t> pos(k);
        uint32_t at = 0;
        for (auto& p : pos) p = at += uint32_t(1 + test::rng_next(seed) % gap);
        if (gap == 300 && k > 2) std::swap(pos[0], pos[k - 1]);
        const auto oldv = test::random_bytes(k * es, es * 10 + k);
        auto newv = test::random_bytes(k * es, es * 10 + k + 1);
        if (k > 1) memcpy(&newv[es], &oldv[es], es);  // one unchanged
        uint64_t want = 0;
        for (size_t j = 0; j < k; ++j)
          want = block_sum_add(want, block_sum_delta(pos[j], es, load_elem(&oldv[j * es], es), load_elem(&newv[j * es], es)));
        EXPECT_EQ(block_sum_deltas(pos.data(), k, es, oldv.data(), newv.data()), want)
            << "es " << es << " gap " << gap << " k " << k;
      }
    }
  }
}

// Any one flipped bit, anywhere in a block, changes both lanes of its sum.
TEST(BlockSum, EveryFlippedBitIsFound) {
  auto buf = test::random_bytes(4099, 9);
  const uint64_t s0 = block_sum(buf.data(), buf.size());
  for (size_t byte = 0; byte < buf.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      buf[byte] ^= uint8_t(1u << bit);
      const uint64_t s1 = block_sum(buf.data(), buf.size());
      buf[byte] ^= uint8_t(1u << bit);
      ASSERT_NE(uint32_t(s1 >> 32), uint32_t(s0 >> 32)) << byte << ":" << bit;
      ASSERT_NE(uint32_t(s1), uint32_t(s0)) << byte << ":" << bit;
    }
  }
}

// Position matters: swapping two different words, or two whole windows, is found.
TEST(BlockSum, MovedContentsAreFound) {
  auto buf = test::random_bytes(8192, 21);
  const uint64_t s0 = block_sum(buf.data(), buf.size());
  auto swapped = buf;
  std::swap(swapped[10], swapped[4000]);
  ASSERT_NE(swapped, buf);
  EXPECT_NE(block_sum(swapped.data(), swapped.size()), s0);
  auto windows = buf;
  std::memcpy(windows.data(), buf.data() + 1024, 1024);
  std::memcpy(windows.data() + 1024, buf.data(), 1024);
  EXPECT_NE(block_sum(windows.data(), windows.size()), s0);
  std::vector<uint8_t> zero(8192, 0);
  EXPECT_NE(block_sum(buf.data(), buf.size()), block_sum(zero.data(), zero.size()));
}

}  // namespace
}  // namespace sparrow::format
