// SPDX-License-Identifier: Apache-2.0
#include "model/split.h"

#include <gtest/gtest.h>

namespace sparrow::model {
namespace {

Manifest model() {
  Manifest m;
  m.root = 0;
  m.tensors = {{"w", 9, {8, 4}}, {"o", 9, {4, 8}}, {"n", 9, {4}}};
  return m;
}

Target whole(size_t local) { return Target{int(local), {}}; }
Target pieces(std::vector<Piece> ps) {
  Target t;
  for (auto& p : ps) t.pieces.push_back({0, p});
  return t;
}

std::vector<int> ranks(const SplitOp& op) { return op.participants; }

TEST(Split, ARankNeedsTheRowsItsPiecesHold) {
  const Manifest m = model();
  // Two pieces of w that touch merge; a dim-1 piece of o needs every row; n is not held at all.
  std::vector<Target> t = {pieces({{"w", 0, 4, 6, 0}, {"w", 0, 6, 8, 2}}), pieces({{"o", 1, 0, 4, 0}}), Target{}};
  const auto rows = needed_rows(m, t);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].logical, 0u);
  EXPECT_EQ(rows[0].start, 4u);
  EXPECT_EQ(rows[0].stop, 8u);
  EXPECT_EQ(rows[1].logical, 1u);
  EXPECT_EQ(rows[1].start, 0u);
  EXPECT_EQ(rows[1].stop, 4u);
  EXPECT_TRUE(covers(rows, 0, 5, 8));
  EXPECT_FALSE(covers(rows, 0, 3, 5));
  EXPECT_FALSE(covers(rows, 2, 0, 1));
  const auto all = needed_rows(m, {whole(0), whole(1), whole(2)});
  EXPECT_EQ(all.size(), 3u);
  EXPECT_TRUE(covers(all, 2, 0, 4));
}

TEST(Split, OneSourceAndTwoShardsMakeThreeOperations) {
  const Manifest m = model();
  // Rank 1 whole, ranks 2 and 3 shards of w (rows 0-4, 4-8); o and n every row for everyone.
  const std::vector<Slice> all = {{0, 0, 8}, {1, 0, 4}, {2, 0, 4}};
  const Needs needs = {{1, all}, {2, {{0, 0, 4}, {1, 0, 4}, {2, 0, 4}}}, {3, {{0, 4, 8}, {1, 0, 4}, {2, 0, 4}}}};
  const auto ops = split_step({whole_part(m)}, needs);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ranks(ops[0]), (std::vector<int>{0, 1, 2}));  // w's first rows: the first segment met
  EXPECT_EQ(ranks(ops[1]), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(ranks(ops[2]), (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(ops[2].segments.size(), 2u);  // o and n, every row
  EXPECT_EQ(ops[2].segments[0].logical, 1u);
  EXPECT_EQ(ops[2].segments[1].logical, 2u);
  ASSERT_EQ(ops[1].segments.size(), 1u);
  EXPECT_EQ(ops[1].segments[0].start, 4u);
  EXPECT_EQ(ops[1].segments[0].stop, 8u);
  // Every receiver whole: one operation of every tensor whole, in order.
  const auto one = split_step({whole_part(m)}, {{1, all}, {2, all}});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(ranks(one[0]), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(one[0].segments.size(), 3u);
}

TEST(Split, SourcesRowsAreCutAtReceiversBoundariesAndUnheldRowsStayHome) {
  const Manifest m = model();
  // Source 0 holds w rows 0-5 (slice 0), source 4 rows 5-8; the receiver holds rows 2-7 only.
  const std::vector<Part> parts = {{0, {{0, 0, 5}}}, {4, {{0, 5, 8}}}};
  const auto ops = split_step(parts, {{1, {{0, 2, 7}}}});
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].source, 0);
  ASSERT_EQ(ops[0].segments.size(), 1u);
  EXPECT_EQ(ops[0].segments[0].start, 2u);  // rows 0-2 nobody holds
  EXPECT_EQ(ops[0].segments[0].stop, 5u);
  EXPECT_EQ(ops[0].segments[0].slice_start, 0u);
  EXPECT_EQ(ops[1].source, 4);
  EXPECT_EQ(ranks(ops[1]), (std::vector<int>{1, 4}));
  EXPECT_EQ(ops[1].segments[0].start, 5u);
  EXPECT_EQ(ops[1].segments[0].stop, 7u);
  EXPECT_EQ(ops[1].segments[0].slice_start, 5u);
}

TEST(Split, RowsAndTablesRoundTripAndJunkIsRefused) {
  const Manifest m = model();
  const std::vector<Slice> rows = {{0, 4, 8}, {1, 0, 4}};
  auto b = encode_rows(rows);
  auto back = decode_rows(b, m);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->size(), 2u);
  for (size_t cut = 0; cut < b.size(); ++cut)
    EXPECT_EQ(decode_rows(std::span(b).first(cut), m).status().code(), Code::kCorruptData) << cut;
  const Needs needs = {{1, rows}, {3, {{2, 0, 4}}}};
  auto t = encode_needs(needs);
  auto nb = decode_needs(t, m);
  ASSERT_TRUE(nb.ok()) << nb.status().to_string();
  EXPECT_EQ(nb->size(), 2u);
  EXPECT_EQ((*nb)[1].first, 3);
  for (size_t cut = 0; cut < t.size(); ++cut)
    EXPECT_EQ(decode_needs(std::span(t).first(cut), m).status().code(), Code::kCorruptData) << cut;
  t.push_back(0);
  EXPECT_EQ(decode_needs(t, m).status().code(), Code::kCorruptData);
  // Out of range, overlapping, out of order, an unknown tensor, ranks out of order.
  for (const auto& bad : std::vector<std::vector<Slice>>{{{0, 4, 9}}, {{0, 0, 4}, {0, 3, 6}}, {{1, 0, 4}, {0, 0, 4}},
                                                         {{3, 0, 1}}, {{0, 2, 2}}})
    EXPECT_EQ(decode_rows(encode_rows(bad), m).status().code(), Code::kCorruptData);
  EXPECT_EQ(decode_needs(encode_needs({{3, rows}, {1, rows}}), m).status().code(), Code::kCorruptData);
  EXPECT_EQ(decode_rows(encode_needs(needs), m).status().code(), Code::kCorruptData) << "not a receiver's rows";
}

}  // namespace
}  // namespace sparrow::model
