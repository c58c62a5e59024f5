// SPDX-License-Identifier: Apache-2.0
#include "model/manifest.h"

#include <gtest/gtest.h>

#include <numeric>
#include <tuple>

namespace sparrow::model {
namespace {

LocalTensor whole(const std::string& name, std::vector<uint64_t> shape, void* data = nullptr, uint8_t dt = 9) {
  static uint8_t dummy;
  return LocalTensor{name, data ? data : &dummy, dt, std::move(shape), {}};
}

Manifest qkv_manifest() {
  Manifest m;
  m.root = 0;
  m.tensors = {{"q", 9, {8, 4}}, {"k", 9, {4, 4}}, {"v", 9, {4, 4}}, {"o", 9, {4, 8}}};
  return m;
}

TEST(Manifest, EncodesAndDecodesAndRejectsJunk) {
  Manifest m = qkv_manifest();
  m.root = 3;
  auto bytes = m.encode();
  auto back = Manifest::decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->root, 3);
  ASSERT_EQ(back->tensors.size(), 4u);
  EXPECT_EQ(back->tensors[3].name, "o");
  EXPECT_EQ(back->tensors[3].shape, (std::vector<uint64_t>{4, 8}));
  for (size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_EQ(Manifest::decode(std::span(bytes).first(cut)).status().code(), Code::kCorruptData) << cut;
  bytes.push_back(0);
  EXPECT_EQ(Manifest::decode(bytes).status().code(), Code::kCorruptData);
}

TEST(Manifest, LocalChecksNameWhatIsWrong) {
  EXPECT_TRUE(check_local({whole("a", {2, 3}), whole("b", {4})}, true).ok());
  auto dup = check_local({whole("a", {2}), whole("a", {3})}, true);
  EXPECT_EQ(dup.code(), Code::kInvalidArgument);
  EXPECT_NE(dup.message().find("'a' appears twice"), std::string::npos) << dup.message();
  EXPECT_EQ(check_local({whole("a", {2}, nullptr, 42)}, true).code(), Code::kInvalidArgument);
  LocalTensor fused = whole("qkv", {8, 4});
  fused.pieces = {{"q", 0, 0, 4, 0}, {"k", 0, 0, 4, 4}};
  EXPECT_TRUE(check_local({fused}, false).ok());
  EXPECT_EQ(check_local({fused}, true).code(), Code::kInvalidArgument);  // the root holds whole tensors
  fused.pieces[1].offset = 3;                                          // overlaps q's rows
  auto overlap = check_local({fused}, false);
  EXPECT_NE(overlap.message().find("overlap"), std::string::npos) << overlap.message();
  fused.pieces[1] = {"k", 0, 0, 5, 4};  // past the local tensor's 8 rows
  EXPECT_NE(check_local({fused}, false).message().find("runs past"), std::string::npos);
  fused.pieces[1] = {"k", 2, 0, 1, 0};  // no dim 2
  EXPECT_NE(check_local({fused}, false).message().find("dim out of range"), std::string::npos);
  fused.pieces[1] = {"k", 0, 3, 3, 4};  // empty range
  EXPECT_NE(check_local({fused}, false).message().find("stop must be greater"), std::string::npos);
}

TEST(Manifest, ReceiverPlanMatchesByNameAndRefusesWhatDoesNotFit) {
  Manifest m = qkv_manifest();
  auto plan = plan_receiver(m, {whole("v", {4, 4}), whole("q", {8, 4})});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ((*plan)[0].whole, 1);  // q is the second local tensor
  EXPECT_EQ((*plan)[2].whole, 0);
  EXPECT_EQ((*plan)[1].whole, -1);  // k: a mirror, projected nowhere
  auto expect_usage = [&](std::vector<LocalTensor> t, const std::string& says) {
    auto p = plan_receiver(m, t);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), Code::kInvalidUsage);
    EXPECT_NE(p.status().message().find(says), std::string::npos) << p.status().message();
  };
  expect_usage({whole("x", {8, 4})}, "no tensor named 'x'");
  expect_usage({whole("q", {4, 8})}, "'q' [4, 8] bfloat16 differs from the root's 'q' [8, 4]");
  expect_usage({whole("q", {8, 4}, nullptr, 7)}, "differs from the root's");
  LocalTensor shard = whole("o_shard", {4, 4});
  shard.pieces = {{"o", 1, 4, 8, 0}};
  EXPECT_TRUE(plan_receiver(m, {shard}).ok());
  shard.pieces = {{"o", 1, 6, 10, 0}};
  expect_usage({shard}, "past the end of the root's shape [4, 8]");
  shard.pieces = {{"o", 0, 0, 4, 0}};  // rows of o, but the local tensor has 4 columns, o has 8
  expect_usage({shard}, "dim 1 differs");
  shard.pieces = {{"p", 0, 0, 4, 0}};
  expect_usage({shard}, "no tensor named 'p'");
  LocalTensor q_too = whole("qq", {8, 4});
  q_too.pieces = {{"q", 0, 0, 8, 0}};
  auto both = plan_receiver(m, {whole("q", {8, 4}), q_too});
  EXPECT_EQ(both.status().code(), Code::kInvalidArgument);
}

