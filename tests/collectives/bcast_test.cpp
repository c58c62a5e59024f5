// Dense and sparse broadcasts end to end: ranks as threads over real transports.
#include "collectives/bcast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "api/api_internal.h"
#include "core/params.h"
#include "format/checkpoint.h"
#include "gen/generator.h"
#include "kernels/device.h"
#include "transport/seal.h"
#include "transport/transport.h"
#include "harness/comm_harness.h"
#include "harness/util.h"

namespace sparrow {
namespace {

using test::Comms;

// Parameter: a transport, "+on" to seal every connection (loopback included).
class BcastTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    params::clear_overrides();
    std::string t = GetParam();
    if (const size_t plus = t.find('+'); plus != std::string::npos) {
      if (!transport::seal::available()) GTEST_SKIP() << "built without OpenSSL: frames cannot be sealed";
      ASSERT_TRUE(params::set_override("ENCRYPT", t.substr(plus + 1)).ok());
      t = t.substr(0, plus);
    }
    auto names = transport::backend_names();
    if (std::find(names.begin(), names.end(), t) == names.end())
      GTEST_SKIP() << "transport " << t << " not in this build";
    ASSERT_TRUE(params::set_override("PROBE_MS", "40").ok());
    ASSERT_TRUE(params::set_override("TRANSPORT", t).ok());
    ASSERT_TRUE(params::set_override("TIMEOUT_S", "60").ok());
  }
  void TearDown() override { params::clear_overrides(); }
};

TEST_P(BcastTest, DenseEveryDatatypeOddCountsAndRoots) {
  Comms cs(4);
  for (int dt = 0; dt <= 9; ++dt) {
    const uint32_t es = format::dtype_size(uint8_t(dt));
    for (size_t count : {size_t(0), size_t(1), size_t(1000003)}) {
      int root = (dt + int(count)) % 4;
      auto src = test::random_bytes(count * es, dt * 7 + count);
      std::vector<std::vector<uint8_t>> dst(4, std::vector<uint8_t>(count * es, 0));
      auto rc = cs.run([&](int r) {
        return sparrowBroadcast(r == root ? src.data() : nullptr, dst[r].data(), count, sparrowDataType_t(dt), root,
                                cs.c[r], nullptr);
      });
      for (int r = 0; r < 4; ++r) {
        ASSERT_EQ(rc[r], sparrowSuccess) << "dt " << dt << " count " << count << " rank " << r << ": "
                                         << sparrowGetLastError(cs.c[r]);
        EXPECT_EQ(dst[r], src) << "dt " << dt << " count " << count << " rank " << r;
      }
    }
  }
  // In place.
  std::vector<std::vector<float>> buf(4, std::vector<float>(777, 0.f));
  for (size_t i = 0; i < 777; ++i) buf[2][i] = float(i) * 0.5f;
  auto rc = cs.run([&](int r) { return sparrowBcast(buf[r].data(), 777, sparrowFloat32, 2, cs.c[r], nullptr); });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(rc[r], sparrowSuccess);
    EXPECT_EQ(buf[r], buf[2]);
  }
}

TEST_P(BcastTest, DenseGroupIsOneOperationAndAMismatchFailsEveryRank) {
  Comms cs(4);
  const int root = 1;
  std::vector<size_t> counts = {0, 1, 4097, 300001, 77, 1 << 20};
  std::vector<std::vector<float>> src(counts.size()), dst(4 * counts.size());
  for (size_t k = 0; k < counts.size(); ++k) {
    src[k].resize(counts[k]);
    for (size_t i = 0; i < counts[k]; ++i) src[k][i] = float(k * 1000 + i);
    for (int r = 0; r < 4; ++r) dst[r * counts.size() + k].assign(counts[k], -1.f);
  }
  sparrowStats before = SPARROW_STATS_INITIALIZER;
  ASSERT_EQ(sparrowCommGetStats(cs.c[root], &before), sparrowSuccess);
  auto group = [&](int bad_rank) {
    return cs.run([&](int r) {
      sparrowGroupStart();
      for (size_t k = 0; k < counts.size(); ++k) {
        size_t n = counts[k] + (r == bad_rank && k == 3 ? 1 : 0);  // one argument mismatch
        if (r == bad_rank && k == 3) dst[r * counts.size() + k].resize(n);
        sparrowBroadcast(src[k].data(), dst[r * counts.size() + k].data(), n, sparrowFloat32, root, cs.c[r], nullptr);
      }
      return sparrowGroupEnd();
    });
  };
  auto rc = group(-1);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(rc[r], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(cs.c[r]);
    for (size_t k = 0; k < counts.size(); ++k) EXPECT_EQ(dst[r * counts.size() + k], src[k]) << "rank " << r << " buffer " << k;
  }
  sparrowStats after = SPARROW_STATS_INITIALIZER;
  ASSERT_EQ(sparrowCommGetStats(cs.c[root], &after), sparrowSuccess);
  EXPECT_EQ(after.ops, before.ops + 1) << "the group is one operation";
  size_t total = 0;
  for (size_t n : counts) total += n * 4;
  EXPECT_EQ(after.denseBytes, total);
  rc = group(2);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(rc[r], sparrowInvalidUsage) << "rank " << r << ": " << sparrowGetLastError(cs.c[r]);
}

// A scaled Qwen3 model's realistic steps, and zeroed receive buffers of its layout for n ranks.
std::unique_ptr<gen::UpdateGenerator> small_model(int64_t vocab) {
  gen::GenOptions go;
  go.model = "qwen3-0.6b";
  go.layers = 1;
  go.vocab = vocab;
  auto gr = gen::UpdateGenerator::create(go);
  EXPECT_TRUE(gr.ok()) << gr.status().to_string();
  return gr.ok() ? std::move(gr.value()) : nullptr;
}
std::vector<std::vector<std::vector<uint8_t>>> zeroed(int n, const std::vector<kernels::cpu::TensorSpec>& ts) {
  std::vector<std::vector<std::vector<uint8_t>>> recv(n);
  for (int r = 0; r < n; ++r)
    for (auto& t : ts) recv[r].emplace_back(t.bytes(), 0);
  return recv;
}

