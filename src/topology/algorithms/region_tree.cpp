// region_tree and region_spread: each region boundary is crossed once. The root feeds one relay per
// remote region (the rank with the best probed bandwidth from the root); inside a region the relay
// (or the root, at home) feeds one leader per host as a chain, and each host leader feeds the ranks
// on its host, so the last hop stays on the host. Remote regions are attached farthest first.
// region_spread: the root region's host leaders, which receive every step anyway, share the work
// of feeding the remote relays with the root (the least-loaded sender takes the next region), so the
// root's uplink carries fewer copies.
#include <algorithm>
#include <map>

#include "topology/algorithms/registry.h"

namespace sparrow::topology {
namespace {

std::string host_of(const BuildContext& x, int r) {
  return r < int(x.in.places.size()) ? x.in.places[r].host : std::string();
}

// Feeds `members` from `head`: one leader per host in a chain (host order as first seen), each
// leader feeds its host's other ranks; ranks on the head's own host are fed by the head directly.
// Returns the host leaders, in chain order.
std::vector<int> feed(const BuildContext& x, int head, const std::vector<int>& members) {
  std::map<std::string, std::vector<int>> by_host;
  std::vector<std::string> order;
  for (int m : members) {
    if (!by_host.count(host_of(x, m))) order.push_back(host_of(x, m));
    by_host[host_of(x, m)].push_back(m);
  }
  std::vector<int> leaders;
  int prev = head;
  for (auto& h : order) {
    const auto& v = by_host[h];
    if (h == host_of(x, head)) {
      for (int m : v) x.link(head, m);
      continue;
    }
    x.link(prev, v[0]);
    prev = v[0];
    leaders.push_back(v[0]);
    for (size_t i = 1; i < v.size(); ++i) x.link(v[0], v[i]);
  }
  return leaders;
}

// The remote regions (not the root's), farthest (largest RTT from the root) first.
std::vector<std::string> remote_regions(const BuildContext& x, const std::map<std::string, std::vector<int>>& by_region) {
  std::vector<std::string> remote;
  std::map<std::string, double> far;
  for (auto& [reg, members] : by_region) {
    if (reg == x.region[x.in.root]) continue;
    remote.push_back(reg);
    for (int r : members) far[reg] = std::max(far[reg], rtt_of(x.in, r));
  }
  std::stable_sort(remote.begin(), remote.end(), [&](const std::string& a, const std::string& b) { return far[a] > far[b]; });
  return remote;
}

// A region's relay: the best probed bandwidth from the root, then the lowest rank.
int pick_relay(const BuildContext& x, const std::vector<int>& members) {
  return *std::min_element(members.begin(), members.end(), [&](int a, int b) {
    double ba = bw_of(x.in, a), bb = bw_of(x.in, b);
    return ba != bb ? ba > bb : a < b;
  });
}

void build_regions(const BuildContext& x, bool spread) {
  std::map<std::string, std::vector<int>> by_region;
  for (int r = 0; r < x.in.nranks; ++r)
    if (r != x.in.root) by_region[x.region[r]].push_back(r);  // increasing rank (not rotated)
  std::vector<int> senders = {x.in.root};  // who may feed a remote region's relay
  if (auto home = by_region.find(x.region[x.in.root]); home != by_region.end()) {
    auto leaders = feed(x, x.in.root, home->second);
    if (spread) senders.insert(senders.end(), leaders.begin(), leaders.end());
  }
  for (auto& reg : remote_regions(x, by_region)) {
    const auto& members = by_region[reg];
    const int relay = pick_relay(x, members);
    const int parent = *std::min_element(senders.begin(), senders.end(), [&](int a, int b) {
      return x.t.children[a].size() < x.t.children[b].size();  // ties: the earlier (the root first)
    });
    x.link(parent, relay);
    std::vector<int> rest;
    for (int m : members)
      if (m != relay) rest.push_back(m);
    feed(x, relay, rest);
  }
}

}  // namespace

void build_region_tree(const BuildContext& x) { build_regions(x, false); }
void build_region_spread(const BuildContext& x) { build_regions(x, true); }

}  // namespace sparrow::topology
