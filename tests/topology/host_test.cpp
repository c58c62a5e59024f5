#include "topology/host.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/params.h"
#include "topology/two_socket.h"

namespace sparrow::topo {
namespace {

using fixtures::kTwoSocket;

const Nic* nic(const HostTopology& t, const std::string& name) {
  for (const Nic& n : t.nics)
    if (n.name == name) return &n;
  return nullptr;
}

#if SPARROW_HAVE_HWLOC
// A 2-socket host from its hwloc XML: each NIC's PCI address, NUMA node and local CPUs; a NIC under
// the machine itself belongs to no single node.
TEST(HostTopology, TwoSocketsFromXml) {
  auto r = discover(kTwoSocket);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const HostTopology& t = r.value();
  EXPECT_TRUE(t.known);
  EXPECT_EQ(t.source, "hwloc XML " + kTwoSocket);
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.cores, 8);
  EXPECT_EQ(t.pus, 8);
  ASSERT_EQ(t.numa.size(), 2u);
  EXPECT_EQ(cpu_list(t.numa[0].cpus), "0-3");
  EXPECT_EQ(cpu_list(t.numa[1].cpus), "4-7");
  EXPECT_EQ(numa_of_cpu(t, 5), 1);
  EXPECT_EQ(numa_of_cpu(t, 42), -1);
  ASSERT_EQ(t.nics.size(), 3u) << "the GPU is a PCI device, not a NIC";
  const Nic* a = nic(t, "ens1f0");
  const Nic* b = nic(t, "ens2f0");
  const Nic* m = nic(t, "eth9");
  ASSERT_TRUE(a && b && m);
  EXPECT_EQ(a->pci, "0000:17:00.0");
  EXPECT_EQ(a->numa, 0);
  EXPECT_EQ(cpu_list(a->cpus), "0-3");
  EXPECT_EQ(b->pci, "0000:98:00.0");
  EXPECT_EQ(b->numa, 1);
  EXPECT_EQ(cpu_list(b->cpus), "4-7");
  EXPECT_EQ(m->numa, -1);
  EXPECT_EQ(cpu_list(m->cpus), "0-7");
  const std::string d = describe(t);
  EXPECT_NE(d.find("NIC ens2f0 at PCI 0000:98:00.0, NUMA node 1, local CPUs 4-7"), std::string::npos) << d;
  EXPECT_NE(d.find("NIC eth9 at PCI 0000:05:00.0, no single NUMA node"), std::string::npos) << d;
  const std::string j = to_json(t);
  EXPECT_NE(j.find("{\"name\":\"ens1f0\",\"pci\":\"0000:17:00.0\",\"numa\":0,\"cpus\":[0,1,2,3]}"), std::string::npos) << j;
}

// GPUs and the PCI links between devices: a switch, a host bridge, a NUMA node, across nodes.
TEST(HostTopology, GpusAndTheirPciLinksToNics) {
  auto r = discover(fixtures::kGpuSwitch);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const HostTopology& t = r.value();
  ASSERT_EQ(t.gpus.size(), 3u) << "three 3D controllers; the BMC's VGA is not a GPU";
  const Gpu* g0 = gpu_at(t, "0000:11:00.0");
  const Gpu* g2 = gpu_at(t, "0000:A0:00.0");
  ASSERT_TRUE(g0 && g2);
  EXPECT_EQ(g0->ids, "10de:2330");
  EXPECT_EQ(g0->numa, 0);
  EXPECT_EQ(g2->numa, 1);
  EXPECT_EQ(gpu_at(t, "0000:03:00.0"), nullptr);
  const Nic *a = nic(t, "ens1f0"), *b = nic(t, "ens1f1"), *c = nic(t, "ens2f0"), *m = nic(t, "eth9");
  ASSERT_TRUE(a && b && c && m);
  EXPECT_EQ(pci_link(a->path, g0->path), PciLink::kSwitch);
  EXPECT_EQ(pci_link(b->path, g0->path), PciLink::kNode);
  EXPECT_EQ(pci_link(c->path, g0->path), PciLink::kSystem);
  EXPECT_EQ(pci_link(m->path, g0->path), PciLink::kSystem);
  EXPECT_EQ(pci_link(c->path, g2->path), PciLink::kNode);
  EXPECT_EQ(pci_link(a->path, b->path), PciLink::kNode);
  // Two devices on one host bridge: the NIC and the BMC's VGA share eth9's.
  ASSERT_FALSE(m->path.empty());
  EXPECT_EQ(m->path.front().link, PciLink::kHostBridge);
  EXPECT_EQ(pci_link(m->path, m->path), PciLink::kHostBridge);
  const std::string d = describe(t);
  EXPECT_NE(d.find("GPU 10de:2330 at PCI 0000:91:00.0, NUMA node 1"), std::string::npos) << d;
  const std::string j = to_json(t);
  EXPECT_NE(j.find("\"gpus\":[{\"pci\":\"0000:11:00.0\",\"ids\":\"10de:2330\",\"numa\":0}"), std::string::npos) << j;
}

// SPARROW_TOPO_FILE replaces the machine; a file that is missing or not hwloc XML is a named error.
TEST(HostTopology, TopoFileSettingAndBadFiles) {
  ASSERT_TRUE(params::set_override("TOPO_FILE", kTwoSocket).ok());
  auto r = discover();
  params::clear_overrides();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().packages, 2);
  auto missing = discover("/nonexistent/topo.xml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/topo.xml"), std::string::npos) << missing.status().message();
  char path[] = "/tmp/sparrow-topo-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "<not a topology>", 16), 16);
  close(fd);
  auto junk = discover(path);
  unlink(path);
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.status().code(), Code::kInvalidArgument);
  EXPECT_NE(junk.status().message().find("not an hwloc XML topology"), std::string::npos) << junk.status().message();
}

// The live machine: at least the CPUs this thread may use, each in a NUMA node hwloc found.
TEST(HostTopology, ThisMachine) {
  auto r = discover("");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const HostTopology& t = r.value();
  EXPECT_TRUE(t.known);
  EXPECT_GE(t.pus, int(t.allowed.size()));
  for (int c : t.allowed) EXPECT_GE(numa_of_cpu(t, c), 0) << "CPU " << c;
}
#else
TEST(HostTopology, WithoutHwlocSaysSo) {
  auto r = discover("");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().known);
  EXPECT_NE(r.value().source.find("without hwloc"), std::string::npos);
  EXPECT_FALSE(discover(kTwoSocket).ok()) << "an XML file cannot be read without hwloc";
}
#endif

// The affinity mask is always known, and a thread bound to one CPU sees only it.
TEST(HostTopology, AllowedIsTheThreadsMask) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  auto r = discover("");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(int(r.value().allowed.size()), CPU_COUNT(&set));
  EXPECT_EQ(cpu_list({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(cpu_list({}), "");
}

}  // namespace
}  // namespace sparrow::topo
