// SPDX-License-Identifier: Apache-2.0
// sparrowModel*: ranks as threads over real sockets, through the C API.
#include "model/model.h"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <functional>
#include <mutex>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "format/digest.h"
#include "harness/comm_harness.h"
#include "harness/fake_device.h"
#include "harness/util.h"
#include "sparrow/sparrow.h"

namespace sparrow::test {
namespace {

using Bf16 = std::vector<uint16_t>;

// One local tensor of a test rank, with the storage its sparrowTensor_t points into.
struct Held {
  std::string name;
  std::vector<size_t> shape;
  Bf16 data;
  std::vector<std::string> logical;  // names the pieces point to
  std::vector<sparrowPiece_t> pieces;
  Held(std::string n, std::vector<size_t> s, uint16_t fill = 0) : name(std::move(n)), shape(std::move(s)) {
    size_t numel = 1;
    for (size_t d : shape) numel *= d;
    data.assign(numel, fill);
  }
  Held& piece(const std::string& l, int dim, size_t start, size_t stop, size_t offset) {
    logical.push_back(l);
    pieces.push_back({nullptr, dim, start, stop, offset});
    return *this;
  }
};

// `held` as the C API takes it (pointing into it: valid while it is not resized).
std::vector<sparrowTensor_t> tensors_of(std::vector<Held>& held) {
  std::vector<sparrowTensor_t> ts;
  for (auto& h : held) {
    for (size_t i = 0; i < h.pieces.size(); ++i) h.pieces[i].logical = h.logical[i].c_str();
    ts.push_back({h.name.c_str(), h.data.data(), sparrowBfloat16, int(h.shape.size()), h.shape.data(),
                  h.pieces.empty() ? nullptr : h.pieces.data(), int(h.pieces.size())});
  }
  return ts;
}

sparrowResult_t make_model(sparrowModel_t* m, sparrowComm_t c, std::vector<Held>& held, int root) {
  auto ts = tensors_of(held);
  return sparrowModelCreate(m, c, ts.data(), int(ts.size()), root);
}

// The trainer's logical model: q [8,4], k [4,4], v [4,4] (GQA: 2 kv heads of 2 rows, 4 q heads),
// o [4,8], emb [10,4] (vocabulary 10, padded to 12 on receivers).
std::vector<Held> trainer(uint64_t seed) {
  std::vector<Held> t = {Held("q", {8, 4}), Held("k", {4, 4}), Held("v", {4, 4}), Held("o", {4, 8}),
                         Held("emb", {10, 4})};
  for (auto& h : t)
    for (auto& x : h.data) x = uint16_t(rng_next(seed));
  return t;
}

void mutate(std::vector<Held>& t, uint64_t seed) {
  for (auto& h : t)
    for (auto& x : h.data)
      if (rng_next(seed) % 4 == 0) x = uint16_t(rng_next(seed));
}

const Held& find(const std::vector<Held>& t, const std::string& name) {
  for (auto& h : t)
    if (h.name == name) return h;
  ADD_FAILURE() << "no " << name;
  return t[0];
}

// A TP rank (tp of 2) of an engine: fused qkv (its 2 q heads, its kv head), o row-parallel (its 2
// columns... of 8: 4), emb vocab-parallel padded to 12 rows (6 per rank; rank 1's last 2 are padding).
std::vector<Held> tp_worker(int tp) {
  std::vector<Held> w = {Held("qkv_proj", {8, 4}, 0xdead), Held("o_proj", {4, 4}, 0xdead),
                         Held("embed", {6, 4}, 0xdead)};
  w[0].piece("q", 0, size_t(4 * tp), size_t(4 * tp + 4), 0)
      .piece("k", 0, size_t(2 * tp), size_t(2 * tp + 2), 4)
      .piece("v", 0, size_t(2 * tp), size_t(2 * tp + 2), 6);
  w[1].piece("o", 1, size_t(4 * tp), size_t(4 * tp + 4), 0);
  w[2].piece("emb", 0, size_t(6 * tp), size_t(tp == 0 ? 6 : 10), 0);
  return w;
}

// The reference projection, element by element (independent of the library's runs).
void expect_projection(const std::vector<Held>& root, const std::vector<Held>& w, int tp, const std::string& when) {
  const Bf16 &q = find(root, "q").data, &k = find(root, "k").data, &v = find(root, "v").data;
  const Bf16 &o = find(root, "o").data, &emb = find(root, "emb").data;
  for (size_t r = 0; r < 8; ++r)
    for (size_t c = 0; c < 4; ++c) {
      uint16_t want = r < 4 ? q[(4 * tp + r) * 4 + c] : r < 6 ? k[(2 * tp + r - 4) * 4 + c] : v[(2 * tp + r - 6) * 4 + c];
      ASSERT_EQ(w[0].data[r * 4 + c], want) << when << ": qkv_proj[" << r << "," << c << "] on tp " << tp;
    }
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 4; ++c)
      ASSERT_EQ(w[1].data[r * 4 + c], o[r * 8 + 4 * tp + c]) << when << ": o_proj[" << r << "," << c << "]";
  for (size_t r = 0; r < 6; ++r)
    for (size_t c = 0; c < 4; ++c) {
      const size_t g = 6 * tp + r;
      ASSERT_EQ(w[2].data[r * 4 + c], g < 10 ? emb[g * 4 + c] : 0xdead) << when << ": embed[" << r << "] (padding)";
    }
}

// Polls sparrowStageQuery until the staged step is ready, for at most `ms` milliseconds; false when a
// query failed.
bool staged_ready(sparrowComm_t c, int ms) {
  int ready = 0;
  for (int i = 0; i < ms && !ready; ++i) {
    if (sparrowStageQuery(c, &ready) != sparrowSuccess) return false;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The rows (dim 0) tp_worker(tp) holds of each logical tensor: its own rows of the column-parallel
// ones, every row of the row-parallel o.
std::pair<size_t, size_t> tp_rows(const std::string& name, int tp) {
  const size_t t = size_t(tp);
  if (name == "q") return {4 * t, 4 * t + 4};
  if (name == "k" || name == "v") return {2 * t, 2 * t + 2};
  if (name == "emb") return {6 * t, tp == 0 ? 6 : 10};
  return {0, 4};  // o
}

unsigned long long digest_rows(sparrowModel_t m, const char* name, std::pair<size_t, size_t> rows) {
  unsigned long long d = 0;
  EXPECT_EQ(sparrowModelGetDigestRows(m, name, rows.first, rows.second, &d), sparrowSuccess) << name;
  return d;
}

// Every receiver in `tp` (rank -> tp index) holds its rows of every logical tensor as the root
// (rank 0) does, by digest, and the shards' digests of a tensor add up to the root's whole one.
void expect_row_digests(const std::vector<sparrowModel_t>& m, const std::map<int, int>& tp) {
  for (const char* name : {"q", "k", "v", "o", "emb"}) {
    unsigned long long whole = 0, sum = 0;
    ASSERT_EQ(sparrowModelGetDigest(m[0], name, &whole), sparrowSuccess);
    for (auto [r, t] : tp) {
      const auto rows = tp_rows(name, t);
      EXPECT_EQ(digest_rows(m[size_t(r)], name, rows), digest_rows(m[0], name, rows)) << name << " on rank " << r;
      if (std::string(name) != "o") sum += digest_rows(m[size_t(r)], name, rows);
    }
    if (std::string(name) != "o" && tp.size() == 2) EXPECT_EQ(sum, whole) << name << ": the shards' rows tile it";
  }
}

unsigned long long version_of(sparrowModel_t m) {
  unsigned long long v = ~0ull;
  EXPECT_EQ(sparrowModelGetVersion(m, &v), sparrowSuccess);
  return v;
}

TEST(ModelSync, ReorderedNamesGetTheirOwnTensorsAndEveryRankSeesOneVersion) {
  Comms comms(3);
  std::vector<std::vector<Held>> held(3);
  held[0] = trainer(1);
  // Rank 1 lists k, v, q (the same tensors in another order); rank 2 holds v, q only (k lands nowhere).
  held[1] = {Held("k", {4, 4}), Held("v", {4, 4}), Held("emb", {10, 4}), Held("o", {4, 8}), Held("q", {8, 4})};
  held[2] = {Held("v", {4, 4}), Held("q", {8, 4})};
  std::vector<sparrowModel_t> m(3);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(make_model(&m[r], comms.c[r], held[r], 0), sparrowSuccess);
  for (int step = 1; step <= 3; ++step) {
    auto rc = comms.run([&](int r) { return sparrowModelSync(m[r]); });
    for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(comms.c[r]);
    for (int r = 1; r < 3; ++r)
      for (auto& h : held[r]) ASSERT_EQ(h.data, find(held[0], h.name).data) << h.name << " on rank " << r;
    for (int r = 0; r < 3; ++r) EXPECT_EQ(version_of(m[r]), unsigned(step));
    unsigned long long d0 = 0, d1 = 0;
    ASSERT_EQ(sparrowModelGetDigest(m[0], "q", &d0), sparrowSuccess);
    ASSERT_EQ(sparrowModelGetDigest(m[2], "q", &d1), sparrowSuccess);
    EXPECT_EQ(d0, d1);
    mutate(held[0], uint64_t(step));
  }
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

TEST(ModelSync, FusedTensorParallelReceiversGetTheProjectionBitExactAndNothingElse) {
  Comms comms(3);
  std::vector<std::vector<Held>> held = {trainer(7), tp_worker(0), tp_worker(1)};
  std::vector<sparrowModel_t> m(3);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(make_model(&m[r], comms.c[r], held[r], 0), sparrowSuccess);
  for (int step = 1; step <= 4; ++step) {
    auto rc = comms.run([&](int r) { return sparrowModelSync(m[r]); });
    for (int r = 0; r < 3; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(comms.c[r]);
    for (int tp = 0; tp < 2; ++tp) expect_projection(held[0], held[1 + tp], tp, "step " + std::to_string(step));
    // Digests agree across layouts, for the rows each shard holds (it receives no others).
    expect_row_digests(m, {{1, 0}, {2, 1}});
    unsigned long long d = 0;
    EXPECT_EQ(sparrowModelGetDigest(m[1], "q", &d), sparrowInvalidUsage) << "a shard holds half of q";
    EXPECT_EQ(sparrowModelGetDigestRows(m[1], "q", 4, 8, &d), sparrowInvalidUsage) << "the other shard's rows";
    for (int r = 0; r < 3; ++r) EXPECT_EQ(version_of(m[r]), unsigned(step));
    mutate(held[0], 100 + uint64_t(step));
  }
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

sparrowStats stats_of(sparrowComm_t c) {
  sparrowStats st = SPARROW_STATS_INITIALIZER;
  EXPECT_EQ(sparrowCommGetStats(c, &st), sparrowSuccess);
  return st;
}

// A shard receives only the changes in its rows: w [1024, 64] is column-parallel (each of 2 shards
// holds 512 rows), o [64, 256] row-parallel (64 columns each: every row), n [64] replicated. A step
// brings a shard half of w's changes and all of o's and n's, about 0.6 of what a whole receiver gets.
TEST(ModelSync, ATensorParallelShardReceivesOnlyTheChangesInItsRows) {
  Comms comms(4);
  std::vector<Held> root = {Held("w", {1024, 64}), Held("o", {64, 256}), Held("n", {64})};
  std::vector<std::vector<Held>> held = {root, {Held("n", {64}), Held("o", {64, 256}), Held("w", {1024, 64})}};
  for (int tp = 0; tp < 2; ++tp) {
    std::vector<Held> w = {Held("w_shard", {512, 64}), Held("o_shard", {64, 64}), Held("n", {64})};
    w[0].piece("w", 0, size_t(512 * tp), size_t(512 * tp + 512), 0);
    w[1].piece("o", 1, size_t(64 * tp), size_t(64 * tp + 64), 0);
    held.push_back(std::move(w));
  }
  std::vector<sparrowModel_t> m(4);
  for (int r = 0; r < 4; ++r) ASSERT_EQ(make_model(&m[size_t(r)], comms.c[size_t(r)], held[size_t(r)], 0), sparrowSuccess);
  uint64_t seed = 5;
  for (int step = 1; step <= 3; ++step) {
    for (auto& h : held[0])
      for (auto& x : h.data)
        if (rng_next(seed) % 16 == 0) x = uint16_t(rng_next(seed));
    auto rc = comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); });
    for (int r = 0; r < 4; ++r) ASSERT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(comms.c[size_t(r)]);
    for (auto& h : held[1]) ASSERT_EQ(h.data, find(held[0], h.name).data) << h.name;
    const Bf16 &w = find(held[0], "w").data, &o = find(held[0], "o").data;
    for (size_t tp = 0; tp < 2; ++tp) {
      const auto& x = held[2 + tp];
      ASSERT_TRUE(std::equal(x[0].data.begin(), x[0].data.end(), w.begin() + long(tp * 512 * 64))) << "w on tp " << tp;
      for (size_t r = 0; r < 64; ++r)
        ASSERT_TRUE(std::equal(x[1].data.begin() + long(r * 64), x[1].data.begin() + long(r * 64 + 64),
                               o.begin() + long(r * 256 + tp * 64))) << "o row " << r << " on tp " << tp;
      ASSERT_EQ(x[2].data, find(held[0], "n").data);
    }
    const sparrowStats whole = stats_of(comms.c[1]), sent = stats_of(comms.c[0]);
    EXPECT_EQ(whole.denseBytes, (1024 * 64 + 64 * 256 + 64) * 2u) << "the step as one";
    for (int r = 2; r < 4; ++r) {
      const sparrowStats shard = stats_of(comms.c[size_t(r)]);
      EXPECT_EQ(shard.denseBytes, (512 * 64 + 64 * 256 + 64) * 2u) << "rank " << r << " receives its rows only";
      const double share = double(shard.wireBytes) / double(whole.wireBytes);
      EXPECT_GT(share, 0.45) << "rank " << r << " at step " << step;
      EXPECT_LT(share, 0.75) << "rank " << r << " at step " << step;
    }
    EXPECT_GE(sent.wireBytes, whole.wireBytes) << "the root sent every operation";
    for (int r = 0; r < 4; ++r) EXPECT_EQ(version_of(m[size_t(r)]), unsigned(step)) << "rank " << r;
  }
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// A rank that holds no row of the model (an engine rank that serves none of it) takes part in no
// operation of a split step, yet holds every step's version, staged or not.
TEST(ModelSync, ARankHoldingNoRowsStillSeesEveryVersion) {
  Comms comms(3);
  std::vector<std::vector<Held>> held = {{Held("w", {8, 4})}, {Held("w_shard", {4, 4})}, {}};
  held[1][0].piece("w", 0, 0, 4, 0);
  std::vector<sparrowModel_t> m(3);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(make_model(&m[r], comms.c[r], held[r], 0), sparrowSuccess) << "rank " << r;
  uint64_t seed = 9;
  for (int step = 1; step <= 4; ++step) {
    for (auto& x : held[0][0].data) x = uint16_t(rng_next(seed));
    const bool staged = step % 2 == 0;
    auto rc = comms.run([&](int r) {
      if (!staged) return sparrowModelSync(m[r]);
      sparrowResult_t s = sparrowModelStage(m[r]);
      if (s != sparrowSuccess || r == 0) return s;
      if (!staged_ready(comms.c[r], 10000)) return sparrowInternalError;
      return sparrowModelCommit(m[r]);
    });
    ASSERT_EQ(rc, std::vector<sparrowResult_t>(3, sparrowSuccess)) << "step " << step << ": " << sparrowGetLastError(comms.c[2]);
    ASSERT_TRUE(std::equal(held[1][0].data.begin(), held[1][0].data.end(), held[0][0].data.begin())) << "step " << step;
    for (int r = 0; r < 3; ++r) EXPECT_EQ(version_of(m[r]), unsigned(step)) << "rank " << r << " at step " << step;
    EXPECT_EQ(stats_of(comms.c[2]).denseBytes, 0u) << "rank 2 received nothing";
  }
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

TEST(ModelSync, AReceiverWhosePieceWasWrittenIsRefusedThenRepaired) {
  Comms comms(3);
  std::vector<std::vector<Held>> held = {trainer(3), tp_worker(0), tp_worker(1)};
  std::vector<sparrowModel_t> m(3);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(make_model(&m[r], comms.c[r], held[r], 0), sparrowSuccess);
  auto step = [&] { return comms.run([&](int r) { return sparrowModelSync(m[r]); }); };
  ASSERT_EQ(step(), std::vector<sparrowResult_t>(3, sparrowSuccess));
  mutate(held[0], 11);
  held[2][1].data[5] ^= 1;  // the user wrote into tp 1's o_proj
  const auto before = held[2];
  auto rc = step();
  EXPECT_EQ(rc[0], sparrowSuccess);
  EXPECT_EQ(rc[1], sparrowSuccess);
  EXPECT_EQ(rc[2], sparrowVersionMismatch) << sparrowGetLastError(comms.c[2]);
  for (size_t i = 0; i < held[2].size(); ++i) EXPECT_EQ(held[2][i].data, before[i].data) << "nothing written";
  expect_projection(held[0], held[1], 0, "beside the refused rank");
  EXPECT_EQ(version_of(m[2]), 1u);
  EXPECT_EQ(version_of(m[1]), 2u);
  mutate(held[0], 12);
  ASSERT_EQ(step(), std::vector<sparrowResult_t>(3, sparrowSuccess)) << sparrowGetLastError(comms.c[2]);
  for (int tp = 0; tp < 2; ++tp) expect_projection(held[0], held[1 + tp], tp, "after the repair");
  EXPECT_EQ(version_of(m[2]), 3u);
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

TEST(ModelSync, StagedStepLeavesPiecesReadableUntilTheCommit) {
  Comms comms(3);
  std::vector<std::vector<Held>> held = {trainer(5), tp_worker(0), tp_worker(1)};
  std::vector<sparrowModel_t> m(3);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(make_model(&m[r], comms.c[r], held[r], 0), sparrowSuccess);
  ASSERT_EQ(comms.run([&](int r) { return sparrowModelSync(m[r]); }), std::vector<sparrowResult_t>(3, sparrowSuccess));
  mutate(held[0], 21);
  const auto old = held[1];
  auto rc = comms.run([&](int r) {
    sparrowResult_t s = sparrowModelStage(m[r]);
    if (s != sparrowSuccess || r == 0) return s;
    staged_ready(comms.c[r], 10000);
    if (r == 1)
      for (size_t i = 0; i < old.size(); ++i)
        if (held[1][i].data != old[i].data) return sparrowInternalError;  // written before the commit
    return sparrowModelCommit(m[r]);
  });
  ASSERT_EQ(rc, std::vector<sparrowResult_t>(3, sparrowSuccess));
  for (int tp = 0; tp < 2; ++tp) expect_projection(held[0], held[1 + tp], tp, "after the commit");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(version_of(m[r]), 2u);
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// Each receiver layout that does not fit the root's model fails every rank with InvalidUsage naming
// the tensor, within seconds; a model that fits works on the same communicator afterwards.
TEST(ModelSync, ALayoutThatDoesNotFitFailsEveryRankNamingTheTensor) {
  Comms comms(3);
  struct Case {
    const char* what;
    std::function<std::vector<Held>()> worker;
    const char* names;
  };
  std::vector<Case> cases = {
      {"unknown name", [] { return std::vector<Held>{Held("qq", {8, 4})}; }, "'qq'"},
      {"transposed shape", [] { return std::vector<Held>{Held("o", {8, 4})}; }, "'o' [8, 4]"},
      {"range past the end", [] {
         auto w = tp_worker(1);
         w[2].pieces[0].stop = 12;  // the padding is not part of emb
         return w;
       }, "past the end of the root's shape [10, 4]"},
      {"other dims differ", [] {
         std::vector<Held> w = {Held("o_rows", {2, 4})};
         w[0].piece("o", 0, 0, 2, 0);  // rows of o [4, 8] into 4 columns
         return w;
       }, "'o_rows'"},
  };
  std::vector<Held> root = trainer(9);
  for (auto& c : cases) {
    std::vector<std::vector<Held>> held = {root, tp_worker(0), c.worker()};
    std::vector<sparrowModel_t> m(3);
    for (int r = 0; r < 3; ++r) ASSERT_EQ(make_model(&m[r], comms.c[r], held[r], 0), sparrowSuccess) << c.what;
    const auto t0 = std::chrono::steady_clock::now();
    auto rc = comms.run([&](int r) { return sparrowModelSync(m[r]); });
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(took, 10.0) << c.what;
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(rc[r], sparrowInvalidUsage) << c.what << " on rank " << r;
      EXPECT_NE(std::string(sparrowGetLastError(comms.c[r])).find(c.names), std::string::npos)
          << c.what << " on rank " << r << ": " << sparrowGetLastError(comms.c[r]);
    }
    for (int r = 1; r < 3; ++r)
      for (auto& h : held[r])
        for (auto x : h.data) ASSERT_TRUE(x == 0 || x == 0xdead) << c.what << ": nothing written";
    for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
  }
  std::vector<std::vector<Held>> held = {root, tp_worker(0), tp_worker(1)};
  std::vector<sparrowModel_t> m(3);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(make_model(&m[r], comms.c[r], held[r], 0), sparrowSuccess);
  ASSERT_EQ(comms.run([&](int r) { return sparrowModelSync(m[r]); }), std::vector<sparrowResult_t>(3, sparrowSuccess));
  for (int tp = 0; tp < 2; ++tp) expect_projection(held[0], held[1 + tp], tp, "after the failed models");
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// sparrowModelSync on models 0..ranks-1 at once (ranks as threads); each one's result.
std::vector<sparrowResult_t> sync_first(const std::vector<sparrowModel_t>& m, int ranks) {
  std::vector<sparrowResult_t> rc(static_cast<size_t>(ranks));
  std::vector<std::thread> ts;
  for (int r = 0; r < ranks; ++r) ts.emplace_back([&, r] { rc[size_t(r)] = sparrowModelSync(m[size_t(r)]); });
  for (auto& t : ts) t.join();
  return rc;
}

// On an elastic communicator a worker that dies between steps is dropped; the trainer and the TP
// workers go on, bit-exact.
TEST(ModelSync, ElasticCommunicatorDropsADeadWorkerAndTheShardsGoOn) {
  const int n = 4;
  std::vector<sparrowComm_t> c = open_elastic(n, 2000);
  for (auto x : c) ASSERT_NE(x, nullptr);
  std::vector<std::vector<Held>> held = {trainer(13), tp_worker(0), tp_worker(1), trainer(99)};
  std::vector<sparrowModel_t> m(n);
  for (int r = 0; r < n; ++r) ASSERT_EQ(make_model(&m[size_t(r)], c[size_t(r)], held[size_t(r)], 0), sparrowSuccess);
  auto step = [&](int ranks) { return sync_first(m, ranks); };
  ASSERT_EQ(step(n), std::vector<sparrowResult_t>(n, sparrowSuccess));
  EXPECT_EQ(sparrowModelDestroy(m[3]), sparrowSuccess);
  EXPECT_EQ(sparrowCommAbort(c[3]), sparrowSuccess);  // the whole-tensor worker dies
  for (int s = 0; s < 2; ++s) {
    mutate(held[0], 40 + uint64_t(s));
    ASSERT_EQ(step(3), std::vector<sparrowResult_t>(3, sparrowSuccess)) << sparrowGetLastError(c[0]);
    for (int tp = 0; tp < 2; ++tp) expect_projection(held[0], held[size_t(1 + tp)], tp, "after the drop");
    // The step is split on an elastic communicator too: a shard receives its rows only.
    for (int r = 1; r < 3; ++r) EXPECT_LT(stats_of(c[size_t(r)]).denseBytes, 136 * 2u) << "rank " << r;
  }
  int live[8], nlive = 0;
  ASSERT_EQ(sparrowCommGetMembers(c[0], live, 8, &nlive), sparrowSuccess);
  EXPECT_EQ(std::vector<int>(live, live + nlive), (std::vector<int>{0, 1, 2}));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(version_of(m[size_t(r)]), 3u);
    EXPECT_EQ(sparrowModelDestroy(m[size_t(r)]), sparrowSuccess);
    EXPECT_EQ(sparrowCommDestroy(c[size_t(r)]), sparrowSuccess);
  }
}

// A test's own reference projection (element by element, 2-dimensional): every element of `h` that
// one of its pieces covers (or all of it: a whole tensor), read from `logical`.
void project_into(const std::vector<Held>& logical, Held& h) {
  const size_t cols = h.shape[1];
  if (h.pieces.empty()) {
    h.data = find(logical, h.name).data;
    return;
  }
  for (size_t i = 0; i < h.pieces.size(); ++i) {
    const sparrowPiece_t& p = h.pieces[i];
    const Held& l = find(logical, h.logical[i]);
    const size_t lcols = l.shape[1];
    for (size_t r = 0; r < h.shape[0]; ++r)
      for (size_t c = 0; c < cols; ++c) {
        const size_t at = p.dim == 0 ? r : c;
        if (at < p.offset || at >= p.offset + (p.stop - p.start)) continue;
        const size_t lr = p.dim == 0 ? at - p.offset + p.start : r, lc = p.dim == 0 ? c : at - p.offset + p.start;
        h.data[r * cols + c] = l.data[lr * lcols + lc];
      }
  }
}

// Every tensor of `w` holds its projection of `logical` (its pieces; padding 0xdead, never written).
void expect_holds(const std::vector<Held>& logical, const std::vector<Held>& w, const std::string& when) {
  for (const Held& h : w) {
    Held want = h;
    std::fill(want.data.begin(), want.data.end(), uint16_t(0xdead));
    project_into(logical, want);
    ASSERT_EQ(h.data, want.data) << when << ": " << h.name;
  }
}

// Ranks 0..ranks-1 of `m` step together (rank 0 first calls before(s): the sources' new version)
// until `stop(s)`, asked of rank 0 after step s, says so; every step must succeed.
void step_until(const std::vector<sparrowModel_t>& m, int ranks, const std::function<void(int)>& before,
                const std::function<bool(int)>& stop) {
  std::barrier meet(ranks);
  bool done = false;
  auto body = [&](int r) {
    for (int s = 0; s < 300 && !done; ++s) {
      if (r == 0) before(s);
      meet.arrive_and_wait();
      EXPECT_EQ(sparrowModelSync(m[size_t(r)]), sparrowSuccess) << "rank " << r << " at step " << s;
      meet.arrive_and_wait();
      if (r == 0) done = stop(s);
      meet.arrive_and_wait();
    }
  };
  std::vector<std::thread> ts;
  for (int r = 0; r < ranks; ++r) ts.emplace_back(body, r);
  for (auto& t : ts) t.join();
}

// A process that joins slot `slot` of the elastic communicator made from `id` (into c[slot]) and
// creates its model over `mine` (into m[slot]) with `make`; then `steps` steps, each checked against
// the projection of what the sources pushed for the version it got (`pushed`: the logical tensors,
// by version, under `mu`). `steps` 0: one step that must fail with sparrowInvalidUsage naming
// its rows. False when the join failed.
bool join_and_step(const sparrowUniqueId& id, int slot, std::vector<sparrowComm_t>& c, std::vector<sparrowModel_t>& m,
                   std::vector<Held>& mine, const std::function<sparrowResult_t(sparrowModel_t*, sparrowComm_t)>& make,
                   int steps, std::map<uint64_t, std::vector<Held>>& pushed, std::mutex& mu, std::vector<uint64_t>* versions) {
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  cfg.elastic = 1;
  cfg.leaseMs = 1000;
  int rank = slot;
  if (sparrowCommJoin(&c[size_t(slot)], id, &cfg, &rank) != sparrowSuccess) {
    ADD_FAILURE() << "join: " << sparrowGetLastError(nullptr);
    return false;
  }
  EXPECT_EQ(make(&m[size_t(slot)], c[size_t(slot)]), sparrowSuccess);
  for (int k = 0; k < std::max(steps, 1); ++k) {
    const sparrowResult_t rc = sparrowModelSync(m[size_t(slot)]);
    if (steps == 0) {
      EXPECT_EQ(rc, sparrowInvalidUsage);
      EXPECT_NE(std::string(sparrowGetLastError(c[size_t(slot)])).find("rejoined a model whose steps were planned with rows"),
                std::string::npos) << sparrowGetLastError(c[size_t(slot)]);
      break;
    }
    EXPECT_EQ(rc, sparrowSuccess) << "the joiner's step " << k << ": " << sparrowGetLastError(c[size_t(slot)]);
    if (rc != sparrowSuccess) break;
    versions->push_back(version_of(m[size_t(slot)]));
    std::lock_guard<std::mutex> l(mu);
    expect_holds(pushed[versions->back()], mine, "the joiner's step " + std::to_string(k));
  }
  return true;
}

bool is_member(sparrowComm_t c, int rank) {
  int live[8], nlive = 0;
  EXPECT_EQ(sparrowCommGetMembers(c, live, 8, &nlive), sparrowSuccess);
  return std::find(live, live + nlive, rank) != live + nlive;
}

// step_until's `before` for one source, rank 0 (model `m0` over `root`): a new version of its
// tensors, recorded in `pushed` under the version it will have.
std::function<void(int)> new_root_version(std::vector<Held>& root, sparrowModel_t m0,
                                          std::map<uint64_t, std::vector<Held>>& pushed, std::mutex& mu, uint64_t seed) {
  return [&root, m0, &pushed, &mu, seed](int s) {
    mutate(root, seed + uint64_t(s));
    std::lock_guard<std::mutex> l(mu);
    pushed[version_of(m0) + 1] = root;
  };
}

// step_until's stop: two steps after the one at whose end rank 0 (`root`) counts `slot` a member.
std::function<bool(int)> two_steps_after_joining(sparrowComm_t root, int slot) {
  auto admitted = std::make_shared<int>(-1);
  return [=](int s) {
    if (*admitted < 0 && is_member(root, slot)) *admitted = s;
    return *admitted >= 0 && s == *admitted + 2;
  };
}

// A worker that dies and comes back (sparrowCommJoin into its slot, with its old layout) rejoins the
// model, split step and all: the root admits it at a step's start and sends it the agreement it
// missed; it gets that step's whole version, then every step, bit-exact, with the version every
// rank sees. A joiner whose layout differs from its slot's plan fails alone, naming the rows, and
// the others' steps go on.
TEST(ModelSync, AWorkerThatRejoinsAnElasticCommunicatorGetsTheModelAgain) {
  const int n = 4;
  sparrowUniqueId id;
  std::vector<sparrowComm_t> c = open_elastic(n, 1000, {}, &id);
  for (auto x : c) ASSERT_NE(x, nullptr);
  std::vector<std::vector<Held>> held = {trainer(17), tp_worker(0), tp_worker(1), trainer(98)};
  std::vector<sparrowModel_t> m(n);
  for (int r = 0; r < n; ++r) ASSERT_EQ(make_model(&m[size_t(r)], c[size_t(r)], held[size_t(r)], 0), sparrowSuccess);
  ASSERT_EQ(sync_first(m, n), std::vector<sparrowResult_t>(n, sparrowSuccess));
  std::map<uint64_t, std::vector<Held>> pushed;
  std::mutex mu;
  for (bool same_layout : {true, false}) {
    EXPECT_EQ(sparrowModelDestroy(m[3]), sparrowSuccess);
    EXPECT_EQ(sparrowCommAbort(c[3]), sparrowSuccess);  // the whole-tensor worker dies
    std::atomic<bool> done{false};
    std::vector<Held> mine = same_layout ? trainer(97) : tp_worker(0);
    std::vector<uint64_t> versions;
    std::thread joiner([&] {
      auto make = [&](sparrowModel_t* x, sparrowComm_t cc) { return make_model(x, cc, mine, 0); };
      join_and_step(id, 3, c, m, mine, make, same_layout ? 3 : 0, pushed, mu, &versions);
      done = true;
    });
    auto before = new_root_version(held[0], m[0], pushed, mu, 600);
    auto joined = two_steps_after_joining(c[0], 3);
    step_until(m, 3, before, [&](int s) { return same_layout ? joined(s) : done.load(); });
    joiner.join();
    for (int tp = 0; tp < 2; ++tp) expect_projection(held[0], held[size_t(1 + tp)], tp, "after the joiner");
    if (same_layout) {
      ASSERT_EQ(versions.size(), 3u);
      EXPECT_EQ(versions.back(), version_of(m[0])) << "the joiner's last step is the root's";
      EXPECT_EQ(versions[1], versions[0] + 1);
      EXPECT_TRUE(is_member(c[0], 3));
    } else {
      EXPECT_FALSE(is_member(c[0], 3)) << "the joiner that does not fit is dropped";
    }
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(sparrowModelDestroy(m[size_t(r)]), sparrowSuccess);
    EXPECT_EQ(sparrowCommDestroy(c[size_t(r)]), sparrowSuccess);
  }
}

// Sharded sources (FSDP-style): source `part` of 2 holds rows [0, cut) or [cut, rows) of every
// logical tensor, under a name of its own; `shift` moves the boundary of this part (-1 on part 1:
// the parts overlap by a row; -1 on part 0: they leave a row out).
std::vector<Held> shard(const std::vector<Held>& logical, int part, int shift = 0) {
  std::vector<Held> out;
  for (const auto& l : logical) {
    const size_t rows = l.shape[0], cut = size_t(int(rows / 2 + 1) + shift);
    const size_t start = part ? cut : 0, stop = part ? rows : cut;
    std::vector<size_t> shape = l.shape;
    shape[0] = stop - start;
    Held h(l.name + ".shard" + std::to_string(part), shape);
    h.piece(l.name, 0, start, stop, 0);
    std::copy(l.data.begin() + std::ptrdiff_t(start * l.data.size() / rows),
              l.data.begin() + std::ptrdiff_t(stop * l.data.size() / rows), h.data.begin());
    out.push_back(std::move(h));
  }
  return out;
}

// The two sources' rows of a new version of `logical`, copied into the memory their models point to.
void refill_sources(const std::vector<Held>& logical, std::vector<std::vector<Held>>& held) {
  for (int part = 0; part < 2; ++part) {
    auto fresh = shard(logical, part);
    for (size_t i = 0; i < fresh.size(); ++i) held[size_t(part)][i].data = fresh[i].data;
  }
}

sparrowResult_t make_sharded(sparrowModel_t* m, sparrowComm_t c, std::vector<Held>& held, const std::vector<int>& src) {
  auto ts = tensors_of(held);
  return sparrowModelCreateSharded(m, c, ts.data(), int(ts.size()), 0, src.data(), int(src.size()));
}

// A source holds its own rows (shard()): the digests of the two sources' rows (m[0], m[1]) add up to
// the whole one of a receiver that holds every row (m[2]).
void expect_source_digests_add_up(const std::vector<sparrowModel_t>& m, const std::vector<Held>& logical) {
  for (const char* name : {"q", "emb"}) {
    const size_t cut = find(logical, name).shape[0] / 2 + 1, end = find(logical, name).shape[0];
    unsigned long long whole = 0;
    ASSERT_EQ(sparrowModelGetDigest(m[2], name, &whole), sparrowSuccess);
    EXPECT_EQ(digest_rows(m[0], name, {0, cut}) + digest_rows(m[1], name, {cut, end}), whole) << name;
  }
}

TEST(ModelSync, TwoSourcesEachSendTheirRowsAndReceiversGetOneVersion) {
  Comms comms(5);
  std::vector<Held> logical = trainer(21);
  std::vector<std::vector<Held>> held = {shard(logical, 0), shard(logical, 1),
                                         {Held("v", {4, 4}), Held("emb", {10, 4}), Held("q", {8, 4})},
                                         tp_worker(0), tp_worker(1)};
  const std::vector<int> src = {0, 1};
  std::vector<sparrowModel_t> m(5);
  for (int r = 0; r < 5; ++r) ASSERT_EQ(make_sharded(&m[size_t(r)], comms.c[size_t(r)], held[size_t(r)], src), sparrowSuccess);
  auto step = [&] { return comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); }); };
  for (int s = 1; s <= 3; ++s) {
    auto rc = step();
    for (int r = 0; r < 5; ++r) ASSERT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(comms.c[size_t(r)]);
    for (auto& h : held[2]) ASSERT_EQ(h.data, find(logical, h.name).data) << h.name << " at step " << s;
    for (int tp = 0; tp < 2; ++tp) expect_projection(logical, held[size_t(3 + tp)], tp, "step " + std::to_string(s));
    for (int r = 0; r < 5; ++r) EXPECT_EQ(version_of(m[size_t(r)]), unsigned(s)) << "rank " << r;
    for (const char* name : {"q", "emb"}) {
      const auto rows = tp_rows(name, 0);
      EXPECT_EQ(digest_rows(m[2], name, rows), digest_rows(m[3], name, rows)) << name;
    }
    expect_source_digests_add_up(m, logical);
    mutate(logical, 300 + uint64_t(s));
    refill_sources(logical, held);
  }
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// A rank's tensors moved into device memory (FakeDevice: the host cannot touch it), as an inference
// engine or an FSDP trainer holds them on its GPU. `push` copies `held` to the device, `pull` back.
struct OnDevice {
  FakeDevice& dev;
  std::vector<Held>& held;
  std::vector<void*> ptr;
  OnDevice(FakeDevice& d, std::vector<Held>& h) : dev(d), held(h) {
    for (auto& x : held) ptr.push_back(dev.malloc_device(x.data.size() * 2));
    push();
  }
  std::vector<sparrowTensor_t> tensors() {
    auto ts = tensors_of(held);
    for (size_t i = 0; i < ts.size(); ++i) ts[i].data = ptr[i];
    return ts;
  }
  void push() {
    for (size_t i = 0; i < held.size(); ++i) dev.upload(ptr[i], held[i].data.data(), held[i].data.size() * 2);
  }
  std::vector<Held>& pull() {
    for (size_t i = 0; i < held.size(); ++i) dev.download(held[i].data.data(), ptr[i], held[i].data.size() * 2);
    return held;
  }
  void flip(size_t tensor, size_t elem) {  // the user writes into one element
    pull();
    held[tensor].data[elem] ^= 1;
    push();
  }
};

// The same with the sources' rows in device memory (an FSDP trainer's shards live on its GPUs; here
// the test's FakeDevice, which the host cannot touch): each source extracts and sends its rows from
// the device, the receivers (host) get them bit-exact.
TEST(ModelSync, SourcesWhoseRowsAreInDeviceMemorySendThemFromThere) {
  FakeDeviceScope fd;
  Comms comms(4);
  std::vector<Held> logical = trainer(23);
  std::vector<std::vector<Held>> held = {shard(logical, 0), shard(logical, 1),
                                         {Held("v", {4, 4}), Held("emb", {10, 4}), Held("q", {8, 4})},
                                         tp_worker(0)};
  // The sources' tensors point into device memory holding their rows.
  std::vector<OnDevice> dev = {OnDevice(fd.dev, held[0]), OnDevice(fd.dev, held[1])};
  const std::vector<int> src = {0, 1};
  std::vector<sparrowModel_t> m(4);
  for (int r = 0; r < 4; ++r) {
    auto ts = r < 2 ? dev[size_t(r)].tensors() : tensors_of(held[size_t(r)]);
    ASSERT_EQ(sparrowModelCreateSharded(&m[size_t(r)], comms.c[size_t(r)], ts.data(), int(ts.size()), 0, src.data(), 2),
              sparrowSuccess)
        << "rank " << r << ": " << sparrowGetLastError(comms.c[size_t(r)]);
  }
  for (int s = 1; s <= 3; ++s) {
    auto rc = comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); });
    for (int r = 0; r < 4; ++r) ASSERT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(comms.c[size_t(r)]);
    for (auto& h : held[2]) ASSERT_EQ(h.data, find(logical, h.name).data) << h.name << " at step " << s;
    expect_projection(logical, held[3], 0, "step " + std::to_string(s));
    for (int r = 0; r < 4; ++r) EXPECT_EQ(version_of(m[size_t(r)]), unsigned(s)) << "rank " << r;
    expect_source_digests_add_up(m, logical);  // (the sources' rows read back from the device)
    mutate(logical, 400 + uint64_t(s));
    refill_sources(logical, held);
    for (auto& d : dev) d.push();
  }
  EXPECT_GT(fd.dev.extract_chunk_calls.load() + fd.dev.extracts.load(), 0) << "the sources extracted on the device";
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// Both TP shards of an engine on one rank (tensors "qkv_proj.0" ... "embed.1"): every row, fused and
// padded, so that a step need not be split.
std::vector<Held> both_shards() {
  std::vector<Held> out;
  for (int tp = 0; tp < 2; ++tp)
    for (Held h : tp_worker(tp)) {
      h.name += "." + std::to_string(tp);
      out.push_back(std::move(h));
    }
  return out;
}

void expect_both_shards(const std::vector<Held>& root, const std::vector<Held>& w, const std::string& when) {
  for (int tp = 0; tp < 2; ++tp)
    expect_projection(root, std::vector<Held>(w.begin() + 3 * tp, w.begin() + 3 * tp + 3), tp, when);
}

// Receivers whose tensors are in device memory, one source, a step as one operation: a fused, padded
// layout gets the projection written on the device (its padding never), a whole-tensor receiver
// receives in place; a piece the user wrote into is refused, nothing written, and repaired at the next
// step; a staged step reaches the device only at the commit; a write into padding only is no drift.
TEST(ModelSync, ReceiversWhoseTensorsAreInDeviceMemoryGetTheStepWrittenThere) {
  FakeDeviceScope fd;
  Comms comms(3);
  std::vector<std::vector<Held>> held = {trainer(31), both_shards(), trainer(0)};
  OnDevice fused(fd.dev, held[1]), whole(fd.dev, held[2]);
  std::vector<sparrowModel_t> m(3);
  ASSERT_EQ(make_model(&m[0], comms.c[0], held[0], 0), sparrowSuccess);
  for (int r = 1; r < 3; ++r) {
    auto ts = (r == 1 ? fused : whole).tensors();
    ASSERT_EQ(sparrowModelCreate(&m[size_t(r)], comms.c[size_t(r)], ts.data(), int(ts.size()), 0), sparrowSuccess)
        << sparrowGetLastError(comms.c[size_t(r)]);
  }
  auto sync = [&] { return comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); }); };
  auto expect_held = [&](const std::string& when) {
    expect_both_shards(held[0], fused.pull(), when);
    for (auto& h : whole.pull()) ASSERT_EQ(h.data, find(held[0], h.name).data) << h.name << ": " << when;
  };
  for (int s = 1; s <= 3; ++s) {
    ASSERT_EQ(sync(), std::vector<sparrowResult_t>(3, sparrowSuccess)) << sparrowGetLastError(comms.c[1]);
    expect_held("step " + std::to_string(s));
    for (int r = 0; r < 3; ++r) EXPECT_EQ(version_of(m[size_t(r)]), unsigned(s));
    mutate(held[0], 500 + uint64_t(s));
  }
  EXPECT_GT(fd.dev.scatters.load(), 0) << "the changes were written on the device";

  fused.flip(4, 3);  // the user wrote into o_proj.1
  const std::vector<Held> before = fused.pull();
  auto rc = sync();
  EXPECT_EQ(rc[1], sparrowVersionMismatch) << sparrowGetLastError(comms.c[1]);
  EXPECT_EQ(rc[2], sparrowSuccess);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(fused.pull()[i].data, before[i].data) << "nothing written";
  EXPECT_EQ(version_of(m[1]), 3u);
  mutate(held[0], 600);
  ASSERT_EQ(sync(), std::vector<sparrowResult_t>(3, sparrowSuccess)) << sparrowGetLastError(comms.c[1]);
  expect_held("after the repair");

  mutate(held[0], 700);
  const std::vector<Held> old = fused.pull();
  rc = comms.run([&](int r) {
    sparrowResult_t s = sparrowModelStage(m[size_t(r)]);
    if (s != sparrowSuccess || r == 0) return s;
    staged_ready(comms.c[size_t(r)], 10000);
    if (r == 1)
      for (size_t i = 0; i < old.size(); ++i)
        if (fused.pull()[i].data != old[i].data) return sparrowInternalError;  // written before the commit
    return sparrowModelCommit(m[size_t(r)]);
  });
  ASSERT_EQ(rc, std::vector<sparrowResult_t>(3, sparrowSuccess)) << sparrowGetLastError(comms.c[1]);
  expect_held("after the commit");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(version_of(m[size_t(r)]), 6u);

  // A write into padding only (embed.1's row 4: vocabulary row 10 of 10) is not a drift: the step
  // succeeds and the padding keeps what the user wrote.
  fused.flip(5, 17);
  mutate(held[0], 800);
  ASSERT_EQ(sync(), std::vector<sparrowResult_t>(3, sparrowSuccess)) << sparrowGetLastError(comms.c[1]);
  EXPECT_EQ(fused.pull()[5].data[17], uint16_t(0xdead ^ 1)) << "padding is never written";
  fused.flip(5, 17);
  expect_held("after a write into padding");
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// The same for a split step: two sources, TP shards in device memory receiving their rows only; a
// shard the user wrote into is refused, nothing written, and repaired at the next step; so is one
// whose write to the device failed; a write into padding only is no drift.
TEST(ModelSync, TensorParallelShardsInDeviceMemoryGetTheirRowsFromTwoSources) {
  FakeDeviceScope fd;
  Comms comms(4);
  std::vector<Held> logical = trainer(37);
  std::vector<std::vector<Held>> held = {shard(logical, 0), shard(logical, 1), tp_worker(0), tp_worker(1)};
  std::vector<OnDevice> tp = {OnDevice(fd.dev, held[2]), OnDevice(fd.dev, held[3])};
  const std::vector<int> src = {0, 1};
  std::vector<sparrowModel_t> m(4);
  for (int r = 0; r < 4; ++r) {
    auto ts = r < 2 ? tensors_of(held[size_t(r)]) : tp[size_t(r - 2)].tensors();
    ASSERT_EQ(sparrowModelCreateSharded(&m[size_t(r)], comms.c[size_t(r)], ts.data(), int(ts.size()), 0, src.data(), 2),
              sparrowSuccess)
        << "rank " << r << ": " << sparrowGetLastError(comms.c[size_t(r)]);
  }
  auto sync = [&] { return comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); }); };
  auto next = [&](uint64_t seed) {
    mutate(logical, seed);
    refill_sources(logical, held);
  };
  for (int s = 1; s <= 3; ++s) {
    const int copies = fd.dev.copies.load(), sums = fd.dev.block_sum_calls.load();
    ASSERT_EQ(sync(), std::vector<sparrowResult_t>(4, sparrowSuccess)) << sparrowGetLastError(comms.c[3]);
    // After the first step, one read of each of the shards' 3 tensors per step (the projection's);
    // whether they still hold what was projected is judged by block sums on the device.
    if (s > 1) EXPECT_EQ(fd.dev.copies.load() - copies, 6) << "step " << s;
    if (s > 1) EXPECT_EQ(fd.dev.block_sum_calls.load() - sums, 6) << "step " << s;
    for (int t = 0; t < 2; ++t) expect_projection(logical, tp[size_t(t)].pull(), t, "step " + std::to_string(s));
    next(800 + uint64_t(s));
  }
  tp[1].flip(0, 9);  // the user wrote into tp 1's qkv_proj
  const std::vector<Held> before = tp[1].pull();
  auto rc = sync();
  EXPECT_EQ(rc[2], sparrowSuccess);
  EXPECT_EQ(rc[3], sparrowVersionMismatch) << sparrowGetLastError(comms.c[3]);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(tp[1].pull()[i].data, before[i].data) << "nothing written";
  expect_projection(logical, tp[0].pull(), 0, "beside the refused shard");
  next(900);
  ASSERT_EQ(sync(), std::vector<sparrowResult_t>(4, sparrowSuccess)) << sparrowGetLastError(comms.c[3]);
  for (int t = 0; t < 2; ++t) expect_projection(logical, tp[size_t(t)].pull(), t, "after the repair");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(version_of(m[size_t(r)]), 5u) << "rank " << r;
  EXPECT_GT(fd.dev.scatters.load(), 0);
  EXPECT_GT(fd.dev.syncs.load(), 0) << "a step waits for the work queued on the device first";

  // Writes to the device that fail (every one, for the step): the shards' step fails with the device's
  // error, the sources' succeeds, and the next step rewrites what differs.
  next(1000);
  fd.dev.fail_scatter_after = 0;
  rc = sync();
  fd.dev.fail_scatter_after = -1;
  EXPECT_EQ(rc, (std::vector<sparrowResult_t>{sparrowSuccess, sparrowSuccess, sparrowUnhandledCudaError,
                                               sparrowUnhandledCudaError}));
  next(1100);
  ASSERT_EQ(sync(), std::vector<sparrowResult_t>(4, sparrowSuccess)) << sparrowGetLastError(comms.c[3]);
  for (int t = 0; t < 2; ++t) expect_projection(logical, tp[size_t(t)].pull(), t, "after a failed write");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(version_of(m[size_t(r)]), 7u) << "rank " << r;

  // A write into padding only (tp 1's embed row 4: vocabulary row 10 of 10) is not a drift: the step
  // succeeds and the padding keeps what the user wrote.
  tp[1].flip(2, 17);
  next(1200);
  ASSERT_EQ(sync(), std::vector<sparrowResult_t>(4, sparrowSuccess)) << sparrowGetLastError(comms.c[3]);
  EXPECT_EQ(tp[1].pull()[2].data[17], uint16_t(0xdead ^ 1)) << "padding is never written";
  tp[1].flip(2, 17);
  for (int t = 0; t < 2; ++t) expect_projection(logical, tp[size_t(t)].pull(), t, "after a write into padding");
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// Two sources on an elastic communicator: TP shards receive their rows from both, bit-exact, and a
// worker that dies between steps is dropped. The worker that dies holds rows of source 1 only, so
// only source 1's operations drop it; the root (rank 0) learns of it at the next step's roll call,
// and from then on every rank counts it out. The last step is staged.
TEST(ModelSync, TwoSourcesOnAnElasticCommunicatorAgreeOnTheMembersAndGoOn) {
  const int n = 5;
  std::vector<sparrowComm_t> c = open_elastic(n, 2000);
  for (auto x : c) ASSERT_NE(x, nullptr);
  std::vector<Held> logical = trainer(41);
  const size_t tail = find(logical, "emb").shape[0] / 2 + 1;  // source 1 holds emb's rows from here
  std::vector<Held> emb_tail = {Held("emb_tail", {10 - tail, 4})};
  emb_tail[0].piece("emb", 0, tail, 10, 0);
  std::vector<std::vector<Held>> held = {shard(logical, 0), shard(logical, 1), tp_worker(0), tp_worker(1), emb_tail};
  const std::vector<int> src = {0, 1};
  std::vector<sparrowModel_t> m(n);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(make_sharded(&m[size_t(r)], c[size_t(r)], held[size_t(r)], src), sparrowSuccess) << "rank " << r;
  auto step = [&](int ranks) { return sync_first(m, ranks); };
  auto members = [&](int r) {
    int live[8], nlive = 0;
    EXPECT_EQ(sparrowCommGetMembers(c[size_t(r)], live, 8, &nlive), sparrowSuccess);
    return std::vector<int>(live, live + nlive);
  };
  auto expect_exact = [&](const std::string& when) {
    for (int tp = 0; tp < 2; ++tp) expect_projection(logical, held[size_t(2 + tp)], tp, when);
  };
  for (int s = 1; s <= 2; ++s) {
    ASSERT_EQ(step(n), std::vector<sparrowResult_t>(n, sparrowSuccess)) << sparrowGetLastError(c[2]);
    expect_exact("step " + std::to_string(s));
    const Bf16& emb = find(logical, "emb").data;
    EXPECT_TRUE(std::equal(held[4][0].data.begin(), held[4][0].data.end(), emb.begin() + long(tail * 4))) << "emb_tail";
    mutate(logical, 1200 + uint64_t(s));
    refill_sources(logical, held);
  }
  EXPECT_EQ(sparrowModelDestroy(m[4]), sparrowSuccess);
  EXPECT_EQ(sparrowCommAbort(c[4]), sparrowSuccess);  // the emb_tail worker dies
  for (int s = 3; s <= 5; ++s) {
    if (s < 5) ASSERT_EQ(step(4), std::vector<sparrowResult_t>(4, sparrowSuccess)) << sparrowGetLastError(c[0]);
    std::vector<std::thread> ts;  // the last step staged: the receivers commit once it arrived
    std::vector<sparrowResult_t> rc(4, sparrowInternalError);
    for (int r = 0; s == 5 && r < 4; ++r)
      ts.emplace_back([&, r] {
        rc[size_t(r)] = sparrowModelStage(m[size_t(r)]);
        if (r < 2 || rc[size_t(r)] != sparrowSuccess) return;
        rc[size_t(r)] = staged_ready(c[size_t(r)], 10000) ? sparrowModelCommit(m[size_t(r)]) : sparrowInternalError;
      });
    for (auto& t : ts) t.join();
    if (s == 5) ASSERT_EQ(rc, std::vector<sparrowResult_t>(4, sparrowSuccess)) << sparrowGetLastError(c[2]);
    expect_exact("step " + std::to_string(s) + ", after the drop");
    if (s == 3) EXPECT_EQ(members(1), (std::vector<int>{0, 1, 2, 3})) << "source 1 dropped it";
    mutate(logical, 1200 + uint64_t(s));
    refill_sources(logical, held);
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(members(r), (std::vector<int>{0, 1, 2, 3})) << "rank " << r << " counts it out";
    EXPECT_EQ(version_of(m[size_t(r)]), 5u) << "rank " << r;
    EXPECT_EQ(sparrowModelDestroy(m[size_t(r)]), sparrowSuccess);
    EXPECT_EQ(sparrowCommDestroy(c[size_t(r)]), sparrowSuccess);
  }
}

