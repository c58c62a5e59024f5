// two_level: SparrowRL's static relay tree, kept as the ablation baseline (never chosen by auto):
// the root feeds its own region's ranks and the lowest rank of every other region, which feeds the
// rest of its region.
#include <algorithm>
#include <map>

#include "topology/algorithms/registry.h"

namespace sparrow::topology {

void build_two_level(const BuildContext& x) {
  std::map<std::string, std::vector<int>> by_region;
  for (int r : x.others()) by_region[x.region[r]].push_back(r);
  for (auto& [reg, members] : by_region) {
    if (reg == x.region[x.in.root]) {
      for (int m : members) x.link(x.in.root, m);
      continue;
    }
    const int relay = *std::min_element(members.begin(), members.end());
    x.link(x.in.root, relay);
    for (int m : members)
      if (m != relay) x.link(relay, m);
  }
}

}  // namespace sparrow::topology
