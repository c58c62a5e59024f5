#include "bootstrap/bootstrap.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <pthread.h>

#include "core/log.h"
#include "core/bits.h"
#include "bootstrap/secret.h"
#include "transport/auth.h"
#include "transport/channel.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_backend.h"

namespace sparrow::bootstrap {

using transport::ConnPtr;
using transport::FrameHeader;
using transport::MsgKey;

namespace {

constexpr uint32_t kIdMagic = 0x44495053;  // "SPID"
constexpr uint32_t kSubRegister = 1, kSubTable = 2, kSubLookup = 3;
// Elastic communicators: rank 0 lists the free slots (kSubFree), a joiner claims one (kSubClaim).
constexpr uint32_t kSubFree = 4, kSubClaim = 5;
constexpr size_t kMaxRegistration = 4096;
constexpr uint32_t kMaxSlots = 1u << 20;

void put_str(std::vector<uint8_t>& o, const std::string& s) {
  bits::put_u16(o, uint16_t(s.size()));
  o.insert(o.end(), s.begin(), s.end());
}
Status get_str(bits::ByteReader& r, std::string* s) {
  uint16_t n;
  const uint8_t* p;
  SPARROW_RETURN_IF_ERROR(r.u16(&n));
  SPARROW_RETURN_IF_ERROR(r.bytes(n, &p));
  s->assign(reinterpret_cast<const char*>(p), n);
  return Status::Ok();
}
// A rank's entry, as registered and in the table.
void put_info(std::vector<uint8_t>& o, const RankInfo& ri) {
  bits::put_u32(o, uint32_t(ri.nstreams));
  bits::put_u32(o, uint32_t(ri.elastic));
  bits::put_u32(o, uint32_t(ri.lease_ms));
  put_str(o, ri.address);
  put_str(o, ri.host);
  put_str(o, ri.region);
}
Status get_info(bits::ByteReader& r, RankInfo* ri) {
  uint32_t nstreams, elastic, lease;
  SPARROW_RETURN_IF_ERROR(r.u32(&nstreams));
  SPARROW_RETURN_IF_ERROR(r.u32(&elastic));
  SPARROW_RETURN_IF_ERROR(r.u32(&lease));
  ri->nstreams = int(nstreams);
  ri->elastic = int(elastic);
  ri->lease_ms = int(lease);
  SPARROW_RETURN_IF_ERROR(get_str(r, &ri->address));
  SPARROW_RETURN_IF_ERROR(get_str(r, &ri->host));
  return get_str(r, &ri->region);
}

// The store: a TCP backend of its own whose sink collects registrations.
class Store : public transport::FrameSink, public std::enable_shared_from_this<Store> {
 public:
  Status start(const IdData& id) {
    id_ = id;
    transport::BackendOptions bo;
    bo.identity.comm_id = id.comm_id;
    bo.identity.rank = -1;  // the store's "rank" in the handshake
    bo.identity.secret = id.secret;
    SPARROW_ASSIGN_OR_RETURN(bo.bind_host, transport::net::local_host());
    SPARROW_ASSIGN_OR_RETURN(be_, transport::make_tcp_backend(bo));
    SPARROW_ASSIGN_OR_RETURN(address_, be_->listen([this](const ConnPtr& c) -> transport::FrameSink* {
                               std::lock_guard<std::mutex> lk(mu_);
                               conns_[c.get()] = c;
                               return this;
                             }));
    return Status::Ok();
  }
  const std::string& address() const { return address_; }
  // An elastic communicator's store serves for as long as its process runs: joiners look the table
  // up (sparrowCommJoin).
  bool finished() const { return sent_ > 0 && sent_ == expected_sends_ && !serves_lookups_; }
  void shutdown() { be_.reset(); }
  uint64_t comm_id() const { return id_.comm_id; }
  // The backend's thread delivers to this sink: it stops before the members it uses go.
  ~Store() override { be_.reset(); }