// With two sources, a worker that dies and comes back (into its slot, with its old layout) rejoins
// too: the root admits it at the sources' roll call, sends it the agreement, and tells source 1 where
// it is; it gets every source's rows of that step's version, then every step, bit-exact.
TEST(ModelSync, AWorkerThatRejoinsAModelWithTwoSourcesGetsEverySourcesRows) {
  const int n = 5;
  sparrowUniqueId id;
  std::vector<sparrowComm_t> c = open_elastic(n, 1000, {}, &id);
  for (auto x : c) ASSERT_NE(x, nullptr);
  std::vector<Held> logical = trainer(51);
  std::vector<std::vector<Held>> held = {shard(logical, 0), shard(logical, 1), tp_worker(0), tp_worker(1), trainer(52)};
  const std::vector<int> src = {0, 1};
  std::vector<sparrowModel_t> m(n);
  for (int r = 0; r < n; ++r) ASSERT_EQ(make_sharded(&m[size_t(r)], c[size_t(r)], held[size_t(r)], src), sparrowSuccess);
  ASSERT_EQ(sync_first(m, n), std::vector<sparrowResult_t>(n, sparrowSuccess)) << sparrowGetLastError(c[4]);
  EXPECT_EQ(sparrowModelDestroy(m[4]), sparrowSuccess);
  EXPECT_EQ(sparrowCommAbort(c[4]), sparrowSuccess);  // the whole-tensor worker dies
  std::map<uint64_t, std::vector<Held>> pushed;
  std::mutex mu;
  std::vector<Held> mine = trainer(53);
  std::vector<uint64_t> versions;
  std::thread joiner([&] {
    auto make = [&](sparrowModel_t* x, sparrowComm_t cc) { return make_sharded(x, cc, mine, src); };
    join_and_step(id, 4, c, m, mine, make, 3, pushed, mu, &versions);
  });
  auto before = [&](int s) {
    mutate(logical, 700 + uint64_t(s));
    refill_sources(logical, held);
    std::lock_guard<std::mutex> l(mu);
    pushed[version_of(m[0]) + 1] = logical;
  };
  step_until(m, 4, before, two_steps_after_joining(c[0], 4));
  joiner.join();
  for (int tp = 0; tp < 2; ++tp) expect_projection(logical, held[size_t(2 + tp)], tp, "after the joiner");
  ASSERT_EQ(versions.size(), 3u);
  EXPECT_EQ(versions.back(), version_of(m[0]));
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(is_member(c[size_t(r)], 4)) << "rank " << r;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(sparrowModelDestroy(m[size_t(r)]), sparrowSuccess);
    EXPECT_EQ(sparrowCommDestroy(c[size_t(r)]), sparrowSuccess);
  }
}

