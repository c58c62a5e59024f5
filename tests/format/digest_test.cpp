#include "format/digest.h"

#include <gtest/gtest.h>

#include <vector>

#include "harness/util.h"

namespace sparrow::format {
namespace {

TEST(Digest, RangeSumsEqualWholeAndThreadsDoNotMatter) {
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    const uint64_t n = 3 * (1 << 20) + 17;
    auto buf = test::random_bytes(n * es, es);
    uint64_t whole = digest_range(5, buf.data(), 0, n, es);
    uint64_t parts = digest_range(5, buf.data(), 0, 1000, es) + digest_range(5, buf.data() + 1000 * es, 1000, n - 1000, es);
    EXPECT_EQ(whole, parts);
    EXPECT_EQ(digest_tensor(5, buf.data(), n, es, 1), whole);
    EXPECT_EQ(digest_tensor(5, buf.data(), n, es, 3), whole);
  }
}

TEST(Digest, VectorPathEqualsScalarForEverySizeOffsetAndTensor) {
  uint64_t seed = 11;
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    auto buf = test::random_bytes(5000 * es, es + 40);
    for (int trial = 0; trial < 40; ++trial) {
      uint64_t off = test::rng_next(seed) % 4000, n = test::rng_next(seed) % 1000;
      uint32_t t = uint32_t(test::rng_next(seed) % 300);
      uint64_t first = trial % 3 == 0 ? (uint64_t(1) << 39) + off : off;  // large indices too
      EXPECT_EQ(digest_range(t, buf.data() + off * es, first, n, es), digest_range_scalar(t, buf.data() + off * es, first, n, es))
          << "es " << es << " first " << first << " n " << n << " tensor " << t;
    }
  }
}

// A chunk's digest change: the batched function (AVX2 four changes at a time, where the CPU has it;
// the scalar loop for the tail and for chunks too far into a tensor) equals element_hash_delta summed
// change by change, for every element size, counts around the vector width and large offsets.
TEST(Digest, DeltasOfAChunkEqualTheSumOfEachChange) {
  uint64_t seed = 23;
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    for (size_t k : {0u, 1u, 3u, 4u, 5u, 8u, 9u, 31u, 1000u}) {
      std::vector<uint32_t> pos(k);
      uint32_t at = 0;
      for (auto& p : pos) p = at += uint32_t(1 + test::rng_next(seed) % 200);
      const auto oldv = test::random_bytes(k * es, es * 100 + k), newv = test::random_bytes(k * es, es * 100 + k + 1);
      for (uint64_t first : {uint64_t(0), uint64_t(12345), (uint64_t(1) << 39), (uint64_t(1) << 40) - 100}) {
        const uint32_t t = uint32_t(test::rng_next(seed) % 300);
        uint64_t want = 0;
        for (size_t j = 0; j < k; ++j)
          want += element_hash_delta(t, first + pos[j], load_elem(&oldv[j * es], es), load_elem(&newv[j * es], es));
        EXPECT_EQ(digest_deltas(t, first, pos.data(), k, es, oldv.data(), newv.data()), want)
            << "es " << es << " k " << k << " first " << first;
        EXPECT_EQ(digest_deltas_scalar(t, first, pos.data(), k, es, oldv.data(), newv.data()), want);
      }
    }
  }
}

TEST(Digest, IncrementalUpdateMatchesRecomputation) {
  const uint64_t n = 10000;
  auto buf = test::random_bytes(n * 2, 7);
  uint64_t d = digest_range(0, buf.data(), 0, n, 2);
  uint64_t s = 99;
  for (int i = 0; i < 100; ++i) {
    uint64_t at = test::rng_next(s) % n;
    uint64_t old = load_elem(&buf[at * 2], 2);
    uint64_t nw = test::rng_next(s) & 0xffff;
    store_elem(&buf[at * 2], 2, nw);
    d += element_hash(0, at, nw) - element_hash(0, at, old);
  }
  EXPECT_EQ(d, digest_range(0, buf.data(), 0, n, 2));
}

TEST(Digest, SensitiveToPositionValueAndTensor) {
  uint16_t a[2] = {1, 2}, b[2] = {2, 1};
  EXPECT_NE(digest_range(0, a, 0, 2, 2), digest_range(0, b, 0, 2, 2));  // a permutation is a change
  EXPECT_NE(digest_range(0, a, 0, 2, 2), digest_range(1, a, 0, 2, 2));
  // -0.0f and +0.0f differ in bits, so they differ in digest.
  uint32_t pz = 0x00000000, nz = 0x80000000;
  EXPECT_NE(digest_range(0, &pz, 0, 1, 4), digest_range(0, &nz, 0, 1, 4));
}

TEST(Checksum, DetectsBitFlip) {
  auto buf = test::random_bytes(4096, 3);
  uint64_t c = checksum(buf.data(), buf.size());
  buf[1234] ^= 0x10;
  EXPECT_NE(c, checksum(buf.data(), buf.size()));
}

}  // namespace
}  // namespace sparrow::format
