#include "transport/net.h"

#include <algorithm>
#include <thread>

#include "core/log.h"
#include "core/params.h"
#include "transport/socket.h"

namespace sparrow::transport {
namespace {
params::IntParam kStreams("NSTREAMS", 4, "Parallel connections per peer for bulk data (striping).", 1, 64);
}

int default_streams() { return int(kStreams.get()); }

Result<std::unique_ptr<Net>> Net::create(const Identity& id, int nranks, int nstreams, const std::string& backend,
                                       const std::string& bind_host) {
  if (nranks < 1 || id.rank < 0 || id.rank >= nranks) return InvalidArgument("rank out of range");
  std::unique_ptr<Net> n(new Net());
  n->rank_ = id.rank;
  n->nranks_ = nranks;
  n->nstreams_ = std::max(1, nstreams);
  n->addrs_.resize(nranks);
  n->accepted_.resize(nranks);
  n->chans_.resize(nranks);
  n->disconnected_.assign(size_t(nranks), 0);
  n->reversed_.assign(size_t(nranks), 0);
  n->fresh_.assign(size_t(nranks), 0);
  for (int r = 0; r < nranks; ++r) n->mail_.push_back(n->make_mailbox(r));
  n->sent_.resize(size_t(nranks));
  BackendOptions bo;
  bo.identity = id;
  bo.bind_host = bind_host;
  if (bo.bind_host.empty()) {
    SPARROW_ASSIGN_OR_RETURN(bo.bind_host, net::local_host());
  }
  if (backend.empty()) {
    SPARROW_ASSIGN_OR_RETURN(n->be_, create_configured_backend(bo));
  } else {
    SPARROW_ASSIGN_OR_RETURN(n->be_, create_backend(backend, bo));
  }
  Net* raw = n.get();
  SPARROW_ASSIGN_OR_RETURN(n->address_, n->be_->listen([raw](const ConnPtr& c) { return raw->on_accept(c); }));
  n->addrs_[id.rank] = n->address_;
  return n;
}

Net::~Net() {
  {
    // The backend's threads run until be_ goes: from here on on_accept refuses every connection (a
    // joiner's, arriving as the communicator is destroyed), so none of them reaches the slots being
    // torn down. (Clearing chans_ outside the lock let one index it: a SIGSEGV of the root,
    // 1 in 100 sparrow-fault-bench runs.)
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_.ok()) aborted_ = Status(Code::kInvalidUsage, "the communicator is being destroyed");
    for (auto& c : chans_)
      if (c) c->close();
    chans_.clear();
  }
  be_.reset();
}

std::string Net::desc(int peer) const {
  std::string a = peer < int(addrs_.size()) && !addrs_[peer].empty() ? " (" + addrs_[peer] + ")" : "";
  return "rank " + std::to_string(peer) + a;
}

void Net::set_addresses(std::vector<std::string> addrs) {
  std::lock_guard<std::mutex> lk(mu_);
  addrs_ = std::move(addrs);
}

// Only a slot this rank let go of (disconnect: its member was dropped) takes a new process: a member
// that merely lost its connections is still expected until the root drops it.
bool Net::revivable_locked(int peer) const { return elastic_ && disconnected_[size_t(peer)]; }

std::unique_ptr<Mailbox> Net::make_mailbox(int peer) {
  auto m = std::make_unique<Mailbox>(desc(peer), nstreams_, &arrivals_);
  const Mailbox* raw = m.get();
  m->set_stall_handler([this, peer, raw] { close_stalled(peer, raw); });
  return m;
}

void Net::close_stalled(int peer, const Mailbox* m) {
  std::lock_guard<std::mutex> lk(mu_);
  const size_t p = size_t(peer);
  if (mail_[p].get() != m) return;  // retired: its connections were closed when the slot was reset
  if (chans_[p]) chans_[p]->close();
  for (auto& c : accepted_[p])
    if (c) c->close();
}