// One rank's part of a model's step: every tensor in one group (the root sends `src`).
sparrowResult_t model_step(sparrowComm_t c, int r, int root, const std::vector<kernels::cpu::TensorSpec>& ts,
                           const std::vector<const void*>& src, std::vector<std::vector<uint8_t>>& recv) {
  sparrowGroupStart();
  for (size_t i = 0; i < ts.size(); ++i)
    sparrowSparseBcast(src[i], r == root ? nullptr : recv[i].data(), ts[i].count, sparrowBfloat16, root, c, nullptr);
  return sparrowGroupEnd();
}

TEST_P(BcastTest, SparseRealisticStepsBitExactFromANonZeroRoot) {
  auto gp = small_model(2048);
  ASSERT_TRUE(gp);
  auto& g = *gp;
  const int n = 5, root = 3;
  Comms cs(n);
  const auto& ts = g.tensors();
  auto recv = zeroed(n, ts);
  for (int step = 0; step < 6; ++step) {
    if (step > 0) g.step();
    auto src = g.buffers();
    auto rc = cs.run([&](int r) { return model_step(cs.c[r], r, root, ts, src, recv[r]); });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(rc[r], sparrowSuccess) << "step " << step << " rank " << r << ": " << sparrowGetLastError(cs.c[r]);
      if (r == root) continue;
      for (size_t i = 0; i < ts.size(); ++i)
        ASSERT_EQ(memcmp(recv[r][i].data(), src[i], ts[i].bytes()), 0) << "step " << step << " rank " << r << " tensor " << i;
    }
    sparrowStats st = SPARROW_STATS_INITIALIZER;
    ASSERT_EQ(sparrowCommGetStats(cs.c[root], &st), sparrowSuccess);
    EXPECT_EQ(st.ops, uint64_t(step + 1)) << "a group is one operation";
    EXPECT_EQ(st.full, step == 0 ? 1 : 0);
    if (step > 0) {
      EXPECT_GT(st.density, 0.001);
      EXPECT_LT(st.wireBytes * 50, st.denseBytes) << "step " << step;
    }
  }
}

TEST_P(BcastTest, SparseEveryDatatypeSpecialValuesAndCountZero) {
  Comms cs(3);
  for (int dt = 0; dt <= 9; ++dt) {
    const uint32_t es = format::dtype_size(uint8_t(dt));
    const size_t count = 4099;
    auto src = test::random_bytes(count * es, dt + 1);
    std::vector<std::vector<uint8_t>> dst(3, std::vector<uint8_t>(count * es, 0));
    for (int step = 0; step < 3; ++step) {
      if (step > 0) gen::mutate_exact(src.data(), count, es, 0.02, dt * 10 + step);
      if (step == 2 && es >= 4) {  // -0 and NaN payloads: bits, not values
        uint32_t negzero = 0x80000000u, nan = 0x7fc12345u;
        memcpy(src.data(), &negzero, 4);
        memcpy(src.data() + es, &nan, 4);
      }
      auto rc = cs.run([&](int r) {
        return sparrowSparseBcast(src.data(), r == 1 ? nullptr : dst[r].data(), count, sparrowDataType_t(dt), 1,
                                  cs.c[r], nullptr);
      });
      for (int r = 0; r < 3; ++r) {
        ASSERT_EQ(rc[r], sparrowSuccess) << "dt " << dt << " step " << step << ": " << sparrowGetLastError(cs.c[r]);
        if (r != 1) {
          EXPECT_EQ(dst[r], src) << "dt " << dt << " step " << step << " rank " << r;
        }
      }
    }
  }
  uint8_t dummy = 0;
  auto rc = cs.run([&](int r) { return sparrowSparseBcast(&dummy, &dummy, 0, sparrowFloat32, 0, cs.c[r], nullptr); });
  for (auto x : rc) EXPECT_EQ(x, sparrowSuccess);
}

// A rank that rooted sparse steps, then receives one from another root, still holds the
// acknowledgements of its own steps (a receiver's clean-up of abandoned operations once dropped
// them): its sparrowCommDestroy drains them at once instead of waiting out SPARROW_TIMEOUT_S.
TEST_P(BcastTest, RootsAcknowledgementsSurviveItsCallAsAReceiver) {
  Comms cs(3);
  std::vector<uint16_t> a(4096, 1), b(4096, 2);
  std::vector<std::vector<uint16_t>> got(3, std::vector<uint16_t>(4096, 0)), got_b = got;
  for (int step = 0; step < 2; ++step) {
    a[size_t(step)] = uint16_t(100 + step);
    auto rc = cs.run([&](int r) {
      return sparrowSparseBcast(a.data(), got[size_t(r)].data(), a.size(), sparrowBfloat16, 1, cs.c[size_t(r)], nullptr);
    });
    for (auto x : rc) ASSERT_EQ(x, sparrowSuccess);
  }
  auto rc = cs.run([&](int r) {
    return sparrowSparseBcast(b.data(), got_b[size_t(r)].data(), b.size(), sparrowBfloat16, 0, cs.c[size_t(r)], nullptr);
  });
  for (auto x : rc) ASSERT_EQ(x, sparrowSuccess);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(sparrowCommDestroy(cs.c[1]), sparrowSuccess);
  cs.c[1] = nullptr;
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0) << "rank 1's destroy waited for acknowledgements it had thrown away";
}

