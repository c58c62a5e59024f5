// SPDX-License-Identifier: Apache-2.0
// A fixed communicator's membership: the header goes down the tree; the acknowledgements of an
// operation are drained a window of operations later (AckWindow), except on a buffer set's first,
// full operation, whose arguments every rank must agree on: everyone's, then the verdict.
#include "collectives/membership.h"

#include <algorithm>

namespace sparrow::coll {
namespace {

class FixedRoot final : public RootMembership {
 public:
  FixedRoot(Engine& e, const SparseOp& op) : e_(e), op_(op) {}

  Status open(const OpWire& w) override { return e_.acks.drain(w, e_.rank(), AckWindow::kDefaultWindow); }
  void stamp(OpHeader&, bool, std::map<int, uint64_t>&) override {}
  void send_header(const OpWire&, Fanout& out, const Frame& header) override { out.send(0, header); }
  Parts* parts() override { return nullptr; }

  // Every acknowledgement of the earlier operations on these buffers (others' are taken as they come),
  // now that this one's data is on its way (they were sent when those calls returned, so this rarely
  // waits): a rank that refused one of them expects its resync in this operation, the very next one.
  Status owed(const OpWire& w, RootState& rs, bool full, std::map<int, uint64_t>& resync) override {
    if (full) return Status::Ok();
    Status late = e_.acks.drain_for(w, e_.rank(), op_.key);
    for (auto [r, holds] : rs.need_resync) resync[r] = holds;
    return late;
  }

  bool drop(int, const std::string&) override { return false; }

  Status finish(const OpWire& w, RootState& rs, bool full, OpState& state) override {
    const std::vector<int> others = receivers();
    e_.acks.post(op_.seq, op_.key, others);
    if (!full) return Status::Ok();
    // First operation on these buffers: wait for everyone, so a mismatched call fails everywhere.
    Status agree = e_.acks.drain(w, e_.rank(), 0);
    const Status verdict = verdict_for_others(agree);
    if (!verdict.ok()) rs.enc->reset();  // arguments differ: the next call is a full snapshot again
    state.advance(Phase::kVerdict);
    SPARROW_RETURN_IF_ERROR(send_verdict(w, others, verdict));
    return agree;
  }

 private:
  // The ranks that receive the operation: every other rank, or its participants.
  std::vector<int> receivers() const {
    std::vector<int> v = other_ranks(e_);
    if (!op_.participants.empty())
      std::erase_if(v, [&](int r) { return !std::binary_search(op_.participants.begin(), op_.participants.end(), r); });
    return v;
  }

  Engine& e_;
  const SparseOp& op_;
};

// A fixed communicator's receiver: the header comes down the tree like the rest.
class FixedReceiver final : public ReceiverMembership {
 public:
  explicit FixedReceiver(Engine& e) : e_(e) {}
  std::unique_ptr<Relay> relay(const SparseOp& op) override {
    return std::make_unique<Relay>(e_.wire(op.seq), op.tree.parent[e_.rank()], op.tree.children[e_.rank()]);
  }
  void started(const OpWire&, int) override {}
  void acknowledging() override {}
  Result<ReceivedHeader> header(Relay& relay, SparseOp&, int root, bool*) override {
    SPARROW_ASSIGN_OR_RETURN(Frame f, relay.header(root));
    SPARROW_ASSIGN_OR_RETURN(OpHeader h, OpHeader::decode(*f));
    return ReceivedHeader{std::move(f), std::move(h)};
  }
  bool lingers(Relay&) const override { return false; }
  void linger(std::unique_ptr<Relay> relay) override { relay->finish(); }
  bool declares_holdings(const SparseOp&) const override { return false; }

 private:
  Engine& e_;
};

}  // namespace

Status plan_members(Engine& e, SparseOp& op, int root, const std::vector<int>* participants) {
  if (e.comm.elastic()) return elastic::plan_members(e, op, root, participants);
  if (participants) op.participants = *participants;
  // The tree is chosen for the expected wire size (~1% of the dense bytes), not the dense size.
  SPARROW_ASSIGN_OR_RETURN(op.tree, e.tree(root, double(op.dense) / 100, participants));
  return Status::Ok();
}

std::unique_ptr<RootMembership> root_membership(Engine& e, const SparseOp& op) {
  if (e.comm.elastic()) return elastic::root_membership(e, op);
  return std::make_unique<FixedRoot>(e, op);
}

std::unique_ptr<ReceiverMembership> receiver_membership(Engine& e) {
  if (e.comm.elastic()) return elastic::receiver_membership(e);
  return std::make_unique<FixedReceiver>(e);
}

}  // namespace sparrow::coll