  Result<uint8_t*> frame_begin(transport::Conn* c, const FrameHeader& h) override {
    if (h.total > kMaxRegistration || h.key.comm != id_.comm_id || h.key.sub < kSubRegister || h.key.sub > kSubClaim ||
        h.key.sub == kSubTable)
      return CorruptData("unexpected message to the rendezvous store");
    std::lock_guard<std::mutex> lk(mu_);
    auto& b = bufs_[c];
    b.resize(h.total);
    return b.data() + h.offset;
  }
  void frame_end(transport::Conn* c, const FrameHeader& h) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto& b = bufs_[c];
    if (h.offset + h.len != b.size()) return;  // registrations are single-fragment
    if (h.key.sub == kSubLookup) {
      reply_locked(c, table_msg_ ? table_msg_ : error_table(no_lookups_locked()));
      return;
    }
    if (h.key.sub == kSubFree) return reply_locked(c, take_free_locked(c, b));
    if (h.key.sub == kSubClaim) return reply_locked(c, claim_locked(b));
    Registration g;
    if (Status s = parse_registration(b, &g); !s.ok()) return fail_locked(s.message());
    if (std::string why = admit_locked(g); !why.empty()) return fail_locked(why);
    table_[g.rank] = g.info;
    who_[g.rank] = c;
    ++registered_;
    if (!failed_.empty()) return reply_locked(c, error_table(failed_));
    if (registered_ == nranks_) publish_table_locked();
  }
  void conn_failed(transport::Conn*, const Status&) override {}