TEST_P(BcastTest, ReceiverThatModifiedItsBufferIsRefusedThenRepairedAtTheNextCall) {
  Comms cs(3);
  const size_t count = 50000;
  std::vector<uint16_t> src(count);
  uint64_t s = 1;
  for (auto& v : src) v = uint16_t(test::rng_next(s));
  std::vector<std::vector<uint16_t>> dst(3, std::vector<uint16_t>(count, 0));
  auto step = [&](double density, uint64_t seed) {
    if (density > 0) gen::mutate_exact(src.data(), count, 2, density, seed);
    return cs.run([&](int r) {
      return sparrowSparseBcast(src.data(), r == 0 ? nullptr : dst[r].data(), count, sparrowBfloat16, 0, cs.c[r], nullptr);
    });
  };
  auto rc = step(0, 0);
  for (auto x : rc) ASSERT_EQ(x, sparrowSuccess);
  uint64_t resyncs = 0;
  // Rank 2 writes into its copy: an element the next step changes, then one it does not change.
  for (bool changed : {true, false}) {
    const size_t at = changed ? 10 : 20;
    dst[2][at] ^= 0x1;
    if (changed) src[at] ^= 0x100;
    auto before = dst[2];
    rc = step(0.01, changed ? 5 : 6);
    ASSERT_EQ(src[20] ^ dst[2][20], changed ? 0 : 1) << "the test wrote where it meant to";
    EXPECT_EQ(rc[0], sparrowSuccess);
    EXPECT_EQ(rc[1], sparrowSuccess);
    ASSERT_EQ(rc[2], sparrowVersionMismatch) << "changed " << changed << ": " << sparrowGetLastError(cs.c[2]);
    EXPECT_NE(std::string(sparrowGetLastError(cs.c[2])).find("written to since that step"), std::string::npos)
        << sparrowGetLastError(cs.c[2]);
    EXPECT_EQ(dst[2], before) << "a rejected step leaves the buffer as it was";
    EXPECT_EQ(dst[1], src);
    // The very next call repairs it with a full snapshot; the others never see an error.
    rc = step(0.01, changed ? 7 : 8);
    for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(cs.c[r]);
    EXPECT_EQ(dst[1], src);
    EXPECT_EQ(dst[2], src);
    sparrowStats st = SPARROW_STATS_INITIALIZER;
    sparrowCommGetStats(cs.c[2], &st);
    EXPECT_EQ(st.resyncs, ++resyncs);
  }
  rc = step(0.01, 17);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess);
  EXPECT_EQ(dst[2], src);
}

// Three ranks over one bf16 buffer: the root's source (values near 1.0) and the receivers' copies.
struct OneBuffer {
  Comms cs;
  std::vector<uint16_t> src;
  std::vector<std::vector<uint16_t>> dst;
  OneBuffer(size_t count, uint64_t seed, int spread) : cs(3), src(count), dst(3, std::vector<uint16_t>(count, 0)) {
    for (auto& v : src) v = uint16_t(0x3c00 + test::rng_next(seed) % uint64_t(spread));
  }
  sparrowResult_t call(int r) {
    return sparrowSparseBcast(src.data(), r == 0 ? nullptr : dst[r].data(), src.size(), sparrowBfloat16, 0, cs.c[r], nullptr);
  }
};

// A receiver that gave up on five steps in a row (each call timed out: the root came later) holds
// the version before them; its next call catches it up by the five deltas the root retained plus that
// step's own, composed and written once: bit-exact, with no full snapshot, in about five deltas' bytes.
// Staged, the same. One that was also written to meanwhile is refused and repaired by a snapshot.
TEST_P(BcastTest, ReceiverThatFellBehindCatchesUpByTheDeltasItMissed) {
  ASSERT_TRUE(params::set_override("ALGO", "flat").ok());
  OneBuffer b(1 << 21, 3, 2048);
  auto& [cs, src, dst] = b;
  const size_t count = src.size();
  auto call = [&](int r) { return b.call(r); };
  uint64_t seed = 100;
  auto step = [&](bool with2) {
    gen::mutate_exact(src.data(), count, 2, 0.01, seed++);
    return cs.run([&](int r) { return r == 2 && !with2 ? sparrowSuccess : call(r); });
  };
  // Rank 2 gives up on k steps: each of its calls times out before the root's. Only those calls
  // have a 1 s timeout: the others keep the fixture's, so a loaded machine does not fail the steps
  // everyone takes part in.
  auto miss = [&](int k) {
    for (int i = 0; i < k; ++i) {
      ASSERT_TRUE(params::set_override("TIMEOUT_S", "1").ok());
      const sparrowResult_t gave_up = call(2);
      ASSERT_TRUE(params::set_override("TIMEOUT_S", "60").ok());
      ASSERT_EQ(gave_up, sparrowTimeout) << sparrowGetLastError(cs.c[2]);
      auto rc = step(false);
      ASSERT_EQ(rc[0], sparrowSuccess) << sparrowGetLastError(cs.c[0]);
      ASSERT_EQ(rc[1], sparrowSuccess) << sparrowGetLastError(cs.c[1]);
    }
  };
  for (int i = 0; i < 2; ++i)
    for (auto x : step(true)) ASSERT_EQ(x, sparrowSuccess);
  const auto held = dst[2];
  miss(5);
  EXPECT_EQ(dst[2], held) << "a rank that timed out keeps its version";
  auto rc = step(true);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(cs.c[r]);
  ASSERT_EQ(dst[2], src);
  ASSERT_EQ(dst[1], src);
  sparrowStats root = SPARROW_STATS_INITIALIZER, late = SPARROW_STATS_INITIALIZER;
  sparrowCommGetStats(cs.c[0], &root);
  sparrowCommGetStats(cs.c[2], &late);
  // (The root sent one at each of its calls after the first miss; rank 2 had given up on those.)
  EXPECT_GE(root.catchUps, 1u);
  EXPECT_EQ(late.catchUps, 1u);
  EXPECT_EQ(late.resyncs, 1u);
  const double ratio = double(late.catchUpBytes) / double(root.wireBytes);
  EXPECT_GT(ratio, 4.0) << "five deltas";
  EXPECT_LE(ratio, 6.0) << "a rank five steps behind catches up within six deltas' bytes";
  std::printf("caught up 5 steps with %llu bytes = %.2f x one delta (%llu bytes; dense %llu)\n",
              (unsigned long long)late.catchUpBytes, ratio, (unsigned long long)root.wireBytes,
              (unsigned long long)root.denseBytes);
  rc = step(true);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess);
  ASSERT_EQ(dst[2], src);

  // Staged: the catch-up happens in the background; the buffer changes only at the commit.
  miss(1);
  const auto before = dst[2];
  gen::mutate_exact(src.data(), count, 2, 0.01, seed++);
  rc = cs.run([&](int r) {
    if (r != 2) return call(r);
    sparrowResult_t x = sparrowSparseBcastStage(nullptr, dst[2].data(), count, sparrowBfloat16, 0, cs.c[2], nullptr);
    if (x != sparrowSuccess) return x;
    return sparrowStageCommit(cs.c[2]);
  });
  for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(cs.c[r]);
  EXPECT_NE(dst[2], before);
  ASSERT_EQ(dst[2], src);
  sparrowCommGetStats(cs.c[2], &late);
  EXPECT_EQ(late.catchUps, 2u);

  // Behind and written to: the deltas cannot repair that; the call is refused, the next one repairs.
  miss(1);
  dst[2][777] ^= 0x40;
  const auto scribbled = dst[2];
  rc = step(true);
  EXPECT_EQ(rc[0], sparrowSuccess);
  ASSERT_EQ(rc[2], sparrowVersionMismatch) << sparrowGetLastError(cs.c[2]);
  EXPECT_EQ(dst[2], scribbled);
  rc = step(true);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(cs.c[r]);
  ASSERT_EQ(dst[2], src);
  sparrowCommGetStats(cs.c[2], &late);
  EXPECT_EQ(late.catchUps, 2u) << "the repair was a full snapshot";
  EXPECT_EQ(late.resyncs, 3u);
}

