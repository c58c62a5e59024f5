// Net across processes: a SIGKILLed peer surfaces as kPeerLost, not a hang.
#include "transport/net.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "harness/net_harness.h"

namespace sparrow::transport {
namespace {

void write_str(int fd, const std::string& s) {
  uint32_t n = uint32_t(s.size());
  (void)!write(fd, &n, 4);
  (void)!write(fd, s.data(), n);
}
std::string read_str(int fd) {
  uint32_t n = 0;
  if (read(fd, &n, 4) != 4 || n > 4096) return "";
  std::string s(n, 0);
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, &s[got], n - got);
    if (r <= 0) return "";
    got += size_t(r);
  }
  return s;
}

TEST(NetProcess, KilledPeerIsPeerLost) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Rank 1 in its own process.
    auto net = Net::create(test::make_identity(1), 2, 2, "tcp");
    if (!net.ok()) _exit(2);
    write_str(to_parent[1], net.value()->address());
    std::string a0 = read_str(to_child[0]);
    net.value()->set_addresses({a0, net.value()->address()});
    auto m = net.value()->recv(0, MsgKey{42, 1, 0}, deadline_in(30));
    if (!m.ok()) _exit(3);
    auto rq = net.value()->send(0, MsgKey{42, 1, 1}, Payload{m->data(), m->size(), nullptr}, deadline_in(30));
    if (!rq.ok() || !rq.value()->wait(deadline_in(30)).ok()) _exit(4);
    pause();  // wait to be killed
    _exit(0);
  }
  auto net = Net::create(test::make_identity(0), 2, 2, "tcp");
  ASSERT_TRUE(net.ok());
  std::string a1 = read_str(to_parent[0]);
  ASSERT_FALSE(a1.empty());
  write_str(to_child[1], net.value()->address());
  net.value()->set_addresses({net.value()->address(), a1});
  std::vector<uint8_t> hello(1000, 9);
  ASSERT_TRUE(net.value()->send(1, MsgKey{42, 1, 0}, Payload{hello.data(), hello.size(), nullptr}, deadline_in(30)).ok());
  auto echo = net.value()->recv(1, MsgKey{42, 1, 1}, deadline_in(30));
  ASSERT_TRUE(echo.ok()) << echo.status().to_string();
  kill(pid, SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  auto never = net.value()->recv(1, MsgKey{42, 2, 0}, deadline_in(120));
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(never.status().code(), Code::kPeerLost) << never.status().to_string();
  EXPECT_NE(never.status().message().find("rank 1"), std::string::npos) << never.status().message();
  EXPECT_LT(waited, 30.0);
  int st;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFSIGNALED(st));
}

}  // namespace
}  // namespace sparrow::transport
