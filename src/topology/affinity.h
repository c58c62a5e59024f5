// Which CPUs sparrow's own threads run on (SPARROW_CPU_AFFINITY): `auto` (the default) takes the CPUs
// local to the NIC the rank listens on, intersected with the CPUs the process may use (mpirun's
// binding, taskset and cgroups win, as in NCCL); `none` leaves the threads unbound; a CPU list
// ("0-3,8") is taken as given, intersected with the allowed CPUs. Where nothing is known (no NIC
// locality from hwloc, a NIC whose local CPUs are all outside the mask), the threads stay unbound and
// the reason is said.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "topology/nic.h"

namespace sparrow::topo {

struct ThreadCpus {
  std::vector<int> cpus;  // empty: unbound
  int numa = -1;          // the NUMA node large buffers prefer: the NIC's, when the threads run near it
  std::string why;        // one line, logged at INFO by every rank
};

// The choice for `setting` (SPARROW_CPU_AFFINITY's value) for a process that may run on `allowed`
// (its mask; empty: unknown), with the NIC choice when one was made (its local CPUs). kInvalidArgument
// for a list that is malformed or names no allowed CPU.
Result<ThreadCpus> choose_thread_cpus(const std::vector<int>& allowed, const std::optional<NicChoice>& nic,
                                      const std::string& setting);
// SPARROW_CPU_AFFINITY's value.
std::string cpu_affinity_setting();

}  // namespace sparrow::topo