 private:
  struct Registration {
    uint32_t rank = 0, nranks = 0, slots = 0;
    RankInfo info;
  };
  static Status parse_registration(const std::vector<uint8_t>& b, Registration* g) {
    bits::ByteReader r(b, "registration");
    SPARROW_RETURN_IF_ERROR(r.u32(&g->rank));
    SPARROW_RETURN_IF_ERROR(r.u32(&g->nranks));
    SPARROW_RETURN_IF_ERROR(r.u32(&g->slots));
    return get_info(r, &g->info);
  }
  // Why `g` does not fit the registrations so far ("" when it does; the first one sets the shape).
  std::string admit_locked(const Registration& g) {
    const uint32_t rank = g.rank, nranks = g.nranks;
    if (nranks == 0 || nranks > kMaxSlots) return "invalid rank count " + std::to_string(nranks);
    if (g.slots < nranks || g.slots > kMaxSlots)
      return "rank " + std::to_string(rank) + " asks for " + std::to_string(g.slots) + " slots for " +
             std::to_string(nranks) + " ranks";
    if (nranks_ == 0) nranks_ = nranks, slots_ = g.slots;
    if (nranks != nranks_)
      return "rank " + std::to_string(rank) + " says there are " + std::to_string(nranks) + " ranks, rank " +
             std::to_string(first_rank_) + " said " + std::to_string(nranks_);
    if (rank >= nranks) return "rank " + std::to_string(rank) + " out of range for " + std::to_string(nranks) + " ranks";
    if (table_.empty()) {
      table_.resize(nranks);
      who_.resize(nranks);
      first_rank_ = rank;
    }
    if (who_[rank]) return "two processes registered as rank " + std::to_string(rank);
    const RankInfo& first = table_[first_rank_];
    if (registered_ > 0 && g.info.nstreams != first.nstreams)
      return "SPARROW_NSTREAMS differs between ranks (" + std::to_string(g.info.nstreams) + " vs " +
             std::to_string(first.nstreams) + ")";
    if (registered_ > 0 && (g.info.elastic != first.elastic || g.info.lease_ms != first.lease_ms))
      return kind_desc(rank, g.info) + ", but " + kind_desc(first_rank_, first) +
             ": every rank must create it with the same elastic and leaseMs";
    if (g.slots != slots_)  // (after the kind: a fixed communicator has no slots past its ranks)
      return "rank " + std::to_string(rank) + " lets the communicator grow to " + std::to_string(g.slots) +
             " ranks, rank " + std::to_string(first_rank_) + " to " + std::to_string(slots_) +
             " (SPARROW_MAX_RANKS must be the same on every rank)";
    return "";
  }
  // Every rank registered: the table to each of them, with a vacant entry (no address) for every
  // slot past the ranks that an elastic communicator may grow into.
  void publish_table_locked() {
    std::vector<uint8_t> t;
    bits::put_u32(t, 0);
    bits::put_u32(t, slots_);
    const RankInfo& first = table_[first_rank_];
    for (uint32_t r = 0; r < slots_; ++r)
      put_info(t, r < nranks_ ? table_[r] : RankInfo{"", "", "", first.nstreams, first.elastic, first.lease_ms});
    auto shared = std::make_shared<std::vector<uint8_t>>(std::move(t));
    for (auto* w : who_) reply_locked(w, shared);
    if (first.elastic) {
      serves_lookups_ = true;
      table_msg_ = shared;
    }
  }
  static std::string kind_desc(uint32_t rank, const RankInfo& ri) {
    return "rank " + std::to_string(rank) + " created the communicator " +
           (ri.elastic ? "elastic (lease " + std::to_string(ri.lease_ms) + " ms)" : std::string("not elastic"));
  }
  // Rank 0's list of free slots (u32 count, then each): claims of slots no longer free end.
  std::shared_ptr<std::vector<uint8_t>> take_free_locked(transport::Conn* c, const std::vector<uint8_t>& b) {
    if (c->peer_rank() != 0 || !serves_lookups_) return error_table("only rank 0 of an elastic communicator lists free slots");
    bits::ByteReader r(b, "free slots");
    uint32_t n = 0;
    std::vector<int> free;
    Status s = r.u32(&n);
    for (uint32_t i = 0; s.ok() && i < n && i < slots_; ++i) {
      uint32_t slot = 0;
      s = r.u32(&slot);
      if (s.ok() && slot > 0 && slot < slots_) free.push_back(int(slot));
    }
    if (!s.ok()) return error_table(s.message());
    std::sort(free.begin(), free.end());
    free_ = std::move(free);
    for (auto it = claimed_.begin(); it != claimed_.end();)
      it = std::count(free_.begin(), free_.end(), it->first) ? std::next(it) : claimed_.erase(it);
    return ok_table(0);
  }
  // Why a joiner cannot look the communicator up (yet).
  std::string no_lookups_locked() const {
    if (table_.empty() || registered_ < nranks_) return kNotComplete;
    return "the communicator is not elastic: nobody can join it";
  }
  // A joiner's claim (u32: how long it may take to be admitted, ms): the lowest free slot nobody
  // claimed within their own time, which is then the joiner's for its time.
  std::shared_ptr<std::vector<uint8_t>> claim_locked(const std::vector<uint8_t>& b) {
    if (!serves_lookups_) return error_table(no_lookups_locked());
    bits::ByteReader r(b, "slot claim");
    uint32_t ttl_ms = 0;
    if (Status s = r.u32(&ttl_ms); !s.ok()) return error_table(s.message());
    const auto now = std::chrono::steady_clock::now();
    for (int slot : free_) {
      auto it = claimed_.find(slot);
      if (it != claimed_.end() && it->second > now) continue;
      claimed_[slot] = now + std::chrono::milliseconds(std::min<uint32_t>(ttl_ms, 86400000u));
      return ok_table(uint32_t(slot));
    }
    return error_table(free_.empty() ? kNoFreeSlot : kAllClaimed);
  }
  static std::shared_ptr<std::vector<uint8_t>> ok_table(uint32_t value) {
    std::vector<uint8_t> t;
    bits::put_u32(t, 0);
    bits::put_u32(t, value);
    return std::make_shared<std::vector<uint8_t>>(std::move(t));
  }
  std::shared_ptr<std::vector<uint8_t>> error_table(const std::string& msg) {
    std::vector<uint8_t> t;
    bits::put_u32(t, 1);
    put_str(t, msg.substr(0, 60000));
    return std::make_shared<std::vector<uint8_t>>(std::move(t));
  }
  void fail_locked(const std::string& msg) {
    SPARROW_WARN("rendezvous store: %s", msg.c_str());
    if (failed_.empty()) failed_ = msg;
    auto t = error_table(failed_);
    for (auto& [p, c] : conns_) reply_locked(p, t);
  }
  void reply_locked(transport::Conn* c, std::shared_ptr<std::vector<uint8_t>> t) {
    if (!c || replied_.count(c)) return;
    replied_[c] = true;
    FrameHeader h;
    h.key = MsgKey{id_.comm_id, 0, kSubTable};
    h.total = h.len = uint32_t(t->size());
    ++expected_sends_;
    auto self = shared_from_this();
    // The completion may run inline, on this thread, while mu_ is held: it only touches an atomic.
    c->send(h, transport::Payload{t->data(), t->size(), t}, [self](const Status&) { ++self->sent_; });
  }