// Several sources stream at once, and a receiver takes their operations one after the other: here
// making its mirrors (256 MB) and receiving source 0's rows (a first full version) take the receiver
// far longer than the lease (500 ms), while source 1's one row is sent at once. Source 1 must not
// drop the receiver meanwhile: the receiver tells it that it is alive from the moment the sources
// start (without that, source 1 dropped it in 3 of 4 runs on a 2-core VM).
TEST(ModelSync, OnAnElasticCommunicatorALaterSourceWaitsForAReceiverBusyWithAnEarlierOne) {
  std::vector<sparrowComm_t> c = open_elastic(3, 500);
  for (auto x : c) ASSERT_NE(x, nullptr);
  const size_t rows = 8192, cols = 16384;
  std::vector<std::vector<Held>> held = {{Held("w#0", {rows - 1, cols})}, {Held("w#1", {1, cols})}, {Held("w", {rows, cols})}};
  held[0][0].piece("w", 0, 0, rows - 1, 0);
  held[1][0].piece("w", 0, rows - 1, rows, 0);
  uint64_t seed = 3;
  for (int s = 0; s < 2; ++s)
    for (auto& x : held[size_t(s)][0].data) x = uint16_t(rng_next(seed));
  const std::vector<int> src = {0, 1};
  std::vector<sparrowModel_t> m(3);
  for (int r = 0; r < 3; ++r)
    ASSERT_EQ(make_sharded(&m[size_t(r)], c[size_t(r)], held[size_t(r)], src), sparrowSuccess) << "rank " << r;
  std::vector<sparrowResult_t> rc(3);
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r) ts.emplace_back([&, r] { rc[size_t(r)] = sparrowModelSync(m[size_t(r)]); });
  for (auto& t : ts) t.join();
  ASSERT_EQ(rc, std::vector<sparrowResult_t>(3, sparrowSuccess)) << sparrowGetLastError(c[2]);
  const Bf16& got = held[2][0].data;
  EXPECT_TRUE(std::equal(held[0][0].data.begin(), held[0][0].data.end(), got.begin()));
  EXPECT_TRUE(std::equal(held[1][0].data.begin(), held[1][0].data.end(), got.end() - long(cols)));
  for (int r = 0; r < 3; ++r) {
    int live[4], nlive = 0;
    EXPECT_EQ(sparrowCommGetMembers(c[size_t(r)], live, 4, &nlive), sparrowSuccess);
    EXPECT_EQ(nlive, 3) << "rank " << r << ": nobody dropped";
    EXPECT_EQ(sparrowModelDestroy(m[size_t(r)]), sparrowSuccess);
    EXPECT_EQ(sparrowCommDestroy(c[size_t(r)]), sparrowSuccess);
  }
}

