// One sparse operation on a receiver (a relay too), as an explicit phase machine (collectives/op.h):
//   header  the op header from the parent, forwarded, checked against this rank's arguments
//   stream  every frame from the parent, forwarded at once (Relay) and handed to the communicator's
//           decode worker, which verifies and decodes it; until the footer
//   accept  the acceptance check (base verified, digests, every chunk), or the resync received from
//           the root and checked in its place (a snapshot, or the missed deltas composed with this
//           step's own: written once, from the old version to the new)
//   ack     the acknowledgement to the root: status, resync wanted, the version held
//   verdict (a full operation only) the root's agreed result
//   flush   everything forwarded handed to the transport
// Nothing is written to the user's buffers until commit(), which writes (time proportional to the
// changes) and records the stats: a blocking call runs both at once; a staged call
// (sparrowSparseBcastStage) runs receive() on a background thread and commit() at
// sparrowStageCommit. Until commit() the targets are only read.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/membership.h"
#include "collectives/op.h"
#include "collectives/relay.h"
#include "collectives/sparse/sparse_op.h"
#include "collectives/state.h"

namespace sparrow::coll {

class SparseSink {
 public:
  SparseSink(Engine& e, std::vector<BufferArg> bufs, int root, const SparseOp& op);
  // Header through flush; on a failure before its acknowledgement, acknowledges it as failed
  // (asking for a resync at the next operation) on the way out.
  Status receive();
  // Writes what receive() accepted (`received` is its result) and records the operation's stats.
  Status commit(Status received);
  // Hands the relay to the engine when it may still adopt orphans (on_flush), else lets it go.
  ~SparseSink();
  SparseSink(const SparseSink&) = delete;
  SparseSink& operator=(const SparseSink&) = delete;

  // Progress, readable from another thread while receive() runs.
  uint64_t bytes_received() const { return relay_->bytes() + resync_bytes_.load(); }
  size_t staged_bytes() const { return sess_ ? sess_->staged_bytes() : 0; }
  Phase phase() const { return state_.phase(); }

 private:
  // One phase; returns the next. A transport failure that ends the operation at once (the header
  // or the acknowledgement could not travel) sets fatal_ and returns kDone.
  Phase step();
  Phase on_header();
  void forget_earlier_ops();
  Phase on_stream();
  Phase on_accept();
  Phase on_ack();
  Phase on_verdict();
  Phase on_flush();
  Status accept_resync();
  void declare_holdings();
  Status adopt_declared(const Frame& chain);
  Status catch_up(const Frame& chain);
  void send_seeds();
  void record_stats(const kernels::cpu::ApplyStats& as, const Status& result);

  Engine& e_;
  std::vector<BufferArg> bufs_;
  int root_;
  SparseOp op_;  // an elastic receiver fills in the members and the tree from the header
  std::unique_ptr<ReceiverMembership> members_;
  std::unique_ptr<Relay> relay_;  // (handed to the membership by the destructor when it lingers)
  OpState state_;
  double t0_;
  RecvState* rv_ = nullptr;
  std::vector<void*> dst_;
  kernels::cpu::ApplyOptions aopt_;
  std::optional<kernels::cpu::ApplySession> sess_;
  Frame footer_;
  std::vector<Frame> held_;  // this step's frames, when a catch-up composes them after the missed deltas
  std::atomic<uint64_t> resync_bytes_{0};
  uint64_t catchup_bytes_ = 0;
  Status result_, fatal_;
  // What the header made of this operation for this rank.
  enum class Standing : uint8_t {
    kMember,   // it takes part (or the header has not come yet)
    kDropped,  // elastic: it is not a member any more, and sends no acknowledgement
    // The header never came because ranks disagree on the root (root_watch.h): whether the root this
    // rank named sent the operation at all is unknown, so this rank does not wait for a resync at the
    // next one unless that operation's header lists it (a root that did send lists every rank it did
    // not hear from, or that asked).
    kNoRoot,
  };
  Standing standing_ = Standing::kMember;
  // What this rank receives, decided at the header: a verdict follows (`full`), and a resync (a
  // snapshot, or the missed deltas) replaces this step's delta (`resync`).
  struct Intake {
    bool full = false, resync = false;
  } in_;
  bool need_resync_ = false;  // the acknowledgement asks for a resync at the next operation
  bool committed_ = false;    // commit() wrote this step
  bool lingers_ = false;      // on_flush: the relay goes on serving adoptions after the call returns
  // on_ack moves on only once the acknowledgement went.
  bool acked() const { return state_.reached(Phase::kVerdict) || state_.reached(Phase::kFlush); }
  int seeder_ = -1;            // elastic: the member of this rank's region that sends its snapshot
  std::vector<int> seed_to_;   // elastic: the ranks this one sends its snapshot once it committed
  std::vector<uint64_t> declared_;  // a joiner: the digests of its buffers it told the root
};

}  // namespace sparrow::coll
