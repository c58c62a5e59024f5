// wanemu scenarios: a small TOML subset describing regions, hosts and the links between regions.
//
//   seed = 1                 # loss and jitter are seeded
//   mtu = 1500
//   [[host]]                 # one table per host (or group of identical hosts)
//   name = "trainer"
//   region = "us"
//   count = 1                # replicate: names get -0, -1, ...
//   up_mbit = 1000           # access link rates (0: unlimited)
//   down_mbit = 1000
//   queue_ms = 100           # tail-drop queue limit, in time at the link rate
//   [[link]]                 # one per region pair (both directions); same-region pairs too
//   a = "us"
//   b = "eu"
//   delay_ms = 40            # one-way
//   jitter_ms = 0            # added uniformly in [0, jitter], never reordering packets
//   loss = 0.001             # Bernoulli loss probability per packet and direction
//   ge_p = 0.0               # Gilbert-Elliott: P(good -> bad), P(bad -> good), loss in bad state
//   ge_r = 0.0
//   ge_loss = 0.0
//   [[fault]]                # scheduled fault injection (see Fault)
//   at_s = 5                 # seconds after the run started
//   kind = "stall"           # kill | stop | partition | stall
//   target = "eu"            # a region, a host name or a host index; region:NAME / host:NAME force one
//   peer = "us"              # partition/stall: only between target and peer (default: everything else)
//   for_s = 2                # how long (stop/partition: default until the end; stall: required)
//   leaves = true            # kill/stop: only processes without children (an MPI rank, not its orted)
//   [prices]                 # optional, for cost projections (bench/rl_loop_sim.py); the emulator ignores it
//   gpu_hour_on_demand = 2.85   # USD per GPU-hour of the scenario's hosts
//   gpu_hour_reserved = 6.50    # USD per GPU-hour of a reserved single-datacenter RDMA cluster
//   egress_per_gb = 0.09        # USD per GB leaving a region
//   gpus_per_host = 8
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::wanemu {

struct Host {
  std::string name, region;
  double up_mbit = 0, down_mbit = 0, queue_ms = 100;
};

struct Link {
  std::string a, b;
  double delay_ms = 0, jitter_ms = 0, loss = 0, ge_p = 0, ge_r = 0, ge_loss = 0;
};

// A fault injected into a running emulation (`[[fault]]` in the scenario, or `wanemu fault ...`):
//   kill TARGET [--leaves]              SIGKILL the target hosts' processes (those the run started)
//   stop TARGET [--for S] [--leaves]    SIGSTOP them (SIGCONT after S seconds, or at the end)
//   partition TARGET [PEER] [--for S]   drop every packet between TARGET and PEER (default: the rest)
//   stall TARGET [PEER] --for S         freeze those paths: packets are held, delivered when it ends
struct Fault {
  enum class Kind { kKill, kStop, kPartition, kStall };
  Kind kind = Kind::kKill;
  std::string target, peer;
  double at_s = 0;      // scheduled faults: seconds after the start of the run
  double for_s = 0;     // 0: until the end of the run
  bool leaves = false;  // kill/stop: only processes without children
};
const char* fault_kind_name(Fault::Kind k);
// "stall eu us --for 2" (the words of `wanemu fault`); the targets are resolved later, against a scenario.
Result<Fault> parse_fault(const std::vector<std::string>& words);
std::string describe(const Fault& f);

// Prices for cost projections ([prices]; 0: not given).
struct Prices {
  double gpu_hour_on_demand = 0, gpu_hour_reserved = 0, egress_per_gb = 0, gpus_per_host = 0;
};

struct Scenario {
  uint64_t seed = 1;
  int mtu = 1500;
  double default_delay_ms = 0.05;  // same-region pairs without a [[link]]
  std::vector<Host> hosts;
  std::vector<Link> links;
  std::vector<Fault> faults;  // scheduled, by at_s
  Prices prices;
  std::vector<std::string> regions() const;
  // The hosts a fault target names: "region:R", "host:H", a region, a host name, or a host index.
  Result<std::vector<int>> resolve(const std::string& target) const;
  const Link* link(const std::string& a, const std::string& b) const;
};

Result<Scenario> parse_scenario(const std::string& text);
Result<Scenario> load_scenario(const std::string& path);

}  // namespace sparrow::wanemu
