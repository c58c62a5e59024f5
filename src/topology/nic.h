// Which network interface a rank listens on and advertises when the user did not name one
// (SPARROW_SOCKET_ADDR, SPARROW_SOCKET_IFNAME): among the NICs hwloc sees that are up with an IPv4
// address, the one nearest the GPU this rank uses (the calling thread's current CUDA device) by their
// deepest common PCI ancestor: a PCIe switch, then a host bridge, then a NUMA node. Without a GPU (or
// between NICs as near it), the one local to the NUMA node this thread runs on; a NIC local to no
// single node next; a NIC on another node last. Equal candidates are said; the first by name is taken.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topology/host.h"
#include "transport/socket.h"

namespace sparrow::topo {

struct NicChoice {
  Nic nic;
  std::string address;              // its IPv4 address
  int thread_numa = -1;             // the NUMA node of the calling thread's CPUs (-1: unknown)
  std::string gpu;                  // the GPU it was chosen near (its PCI bus id), "" when none
  std::vector<std::string> equals;  // other candidates as near as the chosen one
  std::string why;                  // one line: what was chosen and why
};

// The NUMA node holding most of `cpus` (the lowest index on a tie; -1 when none is known).
int numa_of_cpus(const HostTopology& t, const std::vector<int>& cpus);

// The choice among `t`'s NICs that appear in `up` (transport::net::ipv4_interfaces(), loopback ones
// left out), for a thread that may run on `t.allowed` and uses the GPU at PCI bus id `gpu` ("" for
// none; one `t` does not list is said in `why` and ignored). nullopt when hwloc names none of them (a
// VM's virtual NIC hwloc does not list, a build without hwloc): the caller keeps its default.
std::optional<NicChoice> choose_nic(const HostTopology& t, const std::vector<transport::net::Interface>& up,
                                    const std::string& gpu = "");

// The PCI bus id of the GPU the calling thread uses (its current CUDA device), asked of the device
// backend only on a host where hwloc lists a GPU: loading CUDA costs a host without one time. "" when
// there is none.
std::string gpu_in_use(const HostTopology& t);

// The address a rank should listen on: SPARROW_SOCKET_ADDR / SPARROW_SOCKET_IFNAME when set
// (transport::net::local_host()), else choose_nic() on this host, else local_host()'s default.
// `why` (optional) gets the line sparrow logs at INFO.
// `nic` (optional) gets the NIC behind the address when hwloc lists it (chosen, or the named one).
Result<std::string> listen_address(std::string* why = nullptr, std::optional<NicChoice>* nic = nullptr);
// This host's topology (discover()), read once per SPARROW_TOPO_FILE value in the process.
Result<HostTopology> this_host();

}  // namespace sparrow::topo
