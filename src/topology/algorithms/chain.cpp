// chain: root -> r1 -> r2 -> ...; with pipelining every link carries the message once, so for large
// messages the time approaches one message over the slowest link plus the path's latency.
#include "topology/algorithms/registry.h"

namespace sparrow::topology {

void build_chain(const BuildContext& x) {
  int prev = x.in.root;
  for (int r : x.others()) {
    x.link(prev, r);
    prev = r;
  }
}

}  // namespace sparrow::topology
