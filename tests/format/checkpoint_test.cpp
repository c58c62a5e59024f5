#include "format/checkpoint.h"

#include <gtest/gtest.h>

#include "core/bits.h"
#include "format/digest.h"
#include "harness/util.h"

namespace sparrow::format {
namespace {

Header two_tensors(uint16_t flags = 0) {
  Header h;
  h.flags = flags;
  h.base_version = flags ? 0 : 3;
  h.new_version = 4;
  h.chunk_elems = 100;
  h.tensors = {{"a.weight", 9, 2, 250, 111}, {"b", 7, 4, 40, 222}};
  return h;
}

std::vector<uint8_t> small_checkpoint() {
  Header h = two_tensors();
  std::vector<uint8_t> out;
  write_header(h, out);
  std::vector<uint32_t> pos = {1, 5, 99};
  std::vector<uint8_t> idx;
  encode_index(IndexCodec::kLeb128, pos.data(), pos.size(), 100, 1, idx);
  std::vector<uint8_t> vals = test::random_bytes(6, 1);
  ChunkHeader c{0, 100, 100, 3, IndexCodec::kLeb128, ValueCodec::kOverwrite, 0, 0};
  write_chunk(c, idx, vals, out);
  std::vector<uint8_t> dense = test::random_bytes(50 * 2, 2);
  ChunkHeader d{0, 200, 50, 50, IndexCodec::kDense, ValueCodec::kOverwrite, 0, 0};
  write_chunk(d, {}, dense, out);
  std::vector<uint8_t> v4 = test::random_bytes(4, 3);
  std::vector<uint32_t> p4 = {39};
  std::vector<uint8_t> i4;
  encode_index(IndexCodec::kGolomb, p4.data(), 1, 40, 7, i4);
  ChunkHeader e{1, 0, 40, 1, IndexCodec::kGolomb, ValueCodec::kOverwrite, 0, 0};
  write_chunk(e, i4, v4, out);
  write_footer(Footer{3, {0xabc, 0xdef}}, out);
  return out;
}

TEST(Checkpoint, WriteParseRoundTrip) {
  auto bytes = small_checkpoint();
  auto r = parse_checkpoint(bytes);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto& cv = r.value();
  EXPECT_EQ(cv.header.base_version, 3u);
  EXPECT_EQ(cv.header.new_version, 4u);
  ASSERT_EQ(cv.header.tensors.size(), 2u);
  EXPECT_EQ(cv.header.tensors[0].name, "a.weight");
  EXPECT_EQ(cv.header.tensors[1].base_digest, 222u);
  ASSERT_EQ(cv.chunks.size(), 3u);
  EXPECT_EQ(cv.chunks[0].h.elem_begin, 100u);
  EXPECT_EQ(cv.chunks[1].h.index_codec, IndexCodec::kDense);
  EXPECT_EQ(cv.chunks[2].h.tensor, 1u);
  EXPECT_EQ(cv.footer.new_digests[1], 0xdefu);
}

TEST(Checkpoint, EveryBitFlipIsDetected) {
  auto bytes = small_checkpoint();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit : {0, 5}) {
      auto b = bytes;
      b[i] ^= uint8_t(1 << bit);
      auto r = parse_checkpoint(b);
      EXPECT_FALSE(r.ok()) << "flip at byte " << i << " bit " << bit << " went unnoticed";
    }
  }
}

TEST(Checkpoint, EveryTruncationIsDetected) {
  auto bytes = small_checkpoint();
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto r = parse_checkpoint(std::span<const uint8_t>(bytes.data(), len));
    ASSERT_FALSE(r.ok()) << "truncated to " << len;
    EXPECT_EQ(r.status().code(), Code::kCorruptData);
  }
  auto extra = bytes;
  extra.push_back(0);
  auto r = parse_checkpoint(extra);
  EXPECT_NE(r.status().message().find("trailing"), std::string::npos) << r.status().message();
}

