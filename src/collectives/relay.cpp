#include "collectives/relay.h"

#include <algorithm>

#include "collectives/root_watch.h"
#include "core/log.h"

namespace sparrow::coll {

namespace {
// A fixed communicator's: nobody replaces a parent.
class NoFailover final : public Failover {
 public:
  explicit NoFailover(const OpWire& w) : deadline_(w.deadline) {}
  transport::Deadline part_deadline(const Upstream&) const override { return deadline_; }
  bool held(const Upstream&, const Status&) override { return false; }
  void part_came(const Upstream&) override {}
  int replace(const Upstream&, uint32_t, const Status&) override { return -1; }
  double brief_s() const override { return 0; }

 private:
  transport::Deadline deadline_;
};
}  // namespace

std::unique_ptr<Failover> no_failover(const OpWire& w) { return std::make_unique<NoFailover>(w); }

Status Relay::pass_down(uint32_t sub, Status why) {
  if (!out_.children().empty()) {
    Status down(why.code(), "rank " + std::to_string(w_.net.rank()) + " (on the way from the root) lost its parent, rank " +
                                std::to_string(parent_) + ": " + why.message());
    out_.send(sub, share(abort_frame(down)));
  }
  return why;
}

void Relay::attach(int parent, std::vector<int> children, std::unique_ptr<Failover> failover, std::vector<int> adoptable) {
  parent_ = parent;
  out_.set_children(std::move(children));
  failover_ = std::move(failover);
  adoptable_ = std::move(adoptable);
}

void Relay::preconnect(transport::Deadline d) {
  out_.preconnect(d);
  const auto brief = std::min(d, transport::deadline_in(failover_->brief_s()));
  for (int r : adoptable_)
    if (r > w_.net.rank()) (void)w_.net.connect(r, brief);
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

transport::Deadline Relay::part_deadline() { return failover_->part_deadline(upstream()); }

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
  while (!r.ok() && failover_->held(upstream(), status_of(r))) r = get();
  if (r.ok()) {
    failover_->part_came(upstream());
    return r;
  }
  for (int p; !r.ok() && (p = failover_->replace(upstream(), sub, status_of(r))) >= 0;) {
    parent_ = p;
    r = get();  // (the root sends the rest whole again)
  }
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
