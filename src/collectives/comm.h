// The communicator behind sparrowComm_t: identity, transport, peers' hosts and regions, probe table.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <deque>
#include <map>
#include <set>

#include "bootstrap/bootstrap.h"
#include "collectives/retain.h"
#include "core/status.h"
#include "kernels/cpu/delta.h"
#include "topology/probe.h"
#include "transport/net.h"

namespace sparrow {

struct StagedOp;  // a sparse operation a receiver is staging in the background (collectives/bcast.cpp)

// Per-communicator state of the collectives (used by one thread at a time, like the communicator).
struct CollState {
  using Key = std::vector<const void*>;  // the buffer(s) of an operation on this rank
  struct Root {
    std::vector<kernels::cpu::TensorSpec> layout;
    std::unique_ptr<kernels::cpu::DeltaEncoder> enc;
    // Ranks that get a resync at the next operation, with the version each holds (0: unknown or
    // written to: a full snapshot; else the retained deltas from it, when smaller).
    std::map<int, uint64_t> need_resync;
    coll::RetainedSteps retained;
  };
  struct Recv {
    std::vector<kernels::cpu::TensorSpec> layout;
    kernels::cpu::ReceiverState st;
    // The last operation was refused or failed here, and the root was asked for a resync: the next
    // operation brings one (a snapshot, or the deltas this rank missed), and this rank expects it.
    bool stale = false;
  };
  struct PendingAck {
    uint64_t seq;
    Key key;
    std::vector<int> ranks;
  };
  std::map<Key, Root> roots;
  std::map<Key, Recv> recvs;
  std::deque<PendingAck> acks;
  Status deferred;  // an asynchronous failure to report at the next call
  // The staged step (sparrowSparseBcastStage) until sparrowStageCommit; at most one at a time.
  std::shared_ptr<StagedOp> staged;
  std::string last_tree_logged;  // INFO logs a tree once, not at every call
  struct Stats {
    uint64_t ops = 0, resyncs = 0;
    uint64_t catchups = 0, catchup_bytes = 0;  // resyncs by retained deltas instead of a snapshot
    uint64_t dense_bytes = 0, wire_bytes = 0, changed = 0;
    double density = 0, encode_s = 0, apply_s = 0, total_s = 0;
    bool full = false;
    // Stage by stage (seconds; -1 where a stage is not this rank's): the root's extraction (CPU
    // seconds over its worker threads); a receiver's first and last byte from its parent (since
    // its call began), base verification, decoding, and the commit (the writes).
    double extract_s = -1, first_byte_s = -1, last_byte_s = -1, verify_s = -1, decode_s = -1, commit_s = -1;
    std::vector<transport::Net::PeerTraffic> peers;  // [rank]: this operation's traffic, at its end
    int parent = -1;            // this rank's parent in the operation's tree (-1: the root)
    std::vector<int> children;  // and its children
    bool is_root() const { return parent < 0; }
  } stats;
  std::atomic<int> in_call{0};  // a collective is running (sparrowCommGetProgress, from any thread)
};

class Comm {
 public:
  // Collective: every rank calls it with the same id and nranks.
  static Result<std::unique_ptr<Comm>> init_rank(int nranks, const uint8_t id[bootstrap::kIdBytes], int rank);
  ~Comm();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  uint64_t comm_id() const { return id_.comm_id; }
  transport::Net& net() { return *net_; }
  const std::vector<bootstrap::RankInfo>& ranks() const { return ranks_; }
  const topology::ProbeResult& probe() const { return probe_; }
  // The next collective's op sequence number (consistent across ranks as calls are collective).
  uint64_t next_seq() { return ++seq_; }
  transport::Deadline deadline() const { return transport::deadline_in(transport::timeout_seconds()); }

  void abort();
  Status async_error() const;
  // Records a failure for sparrowGetLastError / sparrowCommGetAsyncError.
  void set_error(const Status& s);
  std::string last_error() const;
  CollState& coll() { return coll_; }

 private:
  CollState coll_;
  Comm() = default;
  int rank_ = 0, nranks_ = 0;
  bootstrap::IdData id_;
  std::unique_ptr<transport::Net> net_;
  std::vector<bootstrap::RankInfo> ranks_;
  topology::ProbeResult probe_;
  uint64_t seq_ = 0;
  mutable std::mutex mu_;
  Status async_;
  std::string last_error_;
};

// This host's name and the region label (SPARROW_REGION, else empty: inferred later from RTTs).
std::string host_identity(const std::string& address);
std::string region_label();

}  // namespace sparrow
