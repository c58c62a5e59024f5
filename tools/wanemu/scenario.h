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

struct Scenario {
  uint64_t seed = 1;
  int mtu = 1500;
  double default_delay_ms = 0.05;  // same-region pairs without a [[link]]
  std::vector<Host> hosts;
  std::vector<Link> links;
  std::vector<std::string> regions() const;
  const Link* link(const std::string& a, const std::string& b) const;
};

Result<Scenario> parse_scenario(const std::string& text);
Result<Scenario> load_scenario(const std::string& path);

}  // namespace sparrow::wanemu