TEST(Manifest, RunsProjectRowAndColumnSlicesAndCopyOnlyWhatChanged) {
  LogicalTensor o{"o", 9, {3, 8}};
  std::vector<uint16_t> logical(24);
  std::iota(logical.begin(), logical.end(), 100);
  std::vector<uint16_t> local(3 * 5, 0xffff);  // 2 columns of o at local columns 1..2; the rest untouched
  LocalTensor t = whole("o_part", {3, 5}, local.data());
  Piece p{"o", 1, 4, 6, 1};
  auto runs = runs_of(o, t, Projection{0, p});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_FALSE(runs_match(runs, reinterpret_cast<uint8_t*>(logical.data()), reinterpret_cast<uint8_t*>(local.data())));
  EXPECT_EQ(copy_changed(runs, reinterpret_cast<uint8_t*>(logical.data()), reinterpret_cast<uint8_t*>(local.data()), true),
            3u * 4);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c)
      EXPECT_EQ(local[size_t(r * 5 + c)], c == 1 || c == 2 ? logical[size_t(r * 8 + 4 + c - 1)] : 0xffff) << r << "," << c;
  EXPECT_TRUE(runs_match(runs, reinterpret_cast<uint8_t*>(logical.data()), reinterpret_cast<uint8_t*>(local.data())));
  EXPECT_EQ(copy_changed(runs, reinterpret_cast<uint8_t*>(logical.data()), reinterpret_cast<uint8_t*>(local.data()), true), 0u);
  local[1] = 7;  // mirrored back into the logical copy
  EXPECT_EQ(copy_changed(runs, reinterpret_cast<uint8_t*>(local.data()), reinterpret_cast<uint8_t*>(logical.data()), false),
            4u);
  EXPECT_EQ(logical[4], 7);
}

// A block of a tensor split along dim 1 (columns [4, 6) of o [3, 8], as one source sends them),
// projected onto rows [1, 3) of a local tensor holding every column of o at column offset 1:
// each run is one row of the block, at its columns.
TEST(Manifest, RunsPlaceABlockInsideALocalRowPiece) {
  LogicalTensor block{"o", 9, {3, 2}, 1, 4, 8};
  EXPECT_EQ(block.logical_shape(), (std::vector<uint64_t>{3, 8}));
  std::vector<uint16_t> b = {10, 11, 20, 21, 30, 31};
  std::vector<uint16_t> local(2 * 10, 0xffff);
  LocalTensor t = whole("o_rows", {2, 10}, local.data());
  auto runs = runs_of(block, t, Projection{0, Piece{"o", 0, 1, 3, 0}, 1, 4 + 1});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(copy_changed(runs, reinterpret_cast<uint8_t*>(b.data()), reinterpret_cast<uint8_t*>(local.data()), true), 8u);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 10; ++c)
      EXPECT_EQ(local[size_t(r * 10 + c)], c == 5 || c == 6 ? b[size_t((r + 1) * 2 + c - 5)] : 0xffff) << r << "," << c;
}

// A manifest with blocks travels, and a receiver's whole tensor and its pieces land in every block.
TEST(Manifest, BlocksTravelAndReceiversPlaceTheirTensorsInEachBlock) {
  Manifest m;
  m.tensors = {{"o", 9, {4, 3}, 1, 0, 8}, {"o", 9, {4, 5}, 1, 3, 8}};
  auto back = Manifest::decode(m.encode());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[1].block_dim, 1);
  EXPECT_EQ(back->tensors[1].block_start, 3u);
  EXPECT_EQ(back->tensors[1].full, 8u);
  auto wrong = m;
  wrong.tensors[1].full = 7;  // 3 + 5 > 7
  EXPECT_EQ(Manifest::decode(wrong.encode()).status().code(), Code::kCorruptData);
  LocalTensor cols = whole("o_cols", {4, 4});
  cols.pieces = {{"o", 1, 2, 6, 0}};  // columns [2, 6): 1 of block 0, 3 of block 1
  auto plan = plan_receiver(m, {whole("o", {4, 8}), cols});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_EQ((*plan)[0].whole, -1);
  ASSERT_EQ((*plan)[0].pieces.size(), 2u);
  ASSERT_EQ((*plan)[1].pieces.size(), 2u);
  const Piece& w1 = (*plan)[1].pieces[0].piece;  // the whole tensor: block 1 at columns 3..8
  EXPECT_EQ(std::make_tuple(w1.dim, w1.start, w1.stop, w1.offset), std::make_tuple(1, 0ull, 5ull, 3ull));
  const Piece& c0 = (*plan)[0].pieces[1].piece, &c1 = (*plan)[1].pieces[1].piece;
  EXPECT_EQ(std::make_tuple(c0.start, c0.stop, c0.offset), std::make_tuple(2ull, 3ull, 0ull));
  EXPECT_EQ(std::make_tuple(c1.start, c1.stop, c1.offset), std::make_tuple(0ull, 3ull, 1ull));
  EXPECT_EQ(plan_receiver(m, {whole("o", {4, 7})}).status().code(), Code::kInvalidUsage);
}

}  // namespace
}  // namespace sparrow::model
