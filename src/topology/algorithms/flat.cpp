// flat: the root sends to every rank itself (best for a handful of ranks on one fast link).
#include "topology/algorithms/registry.h"

namespace sparrow::topology {

void build_flat(const BuildContext& x) {
  for (int r : x.others()) x.link(x.in.root, r);
}

}  // namespace sparrow::topology
