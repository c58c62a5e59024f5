// SPDX-License-Identifier: Apache-2.0
// Where an elastic receiver turns when its parent fails: how long it waits (its patience grows with its
// depth), which rank of its region adopts it, and the failover a relay calls (collectives/failover.h):
// holds passed down, the adopter asked first, then the root (collectives/elastic/elastic.h).
#include <algorithm>
#include <chrono>

#include "collectives/elastic/elastic.h"
#include "core/log.h"

namespace sparrow::coll {

namespace {

// An elastic relay's failover: the root is awaited at most the lease per part, another parent this
// rank's patience (half a lease more for the first payload part, which waits for the pipeline to
// fill along every hop above); a parent that sent a hold is waited for again; a failed parent is
// replaced by the adopter (asked once, answering within adopt_wait_s()), else by the root (once).
class ElasticFailover final : public Failover {
 public:
  ElasticFailover(const OpWire& w, int root, double lease_s, double patience_s, int adopter)
      : w_(w), root_(root), lease_s_(lease_s), patience_s_(patience_s), adopter_(adopter) {}

  transport::Deadline part_deadline(const Upstream& up) const override {
    const double patience = up.got_part ? patience_s_ : patience_s_ + lease_s_ / 2;
    return std::min(w_.deadline, transport::deadline_in(up.parent == root_ ? lease_s_ : patience));
  }

  bool held(const Upstream& up, const Status& why) override {
    if (why.code() != Code::kTimeout || !take_hold(up.parent)) return false;
    const double wait_s = std::chrono::duration<double>(part_deadline(up) - transport::Clock::now()).count();
    SPARROW_INFO("rank %d: parent rank %d is re-attaching in operation %llu (it sent a hold); waiting for it up to "
                 "%.1f s more", w_.net.rank(), up.parent, (unsigned long long)w_.seq, wait_s);
    hold(up.children);
    return true;
  }

  void part_came(const Upstream& up) override {
    while (take_hold(up.parent)) {  // the holds that came before it are spent
    }
  }

  int replace(const Upstream& up, uint32_t sub, const Status& why) override {
    const int a = adopter_;
    adopter_ = -1;  // asked once
    if (a >= 0 && up.parent != root_ && up.parent != a && !reattached_ && ask_adopter(up, a, sub, why)) {
      holds_taken_ = 0;  // (the new parent's holds count from 0)
      return a;
    }
    return reattach(up, sub, why) ? root_ : -1;
  }

  double brief_s() const override { return adopt_wait_s(); }

 private:
  double adopt_wait_s() const { return std::min(0.5, patience_s_ / 2); }

  // Asks `a` (of this rank's region, above the failed parent) to adopt this rank from part `sub`.
  bool ask_adopter(const Upstream& up, int a, uint32_t sub, const Status& why) {
    hold(up.children);  // (before the wait: the children's patience is shorter than the asking)
    const auto by = transport::deadline_in(adopt_wait_s());
    const Frame rq = share(reattach_request(sub));
    auto asked = w_.net.send(a, w_.key(kAdoptSub), transport::Payload{rq->data(), rq->size(), rq}, by);
    if (!asked.ok()) {
      SPARROW_INFO("rank %d: could not ask rank %d, of its region, to adopt it in operation %llu (%s); asking the root",
                   w_.net.rank(), a, (unsigned long long)w_.seq, asked.status().message().c_str());
      return false;
    }
    if (!w_.recv(a, kAdoptSub, by).ok()) {
      SPARROW_INFO("rank %d: rank %d, of its region, did not adopt it in operation %llu within %.0f ms (it has "
                   "finished its part, or is stalled too); asking the root", w_.net.rank(), a,
                   (unsigned long long)w_.seq, adopt_wait_s() * 1e3);
      return false;
    }
    SPARROW_INFO("rank %d: parent rank %d failed in operation %llu while part %u was awaited (%s); rank %d, of its "
                 "region, adopted it", w_.net.rank(), up.parent, (unsigned long long)w_.seq, sub,
                 why.message().c_str(), a);
    return true;
  }

  // Asks the root for the rest of the operation from part `sub` (once), and tells the children to
  // hold on.
  bool reattach(const Upstream& up, uint32_t sub, const Status& why) {
    if (up.parent == root_ || reattached_) return false;
    SPARROW_INFO("rank %d: parent rank %d failed in operation %llu while part %u was awaited (%s); re-attaching to "
                 "the root, rank %d", w_.net.rank(), up.parent, (unsigned long long)w_.seq, sub,
                 why.message().c_str(), root_);
    if (!w_.send({root_}, kReattachSub, share(reattach_request(sub))).ok()) return false;
    reattached_ = true;
    hold(up.children);
    return true;
  }

  // The parent's next hold, if it came (no waiting): it is re-attaching, or passes one down.
  bool take_hold(int parent) {
    if (parent == root_ || holds_taken_ >= kMaxHolds) return false;
    if (!w_.recv(parent, kHoldSub + holds_taken_, transport::Clock::now()).ok()) return false;
    holds_taken_++;
    return true;
  }

  // The next hold to every live child.
  void hold(Fanout& children) {
    if (children.children().empty() || holds_sent_ >= kMaxHolds) return;
    children.send(kHoldSub + holds_sent_++, share(std::vector<uint8_t>{1}));
  }

  OpWire w_;
  int root_;
  double lease_s_, patience_s_;
  int adopter_;  // -1: none, or asked already
  bool reattached_ = false;
  uint32_t holds_taken_ = 0, holds_sent_ = 0;  // kHoldSub + k: from the parent, to the children
};

}  // namespace

double reattach_patience(const topology::Tree& t, int me, double lease_s) {
  auto depth = [&](int r) {
    int d = 0;
    for (; r >= 0 && t.parent[size_t(r)] >= 0 && d <= int(t.parent.size()); r = t.parent[size_t(r)]) ++d;
    return d;
  };
  int deepest = 1;
  for (size_t r = 0; r < t.parent.size(); ++r) deepest = std::max(deepest, depth(int(r)));
  return lease_s / 2 * double(depth(me)) / double(deepest);
}

int adopter_for(const topology::Tree& t, int me) {
  const auto n = int(t.parent.size());
  if (me < 0 || me >= n || t.parent[size_t(me)] < 0 || t.region.size() != t.parent.size()) return -1;
  int hops = 0;
  for (int a = t.parent[size_t(t.parent[size_t(me)])]; a >= 0 && a != t.root && hops <= n; a = t.parent[size_t(a)], ++hops)
    if (t.region[size_t(a)] == t.region[size_t(me)]) return a;
  return -1;
}

std::vector<int> adoptable_by(const topology::Tree& t, int me) {
  std::vector<int> v;
  for (int r = 0; r < int(t.parent.size()); ++r)
    if (r != me && adopter_for(t, r) == me) v.push_back(r);
  return v;
}

namespace elastic {
std::unique_ptr<Failover> failover(const OpWire& w, int root, double lease_s, double patience_s, int adopter) {
  return std::make_unique<ElasticFailover>(w, root, lease_s, patience_s, adopter);
}
}  // namespace elastic

}  // namespace sparrow::coll
