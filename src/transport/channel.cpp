#include "transport/channel.h"

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/params.h"

namespace sparrow::transport {
namespace {
params::IntParam kStripe("STRIPE_BYTES", 512 << 10, "Fragment size when striping a message over streams.",
                         4 << 10, 64 << 20);
constexpr uint64_t kMaxMessage = 1ull << 40;
}  // namespace

size_t stripe_bytes() { return size_t(kStripe.get()); }

// ---- Notifier ----------------------------------------------------------------------------------------

uint64_t Notifier::generation() const {
  std::lock_guard<std::mutex> lk(mu_);
  return gen_;
}

void Notifier::bump() {
  std::lock_guard<std::mutex> lk(mu_);
  ++gen_;
  cv_.notify_all();
}

uint64_t Notifier::wait(uint64_t seen, Deadline d) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_until(lk, d, [&] { return gen_ != seen; });
  return gen_;
}

// ---- Mailbox ----------------------------------------------------------------------------------------

Result<uint8_t*> Mailbox::frame_begin(Conn* c, const FrameHeader& h) {
  std::lock_guard<std::mutex> lk(mu_);
  if (h.total > kMaxMessage) return CorruptData("message of " + std::to_string(h.total) + " bytes exceeds the limit");
  auto [it, fresh] = entries_.try_emplace(h.key);
  Entry& e = it->second;
  if (fresh) {
    e.total = h.total;
    e.own.resize(h.total);
  } else if (e.total != h.total && e.ext && e.claimed == 0) {
    // A receiver waits for `k` in its own buffer, but the message has another length (an abort frame
    // in place of a segment): it lands here instead, and the receiver sees its length.
    e.ext = nullptr;
    e.total = h.total;
    e.own.resize(h.total);
  } else if (e.total != h.total) {
    return CorruptData("fragments of one message disagree on its length");
  }
  if (h.offset + h.len > e.total || e.claimed + h.len > e.total)
    return CorruptData("fragment beyond the end of its message (duplicate or corrupt)");
  e.claimed += h.len;
  if (c) inflight_[c] = InFlight{h.key, h.len};
  return e.dest() + h.offset;
}

void Mailbox::frame_end(Conn* c, const FrameHeader& h) {
  if (frame_end_locked(c, h) && notify_) notify_->bump();  // outside mu_: the notifier's waiter takes it next
}

bool Mailbox::frame_end_locked(Conn* c, const FrameHeader& h) {
  std::lock_guard<std::mutex> lk(mu_);
  if (c) inflight_.erase(c);
  auto it = entries_.find(h.key);
  if (it == entries_.end()) return false;
  Entry& e = it->second;
  e.got += h.len;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  Traffic& tr = traffic_[h.key.seq];
  tr.bytes += h.len;
  if (c) tr.streams |= uint64_t(1) << std::min(std::max(c->stream(), 0), 63);
  if (tr.first_ns < 0) tr.first_ns = now;
  tr.last_ns = now;
  if (traffic_.size() > 256) traffic_.erase(traffic_.begin());
  if (e.ext && e.claimed == e.got) cv_.notify_all();  // recv_into giving up waits for frames in flight
  if (e.got == e.total) {
    cv_.notify_all();
    return true;
  }
  return false;
}

void Mailbox::conn_failed(Conn* c, const Status& why) {
  {
    // The frame this connection was writing will never end, and nothing more is written into it
    // (FrameSink's promise): its bytes no longer count as being written. The message stays
    // incomplete, so nobody takes it.
    std::lock_guard<std::mutex> lk(mu_);
    auto f = inflight_.find(c);
    if (f != inflight_.end()) {
      auto it = entries_.find(f->second.key);
      if (it != entries_.end()) it->second.claimed -= f->second.len;
      inflight_.erase(f);
      cv_.notify_all();
    }
  }
  if (why.code() == Code::kPeerLost && streams_ > 1) {
    std::lock_guard<std::mutex> lk(mu_);
    closed_.insert(c);
    if (int(closed_.size()) < streams_ && !any_close_fails_) return;
  }
  fail(why);
}

size_t Mailbox::closed_streams() const {
  std::lock_guard<std::mutex> lk(mu_);
  return closed_.size();
}

void Mailbox::fail_on_any_close(bool on) {
  bool fail_now;
  {
    std::lock_guard<std::mutex> lk(mu_);
    any_close_fails_ = on;
    fail_now = on && !closed_.empty();
  }
  if (fail_now) fail(Status(Code::kPeerLost, peer_desc_ + " closed one of its connections"));
}

void Mailbox::set_stall_handler(std::function<void()> h) {
  std::lock_guard<std::mutex> lk(mu_);
  on_stall_ = std::move(h);
}

void Mailbox::fail(const Status& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_.ok()) failed_ = why.ok() ? Status(Code::kInternalError, "mailbox failed") : why;
    cv_.notify_all();
  }
  if (notify_) notify_->bump();
}