// The chunks a root's stats JSON counts in its "codecs" group `what` ("index" or "values").
uint64_t codec_chunks(const std::string& j, const std::string& what) {
  size_t at = j.find("\"" + what + "\":{");
  if (at == std::string::npos) return 0;
  const size_t end = j.find('}', at);
  uint64_t sum = 0;
  for (size_t c = j.find(':', at + what.size() + 3); c != std::string::npos && c < end; c = j.find(':', c + 1))
    sum += std::stoull(j.substr(c + 1));
  return sum;
}

// What a rank can see of a step: per peer, its bytes and first/last byte; while a call runs, its
// progress from another thread; afterwards the stage-by-stage timing as JSON.
TEST_P(BcastTest, PeerStatsProgressAndStageTimesDescribeTheLastStep) {
  ASSERT_TRUE(params::set_override("ALGO", "flat").ok());
  OneBuffer b(1 << 20, 9, 1024);
  auto& [cs, src, dst] = b;
  const size_t count = src.size();
  auto call = [&](int r) { return b.call(r); };
  for (auto x : cs.run(call)) ASSERT_EQ(x, sparrowSuccess);
  gen::mutate_exact(src.data(), count, 2, 0.01, 77);
  // Rank 2 starts first; a watcher sees its call running before the root even begins.
  std::atomic<bool> seen{false};
  unsigned long long during = 0;
  std::thread watcher([&] {
    int in = 0;
    while (!in) ASSERT_EQ(sparrowCommGetProgress(cs.c[2], &during, nullptr, &in), sparrowSuccess);
    seen = true;
  });
  std::thread late([&] { EXPECT_EQ(call(2), sparrowSuccess); });
  watcher.join();
  ASSERT_TRUE(seen);
  auto rc = cs.run([&](int r) { return r == 2 ? sparrowSuccess : call(r); });
  late.join();
  for (auto x : rc) ASSERT_EQ(x, sparrowSuccess);
  ASSERT_EQ(dst[2], src);
  unsigned long long got = 0, sent = 0;
  int in = 1;
  ASSERT_EQ(sparrowCommGetProgress(cs.c[2], &got, &sent, &in), sparrowSuccess);
  EXPECT_EQ(in, 0);
  sparrowStats st = SPARROW_STATS_INITIALIZER;
  sparrowCommGetStats(cs.c[0], &st);
  EXPECT_GE(got, st.wireBytes) << "the receiver got the whole step";
  // The root sent the step to both receivers; each received it from the root.
  sparrowPeerStats ps[4];
  int n = 0;
  ASSERT_EQ(sparrowCommGetPeerStats(cs.c[0], ps, 4, &n), sparrowSuccess);
  ASSERT_EQ(n, 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ps[i].rank, i + 1);
    EXPECT_GE(ps[i].bytesSent, st.wireBytes);
    EXPECT_LT(ps[i].bytesSent, st.wireBytes + 4096);
  }
  sparrowStats rst = SPARROW_STATS_INITIALIZER;
  sparrowCommGetStats(cs.c[1], &rst);
  ASSERT_EQ(sparrowCommGetPeerStats(cs.c[1], ps, 4, &n), sparrowSuccess);
  ASSERT_GE(n, 1);
  EXPECT_EQ(ps[0].rank, 0);
  EXPECT_GE(ps[0].bytesReceived, st.wireBytes);
  EXPECT_GE(ps[0].firstByteSeconds, 0);
  EXPECT_GE(ps[0].lastByteSeconds, ps[0].firstByteSeconds);
  EXPECT_LE(ps[0].lastByteSeconds, rst.totalSeconds + 0.05);
  EXPECT_GT(ps[0].rttSeconds, 0) << "rank 0 probed this pair";
  ASSERT_EQ(sparrowCommGetPeerStats(cs.c[1], nullptr, 0, &n), sparrowSuccess) << "counting only";
  EXPECT_EQ(sparrowCommGetPeerStats(cs.c[1], nullptr, 2, &n), sparrowInvalidArgument);
  // JSON: the receiver's stages in order, the root's extraction and encoding.
  size_t need = 0;
  EXPECT_EQ(sparrowCommGetStatsJson(cs.c[1], nullptr, 0, &need), sparrowSuccess) << "the size only";
  ASSERT_GT(need, 10u);
  char small[8];
  EXPECT_EQ(sparrowCommGetStatsJson(cs.c[1], small, sizeof small, &need), sparrowInvalidArgument);
  std::string j(need, '\0');
  ASSERT_EQ(sparrowCommGetStatsJson(cs.c[1], j.data(), j.size(), &need), sparrowSuccess);
  for (const char* k : {"\"role\":\"receiver\"", "\"first_byte\":", "\"last_byte\":", "\"verify\":", "\"decode\":",
                        "\"commit\":", "\"extract\":null", "\"peers\":[{\"rank\":0"})
    EXPECT_NE(j.find(k), std::string::npos) << k << " in " << j;
  ASSERT_EQ(sparrowCommGetStatsJson(cs.c[0], nullptr, 0, &need), sparrowSuccess);
  std::string rj(need, '\0');
  ASSERT_EQ(sparrowCommGetStatsJson(cs.c[0], rj.data(), rj.size(), nullptr), sparrowSuccess);
  EXPECT_NE(rj.find("\"role\":\"root\""), std::string::npos) << rj;
  // The flat tree, its children in send order (by latency in whole ms: a slow probe, as under
  // ThreadSanitizer, can round one of two sub-millisecond latencies up).
  EXPECT_TRUE(rj.find("\"parent\":null,\"children\":[1,2]") != std::string::npos ||
              rj.find("\"parent\":null,\"children\":[2,1]") != std::string::npos)
      << "the flat tree: " << rj;
  EXPECT_NE(j.find("\"parent\":0,\"children\":[]"), std::string::npos) << j;
  EXPECT_EQ(rj.find("\"extract\":null"), std::string::npos) << rj;
  EXPECT_NE(rj.find("\"first_byte\":null"), std::string::npos) << rj;
  // The root says which codecs its chunks took and for what link rate; a receiver chose none.
  EXPECT_NE(j.find("\"codecs\":null"), std::string::npos) << j;
  EXPECT_NE(rj.find("\"codecs\":{\"link_Bps\":"), std::string::npos) << rj;
  EXPECT_GT(codec_chunks(rj, "index"), 0u) << rj;
  EXPECT_EQ(codec_chunks(rj, "index"), codec_chunks(rj, "values")) << "every chunk has one of each: " << rj;
}

