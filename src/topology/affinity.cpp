#include "topology/affinity.h"

#include <algorithm>

#include "core/affinity.h"
#include "core/params.h"

namespace sparrow::topo {
namespace {
params::StringParam kAffinity("CPU_AFFINITY", "auto",
                              "CPUs for sparrow's threads (progress, encoder and apply workers): auto (those local to "
                              "the chosen NIC, within the process's mask), none, or a list like 0-3,8.");

std::vector<int> both(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> x = a, y = b, out;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(out));
  return out;
}

ThreadCpus near_the_nic(const std::vector<int>& allowed, const std::optional<NicChoice>& nic) {
  if (!nic || nic->nic.cpus.empty())
    return {{}, -1, "threads unbound: no NIC locality is known (hwloc lists none of this host's interfaces)"};
  const std::vector<int> local = both(nic->nic.cpus, allowed);
  if (local.empty())
    return {{}, -1, "threads unbound: the CPUs local to " + nic->nic.name + " (" + cpu_list(nic->nic.cpus) +
                    ") are all outside this process's mask (" + cpu_list(allowed) + ")"};
  const int node = nic->nic.numa;
  const std::string memory = node >= 0 ? "; buffers on NUMA node " + std::to_string(node) : "";
  if (local.size() == allowed.size())
    return {local, node, "threads on CPUs " + cpu_list(local) + ": this process's whole mask, all local to " +
                             nic->nic.name + memory};
  return {local, node, "threads on CPUs " + cpu_list(local) + ", local to " + nic->nic.name + " (of this process's " +
                           cpu_list(allowed) + ")" + memory};
}
}  // namespace

std::string cpu_affinity_setting() { return kAffinity.get(); }

Result<ThreadCpus> choose_thread_cpus(const std::vector<int>& allowed, const std::optional<NicChoice>& nic,
                                      const std::string& setting) {
  if (setting == "none") return ThreadCpus{{}, -1, "threads unbound (SPARROW_CPU_AFFINITY=none)"};
  if (setting == "auto" || setting.empty()) return near_the_nic(allowed, nic);
  auto listed = affinity::parse_cpu_list(setting);
  if (!listed.ok()) return Status(listed.status()).context("SPARROW_CPU_AFFINITY");
  const std::vector<int> cpus = allowed.empty() ? listed.value() : both(listed.value(), allowed);
  if (cpus.empty())
    return InvalidArgument("SPARROW_CPU_AFFINITY=" + setting + ": none of these CPUs is one this process may use (" +
                           cpu_list(allowed) + ")");
  return ThreadCpus{cpus, -1, "threads on CPUs " + cpu_list(cpus) + " (SPARROW_CPU_AFFINITY=" + setting + ")"};
}

}  // namespace sparrow::topo
