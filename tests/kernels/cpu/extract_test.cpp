#include "kernels/cpu/extract.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "harness/util.h"

namespace sparrow::kernels::cpu {
namespace {

struct Out {
  std::vector<uint32_t> pos;
  std::vector<uint8_t> oldv, newv, shadow;
};

Out run(ExtractFn fn, const std::vector<uint8_t>& cur, std::vector<uint8_t> shadow, uint32_t es, size_t offset = 0) {
  uint32_t n = uint32_t((cur.size() - offset) / es);
  Out o;
  o.pos.resize(n + 1);
  o.oldv.resize(size_t(n) * es + 8);
  o.newv.resize(size_t(n) * es + 8);
  size_t k = fn(cur.data() + offset, shadow.data() + offset, n, es, o.pos.data(), o.oldv.data(), o.newv.data());
  o.pos.resize(k);
  o.oldv.resize(k * es);
  o.newv.resize(k * es);
  o.shadow = shadow;
  return o;
}

TEST(Extract, EveryIsaMatchesScalarOracle) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) {
      GTEST_LOG_(INFO) << isa_name(isa) << " not supported on this CPU; skipped";
      continue;
    }
    for (uint32_t es : {1u, 2u, 4u, 8u})
      for (uint32_t n : {0u, 1u, 31u, 32u, 127u, 128u, 129u, 1000u, 65536u + 77u})
        for (double p : {0.0, 0.001, 0.01, 0.2, 1.0}) {
          std::vector<uint8_t> shadow = test::random_bytes(size_t(n) * es + 3, n * 31 + es);
          std::vector<uint8_t> cur = shadow;
          uint64_t s = n + es + uint64_t(p * 1000);
          for (uint32_t i = 0; i < n; ++i)
            if (double(test::rng_next(s) >> 11) * 0x1.0p-53 < p)
              cur[size_t(i) * es + (test::rng_next(s) % es)] ^= uint8_t(1 + test::rng_next(s) % 255);
          for (size_t off : {size_t(0), size_t(1), size_t(3)}) {  // unaligned buffers too
            if (size_t(n) * es + 3 < off) continue;
            std::vector<uint8_t> c2(cur.begin(), cur.begin() + off + size_t(n) * es);
            std::vector<uint8_t> s2(shadow.begin(), shadow.begin() + off + size_t(n) * es);
            Out ref = run(extract_scalar, c2, s2, es, off);
            Out got = run(extract_fn(isa), c2, s2, es, off);
            ASSERT_EQ(got.pos, ref.pos) << isa_name(isa) << " es=" << es << " n=" << n << " p=" << p;
            EXPECT_EQ(got.oldv, ref.oldv);
            EXPECT_EQ(got.newv, ref.newv);
            EXPECT_EQ(got.shadow, ref.shadow);
            // Refreshed: the extracted range of the shadow now equals current.
            EXPECT_TRUE(std::equal(got.shadow.begin() + off, got.shadow.end(), c2.begin() + off));
          }
        }
  }
}

TEST(Extract, ScalarFindsExactlyTheChangedBits) {
  // +0 vs -0 and NaN payloads differ in bits; identical NaNs do not.
  const uint32_t shadow_bits[] = {0x00000000, 0x7fc00000, 0x7fc00001, 0x3f800000, 0x00000001};
  const uint32_t cur_bits[] = {0x80000000, 0x7fc00000, 0x7fc00002, 0x3f800000, 0x00000002};
  std::vector<uint8_t> sh(sizeof shadow_bits), cu(sizeof cur_bits);
  memcpy(sh.data(), shadow_bits, sizeof shadow_bits);
  memcpy(cu.data(), cur_bits, sizeof cur_bits);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    Out o = run(extract_fn(isa), cu, sh, 4);
    EXPECT_EQ(o.pos, (std::vector<uint32_t>{0, 2, 4})) << isa_name(isa);
  }
}

TEST(Extract, GatherScatterRoundTrip) {
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    auto buf = test::random_bytes(100 * es, es);
    std::vector<uint32_t> pos = {0, 7, 50, 99};
    std::vector<uint8_t> vals(pos.size() * es), back(pos.size() * es);
    gather(buf.data(), pos.data(), pos.size(), es, vals.data());
    auto other = test::random_bytes(100 * es, es + 100);
    scatter(other.data(), pos.data(), pos.size(), es, vals.data());
    gather(other.data(), pos.data(), pos.size(), es, back.data());
    EXPECT_EQ(vals, back);
    EXPECT_EQ(memcmp(other.data() + 50 * es, buf.data() + 50 * es, es), 0);
  }
}

// Scatter runs a prefetching loop then a tail: counts on both sides of its distance (16), every
// element size; exactly the listed elements change.
TEST(Extract, ScatterWritesExactlyTheListedElements) {
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    for (size_t k : {0u, 1u, 15u, 16u, 17u, 33u, 1000u}) {
      const size_t n = 5000;
      std::vector<uint32_t> pos;
      for (size_t i = 0; i < k; ++i) pos.push_back(uint32_t(i * (n / 1000) + (i % 3)));
      const auto vals = test::random_bytes(k * es, uint64_t(es * 7 + k));
      auto buf = test::random_bytes(n * es, es + 1), want = buf;
      for (size_t i = 0; i < k; ++i) memcpy(want.data() + size_t(pos[i]) * es, vals.data() + i * es, es);
      scatter(buf.data(), pos.data(), k, es, vals.data());
      EXPECT_EQ(buf, want) << "element size " << es << ", " << k << " changes";
    }
  }
}

TEST(Extract, BestIsaIsSupported) { EXPECT_TRUE(isa_supported(best_isa())); }

}  // namespace
}  // namespace sparrow::kernels::cpu