  IdData id_;
  std::string address_;
  std::unique_ptr<transport::Backend> be_;
  mutable std::mutex mu_;
  std::map<transport::Conn*, ConnPtr> conns_;
  std::map<transport::Conn*, std::vector<uint8_t>> bufs_;
  std::map<transport::Conn*, bool> replied_;
  std::vector<RankInfo> table_;
  std::vector<transport::Conn*> who_;
  uint32_t nranks_ = 0, slots_ = 0, registered_ = 0, first_rank_ = 0;
  std::atomic<size_t> expected_sends_{0}, sent_{0};
  std::string failed_;
  std::atomic<bool> serves_lookups_{false};
  std::shared_ptr<std::vector<uint8_t>> table_msg_;  // the complete table (elastic: for lookups)
  std::vector<int> free_;                             // rank 0's last list of free slots
  std::map<int, std::chrono::steady_clock::time_point> claimed_;  // slot -> until when a joiner holds it
};

std::mutex g_mu;
std::vector<std::shared_ptr<Store>> g_stores;

// A process forked after sparrowGetUniqueId inherits copies of its stores without their threads:
// joining or closing them there would wait for a thread that does not exist in the child (forever)
// or close the parent's sockets' twins. The child drops them unlooked-at into a list that is never
// destroyed; the parent's stores keep serving.
std::vector<std::shared_ptr<Store>>* g_inherited = nullptr;
void before_fork() { g_mu.lock(); }
void after_fork_parent() { g_mu.unlock(); }
void after_fork_child() {
  if (!g_stores.empty()) {
    if (!g_inherited) g_inherited = new std::vector<std::shared_ptr<Store>>;
    for (auto& s : g_stores) g_inherited->push_back(std::move(s));
    g_stores.clear();
  }
  g_mu.unlock();
}
void watch_forks_once() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(before_fork, after_fork_parent, after_fork_child); });
}

