#include "kernels/cpu/delta.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include <cstring>

#include "format/block_sum.h"
#include "format/checkpoint.h"
#include "gen/generator.h"
#include "harness/util.h"

namespace sparrow::kernels::cpu {
namespace {

// A root and a receiver over the same layout.
struct Pair {
  std::vector<TensorSpec> layout;
  std::vector<std::vector<uint8_t>> root, recv;
  ReceiverState state;
  DeltaEncoder enc;
  explicit Pair(std::vector<TensorSpec> l) : layout(l), enc(l) {
    uint64_t seed = 1;
    for (auto& t : layout) {
      root.push_back(test::random_bytes(t.bytes(), seed++));
      recv.emplace_back(t.bytes(), 0);
    }
  }
  std::vector<const void*> src() const {
    std::vector<const void*> v;
    for (auto& b : root) v.push_back(b.data());
    return v;
  }
  std::vector<void*> dst() {
    std::vector<void*> v;
    for (auto& b : recv) v.push_back(b.data());
    return v;
  }
  Result<std::vector<uint8_t>> encode(const EncodeOptions& o = {}, EncodeStats* st = nullptr) {
    auto s = src();
    return enc.encode(s, o, st);
  }
  Status apply(std::span<const uint8_t> ck, const ApplyOptions& o = {}) {
    auto d = dst();
    return apply_checkpoint(ck, d, layout, state, o);
  }
  // The block sums the receiver keeps are those of its buffers, recomputed from scratch: what a
  // commit brought up to date from the changes alone is exact.
  bool block_sums_exact() const {
    if (state.block_sums.size() != layout.size()) return false;
    for (size_t t = 0; t < layout.size(); ++t) {
      const size_t es = layout[t].elem_size(), blk = size_t(state.block_elems) * es;
      if (state.block_sums[t].size() != (recv[t].size() + blk - 1) / blk) return false;
      for (size_t b = 0; b < state.block_sums[t].size(); ++b)
        if (state.block_sums[t][b] != format::block_sum(recv[t].data() + b * blk, std::min(blk, recv[t].size() - b * blk)))
          return false;
    }
    return true;
  }
  void mutate(double density, uint64_t seed) {
    for (size_t t = 0; t < layout.size(); ++t)
      gen::mutate_exact(root[t].data(), layout[t].count, layout[t].elem_size(), density, seed + t);
  }
  bool equal() const { return root == recv; }
};

std::vector<TensorSpec> mixed_layout() {
  return {{"bf16", 9, 5000}, {"empty", 7, 0}, {"one", 8, 1}, {"i8", 0, 4097}, {"f32", 7, 3333}, {"u64", 5, 1025}, {"f16", 6, 2048}};
}

EncodeOptions small_chunks() {
  EncodeOptions o;
  o.chunk_elems = 1024;
  return o;
}

TEST(Delta, StepsOverDensitiesAreBitExact) {
  Pair p(mixed_layout());
  auto ck = p.encode(small_chunks());
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  ASSERT_TRUE(p.apply(ck.value()).ok());
  EXPECT_TRUE(p.equal());
  EXPECT_EQ(p.state.version, 1u);
  uint64_t seed = 100;
  for (double d : {0.0, 1e-4, 0.003, 0.01, 0.05, 0.3, 0.7, 1.0, 0.01}) {
    p.mutate(d, seed++);
    EncodeStats st;
    auto c = p.encode(small_chunks(), &st);
    ASSERT_TRUE(c.ok());
    Status s = p.apply(c.value());
    ASSERT_TRUE(s.ok()) << "density " << d << ": " << s.message();
    EXPECT_TRUE(p.equal()) << "density " << d;
    EXPECT_EQ(st.wire_bytes, c->size());
    if (d == 0.0) EXPECT_EQ(st.chunks, 0u);
  }
  EXPECT_EQ(p.state.version, 10u);
}

TEST(Delta, SpecialFloatValuesSurvive) {
  Pair p({{"f32", 7, 64}, {"bf16", 9, 64}});
  ASSERT_TRUE(p.apply(p.encode().value()).ok());
  const uint32_t f32[] = {0x80000000, 0x7fc00001, 0xffbadbad, 0x00000001, 0x7f800000, 0x00000000};
  memcpy(p.root[0].data() + 8, f32, sizeof f32);
  const uint16_t bf[] = {0x8000, 0x7fc1, 0x0001, 0xff80};
  memcpy(p.root[1].data() + 2, bf, sizeof bf);
  ASSERT_TRUE(p.apply(p.encode().value()).ok());
  EXPECT_TRUE(p.equal());
  // And back to +0 from -0: a change of bits only.
  memset(p.root[0].data() + 8, 0, 4);
  ASSERT_TRUE(p.apply(p.encode().value()).ok());
  EXPECT_TRUE(p.equal());
}

TEST(Delta, OutputIndependentOfThreadsAndIsa) {
  std::vector<std::vector<uint8_t>> outs;
  for (int threads : {1, 3}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      Pair p({{"w", 9, 300000}, {"v", 7, 70001}});
      EncodeOptions o = small_chunks();
      o.threads = threads;
      o.isa = isa;
      ASSERT_TRUE(p.encode(o).ok());
      p.mutate(0.01, 9);
      auto c = p.encode(o);
      ASSERT_TRUE(c.ok());
      outs.push_back(c.value());
    }
  }
  for (auto& o : outs) EXPECT_EQ(o, outs[0]);
}

TEST(Delta, PaperFormatRoundTripsAndIsLarger) {
  Pair a({{"w", 9, 1 << 18}}), b({{"w", 9, 1 << 18}});
  EncodeOptions paper;
  paper.paper_format = true;
  ASSERT_TRUE(a.apply(a.encode().value()).ok());
  ASSERT_TRUE(b.apply(b.encode(paper).value()).ok());
  // Same realistic-looking ulp-sized change on both.
  for (Pair* p : {&a, &b}) {
    uint64_t s = 3;
    for (size_t i = 0; i < (1 << 18); ++i)
      if (test::rng_next(s) % 100 == 0) p->root[0][2 * i] += 1;
  }
  EncodeStats sa, sb;
  auto ca = a.encode({}, &sa);
  auto cb = b.encode(paper, &sb);
  ASSERT_TRUE(a.apply(ca.value()).ok());
  ASSERT_TRUE(b.apply(cb.value()).ok());
  EXPECT_TRUE(a.equal());
  EXPECT_TRUE(b.equal());
  EXPECT_EQ(sb.index_codec_chunks[int(format::IndexCodec::kLeb128)], sb.chunks);
  EXPECT_EQ(sb.value_codec_chunks[int(format::ValueCodec::kOverwrite)], sb.chunks);
  EXPECT_EQ(sa.leb128_overwrite_bytes, cb->size());  // the paper-format estimate is exact
  EXPECT_LT(ca->size() * 2, cb->size());
}

TEST(Delta, WrongBaseVersionIsRejectedUntouched) {
  Pair p({{"w", 9, 5000}});
  ASSERT_TRUE(p.apply(p.encode().value()).ok());
  p.mutate(0.01, 1);
  auto v2 = p.encode().value();
  p.mutate(0.01, 2);
  auto v3 = p.encode().value();
  auto before = p.recv;
  Status s = p.apply(v3);  // skipped v2
  EXPECT_EQ(s.code(), Code::kVersionMismatch);
  EXPECT_NE(s.message().find("holds version 1"), std::string::npos) << s.message();
  EXPECT_EQ(p.recv, before);
  EXPECT_EQ(p.state.version, 1u);
  ASSERT_TRUE(p.apply(v2).ok());
  ASSERT_TRUE(p.apply(v3).ok());
  EXPECT_TRUE(p.equal());
}

TEST(Delta, UserWriteIntoReceiverIsCaught) {
  Pair p({{"w", 9, 50000}});
  ASSERT_TRUE(p.apply(p.encode().value()).ok());
  p.mutate(0.01, 1);
  auto v2 = p.encode().value();
  // The user writes into a position the step changes: the result digest cannot match.
  auto cv = format::parse_checkpoint(v2).value();
  std::vector<uint32_t> pos(cv.chunks[0].h.change_count);
  ASSERT_TRUE(format::decode_index(cv.chunks[0].h.index_codec, cv.chunks[0].index, cv.chunks[0].h.elem_count,
                                   uint32_t(pos.size()), pos.data()).ok());
  p.recv[0][2 * pos[0]] ^= 1;
  auto before = p.recv;
  Status s = p.apply(v2);
  EXPECT_EQ(s.code(), Code::kVersionMismatch) << s.message();
  EXPECT_EQ(p.recv, before);
  // A write elsewhere (an element this step does not change) is caught by base verification, which
  // is on by default; with it off the remembered digests cannot see it.
  p.recv[0][2 * pos[0]] ^= 1;
  uint32_t elsewhere = pos[0] == 0 ? 1 : 0;
  while (std::find(pos.begin(), pos.end(), elsewhere) != pos.end()) ++elsewhere;
  p.recv[0][2 * elsewhere] ^= 1;
  before = p.recv;
  EXPECT_TRUE(ApplyOptions{}.verify_base) << "verification is the default";
  s = p.apply(v2);
  EXPECT_EQ(s.code(), Code::kVersionMismatch);
  EXPECT_NE(s.message().find("no longer hold version 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s.message();
  EXPECT_EQ(p.recv, before);
  ApplyOptions lax;
  lax.verify_base = false;
  ReceiverState kept = p.state;
  EXPECT_TRUE(p.apply(v2, lax).ok()) << "without verification the write goes unnoticed";
  EXPECT_FALSE(p.equal());
  p.state = kept;
  p.recv = before;
  // A full snapshot (resync) repairs it.
  p.enc.reset();
  ASSERT_TRUE(p.apply(p.encode().value()).ok());
  EXPECT_TRUE(p.equal());
}

// Base verification over many steps and chunks: a write anywhere (a changed element, an unchanged
// one, the last element of a tensor, several tensors) is refused untouched; untouched buffers always
// apply; the block checksums it keeps follow every committed step.
TEST(Delta, BaseVerificationFindsEveryWriteAcrossStepsAndTensors) {
  Pair p(mixed_layout());
  ASSERT_TRUE(p.apply(p.encode(small_chunks()).value()).ok());
  uint64_t seed = 99;
  for (int step = 0; step < 12; ++step) {
    p.mutate(0.01, 100 + step);
    auto ck = p.encode(small_chunks()).value();
    auto before = p.recv;
    // Odd steps: scribble on 1..3 tensors at random elements (one bit), then check and restore.
    if (step % 2) {
      std::vector<size_t> hit;
      for (size_t t = 0; t < p.layout.size(); ++t)
        if (p.layout[t].count && (test::rng_next(seed) % 3 == 0 || hit.empty() && t + 1 == p.layout.size())) hit.push_back(t);
      for (size_t t : hit) {
        uint64_t e = step == 3 ? p.layout[t].count - 1 : test::rng_next(seed) % p.layout[t].count;
        p.recv[t][e * p.layout[t].elem_size()] ^= 0x10;
      }
      auto scribbled = p.recv;
      Status s = p.apply(ck);
      ASSERT_EQ(s.code(), Code::kVersionMismatch) << "step " << step << ": " << s.message();
      EXPECT_NE(s.message().find(std::to_string(hit.size()) + " of 7 tensor(s)"), std::string::npos) << s.message();
      for (size_t t : hit) EXPECT_NE(s.message().find("'" + p.layout[t].name + "'"), std::string::npos) << s.message();
      EXPECT_EQ(p.recv, scribbled) << "nothing written";
      p.recv = before;
    }
    ASSERT_TRUE(p.apply(ck).ok()) << "step " << step;
    ASSERT_TRUE(p.equal()) << "step " << step;
    ASSERT_EQ(p.state.block_elems, 1024u);
    ASSERT_TRUE(p.block_sums_exact()) << "step " << step;
  }
}

// A receiver whose block checksums are of another chunking (or missing) still verifies, through the
// full content digests.
TEST(Delta, BaseVerificationWithoutBlockSumsFallsBackToDigests) {
  Pair p({{"w", 9, 50000}});
  ASSERT_TRUE(p.apply(p.encode().value()).ok());
  p.mutate(0.01, 3);
  auto ck = p.encode(small_chunks()).value();  // another chunking than the snapshot's
  p.recv[0][777] ^= 4;
  auto before = p.recv;
  Status s = p.apply(ck);
  EXPECT_EQ(s.code(), Code::kVersionMismatch) << s.message();
  EXPECT_EQ(p.recv, before);
  p.recv[0][777] ^= 4;
  ASSERT_TRUE(p.apply(ck).ok());
  EXPECT_TRUE(p.equal());
  EXPECT_EQ(p.state.block_elems, 1024u);
}

// ---- a step streamed frame by frame (ApplySession), as the collectives feed it -------------------------

// The frames of checkpoint `ck` (sharing its bytes): header, chunks in stream order, footer.
struct Frames {
  std::shared_ptr<const std::vector<uint8_t>> all;
  std::span<const uint8_t> header, footer;
  std::vector<std::span<const uint8_t>> chunks;
  explicit Frames(const std::vector<uint8_t>& ck) : all(std::make_shared<const std::vector<uint8_t>>(ck)) {
    auto cv = format::parse_checkpoint(*all).value();
    const uint8_t* base = all->data();
    header = {base, cv.header_bytes};
    size_t end = cv.header_bytes;
    for (auto& c : cv.chunks) {
      const uint8_t* b = c.index.data() - format::kChunkHeaderBytes;
      chunks.emplace_back(b, c.frame_bytes());
      end = size_t(b - base) + c.frame_bytes();
    }
    footer = {base + end, all->size() - end};
  }
};

// Streams `ck` to p's receiver with its chunks in `order` (indices; empty: as encoded).
Status apply_streamed(Pair& p, const std::vector<uint8_t>& ck, std::vector<size_t> order, ApplyStats* st = nullptr) {
  Frames f(ck);
  if (order.empty())
    for (size_t i = 0; i < f.chunks.size(); ++i) order.push_back(i);
  auto d = p.dst();
  ApplySession s(d, p.layout, p.state, {});
  SPARROW_RETURN_IF_ERROR(s.begin(f.header));
  for (size_t i : order) SPARROW_RETURN_IF_ERROR(s.add_chunk(f.all, f.chunks[i]));
  return s.finish(f.footer, st);
}

// A step streamed chunk by chunk, in order or reversed (as striped streams may deliver it), applies
// bit-exact with exact block sums, step after step.
TEST(Delta, StreamedStepsInAnyChunkOrderAreBitExact) {
  Pair p({{"w", 9, 64 * 1024}, {"quiet", 9, 8 * 1024}});
  ASSERT_TRUE(p.apply(p.encode(small_chunks()).value()).ok());
  for (int step = 0; step < 4; ++step) {
    gen::mutate_exact(p.root[0].data(), p.layout[0].count, 2, 0.01, 40 + step);  // "quiet" keeps its values
    auto ck = p.encode(small_chunks()).value();
    const size_t nchunks = Frames(ck).chunks.size();
    ASSERT_EQ(nchunks, 64u) << "every block of 'w' changes, none of 'quiet'";
    std::vector<size_t> order;
    for (size_t i = 0; i < nchunks; ++i) order.push_back(step % 2 ? nchunks - 1 - i : i);
    ApplyStats st;
    ASSERT_TRUE(apply_streamed(p, ck, order, &st).ok()) << "step " << step;
    ASSERT_TRUE(p.equal()) << "step " << step;
    ASSERT_TRUE(p.block_sums_exact()) << "step " << step;
    EXPECT_EQ(st.chunks, 64u);
  }
}

// Base verification of a streamed step (on its own thread, overlapped with the chunks) catches a
// write in a block that a chunk changes and in one that none does, whatever the chunks' order;
// nothing is written.
TEST(Delta, StreamedStepRefusesWritesWhereverTheyAre) {
  Pair p({{"w", 9, 32 * 1024}, {"quiet", 9, 8 * 1024}});
  ASSERT_TRUE(p.apply(p.encode(small_chunks()).value()).ok());
  gen::mutate_exact(p.root[0].data(), p.layout[0].count, 2, 0.01, 5);
  auto ck = p.encode(small_chunks()).value();
  const size_t nchunks = Frames(ck).chunks.size();
  std::vector<size_t> reverse;
  for (size_t i = nchunks; i-- > 0;) reverse.push_back(i);
  struct Case {
    size_t tensor, byte;
    const char* name;
  };
  for (const Case& c : {Case{0, 2 * 20000 + 1, "'w'"}, Case{1, 2 * 4000, "'quiet'"}, Case{0, 0, "'w'"}}) {
    for (bool rev : {false, true}) {
      auto before = p.recv;
      p.recv[c.tensor][c.byte] ^= 0x20;
      auto scribbled = p.recv;
      ReceiverState kept = p.state;
      Status s = apply_streamed(p, ck, rev ? reverse : std::vector<size_t>{});
      EXPECT_EQ(s.code(), Code::kVersionMismatch) << c.name << (rev ? " reversed" : "") << ": " << s.message();
      EXPECT_NE(s.message().find(c.name), std::string::npos) << s.message();
      EXPECT_EQ(p.recv, scribbled) << "nothing written";
      EXPECT_EQ(p.state.version, kept.version);
      p.recv = before;
    }
  }
  ASSERT_TRUE(apply_streamed(p, ck, reverse).ok());
  EXPECT_TRUE(p.equal());
}

// A session abandoned before its footer (a lost parent, a timeout) ends at once, its verifier thread
// with it, and writes nothing.
TEST(Delta, AbandonedStreamedStepEndsAtOnce) {
  Pair p({{"w", 9, 64 * 1024}});
  ASSERT_TRUE(p.apply(p.encode(small_chunks()).value()).ok());
  p.mutate(0.01, 9);
  auto ck = p.encode(small_chunks()).value();
  Frames f(ck);
  auto before = p.recv;
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto d = p.dst();
    ApplySession s(d, p.layout, p.state, {});
    ASSERT_TRUE(s.begin(f.header).ok());
    for (size_t i = 0; i < f.chunks.size() / 2; ++i) ASSERT_TRUE(s.add_chunk(f.all, f.chunks[i]).ok());
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(p.recv, before);
  ASSERT_TRUE(apply_streamed(p, ck, {}).ok());
  EXPECT_TRUE(p.equal());
}

TEST(Delta, CorruptOrTruncatedCheckpointNeverHalfApplies) {
  Pair p({{"w", 9, 20000}, {"f", 7, 5000}});
  ASSERT_TRUE(p.apply(p.encode(small_chunks()).value()).ok());
  p.mutate(0.02, 4);
  auto good = p.encode(small_chunks()).value();
  auto before = p.recv;
  uint64_t s = 77;
  for (int trial = 0; trial < 300; ++trial) {
    auto bad = good;
    size_t at = test::rng_next(s) % bad.size();
    bad[at] ^= uint8_t(1 << (test::rng_next(s) % 8));
    ReceiverState st = p.state;
    auto d = p.dst();
    EXPECT_FALSE(apply_checkpoint(bad, d, p.layout, st, {}).ok()) << "flip at " << at;
    EXPECT_EQ(st.version, p.state.version);
    ASSERT_EQ(p.recv, before) << "flip at " << at << " modified the target";
  }
  for (size_t len : {size_t(0), size_t(10), good.size() / 2, good.size() - 1}) {
    EXPECT_EQ(p.apply(std::span<const uint8_t>(good.data(), len)).code(), Code::kCorruptData);
    ASSERT_EQ(p.recv, before);
  }
  ASSERT_TRUE(p.apply(good).ok());
  EXPECT_TRUE(p.equal());
}

// ---- catching up over a chain of deltas ----------------------------------------------------------

Status apply_chain(Pair& p, const std::vector<std::vector<uint8_t>>& links, const ApplyOptions& o = {}) {
  std::vector<std::span<const uint8_t>> v(links.begin(), links.end());
  auto d = p.dst();
  ApplySession s(d, p.layout, p.state, o);
  SPARROW_RETURN_IF_ERROR(s.prepare_chain(v, {}));
  return s.commit();
}

// The same checkpoint with its chunks in reverse order (as a stream may deliver them).
std::vector<uint8_t> reversed_chunks(const std::vector<uint8_t>& ck) {
  const Frames f(ck);
  std::vector<uint8_t> out(f.header.begin(), f.header.end());
  for (size_t i = f.chunks.size(); i-- > 0;) out.insert(out.end(), f.chunks[i].begin(), f.chunks[i].end());
  out.insert(out.end(), f.footer.begin(), f.footer.end());
  return out;
}

TEST(Delta, ChainOfDeltasCatchesUpInOneWrite) {
  for (bool verify : {true, false}) {
    Pair p(mixed_layout());
    ApplyOptions ao;
    ao.verify_base = verify;
    ASSERT_TRUE(p.apply(p.encode(small_chunks()).value(), ao).ok());
    // Densities that make sparse chunks over sparse ones, dense over sparse, sparse over dense.
    std::vector<std::vector<uint8_t>> links;
    uint64_t seed = 500;
    for (double d : {0.01, 0.003, 0.7, 0.02, 1.0, 0.0, 0.05}) {
      p.mutate(d, seed++);
      links.push_back(p.encode(small_chunks()).value());
    }
    links[1] = reversed_chunks(links[1]);
    Status s = apply_chain(p, links, ao);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(p.equal());
    EXPECT_EQ(p.state.version, 8u);
    if (verify) EXPECT_TRUE(p.block_sums_exact());
    // What it committed is a proper base for the next step (version, digests and block sums).
    p.mutate(0.01, 9);
    s = p.apply(p.encode(small_chunks()).value(), ao);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(p.equal());
  }
}

TEST(Delta, BrokenChainsAreRefusedUntouched) {
  Pair p({{"w", 9, 20000}, {"f", 7, 5000}});
  ASSERT_TRUE(p.apply(p.encode(small_chunks()).value()).ok());
  std::vector<std::vector<uint8_t>> links;
  for (int i = 0; i < 4; ++i) {
    p.mutate(0.02, 40 + i);
    links.push_back(p.encode(small_chunks()).value());
  }
  const auto before = p.recv;
  const ReceiverState st0 = p.state;
  auto refused = [&](std::vector<std::vector<uint8_t>> l, Code want, const char* what) {
    Status s = apply_chain(p, l);
    EXPECT_EQ(s.code(), want) << what << ": " << s.message();
    EXPECT_EQ(p.recv, before) << what;
    EXPECT_EQ(p.state.version, st0.version) << what;
  };
  refused({links[0], links[2], links[3]}, Code::kCorruptData, "a gap");
  refused({links[1], links[2], links[3]}, Code::kVersionMismatch, "a chain for another version");
  auto flipped = links;
  flipped[2][flipped[2].size() / 2] ^= 4;
  refused(flipped, Code::kCorruptData, "a flipped bit in the third delta");
  auto cut = links;
  cut[3].resize(cut[3].size() - 3);
  refused(cut, Code::kCorruptData, "a truncated last delta");
  refused({links[0], p.enc.snapshot(p.src()).value()}, Code::kCorruptData, "a snapshot inside");
  p.recv[0][123] ^= 1;  // the user wrote into the buffer: base verification refuses the chain
  Status s = apply_chain(p, links);
  EXPECT_EQ(s.code(), Code::kVersionMismatch) << s.message();
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s.message();
  p.recv[0][123] ^= 1;
  EXPECT_EQ(p.recv, before);
  s = apply_chain(p, links);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(p.equal());
  EXPECT_EQ(p.state.version, 5u);
}

// adopt_view (sparrow-ckpt diff): the caller's base is read in place, never written, and the step is
// byte-identical to the one adopt() (a copy) leads to.
TEST(Delta, AdoptViewEncodesTheSameStepWithoutTouchingTheBase) {
  auto layout = mixed_layout();
  Pair a(layout);
  std::vector<std::vector<uint8_t>> base = a.root;
  std::vector<const void*> bp;
  for (auto& b : base) bp.push_back(b.data());
  a.mutate(0.02, 31);
  DeltaEncoder copy(layout), view(layout);
  ASSERT_TRUE(copy.adopt(bp, 7).ok());
  ASSERT_TRUE(view.adopt_view(bp, 7).ok());
  const auto untouched = base;
  auto x = copy.encode(a.src(), small_chunks());
  auto y = view.encode(a.src(), small_chunks());
  ASSERT_TRUE(x.ok() && y.ok()) << y.status().message();
  EXPECT_EQ(x.value(), y.value());
  EXPECT_EQ(base, untouched) << "the view is only read";
  EXPECT_FALSE(view.has_state()) << "one encode per view";
  DeltaEncoder streamed(layout);
  ASSERT_TRUE(streamed.adopt_view(bp, 7).ok());
  auto none = [](std::vector<uint8_t>&&) {};
  EXPECT_EQ(streamed.encode_stream(a.src(), small_chunks(), nullptr, none, none).status().code(), Code::kInvalidUsage);
}

TEST(Delta, LayoutMismatchIsInvalidUsage) {
  Pair p({{"w", 9, 100}});
  auto ck = p.encode().value();
  ReceiverState st;
  std::vector<uint8_t> buf(400);
  void* d[] = {buf.data()};
  std::vector<TensorSpec> other = {{"w", 7, 100}};
  EXPECT_EQ(apply_checkpoint(ck, d, other, st).code(), Code::kInvalidUsage);
  std::vector<TensorSpec> longer = {{"w", 9, 101}};
  EXPECT_EQ(apply_checkpoint(ck, d, longer, st).code(), Code::kInvalidUsage);
}

TEST(Delta, EncoderRejectsBadArguments) {
  DeltaEncoder enc({{"w", 9, 10}});
  std::vector<const void*> none;
  EXPECT_EQ(enc.encode(none).status().code(), Code::kInvalidArgument);
  std::vector<const void*> null = {nullptr};
  EXPECT_EQ(enc.encode(null).status().code(), Code::kInvalidArgument);
  DeltaEncoder bad({{"w", 77, 10}});
  uint8_t x[80];
  std::vector<const void*> one = {x};
  EXPECT_EQ(bad.encode(one).status().code(), Code::kInvalidArgument);
}

TEST(Delta, RealisticStepIsSmall) {
  gen::GenOptions go;
  go.model = "qwen3-0.6b";
  go.layers = 1;
  go.vocab = 1024;
  auto g = gen::UpdateGenerator::create(go);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto& gen = *g.value();
  DeltaEncoder enc(gen.tensors());
  ReceiverState st;
  std::vector<std::vector<uint8_t>> recv;
  std::vector<void*> dst;
  for (auto& t : gen.tensors()) recv.emplace_back(t.bytes());
  for (auto& r : recv) dst.push_back(r.data());
  ASSERT_TRUE(apply_checkpoint(enc.encode(gen.buffers()).value(), dst, gen.tensors(), st).ok());
  for (int step = 0; step < 3; ++step) {
    gen.step();
    EncodeStats es;
    auto ck = enc.encode(gen.buffers(), {}, &es).value();
    ASSERT_TRUE(apply_checkpoint(ck, dst, gen.tensors(), st).ok());
    EXPECT_GT(es.density(), 0.001);
    EXPECT_LT(es.density(), 0.05);
    EXPECT_GT(double(es.dense_bytes) / double(es.wire_bytes), 50.0);
    EXPECT_LT(es.wire_bytes, es.leb128_overwrite_bytes);
  }
  auto src = gen.buffers();
  for (size_t t = 0; t < recv.size(); ++t) ASSERT_EQ(memcmp(recv[t].data(), src[t], recv[t].size()), 0);
}

}  // namespace
}  // namespace sparrow::kernels::cpu
