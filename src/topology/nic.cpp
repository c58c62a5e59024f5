#include "topology/nic.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/params.h"

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
}  // namespace

std::optional<NicChoice> choose_nic(const HostTopology& t, const std::vector<transport::net::Interface>& up) {
  const int node = numa_of_cpus(t, t.allowed);
  std::vector<std::pair<const Nic*, std::string>> cands;  // NIC, its address
  for (const Nic& n : t.nics)
    for (const auto& i : up)
      if (!i.loopback && i.name == n.name) cands.emplace_back(&n, i.address);
  if (cands.empty()) return std::nullopt;
  std::sort(cands.begin(), cands.end(), [&](const auto& a, const auto& b) {
    const int da = distance(*a.first, node), db = distance(*b.first, node);
    return da != db ? da < db : a.first->name < b.first->name;
  });
  NicChoice c;
  c.nic = *cands.front().first;
  c.address = cands.front().second;
  c.thread_numa = node;
  const int d = distance(c.nic, node);
  for (size_t k = 1; k < cands.size(); ++k)
    if (distance(*cands[k].first, node) == d) c.equals.push_back(cands[k].first->name);
  c.why = "NIC " + c.nic.name + " (" + c.address + (c.nic.pci.empty() ? "" : ", PCI " + c.nic.pci) + "), " +
          distance_words(d) + (node >= 0 ? " (node " + std::to_string(node) + ")" : "") + ", local CPUs " +
          (c.nic.cpus.empty() ? std::string("unknown") : cpu_list(c.nic.cpus));
  if (!c.equals.empty()) {
    std::string others;
    for (const auto& e : c.equals) others += (others.empty() ? "" : ", ") + e;
    c.why += "; as near: " + others + " (the first by name was taken; SPARROW_SOCKET_IFNAME picks another)";
  }
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
      if (i.name == n.name) return NicChoice{n, address, -1, {}, "named"};
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
      if (auto c = choose_nic(t.value(), up.value())) {
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
