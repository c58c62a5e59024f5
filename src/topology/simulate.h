// The schedule simulator: predicts when every rank of a broadcast tree has a step, from the network
// (hosts' access rates, one-way delays and loss between hosts), the tree, the wire bytes and their
// framing, TCP's window growth and the ranks' CPU costs.
//
// The model is a fluid one, advanced in small time steps:
//   - every tree edge is one flow (the edge's streams together). A flow can send what its sender
//     holds (the root: what its encoder produced so far, frame by frame, evenly over the encode
//     time; a relay: the whole frames it received, since it forwards each frame as it completes),
//     at most its congestion window beyond what was acknowledged (bytes sent one RTT ago);
//   - senders' uplinks are shared max-min fairly among their flows, each flow also held to its
//     receiver's downlink share; loss caps a loss-based flow at Mathis' rate per stream (BBR: the
//     lost fraction only);
//   - bytes arrive one one-way delay after they were sent; a window grows by what was acknowledged
//     (slow start) up to its cap. Warm windows (streams that stayed open across steps, with
//     tcp_slow_start_after_idle=0 or traffic between steps) start at the cap; cold ones at 10
//     segments per stream;
//   - a receiver is done its CPU tail (verify, decode, commit after the last byte) after its last
//     byte; the root when its encoder finished and every flow sent everything.
// What it leaves out: queueing delay, BBR's probing cycles, per-frame costs, CPU contention beyond
// what the measured costs carry. bench/calibrate_sim.py measures the error against the emulator.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "topology/tree.h"

namespace sparrow::topology {

struct SimHost {
  std::string name, region;
  double up_Bps = 0, down_Bps = 0;  // <= 0: unlimited
};

struct SimNet {
  std::vector<SimHost> hosts;
  std::vector<std::vector<double>> delay_s;  // one-way, host -> host
  std::vector<std::vector<double>> loss;     // per packet, host -> host (may be empty: none)
  std::vector<int> host_of;                  // rank -> host
  int nranks() const { return int(host_of.size()); }
  double delay(int a, int b) const { return delay_s[host_of[a]][host_of[b]]; }
  double loss_of(int a, int b) const { return loss.empty() ? 0 : loss[host_of[a]][host_of[b]]; }
};

struct SimStep {
  double wire_bytes = 0;         // what every receiver gets
  double frame_bytes = 0;        // forwarding granularity (0: one frame)
  int streams = 4;               // TCP connections per edge
  double mss = 1448;
  bool warm = true;              // windows open from the first byte (else slow start from initial_window)
  double initial_window = 0;     // per stream, when not warm (0: 10 segments, Linux after idle)
  double window_bytes = 16 << 20;  // per stream: the cap (socket buffers)
  bool bbr = true;               // loss-tolerant congestion control (else Reno/CUBIC-like, Mathis)
  double root_start_s = 0;       // before the root's encoder starts (extraction)
  double encode_s = 0;           // root's encoder wall time, frames produced evenly over it
  std::vector<double> tail_s;    // per rank, CPU after its last byte (empty: none)
  double dt_s = 0;               // time step (0: chosen from the delays and the expected time)
  double max_flow_steps = 3e7;   // with dt_s 0: big trees get a coarser step, to about this many flow-steps
};

struct SimResult {
  std::vector<double> first_byte_s, last_byte_s, done_s;  // per rank, from the root's start
  double step_s = 0;                                      // the last rank's done
  double bound_s = 0;                                     // lower_bound_s of the same inputs
};

// wire bytes / root uplink + the farthest one-way delay from the root.
double lower_bound_s(const SimNet& net, int root, double wire_bytes);
Result<SimResult> simulate(const SimNet& net, const Tree& t, const SimStep& step);
// The network a tree's inputs describe (what `auto` knows): one host per host name (ranks of one
// machine share its access link; a rank without a name is a host of its own), the root's uplink and
// each rank's downlink from the probed rate to it, delays between regions from the RTTs to the root.
SimNet net_from_tree_input(const TreeInput& in, const std::vector<std::string>& region);

}  // namespace sparrow::topology
