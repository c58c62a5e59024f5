// The NIC a rank listens on when the user names none: the one on the calling thread's NUMA node, from
// a 2-socket host's hwloc XML with the interfaces that are up given as the kernel would list them.
#include "topology/nic.h"

#include <gtest/gtest.h>

#include <string>

#include "core/params.h"
#include "harness/fake_device.h"
#include "topology/two_socket.h"

namespace sparrow::topo {
namespace {

using fixtures::two_socket;


using Ifs = std::vector<transport::net::Interface>;
const Ifs kUp = {{"lo", "127.0.0.1", true}, {"ens1f0", "10.0.0.1", false}, {"ens2f0", "10.1.0.1", false},
                 {"eth9", "10.2.0.1", false}};

#if SPARROW_HAVE_HWLOC

TEST(NicChoice, TheNicOnTheThreadsNumaNode) {
  auto c = choose_nic(two_socket({0, 1}), kUp);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "ens1f0");
  EXPECT_EQ(c->address, "10.0.0.1");
  EXPECT_EQ(c->thread_numa, 0);
  EXPECT_TRUE(c->equals.empty());
  EXPECT_NE(c->why.find("on this thread's NUMA node (node 0)"), std::string::npos) << c->why;
  c = choose_nic(two_socket({4, 5, 6, 7}), kUp);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "ens2f0");
  EXPECT_EQ(c->address, "10.1.0.1");
  // A mask spanning both nodes counts where most of its CPUs are.
  EXPECT_EQ(choose_nic(two_socket({3, 4, 5}), kUp)->nic.name, "ens2f0");
}

TEST(NicChoice, ANicThatIsDownOrHasNoAddressIsNotACandidate) {
  // ens2f0 is not up: a thread on node 1 gets the NIC local to no single node before the remote one.
  const Ifs up = {{"ens1f0", "10.0.0.1", false}, {"eth9", "10.2.0.1", false}};
  auto c = choose_nic(two_socket({4, 5}), up);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "eth9");
  EXPECT_NE(c->why.find("local to no single NUMA node"), std::string::npos) << c->why;
  // Only a remote NIC left: it is taken, and said to be remote.
  c = choose_nic(two_socket({4, 5}), {{"ens1f0", "10.0.0.1", false}});
  ASSERT_TRUE(c.has_value());
  EXPECT_NE(c->why.find("on another NUMA node"), std::string::npos) << c->why;
  // None of hwloc's NICs is up (a VM's virtual NIC hwloc does not list): no choice, the default stays.
  EXPECT_FALSE(choose_nic(two_socket({0}), {{"lo", "127.0.0.1", true}, {"eth0", "192.0.2.2", false}}).has_value());
}

TEST(NicChoice, EqualCandidatesAreSaidAndTheFirstByNameIsTaken) {
  // A thread whose CPUs hwloc does not know (a mask outside the XML's machine): no NIC is nearer.
  auto c = choose_nic(two_socket({40}), kUp);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->thread_numa, -1);
  EXPECT_EQ(c->nic.name, "ens1f0");
  EXPECT_EQ(c->equals, (std::vector<std::string>{"ens2f0", "eth9"}));
  EXPECT_NE(c->why.find("as near: ens2f0, eth9"), std::string::npos) << c->why;
}

// A GPU server (gpu_switch.xml): the NIC behind the GPU's own PCIe switch wins over one merely on the
// thread's NUMA node; a GPU on the other socket takes its socket's NIC; a GPU alone on its host bridge
// takes a NIC on its NUMA node.
using fixtures::gpu_switch;
const Ifs kGpuUp = {{"lo", "127.0.0.1", true}, {"ens1f0", "10.0.0.1", false}, {"ens1f1", "10.0.1.1", false},
                    {"ens2f0", "10.1.0.1", false}, {"eth9", "10.2.0.1", false}};

