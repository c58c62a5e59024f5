#include "transport/loopback/loopback.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace sparrow::transport {
namespace {

class LoopBackend;

std::mutex g_mu;
std::map<std::string, LoopBackend*> g_listeners;
std::atomic<int> g_next{1};

class LoopConn : public Conn, public std::enable_shared_from_this<LoopConn> {
 public:
  LoopConn(LoopBackend* owner, int peer_rank, int stream, std::string addr)
      : owner_(owner), peer_rank_(peer_rank), stream_(stream), addr_(std::move(addr)) {}
  void send(const FrameHeader& h, Payload p, SendDone done) override;
  size_t queued_bytes() const override { return queued_.load(); }
  void close() override;
  int peer_rank() const override { return peer_rank_; }
  std::string peer_address() const override { return addr_; }
  int stream() const override { return stream_; }
  void fail(const Status& why);
  // Hands one frame to the sink unless the connection failed (false: frame_begin refused it).
  bool deliver(const FrameHeader& h, const std::vector<uint8_t>& data, Status* refused);

  LoopBackend* owner_;
  std::weak_ptr<LoopConn> peer_;
  FrameSink* sink = nullptr;
  int peer_rank_, stream_;
  std::string addr_;
  std::atomic<size_t> queued_{0};
  std::atomic<bool> failed_{false};
  // Held while a frame is handed to the sink, and by fail() before it tells the sink: once
  // conn_failed runs, no frame of this connection is being written (FrameSink's promise).
  std::mutex deliver_mu_;
};

struct Delivery {
  std::shared_ptr<LoopConn> to;
  FrameHeader h;
  std::vector<uint8_t> data;
  std::shared_ptr<LoopConn> from;
  SendDone done;  // runs once delivered (or dropped), after the sender's queue shrank
};

class LoopBackend : public Backend {
 public:
  explicit LoopBackend(const BackendOptions& o) : opt_(o) {
    thread_ = std::thread([this] { run(); });
  }
  ~LoopBackend() override {
    {
      std::lock_guard<std::mutex> lk(g_mu);
      if (!address_.empty()) g_listeners.erase(address_);
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
    for (auto& d : q_)
      if (d.done) d.done(Status(Code::kInternalError, "transport shut down"));
    q_.clear();
    abort(Status(Code::kInternalError, "transport shut down"));
  }
  const char* name() const override { return "loopback"; }
  Result<std::string> listen(AcceptHandler on_accept) override {
    on_accept_ = std::move(on_accept);
    std::lock_guard<std::mutex> lk(g_mu);
    address_ = "loop:" + std::to_string(g_next++);
    g_listeners[address_] = this;
    return address_;
  }
  Result<ConnPtr> connect(const std::string& address, int peer_rank, int stream, FrameSink* sink, Deadline d) override {
    std::lock_guard<std::mutex> lk(g_mu);  // keeps the target alive while we attach
    auto it = g_listeners.find(address);
    if (it == g_listeners.end()) return Error(Code::kPeerLost, "no loopback peer at " + address);
    LoopBackend* other = it->second;
    if (other->opt_.identity.comm_id != opt_.identity.comm_id || other->opt_.identity.secret != opt_.identity.secret)
      return Error(Code::kAuthError, "loopback peer at " + address + " belongs to another communicator");
    if (other->opt_.identity.rank != peer_rank)
      return Error(Code::kAuthError, "loopback peer at " + address + " is rank " + std::to_string(other->opt_.identity.rank));
    auto mine = std::make_shared<LoopConn>(this, peer_rank, stream, address);
    auto theirs = std::make_shared<LoopConn>(other, opt_.identity.rank, stream, address_.empty() ? "loop:client" : address_);
    mine->peer_ = theirs;
    theirs->peer_ = mine;
    mine->sink = sink;
    FrameSink* s = other->on_accept_ ? other->on_accept_(theirs) : nullptr;
    if (!s) return Error(Code::kAuthError, "loopback peer at " + address + " refused the connection");
    theirs->sink = s;
    add(mine);
    other->add(theirs);
    return ConnPtr(mine);
  }
  void abort(const Status& why) override {
    std::vector<std::shared_ptr<LoopConn>> cs;
    {
      std::lock_guard<std::mutex> lk(mu_);
      cs = conns_;
    }
    for (auto& c : cs) c->close();
  }
  void add(const std::shared_ptr<LoopConn>& c) {
    std::lock_guard<std::mutex> lk(mu_);
    conns_.push_back(c);
  }
  void enqueue(Delivery d) {
    std::lock_guard<std::mutex> lk(mu_);
    q_.push_back(std::move(d));
    cv_.notify_all();
  }
  void set_faults(const LoopbackFaults& f) {
    std::lock_guard<std::mutex> lk(mu_);
    faults_ = f;
    cv_.notify_all();
  }
  bool take_send_error() {
    std::lock_guard<std::mutex> lk(mu_);
    bool e = faults_.error_next_send;
    faults_.error_next_send = false;
    return e;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return stop_ || (!q_.empty() && !faults_.stall); });
      if (stop_) return;
      Delivery d = std::move(q_.front());
      q_.pop_front();
      int delay = faults_.delay_us;
      bool drop_all = false;
      if (faults_.fail_after_frames == 0) {
        drop_all = true;
        faults_.fail_after_frames = -1;
      } else if (faults_.fail_after_frames > 0) {
        --faults_.fail_after_frames;
      }
      auto conns = conns_;
      lk.unlock();
      if (d.from) d.from->queued_ -= d.data.size();
      if (drop_all) {
        if (d.done) d.done(Error(Code::kPeerLost, "loopback fault: connection dropped"));
        for (auto& c : conns) {
          c->fail(Error(Code::kPeerLost, "loopback fault: connection to rank " + std::to_string(c->peer_rank()) + " dropped"));
          if (auto p = c->peer_.lock()) p->fail(Error(Code::kPeerLost, "loopback fault: connection dropped by the peer"));
        }
      } else {
        if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));  // injected latency
        if (d.done) d.done(d.to->failed_ ? Error(Code::kPeerLost, "loopback connection closed") : Status::Ok());
        Status refused;
        if (!d.to->deliver(d.h, d.data, &refused)) d.to->fail(refused);
      }
      lk.lock();
    }
  }

  BackendOptions opt_;
  std::string address_;
  AcceptHandler on_accept_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delivery> q_;
  std::vector<std::shared_ptr<LoopConn>> conns_;
  LoopbackFaults faults_;
  bool stop_ = false;
  std::thread thread_;
};

