// The root's retained deltas: in memory and as step files, chains between versions, anchors, and the
// catch-up message.
#include "collectives/retain.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "core/params.h"
#include "format/checkpoint.h"
#include "format/container.h"
#include "gen/generator.h"
#include "harness/util.h"
#include "kernels/cpu/delta.h"

namespace sparrow::coll {
namespace {

using kernels::cpu::TensorSpec;

struct Steps {
  std::vector<TensorSpec> layout{{"w", 9, 200000}, {"b", 7, 3000}};
  std::vector<std::vector<uint8_t>> bufs;
  kernels::cpu::DeltaEncoder enc{layout};
  uint64_t seed = 1;
  Steps() {
    for (auto& t : layout) bufs.push_back(test::random_bytes(t.bytes(), seed++));
  }
  std::vector<const void*> src() const { return {bufs[0].data(), bufs[1].data()}; }
  // The next version, as frames in the order a stream emits them.
  std::vector<std::shared_ptr<Bytes>> next() {
    for (size_t t = 0; t < layout.size(); ++t)
      gen::mutate_exact(bufs[t].data(), layout[t].count, layout[t].elem_size(), 0.02, seed++);
    std::vector<std::shared_ptr<Bytes>> frames;
    kernels::cpu::EncodeOptions o;
    o.chunk_elems = 16384;
    std::mutex mu;  // chunks are emitted by the encoder's threads
    auto add = [&](Bytes&& f) {
      std::lock_guard<std::mutex> lk(mu);
      frames.push_back(std::make_shared<Bytes>(std::move(f)));
    };
    auto footer = enc.encode_stream(src(), o, nullptr, add, add);
    EXPECT_TRUE(footer.ok());
    add(std::move(footer.value()));
    std::reverse(frames.begin() + 1, frames.end() - 1);  // chunks in another order than the file's
    return frames;
  }
};

class RetainTest : public ::testing::Test {
 protected:
  void SetUp() override { params::clear_overrides(); }
  void TearDown() override { params::clear_overrides(); }
};

TEST_F(RetainTest, ChainsLeadFromEveryRetainedVersionToTheNewest) {
  ASSERT_TRUE(params::set_override("RETAIN_STEPS", "3").ok());
  Steps s;
  RetainedSteps rs;
  ASSERT_TRUE(rs.enabled());
  ASSERT_TRUE(s.enc.adopt(s.src(), 1).ok());  // version 1 is the base everyone holds
  for (int v = 2; v <= 6; ++v) ASSERT_TRUE(rs.add(s.next()).ok());
  EXPECT_EQ(rs.size(), 3u);
  EXPECT_FALSE(rs.chain(1, 6)) << "version 1's delta was dropped";
  EXPECT_FALSE(rs.chain(3, 7));
  auto none = rs.chain(6, 6);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  auto c = rs.chain(3, 6);
  ASSERT_TRUE(c);
  ASSERT_EQ(c->size(), 3u);
  for (auto& l : *c) EXPECT_TRUE(format::parse_checkpoint(*l).ok()) << "kept with its chunks in order";
  // The message round-trips, and a cut one is refused.
  Bytes m = encode_chain_message(*c);
  auto links = decode_chain_message(m);
  ASSERT_TRUE(links.ok());
  ASSERT_EQ(links->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(std::equal(links.value()[i].begin(), links.value()[i].end(), (*c)[i]->begin(), (*c)[i]->end()));
  for (size_t cut : {size_t(4), size_t(12), m.size() - 1}) {
    EXPECT_EQ(decode_chain_message(std::span<const uint8_t>(m.data(), cut)).status().code(), Code::kCorruptData) << cut;
  }
  Bytes longer = m;
  longer.push_back(0);
  EXPECT_EQ(decode_chain_message(longer).status().code(), Code::kCorruptData);
  EXPECT_FALSE(is_chain_message(*(*c)[0]));
  rs.clear();
  EXPECT_FALSE(rs.chain(3, 6));
}

// A joiner names what its buffers hold by their content digests: each retained base version is
// found by its own, and nothing else is.
TEST_F(RetainTest, VersionsAreFoundByTheirContentDigests) {
  ASSERT_TRUE(params::set_override("RETAIN_STEPS", "3").ok());
  Steps s;
  RetainedSteps rs;
  ASSERT_TRUE(s.enc.adopt(s.src(), 1).ok());
  std::map<uint64_t, std::vector<uint64_t>> held;  // version -> the digests of its contents
  for (int v = 2; v <= 5; ++v) {
    held[uint64_t(v - 1)] = kernels::cpu::content_digests(s.layout, s.src());
    ASSERT_TRUE(rs.add(s.next()).ok());
  }
  held[5] = kernels::cpu::content_digests(s.layout, s.src());
  EXPECT_EQ(held[5], s.enc.digests()) << "content_digests agrees with the encoder's";
  EXPECT_EQ(rs.version_with(held[1]), 0u) << "version 1's delta was dropped";
  for (uint64_t v : {2, 3, 4}) EXPECT_EQ(rs.version_with(held[v]), v);
  EXPECT_EQ(rs.version_with(held[5]), 0u) << "the newest version is no delta's base yet";
  auto other = held[3];
  other[1] ^= 1;
  EXPECT_EQ(rs.version_with(other), 0u);
  EXPECT_EQ(rs.version_with({}), 0u);
}

TEST_F(RetainTest, StepFilesAndAnchorsOnDisk) {
  char dir[] = "/tmp/sparrow-retain-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_TRUE(params::set_override("RETAIN_STEPS", "2").ok());
  ASSERT_TRUE(params::set_override("RETAIN_DIR", dir).ok());
  ASSERT_TRUE(params::set_override("RETAIN_ANCHOR_EVERY", "2").ok());
  Steps s;
  RetainedSteps rs;
  ASSERT_TRUE(s.enc.adopt(s.src(), 1).ok());
  for (int v = 2; v <= 5; ++v) {
    ASSERT_TRUE(rs.add(s.next()).ok());
    if (rs.wants_anchor(uint64_t(v))) ASSERT_TRUE(rs.add_anchor(uint64_t(v), s.enc.snapshot(s.src()).value()).ok());
  }
  std::set<std::string> files;
  for (auto& e : std::filesystem::directory_iterator(dir)) files.insert(e.path().filename().string());
  // Deltas 4 and 5 (the last two); anchor 4 (from which they lead on); anchor 2 is pruned.
  EXPECT_EQ(files, (std::set<std::string>{"step-4.spd", "step-5.spd", "anchor-4.spd"}));
  for (auto& f : files) {
    auto b = format::read_file(std::string(dir) + "/" + f);
    ASSERT_TRUE(b.ok());
    auto sf = format::decode_step_file(b.value());
    ASSERT_TRUE(sf.ok()) << f;
    EXPECT_TRUE(format::parse_checkpoint(sf->payload).ok()) << f;
    EXPECT_NE(sf->metadata.find(f[0] == 'a' ? "\"anchor\"" : "\"delta\""), std::string::npos) << sf->metadata;
  }
  auto c = rs.chain(3, 5);  // read back from the files
  ASSERT_TRUE(c);
  EXPECT_EQ(c->size(), 2u);
  rs.clear();
  files.clear();
  for (auto& e : std::filesystem::directory_iterator(dir)) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"anchor-4.spd"}));
  std::filesystem::remove_all(dir);
}

TEST_F(RetainTest, OffByZero) {
  ASSERT_TRUE(params::set_override("RETAIN_STEPS", "0").ok());
  Steps s;
  RetainedSteps rs;
  EXPECT_FALSE(rs.enabled());
  ASSERT_TRUE(rs.add(s.next()).ok());
  EXPECT_EQ(rs.size(), 0u);
}

}  // namespace
}  // namespace sparrow::coll
