// Broadcast trees. An algorithm is a named strategy that turns (ranks, root, hosts, regions, probed
// links, message size) into a parent and children for every rank; every rank computes the same tree
// from the same inputs, so no tree is ever sent.
//
// The algorithms (flat, chain, binomial, region_tree, region_spread, two_level) live one per file
// in topology/algorithms/, listed in one table (algorithms/registry.h); `auto` picks the one of those
// marked for it whose step the schedule simulator (simulate.h) finishes first on the network the
// probe table describes.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::topology {

struct RankPlace {
  std::string host;
  std::string region;  // empty: inferred from RTT
  bool operator==(const RankPlace&) const = default;
};

struct TreeInput {
  int nranks = 1;
  int root = 0;
  std::vector<RankPlace> places;
  std::vector<double> rtt_s;   // root <-> r (probe; <= 0 unknown)
  std::vector<double> bw_Bps;  // root -> r (probe; <= 0 unknown)
  double message_bytes = 0;    // what this operation sends (for the cost model)
  bool operator==(const TreeInput&) const = default;
};

struct Tree {
  std::string algo;
  int root = 0;
  std::vector<int> parent;                 // -1 for the root
  std::vector<std::vector<int>> children;  // in send order
  std::vector<std::string> region;         // effective region of each rank
  double est_seconds = 0;                  // the simulator's step time for message_bytes
  std::string format() const;              // human-readable
};

// SPARROW_ALGO (one of the registry's names, or auto).
std::string configured_algo();
const std::vector<std::string>& algorithms();  // auto's candidates, in table order
Result<Tree> build_tree(const std::string& algo, const TreeInput& in);
// Regions: SPARROW_REGION labels where given; ranks without a label are clustered by their RTT to the
// root (a new cluster starts where the RTT more than doubles and grows by more than 1 ms).
std::vector<std::string> effective_regions(const TreeInput& in);
// Estimated time of a pipelined broadcast of in.message_bytes over tree t: a closed form (the
// bottleneck's rate plus the deepest path), used where the simulator cannot run.
double estimate_seconds(const Tree& t, const TreeInput& in);
// The schedule simulator's step time for tree t (warm windows, no CPU costs).
double simulated_seconds(const Tree& t, const TreeInput& in);

}  // namespace sparrow::topology