void LoopConn::send(const FrameHeader& h, Payload p, SendDone done) {
  auto peer = peer_.lock();
  if (failed_ || !peer || peer->failed_) {
    done(Error(Code::kPeerLost, "loopback connection to rank " + std::to_string(peer_rank_) + " is closed"));
    return;
  }
  if (owner_->take_send_error()) {
    done(Error(Code::kSystemError, "loopback fault: injected send error"));
    return;
  }
  Delivery d;
  d.to = peer;
  d.h = h;
  d.data.assign(p.data, p.data + p.len);
  queued_ += p.len;
  d.from = shared_from_this();
  d.done = std::move(done);
  peer->owner_->enqueue(std::move(d));
}

void LoopConn::close() {
  fail(Status(Code::kInternalError, "connection closed locally"));
  if (auto p = peer_.lock()) p->fail(Error(Code::kPeerLost, "loopback connection to rank " + std::to_string(p->peer_rank_) + " closed by the peer"));
}

bool LoopConn::deliver(const FrameHeader& h, const std::vector<uint8_t>& data, Status* refused) {
  std::lock_guard<std::mutex> lk(deliver_mu_);
  if (failed_) return true;
  auto dst = sink->frame_begin(this, h);
  if (!dst.ok()) {
    *refused = dst.status();
    return false;
  }
  if (h.len) memcpy(dst.value(), data.data(), h.len);
  sink->frame_end(this, h);
  return true;
}

void LoopConn::fail(const Status& why) {
  bool was = failed_.exchange(true);
  if (was || !sink) return;
  std::lock_guard<std::mutex> lk(deliver_mu_);  // a frame being handed over ends first
  sink->conn_failed(this, why);
}

}  // namespace

Result<std::unique_ptr<Backend>> make_loopback_backend(const BackendOptions& o) {
  return std::unique_ptr<Backend>(new LoopBackend(o));
}

bool set_loopback_faults(const std::string& address, const LoopbackFaults& f) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_listeners.find(address);
  if (it == g_listeners.end()) return false;
  it->second->set_faults(f);
  return true;
}

}  // namespace sparrow::transport
