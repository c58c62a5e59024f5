#include "topology/host.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include "core/parallel.h"
#include "core/params.h"

#if SPARROW_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace sparrow::topo {
namespace {

params::StringParam kTopoFile("TOPO_FILE", "",
                              "An hwloc XML export to read the host's topology from instead of the machine (clouds and "
                              "containers whose sysfs says little; tests).");

// dddd:bb:dd.f, lower-case hex: how the topology names PCI devices.
std::string format_bus_id(unsigned dom, unsigned bus, unsigned dev, unsigned fn) {
  char b[32];
  snprintf(b, sizeof b, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return b;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

std::string json_ints(const std::vector<int>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ',';
    o += std::to_string(v[i]);
  }
  return o + "]";
}

#if SPARROW_HAVE_HWLOC
struct TopoDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopoPtr = std::unique_ptr<hwloc_topology, TopoDeleter>;

std::vector<int> cpus_of(hwloc_const_cpuset_t set) {
  std::vector<int> v;
  if (!set) return v;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) v.push_back(i);
  return v;
}

hwloc_obj_t pci_device_of(hwloc_obj_t o) {
  for (; o; o = o->parent)
    if (o->type == HWLOC_OBJ_PCI_DEVICE) return o;
  return nullptr;
}

std::string bus_id(hwloc_obj_t pci) {
  if (!pci) return "";
  return format_bus_id(pci->attr->pcidev.domain, pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

// The NUMA node `o` spans when it spans exactly one (-1 otherwise).
int single_node(hwloc_obj_t o) {
  return o && o->nodeset && hwloc_bitmap_weight(o->nodeset) == 1 ? hwloc_bitmap_first(o->nodeset) : -1;
}

// The objects above `o`, nearest first, each with the kind of link it is.
std::vector<PciHop> path_of(hwloc_obj_t o) {
  std::vector<PciHop> p;
  for (o = o ? o->parent : nullptr; o; o = o->parent) {
    PciLink l = PciLink::kSystem;
    if (o->type == HWLOC_OBJ_BRIDGE)
      l = o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI ? PciLink::kSwitch : PciLink::kHostBridge;
    else if (single_node(o) >= 0)
      l = PciLink::kNode;
    p.push_back({o->gp_index, l});
  }
  return p;
}


Result<TopoPtr> load(const std::string& xml) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return InternalError("hwloc_topology_init failed");
  TopoPtr t(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!xml.empty()) {
    if (access(xml.c_str(), R_OK) != 0) return SystemError("SPARROW_TOPO_FILE " + xml, errno);
    if (hwloc_topology_set_xml(raw, xml.c_str()) != 0)
      return InvalidArgument("SPARROW_TOPO_FILE " + xml + ": not an hwloc XML topology");
    // The file describes another machine: its CPUs are not this process's to bind to.
    hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  }
  if (hwloc_topology_load(raw) != 0)
    return InvalidArgument(xml.empty() ? std::string("hwloc could not read this machine's topology")
                                       : "SPARROW_TOPO_FILE " + xml + ": not an hwloc XML topology");
  return t;
}

void fill_nics(hwloc_topology_t t, HostTopology& h) {
  for (hwloc_obj_t o = hwloc_get_next_osdev(t, nullptr); o; o = hwloc_get_next_osdev(t, o)) {
    if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK && o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    Nic n;
    n.name = o->name ? o->name : "?";
    hwloc_obj_t pci = pci_device_of(o);
    n.pci = bus_id(pci);
    n.path = path_of(pci ? pci : o);
    hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(t, o);
    if (local) n.cpus = cpus_of(local->cpuset);
    // Local to one NUMA node when the object it hangs off spans exactly one (a NIC under the machine does not).
    n.numa = single_node(local);
    h.nics.push_back(std::move(n));
  }
}

// 3D controllers, and display controllers by NVIDIA (10de) or AMD (1002): a server's BMC VGA is not one.
bool is_gpu(hwloc_obj_t o) {
  const unsigned cls = o->attr->pcidev.class_id, vendor = o->attr->pcidev.vendor_id;
  return cls == 0x0302 || ((cls >> 8) == 0x03 && (vendor == 0x10de || vendor == 0x1002));
}

void fill_gpus(hwloc_topology_t t, HostTopology& h) {
  for (hwloc_obj_t o = hwloc_get_next_pcidev(t, nullptr); o; o = hwloc_get_next_pcidev(t, o)) {
    if (!is_gpu(o)) continue;
    char ids[16];
    snprintf(ids, sizeof ids, "%04x:%04x", unsigned(o->attr->pcidev.vendor_id), unsigned(o->attr->pcidev.device_id));
    h.gpus.push_back({bus_id(o), ids, single_node(hwloc_get_non_io_ancestor_obj(t, o)), path_of(o)});
  }
}

Result<HostTopology> from_hwloc(const std::string& xml) {
  SPARROW_ASSIGN_OR_RETURN(TopoPtr tp, load(xml));
  hwloc_topology_t t = tp.get();
  HostTopology h;
  h.known = true;
  h.source = xml.empty() ? "hwloc" : "hwloc XML " + xml;
  h.packages = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
  h.cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  h.pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  const int nn = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nn; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, unsigned(i));
    h.numa.push_back({int(o->os_index), cpus_of(o->cpuset)});
  }
  fill_nics(t, h);
  fill_gpus(t, h);
  return h;
}
#endif

}  // namespace