void Net::reset_slot_locked(int peer, bool reversed, bool fresh) {
  const size_t p = size_t(peer);
  retired_mail_.push_back(std::move(mail_[p]));
  mail_[p] = make_mailbox(peer);
  if (joining_ && peer == 0) mail_[p]->fail_on_any_close(true);
  if (chans_[p]) {
    chans_[p]->close();
    retired_chans_.push_back(std::move(chans_[p]));
  }
  for (auto& c : accepted_[p])
    if (c) c->close();
  accepted_[p].clear();
  disconnected_[p] = 0;
  reversed_[p] = reversed;
  fresh_[p] = fresh;
  SPARROW_INFO("rank %d: %s starts afresh (a new or rejoined member)", rank_, desc(peer).c_str());
}

void Net::set_joiner() {
  std::lock_guard<std::mutex> lk(mu_);
  joiner_ = joining_ = true;
  mail_[0]->fail_on_any_close(true);
}

void Net::admitted() {
  std::lock_guard<std::mutex> lk(mu_);
  joining_ = false;
  mail_[0]->fail_on_any_close(false);
}

bool Net::incomplete_joiner(int peer) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (peer < 0 || peer >= nranks_ || !reversed_[size_t(peer)]) return false;
  if (mail_[size_t(peer)]->closed_streams() > 0) return true;
  return !chans_[size_t(peer)] && !all_streams_accepted_locked(peer);
}

bool Net::all_streams_accepted_locked(int peer) const {
  const auto& v = accepted_[size_t(peer)];
  return v.size() >= size_t(nstreams_) && std::find(v.begin(), v.end(), nullptr) == v.end();
}

FrameSink* Net::on_accept(const ConnPtr& c) {
  int p = c->peer_rank(), s = c->stream();
  std::lock_guard<std::mutex> lk(mu_);
  if (p < 0 || p >= nranks_ || p == rank_ || s < 0 || s >= nstreams_ || !aborted_.ok()) return nullptr;
  // A restarted member of an elastic communicator (it proved the secret) takes its slot afresh.
  if (revivable_locked(p)) reset_slot_locked(p, p > rank_, true);
  // Otherwise lower ranks connect to us (and a revived higher one), each stream once; in a fixed
  // communicator also a higher rank that waited a second for this one to connect (await_locked),
  // unless this rank has a channel to it or is dialling it: its streams are then the channel.
  if (p > rank_ && !reversed_[size_t(p)]) {
    if (elastic_ || joiner_ || chans_[size_t(p)] || connecting_.count(p)) return nullptr;
    reversed_[size_t(p)] = 1;
  }
  // A joiner connects again only after its previous attempt failed: start its slot over rather than
  // keep half of the old attempt's streams. That attempt may have had some streams refused (it came
  // before the slot was free) and the others accepted, then closed by the joiner: a stream of the
  // new attempt that arrives before any of those streams' number must not join them either.
  Mailbox& m = *mail_[size_t(p)];
  if (reversed_[size_t(p)] && ((size_t(s) < accepted_[p].size() && accepted_[p][size_t(s)]) ||
                               !m.failure().ok() || m.closed_streams() > 0))
    reset_slot_locked(p, true, true);
  auto& v = accepted_[p];
  if (v.size() < size_t(nstreams_)) v.resize(nstreams_);
  if (v[s]) return nullptr;
  v[s] = c;
  cv_.notify_all();
  return mail_[size_t(p)].get();
}

void Net::disconnect(int peer, const Status& why) {
  Mailbox* m;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (peer < 0 || peer >= nranks_ || peer == rank_) return;
    if (chans_[size_t(peer)]) chans_[size_t(peer)]->close();
    for (auto& c : accepted_[size_t(peer)])
      if (c) c->close();
    disconnected_[size_t(peer)] = 1;
    m = mail_[size_t(peer)].get();
  }
  m->fail(why);
}

void Net::revive(int peer, const std::string& address) {
  std::lock_guard<std::mutex> lk(mu_);
  if (peer < 0 || peer >= nranks_ || peer == rank_) return;
  const bool moved = addrs_[size_t(peer)] != address;
  addrs_[size_t(peer)] = address;
  // Connections the new process made into the free slot stay; anything else of the old one goes.
  if (fresh_[size_t(peer)]) fresh_[size_t(peer)] = 0;
  else if (moved || disconnected_[size_t(peer)] || !mail_[size_t(peer)]->failure().ok())
    reset_slot_locked(peer, false, false);
}

