#include "topology/algorithms/registry.h"

namespace sparrow::topology {

void BuildContext::link(int parent, int child) const {
  t.parent[child] = parent;
  t.children[parent].push_back(child);
}

std::vector<int> BuildContext::others() const {
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

const std::vector<Algorithm>& algorithm_table() {
  static const std::vector<Algorithm> table = {
      {1, "flat", "root -> every rank", build_flat, true},
      {2, "chain", "root -> r1 -> r2 -> ... (pipelined: bandwidth-optimal for large messages)", build_chain, true},
      {3, "binomial", "the classic log2(P)-round tree", build_binomial, true},
      {4, "region_tree",
       "root -> one relay per region (each boundary crossed once) -> a chain of host leaders -> their host's ranks",
       build_region_tree, true},
      {5, "region_spread",
       "region_tree, with the remote regions' relays shared out among the root and its region's host leaders",
       build_region_spread, true},
      {6, "two_level", "SparrowRL's static tree: root -> lowest rank of each region -> the rest (ablation baseline)",
       build_two_level, false},
  };
  return table;
}

const Algorithm* find_algorithm(std::string_view name) {
  for (const auto& a : algorithm_table())
    if (name == a.name) return &a;
  return nullptr;
}

std::string algorithm_names() {
  std::string s;
  for (const auto& a : algorithm_table()) s += std::string(a.name) + ", ";
  return s + "auto";
}

}  // namespace sparrow::topology
