// Relay forwarding over the in-process loopback backend, with its fault injection.
#include "collectives/relay.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "collectives/elastic/elastic.h"
#include "core/params.h"
#include "harness/net_harness.h"
#include "harness/util.h"
#include "transport/loopback/loopback.h"

namespace sparrow::coll {
namespace {

OpWire wire_of(transport::Net& n, double timeout_s = 10) { return OpWire{n, 42, 3, transport::deadline_in(timeout_s)}; }

// `r` placed as an elastic receiver: parent and children, its failover (re-attaching to `root`, with
// this lease and patience, asking `adopter` first) and the ranks it may adopt.
void attach_elastic(Relay& r, int parent, std::vector<int> children, int root, double lease_s, double patience_s,
                    int adopter = -1, std::vector<int> adoptable = {}) {
  r.attach(parent, std::move(children), elastic::failover(r.wire(), root, lease_s, patience_s, adopter),
           std::move(adoptable));
}

std::vector<Frame> parts(int n) {
  std::vector<Frame> v;
  for (int i = 0; i < n; ++i) v.push_back(share(test::random_bytes(1000 + 37 * i, i)));
  return v;
}

// Parts 1.. of `sent` through `r`, each checked against what was sent; `after_first` runs once part 1
// returned. No ASSERT: the caller's threads must still be joined.
void take_all(Relay& r, const std::vector<Frame>& sent, const std::function<void()>& after_first = {}) {
  for (uint32_t sub = 1; sub < sent.size(); ++sub) {
    auto f = r.next(sub);
    if (sub == 1 && after_first) after_first();
    if (!f.ok()) {
      ADD_FAILURE() << "part " << sub << ": " << f.status().to_string();
      return;
    }
    EXPECT_EQ(*f.value(), *sent[sub]);
  }
}

// Chain 0 -> 1 -> 2: rank 1 relays; rank 2 gets every part bit for bit, whatever the delay.
TEST(Relay, ForwardsEveryPartInOrderBitForBit) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  transport::LoopbackFaults slow;
  slow.delay_us = 2000;
  ASSERT_TRUE(transport::set_loopback_faults(nets[2]->address(), slow));
  const auto sent = parts(12);
  for (uint32_t i = 0; i < sent.size(); ++i) ASSERT_TRUE(wire_of(*nets[0]).send({1}, i, sent[i]).ok());
  Relay relay(wire_of(*nets[1]), 0, {2});
  uint64_t payload = 0;
  for (uint32_t i = 0; i < sent.size(); ++i) {
    auto f = relay.next(i);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(*f.value(), *sent[i]);
    if (i) payload += sent[i]->size();
  }
  relay.finish();
  EXPECT_EQ(relay.bytes(), payload);  // the header (part 0) is not payload
  for (uint32_t i = 0; i < sent.size(); ++i) {
    auto m = wire_of(*nets[2]).recv(1, i);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m.value(), *sent[i]) << "part " << i;
  }
}

// Cut-through: a child that stops taking frames does not hold up what its relay receives.
TEST(Relay, StalledChildDoesNotHoldUpTheRelay) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  transport::LoopbackFaults stall;
  stall.stall = true;
  ASSERT_TRUE(transport::set_loopback_faults(nets[2]->address(), stall));
  const auto sent = parts(8);
  for (uint32_t i = 0; i < sent.size(); ++i) ASSERT_TRUE(wire_of(*nets[0]).send({1}, i, sent[i]).ok());
  Relay relay(wire_of(*nets[1]), 0, {2});
  auto t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < sent.size(); ++i) ASSERT_TRUE(relay.next(i).ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  ASSERT_TRUE(transport::set_loopback_faults(nets[2]->address(), {}));  // it resumes and gets everything
  relay.finish();
  for (uint32_t i = 0; i < sent.size(); ++i) {
    auto m = wire_of(*nets[2]).recv(1, i);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m.value(), *sent[i]);
  }
}

