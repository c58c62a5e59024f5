// The broadcast-tree algorithms, one file each, and the table they are listed in. SPARROW_ALGO's
// allowed values, `sparrow-info --tree`, `auto`'s candidates and the error for an unknown name all
// come from this table, so an algorithm is added in one place.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "topology/tree.h"

namespace sparrow::topology {

// What a builder gets: the input, the effective region of every rank, and a tree with every rank
// unlinked (parent -1, no children). It links every rank but the root exactly once; send order and
// the cost estimate are done afterwards, for every algorithm alike.
struct BuildContext {
  const TreeInput& in;
  const std::vector<std::string>& region;
  Tree& t;
  // t.parent[child] = parent, appended to the parent's children.
  void link(int parent, int child) const;
  // The ranks other than the root, starting after it (root+1, root+2, ... mod nranks).
  std::vector<int> others() const;
};

struct Algorithm {
  int id;                   // stable number (logs, stats)
  const char* name;         // SPARROW_ALGO value
  const char* description;  // one line, for sparrow-info and the docs
  void (*build)(const BuildContext&);
  bool in_auto;  // a candidate of SPARROW_ALGO=auto
};

// In the order sparrow-info lists them.
const std::vector<Algorithm>& algorithm_table();
const Algorithm* find_algorithm(std::string_view name);
// "flat, chain, ..., auto": the accepted SPARROW_ALGO values, for messages and the parameter's doc.
std::string algorithm_names();

// The builders (algorithms/<name>.cpp).
void build_flat(const BuildContext& x);
void build_chain(const BuildContext& x);
void build_binomial(const BuildContext& x);
void build_two_level(const BuildContext& x);
void build_region_tree(const BuildContext& x);
void build_region_spread(const BuildContext& x);

// Link estimates shared by the builders and the cost model (unprobed links get a guess).
double rtt_of(const TreeInput& in, int r);
double bw_of(const TreeInput& in, int r);
constexpr double kLanRtt = 200e-6;     // assumed RTT between ranks of one region when not probed
constexpr double kDefaultBw = 1.25e9;  // 10 Gbit/s when a nearby link was not probed
constexpr double kWanBw = 1.25e8;      // 1 Gbit/s when a far link (RTT > 5 ms) was not probed

}  // namespace sparrow::topology
