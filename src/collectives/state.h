// The collectives' state on one communicator (coll::Engine): per buffer set what the root encodes
// from and what a receiver holds, the acknowledgements the root still expects, the staged step,
// the decode worker and the last operation's stats. The communicator itself (comm/comm.h) knows
// nothing of it. Used by one thread at a time, like the communicator (progress and stats readers
// from other threads use the atomics only).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <deque>
#include <string>
#include <vector>

#include "collectives/ack_window.h"
#include "collectives/decoder.h"
#include "collectives/elastic/members.h"
#include "collectives/protocol.h"
#include "collectives/retain.h"
#include "comm/comm.h"
#include "core/clock.h"
#include "core/big_alloc.h"
#include "kernels/cpu/delta.h"
#include "topology/tree.h"

namespace sparrow::coll {

struct StagedOp;  // a sparse operation a receiver is staging in the background (sparse/stage.cpp)
class Relay;      // collectives/relay.h
class Heartbeat;  // collectives/elastic/elastic.h

struct RootState {
  std::vector<kernels::cpu::TensorSpec> layout;
  std::unique_ptr<kernels::cpu::DeltaEncoder> enc;
  // Ranks that get a resync at the next operation, with the version each holds (0: unknown or
  // written to: a full snapshot; else the retained deltas from it, when smaller).
  std::map<int, uint64_t> need_resync;
  RetainedSteps retained;
};

struct RecvState {
  std::vector<kernels::cpu::TensorSpec> layout;
  kernels::cpu::ReceiverState st;
  // The last operation was refused or failed here, and the root was asked for a resync: the next
  // operation brings one (a snapshot, or the deltas this rank missed), and this rank expects it.
  bool stale = false;
};

struct Stats {
  uint64_t ops = 0, resyncs = 0;
  uint64_t catchups = 0, catchup_bytes = 0;  // resyncs by retained deltas instead of a snapshot
  uint64_t dense_bytes = 0, wire_bytes = 0, changed = 0, elements = 0;
  double density = 0, encode_s = 0, apply_s = 0, total_s = 0;
  bool full = false;
  // Stage by stage (seconds; -1 where a stage is not this rank's): the root's extraction (its worker
  // threads' seconds in it, summed: wall time per thread); a receiver's first and last byte from its parent (since
  // its call began), base verification, decoding, and the commit (the writes).
  double extract_s = -1, first_byte_s = -1, last_byte_s = -1, verify_s = -1, decode_s = -1, commit_s = -1;
  std::vector<transport::Net::PeerTraffic> peers;  // [rank]: this operation's traffic, at its end
  int parent = -1;            // this rank's parent in the operation's tree (-1: the root)
  std::vector<int> children;  // and its children
  // The root's codec choice: the link rate the value codecs were chosen for (bytes/s; 0: by bytes
  // alone; -1: not the root) and how many chunks took each index and value codec.
  double codec_link_Bps = -1;
  uint64_t index_codecs[format::kNumIndexCodecs] = {}, value_codecs[format::kNumValueCodecs] = {};
  bool is_root() const { return parent < 0; }
};
// A step of several operations (a staged group, a model's split step) as one: `sum` starts empty;
// bytes, changes and the encoding and applying seconds add up, the peers' traffic too, `full` if any
// was; total_s is the longest (a caller that runs them one after the other sets it); the stages and
// tree are the last operation's.
void add_op_stats(Stats& sum, const Stats& op);

// What an elastic communicator keeps from one operation to the next besides its members
// (collectives/elastic/elastic.h); a fixed one leaves it empty.
struct ElasticRecord {
  std::map<int, Place> moved;  // the root's record of ranks that rejoined (every header lists them)
  uint64_t joined_at = 0;      // a joiner: its first operation (sparrowCommJoin), 0 otherwise
  // The root: joiners admitted ahead of operation `admitted_seq` by its caller (admit_ahead, a
  // model's step, which sends them what they need first); that operation admits no others.
  uint64_t admitted_seq = 0;
  std::vector<int> admitted;
  // Dense broadcasts: the host staging of a receiver, per buffer of the group, kept from one call to
  // the next (its pages are faulted in once) and freed by the next sparse operation.
  std::vector<std::vector<uint8_t, BigAlloc<uint8_t>>> dense_staging;
  // Sparse broadcasts: the relay of this rank's last operation, when ranks of its region below
  // it may still ask it to adopt them (their parent failed) after this rank's call returned: it serves
  // them from the frames it kept, on its own thread, until the next operation's header came (the
  // root starts it only once every member acknowledged the last or was dropped), a dense call, the
  // operation's deadline, or the communicator's end (end_lingering()).
  std::unique_ptr<Relay> lingering;
  // A receiver's heartbeats to the roots of operations it has not reached yet (a model's split step:
  // several sources stream their operations at once, and a receiver takes them one after the other),
  // by operation; each operation takes its own over when it starts (elastic/elastic.h, beat_ahead).
  std::mutex beats_mu;
  std::map<uint64_t, std::unique_ptr<Heartbeat>> beats_ahead;
};

class Engine {
 public:
  explicit Engine(Comm& c);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Comm& comm;
  std::map<BufferKey, RootState> roots;
  std::map<BufferKey, RecvState> recvs;
  AckWindow acks;
  Members members;  // elastic communicators: who is still in (all ranks otherwise)
  DecodeWorker decoder;
  // The staged step (sparrowSparseBcastStage) until sparrowStageCommit; at most one at a time.
  // (Declared after the decoder: destroyed first, since its receive uses it.)
  std::shared_ptr<StagedOp> staged;
  Stats stats;
  ElasticRecord elastic;  // (elastic communicators only)
  std::atomic<int> in_call{0};  // a collective is running (sparrowCommGetProgress, from any thread)