Status Mailbox::failure() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failed_;
}

Mailbox::Traffic Mailbox::traffic(uint64_t seq_lo, uint64_t seq_hi) const {
  std::lock_guard<std::mutex> lk(mu_);
  Traffic t;
  for (auto it = traffic_.lower_bound(seq_lo); it != traffic_.end() && it->first <= seq_hi; ++it) {
    t.bytes += it->second.bytes;
    t.streams |= it->second.streams;
    if (it->second.first_ns >= 0 && (t.first_ns < 0 || it->second.first_ns < t.first_ns)) t.first_ns = it->second.first_ns;
    t.last_ns = std::max(t.last_ns, it->second.last_ns);
  }
  return t;
}

size_t Mailbox::discard_before(uint64_t comm, uint64_t seq, uint32_t keep_sub) {
  std::lock_guard<std::mutex> lk(mu_);
  return discard_locked(comm, seq, [&](uint32_t sub) { return sub != keep_sub; });
}

size_t Mailbox::discard_sub_before(uint64_t comm, uint64_t seq, uint32_t only_sub) {
  std::lock_guard<std::mutex> lk(mu_);
  return discard_locked(comm, seq, [&](uint32_t sub) { return sub == only_sub; });
}

size_t Mailbox::discard_locked(uint64_t comm, uint64_t seq, const std::function<bool(uint32_t sub)>& which) {
  size_t n = 0;
  for (auto it = entries_.lower_bound(MsgKey{comm, 0, 0}); it != entries_.end() && it->first.comm == comm && it->first.seq < seq;) {
    const Entry& e = it->second;
    if (e.got == e.total && e.claimed == e.got && !e.ext && which(it->first.sub)) {  // whole, not being written
      it = entries_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

Status Mailbox::wait_locked(std::unique_lock<std::mutex>& lk, const MsgKey& k, Deadline d) {
  while (true) {
    auto it = entries_.find(k);
    if (it != entries_.end() && it->second.got == it->second.total) return Status::Ok();
    if (!failed_.ok()) return failed_;
    if (cv_.wait_until(lk, d) == std::cv_status::timeout) {
      it = entries_.find(k);
      if (it != entries_.end() && it->second.got == it->second.total) return Status::Ok();
      return Status(Code::kTimeout, "no " + describe_key(k) + " from " + peer_desc_ + " before the timeout");
    }
  }
}

Result<std::vector<uint8_t>> Mailbox::recv(const MsgKey& k, Deadline d) {
  std::unique_lock<std::mutex> lk(mu_);
  SPARROW_RETURN_IF_ERROR(wait_locked(lk, k, d));
  auto it = entries_.find(k);
  std::vector<uint8_t> out = std::move(it->second.own);
  if (it->second.ext) out.assign(it->second.ext, it->second.ext + it->second.total);
  entries_.erase(it);
  return out;
}

Status Mailbox::recv_into(const MsgKey& k, void* dst, size_t len, Deadline d, std::vector<uint8_t>* other) {
  std::unique_lock<std::mutex> lk(mu_);
  auto [it, fresh] = entries_.try_emplace(k);
  if (fresh) {
    // Nothing arrived yet: frames will land in the caller's buffer directly.
    it->second.total = len;
    it->second.ext = static_cast<uint8_t*>(dst);
  }
  Status s = wait_locked(lk, k, d);
  if (!s.ok()) {
    release_caller_buffer(lk, k);
    return s;
  }
  it = entries_.find(k);
  Entry& e = it->second;
  if (e.total != len && other && e.total > 0 && !e.ext) {
    *other = std::move(e.own);
    entries_.erase(it);
    return Status::Ok();
  }
  if (e.total != len) {
    const uint64_t total = e.total;  // (e is gone with the erase)
    entries_.erase(it);
    return Error(Code::kInvalidUsage, "message from " + peer_desc_ + " has " + std::to_string(total) +
                                          " bytes, the receiver expected " + std::to_string(len));
  }
  if (!e.ext) memcpy(dst, e.own.data(), len);
  entries_.erase(it);
  return Status::Ok();
}

void Mailbox::release_caller_buffer(std::unique_lock<std::mutex>& lk, const MsgKey& k) {
  // The caller's buffer must not be written after we return: drop the registration only once no
  // frame is being written into it (claimed == got: each such frame ends, or its connection fails
  // and conn_failed releases it). A live peer finishes a frame in moments; one stalled mid-frame
  // past kWriteGrace has its connections closed (the stall handler), which ends the wait.
  // Fragments that landed already move to the entry's own buffer, where the rest of the message
  // lands too: the message is whole for the next receive (dropping them lost it for good, and a
  // relay's child waited out its patience for a part its parent had sent just as it gave up once).
  constexpr auto kWriteGrace = std::chrono::seconds(5);
  auto e = entries_.find(k);
  if (e == entries_.end() || !e->second.ext) return;
  auto idle = [&] { return e->second.claimed == e->second.got; };
  if (!cv_.wait_for(lk, kWriteGrace, idle)) {
    std::function<void()> stall = on_stall_;
    SPARROW_WARN("%s stalled in the middle of %s; closing its connections", peer_desc_.c_str(), describe_key(k).c_str());
    lk.unlock();
    if (stall) stall();
    lk.lock();
    if (!cv_.wait_for(lk, kWriteGrace, idle))
      SPARROW_WARN("%s is still writing %s into a receive that gave up", peer_desc_.c_str(), describe_key(k).c_str());
  }
  Entry& en = e->second;
  if (en.got == 0 || !failed_.ok()) {
    entries_.erase(e);
  } else {
    en.own.assign(en.ext, en.ext + en.total);
    en.ext = nullptr;
  }
}

// ---- SendRequest ------------------------------------------------------------------------------------

void SendRequest::fragment_done(const Status& s) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!s.ok() && status_.ok()) status_ = s;
  if (left_ > 0) --left_;
  if (left_ == 0) cv_.notify_all();
}

bool SendRequest::done() const {
  std::lock_guard<std::mutex> lk(mu_);
  return left_ == 0;
}

Status SendRequest::wait(Deadline d) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_until(lk, d, [&] { return left_ == 0; }))
    return Status(Code::kTimeout, "send did not complete before the timeout");
  return status_;
}