TEST(ModelSync, WithTwoSourcesAReceiverThatWroteIntoItsTensorsIsRefusedThenRepaired) {
  Comms comms(4);
  std::vector<Held> logical = trainer(25);
  std::vector<std::vector<Held>> held = {shard(logical, 0), shard(logical, 1), trainer(0), tp_worker(1)};
  std::vector<sparrowModel_t> m(4);
  for (int r = 0; r < 4; ++r) ASSERT_EQ(make_sharded(&m[size_t(r)], comms.c[size_t(r)], held[size_t(r)], {0, 1}), sparrowSuccess);
  auto step = [&] { return comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); }); };
  auto refill = [&] {
    mutate(logical, 77);
    refill_sources(logical, held);
  };
  ASSERT_EQ(step(), std::vector<sparrowResult_t>(4, sparrowSuccess));
  refill();
  held[3][2].data[1] ^= 1;  // the TP worker wrote into its embedding shard
  const auto before = held[3];
  auto rc = step();
  EXPECT_EQ(rc, (std::vector<sparrowResult_t>{sparrowSuccess, sparrowSuccess, sparrowSuccess, sparrowVersionMismatch}));
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(held[3][i].data, before[i].data) << "nothing written";
  for (auto& h : held[2]) EXPECT_EQ(h.data, find(logical, h.name).data) << h.name;
  EXPECT_EQ(version_of(m[3]), 1u);
  refill();
  ASSERT_EQ(step(), std::vector<sparrowResult_t>(4, sparrowSuccess));
  expect_projection(logical, held[3], 1, "after the repair");
  EXPECT_EQ(version_of(m[3]), 3u);
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// Staging with two sources: the receivers take both parts in the background while their tensors
// keep the old version, and get the new one only at the commit, whole. A receiver that wrote into
// its tensors meanwhile is refused at the commit (nothing written) and repaired by the next step.
TEST(ModelSync, WithTwoSourcesAStagedStepReachesTheTensorsOnlyAtTheCommit) {
  Comms comms(4);
  std::vector<Held> logical = trainer(27);
  std::vector<std::vector<Held>> held = {shard(logical, 0), shard(logical, 1), trainer(0), tp_worker(0)};
  std::vector<sparrowModel_t> m(4);
  for (int r = 0; r < 4; ++r) ASSERT_EQ(make_sharded(&m[size_t(r)], comms.c[size_t(r)], held[size_t(r)], {0, 1}), sparrowSuccess);
  ASSERT_EQ(comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); }), std::vector<sparrowResult_t>(4, sparrowSuccess));
  auto staged = [&](bool write_before_commit) {
    mutate(logical, 90 + version_of(m[0]));
    refill_sources(logical, held);
    const auto old2 = held[2], old3 = held[3];
    return comms.run([&](int r) {
      sparrowResult_t s = sparrowModelStage(m[size_t(r)]);
      if (s != sparrowSuccess || r < 2) return s;
      if (!staged_ready(comms.c[size_t(r)], 20000)) return sparrowInternalError;
      const auto& old = r == 2 ? old2 : old3;
      for (size_t i = 0; i < old.size(); ++i)
        if (held[size_t(r)][i].data != old[i].data) return sparrowInternalError;  // written before the commit
      if (r == 3 && write_before_commit) held[3][1].data[0] ^= 1;
      return sparrowModelCommit(m[size_t(r)]);
    });
  };
  for (int s = 2; s <= 3; ++s) {
    ASSERT_EQ(staged(false), std::vector<sparrowResult_t>(4, sparrowSuccess)) << "step " << s;
    for (auto& h : held[2]) ASSERT_EQ(h.data, find(logical, h.name).data) << h.name << " at step " << s;
    expect_projection(logical, held[3], 0, "staged step " + std::to_string(s));
    for (int r = 0; r < 4; ++r) EXPECT_EQ(version_of(m[size_t(r)]), unsigned(s)) << "rank " << r;
  }
  const auto before = held[3];
  auto rc = staged(true);
  EXPECT_EQ(rc, (std::vector<sparrowResult_t>{sparrowSuccess, sparrowSuccess, sparrowSuccess, sparrowVersionMismatch}));
  auto written = before;
  written[1].data[0] ^= 1;
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(held[3][i].data, written[i].data) << "only the worker's own write";
  EXPECT_EQ(version_of(m[3]), 3u);
  ASSERT_EQ(staged(false), std::vector<sparrowResult_t>(4, sparrowSuccess));
  expect_projection(logical, held[3], 0, "after the repair");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(version_of(m[size_t(r)]), 5u) << "rank " << r;
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// A Megatron-style tensor-parallel trainer's rank `tp` of 2 (the layout of tp_worker: fused,
// column-parallel qkv, row-parallel o (some columns of every row), vocab-parallel emb with padding),
// holding `logical`'s weights.
std::vector<Held> tp_source(const std::vector<Held>& logical, int tp) {
  std::vector<Held> s = tp_worker(tp);
  for (auto& h : s) project_into(logical, h);
  return s;
}