// In place (dense segments): received into the caller's buffer and forwarded from it.
TEST(Relay, NextIntoReceivesInPlaceAndForwards) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  auto data = test::random_bytes(1 << 20, 5);
  const size_t seg = 300000;
  for (uint32_t i = 0; i * seg < data.size(); ++i) {
    const size_t n = std::min(seg, data.size() - i * seg);
    ASSERT_TRUE(wire_of(*nets[0]).send({1}, 1 + i, share(std::vector<uint8_t>(data.begin() + i * seg, data.begin() + i * seg + n))).ok());
  }
  std::vector<uint8_t> mid(data.size()), leaf(data.size());
  Relay relay(wire_of(*nets[1]), 0, {2});
  Relay sink(wire_of(*nets[2]), 1, {});
  for (uint32_t i = 0; i * seg < data.size(); ++i) {
    const size_t n = std::min(seg, data.size() - i * seg);
    ASSERT_TRUE(relay.next_into(1 + i, mid.data() + i * seg, n).ok());
    ASSERT_TRUE(sink.next_into(1 + i, leaf.data() + i * seg, n).ok());
  }
  relay.finish();
  EXPECT_EQ(mid, data);
  EXPECT_EQ(leaf, data);
  EXPECT_EQ(sink.bytes(), data.size());
}

// A parent whose connections drop mid-stream: the relay fails at once with PeerLost, not a timeout.
TEST(Relay, LostParentIsPeerLostNotATimeout) {
  auto nets = test::make_nets("loopback", 2);
  ASSERT_EQ(nets.size(), 2u);
  const auto sent = parts(3);
  ASSERT_TRUE(wire_of(*nets[0]).send({1}, 0, sent[0]).ok());
  Relay relay(wire_of(*nets[1], 30), 0, {});
  ASSERT_TRUE(relay.next(0).ok());
  transport::LoopbackFaults drop;
  drop.fail_after_frames = 0;
  ASSERT_TRUE(transport::set_loopback_faults(nets[1]->address(), drop));
  (void)wire_of(*nets[0]).send({1}, 1, sent[1]);
  auto t0 = std::chrono::steady_clock::now();
  auto f = relay.next(1);
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kPeerLost) << f.status().to_string();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

// A sender with several children shares its uplink's streams among them (SPARROW_SHARE_STREAMS):
// over real sockets, each of three children gets a 4 MB message on one of its 4 streams, a child
// alone gets it on all four, and with the sharing off each of three gets it on more than one.
TEST(Relay, FanoutSharesTheSendersStreamsAmongItsChildren) {
  auto nets = test::make_nets("tcp", 4, 4);
  ASSERT_EQ(nets.size(), 4u);
  const Frame big = share(test::random_bytes(4 << 20, 7));
  auto streams_used = [&](const std::vector<int>& kids, uint64_t seq) {
    for (auto& n : nets) n->begin_traffic(seq, seq);
    Fanout out(OpWire{*nets[0], 42, seq, transport::deadline_in(20)}, kids);
    out.send(1, big);
    out.finish();
    std::vector<int> used;
    for (int k : kids) {
      auto m = OpWire{*nets[size_t(k)], 42, seq, transport::deadline_in(20)}.recv(0, 1);
      EXPECT_TRUE(m.ok() && m.value() == *big) << "rank " << k;
      used.push_back(nets[size_t(k)]->traffic(0).streams);
    }
    return used;
  };
  EXPECT_EQ(streams_used({1, 2, 3}, 5), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(streams_used({1}, 6), (std::vector<int>{4}));
  ASSERT_TRUE(params::set_override("SHARE_STREAMS", "0").ok());
  const auto off = streams_used({1, 2, 3}, 7);
  params::clear_overrides();
  for (int s : off) EXPECT_GT(s, 1);
}

// One lost child does not cost its siblings the operation.
TEST(Relay, FanoutDropsALostChildAndTheOthersGoOn) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  transport::LoopbackFaults drop;
  drop.fail_after_frames = 0;  // rank 1's connections break at the first frame it gets
  ASSERT_TRUE(transport::set_loopback_faults(nets[1]->address(), drop));
  const auto sent = parts(6);
  Fanout out(wire_of(*nets[0]), {1, 2});
  for (uint32_t i = 0; i < sent.size(); ++i) out.send(i, sent[i]);
  out.finish();
  EXPECT_EQ(out.lost(), std::vector<int>{1});
  for (uint32_t i = 0; i < sent.size(); ++i) {
    auto m = wire_of(*nets[2]).recv(0, i);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m.value(), *sent[i]);
  }
}

