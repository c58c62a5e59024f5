// SPDX-License-Identifier: Apache-2.0
// An elastic communicator's membership. The root: the operation's members are the live ranks (joiners
// admitted at its start); the header, with the members, goes from the root to every member; the
// stream's parts are kept for a rank that re-attaches mid-stream; a joiner declares what its buffers
// hold and may catch up from a retained version; a rank due a full snapshot outside the root's region
// gets it from a member of its own; a member that cannot take its resync is dropped; the operation
// ends once every member acknowledged or was dropped (collectives/elastic/elastic.h).
#include <algorithm>
#include <optional>

#include "collectives/elastic/elastic.h"
#include "collectives/membership.h"
#include "core/log.h"
#include "core/params.h"

namespace sparrow::coll::elastic {
namespace {

params::BoolParam kSeed("SEED_FROM_REGION", true,
                        "Elastic communicators: a rank that needs a full snapshot (a joiner) gets it from a member of "
                        "its own region that holds the version, instead of from the root (0: always from the root).");

// Who sends `r` its full snapshot instead of the root: a member of r's region (as the tree sees
// regions) that gets no resync itself and so holds the version, r's parent when it is one; -1: none.
int pick_seeder(const topology::Tree& t, const std::vector<int>& members, const std::map<int, uint64_t>& resync, int r) {
  const std::string& region = t.region[size_t(r)];
  if (region.empty() || region == t.region[size_t(t.root)]) return -1;  // the root's region: the root is as near
  auto fits = [&](int p) {
    return p != r && p != t.root && !resync.count(p) && t.region[size_t(p)] == region &&
           std::binary_search(members.begin(), members.end(), p);
  };
  if (t.parent[size_t(r)] >= 0 && fits(t.parent[size_t(r)])) return t.parent[size_t(r)];
  for (int p : members)
    if (fits(p)) return p;
  return -1;
}

class ElasticRoot final : public RootMembership {
 public:
  ElasticRoot(Engine& e, const SparseOp& op) : e_(e), op_(op) {}
  // However the root's call ends: the store learns the slots free now (the members it dropped), for
  // joiners that do not name one.
  ~ElasticRoot() override {
    if (op_.participants.empty()) publish_free_slots(e_);
  }

  Status open(const OpWire&) override { return Status::Ok(); }  // the last operation collected its own

  // The members, and the ranks due a full snapshot that a member of their region seeds instead: they
  // stay listed in the header as resynced, and leave `resync` (the seeder sends theirs).
  void stamp(OpHeader& h, bool full, std::map<int, uint64_t>& resync) override {
    stamp_elastic(e_, h, listed());
    if (!op_.participants.empty()) h.flags |= kOpSubset;
    if (full || !kSeed.get()) return;
    for (auto it = resync.begin(); it != resync.end();) {
      const int from = it->second == 0 ? pick_seeder(op_.tree, op_.members, resync, it->first) : -1;
      if (from < 0) {
        ++it;
        continue;
      }
      SPARROW_INFO("operation %llu: rank %d gets its full snapshot from rank %d (region %s), not from the root",
                   (unsigned long long)op_.seq, it->first, from, op_.tree.region[size_t(it->first)].c_str());
      h.seeds.push_back({int32_t(it->first), int32_t(from)});
      ++it;
    }
    for (auto [r, from] : h.seeds) resync.erase(r);
  }

  void send_header(const OpWire& w, Fanout& out, const Frame& header) override {
    send_header_to_all(e_, w, header, op_.participants.empty() ? nullptr : &op_.participants);
    out.preconnect(transport::deadline_in(e_.comm.lease_s()));
  }

  Parts* parts() override { return &parts_; }

  // The joiners of this operation that get their resync from the root tell it the digests of the
  // buffers they hold (sent once they had the header, so normally here by now; each waited for at
  // most half the lease); one whose buffers hold a retained version catches up from it (a restarted
  // worker that kept its weights) instead of taking a full snapshot.
  Status owed(const OpWire& w, RootState& rs, bool full, std::map<int, uint64_t>& resync) override {
    if (full) return Status::Ok();
    const auto until = std::min(w.deadline, transport::deadline_in(e_.comm.lease_s() / 2));
    for (int r : op_.joined) {
      auto it = resync.find(r);
      if (it == resync.end() || it->second != 0) continue;
      auto m = w.recv(r, kHoldingsSub, until);
      auto d = m.ok() ? decode_holds(m.value()) : Result<std::vector<uint64_t>>(m.status());
      if (!d.ok()) {
        SPARROW_INFO("operation %llu: no digests from joiner rank %d (%s): a full snapshot", (unsigned long long)op_.seq,
                     r, d.status().message().c_str());
        continue;
      }
      it->second = d->empty() ? 0 : rs.retained.version_with(d.value());
      if (it->second)
        SPARROW_INFO("operation %llu: joiner rank %d holds retained version %llu", (unsigned long long)op_.seq, r,
                     (unsigned long long)it->second);
    }
    return Status::Ok();
  }

