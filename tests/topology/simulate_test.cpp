#include "topology/simulate.h"

#include "topology/algorithms/registry.h"

#include <gtest/gtest.h>

#include <cmath>

namespace sparrow::topology {
namespace {

// n ranks, one host each: host 0 in region "a", the others in "b"; one-way delay d between regions,
// 0.1 ms inside one; every access link at Bps both ways.
SimNet two_regions(int n, double Bps, double d) {
  SimNet net;
  for (int r = 0; r < n; ++r) {
    net.hosts.push_back({"h" + std::to_string(r), r == 0 ? "a" : "b", Bps, Bps});
    net.host_of.push_back(r);
  }
  net.delay_s.assign(n, std::vector<double>(n, 0));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) net.delay_s[a][b] = (a == 0) != (b == 0) ? d : 1e-4;
  return net;
}

Tree tree_of(std::vector<int> parent) {
  Tree t;
  t.algo = "test";
  t.parent = parent;
  t.children.assign(parent.size(), {});
  for (size_t r = 0; r < parent.size(); ++r) {
    if (parent[r] < 0) t.root = int(r);
    else t.children[size_t(parent[r])].push_back(int(r));
  }
  return t;
}

SimStep step_of(double wire) {
  SimStep s;
  s.wire_bytes = wire;
  s.frame_bytes = 64 << 10;
  return s;
}

TEST(Simulate, OneWarmEdgeMeetsTheBound) {
  // 16 MB at 1 Gbit/s across 40 ms: 128 ms of wire plus the delay.
  auto r = simulate(two_regions(2, 125e6, 0.04), tree_of({-1, 0}), step_of(16e6));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->bound_s, 0.168, 1e-9);
  EXPECT_NEAR(r->last_byte_s[1], 0.168, 0.004);
  EXPECT_NEAR(r->first_byte_s[1], 0.04, 0.002);
  EXPECT_NEAR(r->done_s[0], 0.128, 0.004);  // the root is done when it sent everything
  EXPECT_NEAR(r->step_s, r->last_byte_s[1], 1e-12);
}

TEST(Simulate, ColdWindowsPaySlowStartRoundTrips) {
  SimStep cold = step_of(16e6);
  cold.warm = false;
  auto w = simulate(two_regions(2, 125e6, 0.04), tree_of({-1, 0}), step_of(16e6));
  auto c = simulate(two_regions(2, 125e6, 0.04), tree_of({-1, 0}), cold);
  ASSERT_TRUE(w.ok() && c.ok());
  // From 4 x 10 segments to the 1.25 MB bandwidth-delay product: about five 80 ms round trips.
  EXPECT_GT(c->step_s, w->step_s + 0.2);
  EXPECT_LT(c->step_s, w->step_s + 0.6);
}

TEST(Simulate, ALargerInitialWindowSavesRoundTrips) {
  SimStep cold = step_of(16e6), larger = step_of(16e6);
  cold.warm = larger.warm = false;
  larger.initial_window = 256 << 10;  // 4 x 256 KiB: about four fewer doublings than 10 segments
  const SimNet net = two_regions(2, 125e6, 0.04);
  auto c = simulate(net, tree_of({-1, 0}), cold);
  auto l = simulate(net, tree_of({-1, 0}), larger);
  auto w = simulate(net, tree_of({-1, 0}), step_of(16e6));
  ASSERT_TRUE(c.ok() && l.ok() && w.ok());
  EXPECT_LT(l->step_s, c->step_s - 0.2);
  EXPECT_GT(l->step_s, w->step_s);
}

TEST(Simulate, TheRootsUplinkIsSharedByItsChildren) {
  // Flat: three children share the root's uplink (3 x 128 ms); a chain forwards each frame on.
  const SimNet net = two_regions(4, 125e6, 0.04);
  auto flat = simulate(net, tree_of({-1, 0, 0, 0}), step_of(16e6));
  auto chain = simulate(net, tree_of({-1, 0, 1, 2}), step_of(16e6));
  ASSERT_TRUE(flat.ok() && chain.ok());
  EXPECT_NEAR(flat->step_s, 3 * 0.128 + 0.04, 0.01);
  EXPECT_NEAR(chain->step_s, 0.128 + 0.04 + 2 * (1e-4 + 65536 / 125e6), 0.006);
  EXPECT_GT(chain->last_byte_s[3], chain->last_byte_s[2]);
}