// Realistic steps of a group (a model's tensors): receivers scribble on elements the step changes,
// on ones it does not, on several tensors at once, several ranks at once. No call ever reports success
// unless that rank's every tensor equals the root's, bit for bit; a refused rank is untouched and the
// next call repairs it.
TEST_P(BcastTest, ScribbledReceiversNeverGetSuccessWithWrongBits) {
  auto gp = small_model(1024);
  ASSERT_TRUE(gp);
  auto& g = *gp;
  const int n = 4, root = 0;
  Comms cs(n);
  const auto& ts = g.tensors();
  auto recv = zeroed(n, ts);
  auto snapshot_root = [&] {
    std::vector<std::vector<uint8_t>> v;
    auto b = g.buffers();
    for (size_t i = 0; i < ts.size(); ++i) {
      auto p = static_cast<const uint8_t*>(b[i]);
      v.emplace_back(p, p + ts[i].bytes());
    }
    return v;
  };
  uint64_t seed = 5;
  std::vector<bool> refused(n, false);
  for (int step = 0; step < 9; ++step) {
    auto old = snapshot_root();
    if (step > 0) g.step();
    auto now = snapshot_root();
    // Odd steps: ranks 1 and 3 scribble (changed and unchanged elements, 1-3 tensors each).
    std::vector<bool> scribbled(n, false);
    if (step % 2 == 1) {
      for (int r : {1, 3}) {
        int k = 1 + int(test::rng_next(seed) % 3);
        for (int j = 0; j < k; ++j) {
          size_t t = test::rng_next(seed) % ts.size();
          const uint32_t es = ts[t].elem_size();
          size_t e = test::rng_next(seed) % ts[t].count;
          bool want_changed = (j + r) % 2 == 0;
          for (size_t tries = 0; tries < ts[t].count; ++tries, e = (e + 1) % ts[t].count)
            if ((memcmp(&old[t][e * es], &now[t][e * es], es) != 0) == want_changed) break;
          recv[r][t][e * es] ^= 0x40;
        }
        scribbled[r] = true;
      }
    }
    auto before = recv;
    auto src = g.buffers();
    auto rc = cs.run([&](int r) { return model_step(cs.c[r], r, root, ts, src, recv[r]); });
    ASSERT_EQ(rc[root], sparrowSuccess) << sparrowGetLastError(cs.c[root]);
    for (int r = 1; r < n; ++r) {
      if (rc[r] == sparrowSuccess) {
        ASSERT_EQ(recv[r], now) << "success with wrong bits: step " << step << " rank " << r;
        EXPECT_FALSE(scribbled[r]) << "step " << step << " rank " << r << ": a scribble went unnoticed";
      } else {
        ASSERT_EQ(rc[r], sparrowVersionMismatch) << "step " << step << " rank " << r << ": " << sparrowGetLastError(cs.c[r]);
        EXPECT_TRUE(scribbled[r]) << "step " << step << " rank " << r;
        EXPECT_EQ(recv[r], before[r]) << "a refused step writes nothing";
      }
      if (refused[r]) EXPECT_EQ(rc[r], sparrowSuccess) << "the call after a refusal repairs: step " << step;
      refused[r] = rc[r] != sparrowSuccess;
    }
  }
}

// Waits (bounded) until a staged step is ready.
bool wait_ready(sparrowComm_t c) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int ready = 0;
  while (std::chrono::steady_clock::now() < until) {
    if (sparrowStageQuery(c, &ready) != sparrowSuccess) return false;
    if (ready) return true;
    std::this_thread::yield();
  }
  return false;
}