Result<std::vector<uint8_t>> Net::poll(int peer, const MsgKey& k) {
  if (peer < 0 || peer >= nranks_ || peer == rank_) return InvalidArgument("no such peer");
  return box(peer)->recv(k, Clock::now());
}

Result<Channel*> Net::channel(int peer, Deadline d, bool dial_back) {
  if (peer < 0 || peer >= nranks_ || peer == rank_)
    return InvalidArgument("no channel from rank " + std::to_string(rank_) + " to rank " + std::to_string(peer));
  std::unique_lock<std::mutex> lk(mu_);
  if (!aborted_.ok()) return aborted_;
  if (chans_[peer]) return chans_[peer].get();
  if ((rank_ < peer && !reversed_[size_t(peer)]) || (joiner_ && peer == 0)) return dial_locked(lk, peer, d);
  return await_locked(lk, peer, d, dial_back);
}

Result<Channel*> Net::dial_locked(std::unique_lock<std::mutex>& lk, int peer, Deadline d) {
  // Another thread may be connecting to this peer already: wait for it rather than race it.
  if (connecting_.count(peer)) {
    if (!cv_.wait_until(lk, d, [&] { return !connecting_.count(peer) || !aborted_.ok(); }))
      return Error(Code::kTimeout, "connecting to " + desc(peer) + " timed out");
    if (!aborted_.ok()) return aborted_;
    if (chans_[peer]) return chans_[peer].get();
  }
  connecting_.insert(peer);
  std::string addr = addrs_[peer];
  Mailbox* box = mail_[size_t(peer)].get();
  lk.unlock();
  if (addr.empty()) {
    lk.lock();
    connecting_.erase(peer);
    cv_.notify_all();
    return Error(Code::kInvalidUsage, "address of " + desc(peer) + " is unknown");
  }
  // The streams connect in parallel: each costs a TCP handshake and the authentication round trips,
  // which add up on a WAN.
  std::vector<Result<ConnPtr>> res(nstreams_, Status(Code::kInternalError, "not connected"));
  std::vector<std::thread> ts;
  for (int s = 0; s < nstreams_; ++s)
    ts.emplace_back([&, s] { res[s] = be_->connect(addr, peer, s, box, d); });
  for (auto& t : ts) t.join();
  std::vector<ConnPtr> conns;
  Status bad;
  for (auto& r : res) {
    if (r.ok()) conns.push_back(r.value());
    else if (bad.ok()) bad = r.status();
  }
  lk.lock();
  connecting_.erase(peer);
  cv_.notify_all();
  if (!bad.ok() || !aborted_.ok()) {
    for (auto& x : conns) x->close();
    if (!aborted_.ok()) return aborted_;
    return std::move(bad).context("rank " + std::to_string(rank_) + " connecting to " + desc(peer));
  }
  return install_locked(peer, std::move(conns));
}

Result<Channel*> Net::await_locked(std::unique_lock<std::mutex>& lk, int peer, Deadline d, bool dial_back) {
  auto ready = [&] { return !aborted_.ok() || chans_[peer] || all_streams_accepted_locked(peer); };
  // A lower rank connects; one that has not within a few seconds may never (it does not take part
  // in what this rank sends or awaits: its call named another root) and this rank dials it instead
  // (a fixed communicator; the lower rank takes those streams as the channel, on_accept). The wait
  // is long against a connection's set-up on a WAN (a few round trips), so that both ranks dialling
  // at once (the lower one refuses, and this rank's channel then fails) stays out of the normal
  // path. Refused or failed: its streams are awaited.
  constexpr auto kDialAfter = std::chrono::seconds(4);
  if (dial_back && !elastic_ && !joiner_ && !cv_.wait_until(lk, std::min(d, Clock::now() + kDialAfter), ready) &&
      Clock::now() < d && !connecting_.count(peer) && accepted_[size_t(peer)].empty()) {
    auto dialled = dial_locked(lk, peer, d);
    if (dialled.ok()) return dialled;
    SPARROW_TRACE("rank %d: dialling %s (it had not connected): %s", rank_, desc(peer).c_str(), dialled.status().message().c_str());
  }
  if (!cv_.wait_until(lk, d, ready))
    return Error(Code::kTimeout, desc(peer) + " did not connect to rank " + std::to_string(rank_) + " before the timeout");
  if (!aborted_.ok()) return aborted_;
  if (chans_[peer]) return chans_[peer].get();
  return install_locked(peer, accepted_[peer]);
}

