#include "topology/tree.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <map>
#include <numeric>

#include "core/params.h"

namespace sparrow::topology {
namespace {

params::StringParam kAlgo("ALGO", "auto",
                          "Broadcast tree: flat, chain, binomial, region_tree, region_spread, two_level (SparrowRL's static "
                          "tree) or auto.",
                          {"auto", "flat", "chain", "binomial", "region_tree", "region_spread", "two_level"});

constexpr double kLanRtt = 200e-6;       // assumed RTT between ranks of one region when not probed
constexpr double kDefaultBw = 1.25e9;    // 10 Gbit/s when a nearby link was not probed
constexpr double kWanBw = 1.25e8;        // 1 Gbit/s when a far link (RTT > 5 ms) was not probed
constexpr double kChunkBytes = 1 << 20;  // pipelining granularity of the cost model

Tree empty_tree(const std::string& algo, const TreeInput& in) {
  Tree t;
  t.algo = algo;
  t.root = in.root;
  t.parent.assign(in.nranks, -1);
  t.children.assign(in.nranks, {});
  return t;
}

void link(Tree& t, int parent, int child) {
  t.parent[child] = parent;
  t.children[parent].push_back(child);
}

// Ranks other than the root, rotated so that the order starts after the root.
std::vector<int> others(const TreeInput& in) {
  std::vector<int> v;
  for (int i = 1; i < in.nranks; ++i) v.push_back((in.root + i) % in.nranks);
  return v;
}

double rtt_of(const TreeInput& in, int r) { return r < int(in.rtt_s.size()) && in.rtt_s[r] > 0 ? in.rtt_s[r] : kLanRtt; }
// Unmeasured bandwidth: a LAN guess for nearby ranks, a WAN guess (1 Gbit/s) for far ones, so the
// model still sees that crossing a region boundary is expensive.
double bw_of(const TreeInput& in, int r) {
  if (r < int(in.bw_Bps.size()) && in.bw_Bps[r] > 0) return in.bw_Bps[r];
  return rtt_of(in, r) > 5e-3 ? kWanBw : kDefaultBw;
}

}  // namespace

std::string configured_algo() { return kAlgo.get(); }

const std::vector<std::string>& algorithms() {
  static const std::vector<std::string> a = {"flat", "chain", "binomial", "region_tree", "region_spread"};
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

Result<Tree> build_tree(const std::string& algo_in, const TreeInput& in) {
  if (in.nranks < 1 || in.root < 0 || in.root >= in.nranks) return InvalidArgument("tree: root out of range");
  std::string algo = algo_in.empty() ? configured_algo() : algo_in;
  auto regions = effective_regions(in);
  if (algo == "auto") {
    Tree best;
    double best_cost = 1e300;
    for (const auto& a : algorithms()) {
      auto t = build_tree(a, in);
      if (!t.ok()) continue;
      if (t->est_seconds < best_cost) {
        best_cost = t->est_seconds;
        best = t.value();
      }
    }
    best.algo = "auto:" + best.algo;
    return best;
  }
  Tree t = empty_tree(algo, in);
  t.region = regions;
  auto rest = others(in);
  if (algo == "flat") {
    for (int r : rest) link(t, in.root, r);
  } else if (algo == "chain") {
    int prev = in.root;
    for (int r : rest) {
      link(t, prev, r);
      prev = r;
    }
  } else if (algo == "binomial") {
    // Relative rank v receives from v - 2^k where 2^k is v's highest set bit; children in
    // decreasing subtree size.
    const int n = in.nranks;
    for (int v = 1; v < n; ++v) {
      int hb = 1;
      while (hb * 2 <= v) hb *= 2;
      t.parent[(v + in.root) % n] = (v - hb + in.root) % n;
    }
    for (int v = 0; v < n; ++v) {
      int real = (v + in.root) % n;
      for (int step = 1; v + step < n; step *= 2)
        if (v < step) t.children[real].push_back((v + step + in.root) % n);
      std::reverse(t.children[real].begin(), t.children[real].end());
    }
  } else if (algo == "two_level") {
    // SparrowRL's static relay tree: root -> the lowest rank of each other region -> the rest of it.
    std::map<std::string, std::vector<int>> by_region;
    for (int r : rest) by_region[regions[r]].push_back(r);
    for (auto& [reg, members] : by_region) {
      if (reg == regions[in.root]) {
        for (int m : members) link(t, in.root, m);
        continue;
      }
      int relay = *std::min_element(members.begin(), members.end());
      link(t, in.root, relay);
      for (int m : members)
        if (m != relay) link(t, relay, m);
    }
  } else if (algo == "region_tree" || algo == "region_spread") {
    // Group by region, then by host inside a region. region_spread: the root region's host leaders
    // (which receive every step anyway) share the work of feeding the remote regions' relays, so the
    // root's uplink carries fewer copies.
    std::map<std::string, std::vector<int>> by_region;
    for (int r = 0; r < in.nranks; ++r)
      if (r != in.root) by_region[regions[r]].push_back(r);
    auto host_of = [&](int r) { return r < int(in.places.size()) ? in.places[r].host : std::string(); };
    // Feeds `members` from `head`: one leader per host in a chain, leaders feed their host's ranks.
    std::vector<int> leaders;  // host leaders fed by feed(), in order
    auto feed = [&](int head, std::vector<int> members) {
      leaders.clear();
      std::map<std::string, std::vector<int>> by_host;
      std::vector<std::string> order;
      for (int m : members) {
        if (!by_host.count(host_of(m))) order.push_back(host_of(m));
        by_host[host_of(m)].push_back(m);
      }
      int prev = head;
      for (auto& h : order) {
        auto& v = by_host[h];
        int leader = v[0];
        // A host that holds the head itself needs no leader: the head feeds it directly.
        if (h == host_of(head)) {
          for (int m : v) link(t, head, m);
          continue;
        }
        link(t, prev, leader);
        prev = leader;
        leaders.push_back(leader);
        for (size_t i = 1; i < v.size(); ++i) link(t, leader, v[i]);
      }
    };
    std::vector<int> senders = {in.root};  // who may feed a remote region's relay
    if (by_region.count(regions[in.root])) {
      feed(in.root, by_region[regions[in.root]]);
      if (algo == "region_spread") senders.insert(senders.end(), leaders.begin(), leaders.end());
    }
    // Remote regions, farthest first (the least loaded sender takes the next one).
    std::vector<std::string> remote;
    for (auto& [reg, members] : by_region)
      if (reg != regions[in.root]) remote.push_back(reg);
    auto region_rtt = [&](const std::string& reg) {
      double m = 0;
      for (int r : by_region[reg]) m = std::max(m, rtt_of(in, r));
      return m;
    };
    std::stable_sort(remote.begin(), remote.end(),
                     [&](const std::string& a, const std::string& b) { return region_rtt(a) > region_rtt(b); });
    for (auto& reg : remote) {
      const auto& members = by_region[reg];
      // The relay: best probed bandwidth from the root, then lowest rank.
      int relay = *std::min_element(members.begin(), members.end(), [&](int a, int b) {
        double ba = bw_of(in, a), bb = bw_of(in, b);
        return ba != bb ? ba > bb : a < b;
      });
      int parent = *std::min_element(senders.begin(), senders.end(), [&](int a, int b) {
        return t.children[a].size() < t.children[b].size();  // ties: the earlier (the root first)
      });
      link(t, parent, relay);
      std::vector<int> rest_members;
      for (int m : members)
        if (m != relay) rest_members.push_back(m);
      feed(relay, rest_members);
    }
  } else {
    return InvalidArgument("unknown broadcast algorithm '" + algo +
                           "' (flat, chain, binomial, region_tree, region_spread, two_level, auto)");
  }
  order_children(t, in);
  t.est_seconds = estimate_seconds(t, in);
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
