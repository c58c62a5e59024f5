// TCP-specific behaviour: what arrives on a listening port from strangers.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/params.h"
#include "harness/net_harness.h"
#include "harness/util.h"
#include "transport/socket.h"

namespace sparrow::transport {
namespace {

int raw_connect(const std::string& addr) {
  auto fd = net::connect_to(addr, test::soon(5));
  EXPECT_TRUE(fd.ok()) << fd.status().to_string();
  if (!fd.ok()) return -1;
  net::set_nonblocking(fd.value(), false);
  return fd.value();
}

// True if the server closed the connection (read returns 0 or an error) within `secs`.
bool closed_within(int fd, double secs) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  char buf[256];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) > 0) {
      ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r <= 0) return true;
    }
  }
  return false;
}

class TcpBackendTest : public ::testing::Test {
 protected:
  void TearDown() override { params::clear_overrides(); }
};

TEST_F(TcpBackendTest, JunkHalfOpenAndScansDoNotDisturbTheCommunicator) {
  ASSERT_TRUE(params::set_override("AUTH_TIMEOUT_MS", "60000").ok());
  auto nets = test::make_nets("tcp", 2);
  ASSERT_EQ(nets.size(), 2u);
  const std::string target = nets[1]->address();
  // A half-open connection that never speaks, held open for the whole test.
  int silent = raw_connect(target);
  // Garbage where a hello should be: dropped at once.
  int junk = raw_connect(target);
  auto garbage = test::random_bytes(1 << 20, 5);
  (void)!send(junk, garbage.data(), garbage.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(closed_within(junk, 10));
  // A port scan: connect and close, many times.
  for (int i = 0; i < 300; ++i) {
    int fd = raw_connect(target);
    close(fd);
  }
  // A well-formed hello for another communicator: dropped.
  int other = raw_connect(target);
  auth::Hello h;
  h.comm_id = 999;
  auto hb = h.encode();
  ASSERT_EQ(send(other, hb.data(), hb.size(), MSG_NOSIGNAL), ssize_t(hb.size()));
  EXPECT_TRUE(closed_within(other, 10));
  // Meanwhile the real peer connects and talks without waiting for the silent one's timeout.
  auto t0 = std::chrono::steady_clock::now();
  auto msg = test::random_bytes(3 << 20, 1);
  auto rq = nets[0]->send(1, MsgKey{42, 1, 0}, Payload{msg.data(), msg.size(), nullptr}, test::soon(30));
  ASSERT_TRUE(rq.ok()) << rq.status().to_string();
  auto got = nets[1]->recv(0, MsgKey{42, 1, 0}, test::soon(30));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), msg);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  close(silent);
  close(junk);
  close(other);
}

TEST_F(TcpBackendTest, SilentConnectionIsDroppedAtTheAuthDeadline) {
  ASSERT_TRUE(params::set_override("AUTH_TIMEOUT_MS", "200").ok());
  auto nets = test::make_nets("tcp", 2);
  ASSERT_EQ(nets.size(), 2u);
  int silent = raw_connect(nets[1]->address());
  EXPECT_TRUE(closed_within(silent, 10));
  close(silent);
}

TEST_F(TcpBackendTest, AddressParsing) {
  EXPECT_TRUE(net::parse_address("127.0.0.1:80").ok());
  EXPECT_TRUE(net::parse_address("[::1]:80").ok());
  EXPECT_EQ(net::parse_address("localhost:80").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(net::parse_address("127.0.0.1").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(net::parse_address("127.0.0.1:99999").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sparrow::transport
