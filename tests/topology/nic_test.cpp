// The NIC a rank listens on when the user names none: the one on the calling thread's NUMA node, from
// a 2-socket host's hwloc XML with the interfaces that are up given as the kernel would list them.
#include "topology/nic.h"

#include <gtest/gtest.h>

#include <string>

#include "core/params.h"
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