// Stage while the old version stays readable, then commit: through relays (a chain), in a group,
// over several steps; the buffers change only at the commit.
TEST_P(BcastTest, StagedStepsLeaveTheBufferUntilCommit) {
  ASSERT_TRUE(params::set_override("ALGO", "chain").ok());  // ranks 1 and 2 are relays
  Comms cs(4);
  const std::vector<size_t> counts = {300001, 4097, 70000};
  std::vector<std::vector<uint16_t>> src(counts.size());
  uint64_t seed = 3;
  for (size_t k = 0; k < counts.size(); ++k) {
    src[k].resize(counts[k]);
    for (auto& v : src[k]) v = uint16_t(test::rng_next(seed));
  }
  std::vector<std::vector<std::vector<uint16_t>>> dst(4);
  for (int r = 0; r < 4; ++r)
    for (size_t n : counts) dst[r].emplace_back(n, 0);
  for (int step = 0; step < 4; ++step) {
    if (step)
      for (size_t k = 0; k < counts.size(); ++k) gen::mutate_exact(src[k].data(), counts[k], 2, 0.01, 50 + step * 7 + k);
    auto before = dst;
    std::vector<int> ready_after_stage(4, -1);
    const sparrowStats fresh = SPARROW_STATS_INITIALIZER;
    std::vector<sparrowStats> staged_stats(4, fresh);
    auto rc = cs.run([&](int r) {
      sparrowGroupStart();
      for (size_t k = 0; k < counts.size(); ++k)
        sparrowSparseBcastStage(src[k].data(), r == 0 ? nullptr : dst[r][k].data(), counts[k], sparrowBfloat16, 0,
                                cs.c[r], nullptr);
      sparrowResult_t g = sparrowGroupEnd();
      if (g != sparrowSuccess) return g;
      if (r == 0) return sparrowStageCommit(cs.c[r]);  // nothing staged on the root: success
      // Still the previous version, while the step arrives and after it verified.
      if (dst[r] != before[r]) return sparrowInternalError;
      if (!wait_ready(cs.c[r])) return sparrowTimeout;
      sparrowCommGetStats(cs.c[r], &staged_stats[r]);
      if (dst[r] != before[r]) return sparrowInternalError;
      // Any other collective now is refused, and does not disturb the staged step.
      float x = 0;
      if (sparrowBroadcast(&x, &x, 1, sparrowFloat32, 0, cs.c[r], nullptr) != sparrowInvalidUsage) return sparrowInternalError;
      return sparrowStageCommit(cs.c[r]);
    });
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(rc[r], sparrowSuccess) << "step " << step << " rank " << r << ": " << sparrowGetLastError(cs.c[r]);
      if (r == 0) continue;
      for (size_t k = 0; k < counts.size(); ++k) ASSERT_EQ(dst[r][k], src[k]) << "step " << step << " rank " << r;
      EXPECT_EQ(staged_stats[r].stagePending, 1);
      EXPECT_EQ(staged_stats[r].stageReady, 1);
      EXPECT_GT(staged_stats[r].stageBytesReceived, 0u);
      if (step) {
        EXPECT_GT(staged_stats[r].stagedBytes, 0u);
        EXPECT_LT(staged_stats[r].stagedBytes * 5, (counts[0] + counts[1] + counts[2]) * 2)
            << "staging memory follows the changes, not the model";
      }
      sparrowStats after = SPARROW_STATS_INITIALIZER;
      sparrowCommGetStats(cs.c[r], &after);
      EXPECT_EQ(after.stagePending, 0);
    }
  }
  // Blocking calls mix with staged ones.
  gen::mutate_exact(src[0].data(), counts[0], 2, 0.01, 999);
  auto rc = cs.run([&](int r) {
    sparrowGroupStart();
    for (size_t k = 0; k < counts.size(); ++k)
      sparrowSparseBcast(src[k].data(), r == 0 ? nullptr : dst[r][k].data(), counts[k], sparrowBfloat16, 0, cs.c[r], nullptr);
    return sparrowGroupEnd();
  });
  for (int r = 0; r < 4; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << sparrowGetLastError(cs.c[r]);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(dst[r][0], src[0]);
}

// A buffer written to before a staged step: the commit refuses it untouched; the next call repairs.
TEST_P(BcastTest, StagedStepOnAModifiedBufferIsRefusedAtCommit) {
  Comms cs(3);
  const size_t count = 100000;
  std::vector<uint16_t> src(count, 7);
  std::vector<std::vector<uint16_t>> dst(3, std::vector<uint16_t>(count, 0));
  auto stage_step = [&](uint64_t seed) {
    gen::mutate_exact(src.data(), count, 2, 0.01, seed);
    return cs.run([&](int r) {
      sparrowResult_t s = sparrowSparseBcastStage(src.data(), r == 0 ? nullptr : dst[r].data(), count, sparrowBfloat16,
                                                  0, cs.c[r], nullptr);
      return s != sparrowSuccess ? s : sparrowStageCommit(cs.c[r]);
    });
  };
  for (auto x : stage_step(1)) ASSERT_EQ(x, sparrowSuccess);
  size_t at = 0;
  while (at < count && src[at] != 7) ++at;
  dst[2][at] ^= 0x100;
  auto scribbled = dst[2];
  auto rc = stage_step(2);
  EXPECT_EQ(rc[0], sparrowSuccess);
  EXPECT_EQ(rc[1], sparrowSuccess);
  ASSERT_EQ(rc[2], sparrowVersionMismatch) << sparrowGetLastError(cs.c[2]);
  EXPECT_EQ(dst[2], scribbled);
  rc = stage_step(3);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << sparrowGetLastError(cs.c[r]);
  EXPECT_EQ(dst[1], src);
  EXPECT_EQ(dst[2], src);
}

