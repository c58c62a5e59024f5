// Bandwidth and RTT probing.
//
// At communicator creation, within SPARROW_PROBE_MS, the root measures the pairs a broadcast tree is
// built from: root -> every rank (O(P) pairs, one after the other so they do not share the root's
// uplink). RTT: the smallest of several ping-pongs. Bandwidth: the root streams messages over all
// streams for the pair's time slice; the receiver counts bytes that arrive after the first third of
// the slice (past slow start) and reports bytes/second back. The root then sends the table to every
// rank, so all ranks hold the same view.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/net.h"

namespace sparrow::topology {

struct ProbeResult {
  int root = 0;
  std::vector<double> rtt_s;  // root <-> rank r, seconds (0 for the root itself, -1: not measured)
  std::vector<double> bw_Bps; // root -> rank r, bytes/second at the receiver (-1: not measured)
  double seconds = 0;         // wall time the probe took
  std::string format() const;  // a human table
};

// SPARROW_PROBE_MS (0 disables probing).
int64_t probe_budget_ms();

// Collective over ranks 0..nprobe-1 of `net` (0: all; later slots of an elastic communicator are
// vacant, unmeasured): every rank among them calls it with the same arguments.
Result<ProbeResult> probe_star(transport::Net& net, uint64_t comm_id, int root, double budget_s,
                               transport::Deadline d, int nprobe = 0);

}  // namespace sparrow::topology