  int rank() const { return comm.rank(); }
  // Stops elastic.lingering (waits until what it sent to the ranks it adopted was handed to the
  // transport).
  void end_lingering();
  // The wire of operation `seq`, its waits bounded by one SPARROW_TIMEOUT_S from now.
  OpWire wire(uint64_t seq) { return OpWire{comm.net(), comm.comm_id(), seq, comm.deadline()}; }
  // The operation's tree (INFO logs each distinct tree once on the root); with `members`, over those
  // ranks only (the others get no parent and no children).
  Result<topology::Tree> tree(int root, double bytes, const std::vector<int>* members = nullptr);

 private:
  std::string last_tree_logged_;
  // The trees built so far and what each was built from (the simulator costs every candidate, so a
  // tree is built once per input, not every step; a dense broadcast of many tensors of different
  // sizes uses one tree per size). At most kTreeCache, the oldest dropped first.
  struct CachedTree {
    topology::TreeInput in;
    std::vector<int> members;
    topology::Tree tree;
  };
  static constexpr size_t kTreeCache = 64;
  std::deque<CachedTree> cached_trees_;
};

// Marks a collective running on this communicator (for sparrowCommGetProgress) while in scope.
struct InCall {
  Engine& e;
  explicit InCall(Engine& e_) : e(e_) { e.in_call++; }
  ~InCall() { e.in_call--; }
};

// The traffic of the operation that just ended, this rank's place in its tree, and (for a receiver)
// its first and last byte from its parent; the stage times are set by the caller.
void record_traffic(Engine& e, int parent, const std::vector<int>& children);
// SPARROW_DEBUG=INFO with SPARROW_DEBUG_SUBSYS=STEP: one line per step on every rank, with the bound
// the start-up probe gives for it (wire bytes over the probed rate plus half the round trip).
void log_step(Engine& e, const char* what);
// Every rank of the communicator but this one, increasing (who a root hears from or tells).
std::vector<int> other_ranks(const Engine& e);
// Same counts and dtypes, tensor by tensor (names aside): the state kept for a buffer set still fits.
bool same_layout(const std::vector<kernels::cpu::TensorSpec>& a, const std::vector<kernels::cpu::TensorSpec>& b);

}  // namespace sparrow::coll