TEST(Simulate, AnEncoderSlowerThanTheLinkSetsThePace) {
  SimStep s = step_of(16e6);
  s.root_start_s = 0.05;
  s.encode_s = 1.0;
  s.tail_s = {0, 0.02};
  auto r = simulate(two_regions(2, 125e6, 0.04), tree_of({-1, 0}), s);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->done_s[0], 1.05, 0.003);
  // The last frame leaves when it is encoded and needs its own wire time and the delay.
  EXPECT_NEAR(r->last_byte_s[1], 1.05 + 65536 / 125e6 + 0.04, 0.004);
  EXPECT_NEAR(r->done_s[1], r->last_byte_s[1] + 0.02, 1e-12);
}

TEST(Simulate, LossCapsALossBasedFlowButHardlyBbr) {
  SimNet net = two_regions(2, 125e6, 0.04);
  net.loss.assign(2, std::vector<double>(2, 1e-3));
  SimStep cubic = step_of(16e6);
  cubic.bbr = false;
  cubic.streams = 1;
  auto b = simulate(net, tree_of({-1, 0}), step_of(16e6));
  auto c = simulate(net, tree_of({-1, 0}), cubic);
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_NEAR(b->step_s, 0.04 + 16e6 / (125e6 * 0.999), 0.005);
  // Mathis: 1448 B / 80 ms x sqrt(1.5 / 0.001) = 0.70 MB/s on one stream.
  EXPECT_NEAR(c->step_s, 0.04 + 16e6 / (1448 / 0.08 * std::sqrt(1500.0)), 0.5);
}

TEST(Simulate, RejectsATreeThatDoesNotFit) {
  const SimNet net = two_regions(3, 125e6, 0.04);
  EXPECT_EQ(simulate(net, tree_of({-1, 0}), step_of(1e6)).status().code(), Code::kInvalidArgument);
  Tree orphan = tree_of({-1, 0, 0});
  orphan.parent[2] = -1;
  EXPECT_EQ(simulate(net, orphan, step_of(1e6)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(simulate(net, tree_of({-1, 0, 0}), step_of(0)).status().code(), Code::kInvalidArgument);
  SimStep tails = step_of(1e6);
  tails.tail_s = {0, 0};
  EXPECT_EQ(simulate(net, tree_of({-1, 0, 0}), tails).status().code(), Code::kInvalidArgument);
}

TEST(Simulate, TheNetworkATreeInputDescribes) {
  TreeInput in;
  in.nranks = 3;
  in.places = {{"a0", "a"}, {"a1", "a"}, {"b0", "b"}};
  in.rtt_s = {0, 2e-4, 0.08};
  in.bw_Bps = {0, 1e9, 1e8};
  const SimNet net = net_from_tree_input(in, {"a", "a", "b"});
  EXPECT_DOUBLE_EQ(net.hosts[0].up_Bps, 1e9);
  EXPECT_DOUBLE_EQ(net.hosts[2].down_Bps, 1e8);
  EXPECT_DOUBLE_EQ(net.delay(0, 2), 0.04);
  EXPECT_DOUBLE_EQ(net.delay(1, 2), 0.04);
  EXPECT_DOUBLE_EQ(net.delay(0, 1), kLanRtt / 2);
  // Two ranks of one host share its link: a flat tree to both takes twice as long as to one.
  in.nranks = 4;
  in.places.push_back({"b0", "b"});
  in.rtt_s.push_back(0.08);
  in.bw_Bps.push_back(1e8);
  const SimNet shared = net_from_tree_input(in, {"a", "a", "b", "b"});
  ASSERT_EQ(shared.hosts.size(), 3u);
  EXPECT_EQ(shared.host_of[2], shared.host_of[3]);
  Tree both = tree_of({-1, 0, 0, 0});
  auto r = simulate(shared, both, step_of(8e6));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->last_byte_s[3], 0.04 + 2 * 8e6 / 1e8, 0.01);
}

}  // namespace
}  // namespace sparrow::topology
