#include "collectives/relay.h"

#include <algorithm>
#include <chrono>

#include "collectives/root_watch.h"
#include "core/log.h"
#include "core/params.h"

namespace sparrow::coll {



Status Relay::pass_down(uint32_t sub, Status why) {
  if (!out_.children().empty()) {
    Status down(why.code(), "rank " + std::to_string(w_.net.rank()) + " (on the way from the root) lost its parent, rank " +
                                std::to_string(parent_) + ": " + why.message());
    out_.send(sub, share(abort_frame(down)));
  }
  return why;
}

void Relay::attach_elastic(int parent, std::vector<int> children, int root, double lease_s, double patience_s,
                           int adopter, std::vector<int> adoptable) {
  parent_ = parent;
  out_.set_children(std::move(children));
  root_ = root;
  lease_s_ = lease_s;
  patience_s_ = patience_s;
  adopter_ = adopter;
  adoptable_ = std::move(adoptable);
}

double Relay::adopt_wait_s() const { return std::min(0.5, patience_s_ / 2); }

void Relay::preconnect(transport::Deadline d) {
  out_.preconnect(d);
  const auto brief = std::min(d, transport::deadline_in(adopt_wait_s()));
  for (int r : adoptable_)
    if (r > w_.net.rank()) (void)w_.net.connect(r, brief);
}

bool Relay::ask_adopter(uint32_t sub, const Status& why) {
  const int a = adopter_;
  adopter_ = -1;  // asked once
  if (root_ < 0 || a < 0 || parent_ == root_ || parent_ == a || reattached_) return false;
  hold_children();  // (before the wait: the children's patience is shorter than the asking)
  const auto by = transport::deadline_in(adopt_wait_s());
  const Frame rq = share(reattach_request(sub));
  auto asked = w_.net.send(a, w_.key(kAdoptSub), transport::Payload{rq->data(), rq->size(), rq}, by);
  if (!asked.ok()) {
    SPARROW_INFO("rank %d: could not ask rank %d, of its region, to adopt it in operation %llu (%s); asking the root",
                 w_.net.rank(), a, (unsigned long long)w_.seq, asked.status().message().c_str());
    return false;
  }
  auto yes = w_.recv(a, kAdoptSub, by);
  if (!yes.ok()) {
    SPARROW_INFO("rank %d: rank %d, of its region, did not adopt it in operation %llu within %.0f ms (it has "
                 "finished its part, or is stalled too); asking the root", w_.net.rank(), a,
                 (unsigned long long)w_.seq, adopt_wait_s() * 1e3);
    return false;
  }
  SPARROW_INFO("rank %d: parent rank %d failed in operation %llu while part %u was awaited (%s); rank %d, of its "
               "region, adopted it", w_.net.rank(), parent_, (unsigned long long)w_.seq, sub, why.message().c_str(), a);
  parent_ = a;
  holds_taken_ = 0;
  return true;
}

void Relay::serve_adoptions() {
  std::lock_guard<std::mutex> lk(serve_mu_);
  for (auto it = adoptable_.begin(); it != adoptable_.end();) {
    const int r = *it;
    auto rq = w_.net.poll(r, w_.key(kAdoptSub));  // (no connecting: preconnect did)
    auto from = rq.ok() ? decode_reattach(rq.value()) : Result<uint32_t>(rq.status());
    if (!from.ok()) {
      ++it;
      continue;
    }
    std::vector<std::pair<uint32_t, transport::Payload>> backlog;
    for (auto& [sub, p] : kept_)
      if (sub >= from.value()) backlog.emplace_back(sub, p);
    (void)w_.send({r}, kAdoptSub, share(std::vector<uint8_t>{1}));  // first: not behind the backlog
    out_.adopt(r, backlog);
    SPARROW_INFO("rank %d adopted rank %d in operation %llu: parts %u.. (%zu sent now)", w_.net.rank(), r,
                 (unsigned long long)w_.seq, from.value(), backlog.size());
    it = adoptable_.erase(it);
  }
}

void Relay::start_server() {
  if (adoptable_.empty() || server_.joinable()) return;
  server_ = std::thread([this] {
    auto& arrivals = w_.net.arrivals();
    while (!stop_server_.load()) {
      const uint64_t seen = arrivals.generation();  // before looking: nothing arriving meanwhile is missed
      serve_adoptions();
      {
        std::lock_guard<std::mutex> lk(serve_mu_);
        if (adoptable_.empty()) return;
      }
      arrivals.wait(seen, w_.deadline);
      if (transport::Clock::now() >= w_.deadline) return;
    }
  });
}

bool Relay::may_adopt() const {
  std::lock_guard<std::mutex> lk(serve_mu_);
  return !adoptable_.empty();
}

void Relay::stop_server() {
  if (!server_.joinable()) return;
  stop_server_ = true;
  w_.net.arrivals().bump();
  server_.join();
}

void Relay::finish() {
  stop_server();
  out_.finish();
}

Relay::~Relay() { stop_server(); }

void Relay::forward(uint32_t sub, const transport::Payload& p, const Frame& owner) {
  std::lock_guard<std::mutex> lk(serve_mu_);  // an adoption sees the part either kept or sent to it
  if (owner) out_.send(sub, owner);
  else out_.send_borrowed(sub, p.data, p.len);
  if (!adoptable_.empty() && sub != 0) kept_.emplace_back(sub, p);
}

Result<std::vector<uint8_t>> Relay::recv_serving(uint32_t sub, transport::Deadline d) {
  if (adoptable_.empty()) return w_.recv(parent_, sub, d);
  // The connection first, by `d` as any receive: a poll connects to nobody (a lower rank's connecting
  // with a deadline already passed would fail, and a higher parent waits for it).
  SPARROW_RETURN_IF_ERROR(w_.net.connect(parent_, d));
  for (;;) {
    const uint64_t seen = w_.net.arrivals().generation();  // before looking: nothing arriving meanwhile is missed
    serve_adoptions();
    auto m = w_.net.poll(parent_, w_.key(sub));
    if (m.ok() || m.status().code() != Code::kTimeout || transport::Clock::now() >= d) return m;
    w_.net.arrivals().wait(seen, d);
  }
}

transport::Deadline Relay::part_deadline() const {
  if (root_ < 0) return w_.deadline;
  const double patience = got_part_ ? patience_s_ : patience_s_ + lease_s_ / 2;
  return std::min(w_.deadline, transport::deadline_in(parent_ == root_ ? lease_s_ : patience));
}

bool Relay::reattach(uint32_t sub, const Status& why) {
  if (root_ < 0 || parent_ == root_ || reattached_) return false;
  SPARROW_INFO("rank %d: parent rank %d failed in operation %llu while part %u was awaited (%s); re-attaching to "
               "the root, rank %d", w_.net.rank(), parent_, (unsigned long long)w_.seq, sub, why.message().c_str(),
               root_);
  if (!w_.send({root_}, kReattachSub, share(reattach_request(sub))).ok()) return false;
  parent_ = root_;
  reattached_ = true;
  hold_children();
  return true;
}

void Relay::hold_children() {
  if (out_.children().empty() || holds_sent_ >= kMaxHolds) return;
  out_.send(kHoldSub + holds_sent_++, share(std::vector<uint8_t>{1}));
}

bool Relay::take_hold() {
  if (root_ < 0 || parent_ == root_ || holds_taken_ >= kMaxHolds) return false;
  if (!w_.recv(parent_, kHoldSub + holds_taken_, transport::Clock::now()).ok()) return false;
  holds_taken_++;
  return true;
}

bool Relay::held(const Status& why) {
  if (why.code() != Code::kTimeout || !take_hold()) return false;
  const double wait_s = std::chrono::duration<double>(part_deadline() - transport::Clock::now()).count();
  SPARROW_INFO("rank %d: parent rank %d is re-attaching in operation %llu (it sent a hold); waiting for it up to "
               "%.1f s more", w_.net.rank(), parent_, (unsigned long long)w_.seq, wait_s);
  hold_children();
  return true;
}

void Relay::skip_holds() {
  while (take_hold()) {
  }
}

namespace {
const Status& status_of(const Status& s) { return s; }
template <class T>
Status status_of(const Result<T>& r) {
  return r.status();
}
}  // namespace

template <class Get>
auto Relay::with_failover(uint32_t sub, Get get) -> decltype(get()) {
  auto r = get();
  while (!r.ok() && held(status_of(r))) r = get();
  if (r.ok()) {
    skip_holds();
    return r;
  }
  if (ask_adopter(sub, status_of(r))) r = get();
  if (!r.ok() && reattach(sub, status_of(r))) r = get();  // the root sends the rest whole again
  return r;
}

Result<std::vector<uint8_t>> Relay::receive(uint32_t sub) {
  return with_failover(sub, [&] { return recv_serving(sub, part_deadline()); });
}

Result<Frame> Relay::next(uint32_t sub) { return forward_received(sub, receive(sub)); }

Result<Frame> Relay::header(int root) { return forward_received(0, recv_header(w_, parent_, root, part_deadline())); }

Result<Frame> Relay::forward_received(uint32_t sub, Result<std::vector<uint8_t>> m) {
  if (!m.ok()) return pass_down(sub, m.status());
  Frame f = share(std::move(m.value()));
  forward(sub, transport::Payload{f->data(), f->size(), f}, f);
  if (is_abort(*f)) return abort_status(*f);  // forwarded already: the subtree learns it too
  if (sub != 0) {
    bytes_ += f->size();
    got_part_ = true;
  }
  SPARROW_TRACE("operation %llu: part %u (%zu bytes) from rank %d, forwarded to %zu child(ren)",
                (unsigned long long)w_.seq, sub, f->size(), parent_, out_.children().size());
  return f;
}

Status Relay::next_into(uint32_t sub, uint8_t* dst, size_t n) {
  start_server();
  std::vector<uint8_t> other;  // not a segment: an abort frame from above (or junk)
  Status s = with_failover(sub, [&] {
    return w_.net.recv_into(parent_, w_.key(sub), dst, n, part_deadline(), &other);
  });
  if (!s.ok()) return pass_down(sub, std::move(s));
  if (!other.empty()) {
    Frame f = share(std::move(other));
    if (is_abort(*f)) {
      out_.send(sub, f);  // the subtree learns it too
      return abort_status(*f);
    }
    return pass_down(sub, CorruptData("part " + std::to_string(sub) + " of operation " + std::to_string(w_.seq) +
                                      " from rank " + std::to_string(parent_) + " has " + std::to_string(f->size()) +
                                      " bytes, not the " + std::to_string(n) + " of its segment"));
  }
  forward(sub, transport::Payload{dst, n, nullptr}, nullptr);
  bytes_ += n;
  got_part_ = true;
  SPARROW_TRACE("operation %llu: segment %u (%zu bytes) from rank %d, forwarded to %zu child(ren)",
                (unsigned long long)w_.seq, sub, n, parent_, out_.children().size());
  return Status::Ok();
}

}  // namespace sparrow::coll
