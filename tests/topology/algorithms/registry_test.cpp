// Each tree builder on its own, and the registry that lists them.
#include "topology/algorithms/registry.h"

#include <gtest/gtest.h>

#include <set>

#include "core/params.h"

namespace sparrow::topology {
namespace {

// 8 ranks in regions a,a,b,b,c,c,d,d (one host per rank), RTTs growing with the region.
TreeInput eight(int root = 0) {
  TreeInput in;
  in.nranks = 8;
  in.root = root;
  const char* regs = "aabbccdd";
  for (int r = 0; r < 8; ++r) in.places.push_back({"h" + std::to_string(r), std::string(1, regs[r])});
  in.rtt_s = {1e-4, 1e-4, 0.04, 0.04, 0.08, 0.08, 0.15, 0.15};
  in.bw_Bps.assign(8, 1.25e8);
  in.message_bytes = 1e7;
  return in;
}

int depth(const Tree& t, int r) {
  int d = 0;
  for (; t.parent[r] >= 0; r = t.parent[r]) ++d;
  return d;
}

int crossings(const Tree& t) {
  int k = 0;
  for (int r = 0; r < int(t.parent.size()); ++r)
    if (t.parent[r] >= 0 && t.region[r] != t.region[t.parent[r]]) ++k;
  return k;
}

TEST(Algorithms, FlatFeedsEveryRankFromTheRoot) {
  auto t = build_tree("flat", eight(3)).value();
  EXPECT_EQ(t.children[3].size(), 7u);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(depth(t, r), r == 3 ? 0 : 1);
}

TEST(Algorithms, ChainIsOnePathStartingAfterTheRoot) {
  auto t = build_tree("chain", eight(5)).value();
  for (int r = 0; r < 8; ++r) EXPECT_LE(t.children[r].size(), 1u);
  EXPECT_EQ(t.children[5], std::vector<int>{6});
  EXPECT_EQ(depth(t, 4), 7);  // 5 -> 6 -> 7 -> 0 -> 1 -> 2 -> 3 -> 4
}

TEST(Algorithms, BinomialHasLogDepth) {
  TreeInput in = eight();
  for (int n : {2, 5, 8, 13, 32}) {
    in.nranks = n;
    in.places.resize(n, {"h", "a"});
    in.rtt_s.resize(n, 1e-4);
    in.bw_Bps.resize(n, 1.25e8);
    auto t = build_tree("binomial", in).value();
    int maxd = 0;
    for (int r = 0; r < n; ++r) maxd = std::max(maxd, depth(t, r));
    int log2n = 0;  // floor(log2 n): the most set bits of any relative rank below n
    while ((2 << log2n) <= n) ++log2n;
    EXPECT_EQ(maxd, log2n) << n;
  }
}

TEST(Algorithms, TwoLevelRelaysThroughTheLowestRankOfEachRegion) {
  auto t = build_tree("two_level", eight()).value();
  for (int relay : {2, 4, 6}) EXPECT_EQ(t.parent[relay], 0);
  for (int leaf : {3, 5, 7}) EXPECT_EQ(t.parent[leaf], leaf - 1);
  EXPECT_EQ(t.parent[1], 0);
  EXPECT_EQ(crossings(t), 3);
}

TEST(Algorithms, RegionTreesCrossEachBoundaryOnce) {
  for (const char* a : {"region_tree", "region_spread"}) {
    auto t = build_tree(a, eight()).value();
    EXPECT_EQ(crossings(t), 3) << a << "\n" << t.format();
  }
  // region_spread: the root's region's host leader takes a remote relay off the root's uplink.
  auto rt = build_tree("region_tree", eight()).value();
  auto rs = build_tree("region_spread", eight()).value();
  EXPECT_EQ(rt.children[0].size(), 4u);
  EXPECT_LT(rs.children[0].size(), rt.children[0].size());
}

TEST(Algorithms, RegistryDrivesTheSettingAndTheErrors) {
  std::set<std::string> names;
  for (const auto& a : algorithm_table()) {
    EXPECT_TRUE(names.insert(a.name).second) << "duplicate " << a.name;
    EXPECT_EQ(find_algorithm(a.name), &a);
    EXPECT_GT(std::string(a.description).size(), 10u);
    auto t = build_tree(a.name, eight());
    ASSERT_TRUE(t.ok()) << a.name;
    EXPECT_EQ(t->algo, a.name);
    // SPARROW_ALGO accepts exactly the table's names and auto.
    EXPECT_TRUE(params::set_override("ALGO", a.name).ok()) << a.name;
  }
  EXPECT_TRUE(params::set_override("ALGO", "auto").ok());
  EXPECT_FALSE(params::set_override("ALGO", "ring").ok());
  params::clear_overrides();
  auto bad = build_tree("ring", eight());
  ASSERT_FALSE(bad.ok());
  for (const auto& a : algorithm_table()) EXPECT_NE(bad.status().message().find(a.name), std::string::npos);
  // auto never picks what the table keeps out of it.
  for (const auto& a : algorithm_table())
    if (!a.in_auto) EXPECT_NE(build_tree("auto", eight()).value().algo, std::string("auto:") + a.name);
}

}  // namespace
}  // namespace sparrow::topology
