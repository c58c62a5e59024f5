// One conformance suite, instantiated for every transport backend.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/params.h"
#include "harness/net_harness.h"
#include "harness/util.h"
#include "transport/seal.h"
#include "transport/transport.h"

namespace sparrow::transport {
namespace {

using test::make_nets;
using test::soon;

// Parameter: "backend" or "ucx:<UCX_TLS>" to pin UCX's transports (tcp; sm,tcp = shared memory for
// data with tcp for connection establishment); "...+<SPARROW_ENCRYPT>" seals every frame (seal.h).
class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string p = GetParam();
    if (size_t plus = p.find('+'); plus != std::string::npos) {
      ASSERT_TRUE(params::set_override("ENCRYPT", p.substr(plus + 1)).ok());
      p = p.substr(0, plus);
      if (!seal::available()) GTEST_SKIP() << "built without OpenSSL: frames cannot be sealed";
    }
    size_t colon = p.find(':');
    backend_ = p.substr(0, colon);
    if (colon != std::string::npos) setenv("UCX_TLS", p.substr(colon + 1).c_str(), 1);
    auto names = backend_names();
    if (std::find(names.begin(), names.end(), backend_) == names.end())
      GTEST_SKIP() << "backend " << backend_ << " not available here";
  }
  void TearDown() override {
    unsetenv("UCX_TLS");
    params::clear_overrides();
  }
  std::string backend_;
};

Payload view(const std::vector<uint8_t>& v) { return Payload{v.data(), v.size(), nullptr}; }

TEST_P(Conformance, MessagesOfEverySizeArriveIntact) {
  auto nets = make_nets(backend_, 2);
  ASSERT_EQ(nets.size(), 2u);
  const size_t sizes[] = {0, 1, 1000, stripe_bytes() - 1, stripe_bytes() + 1, 5 * stripe_bytes() + 17};
  std::vector<std::vector<uint8_t>> msgs;
  for (size_t i = 0; i < std::size(sizes); ++i) msgs.push_back(test::random_bytes(sizes[i], i + 1));
  std::thread sender([&] {
    std::vector<SendRequestPtr> reqs;
    for (size_t i = 0; i < msgs.size(); ++i) {
      auto r = nets[0]->send(1, MsgKey{42, i, 0}, view(msgs[i]), soon());
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      reqs.push_back(r.value());
    }
    for (auto& r : reqs) EXPECT_TRUE(r->wait(soon()).ok());
  });
  for (size_t i = 0; i < msgs.size(); ++i) {
    auto got = nets[1]->recv(0, MsgKey{42, i, 0}, soon());
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got.value(), msgs[i]) << "size " << sizes[i];
  }
  sender.join();
  // And back, into caller memory.
  auto back = test::random_bytes(3 * stripe_bytes() + 5, 99);
  auto r = nets[1]->send(0, MsgKey{42, 100, 1}, view(back), soon());
  ASSERT_TRUE(r.ok());
  std::vector<uint8_t> dst(back.size());
  ASSERT_TRUE(nets[0]->recv_into(1, MsgKey{42, 100, 1}, dst.data(), dst.size(), soon()).ok());
  EXPECT_EQ(dst, back);
  EXPECT_TRUE(r.value()->wait(soon()).ok());
}

TEST_P(Conformance, ConcurrentOperationsDoNotCrossTalk) {
  auto nets = make_nets(backend_, 2);
  ASSERT_EQ(nets.size(), 2u);
  std::vector<std::vector<uint8_t>> msgs;
  std::vector<SendRequestPtr> reqs;
  for (uint32_t i = 0; i < 20; ++i) {
    msgs.push_back(test::random_bytes(1000 + 7919 * i, i));
    auto r = nets[0]->send(1, MsgKey{42, i % 5, i}, view(msgs.back()), soon());
    ASSERT_TRUE(r.ok());
    reqs.push_back(r.value());
  }
  // Receive in reverse order: each lands by its (op, sub-op), not by arrival.
  for (int i = 19; i >= 0; --i) {
    auto got = nets[1]->recv(0, MsgKey{42, uint64_t(i % 5), uint32_t(i)}, soon());
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.value(), msgs[i]);
  }
  for (auto& r : reqs) EXPECT_TRUE(r->wait(soon()).ok());
}