Result<Channel*> Net::install_locked(int peer, std::vector<ConnPtr> conns) {
  const char* sealed = conns.empty() ? "off" : conns.front()->protection();
  chans_[peer] = std::make_unique<Channel>(std::move(conns));
  SPARROW_INFO("rank %d: channel to %s over %d %s stream(s), frames sealed: %s", rank_, desc(peer).c_str(), nstreams_,
               be_->name(), sealed);
  return chans_[peer].get();
}

Status Net::connect(int peer, Deadline d) {
  auto c = channel(peer, d, true);
  return c.ok() ? Status::Ok() : c.status();
}

Result<SendRequestPtr> Net::send(int peer, const MsgKey& k, Payload p, Deadline d, size_t max_streams) {
  SPARROW_ASSIGN_OR_RETURN(Channel * ch, channel(peer, d, true));
  Status f = box(peer)->failure();
  if (!f.ok()) return f;
  {
    std::lock_guard<std::mutex> lk(sent_mu_);
    auto& m = sent_[peer];
    m[k.seq] += p.len;
    if (m.size() > 256) m.erase(m.begin());
  }
  return ch->send(k, std::move(p), max_streams);
}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
}  // namespace

void Net::begin_traffic(uint64_t seq_lo, uint64_t seq_hi) {
  traffic_t0_ns_ = steady_ns();
  seq_lo_ = seq_lo;
  seq_hi_ = seq_hi;
}

Net::PeerTraffic Net::traffic(int peer) const {
  PeerTraffic t;
  const uint64_t lo = seq_lo_.load(), hi = seq_hi_.load();
  {
    std::lock_guard<std::mutex> lk(sent_mu_);
    const auto& m = sent_[peer];
    for (auto it = m.lower_bound(lo); it != m.end() && it->first <= hi; ++it) t.sent += it->second;
  }
  const Mailbox::Traffic m = box(peer)->traffic(lo, hi);
  t.received = m.bytes;
  t.streams = __builtin_popcountll(m.streams);
  const int64_t t0 = traffic_t0_ns_.load();
  if (m.first_ns >= 0) t.first_s = std::max(0.0, double(m.first_ns - t0) * 1e-9);
  if (m.last_ns >= 0) t.last_s = std::max(0.0, double(m.last_ns - t0) * 1e-9);
  return t;
}

uint64_t Net::bytes_sent() const {
  uint64_t n = 0;
  for (int r = 0; r < nranks_; ++r) n += traffic(r).sent;
  return n;
}

uint64_t Net::bytes_received() const {
  uint64_t n = 0;
  for (int r = 0; r < nranks_; ++r) n += traffic(r).received;
  return n;
}

Result<std::vector<uint8_t>> Net::recv(int peer, const MsgKey& k, Deadline d) {
  SPARROW_RETURN_IF_ERROR(connect(peer, d));
  return box(peer)->recv(k, d);
}

Status Net::recv_into(int peer, const MsgKey& k, void* dst, size_t len, Deadline d, std::vector<uint8_t>* other) {
  SPARROW_RETURN_IF_ERROR(connect(peer, d));
  return box(peer)->recv_into(k, dst, len, d, other);
}

void Net::abort(const Status& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_.ok()) aborted_ = why;
    cv_.notify_all();
  }
  std::vector<Mailbox*> boxes;
  for (int r = 0; r < nranks_; ++r) boxes.push_back(box(r));
  for (auto* m : boxes) m->fail(why);
  be_->abort(why);
}

Status Net::aborted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return aborted_;
}

}  // namespace sparrow::transport
