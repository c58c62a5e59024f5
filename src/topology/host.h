// What this host is made of, as hwloc sees it: packages, NUMA nodes and their CPUs, the network
// interfaces with the PCI device and NUMA node each hangs off, and the CPUs this thread may run on.
// SPARROW_TOPO_FILE loads an hwloc XML export instead of the live machine (clouds and containers
// whose sysfs says little, and tests). Built without hwloc, or on a machine hwloc cannot read,
// discovery still answers with the affinity mask and says why the rest is unknown.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::topo {

struct Nic {
  std::string name;     // the OS interface (eth0, ens1f0, ib0, ...)
  std::string pci;      // its PCI bus id (dddd:bb:dd.f), empty when it has none (virtual)
  int numa = -1;        // the NUMA node it is local to (-1: unknown, or not local to one)
  std::vector<int> cpus;  // the CPUs local to it (the cpuset of its first non-I/O ancestor)
};

struct NumaNode {
  int index = 0;          // OS index
  std::vector<int> cpus;  // OS indexes of its processing units
};

struct HostTopology {
  std::string source;  // "hwloc", "hwloc XML FILE", or why there is no topology
  bool known = false;  // packages/NUMA/NICs below come from hwloc
  int packages = 0, cores = 0, pus = 0;
  std::vector<NumaNode> numa;
  std::vector<Nic> nics;
  std::vector<int> allowed;  // the calling thread's affinity mask (sched_getaffinity)
};

// The host's topology: SPARROW_TOPO_FILE when set (an error when it cannot be read), else the live
// machine. Never fails for lack of hwloc: `known` is false and `source` says why.
Result<HostTopology> discover();
// The same from an explicit XML file (empty: the live machine).
Result<HostTopology> discover(const std::string& xml_file);

// The NUMA node whose CPUs include `cpu` (-1: none known).
int numa_of_cpu(const HostTopology& t, int cpu);
// "0-3,8,10-11"
std::string cpu_list(const std::vector<int>& cpus);
// Human-readable lines (sparrow-info --topo) and one JSON object (--topo --json).
std::string describe(const HostTopology& t);
std::string to_json(const HostTopology& t);

}  // namespace sparrow::topo