TEST(NicChoice, TheNicNearestTheGpuByPciAncestor) {
  auto c = choose_nic(gpu_switch({0, 1}), kGpuUp, "0000:11:00.0");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "ens1f0");
  EXPECT_EQ(c->gpu, "0000:11:00.0");
  EXPECT_TRUE(c->equals.empty());
  EXPECT_NE(c->why.find("behind the same PCI switch as GPU 0000:11:00.0"), std::string::npos) << c->why;
  // The GPU on the other socket outweighs the thread's node.
  c = choose_nic(gpu_switch({0, 1}), kGpuUp, "0000:91:00.0");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "ens2f0");
  EXPECT_NE(c->why.find("on another NUMA node"), std::string::npos) << c->why;
  // Alone on its host bridge: the NIC on its node, before the machine's and the other socket's.
  c = choose_nic(gpu_switch({0, 1}), kGpuUp, "0000:a0:00.0");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "ens2f0");
  EXPECT_NE(c->why.find("on the same NUMA node as GPU 0000:a0:00.0"), std::string::npos) << c->why;
  // CUDA's and NVML's spellings of a bus id find the same GPU.
  EXPECT_EQ(choose_nic(gpu_switch({0}), kGpuUp, "00000000:91:00.0")->nic.name, "ens2f0");
  EXPECT_EQ(choose_nic(gpu_switch({0}), kGpuUp, "0000:91:00.0")->gpu, "0000:91:00.0");
  EXPECT_EQ(choose_nic(gpu_switch({0}), kGpuUp, "91:00.0")->nic.name, "ens2f0");
}

TEST(NicChoice, WithTheGpusSwitchNicDownTheNextNearestOnItsNodeWins) {
  const Ifs up = {{"ens1f1", "10.0.1.1", false}, {"ens2f0", "10.1.0.1", false}, {"eth9", "10.2.0.1", false}};
  auto c = choose_nic(gpu_switch({4, 5}), up, "0000:11:00.0");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "ens1f1");
  EXPECT_NE(c->why.find("on the same NUMA node as GPU 0000:11:00.0"), std::string::npos) << c->why;
  // Only NICs across the sockets from the GPU: the thread's node decides between them.
  c = choose_nic(gpu_switch({4, 5}), {{"ens2f0", "10.1.0.1", false}, {"eth9", "10.2.0.1", false}}, "0000:11:00.0");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "ens2f0");
  EXPECT_NE(c->why.find("across NUMA nodes from GPU"), std::string::npos) << c->why;
}

TEST(NicChoice, AGpuTheTopologyLacksIsSaidAndIgnored) {
  auto c = choose_nic(gpu_switch({4}), kGpuUp, "0000:07:00.0");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nic.name, "ens2f0");  // the thread's node
  EXPECT_EQ(c->gpu, "");
  EXPECT_NE(c->why.find("GPU 0000:07:00.0 is not in this host's topology"), std::string::npos) << c->why;
  // The BMC's VGA controller is not a GPU.
  EXPECT_EQ(choose_nic(gpu_switch({4}), kGpuUp, "0000:03:00.0")->gpu, "");
}

// The GPU in use comes from the device backend, which is asked only where hwloc lists a GPU.
TEST(NicChoice, TheGpuInUseIsTheDeviceBackendsCurrentOne) {
  test::FakeDevice dev(1 << 20);
  dev.pci = "0000:91:00.0";
  kernels::set_device_ops(&dev);
  EXPECT_EQ(gpu_in_use(gpu_switch({0})), "0000:91:00.0");
  EXPECT_EQ(dev.pci_asks.load(), 1);
  HostTopology no_gpu = two_socket({0});
  no_gpu.gpus.clear();
  EXPECT_EQ(gpu_in_use(no_gpu), "");
  EXPECT_EQ(dev.pci_asks.load(), 1);
  kernels::set_device_ops(nullptr);
  EXPECT_EQ(gpu_in_use(gpu_switch({0})), "");  // no backend: no GPU
}
#endif

TEST(NicChoice, ANamedAddressOrInterfaceWins) {
  ASSERT_TRUE(params::set_override("SOCKET_ADDR", "127.0.0.3").ok());
  std::string why;
  auto a = listen_address(&why);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value(), "127.0.0.3");
  EXPECT_NE(why.find("SPARROW_SOCKET_ADDR"), std::string::npos) << why;
  ASSERT_TRUE(params::set_override("SOCKET_ADDR", "").ok());
  ASSERT_TRUE(params::set_override("SOCKET_IFNAME", "lo").ok());
  EXPECT_EQ(listen_address().value(), "127.0.0.1");
  params::clear_overrides();
}

}  // namespace
}  // namespace sparrow::topo