// Chain 0 -> 1 -> 2: rank 0 goes away mid-operation. Rank 1 sees it lost; rank 2, which only talks
// to rank 1, learns it at once from the abort rank 1 passes down (not after its own timeout).
TEST(Relay, ParentLossIsPassedDownAtOnce) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  const auto sent = parts(2);
  ASSERT_TRUE(wire_of(*nets[0]).send({1}, 0, sent[0]).ok());
  Relay mid(wire_of(*nets[1], 30), 0, {2});
  Relay leaf(wire_of(*nets[2], 30), 1, {});
  ASSERT_TRUE(mid.next(0).ok());
  ASSERT_TRUE(leaf.next(0).ok());
  nets[0].reset();  // the root's network goes: its connections close
  auto t0 = std::chrono::steady_clock::now();
  auto m = mid.next(1);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kPeerLost) << m.status().to_string();
  auto l = leaf.next(1);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kPeerLost);
  EXPECT_NE(l.status().message().find("rank 1 (on the way from the root) lost its parent, rank 0"), std::string::npos)
      << l.status().message();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

// The same in place (dense segments): the abort frame rank 1 passes down in place of a segment
// reaches rank 2 as rank 1's failure at once, and rank 2's buffer gets none of its bytes.
TEST(Relay, DenseParentLossIsPassedDownAtOnce) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  const auto seg = test::random_bytes(4096, 7);
  ASSERT_TRUE(wire_of(*nets[0]).send({1}, 1, share(std::vector<uint8_t>(seg))).ok());
  Relay mid(wire_of(*nets[1], 30), 0, {2});
  Relay leaf(wire_of(*nets[2], 30), 1, {});
  std::vector<uint8_t> a(2 * seg.size()), b(2 * seg.size(), 0xee);
  ASSERT_TRUE(mid.next_into(1, a.data(), seg.size()).ok());
  ASSERT_TRUE(leaf.next_into(1, b.data(), seg.size()).ok());
  nets[0].reset();
  auto t0 = std::chrono::steady_clock::now();
  Status m = mid.next_into(2, a.data() + seg.size(), seg.size());
  EXPECT_EQ(m.code(), Code::kPeerLost) << m.to_string();
  Status l = leaf.next_into(2, b.data() + seg.size(), seg.size());
  EXPECT_EQ(l.code(), Code::kPeerLost) << l.to_string();
  EXPECT_NE(l.message().find("rank 1 (on the way from the root) lost its parent, rank 0"), std::string::npos) << l.message();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  mid.finish();
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.begin() + long(seg.size())), seg);
  EXPECT_EQ(std::vector<uint8_t>(b.begin() + long(seg.size()), b.end()), std::vector<uint8_t>(seg.size(), 0xee));
}