// A receiver of another layout than the trainer's: TP=1 fused qkv, o whole under another name, the
// last 2 rows of o again in a tensor of their own (a piece along dim 0 of a tensor the sources split
// along dim 1), emb padded to 12 rows.
std::vector<Held> tp1_worker() {
  std::vector<Held> w = {Held("qkv_proj", {16, 4}, 0xdead), Held("o_proj", {4, 8}, 0xdead),
                         Held("o_tail", {2, 8}, 0xdead), Held("embed", {12, 4}, 0xdead)};
  w[0].piece("q", 0, 0, 8, 0).piece("k", 0, 0, 4, 8).piece("v", 0, 0, 4, 12);
  w[1].piece("o", 1, 0, 8, 0);
  w[2].piece("o", 0, 2, 4, 0);
  w[3].piece("emb", 0, 0, 10, 0);
  return w;
}

unsigned long long reference_digest(const std::vector<Held>& logical, const std::string& name) {
  const Held& l = find(logical, name);
  return format::digest_range(0, l.data.data(), 0, l.data.size(), 2);
}

// Sources that split a tensor along dim 1 (row-parallel o) and hold fused, padded pieces along dim 0
// (qkv, emb): receivers of any layout get the step bit-exact, the digests of o agree with the
// trainer's logical o, and a rank that holds only some of o's columns cannot give its digest.
TEST(ModelSync, TensorParallelSourcesSplitAlongColumnsAndFusedRowsReachEveryLayout) {
  Comms comms(5);
  std::vector<Held> logical = trainer(41);
  std::vector<std::vector<Held>> held = {
      tp_source(logical, 0), tp_source(logical, 1),
      {Held("v", {4, 4}), Held("o", {4, 8}), Held("emb", {10, 4}), Held("q", {8, 4}), Held("k", {4, 4})},
      tp1_worker(), tp_worker(1)};
  const std::vector<int> src = {0, 1};
  std::vector<sparrowModel_t> m(5);
  for (int r = 0; r < 5; ++r) ASSERT_EQ(make_sharded(&m[size_t(r)], comms.c[size_t(r)], held[size_t(r)], src), sparrowSuccess);
  for (int s = 1; s <= 3; ++s) {
    const std::string when = "step " + std::to_string(s);
    auto rc = comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); });
    for (int r = 0; r < 5; ++r) ASSERT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(comms.c[size_t(r)]);
    for (int r = 2; r < 5; ++r) expect_holds(logical, held[size_t(r)], when + ", rank " + std::to_string(r));
    EXPECT_EQ(find(held[4], "embed").data[4 * 4], 0xdead) << "padding is never written";
    // A shard of the trainer's own layout receives its rows of q, k, v, emb and its columns of o only.
    EXPECT_EQ(stats_of(comms.c[4]).denseBytes, (16 + 8 + 8 + 16 + 16) * 2u);
    EXPECT_EQ(stats_of(comms.c[2]).denseBytes, (32 + 16 + 16 + 32 + 40) * 2u);
    for (int r = 0; r < 5; ++r) EXPECT_EQ(version_of(m[size_t(r)]), unsigned(s)) << "rank " << r;
    unsigned long long d = 0;
    for (int r : {2, 3}) {
      ASSERT_EQ(sparrowModelGetDigest(m[size_t(r)], "o", &d), sparrowSuccess);
      EXPECT_EQ(d, reference_digest(logical, "o")) << when << ", rank " << r;
    }
    EXPECT_EQ(digest_rows(m[3], "o", {2, 4}), digest_rows(m[2], "o", {2, 4})) << when;
    EXPECT_EQ(sparrowModelGetDigest(m[4], "o", &d), sparrowInvalidUsage) << "a shard holds half of o's columns";
    EXPECT_EQ(sparrowModelGetDigest(m[0], "o", &d), sparrowInvalidUsage) << "so does a source";
    EXPECT_EQ(digest_rows(m[0], "q", {0, 4}) + digest_rows(m[1], "q", {4, 8}), reference_digest(logical, "q")) << when;
    mutate(logical, 500 + uint64_t(s));
    for (int tp = 0; tp < 2; ++tp)
      for (auto& h : held[size_t(tp)]) project_into(logical, h);  // (in place: the models point into it)
  }
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// Two sources (ranks 0 and 1) and a receiver holding `held`: the first step fails on every rank with
// sparrowInvalidUsage, saying `says`.
void expect_sources_refused(Comms& comms, std::vector<std::vector<Held>>& held, const char* says) {
  std::vector<sparrowModel_t> m(3);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(make_sharded(&m[size_t(r)], comms.c[size_t(r)], held[size_t(r)], {0, 1}), sparrowSuccess);
  auto rc = comms.run([&](int r) { return sparrowModelSync(m[size_t(r)]); });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(rc[size_t(r)], sparrowInvalidUsage) << "rank " << r;
    EXPECT_NE(std::string(sparrowGetLastError(comms.c[size_t(r)])).find(says), std::string::npos)
        << sparrowGetLastError(comms.c[size_t(r)]);
  }
  for (auto x : m) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

