#include "topology/tree.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <map>
#include <numeric>

#include "core/params.h"
#include "topology/algorithms/registry.h"
#include "topology/simulate.h"

namespace sparrow::topology {
namespace {

params::StringParam kAlgo("ALGO", "auto", []() {
  static const std::string doc = "Broadcast tree: " + algorithm_names() + " (sparrow-info --tree shows each).";
  return doc.c_str();
}(), [] {
  std::vector<std::string> v;
  for (const auto& a : algorithm_table()) v.push_back(a.name);
  v.push_back("auto");
  return v;
}());

constexpr double kChunkBytes = 1 << 20;  // pipelining granularity of the cost model

Tree empty_tree(const std::string& algo, const TreeInput& in) {
  Tree t;
  t.algo = algo;
  t.root = in.root;
  t.parent.assign(in.nranks, -1);
  t.children.assign(in.nranks, {});
  return t;
}

}  // namespace

std::string configured_algo() { return kAlgo.get(); }

const std::vector<std::string>& algorithms() {
  static const std::vector<std::string> a = [] {
    std::vector<std::string> v;
    for (const auto& x : algorithm_table())
      if (x.in_auto) v.push_back(x.name);
    return v;
  }();
  return a;
}

std::vector<std::string> effective_regions(const TreeInput& in) {
  std::vector<std::string> reg(in.nranks);
  std::vector<int> unlabeled;
  for (int r = 0; r < in.nranks; ++r) {
    if (r < int(in.places.size()) && !in.places[r].region.empty()) reg[r] = in.places[r].region;
    else unlabeled.push_back(r);
  }
  // Cluster unlabeled ranks by RTT to the root; the root's own cluster starts at RTT 0.
  std::sort(unlabeled.begin(), unlabeled.end(), [&](int a, int b) {
    double ra = a == in.root ? 0 : rtt_of(in, a), rb = b == in.root ? 0 : rtt_of(in, b);
    return ra != rb ? ra < rb : a < b;
  });
  int cluster = 0;
  double base = -1;
  for (int r : unlabeled) {
    double rt = r == in.root ? 0 : rtt_of(in, r);
    if (base >= 0 && rt > 2 * base + 1e-3) ++cluster;
    if (base < 0 || rt > 2 * base + 1e-3) base = rt;
    reg[r] = "rtt" + std::to_string(cluster);
  }
  return reg;
}

double estimate_seconds(const Tree& t, const TreeInput& in) {
  // Pipelined broadcast: the busiest bottleneck bounds the rate, and the deepest path adds one chunk
  // time and one latency per hop. Bottlenecks: a sender's uplink (shared by its children), each
  // region's ingress (shared by every tree edge that enters the region: why crossing a boundary once
  // pays), and each edge's own path.
  const double M = std::max(in.message_bytes, 1.0);
  auto same_region = [&](int a, int b) { return t.region.empty() || t.region[a] == t.region[b]; };
  auto edge_bw = [&](int p, int c) { return p == in.root || !same_region(p, c) ? bw_of(in, c) : kDefaultBw; };
  double root_up = 0;
  for (int r = 0; r < in.nranks; ++r)
    if (r != in.root) root_up = std::max(root_up, bw_of(in, r));
  if (root_up <= 0) root_up = kDefaultBw;
  double rate_time = 0;
  std::map<std::string, int> crossings;
  std::map<std::string, double> ingress;
  for (int r = 0; r < in.nranks; ++r) {
    if (!t.region.empty() && r != in.root) ingress[t.region[r]] = std::max(ingress[t.region[r]], bw_of(in, r));
    if (t.children[r].empty()) continue;
    // A sender in the root's region is assumed to have the root's uplink (same site); others a LAN guess.
    double up = r == in.root || (!t.region.empty() && t.region[r] == t.region[in.root]) ? root_up : kDefaultBw;
    rate_time = std::max(rate_time, M * double(t.children[r].size()) / up);
    for (int c : t.children[r]) {
      rate_time = std::max(rate_time, M / edge_bw(r, c));
      if (!same_region(r, c)) crossings[t.region[c]]++;
    }
  }
  for (auto& [reg, k] : crossings) rate_time = std::max(rate_time, M * k / std::max(ingress[reg], 1.0));
  double worst_path = 0;
  for (int r = 0; r < in.nranks; ++r) {
    double path = 0;
    for (int x = r; t.parent[x] >= 0; x = t.parent[x]) {
      int p = t.parent[x];
      double lat = same_region(p, x) && p != in.root ? kLanRtt / 2 : rtt_of(in, x) / 2;
      path += lat + std::min(M, kChunkBytes) / edge_bw(p, x);
    }
    worst_path = std::max(worst_path, path);
  }
  return rate_time + worst_path;
}

// Send order: a sender hands every chunk to its children in this order, so the child with the longest
// way still to go (its edge's latency plus the deepest latency below it) gets each chunk first.
// Latencies are compared in whole milliseconds so that LAN noise keeps each algorithm's own order
// (stable sort).
void order_children(Tree& t, const TreeInput& in) {
  auto same_region = [&](int a, int b) { return t.region.empty() || t.region[a] == t.region[b]; };
  auto edge_lat = [&](int p, int c) { return same_region(p, c) && p != in.root ? kLanRtt / 2 : rtt_of(in, c) / 2; };
  std::vector<double> reach(in.nranks, -1);
  std::function<double(int)> below = [&](int r) {
    if (reach[r] >= 0) return reach[r];
    double m = 0;
    for (int c : t.children[r]) m = std::max(m, edge_lat(r, c) + below(c));
    return reach[r] = m;
  };
  for (int r = 0; r < in.nranks; ++r) {
    auto& ch = t.children[r];
    std::stable_sort(ch.begin(), ch.end(), [&](int a, int b) {
      return std::llround((edge_lat(r, a) + below(a)) * 1e3) > std::llround((edge_lat(r, b) + below(b)) * 1e3);
    });
  }
}

// The schedule simulator's time for one step of in.message_bytes on the network the inputs describe
// (warm windows, no CPU costs); the closed form where it cannot run.
double simulated_seconds(const Tree& t, const TreeInput& in) {
  SimStep step;
  step.wire_bytes = std::max(in.message_bytes, 1.0);
  // Frames: a sparse step's chunks are ~1/500 of it, a dense broadcast's segments 4 MiB.
  step.frame_bytes = std::clamp(step.wire_bytes / 256, 16.0 * 1024, 4.0 * 1024 * 1024);
  // Every rank builds its trees at its first operation: a coarser step for trees of over ~200
  // ranks (at 1,000 ranks, auto's six candidates take ~1 s instead of ~7), the same below.
  step.max_flow_steps = 2e6;
  auto r = simulate(net_from_tree_input(in, t.region), t, step);
  return r.ok() ? r->step_s : estimate_seconds(t, in);
}

Result<Tree> build_tree(const std::string& algo_in, const TreeInput& in) {
  if (in.nranks < 1 || in.root < 0 || in.root >= in.nranks) return InvalidArgument("tree: root out of range");
  const std::string algo = algo_in.empty() ? configured_algo() : algo_in;
  if (algo == "auto") {
    // The cheapest candidate under the schedule simulator.
    Tree best;
    double best_cost = 1e300;
    for (const auto& a : algorithm_table()) {
      if (!a.in_auto) continue;
      auto t = build_tree(a.name, in);
      if (t.ok() && t->est_seconds < best_cost) {
        best_cost = t->est_seconds;
        best = std::move(t.value());
      }
    }
    best.algo = "auto:" + best.algo;
    return best;
  }
  const Algorithm* a = find_algorithm(algo);
  if (!a) return InvalidArgument("unknown broadcast algorithm '" + algo + "' (" + algorithm_names() + ")");
  Tree t = empty_tree(algo, in);
  t.region = effective_regions(in);
  a->build(BuildContext{in, t.region, t});
  order_children(t, in);
  t.est_seconds = simulated_seconds(t, in);
  return t;
}

std::string Tree::format() const {
  std::string out = "tree " + algo + " rooted at rank " + std::to_string(root) + " (estimate " +
                    std::to_string(est_seconds * 1e3) + " ms)\n";
  std::vector<std::pair<int, int>> stack = {{root, 0}};
  while (!stack.empty()) {
    auto [r, depth] = stack.back();
    stack.pop_back();
    out += std::string(2 * depth + 2, ' ') + "rank " + std::to_string(r);
    if (!region.empty()) out += " [" + region[r] + "]";
    out += "\n";
    for (auto it = children[r].rbegin(); it != children[r].rend(); ++it) stack.push_back({*it, depth + 1});
  }
  return out;
}

}  // namespace sparrow::topology
