// The communicator behind sparrowComm_t: identity, network, the rank table (hosts, regions), the probe
// table, the op sequence and errors. No codec or collective state: that is coll::Engine
// (collectives/state.h), which the API layer keeps beside it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "core/status.h"
#include "topology/probe.h"
#include "transport/net.h"

namespace sparrow {

// What sparrowConfig_t sets (sparrowCommInitRankConfig); the defaults are sparrowCommInitRank's.
struct CommOptions {
  bool elastic = false;
  int lease_ms = 0;     // 0: SPARROW_LEASE_MS (elastic communicators only)
  std::string region;   // empty: SPARROW_REGION, else inferred
};

class Comm {
 public:
  // Collective: every rank calls it with the same id and nranks (and the same elastic and lease).
  static Result<std::unique_ptr<Comm>> init_rank(int nranks, const uint8_t id[bootstrap::kIdBytes], int rank,
                                                 const CommOptions& opt = {});
  // sparrowCommJoin's first half: `rank`'s slot of a running elastic communicator (-1: a free one
  // the store hands out), from its store's table (elastic and lease checked against `opt`); the
  // network listens, nothing is connected. The
  // collectives' join handshake (coll::join) then asks rank 0 for admission and calls adopt().
  static Result<std::unique_ptr<Comm>> init_joiner(const uint8_t id[bootstrap::kIdBytes], int rank,
                                                   const CommOptions& opt);
  // What rank 0 told an admitted joiner: every rank's place, the probe table, its first operation.
  void adopt(std::vector<bootstrap::RankInfo> ranks, topology::ProbeResult probe, uint64_t first_seq);
  // Rank 0 of an elastic communicator: the slots it let go of, for joiners that ask the store for
  // one (sparrowCommJoin with *rank = -1). Returns at once; only changes are sent.
  void publish_free_slots(std::vector<int> free_slots);
  // A member that rejoined from elsewhere (every rank builds its trees from these).
  void set_place(int r, const bootstrap::RankInfo& info);
  ~Comm();

  int rank() const { return rank_; }
  // The communicator's slots: its ranks, and for an elastic one the vacant slots it may grow into
  // (SPARROW_MAX_RANKS; their places have no address until a joiner takes one).
  int nranks() const { return nranks_; }
  uint64_t comm_id() const { return id_.comm_id; }
  transport::Net& net() { return *net_; }
  const std::vector<bootstrap::RankInfo>& ranks() const { return ranks_; }
  // A slot nobody has taken yet (elastic, past the starting ranks): its place has no address.
  bool vacant(int r) const { return ranks_[size_t(r)].address.empty(); }
  const topology::ProbeResult& probe() const { return probe_; }
  // The next collective's op sequence number (consistent across ranks as calls are collective).
  uint64_t next_seq() { return ++seq_; }
  uint64_t peek_seq() const { return seq_ + 1; }  // what next_seq() returns next
  transport::Deadline deadline() const { return transport::deadline_in(transport::timeout_seconds()); }
  // Elastic: members may be dropped (a dead or silent rank) and the others' collectives go on.
  bool elastic() const { return elastic_; }
  // How long an elastic communicator's member may stay silent during an operation (seconds).
  double lease_s() const { return lease_ms_ / 1000.0; }

  void abort();
  Status async_error() const;
  // Records a failure for sparrowGetLastError / sparrowCommGetAsyncError.
  void set_error(const Status& s);
  std::string last_error() const;

 private:
  Comm() = default;
  // SPARROW_MAX_RANKS for an elastic communicator of `nranks`, else nranks.
  static Result<int> slot_count(int nranks, bool elastic);
  // Every slot's place (index = rank), from the store or a welcome.
  void set_table(std::vector<bootstrap::RankInfo> table);
  int rank_ = 0, nranks_ = 0;
  bool elastic_ = false, holds_store_ = false;
  int lease_ms_ = 0;
  bootstrap::IdData id_;
  std::unique_ptr<bootstrap::SlotBoard> board_;  // rank 0 of an elastic communicator, once a slot freed
  std::unique_ptr<transport::Net> net_;
  std::vector<bootstrap::RankInfo> ranks_;
  topology::ProbeResult probe_;
  uint64_t seq_ = 0;
  mutable std::mutex mu_;
  Status async_;
  std::string last_error_;
};

// SPARROW_LEASE_MS: an elastic communicator's lease when sparrowConfig_t leaves it 0.
int default_lease_ms();
// This host's name and the region label (SPARROW_REGION, else empty: inferred later from RTTs).
std::string host_identity(const std::string& address);
std::string region_label();

}  // namespace sparrow
