#include "topology/nic.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/params.h"
#include "kernels/device.h"

namespace sparrow::topo {

int numa_of_cpus(const HostTopology& t, const std::vector<int>& cpus) {
  std::map<int, int> count;
  for (int c : cpus)
    if (int n = numa_of_cpu(t, c); n >= 0) ++count[n];
  int best = -1, most = 0;
  for (auto [node, n] : count)
    if (n > most) best = node, most = n;
  return best;
}

namespace {
// 0: on the thread's node; 1: local to no single node (or the thread's node is unknown); 2: another node.
int distance(const Nic& n, int thread_numa) {
  if (n.numa < 0 || thread_numa < 0) return 1;
  return n.numa == thread_numa ? 0 : 2;
}
const char* distance_words(int d) { return d == 0 ? "on this thread's NUMA node" : d == 1 ? "local to no single NUMA node" : "on another NUMA node"; }

struct Candidate {
  const Nic* nic;
  std::string address;
  int gpu_link;  // PciLink to the GPU (0 for every NIC when there is none)
  int numa_distance;
  bool as_near(const Candidate& o) const { return gpu_link == o.gpu_link && numa_distance == o.numa_distance; }
  bool operator<(const Candidate& o) const {
    if (gpu_link != o.gpu_link) return gpu_link < o.gpu_link;
    if (numa_distance != o.numa_distance) return numa_distance < o.numa_distance;
    return nic->name < o.nic->name;
  }
};

std::string why_chosen(const NicChoice& c, const Candidate& best, const Gpu* g, const std::string& gpu) {
  std::string w = "NIC " + c.nic.name + " (" + c.address + (c.nic.pci.empty() ? "" : ", PCI " + c.nic.pci) + "), ";
  if (g) w += std::string(pci_link_words(PciLink(best.gpu_link))) + " GPU " + g->pci + ", ";
  w += std::string(distance_words(best.numa_distance)) +
       (c.thread_numa >= 0 ? " (node " + std::to_string(c.thread_numa) + ")" : "") + ", local CPUs " +
       (c.nic.cpus.empty() ? std::string("unknown") : cpu_list(c.nic.cpus));
  if (!gpu.empty() && !g) w += "; GPU " + gpu + " is not in this host's topology, so it was not considered";
  if (!c.equals.empty()) {
    std::string others;
    for (const auto& e : c.equals) others += (others.empty() ? "" : ", ") + e;
    w += "; as near: " + others + " (the first by name was taken; SPARROW_SOCKET_IFNAME picks another)";
  }
  return w;
}
}  // namespace

std::optional<NicChoice> choose_nic(const HostTopology& t, const std::vector<transport::net::Interface>& up,
                                    const std::string& gpu) {
  const int node = numa_of_cpus(t, t.allowed);
  const Gpu* g = gpu.empty() ? nullptr : gpu_at(t, gpu);
  std::vector<Candidate> cands;
  for (const Nic& n : t.nics)
    for (const auto& i : up)
      if (!i.loopback && i.name == n.name)
        cands.push_back({&n, i.address, g ? int(pci_link(n.path, g->path)) : 0, distance(n, node)});
  if (cands.empty()) return std::nullopt;
  std::sort(cands.begin(), cands.end());
  NicChoice c;
  c.nic = *cands.front().nic;
  c.address = cands.front().address;
  c.thread_numa = node;
  if (g) c.gpu = g->pci;
  for (size_t k = 1; k < cands.size(); ++k)
    if (cands[k].as_near(cands.front())) c.equals.push_back(cands[k].nic->name);
  c.why = why_chosen(c, cands.front(), g, gpu);
  return c;
}

// discover(), once per SPARROW_TOPO_FILE value in this process: the host does not change between
// communicators, and loading a large machine's topology takes a while.
Result<HostTopology> this_host() {
  static std::mutex mu;
  static std::map<std::string, Result<HostTopology>> cache;
  auto file = params::value_of("TOPO_FILE");
  const std::string key = file.ok() ? file.value() : "";
  std::lock_guard<std::mutex> lk(mu);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, discover()).first;
  return it->second;
}

std::string gpu_in_use(const HostTopology& t) { return t.gpus.empty() ? "" : kernels::current_gpu_pci(); }

namespace {
// The NIC hwloc lists behind `address` (a named one), when it does. A loopback address has none:
// the host's topology is not read for it.
std::optional<NicChoice> nic_holding(const std::string& address) {
  auto up = transport::net::ipv4_interfaces();
  if (!up.ok()) return std::nullopt;
  for (const auto& i : up.value()) {
    if (i.address != address || i.loopback) continue;
    auto t = this_host();
    for (const Nic& n : t.ok() ? t.value().nics : std::vector<Nic>{})
      if (i.name == n.name) return NicChoice{n, address, -1, "", {}, "named"};
  }
  return std::nullopt;
}
}  // namespace

Result<std::string> listen_address(std::string* why, std::optional<NicChoice>* nic) {
  const bool named = transport::net::address_named();
  if (!named) {
    auto t = this_host();
    auto up = transport::net::ipv4_interfaces();
    if (t.ok() && up.ok())
      if (auto c = choose_nic(t.value(), up.value(), gpu_in_use(t.value()))) {
        if (why) *why = c->why;
        if (nic) *nic = c;
        return c->address;
      }
  }
  SPARROW_ASSIGN_OR_RETURN(std::string a, transport::net::local_host());
  if (nic && named) *nic = nic_holding(a);
  if (why)
    *why = named ? "address " + a + " (SPARROW_SOCKET_ADDR or SPARROW_SOCKET_IFNAME)"
                 : "address " + a + " (the first non-loopback interface: hwloc lists none of this host's interfaces)";
  return a;
}

}  // namespace sparrow::topo