// Elastic, in place: rank 2's parent (rank 1) goes away after the first segment; rank 2 asks the
// root for the segments from the one it waited for on, and its buffer ends bit-exact.
TEST(Relay, DenseReattachTakesTheRestFromTheRoot) {
  auto nets = test::make_nets("loopback", 3);
  ASSERT_EQ(nets.size(), 3u);
  const auto data = test::random_bytes(3 * 5000, 9);
  auto segment = [&](uint32_t sub) {
    return share(std::vector<uint8_t>(data.begin() + long((sub - 1) * 5000), data.begin() + long(sub * 5000)));
  };
  ASSERT_TRUE(wire_of(*nets[1]).send({2}, 1, segment(1)).ok());
  Relay leaf(wire_of(*nets[2], 30), -1, {});
  attach_elastic(leaf, 1, {}, 0, 10.0, 5.0);
  std::vector<uint8_t> got(data.size());
  ASSERT_TRUE(leaf.next_into(1, got.data(), 5000).ok());
  nets[1].reset();
  std::thread root([&] {  // the root serves the re-attach request
    auto rq = wire_of(*nets[0]).recv(2, kReattachSub);
    ASSERT_TRUE(rq.ok()) << rq.status().to_string();
    auto from = decode_reattach(rq.value());
    ASSERT_TRUE(from.ok());
    EXPECT_EQ(from.value(), 2u);
    for (uint32_t sub = from.value(); sub <= 3; ++sub) ASSERT_TRUE(wire_of(*nets[0]).send({2}, sub, segment(sub)).ok());
  });
  for (uint32_t sub = 2; sub <= 3; ++sub) {
    Status s = leaf.next_into(sub, got.data() + (sub - 1) * 5000, 5000);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  root.join();
  EXPECT_EQ(leaf.parent(), 0);
  EXPECT_EQ(got, data);
}

// Chain 0 -> 1 -> 2 -> 3, elastic: rank 1 goes silent after part 1 and the root is slow to serve
// (deliveries to rank 2 take 1.5 s from then on, a long WAN crossing). Rank 2 re-attaches to the root
// after its 1 s patience; rank 3, whose 2 s patience runs out while rank 2 is still waiting for
// the root, takes rank 2's hold and waits on instead of re-attaching too: the root sends the rest
// of the step once (here at 2.5 s), and rank 3 gets it from rank 2.
TEST(Relay, ChildOfARankThatReattachesHoldsOnInsteadOfReattachingToo) {
  auto nets = test::make_nets("loopback", 4);
  ASSERT_EQ(nets.size(), 4u);
  const auto sent = parts(3);
  ASSERT_TRUE(wire_of(*nets[1]).send({2}, 1, sent[1]).ok());
  Relay mid(wire_of(*nets[2], 30), -1, {});
  attach_elastic(mid, 1, {3}, 0, 3.0, 1.0);
  Relay leaf(wire_of(*nets[3], 30), -1, {});
  attach_elastic(leaf, 2, {}, 0, 3.0, 2.0);
  ASSERT_TRUE(mid.next(1).ok());
  transport::LoopbackFaults wan;
  wan.delay_us = 1500000;
  ASSERT_TRUE(transport::set_loopback_faults(nets[2]->address(), wan));
  std::thread root([&] {  // serves rank 2's re-attach request
    auto rq = wire_of(*nets[0]).recv(2, kReattachSub);
    ASSERT_TRUE(rq.ok()) << rq.status().to_string();
    auto from = decode_reattach(rq.value());
    ASSERT_TRUE(from.ok());
    EXPECT_EQ(from.value(), 2u);
    for (uint32_t sub = from.value(); sub < sent.size(); ++sub) ASSERT_TRUE(wire_of(*nets[0]).send({2}, sub, sent[sub]).ok());
  });
  std::thread mid_rank([&] {
    for (uint32_t sub = 2; sub < sent.size(); ++sub) {
      auto f = mid.next(sub);
      ASSERT_TRUE(f.ok()) << f.status().to_string();
    }
    mid.finish();
  });
  take_all(leaf, sent);
  mid_rank.join();
  root.join();
  EXPECT_EQ(mid.parent(), 0) << "rank 2 re-attached";
  EXPECT_EQ(leaf.parent(), 2) << "rank 3 held on to rank 2";
  EXPECT_FALSE(wire_of(*nets[0]).recv(3, kReattachSub, transport::Clock::now()).ok())
      << "rank 3 asked the root for the rest too";
}

// The root of the adoption tests: part 1 to rank 1 at once, parts 2.. once opened (when the orphan
// has part 1), so that rank 1 is still receiving when the orphan asks it.
class GatedRoot {
 public:
  GatedRoot(transport::Net& net, const std::vector<Frame>& sent)
      : t_([this, &net, &sent] {
          ASSERT_TRUE(wire_of(net).send({1}, 1, sent[1]).ok());
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait_for(lk, std::chrono::seconds(20), [&] { return open_; });
          for (uint32_t sub = 2; sub < sent.size(); ++sub) ASSERT_TRUE(wire_of(net).send({1}, sub, sent[sub]).ok());
        }) {}
  ~GatedRoot() { join(); }
  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void join() {
    if (t_.joinable()) t_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::thread t_;
};

// Chain 0 -> 1 -> 2 -> 3, elastic, sparse parts; rank 2 (rank 3's parent) is silent. Rank 3 asks
// rank 1 (its adopter: the same region, above rank 2) before the root: rank 1, still receiving the
// operation, takes it on, sends it the part it already has and forwards every later one to it. The
// root sends parts 2.. only once rank 3 has part 1, so that rank 1 is still receiving when asked.
TEST(Relay, OrphanIsAdoptedByTheRankAboveItsParentInsteadOfReattachingToTheRoot) {
  auto nets = test::make_nets("loopback", 4);
  ASSERT_EQ(nets.size(), 4u);
  const auto sent = parts(5);
  Relay mid(wire_of(*nets[1], 30), -1, {});
  attach_elastic(mid, 0, {2}, 0, 3.0, 1.0, -1, {3});
  Relay leaf(wire_of(*nets[3], 30), -1, {});
  attach_elastic(leaf, 2, {}, 0, 3.0, 0.6, 1, {});
  GatedRoot root(*nets[0], sent);
  std::thread mid_rank([&] {
    mid.preconnect(transport::deadline_in(10));  // (to rank 3 as well: the lower rank connects)
    for (uint32_t sub = 1; sub < sent.size(); ++sub) {
      auto f = mid.next(sub);
      ASSERT_TRUE(f.ok()) << f.status().to_string();
    }
    mid.finish();
  });
  take_all(leaf, sent, [&] { root.open(); });
  mid_rank.join();
  root.join();
  EXPECT_EQ(leaf.parent(), 1) << "rank 3 was adopted by rank 1";
  EXPECT_FALSE(wire_of(*nets[0]).recv(3, kReattachSub, transport::Clock::now()).ok()) << "rank 3 asked the root";
}

// The same for a dense broadcast's segments, received into caller memory: rank 1's receive blocks
// in place, so a thread of its own serves the adoption, from the segments where they landed.
TEST(Relay, OrphanOfADenseBroadcastIsAdoptedByTheRankAboveItsParent) {
  auto nets = test::make_nets("loopback", 4);
  ASSERT_EQ(nets.size(), 4u);
  const size_t seg = 1000;
  std::vector<Frame> sent(5);
  std::vector<uint8_t> whole;
  for (uint32_t sub = 1; sub < sent.size(); ++sub) {
    sent[sub] = share(test::random_bytes(seg, sub));
    whole.insert(whole.end(), sent[sub]->begin(), sent[sub]->end());
  }
  Relay mid(wire_of(*nets[1], 30), -1, {});
  attach_elastic(mid, 0, {2}, 0, 3.0, 1.0, -1, {3});
  Relay leaf(wire_of(*nets[3], 30), -1, {});
  attach_elastic(leaf, 2, {}, 0, 3.0, 0.6, 1, {});
  GatedRoot root(*nets[0], sent);
  std::vector<uint8_t> at_mid(whole.size()), at_leaf(whole.size());
  std::thread mid_rank([&] {
    mid.preconnect(transport::deadline_in(10));
    for (uint32_t sub = 1; sub < sent.size(); ++sub) {
      Status st = mid.next_into(sub, at_mid.data() + (sub - 1) * seg, seg);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    mid.finish();
  });
  for (uint32_t sub = 1; sub < sent.size(); ++sub) {
    Status st = leaf.next_into(sub, at_leaf.data() + (sub - 1) * seg, seg);
    EXPECT_TRUE(st.ok()) << "segment " << sub << ": " << st.to_string();
    if (sub == 1) root.open();
  }
  leaf.finish();
  mid_rank.join();
  root.join();
  EXPECT_EQ(at_leaf, whole);
  EXPECT_EQ(at_mid, whole);
  EXPECT_EQ(leaf.parent(), 1) << "rank 3 was adopted by rank 1";
  EXPECT_FALSE(wire_of(*nets[0]).recv(3, kReattachSub, transport::Clock::now()).ok()) << "rank 3 asked the root";
}

// The same when the adopter does not answer (it has finished its part of the operation, or is
// stalled too): the orphan re-attaches to the root after a short wait.
TEST(Relay, OrphanWhoseAdopterDoesNotAnswerReattachesToTheRoot) {
  auto nets = test::make_nets("loopback", 4);
  ASSERT_EQ(nets.size(), 4u);
  const auto sent = parts(4);
  ASSERT_TRUE(nets[1]->connect(3, transport::deadline_in(10)).ok());  // as rank 1's preconnect did
  ASSERT_TRUE(nets[0]->connect(3, transport::deadline_in(10)).ok());
  Relay leaf(wire_of(*nets[3], 30), -1, {});
  attach_elastic(leaf, 2, {}, 0, 3.0, 0.6, 1, {});
  std::thread root([&] {  // serves rank 3's re-attach request
    auto rq = wire_of(*nets[0]).recv(3, kReattachSub);
    ASSERT_TRUE(rq.ok()) << rq.status().to_string();
    auto from = decode_reattach(rq.value());
    ASSERT_TRUE(from.ok());
    for (uint32_t sub = from.value(); sub < sent.size(); ++sub) ASSERT_TRUE(wire_of(*nets[0]).send({3}, sub, sent[sub]).ok());
  });
  take_all(leaf, sent);
  root.join();
  EXPECT_EQ(leaf.parent(), 0);
  EXPECT_TRUE(wire_of(*nets[1]).recv(3, kAdoptSub, transport::Clock::now()).ok()) << "rank 1 was asked first";
}

// A rank that may adopt orphans waits for its parent while it serves their requests; its parent
// here is a higher rank it has no connection to yet (real TCP): this rank must still connect to it,
// as any receiver does, and get every part.
TEST(Relay, RankThatMayAdoptConnectsToAHigherParentItHasNoConnectionTo) {
  auto nets = test::make_nets("tcp", 4);
  ASSERT_EQ(nets.size(), 4u);
  const auto sent = parts(3);
  Relay mid(wire_of(*nets[1], 10), -1, {});
  attach_elastic(mid, 3, {}, 0, 3.0, 1.0, -1, {2});
  std::thread parent([&] {
    for (uint32_t sub = 1; sub < sent.size(); ++sub) ASSERT_TRUE(wire_of(*nets[3]).send({1}, sub, sent[sub]).ok());
  });
  take_all(mid, sent);
  parent.join();
}

TEST(Relay, AbortFramesAreNeverDataAndCarryTheirStatus) {
  auto f = abort_frame(Status(Code::kTimeout, "parent silent"));
  EXPECT_TRUE(is_abort(f));
  EXPECT_FALSE(is_footer(f));
  EXPECT_FALSE(OpHeader::decode(f).ok());
  Status s = abort_status(f);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.message(), "parent silent");
  EXPECT_EQ(abort_status(abort_frame(Status::Ok())).code(), Code::kCorruptData);
  f.resize(6);
  EXPECT_EQ(abort_status(f).code(), Code::kCorruptData);
}

}  // namespace
}  // namespace sparrow::coll
