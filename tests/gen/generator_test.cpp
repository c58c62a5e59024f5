#include "gen/generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "harness/util.h"

namespace sparrow::gen {
namespace {

GenOptions small() {
  GenOptions o;
  o.model = "qwen3-0.6b";
  o.layers = 1;
  o.vocab = 512;
  return o;
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(Generator, RealisticDensityAndUlpSizedChanges) {
  auto g = UpdateGenerator::create(small());
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto& gen = *g.value();
  std::vector<std::vector<uint16_t>> before;
  for (size_t t = 0; t < gen.tensors().size(); ++t) {
    const uint16_t* b = static_cast<const uint16_t*>(gen.buffers()[t]);
    before.emplace_back(b, b + gen.tensors()[t].count);
  }
  uint64_t changed = gen.step();
  double density = double(changed) / double(gen.elements());
  EXPECT_GT(density, 0.002);
  EXPECT_LT(density, 0.03);
  uint64_t counted = 0, one_ulp = 0;
  for (size_t t = 0; t < gen.tensors().size(); ++t) {
    const uint16_t* b = static_cast<const uint16_t*>(gen.buffers()[t]);
    for (size_t i = 0; i < before[t].size(); ++i) {
      if (b[i] != before[t][i]) {
        ++counted;
        one_ulp += std::abs(int(b[i]) - int(before[t][i])) == 1;
      }
    }
  }
  EXPECT_EQ(counted, changed);
  // Rounding makes most steps one ulp; weights near zero (tiny ulps) move by more.
  EXPECT_GT(double(one_ulp) / double(counted), 0.85);
}

TEST(Generator, DeterministicAcrossThreadCounts) {
  GenOptions a = small(), b = small();
  a.threads = 1;
  b.threads = 3;
  auto ga = UpdateGenerator::create(a).value();
  auto gb = UpdateGenerator::create(b).value();
  ga->step();
  gb->step();
  for (size_t t = 0; t < ga->tensors().size(); ++t)
    ASSERT_EQ(memcmp(ga->buffers()[t], gb->buffers()[t], ga->tensors()[t].bytes()), 0);
}

TEST(Generator, LearningRateDrivesDensity) {
  GenOptions lo = small(), hi = small();
  hi.lr = 1e-5;
  auto glo = UpdateGenerator::create(lo).value();
  auto ghi = UpdateGenerator::create(hi).value();
  EXPECT_GT(ghi->step(), 3 * glo->step());
  GenOptions bad = small();
  bad.lr = 0;
  EXPECT_EQ(UpdateGenerator::create(bad).status().code(), Code::kInvalidArgument);
}

// The benchmarks' synthetic first version: weight-like, so it compresses as little as a model's does.
TEST(FillLikeWeights, FloatTypesLookLikeWeightsOthersAreRandomBits) {
  const uint64_t n = (1 << 17) + 3;  // two blocks and a tail
  std::vector<uint16_t> a(n), b(n), c(n);
  fill_like_weights(a.data(), n, 9, 7, 2);
  fill_like_weights(b.data(), n, 9, 7, 1);
  fill_like_weights(c.data(), n, 9, 8, 1);
  EXPECT_EQ(a, b) << "the same seed must give the same bits whatever the threads";
  EXPECT_NE(a, c);
  double sum = 0, sq = 0;
  std::vector<uint64_t> low(256, 0);
  for (uint16_t v : a) {
    const double w = bf16_to_float(v);
    ASSERT_TRUE(std::isfinite(w));
    sum += w, sq += w * w;
    low[v & 0xff]++;
  }
  const double mean = sum / double(n), sd = std::sqrt(sq / double(n) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, 0.02, 0.002);
  double bits = 0;  // entropy of the low byte (sign bit of the mantissa's end and 7 mantissa bits)
  for (uint64_t k : low)
    if (k) bits -= double(k) / double(n) * std::log2(double(k) / double(n));
  EXPECT_GT(bits, 7.9) << "the mantissa bytes must not be a pattern a compressor finds";
  std::vector<float> f(n);
  fill_like_weights(f.data(), n, 7, 7);
  for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(float_to_bf16(f[i]), a[i]) << i;  // the same values, as float32
  std::vector<uint8_t> bytes(n);
  fill_like_weights(bytes.data(), n, 1, 7);
  std::vector<uint64_t> hist(256, 0);
  for (uint8_t v : bytes) hist[v]++;
  for (uint64_t k : hist) EXPECT_NEAR(double(k), double(n) / 256, double(n) / 256 * 0.2);
}

TEST(MutateExact, ChangesExactlyTheRequestedCount) {
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    for (double d : {0.0, 0.01, 0.5, 1.0}) {
      const uint64_t n = 10007;
      auto buf = test::random_bytes(n * es, es);
      auto orig = buf;
      uint64_t k = mutate_exact(buf.data(), n, es, d, 5);
      EXPECT_EQ(k, uint64_t(std::llround(d * n)));
      uint64_t diff = 0;
      for (uint64_t i = 0; i < n; ++i) diff += memcmp(&buf[i * es], &orig[i * es], es) != 0;
      EXPECT_EQ(diff, k) << "es=" << es << " d=" << d;
    }
  }
}

// Every k-subset equally likely: each position is picked about equally often over many seeds, and so
// is each pair of neighbours (a clustered or a too regular choice fails one of the two).
TEST(MutateExact, ChoosesPositionsUniformly) {
  const uint64_t n = 1000, k = 100, trials = 4000;
  std::vector<uint64_t> hits(n, 0);
  uint64_t adjacent = 0;
  for (uint64_t t = 0; t < trials; ++t) {
    std::vector<uint8_t> buf(n, 0);
    ASSERT_EQ(mutate_exact(buf.data(), n, 1, double(k) / n, 100 + t), k);
    for (uint64_t i = 0; i < n; ++i) {
      hits[i] += buf[i] != 0;
      adjacent += i + 1 < n && buf[i] != 0 && buf[i + 1] != 0;
    }
  }
  const double want = double(trials) * k / n, sd = std::sqrt(want * (1 - double(k) / n));
  for (uint64_t i = 0; i < n; ++i) ASSERT_NEAR(double(hits[i]), want, 6 * sd) << "position " << i;
  // Neighbours both picked: (n - 1) k (k - 1) / (n (n - 1)) per trial for a uniform k-subset.
  const double pairs = double(trials) * k * (k - 1) / n;
  EXPECT_NEAR(double(adjacent), pairs, 6 * std::sqrt(pairs));
}

}  // namespace
}  // namespace sparrow::gen

namespace sparrow::gen {
namespace {

TEST(OpenModel, WorkersGetTheTrainersLayoutWithoutTheOptimizer) {
  GenOptions go;
  go.model = "qwen3-0.6b";
  go.layers = 1;
  go.vocab = 256;
  auto trainer = open_model(go, true);
  auto worker = open_model(go, false);
  ASSERT_TRUE(trainer.ok()) << trainer.status().to_string();
  ASSERT_TRUE(worker.ok()) << worker.status().to_string();
  ASSERT_NE(trainer->gen, nullptr);
  EXPECT_EQ(worker->gen, nullptr);
  ASSERT_EQ(trainer->tensors.size(), worker->tensors.size());
  for (size_t i = 0; i < worker->tensors.size(); ++i) {
    EXPECT_EQ(trainer->tensors[i].name, worker->tensors[i].name);
    EXPECT_EQ(trainer->tensors[i].count, worker->tensors[i].count);
  }
  go.model = "no-such-model";
  EXPECT_FALSE(open_model(go, false).ok());
  EXPECT_FALSE(open_model(go, true).ok());
}

}  // namespace
}  // namespace sparrow::gen