// Sources whose columns of a tensor overlap, or that split it along different dims, fail every rank
// naming it.
TEST(ModelSync, SourcesWhoseColumnsOverlapOrSplitAlongDifferentDimsFailEveryRank) {
  Comms comms(3);
  std::vector<Held> logical = trainer(43);
  for (bool overlap : {true, false}) {
    std::vector<std::vector<Held>> held = {tp_source(logical, 0), tp_source(logical, 1), tp1_worker()};
    Held& o1 = held[1][1];  // source 1's o: columns [4, 8)
    if (overlap) {
      o1.pieces[0].start = 3;
      o1.pieces[0].stop = 7;
    } else {
      o1 = Held("o_proj", {2, 8});  // ... or all of o's rows [2, 4) along dim 0 (as the other rows are columns)
      o1.piece("o", 0, 2, 4, 0);
    }
    expect_sources_refused(comms, held, overlap ? "elements [3, 4) along dim 1 of tensor 'o' are held by ranks 0 and 1"
                                                : "tensor 'o': rank 0 holds columns along dim 1 of shape [4, *] "
                                                  "bfloat16, rank 1 holds rows");
  }
}

// A model whose steps are one operation (every receiver holds every row: no split) takes a joiner of
// another layout than its slot's: a worker restarted as a fused, padded TP=1 engine where a
// whole-tensor worker was; it gets every version bit-exact.
TEST(ModelSync, AJoinerOfAnotherLayoutRejoinsAModelThatIsNotSplit) {
  const int n = 3;
  sparrowUniqueId id;
  std::vector<sparrowComm_t> c = open_elastic(n, 1000, {}, &id);
  for (auto x : c) ASSERT_NE(x, nullptr);
  std::vector<std::vector<Held>> held = {trainer(61), trainer(62), trainer(63)};
  std::vector<sparrowModel_t> m(n);
  for (int r = 0; r < n; ++r) ASSERT_EQ(make_model(&m[size_t(r)], c[size_t(r)], held[size_t(r)], 0), sparrowSuccess);
  ASSERT_EQ(sync_first(m, n), std::vector<sparrowResult_t>(n, sparrowSuccess));
  EXPECT_EQ(sparrowModelDestroy(m[2]), sparrowSuccess);
  EXPECT_EQ(sparrowCommAbort(c[2]), sparrowSuccess);
  std::map<uint64_t, std::vector<Held>> pushed;
  std::mutex mu;
  std::vector<Held> mine = {Held("qkv", {16, 4}, 0xdead), Held("o", {4, 8}, 0xdead), Held("embed", {12, 4}, 0xdead)};
  mine[0].piece("q", 0, 0, 8, 0).piece("k", 0, 0, 4, 8).piece("v", 0, 0, 4, 12);
  mine[2].piece("emb", 0, 0, 10, 0);
  std::vector<uint64_t> versions;
  std::thread joiner([&] {
    auto make = [&](sparrowModel_t* x, sparrowComm_t cc) { return make_model(x, cc, mine, 0); };
    join_and_step(id, 2, c, m, mine, make, 3, pushed, mu, &versions);
  });
  auto before = new_root_version(held[0], m[0], pushed, mu, 650);
  step_until(m, 2, before, two_steps_after_joining(c[0], 2));
  joiner.join();
  ASSERT_EQ(versions.size(), 3u);
  EXPECT_EQ(versions.back(), version_of(m[0]));
  EXPECT_EQ(find(mine, "embed").data[10 * 4], 0xdead) << "padding is never written";
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(sparrowModelDestroy(m[size_t(r)]), sparrowSuccess);
    EXPECT_EQ(sparrowCommDestroy(c[size_t(r)]), sparrowSuccess);
  }
}