Result<HostTopology> discover(const std::string& xml) {
#if SPARROW_HAVE_HWLOC
  auto r = from_hwloc(xml);
  if (!r.ok()) return r.status();
  HostTopology h = std::move(r).value();
#else
  if (!xml.empty())
    return InvalidArgument("SPARROW_TOPO_FILE " + xml + ": this build has no hwloc (configured with SPARROW_WITH_HWLOC=OFF "
                           "or without libhwloc-dev)");
  HostTopology h;
  h.source = "none: built without hwloc";
#endif
  h.allowed = allowed_cpus();
  return h;
}

Result<HostTopology> discover() { return discover(kTopoFile.get()); }

const char* pci_link_words(PciLink l) {
  switch (l) {
    case PciLink::kSwitch: return "behind the same PCI switch as";
    case PciLink::kHostBridge: return "on the same host bridge as";
    case PciLink::kNode: return "on the same NUMA node as";
    case PciLink::kSystem: break;
  }
  return "across NUMA nodes from";
}

PciLink pci_link(const std::vector<PciHop>& a, const std::vector<PciHop>& b) {
  for (const PciHop& x : a)
    for (const PciHop& y : b)
      if (x.id == y.id) return x.link;
  return PciLink::kSystem;
}

namespace {
// "dddd:bb:dd.f" from any case and any domain width (CUDA writes 0000:18:00.0, NVML 00000000:18:00.0);
// "bb:dd.f" is domain 0. Anything else is returned as given.
std::string pci_normal(const std::string& pci) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  int used = 0;
  const bool full = sscanf(pci.c_str(), "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &used) == 4 && size_t(used) == pci.size();
  if (!full) {
    dom = 0, used = 0;
    if (sscanf(pci.c_str(), "%x:%x.%x%n", &bus, &dev, &fn, &used) != 3 || size_t(used) != pci.size()) return pci;
  }
  return format_bus_id(dom, bus, dev, fn);
}
}  // namespace

const Gpu* gpu_at(const HostTopology& t, const std::string& pci) {
  const std::string want = pci_normal(pci);
  for (const Gpu& g : t.gpus)
    if (g.pci == want) return &g;
  return nullptr;
}

int numa_of_cpu(const HostTopology& t, int cpu) {
  for (const NumaNode& m : t.numa)
    for (int c : m.cpus)
      if (c == cpu) return m.index;
  return -1;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string o;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!o.empty()) o += ',';
    o += std::to_string(cpus[i]);
    if (j > i) {
      o += '-';
      o += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return o;
}

std::string describe(const HostTopology& t) {
  std::string o = "topology: " + t.source + "\n";
  if (t.known) {
    o += "  " + std::to_string(t.packages) + " package(s), " + std::to_string(t.numa.size()) + " NUMA node(s), " +
         std::to_string(t.cores) + " core(s), " + std::to_string(t.pus) + " processing unit(s)\n";
    for (const NumaNode& m : t.numa) o += "  NUMA node " + std::to_string(m.index) + ": CPUs " + cpu_list(m.cpus) + "\n";
    if (t.nics.empty()) o += "  no network interface found by hwloc\n";
    for (const Nic& n : t.nics)
      o += "  NIC " + n.name + (n.pci.empty() ? " (no PCI device)" : " at PCI " + n.pci) +
           (n.numa >= 0 ? ", NUMA node " + std::to_string(n.numa) : ", no single NUMA node") + ", local CPUs " +
           (n.cpus.empty() ? "unknown" : cpu_list(n.cpus)) + "\n";
    for (const Gpu& g : t.gpus)
      o += "  GPU " + g.ids + " at PCI " + g.pci +
           (g.numa >= 0 ? ", NUMA node " + std::to_string(g.numa) : ", no single NUMA node") + "\n";
  }
  o += "  this thread may run on CPUs " + cpu_list(t.allowed) + "\n";
  return o;
}

std::string to_json(const HostTopology& t) {
  std::string o = "{\"source\":" + json_str(t.source) + ",\"known\":" + (t.known ? "true" : "false") +
                  ",\"packages\":" + std::to_string(t.packages) + ",\"cores\":" + std::to_string(t.cores) +
                  ",\"pus\":" + std::to_string(t.pus) + ",\"numa\":[";
  for (size_t i = 0; i < t.numa.size(); ++i)
    o += std::string(i ? "," : "") + "{\"index\":" + std::to_string(t.numa[i].index) + ",\"cpus\":" + json_ints(t.numa[i].cpus) + "}";
  o += "],\"nics\":[";
  for (size_t i = 0; i < t.nics.size(); ++i) {
    const Nic& n = t.nics[i];
    o += std::string(i ? "," : "") + "{\"name\":" + json_str(n.name) + ",\"pci\":" + json_str(n.pci) +
         ",\"numa\":" + std::to_string(n.numa) + ",\"cpus\":" + json_ints(n.cpus) + "}";
  }
  o += "],\"gpus\":[";
  for (size_t i = 0; i < t.gpus.size(); ++i)
    o += std::string(i ? "," : "") + "{\"pci\":" + json_str(t.gpus[i].pci) + ",\"ids\":" + json_str(t.gpus[i].ids) +
         ",\"numa\":" + std::to_string(t.gpus[i].numa) + "}";
  return o + "],\"allowed\":" + json_ints(t.allowed) + "}";
}

}  // namespace sparrow::topo
