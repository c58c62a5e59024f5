#include "topology/tree.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

namespace sparrow::topology {
namespace {

// Every rank but the root has exactly one parent, the root none, and all are reachable.
void expect_spanning(const Tree& t, int n) {
  std::set<int> seen;
  std::function<void(int)> walk = [&](int r) {
    ASSERT_TRUE(seen.insert(r).second) << "rank " << r << " reached twice";
    for (int c : t.children[r]) {
      EXPECT_EQ(t.parent[c], r);
      walk(c);
    }
  };
  walk(t.root);
  EXPECT_EQ(int(seen.size()), n) << t.format();
  EXPECT_EQ(t.parent[t.root], -1);
}

TreeInput four_regions() {
  // 12 ranks: root region A (ranks 0-2), B (3-5, two hosts), C (6-8), D (9-11); RTTs from the root.
  TreeInput in;
  in.nranks = 12;
  in.root = 0;
  const char* regs[] = {"A", "A", "A", "B", "B", "B", "C", "C", "C", "D", "D", "D"};
  const char* hosts[] = {"a0", "a1", "a1", "b0", "b0", "b1", "c0", "c1", "c2", "d0", "d0", "d0"};
  for (int r = 0; r < 12; ++r) in.places.push_back({hosts[r], regs[r]});
  in.rtt_s = {0, 1e-4, 1e-4, 0.02, 0.02, 0.021, 0.08, 0.08, 0.08, 0.2, 0.2, 0.2};
  in.bw_Bps = {0, 1e9, 1e9, 1e8, 2e8, 1e8, 1e8, 1e8, 1e8, 5e7, 5e7, 6e7};
  in.message_bytes = 1e7;
  return in;
}

TEST(Tree, EveryAlgorithmSpansEveryRankForAnyRoot) {
  for (int n : {1, 2, 3, 7, 8, 12}) {
    for (int root : {0, n - 1, n / 2}) {
      TreeInput in = four_regions();
      in.nranks = n;
      in.root = root;
      in.places.resize(n);
      in.rtt_s.resize(n);
      in.bw_Bps.resize(n);
      for (const auto& a : {"flat", "chain", "binomial", "region_tree", "region_spread", "two_level", "auto"}) {
        auto t = build_tree(a, in);
        ASSERT_TRUE(t.ok()) << a;
        expect_spanning(t.value(), n);
      }
    }
  }
}

TEST(Tree, RegionTreeCrossesEachBoundaryOnce) {
  auto t = build_tree("region_tree", four_regions()).value();
  expect_spanning(t, 12);
  int crossings = 0;
  for (int r = 0; r < 12; ++r)
    if (t.parent[r] >= 0 && t.region[t.parent[r]] != t.region[r]) ++crossings;
  EXPECT_EQ(crossings, 3) << t.format();  // root -> B, C, D relays, once each
  EXPECT_EQ(t.parent[4], 0) << "relay of B: best probed bandwidth";
  EXPECT_EQ(t.parent[11], 0) << "relay of D: best probed bandwidth";
  EXPECT_EQ(t.parent[3], 4) << "same host as the relay: fed by it directly";
  // Ranks on the root's own hosts stay one hop from their host leader.
  EXPECT_EQ(t.parent[2], 1);
}

// The four-region WAN of bench/scenarios/four_regions.toml: one rank per host, 1 Gbit/s everywhere.
TreeInput wan8() {
  TreeInput in;
  in.nranks = 8;
  const char* regs[] = {"us", "us", "eu", "eu", "ap", "ap", "sa", "sa"};
  for (int r = 0; r < 8; ++r) in.places.push_back({"h" + std::to_string(r), regs[r]});
  in.rtt_s = {0, 5e-4, 0.08, 0.08, 0.15, 0.15, 0.12, 0.12};
  in.bw_Bps = std::vector<double>(8, 1.25e8);
  in.message_bytes = 1e6;
  return in;
}

TEST(Tree, RegionSpreadLetsTheRootRegionsHostsFeedRemoteRelays) {
  auto t = build_tree("region_spread", wan8()).value();
  expect_spanning(t, 8);
  int crossings = 0;
  for (int r = 0; r < 8; ++r)
    if (t.parent[r] >= 0 && t.region[t.parent[r]] != t.region[r]) ++crossings;
  EXPECT_EQ(crossings, 3) << t.format();  // still one crossing per remote region
  EXPECT_EQ(t.children[0].size(), 2u) << "the root feeds its region's other host and one relay: " << t.format();
  EXPECT_EQ(t.children[1].size(), 2u) << t.format();
  // Farthest first: the root's first child leads to ap (150 ms).
  int first = t.children[0][0];
  EXPECT_TRUE(first == 4 || (first == 1 && t.children[1][0] == 4)) << t.format();
  // With the root's uplink the bottleneck, the cost model prefers it to region_tree.
  auto rt = build_tree("region_tree", wan8()).value();
  EXPECT_LT(t.est_seconds, rt.est_seconds);
  EXPECT_EQ(build_tree("auto", wan8()).value().algo, "auto:region_spread");
}

TEST(Tree, ChildrenAreOrderedFarthestFirst) {
  auto t = build_tree("flat", wan8()).value();
  ASSERT_EQ(t.children[0].size(), 7u);
  EXPECT_TRUE(t.children[0][0] == 4 || t.children[0][0] == 5) << t.format();
  EXPECT_EQ(t.children[0].back(), 1) << t.format();
}

TEST(Tree, RegionsInferredFromRttWithoutLabels) {
  TreeInput in = four_regions();
  for (auto& p : in.places) p.region.clear();
  auto regs = effective_regions(in);
  EXPECT_EQ(regs[1], regs[2]);
  EXPECT_EQ(regs[0], regs[1]);
  EXPECT_NE(regs[3], regs[1]);
  EXPECT_EQ(regs[3], regs[5]);
  EXPECT_NE(regs[6], regs[3]);
  EXPECT_NE(regs[9], regs[6]);
}

TEST(Tree, AutoPrefersTheRegionTreeAcrossRegionsAndNamesItsChoice) {
  auto t = build_tree("auto", four_regions()).value();
  EXPECT_EQ(t.algo.rfind("auto:", 0), 0u);
  auto flat = build_tree("flat", four_regions()).value();
  EXPECT_LE(t.est_seconds, flat.est_seconds);
  EXPECT_NE(t.format().find("rank 0"), std::string::npos);
  EXPECT_FALSE(build_tree("ring", four_regions()).ok());
}

TEST(Tree, AutoTakesTheCandidateTheSimulatorFinishesFirst) {
  TreeInput in = wan8();
  in.message_bytes = 16e6;
  auto t = build_tree("auto", in).value();
  EXPECT_DOUBLE_EQ(t.est_seconds, simulated_seconds(t, in));
  for (const auto& name : algorithms()) {
    auto c = build_tree(name, in).value();
    EXPECT_DOUBLE_EQ(c.est_seconds, simulated_seconds(c, in)) << name;
    EXPECT_LE(t.est_seconds, c.est_seconds) << name << " beats " << t.algo;
  }
  // Every rank has its own 1 Gbit/s uplink here: for a big step a chain through the regions (one
  // copy per uplink) beats the root's fan-out, which a flat tree pays 7 times.
  EXPECT_LT(t.est_seconds, build_tree("flat", in).value().est_seconds / 3);
}

TEST(Tree, BinomialDepthIsLogarithmic) {
  TreeInput in;
  in.nranks = 16;
  in.root = 5;
  auto t = build_tree("binomial", in).value();
  expect_spanning(t, 16);
  for (int r = 0; r < 16; ++r) {
    int depth = 0;
    for (int x = r; t.parent[x] >= 0; x = t.parent[x]) ++depth;
    EXPECT_LE(depth, 4);
  }
}

}  // namespace
}  // namespace sparrow::topology
