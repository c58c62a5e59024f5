// binomial: the classic log2(P)-round tree (MPI's default for small messages).
#include <algorithm>

#include "topology/algorithms/registry.h"

namespace sparrow::topology {

void build_binomial(const BuildContext& x) {
  // Relative rank v receives from v - 2^k, where 2^k is v's highest set bit; a sender's children go
  // in decreasing subtree size (the largest subtree first: it has the most rounds still to go).
  const int n = x.in.nranks, root = x.in.root;
  for (int v = 1; v < n; ++v) {
    int hb = 1;
    while (hb * 2 <= v) hb *= 2;
    x.t.parent[(v + root) % n] = (v - hb + root) % n;
  }
  for (int v = 0; v < n; ++v) {
    auto& kids = x.t.children[(v + root) % n];
    for (int step = 1; v + step < n; step *= 2)
      if (v < step) kids.push_back((v + step + root) % n);
    std::reverse(kids.begin(), kids.end());
  }
}

}  // namespace sparrow::topology