TEST(ModelSync, SourcesThatOverlapOrLeaveAGapFailEveryRankNamingTheRows) {
  Comms comms(3);
  std::vector<Held> logical = trainer(23);
  for (bool overlap : {true, false}) {
    std::vector<std::vector<Held>> held = {shard(logical, 0, overlap ? 0 : -1), shard(logical, 1, overlap ? -1 : 0),
                                           tp_worker(0)};
    expect_sources_refused(comms, held, overlap ? "rows [4, 5) of tensor 'q' are held by ranks 0 and 1"
                                                : "rows [4, 5) of tensor 'q' are held by no source");
  }
}

TEST(ModelSync, BadArgumentsAndDeadHandlesAreRefused) {
  Comms comms(1);
  sparrowModel_t m = nullptr;
  std::vector<Held> bad = {Held("a", {2})};
  bad[0].piece("x", 0, 0, 2, 0);
  EXPECT_EQ(make_model(&m, comms.c[0], bad, 0), sparrowInvalidArgument);  // pieces on the root
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("whole logical tensors"), std::string::npos);
  std::vector<Held> ok = {Held("a", {2})};
  EXPECT_EQ(make_model(&m, comms.c[0], ok, 1), sparrowInvalidArgument);  // root out of range
  sparrowTensor_t nul{nullptr, nullptr, sparrowBfloat16, 0, nullptr, nullptr, 0};
  EXPECT_EQ(sparrowModelCreate(&m, comms.c[0], &nul, 1, 0), sparrowInvalidArgument);
  ASSERT_EQ(make_model(&m, comms.c[0], ok, 0), sparrowSuccess);
  unsigned long long d = 0;
  EXPECT_EQ(sparrowModelGetDigest(m, "a", &d), sparrowInvalidUsage);  // no step yet
  EXPECT_EQ(sparrowModelSync(m), sparrowSuccess);
  EXPECT_EQ(sparrowModelGetDigest(m, "b", &d), sparrowInvalidArgument);
  EXPECT_EQ(sparrowModelDestroy(m), sparrowSuccess);
  EXPECT_EQ(sparrowModelSync(m), sparrowInvalidUsage);
  EXPECT_EQ(sparrowModelDestroy(m), sparrowInvalidUsage);
}

}  // namespace
}  // namespace sparrow::test
