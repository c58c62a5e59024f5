#include "comm/comm.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "core/affinity.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/params.h"
#include "topology/affinity.h"
#include "topology/nic.h"

namespace sparrow {
namespace {
params::StringParam kRegion("REGION", "", "This rank's region label for the topology-aware tree (empty: infer from RTTs).");
params::IntParam kLease("LEASE_MS", 10000,
                        "Elastic communicators: a member silent this long during an operation is dropped (ms; "
                        "sparrowConfig_t.leaseMs overrides).",
                        100, 86400000);
params::IntParam kMaxRanks("MAX_RANKS", 0,
                           "Elastic communicators: the number of ranks it may grow to by sparrowCommJoin (slots past "
                           "nranks start vacant; 0: nranks, joiners take dropped members' slots only). The same on "
                           "every rank; fixed communicators ignore it.",
                           0, 1 << 20);
}  // namespace

int default_lease_ms() { return int(kLease.get()); }

// A host is a machine and the address its ranks listen on: ranks of one machine normally share both;
// emulated hosts (wanemu: one address each) and multi-homed setups with one address per rank group
// count as distinct hosts, which is what the tree needs (each has its own uplink).
std::string host_identity(const std::string& address) {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  auto colon = address.rfind(':');
  return std::string(h) + "@" + (colon == std::string::npos ? address : address.substr(0, colon));
}

std::string region_label() { return kRegion.get(); }

namespace {
// This process's elastic communicators per id (ranks as threads share one): the store, if it is
// this process's, serves joiners until the last of them goes.
std::mutex g_elastic_mu;
std::map<uint64_t, int> g_elastic;
void hold_store(uint64_t comm_id) {
  std::lock_guard<std::mutex> lk(g_elastic_mu);
  ++g_elastic[comm_id];
}
void release_store(uint64_t comm_id) {
  {
    std::lock_guard<std::mutex> lk(g_elastic_mu);
    auto it = g_elastic.find(comm_id);
    if (it != g_elastic.end() && --it->second > 0) return;
    if (it != g_elastic.end()) g_elastic.erase(it);
  }
  bootstrap::end_store(comm_id);  // nobody joins a communicator this process left
}

// The CPUs sparrow's threads run on from now (topology/affinity.h); a setting that names no usable
// CPU fails the init.
Status bind_threads(int rank, const std::optional<topo::NicChoice>& nic) {
  SPARROW_ASSIGN_OR_RETURN(topo::ThreadCpus tc,
                           topo::choose_thread_cpus(allowed_cpus(), nic, topo::cpu_affinity_setting()));
  affinity::set_cpus(tc.cpus);
  if (!affinity::set_memory_node(tc.numa))
    tc.why += " (NUMA node " + std::to_string(tc.numa) + " is not this host's: buffers where first touched)";
  SPARROW_INFO("rank %d: %s", rank, tc.why.c_str());
  return Status::Ok();
}

// The address this rank listens on: the user's, else the NIC nearest its NUMA node (topology/nic.h).
Result<std::string> listen_address(int rank) {
  std::string why;
  std::optional<topo::NicChoice> nic;
  SPARROW_ASSIGN_OR_RETURN(std::string host, topo::listen_address(&why, &nic));
  SPARROW_INFO("rank %d listens on %s", rank, why.c_str());
  SPARROW_RETURN_IF_ERROR(bind_threads(rank, nic));
  return host;
}
}  // namespace

Result<std::unique_ptr<Comm>> Comm::init_rank(int nranks, const uint8_t id[bootstrap::kIdBytes], int rank,
                                              const CommOptions& opt) {
  SPARROW_RETURN_IF_ERROR(params::validate_all());
  if (nranks < 1) return InvalidArgument("nranks must be >= 1, got " + std::to_string(nranks));
  if (rank < 0 || rank >= nranks)
    return InvalidArgument("rank " + std::to_string(rank) + " out of range for " + std::to_string(nranks) + " ranks");
  SPARROW_ASSIGN_OR_RETURN(bootstrap::IdData idd, bootstrap::decode_id(id));
  SPARROW_ASSIGN_OR_RETURN(const int slots, slot_count(nranks, opt.elastic));
  std::unique_ptr<Comm> c(new Comm());
  c->rank_ = rank;
  c->nranks_ = slots;
  c->id_ = idd;
  c->elastic_ = opt.elastic;
  c->lease_ms_ = opt.elastic ? (opt.lease_ms > 0 ? opt.lease_ms : default_lease_ms()) : 0;
  if (opt.elastic) hold_store(idd.comm_id), c->holds_store_ = true;
  transport::Identity ident{idd.comm_id, rank, idd.secret};
  SPARROW_ASSIGN_OR_RETURN(std::string host, listen_address(rank));
  SPARROW_ASSIGN_OR_RETURN(c->net_, transport::Net::create(ident, slots, transport::default_streams(), "", host));
  if (opt.elastic) c->net_->set_elastic();
  bootstrap::RankInfo me{c->net_->address(), host_identity(c->net_->address()),
                         opt.region.empty() ? region_label() : opt.region, c->net_->nstreams(), c->elastic_,
                         c->lease_ms_};
  auto d = c->deadline();
  auto table = bootstrap::exchange(idd, rank, nranks, me, d, slots);
  if (!table.ok()) return std::move(table).take_status().context("rank " + std::to_string(rank) + " joining the communicator");
  c->set_table(std::move(table.value()));
  double budget = double(topology::probe_budget_ms()) / 1000.0;
  if (budget > 0 && nranks > 1) {
    auto p = topology::probe_star(*c->net_, idd.comm_id, 0, budget, d, nranks);
    if (!p.ok()) return std::move(p).take_status().context("probing links at communicator creation");
    c->probe_ = p.value();
    if (rank == 0) SPARROW_INFO("%s", c->probe_.format().c_str());  // every rank holds the same table
    else SPARROW_TRACE("rank %d: %s", rank, c->probe_.format().c_str());
  } else {
    c->probe_.rtt_s.assign(size_t(slots), -1);
    c->probe_.bw_Bps.assign(size_t(slots), -1);
  }
  std::string kind = c->elastic_ ? ", elastic, lease " + std::to_string(c->lease_ms_) + " ms" : "";
  if (slots > nranks) kind += ", may grow to " + std::to_string(slots) + " ranks";
  SPARROW_INFO("rank %d of %d up on %s (%s%s)", rank, nranks, c->net_->address().c_str(), c->net_->backend_name(),
               kind.c_str());
  return c;
}

Result<int> Comm::slot_count(int nranks, bool elastic) {
  const int max = int(kMaxRanks.get());
  if (!elastic || max == 0) return nranks;
  if (max < nranks)
    return InvalidArgument("SPARROW_MAX_RANKS=" + std::to_string(max) + " is below the communicator's " +
                           std::to_string(nranks) + " ranks (it is the number the communicator may grow to; 0: nranks)");
  return max;
}

void Comm::set_table(std::vector<bootstrap::RankInfo> table) {
  ranks_ = std::move(table);
  std::vector<std::string> addrs;
  for (auto& r : ranks_) addrs.push_back(r.address);
  net_->set_addresses(addrs);
  // A vacant slot (no member yet: the communicator may grow into it) takes a joiner's connections
  // like a dropped member's, and nothing waits on it.
  for (int r = 0; r < int(ranks_.size()); ++r)
    if (r != rank_ && vacant(r))
      net_->disconnect(r, Status(Code::kPeerLost, "slot " + std::to_string(r) + " has no member (yet)"));
}

namespace {
// A free slot from the store for a joiner that did not name one. A member that died is dropped (and
// its slot freed) up to a lease later, at rank 0's next operation: until then, ask again.
Result<int> claim_free_slot(const bootstrap::IdData& idd, int lease_ms, transport::Deadline d) {
  const int ttl_ms = int(std::min(transport::timeout_seconds() * 1000.0 + 1000, 86400000.0));
  const auto give_up = std::min(d, transport::deadline_in(2 * lease_ms / 1000.0 + 1));
  for (;;) {
    auto slot = bootstrap::claim_slot(idd, ttl_ms, d);
    if (slot.ok()) {
      SPARROW_INFO("sparrowCommJoin: the rendezvous store gave this process slot %d", slot.value());
      return slot;
    }
    const std::string& why = slot.status().message();
    const bool retry = slot.status().code() == Code::kInvalidUsage && (why == bootstrap::kNoFreeSlot || why == bootstrap::kAllClaimed);
    if (!retry || transport::Clock::now() >= give_up)
      return std::move(slot).take_status().context("sparrowCommJoin with *rank = -1 (waited " +
                                                   std::to_string(2 * lease_ms / 1000.0 + 1) + " s for a slot to free)");
    poll(nullptr, 0, 100);  // a retry interval, not a synchronisation
  }
}
}  // namespace

Result<std::unique_ptr<Comm>> Comm::init_joiner(const uint8_t id[bootstrap::kIdBytes], int rank,
                                                const CommOptions& opt) {
  SPARROW_RETURN_IF_ERROR(params::validate_all());
  SPARROW_ASSIGN_OR_RETURN(bootstrap::IdData idd, bootstrap::decode_id(id));
  std::unique_ptr<Comm> c(new Comm());
  auto d = c->deadline();
  // A joiner started beside the ranks may ask before they all registered: ask again meanwhile.
  auto found = bootstrap::lookup(idd, rank, d);
  while (!found.ok() && found.status().message().find(bootstrap::kNotComplete) != std::string::npos &&
         transport::Clock::now() < d) {
    poll(nullptr, 0, 50);  // a retry interval, not a synchronisation
    found = bootstrap::lookup(idd, rank, d);
  }
  SPARROW_ASSIGN_OR_RETURN(auto table, std::move(found));
  const int n = int(table.size());
  if (!table[0].elastic) return Error(Code::kInvalidUsage, "sparrowCommJoin: the communicator is not elastic");
  if (rank == -1) {
    SPARROW_ASSIGN_OR_RETURN(rank, claim_free_slot(idd, table[0].lease_ms, d));
  }
  if (rank < 1 || rank >= n)
    return InvalidArgument("sparrowCommJoin: rank " + std::to_string(rank) + " is not a slot of this " +
                           std::to_string(n) + "-rank communicator other than rank 0");
  if (opt.lease_ms > 0 && opt.lease_ms != table[0].lease_ms)
    return Error(Code::kInvalidUsage, "sparrowCommJoin: leaseMs " + std::to_string(opt.lease_ms) +
                                          " differs from the communicator's " + std::to_string(table[0].lease_ms));
  c->rank_ = rank;
  c->nranks_ = n;
  c->id_ = idd;
  c->elastic_ = true;
  c->lease_ms_ = table[0].lease_ms;
  hold_store(idd.comm_id), c->holds_store_ = true;
  transport::Identity ident{idd.comm_id, rank, idd.secret};
  SPARROW_ASSIGN_OR_RETURN(std::string host, listen_address(rank));
  SPARROW_ASSIGN_OR_RETURN(c->net_, transport::Net::create(ident, n, table[0].nstreams, "", host));
  c->net_->set_elastic();
  c->net_->set_joiner();
  table[size_t(rank)] = {c->net_->address(), host_identity(c->net_->address()),
                         opt.region.empty() ? region_label() : opt.region, table[0].nstreams, 1, c->lease_ms_};
  c->set_table(std::move(table));
  c->probe_.rtt_s.assign(size_t(n), -1);
  c->probe_.bw_Bps.assign(size_t(n), -1);
  return c;
}

void Comm::adopt(std::vector<bootstrap::RankInfo> ranks, topology::ProbeResult probe, uint64_t first_seq) {
  ranks[size_t(rank_)].address = net_->address();
  // Slots that were vacant in the store's table and have members now (joiners admitted since).
  std::vector<int> filled;
  for (int r = 0; r < int(ranks.size()) && r < int(ranks_.size()); ++r)
    if (r != rank_ && vacant(r) && !ranks[size_t(r)].address.empty()) filled.push_back(r);
  set_table(std::move(ranks));
  for (int r : filled) net_->revive(r, ranks_[size_t(r)].address);
  probe_ = std::move(probe);
  seq_ = first_seq - 1;
  SPARROW_INFO("rank %d of %d joined on %s (%s, elastic, lease %d ms); first operation %llu", rank_, nranks_,
               net_->address().c_str(), net_->backend_name(), lease_ms_, (unsigned long long)first_seq);
}

void Comm::set_place(int r, const bootstrap::RankInfo& info) {
  if (r < 0 || r >= nranks_) return;
  ranks_[size_t(r)] = info;
  net_->revive(r, info.address);
}

void Comm::publish_free_slots(std::vector<int> free_slots) {
  if (!board_) {
    if (free_slots.empty()) return;  // nothing was ever free: the store knows that already
    board_ = std::make_unique<bootstrap::SlotBoard>(id_);
  }
  board_->publish(std::move(free_slots));
}

Comm::~Comm() {
  board_.reset();  // before the store (when it is this process's) ends
  if (holds_store_) release_store(id_.comm_id);
}

void Comm::abort() {
  set_error(Status(Code::kInternalError, "communicator aborted"));
  net_->abort(Status(Code::kInternalError, "communicator aborted by sparrowCommAbort"));
}

Status Comm::async_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return async_;
}

void Comm::set_error(const Status& s) {
  std::lock_guard<std::mutex> lk(mu_);
  last_error_ = s.to_string();
  if (async_.ok() && (s.code() == Code::kPeerLost || s.code() == Code::kInternalError || s.code() == Code::kTimeout))
    async_ = s;
}

std::string Comm::last_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_error_;
}

}  // namespace sparrow