TEST_P(Conformance, AllPairsAmongFourRanks) {
  auto nets = make_nets(backend_, 4, 3);
  ASSERT_EQ(nets.size(), 4u);
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int r = 0; r < 4; ++r) {
    ts.emplace_back([&, r] {
      std::vector<std::vector<uint8_t>> keep;
      std::vector<SendRequestPtr> reqs;
      for (int p = 0; p < 4; ++p) {
        if (p == r) continue;
        keep.push_back(test::random_bytes(100000, r * 10 + p));
        auto q = nets[r]->send(p, MsgKey{42, 1, uint32_t(r)}, view(keep.back()), soon());
        if (!q.ok()) { bad++; continue; }
        reqs.push_back(q.value());
      }
      for (int p = 0; p < 4; ++p) {
        if (p == r) continue;
        auto got = nets[r]->recv(p, MsgKey{42, 1, uint32_t(p)}, soon());
        if (!got.ok() || got.value() != test::random_bytes(100000, p * 10 + r)) bad++;
      }
      for (auto& q : reqs)
        if (!q->wait(soon()).ok()) bad++;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(Conformance, RecvTimesOutNamingThePeer) {
  auto nets = make_nets(backend_, 2);
  ASSERT_EQ(nets.size(), 2u);
  ASSERT_TRUE(nets[0]->send(1, MsgKey{42, 0, 0}, Payload{}, soon()).ok());  // establish
  auto got = nets[0]->recv(1, MsgKey{42, 9, 9}, deadline_in(0.2));
  EXPECT_EQ(got.status().code(), Code::kTimeout);
  EXPECT_NE(got.status().message().find("rank 1"), std::string::npos) << got.status().message();
}

TEST_P(Conformance, AbortUnblocksWaiters) {
  auto nets = make_nets(backend_, 2);
  ASSERT_EQ(nets.size(), 2u);
  ASSERT_TRUE(nets[0]->send(1, MsgKey{42, 0, 0}, Payload{}, soon()).ok());
  ASSERT_TRUE(nets[1]->recv(0, MsgKey{42, 0, 0}, soon()).ok());
  std::thread t([&] {
    auto got = nets[1]->recv(0, MsgKey{42, 5, 5}, soon(600));
    EXPECT_FALSE(got.ok());
  });
  nets[1]->abort(Status(Code::kInternalError, "communicator aborted"));
  t.join();
  EXPECT_FALSE(nets[1]->send(0, MsgKey{42, 6, 6}, Payload{}, soon()).ok());
}

TEST_P(Conformance, ClosedPeerIsPeerLost) {
  auto nets = make_nets(backend_, 2);
  ASSERT_EQ(nets.size(), 2u);
  ASSERT_TRUE(nets[0]->send(1, MsgKey{42, 0, 0}, Payload{}, soon()).ok());
  ASSERT_TRUE(nets[1]->recv(0, MsgKey{42, 0, 0}, soon()).ok());
  std::thread t([&] {
    auto got = nets[0]->recv(1, MsgKey{42, 5, 5}, soon(600));
    EXPECT_EQ(got.status().code(), Code::kPeerLost) << got.status().to_string();
  });
  nets[1].reset();  // the peer goes away mid-wait
  t.join();
}

TEST_P(Conformance, WrongSecretIsRefused) {
  auto good = Net::create(test::make_identity(1), 2, 1, backend_);
  ASSERT_TRUE(good.ok());
  auto bad = Net::create(test::make_identity(0, 42, 8), 2, 1, backend_);
  ASSERT_TRUE(bad.ok());
  bad.value()->set_addresses({bad.value()->address(), good.value()->address()});
  Status s = bad.value()->connect(1, soon(5));
  EXPECT_EQ(s.code(), Code::kAuthError) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::Values("tcp", "tcp+on", "tcp+integrity", "loopback", "ucx", "ucx:tcp",
                                                                   "ucx:sm,tcp", "ucx+on", "ucx+integrity", "ucx:tcp+on"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace sparrow::transport