void reap_locked() {
  for (auto it = g_stores.begin(); it != g_stores.end();) {
    if ((*it)->finished()) {
      (*it)->shutdown();
      it = g_stores.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

namespace {
// An id that carries a fingerprint (version 2): the secret is this rank's SPARROW_SECRET_FILE, which
// must be rank 0's.
Status secret_for(IdData* d) {
  SPARROW_ASSIGN_OR_RETURN(auto from_file, secret_from_file());
  if (!from_file)
    return Error(Code::kInvalidUsage, "this unique id was made with SPARROW_SECRET_FILE and carries no secret: set "
                                      "SPARROW_SECRET_FILE on this rank to a file with the same secret");
  auto f = fingerprint(*from_file);
  if (!std::equal(f.begin(), f.end(), d->secret.begin()))
    return Error(Code::kInvalidUsage, "SPARROW_SECRET_FILE on this rank holds another secret than the one the unique "
                                      "id was made with (rank 0's)");
  d->secret = std::move(*from_file);
  d->secret_from_file = true;
  return Status::Ok();
}
}  // namespace

void encode_id(const IdData& d, uint8_t out[kIdBytes]) {
  memset(out, 0, kIdBytes);
  std::vector<uint8_t> v;
  bits::put_u32(v, kIdMagic);
  bits::put_u16(v, d.secret_from_file ? 2 : 1);  // 2: the secret is the ranks' SPARROW_SECRET_FILE
  bits::put_u16(v, uint16_t(d.store_address.size()));
  bits::put_u64(v, d.comm_id);
  if (d.secret_from_file) {
    auto f = fingerprint(d.secret);
    v.insert(v.end(), f.begin(), f.end());
  } else {
    v.insert(v.end(), d.secret.begin(), d.secret.end());
  }
  v.insert(v.end(), d.store_address.begin(), d.store_address.end());
  memcpy(out, v.data(), std::min(v.size(), kIdBytes));
}

Result<IdData> decode_id(const uint8_t in[kIdBytes]) {
  if (bits::load_u32(in) != kIdMagic) return InvalidArgument("not a sparrow unique id (was it made by sparrowGetUniqueId?)");
  uint16_t ver = uint16_t(in[4] | in[5] << 8), len = uint16_t(in[6] | in[7] << 8);
  if (ver != 1 && ver != 2) return InvalidArgument("unique id version " + std::to_string(ver) + " is not supported");
  if (len == 0 || 32u + len > kIdBytes) return InvalidArgument("corrupt unique id");
  IdData d;
  d.comm_id = bits::load_u64(in + 8);
  d.secret.assign(in + 16, in + 32);
  d.store_address.assign(reinterpret_cast<const char*>(in + 32), len);
  if (ver == 2) SPARROW_RETURN_IF_ERROR(secret_for(&d));
  return d;
}

Result<IdData> create_id() {
  IdData d;
  SPARROW_ASSIGN_OR_RETURN(auto from_file, secret_from_file());
  d.secret_from_file = from_file.has_value();
  if (from_file) {
    d.secret = std::move(*from_file);
  } else {
    d.secret.resize(16);
    SPARROW_RETURN_IF_ERROR(transport::auth::random_bytes(d.secret.data(), 16));
  }
  SPARROW_RETURN_IF_ERROR(transport::auth::random_bytes(&d.comm_id, 8));
  watch_forks_once();
  auto store = std::make_shared<Store>();
  SPARROW_RETURN_IF_ERROR(store->start(d));
  d.store_address = store->address();
  if (32 + d.store_address.size() > kIdBytes) return InternalError("store address too long for a unique id");
  std::lock_guard<std::mutex> lk(g_mu);
  reap_locked();
  g_stores.push_back(store);
  return d;
}

void end_store(uint64_t comm_id) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto it = g_stores.begin(); it != g_stores.end();) {
    if ((*it)->comm_id() == comm_id) {
      (*it)->shutdown();
      it = g_stores.erase(it);
    } else {
      ++it;
    }
  }
}

size_t live_stores() {
  std::lock_guard<std::mutex> lk(g_mu);
  reap_locked();
  return g_stores.size();
}

namespace {
// One request to the store (`sub`, `payload`) and its table reply, as `rank` in the handshake.
Result<std::vector<uint8_t>> ask_store(const IdData& id, int rank, uint32_t sub, const std::vector<uint8_t>& payload,
                                       transport::Deadline d) {
  // The mailbox outlives the backend: its progress thread delivers to it (a late close from the
  // store's side too) until the backend is destroyed.
  transport::Mailbox box("the rendezvous store (" + id.store_address + ")");
  transport::BackendOptions bo;
  bo.identity.comm_id = id.comm_id;
  bo.identity.rank = rank;
  bo.identity.secret = id.secret;
  bo.bind_host = "127.0.0.1";  // this backend only connects out
  SPARROW_ASSIGN_OR_RETURN(auto be, transport::make_tcp_backend(bo));
  auto conn = be->connect(id.store_address, -1, 0, &box, d);
  if (!conn.ok()) return std::move(conn).take_status().context("reaching the rendezvous store");
  ConnPtr c = conn.value();
  transport::Channel ch({c});
  auto req = ch.send(MsgKey{id.comm_id, 0, sub}, transport::Payload{payload.data(), payload.size(), nullptr});
  SPARROW_RETURN_IF_ERROR(req->wait(d));
  auto t = box.recv(MsgKey{id.comm_id, 0, kSubTable}, d);
  ch.close();
  return t;
}

Result<std::vector<RankInfo>> parse_table(const std::vector<uint8_t>& bytes, int nranks) {
  bits::ByteReader r(bytes, "rendezvous table");
  uint32_t status, n;
  SPARROW_RETURN_IF_ERROR(r.u32(&status));
  if (status != 0) {
    std::string msg;
    SPARROW_RETURN_IF_ERROR(get_str(r, &msg));
    return Error(Code::kInvalidUsage, "rendezvous failed: " + msg);
  }
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  if (nranks > 0 && n != uint32_t(nranks))
    return Error(Code::kInvalidUsage, "rendezvous table has " + std::to_string(n) + " ranks");
  if (n == 0 || n > kMaxSlots) return CorruptData("rendezvous table of " + std::to_string(n) + " ranks");
  std::vector<RankInfo> out(n);
  for (auto& ri : out) SPARROW_RETURN_IF_ERROR(get_info(r, &ri));
  return out;
}
}  // namespace

Result<std::vector<RankInfo>> exchange(const IdData& id, int rank, int nranks, const RankInfo& me,
                                       transport::Deadline d, int slots) {
  if (slots == 0) slots = nranks;
  std::vector<uint8_t> reg;
  bits::put_u32(reg, uint32_t(rank));
  bits::put_u32(reg, uint32_t(nranks));
  bits::put_u32(reg, uint32_t(slots));
  put_info(reg, me);
  auto t = ask_store(id, rank, kSubRegister, reg, d);
  if (!t.ok()) return std::move(t).take_status().context("waiting for all " + std::to_string(nranks) + " ranks to join");
  return parse_table(t.value(), slots);
}

// A reply of ok_table or error_table: its value, or the store's message as kInvalidUsage.
Result<uint32_t> parse_value(const std::vector<uint8_t>& bytes) {
  bits::ByteReader r(bytes, "rendezvous store's answer");
  uint32_t status, v;
  SPARROW_RETURN_IF_ERROR(r.u32(&status));
  if (status != 0) {
    std::string msg;
    SPARROW_RETURN_IF_ERROR(get_str(r, &msg));
    return Error(Code::kInvalidUsage, msg);
  }
  SPARROW_RETURN_IF_ERROR(r.u32(&v));
  return v;
}

Result<int> claim_slot(const IdData& id, int ttl_ms, transport::Deadline d) {
  std::vector<uint8_t> req;
  bits::put_u32(req, uint32_t(std::max(ttl_ms, 0)));
  auto t = ask_store(id, -1, kSubClaim, req, d);
  if (!t.ok()) return std::move(t).take_status().context("asking the rendezvous store for a free slot");
  SPARROW_ASSIGN_OR_RETURN(uint32_t slot, parse_value(t.value()));
  return int(slot);
}

SlotBoard::SlotBoard(IdData id) : id_(std::move(id)) {}

SlotBoard::~SlotBoard() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SlotBoard::publish(std::vector<int> free_slots) {
  std::lock_guard<std::mutex> lk(mu_);
  if (free_slots == last_ || gave_up_) return;
  last_ = std::move(free_slots);
  has_pending_ = true;
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  cv_.notify_all();
}

void SlotBoard::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || has_pending_; });
    if (stop_) return;
    std::vector<uint8_t> msg;
    bits::put_u32(msg, uint32_t(last_.size()));
    for (int s : last_) bits::put_u32(msg, uint32_t(s));
    has_pending_ = false;
    lk.unlock();
    auto t = ask_store(id_, 0, kSubFree, msg, transport::deadline_in(5));
    Status s = t.ok() ? parse_value(t.value()).status() : t.status();
    lk.lock();
    if (!s.ok()) {
      // The store went with the process that made the id: joiners must name their slot.
      SPARROW_INFO("rank 0 could not list the free slots at the rendezvous store (%s): joiners must name their "
                   "slot from now on", s.to_string().c_str());
      gave_up_ = true;
      return;
    }
  }
}

Result<std::vector<RankInfo>> lookup(const IdData& id, int rank, transport::Deadline d) {
  auto t = ask_store(id, rank, kSubLookup, {0}, d);
  if (!t.ok()) return std::move(t).take_status().context("looking up the communicator to join");
  return parse_table(t.value(), 0);
}

}  // namespace sparrow::bootstrap
