// What this host is made of, as hwloc sees it: packages, NUMA nodes and their CPUs, the network
// interfaces and GPUs with the PCI device and NUMA node each hangs off (and the path up to it, so that
// a NIC's nearness to a GPU can be judged), and the CPUs this thread may run on.
// SPARROW_TOPO_FILE loads an hwloc XML export instead of the live machine (clouds and containers
// whose sysfs says little, and tests). Built without hwloc, or on a machine hwloc cannot read,
// discovery still answers with the affinity mask and says why the rest is unknown.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::topo {

// How near two devices are, by the deepest object both hang off (as NCCL's PIX/PHB/NODE/SYS).
enum class PciLink : int {
  kSwitch = 0,      // a PCI bridge below the host bridge: a PCIe switch both sit behind
  kHostBridge = 1,  // the same host bridge (root complex)
  kNode = 2,        // the same NUMA node, through the CPU
  kSystem = 3,      // across NUMA nodes or packages (or unknown)
};
const char* pci_link_words(PciLink l);

// One object above a device, nearest first: its hwloc id and what kind of link it is.
struct PciHop {
  uint64_t id = 0;
  PciLink link = PciLink::kSystem;
};

struct Nic {
  std::string name;     // the OS interface (eth0, ens1f0, ib0, ...)
  std::string pci;      // its PCI bus id (dddd:bb:dd.f), empty when it has none (virtual)
  int numa = -1;        // the NUMA node it is local to (-1: unknown, or not local to one)
  std::vector<int> cpus;  // the CPUs local to it (the cpuset of its first non-I/O ancestor)
  std::vector<PciHop> path;  // the objects above its PCI device, nearest first
};

// A GPU: a PCI 3D controller, or a display controller by NVIDIA or AMD.
struct Gpu {
  std::string pci;  // dddd:bb:dd.f, lower-case hex
  std::string ids;  // vendor:device, e.g. "10de:2330"
  int numa = -1;
  std::vector<PciHop> path;
};

// The deepest object `a` and `b` both hang off, as a link (kSystem when they share none).
PciLink pci_link(const std::vector<PciHop>& a, const std::vector<PciHop>& b);

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
  std::vector<Gpu> gpus;
  std::vector<int> allowed;  // the calling thread's affinity mask (sched_getaffinity)
};

// The host's topology: SPARROW_TOPO_FILE when set (an error when it cannot be read), else the live
// machine. Never fails for lack of hwloc: `known` is false and `source` says why.
Result<HostTopology> discover();
// The same from an explicit XML file (empty: the live machine).
Result<HostTopology> discover(const std::string& xml_file);

// The GPU at PCI bus id `pci` (any case; "0000:" may be left out), or null.
const Gpu* gpu_at(const HostTopology& t, const std::string& pci);
// The NUMA node whose CPUs include `cpu` (-1: none known).
int numa_of_cpu(const HostTopology& t, int cpu);
// "0-3,8,10-11"
std::string cpu_list(const std::vector<int>& cpus);
// Human-readable lines (sparrow-info --topo) and one JSON object (--topo --json).
std::string describe(const HostTopology& t);
std::string to_json(const HostTopology& t);

}  // namespace sparrow::topo