// A communicator destroyed or aborted with a step still staged neither hangs nor crashes.
TEST_P(BcastTest, DestroyOrAbortWithAStagedStep) {
  for (bool abort : {false, true}) {
    auto cs = std::make_unique<Comms>(2);
    std::vector<float> src(1000, 1.f), dst(1000, 0.f);
    auto rc = cs->run([&](int r) {
      return sparrowSparseBcastStage(src.data(), r == 0 ? nullptr : dst.data(), 1000, sparrowFloat32, 0, cs->c[r], nullptr);
    });
    ASSERT_EQ(rc[0], sparrowSuccess);
    ASSERT_EQ(rc[1], sparrowSuccess);
    if (abort) {
      EXPECT_EQ(sparrowCommAbort(cs->c[1]), sparrowSuccess);
      cs->c[1] = nullptr;
    }
    cs.reset();  // destroys the rest
    EXPECT_EQ(dst[0], 0.f) << "never committed";
  }
}

TEST_P(BcastTest, MismatchedArgumentsFailEveryRank) {
  Comms cs(3);
  std::vector<std::vector<float>> buf(3, std::vector<float>(100, 1.f));
  auto rc = cs.run([&](int r) {
    size_t count = r == 2 ? 99 : 100;
    return sparrowSparseBcast(buf[r].data(), buf[r].data(), count, sparrowFloat32, 0, cs.c[r], nullptr);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(rc[r], sparrowInvalidUsage) << "rank " << r;
    EXPECT_NE(std::string(sparrowGetLastError(cs.c[r])).find("differ"), std::string::npos) << sparrowGetLastError(cs.c[r]);
  }
  rc = cs.run([&](int r) {
    return sparrowBroadcast(buf[r].data(), buf[r].data(), 100, r == 1 ? sparrowInt32 : sparrowFloat32, 0, cs.c[r], nullptr);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(rc[r], sparrowInvalidUsage) << "rank " << r;
  // And the communicator still works afterwards.
  rc = cs.run([&](int r) { return sparrowSparseBcast(buf[r].data(), buf[r].data(), 100, sparrowFloat32, 0, cs.c[r], nullptr); });
  for (auto x : rc) EXPECT_EQ(x, sparrowSuccess);
}

// Ranks that pass different roots to one call (a caller's mistake) build different trees: each used
// to wait for a parent that never sent, until SPARROW_TIMEOUT_S (60 s here), and the next correct
// call failed too. Now every rank fails within seconds with sparrowInvalidUsage whose message says
// which ranks named which root, in each shape of the mistake, and the communicator works on.
TEST_P(BcastTest, RanksThatDisagreeOnTheRootAllFailWithinSeconds) {
  struct Case {
    const char* what;
    std::vector<int> roots;  // per rank
    bool dense;
  };
  const std::vector<Case> cases = {
      {"one rank names another receiver", {0, 0, 1}, false},
      {"one rank names itself", {0, 0, 2}, false},
      {"two ranks name each other", {1, 0}, false},
      {"nobody names itself", {2, 2, 0}, false},
      {"dense, one rank names itself", {0, 1, 0}, true},
      {"dense, one rank names another receiver", {0, 2, 0, 0}, true},
  };
  for (const Case& k : cases) {
    const int n = int(k.roots.size());
    Comms cs(n);
    std::vector<std::vector<float>> buf(size_t(n), std::vector<float>(1000, 0.f));
    for (int r = 0; r < n; ++r) buf[size_t(r)][0] = float(r + 1);
    auto call = [&](int r, int root) {
      float* b = buf[size_t(r)].data();
      return k.dense ? sparrowBcast(b, 1000, sparrowFloat32, root, cs.c[r], nullptr)
                     : sparrowSparseBcast(b, b, 1000, sparrowFloat32, root, cs.c[r], nullptr);
    };
    const auto t0 = std::chrono::steady_clock::now();
    auto rc = cs.run([&](int r) { return call(r, k.roots[size_t(r)]); });
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(took, 15) << k.what;
    for (int r = 0; r < n; ++r) {
      const std::string msg = sparrowGetLastError(cs.c[r]);
      EXPECT_EQ(rc[r], sparrowInvalidUsage) << k.what << ", rank " << r << ": " << msg;
      EXPECT_NE(msg.find("disagree on the root"), std::string::npos) << k.what << ", rank " << r << ": " << msg;
      EXPECT_NE(msg.find("named root"), std::string::npos) << k.what << ", rank " << r << ": " << msg;
    }
    rc = cs.run([&](int r) { return call(r, 0); });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(rc[r], sparrowSuccess) << k.what << ", then a correct call, rank " << r << ": " << sparrowGetLastError(cs.c[r]);
      EXPECT_EQ(buf[size_t(r)], buf[0]) << k.what << ", rank " << r;
    }
    if (k.dense) continue;
    // On buffers that have a version already the root does not wait for its receivers: each rank
    // fails fast or gets the step bit-exact; the root hears of it by its next call at the latest.
    buf[0][1] = 42.f;
    const auto t1 = std::chrono::steady_clock::now();
    rc = cs.run([&](int r) { return call(r, k.roots[size_t(r)]); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 15) << k.what << ", later call";
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(rc[r] == sparrowSuccess || rc[r] == sparrowInvalidUsage) << k.what << ", later call, rank " << r << ": " << sparrowGetLastError(cs.c[r]);
      if (rc[r] == sparrowSuccess && k.roots[size_t(r)] != r) EXPECT_EQ(buf[size_t(r)], buf[0]) << k.what << ", later call, rank " << r;
    }
    const auto t2 = std::chrono::steady_clock::now();
    for (int round = 0; round < 2; ++round) rc = cs.run([&](int r) { return call(r, 0); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count(), 15) << k.what << ", correct calls";
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(rc[r], sparrowSuccess) << k.what << ", later call, then correct calls, rank " << r << ": " << sparrowGetLastError(cs.c[r]);
      EXPECT_EQ(buf[size_t(r)], buf[0]) << k.what << ", rank " << r;
    }
  }
}

TEST_P(BcastTest, ResetMakesTheNextCallDense) {
  Comms cs(2);
  std::vector<uint32_t> a(1000, 7);
  std::vector<std::vector<uint32_t>> b(2, std::vector<uint32_t>(1000, 0));
  auto go = [&] {
    return cs.run([&](int r) { return sparrowSparseBcast(a.data(), b[r].data(), 1000, sparrowUint32, 0, cs.c[r], nullptr); });
  };
  for (auto x : go()) ASSERT_EQ(x, sparrowSuccess);
  a[5] = 9;
  for (auto x : go()) ASSERT_EQ(x, sparrowSuccess);
  sparrowStats st = SPARROW_STATS_INITIALIZER;
  sparrowCommGetStats(cs.c[0], &st);
  EXPECT_EQ(st.full, 0);
  ASSERT_EQ(sparrowSparseBcastReset(cs.c[0], a.data()), sparrowSuccess);
  a[6] = 9;
  for (auto x : go()) ASSERT_EQ(x, sparrowSuccess);
  sparrowCommGetStats(cs.c[0], &st);
  EXPECT_EQ(st.full, 1);
  EXPECT_EQ(a, b[0]);
  EXPECT_EQ(a, b[1]);
}

TEST_P(BcastTest, BadArguments) {
  Comms cs(1);
  float x = 0;
  EXPECT_EQ(sparrowSparseBcast(&x, &x, 1, sparrowDataType_t(42), 0, cs.c[0], nullptr), sparrowInvalidArgument);
  EXPECT_EQ(sparrowSparseBcast(&x, &x, 1, sparrowFloat32, 1, cs.c[0], nullptr), sparrowInvalidArgument);
  EXPECT_EQ(sparrowSparseBcast(nullptr, nullptr, 1, sparrowFloat32, 0, cs.c[0], nullptr), sparrowInvalidArgument);
  EXPECT_EQ(sparrowBroadcast(&x, &x, 1, sparrowFloat32, 0, nullptr, nullptr), sparrowInvalidArgument);
  if (!kernels::device_ops()) {  // a stream without device support
    EXPECT_EQ(sparrowSparseBcast(&x, &x, 1, sparrowFloat32, 0, cs.c[0], reinterpret_cast<sparrowStream_t>(&x)),
              sparrowInvalidArgument);
  }
  EXPECT_EQ(sparrowGroupEnd(), sparrowInvalidUsage);
  EXPECT_EQ(sparrowSparseBcast(&x, &x, 1, sparrowFloat32, 0, cs.c[0], nullptr), sparrowSuccess);  // one rank: trivially
}

INSTANTIATE_TEST_SUITE_P(Transports, BcastTest, ::testing::Values("tcp", "ucx", "ucx+on"), [](const auto& info) {
  std::string n = info.param;
  for (char& c : n)
    if (c == '+') c = '_';
  return n;
});

class AlgoTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(params::set_override("PROBE_MS", "30").ok());
    ASSERT_TRUE(params::set_override("ALGO", GetParam()).ok());
  }
  void TearDown() override { params::clear_overrides(); }
};