  // A member that cannot take its resync is dropped, like one that cannot take the header.
  bool drop(int rank, const std::string& why) override {
    if (!e_.members.is_live(rank)) return false;
    drop_member(e_, rank, op_.seq, why);
    return true;
  }

  // Every member's acknowledgement or its drop; on the first operation on a buffer set, the verdict.
  Status finish(const OpWire& w, RootState& rs, bool full, OpState& state) override {
    Status end = finish_elastic(e_, w, op_.key, op_.members, parts_, full, nullptr);
    if (full && !verdict_for_others(end).ok()) rs.enc->reset();  // arguments differ: a full snapshot again
    if (full) state.advance(Phase::kVerdict);
    return end;
  }

 private:
  // The members the header lists: an operation among some ranks lists the communicator's (its own
  // members, and the live ranks outside it), and its receivers keep those among its participants.
  std::vector<int> listed() const {
    if (op_.participants.empty()) return op_.members;
    std::vector<int> v = op_.members;
    for (int r : e_.members.live())
      if (!std::binary_search(op_.participants.begin(), op_.participants.end(), r)) v.push_back(r);
    std::sort(v.begin(), v.end());
    return v;
  }

  Engine& e_;
  const SparseOp& op_;
  Parts parts_;
};

// An elastic receiver: its header comes from the root and names the members, so the tree (and the
// rank's parent) is known only then; until it acknowledges, its heartbeats renew its lease; after a
// successful step its relay goes on serving adoptions while ranks of its region below may still ask.
class ElasticReceiver final : public ReceiverMembership {
 public:
  explicit ElasticReceiver(Engine& e) : e_(e) {}
  std::unique_ptr<Relay> relay(const SparseOp& op) override {
    return std::make_unique<Relay>(e_.wire(op.seq), -1, std::vector<int>{});
  }
  void started(const OpWire& w, int root) override { alive_ = heartbeats_for(e_, w, root); }
  void acknowledging() override { alive_.reset(); }  // the root stops listening for heartbeats then

  Result<ReceivedHeader> header(Relay& relay, SparseOp& op, int root, bool* dropped) override {
    SPARROW_ASSIGN_OR_RETURN(ReceivedHeader got, elastic_header(e_, relay.wire(), root, dropped));
    op.members.assign(got.h.members.begin(), got.h.members.end());
    if (got.h.flags & kOpSubset)  // (the header lists the communicator's members)
      std::erase_if(op.members, [&](int r) { return !std::binary_search(op.participants.begin(), op.participants.end(), r); });
    SPARROW_ASSIGN_OR_RETURN(op.tree, e_.tree(root, double(op.dense) / 100, &op.members));
    attach(e_, relay, op.tree, root);
    return got;
  }

  bool lingers(Relay& relay) const override { return relay.may_adopt(); }
  void linger(std::unique_ptr<Relay> relay) override { e_.elastic.lingering = std::move(relay); }
  bool declares_holdings(const SparseOp& op) const override { return e_.elastic.joined_at == op.seq; }

 private:
  Engine& e_;
  std::unique_ptr<Heartbeat> alive_;
};

}  // namespace

void attach(Engine& e, Relay& relay, const topology::Tree& t, int root) {
  const int me = e.rank();
  const double lease = e.comm.lease_s();
  relay.attach(t.parent[me], t.children[me],
               failover(relay.wire(), root, lease, reattach_patience(t, me, lease), adopter_for(t, me)),
               adoptable_by(t, me));
  relay.preconnect(transport::deadline_in(lease));
}

Status plan_members(Engine& e, SparseOp& op, int root, const std::vector<int>* participants) {
  if (participants) op.participants = *participants;
  if (e.rank() != root) return Status::Ok();  // (from the header)
  if (e.elastic.admitted_seq == op.seq) {  // (admitted ahead of it: admit_ahead)
    for (int r : e.elastic.admitted)
      if (!participants || std::binary_search(participants->begin(), participants->end(), r)) op.joined.push_back(r);
  } else if (!participants) {
    op.joined = admit_joiners(e, op.seq);
  }
  op.members = e.members.live();
  if (participants)
    std::erase_if(op.members, [&](int r) { return !std::binary_search(participants->begin(), participants->end(), r); });
  // The tree is chosen for the expected wire size (~1% of the dense bytes), not the dense size.
  SPARROW_ASSIGN_OR_RETURN(op.tree, e.tree(root, double(op.dense) / 100, &op.members));
  return Status::Ok();
}

std::unique_ptr<RootMembership> root_membership(Engine& e, const SparseOp& op) {
  return std::make_unique<ElasticRoot>(e, op);
}

std::unique_ptr<ReceiverMembership> receiver_membership(Engine& e) { return std::make_unique<ElasticReceiver>(e); }

}  // namespace sparrow::coll::elastic
