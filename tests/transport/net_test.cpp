// Net across processes: a SIGKILLed peer surfaces as kPeerLost, not a hang.
#include "transport/net.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>

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

// A joiner's attempt whose streams rank 0 took only in part (it refused one: the slot was not free
// yet) fails at once with kPeerLost, so the joiner tries again; it does not wait out its deadline
// for an answer to a request that may have gone over the refused stream. Once admitted, one stream
// closing is no failure any more (the others may still carry frames).
TEST(Net, JoinerWhoseStreamRankZeroRefusedFailsAtOnce) {
  Mailbox kept("rank 1", 2);
  BackendOptions bo;
  bo.identity = test::make_identity(0);
  bo.bind_host = "127.0.0.1";
  auto rank0 = create_backend("tcp", bo);
  ASSERT_TRUE(rank0.ok()) << rank0.status().to_string();
  std::vector<ConnPtr> taken;
  std::mutex mu;
  auto addr = rank0.value()->listen([&](const ConnPtr& c) -> FrameSink* {
    if (c->stream() != 0) return nullptr;  // stream 1: "not expected"
    std::lock_guard<std::mutex> lk(mu);
    taken.push_back(c);
    return &kept;
  });
  ASSERT_TRUE(addr.ok()) << addr.status().to_string();
  auto joiner = Net::create(test::make_identity(1), 2, 2, "tcp");
  ASSERT_TRUE(joiner.ok()) << joiner.status().to_string();
  Net& j = *joiner.value();
  j.set_elastic();
  j.set_joiner();
  j.set_addresses({addr.value(), j.address()});
  auto t0 = std::chrono::steady_clock::now();
  auto m = j.recv(0, MsgKey{42, 0, 1}, deadline_in(60));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(m.status().code(), Code::kPeerLost) << m.status().to_string();
  EXPECT_LT(waited, 20.0) << "the joiner waited out its deadline";
  // Admitted: losing one of two streams fails nothing (the refusal comes within the 2 s).
  j.revive(0, addr.value());
  j.admitted();
  auto ch = j.connect(0, deadline_in(20));
  ASSERT_TRUE(ch.ok()) << ch.to_string();
  auto late = j.recv(0, MsgKey{42, 0, 3}, deadline_in(2));
  EXPECT_EQ(late.status().code(), Code::kTimeout) << late.status().to_string();
}

}  // namespace
}  // namespace sparrow::transport