// ---- Channel ----------------------------------------------------------------------------------------

Channel::Channel(std::vector<ConnPtr> conns) : in_(std::make_shared<Inner>()) {
  in_->conns = std::move(conns);
  in_->low_water = 2 * stripe_bytes();
}

Channel::~Channel() { close(); }

size_t Channel::streams() const { return in_->conns.size(); }

void Channel::close() {
  for (auto& c : in_->conns) c->close();
  std::deque<Frag> dropped;
  {
    std::lock_guard<std::mutex> lk(in_->mu);
    dropped.swap(in_->pending);
  }
  for (auto& f : dropped) f.req->fragment_done(Status(Code::kInternalError, "channel closed"));
}

SendRequestPtr Channel::send(const MsgKey& k, Payload p, size_t max_streams) {
  const size_t stripe = stripe_bytes();
  size_t nfrag = p.len == 0 ? 1 : (p.len + stripe - 1) / stripe;
  auto req = std::make_shared<SendRequest>(nfrag);
  {
    std::lock_guard<std::mutex> lk(in_->mu);
    for (size_t i = 0; i < nfrag; ++i) {
      Frag f;
      f.h.key = k;
      f.h.frag = uint32_t(i);
      f.h.offset = i * stripe;
      f.h.total = p.len;
      f.h.len = uint32_t(std::min(stripe, p.len - std::min(p.len, i * stripe)));
      f.p = Payload{p.data + f.h.offset, f.h.len, p.keepalive};
      f.req = req;
      f.streams = max_streams;
      in_->pending.push_back(std::move(f));
    }
  }
  in_->pump();
  return req;
}

void Channel::Inner::pump() {
  // Hand fragments to every connection whose queue is below the low-water mark. Sends happen outside
  // the lock (a failed send completes inline), and re-entrant calls just ask the running one to loop.
  {
    std::lock_guard<std::mutex> lk(mu);
    if (pumping) {
      again = true;
      return;
    }
    pumping = true;
  }
  auto self = shared_from_this();
  while (true) {
    std::vector<std::pair<Conn*, Frag>> out;
    {
      std::lock_guard<std::mutex> lk(mu);
      std::vector<size_t> queued(conns.size());
      for (size_t i = 0; i < conns.size(); ++i) queued[i] = conns[i]->queued_bytes();
      while (!pending.empty() && !conns.empty()) {
        // The least-queued connection; ties rotate, so that small messages, which leave the queues
        // empty, still spread over every stream (each stream's congestion window and pacing rate
        // then carries a share, instead of one stream carrying everything).
        const size_t all = conns.size(), lim = pending.front().streams;
        const size_t n = lim > 0 && lim < all ? lim : all;
        size_t best = next % n;
        for (size_t j = 1; j < n; ++j) {
          size_t i = (next + j) % n;
          if (queued[i] < queued[best]) best = i;
        }
        next = best + 1;
        if (queued[best] >= low_water) break;
        queued[best] += pending.front().h.len + kFrameHeaderBytes;
        out.emplace_back(conns[best].get(), std::move(pending.front()));
        pending.pop_front();
      }
      if (out.empty()) {
        if (!again) {
          pumping = false;
          return;
        }
      }
      again = false;
    }
    for (auto& [c, f] : out) {
      SendRequestPtr req = f.req;
      c->send(f.h, f.p, [self, req](const Status& s) {
        req->fragment_done(s);
        self->pump();
      });
    }
  }
}

}  // namespace sparrow::transport