TEST(Checkpoint, FutureFormatVersionIsAVersionError) {
  auto bytes = small_checkpoint();
  bytes[4] = 2;  // format version (checked before the checksum so the error names the version)
  auto r = parse_checkpoint(bytes);
  EXPECT_EQ(r.status().code(), Code::kVersionMismatch);
  EXPECT_NE(r.status().message().find("format version 2"), std::string::npos) << r.status().message();
  std::vector<uint8_t> other = {'G', 'I', 'F', '8', '9', 'a'};
  EXPECT_NE(parse_checkpoint(other).status().message().find("not a sparrow checkpoint"), std::string::npos);
}

TEST(Checkpoint, StructuralRulesEnforced) {
  Header h = two_tensors();
  std::vector<uint8_t> vals(2, 1), idx;
  std::vector<uint32_t> pos = {0};
  encode_index(IndexCodec::kLeb128, pos.data(), 1, 100, 1, idx);
  auto build = [&](std::vector<ChunkHeader> cs, uint64_t count) {
    std::vector<uint8_t> out;
    write_header(h, out);
    for (auto c : cs) write_chunk(c, c.index_codec == IndexCodec::kDense ? std::span<const uint8_t>() : idx, vals, out);
    write_footer(Footer{count, {0, 0}}, out);
    return out;
  };
  ChunkHeader good{0, 0, 100, 1, IndexCodec::kLeb128, ValueCodec::kOverwrite, 0, 0};
  EXPECT_TRUE(parse_checkpoint(build({good}, 1)).ok());
  auto expect_err = [&](std::vector<ChunkHeader> cs, uint64_t count, const char* needle) {
    auto r = parse_checkpoint(build(cs, count));
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), Code::kCorruptData);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_err({good, good}, 2, "out of order");
  // Streamed order (kAny): another order is accepted, a chunk twice is not.
  ChunkHeader second = good;
  second.elem_begin = 100;
  EXPECT_FALSE(parse_checkpoint(build({second, good}, 2)).ok());
  EXPECT_TRUE(parse_checkpoint(build({second, good}, 2), ChunkOrder::kAny).ok());
  auto twice = parse_checkpoint(build({good, second, good}, 3), ChunkOrder::kAny);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("duplicated"), std::string::npos) << twice.status().message();
  expect_err({good}, 2, "footer counts");
  ChunkHeader c = good;
  c.tensor = 5;
  expect_err({c}, 1, "unknown tensor");
  c = good;
  c.elem_begin = 50;
  expect_err({c}, 1, "off the chunk grid");
  c = good;
  c.elem_count = 99;
  expect_err({c}, 1, "element count");
  c = good;
  c.change_count = 0;
  expect_err({c}, 1, "change count");
  c = good;
  c.index_codec = IndexCodec(7);
  expect_err({c}, 1, "unknown index codec");
  c = good;
  c.value_codec = ValueCodec(9);
  expect_err({c}, 1, "unknown value codec");
  c = good;
  c.index_codec = IndexCodec::kDense;
  expect_err({c}, 1, "dense chunk");
  h.flags = kFlagFull;
  h.base_version = 0;
  expect_err({good}, 1, "not dense");
  ChunkHeader full0{0, 0, 100, 100, IndexCodec::kDense, ValueCodec::kOverwrite, 0, 0};
  expect_err({full0}, 1, "missing chunks");
}

TEST(Checkpoint, HeaderRejectsBadTensorTable) {
  Header h = two_tensors();
  h.tensors[1].elem_size = 2;  // float32 is 4 bytes
  std::vector<uint8_t> out;
  write_header(h, out);
  size_t n;
  auto r = parse_header(out, &n);
  EXPECT_NE(r.status().message().find("element size"), std::string::npos) << r.status().message();
  h = two_tensors();
  h.tensors[0].dtype = 42;
  out.clear();
  write_header(h, out);
  EXPECT_NE(parse_header(out, &n).status().message().find("unknown datatype"), std::string::npos);
  h = two_tensors();
  h.new_version = h.base_version;
  out.clear();
  write_header(h, out);
  EXPECT_NE(parse_header(out, &n).status().message().find("version step"), std::string::npos);
}

}  // namespace
}  // namespace sparrow::format