TEST_P(AlgoTest, EveryAlgorithmDeliversToEightRanks) {
  Comms cs(8);
  const size_t count = 300001;
  std::vector<uint16_t> src(count, 3);
  std::vector<std::vector<uint16_t>> dst(8, std::vector<uint16_t>(count, 0));
  for (int step = 0; step < 3; ++step) {
    gen::mutate_exact(src.data(), count, 2, 0.01, step + 1);
    auto rc = cs.run([&](int r) {
      return sparrowSparseBcast(src.data(), dst[r].data(), count, sparrowBfloat16, 6, cs.c[r], nullptr);
    });
    for (int r = 0; r < 8; ++r) {
      ASSERT_EQ(rc[r], sparrowSuccess) << GetParam() << " rank " << r << ": " << sparrowGetLastError(cs.c[r]);
      EXPECT_EQ(dst[r], src) << GetParam() << " rank " << r;
    }
  }
  std::vector<uint16_t> big(5 << 20, 1);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint16_t(i * 7);
  std::vector<std::vector<uint16_t>> bd(8, std::vector<uint16_t>(big.size(), 0));
  auto rc = cs.run([&](int r) { return sparrowBroadcast(big.data(), bd[r].data(), big.size(), sparrowFloat16, 2, cs.c[r], nullptr); });
  for (int r = 0; r < 8; ++r) {
    ASSERT_EQ(rc[r], sparrowSuccess);
    EXPECT_EQ(bd[r], big);
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AlgoTest, ::testing::Values("flat", "chain", "binomial", "region_tree", "auto"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sparrow

namespace sparrow {
namespace {

TEST(AbortTest, AbortFromAnotherThreadUnblocksAWaitingReceiver) {
  ASSERT_TRUE(params::set_override("PROBE_MS", "20").ok());
  test::Comms cs(2);
  std::vector<float> buf(1000, 0.f);
  std::atomic<int> rc{-1};
  std::atomic<bool> calling{false};
  std::thread receiver([&] {
    calling = true;
    // The root never calls: this waits until the abort.
    rc = sparrowSparseBcast(nullptr, buf.data(), buf.size(), sparrowFloat32, 0, cs.c[1], nullptr);
  });
  // Abort must not race the start of the call it is meant to interrupt (that would be the caller's
  // bug): give the receiver time to get into its wait. No sleep: the abort works whenever it lands.
  while (!calling) std::this_thread::yield();
  for (int i = 0; i < 20000 && rc.load() == -1; ++i) std::this_thread::yield();
  EXPECT_EQ(sparrowCommAbort(cs.c[1]), sparrowSuccess);
  cs.c[1] = nullptr;
  receiver.join();
  EXPECT_NE(rc.load(), sparrowSuccess);
  EXPECT_NE(rc.load(), -1);
  params::clear_overrides();
}

}  // namespace
}  // namespace sparrow
