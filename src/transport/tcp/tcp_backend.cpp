#include "transport/tcp/tcp_backend.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <future>
#include <thread>
#include <unordered_map>

#include "core/affinity.h"
#include "core/log.h"
#include "core/params.h"
#include "transport/auth.h"
#include "transport/seal.h"
#include "transport/socket.h"

namespace sparrow::transport {
namespace {

constexpr size_t kMaxPending = 256;          // unauthenticated connections held at once
constexpr size_t kReadBudget = 16u << 20;    // bytes read from one socket per wakeup (fairness)
constexpr uint32_t kMaxFrame = 256u << 20;

class TcpBackend;

struct Handle {
  enum Kind { kListener, kWake, kPending, kConn } kind;
  explicit Handle(Kind k) : kind(k) {}
  virtual ~Handle() = default;
};

class TcpConn : public Conn, public Handle {
 public:
  TcpConn(TcpBackend* be, int fd, int rank, int stream, std::string addr, const auth::Handshake& hs)
      : Handle(kConn), be_(be), fd_(fd), rank_(rank), stream_(stream), addr_(std::move(addr)), tx_(hs.sender()),
        rx_(hs.receiver()) {}
  ~TcpConn() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void send(const FrameHeader& h, Payload p, SendDone done) override;
  size_t queued_bytes() const override { return queued_.load(std::memory_order_relaxed); }
  void close() override {
    std::lock_guard<std::mutex> lk(wmu_);
    closing_ = true;
    if (!failed_ && fd_ >= 0) shutdown(fd_, SHUT_RDWR);  // the progress thread sees it and cleans up
  }
  int peer_rank() const override { return rank_; }
  std::string peer_address() const override { return addr_; }
  int stream() const override { return stream_; }
  const char* protection() const override { return seal::mode_name(tx_ ? tx_->mode() : seal::Mode::kOff); }

  void set_sink(FrameSink* s) { sink_ = s; }
  int fd() const { return fd_; }
  // Progress thread:
  void on_readable();
  void on_writable() { flush(); }
  // Fails the connection once: queued sends complete with `why`, the sink hears of it.
  void fail(const Status& why);
  bool failed() const {
    std::lock_guard<std::mutex> lk(wmu_);
    return failed_;
  }
  Status closed_status() const {
    if (closing_) return Status(Code::kInternalError, "connection to " + desc() + " was closed locally");
    return Error(Code::kPeerLost, "connection to " + desc() + " closed by the peer");
  }
  std::string desc() const { return "rank " + std::to_string(rank_) + " (" + addr_ + ", stream " + std::to_string(stream_) + ")"; }

 private:
  // A frame on the wire: its header (sealed: the header's record and tag), payload, and (sealed)
  // the payload's tag.
  static constexpr size_t kMaxHead = kFrameHeaderBytes + seal::kTagBytes;
  struct Item {
    uint8_t hdr[kMaxHead];
    size_t hdr_len = kFrameHeaderBytes;
    Payload p;
    uint8_t tail[seal::kTagBytes];
    size_t tail_len = 0;
    size_t off = 0;  // bytes of header + payload + tail written
    SendDone done;
    size_t bytes() const { return hdr_len + p.len + tail_len; }
  };
  // Seals the item's header and payload as the connection's next two records (under wmu_, so the
  // records go out in the order of their numbers).
  Status seal_locked(Item& it);
  void flush();
  // Sealed receiving: the header's record, the payload (opened as it arrives), its tag.
  bool read_header(size_t* budget);
  void read_payload(size_t* budget);
  // recv() without blocking: bytes read, 0 when the socket has nothing now, -1 when the connection
  // failed (fail() has run).
  ssize_t read_some(uint8_t* dst, size_t n);
  TcpBackend* be_;
  int fd_;
  int rank_, stream_;
  std::string addr_;
  FrameSink* sink_ = nullptr;
  std::unique_ptr<seal::Cipher> tx_, rx_;  // null: frames as they are (SPARROW_ENCRYPT off here)
  mutable std::mutex wmu_;
  std::deque<Item> q_;
  std::atomic<size_t> queued_{0};
  bool failed_ = false, out_armed_ = false;
  std::atomic<bool> closing_{false};
  Status why_;
  // Read state (progress thread only).
  uint8_t rhdr_[kMaxHead];
  size_t rhdr_got_ = 0;
  uint8_t rtag_[seal::kTagBytes];
  size_t rtag_got_ = 0;
  bool in_payload_ = false;
  FrameHeader cur_;
  uint8_t* dest_ = nullptr;
  size_t pay_got_ = 0;
};

struct Pending : Handle {
  Pending() : Handle(kPending) {}
  int fd = -1;
  std::string addr;
  bool dead = false;
  uint8_t buf[auth::kHelloBytes];  // the message being read (the longest a server receives)
  size_t got = 0;
  Deadline deadline;
  auth::Handshake hs;
  std::list<std::unique_ptr<Pending>>::iterator self;
};

class TcpBackend : public Backend {
 public:
  explicit TcpBackend(const BackendOptions& o) : opt_(o) {}
  ~TcpBackend() override;
  Status start();
  const char* name() const override { return "tcp"; }
  Result<std::string> listen(AcceptHandler on_accept) override;
  Result<ConnPtr> connect(const std::string& address, int peer_rank, int stream, FrameSink* sink,
                          Deadline deadline) override;
  void abort(const Status& why) override;
  void arm(TcpConn* c, bool out);
  void retire(TcpConn* c);

 private:
  void loop();
  void accept_all();
  void on_pending(Pending* p);
  void drop(Pending* p, const char* why);
  void wake() {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  BackendOptions opt_;
  int ep_ = -1, wake_fd_ = -1, listen_fd_ = -1;
  Handle listen_h_{Handle::kListener}, wake_h_{Handle::kWake};
  AcceptHandler on_accept_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::unordered_map<TcpConn*, std::shared_ptr<TcpConn>> conns_;
  std::list<std::unique_ptr<Pending>> pending_;  // progress thread only
  std::vector<std::unique_ptr<Pending>> dead_pending_;  // freed after this batch of events
  std::vector<std::shared_ptr<TcpConn>> graveyard_;
  Status aborted_;
};

// ---- TcpConn -----------------------------------------------------------------------------------------

void TcpConn::send(const FrameHeader& h, Payload p, SendDone done) {
  Status sealed;
  {
    std::lock_guard<std::mutex> lk(wmu_);
    if (!failed_) {
      Item it;
      h.encode(it.hdr);
      it.p = std::move(p);
      it.done = std::move(done);
      done = nullptr;
      if (tx_) sealed = seal_locked(it);
      if (sealed.ok()) {
        queued_ += it.bytes();
        q_.push_back(std::move(it));
      } else {
        done = std::move(it.done);
      }
    }
  }
  if (!sealed.ok()) {  // nothing half-sealed goes out: the connection ends
    fail(sealed.context("sealing a frame for " + desc()));
    done(sealed);
    return;
  }
  if (done) {
    done(why_.ok() ? Status(Code::kPeerLost, "connection to " + desc() + " is closed") : why_);
    return;
  }
  flush();
}

Status TcpConn::seal_locked(Item& it) {
  uint8_t tag[seal::kTagBytes];
  SPARROW_RETURN_IF_ERROR(tx_->seal(it.hdr, kFrameHeaderBytes, it.hdr, tag));
  memcpy(it.hdr + kFrameHeaderBytes, tag, seal::kTagBytes);
  it.hdr_len = kFrameHeaderBytes + seal::kTagBytes;
  if (tx_->mode() == seal::Mode::kEncrypt && it.p.len > 0) {
    // The payload may be shared with other connections and the caller: the ciphertext is this
    // connection's own copy.
    auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[it.p.len]);
    SPARROW_RETURN_IF_ERROR(tx_->seal(it.p.data, it.p.len, buf.get(), it.tail));
    it.p = Payload{buf.get(), it.p.len, buf};
  } else {
    SPARROW_RETURN_IF_ERROR(tx_->seal(it.p.data, it.p.len, nullptr, it.tail));
  }
  it.tail_len = seal::kTagBytes;
  return Status::Ok();
}

void TcpConn::flush() {
  std::vector<SendDone> completed;
  {
    std::lock_guard<std::mutex> lk(wmu_);
    while (!failed_ && !q_.empty()) {
      iovec iov[64];
      int n = 0;
      for (auto it = q_.begin(); it != q_.end() && n < 61; ++it) {
        size_t off = it->off;
        if (off < it->hdr_len) {
          iov[n++] = {it->hdr + off, it->hdr_len - off};
          off = it->hdr_len;
        }
        size_t poff = off - it->hdr_len;
        if (poff < it->p.len) {
          iov[n++] = {const_cast<uint8_t*>(it->p.data) + poff, it->p.len - poff};
          poff = it->p.len;
        }
        size_t toff = poff - it->p.len;
        if (toff < it->tail_len) iov[n++] = {it->tail + toff, it->tail_len - toff};
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = n;
      ssize_t w = sendmsg(fd_, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!out_armed_) {
            out_armed_ = true;
            be_->arm(this, true);
          }
          break;
        }
        // A hard error: the progress thread will see the socket fail too.
        shutdown(fd_, SHUT_RDWR);
        break;
      }
      size_t left = size_t(w);
      queued_ -= left;
      while (left > 0 && !q_.empty()) {
        Item& it = q_.front();
        size_t need = it.bytes() - it.off;
        if (left >= need) {
          left -= need;
          completed.push_back(std::move(it.done));
          q_.pop_front();
        } else {
          it.off += left;
          left = 0;
        }
      }
    }
    if (q_.empty() && out_armed_) {
      out_armed_ = false;
      be_->arm(this, false);
    }
  }
  for (auto& d : completed)
    if (d) d(Status::Ok());
}

void TcpConn::fail(const Status& why) {
  std::deque<Item> dropped;
  {
    std::lock_guard<std::mutex> lk(wmu_);
    if (failed_) return;
    failed_ = true;
    why_ = why;
    dropped.swap(q_);
    queued_ = 0;
  }
  // Orderly teardown (closed here, transport shutting down, or the peer closing with nothing of
  // ours still queued) is not a failure: logged at TRACE. Anything else at INFO.
  const bool orderly = closing_.load() || why.message() == "transport shut down" ||
                       (why.code() == Code::kPeerLost && dropped.empty());
  if (orderly) SPARROW_TRACE("connection to %s closed: %s", desc().c_str(), why.message().c_str());
  else SPARROW_INFO("connection to %s failed: %s", desc().c_str(), why.to_string().c_str());
  for (auto& it : dropped)
    if (it.done) it.done(why);
  if (sink_) sink_->conn_failed(this, why);
}

ssize_t TcpConn::read_some(uint8_t* dst, size_t n) {
  while (true) {
    ssize_t r = recv(fd_, dst, n, MSG_DONTWAIT);
    if (r > 0) return r;
    if (r == 0) {
      fail(closed_status());
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    fail(Error(Code::kPeerLost, "connection to " + desc() + " lost: " + strerror(errno)));
    return -1;
  }
}

// The next frame header (sealed: its record, opened), and the sink's destination for its payload.
// False when the socket has no more now or the connection failed.
bool TcpConn::read_header(size_t* budget) {
  const size_t want = rx_ ? kMaxHead : kFrameHeaderBytes;
  ssize_t r = read_some(rhdr_ + rhdr_got_, want - rhdr_got_);
  if (r <= 0) return false;
  rhdr_got_ += size_t(r);
  *budget -= std::min(*budget, size_t(r));
  if (rhdr_got_ < want) return true;
  rhdr_got_ = 0;
  if (rx_) {
    Status s = rx_->open(rhdr_, kFrameHeaderBytes, rhdr_ + kFrameHeaderBytes);
    if (!s.ok()) return fail(s.context("a frame header from " + desc())), false;
  }
  auto h = FrameHeader::decode(rhdr_);
  if (!h.ok()) return fail(std::move(h).take_status().context("from " + desc())), false;
  if (h->len > kMaxFrame) return fail(CorruptData("frame from " + desc() + " too large")), false;
  cur_ = h.value();
  auto d = sink_->frame_begin(this, cur_);
  if (!d.ok()) return fail(std::move(d).take_status().context("from " + desc())), false;
  if (rx_) {
    Status s = rx_->begin();
    if (!s.ok()) return fail(s.context("from " + desc())), false;
  }
  dest_ = d.value();
  pay_got_ = 0;
  rtag_got_ = 0;
  in_payload_ = true;
  return true;
}

// The payload, opened in place as it arrives (sealed), then its tag. The frame ends only when the
// tag holds: a frame whose tag fails is never delivered, and fails the connection.
void TcpConn::read_payload(size_t* budget) {
  if (pay_got_ < cur_.len) {
    ssize_t r = read_some(dest_ + pay_got_, cur_.len - pay_got_);
    if (r <= 0) return;
    if (rx_) {
      Status s = rx_->update(dest_ + pay_got_, size_t(r));
      if (!s.ok()) return fail(s.context("from " + desc()));
    }
    pay_got_ += size_t(r);
    *budget -= std::min(*budget, size_t(r));
    if (pay_got_ < cur_.len) return;
  }
  if (rx_ && rtag_got_ < seal::kTagBytes) {
    ssize_t r = read_some(rtag_ + rtag_got_, seal::kTagBytes - rtag_got_);
    if (r <= 0) return;
    rtag_got_ += size_t(r);
    *budget -= std::min(*budget, size_t(r));
    if (rtag_got_ < seal::kTagBytes) return;
    Status s = rx_->finish(rtag_);
    if (!s.ok()) return fail(s.context("a frame of " + describe_key(cur_.key) + " from " + desc()));
  }
  in_payload_ = false;
  sink_->frame_end(this, cur_);
}

void TcpConn::on_readable() {
  size_t budget = kReadBudget;
  while (budget > 0 && !failed()) {
    if (!in_payload_ && !read_header(&budget)) return;
    if (!in_payload_) continue;
    const size_t before = budget;
    read_payload(&budget);
    // Nothing read and the frame not ended: the socket has no more now (or the connection failed).
    if (in_payload_ && budget == before) return;
  }
}

// ---- TcpBackend --------------------------------------------------------------------------------------

Status TcpBackend::start() {
  // Protection asked for that this build cannot give fails here, at init, not at the first connection.
  SPARROW_RETURN_IF_ERROR(seal::wanted_for(false).status());
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ep_ < 0 || wake_fd_ < 0) return SystemError("epoll/eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &wake_h_;
  if (epoll_ctl(ep_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) return SystemError("epoll_ctl (wake-up)", errno);
  // Returns once the progress thread runs its own code: a thread's start-up (the C library's and a
  // sanitizer's bookkeeping) is over before the caller goes on, so a process that forks right after
  // (the "make the id, then fork the workers" pattern) never copies a lock that start-up held.
  auto running = std::make_shared<std::promise<void>>();  // the thread keeps it alive as long as it needs it
  std::future<void> ran = running->get_future();
  thread_ = affinity::thread([this, running] {
    running->set_value();
    loop();
  });
  if (ran.wait_for(std::chrono::seconds(10)) != std::future_status::ready)
    SPARROW_WARN("TCP transport: the progress thread took over 10 s to start");
  return Status::Ok();
}

TcpBackend::~TcpBackend() {
  stop_ = true;
  wake();
  if (thread_.joinable()) thread_.join();
  std::unordered_map<TcpConn*, std::shared_ptr<TcpConn>> conns;
  {
    std::lock_guard<std::mutex> lk(mu_);
    conns.swap(conns_);
  }
  for (auto& [p, c] : conns) c->fail(Status(Code::kInternalError, "transport shut down"));
  for (auto& p : pending_) ::close(p->fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (ep_ >= 0) ::close(ep_);
}

void TcpBackend::arm(TcpConn* c, bool out) {
  epoll_event ev{};
  ev.events = EPOLLIN | (out ? EPOLLOUT : 0);
  ev.data.ptr = static_cast<Handle*>(c);
  // A connection epoll no longer watches would wait forever: say so (its sends and receives then
  // fail on their deadlines with the connection named).
  if (epoll_ctl(ep_, EPOLL_CTL_MOD, c->fd(), &ev) != 0)
    SPARROW_WARN("epoll_ctl on the connection to rank %d (%s): %s", c->peer_rank(), c->peer_address().c_str(),
                 strerror(errno));
}

Result<std::string> TcpBackend::listen(AcceptHandler on_accept) {
  on_accept_ = std::move(on_accept);
  std::string bound;
  SPARROW_ASSIGN_OR_RETURN(listen_fd_, net::listen_on(opt_.bind_host, &bound));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &listen_h_;
  if (epoll_ctl(ep_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) return SystemError("epoll_ctl (listening socket)", errno);
  return bound;
}

void TcpBackend::abort(const Status& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (aborted_.ok()) aborted_ = why;
  for (auto& [p, c] : conns_) c->close();
}

void TcpBackend::retire(TcpConn* c) {
  epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd(), nullptr);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = conns_.find(c);
  if (it != conns_.end()) {
    graveyard_.push_back(it->second);  // freed after this batch of events
    conns_.erase(it);
  }
}

Result<ConnPtr> TcpBackend::connect(const std::string& address, int peer_rank, int stream, FrameSink* sink,
                                    Deadline deadline) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!aborted_.ok()) return aborted_;
  }
  std::string who = "rank " + std::to_string(peer_rank) + " (" + address + ")";
  SPARROW_ASSIGN_OR_RETURN(int fd, net::connect_to(address, deadline));
  auto fail = [&](Status s) {
    ::close(fd);
    return s.context("connecting to " + who);
  };
  auto want = seal::wanted(address);
  if (!want.ok()) return fail(want.status());
  auto hs = auth::Handshake::client(opt_.identity.secret, opt_.identity.comm_id, opt_.identity.rank, stream, peer_rank,
                                    want.value());
  auto hello = hs.start();
  Status s = net::write_exact(fd, hello.data(), hello.size(), deadline, who);
  uint8_t in[auth::kChallengeBytes];
  while (s.ok() && !hs.done()) {
    const size_t n = hs.expect_bytes();
    s = net::read_exact(fd, in, n, deadline, who);
    if (!s.ok()) break;
    auto reply = hs.take(hs.expecting(), in, n);
    if (!reply.ok()) return fail(std::move(reply).take_status());
    if (!reply->empty()) s = net::write_exact(fd, reply->data(), reply->size(), deadline, who);
  }
  if (!s.ok()) return fail(s);
  net::tune_stream(fd);
  auto c = std::make_shared<TcpConn>(this, fd, peer_rank, stream, address, hs);
  c->set_sink(sink);
  {
    std::lock_guard<std::mutex> lk(mu_);
    // (c owns the socket now and closes it: fail() would close it a second time)
    if (!aborted_.ok()) return aborted_.context("connecting to " + who);
    conns_[c.get()] = c;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = static_cast<Handle*>(c.get());
  if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    Status e = SystemError("epoll_ctl (connection to " + address + ")", errno);
    {
      std::lock_guard<std::mutex> lk(mu_);
      conns_.erase(c.get());
    }
    return e;
  }
  return ConnPtr(c);
}

void TcpBackend::accept_all() {
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error (EMFILE, ECONNABORTED): try at the next event
    if (pending_.size() >= kMaxPending) {
      // Under a flood of unauthenticated connections, the oldest goes first.
      drop(pending_.front().get(), "too many unauthenticated connections");
    }
    auto p = std::make_unique<Pending>();
    p->fd = fd;
    p->addr = net::peer_of(fd);
    p->deadline = Clock::now() + std::chrono::milliseconds(auth::timeout_ms());
    auto want = seal::wanted(p->addr);
    p->hs = auth::Handshake::server(opt_.identity.secret, opt_.identity.comm_id, opt_.identity.rank,
                                    want.ok() ? want.value() : seal::Mode::kEncrypt);
    Pending* raw = p.get();
    pending_.push_back(std::move(p));
    raw->self = std::prev(pending_.end());
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = static_cast<Handle*>(raw);
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) drop(raw, "epoll_ctl failed");
  }
}

void TcpBackend::drop(Pending* p, const char* why) {
  SPARROW_INFO("dropping unauthenticated connection from %s: %s", p->addr.c_str(), why);
  epoll_ctl(ep_, EPOLL_CTL_DEL, p->fd, nullptr);
  ::close(p->fd);
  p->dead = true;
  dead_pending_.push_back(std::move(*p->self));
  pending_.erase(p->self);
}

void TcpBackend::on_pending(Pending* p) {
  if (p->dead) return;
  const size_t need = p->hs.expect_bytes();
  while (p->got < need) {
    ssize_t r = recv(p->fd, p->buf + p->got, need - p->got, MSG_DONTWAIT);
    if (r == 0) return drop(p, "closed before authenticating");
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return drop(p, "socket error before authenticating");
    }
    p->got += size_t(r);
  }
  p->got = 0;
  auto reply = p->hs.take(p->hs.expecting(), p->buf, need);
  if (!reply.ok()) return drop(p, reply.status().message().c_str());
  if (send(p->fd, reply->data(), reply->size(), MSG_NOSIGNAL | MSG_DONTWAIT) != ssize_t(reply->size()))
    return drop(p, (std::string("could not send the ") + auth::msg_name(p->hs.reply_kind())).c_str());
  if (!p->hs.done()) return;
  // Authenticated: from now on the socket carries frames.
  int fd = p->fd;
  epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
  auto c = std::make_shared<TcpConn>(this, fd, int(p->hs.hello().rank), p->hs.hello().stream, p->addr, p->hs);
  p->dead = true;
  dead_pending_.push_back(std::move(*p->self));
  pending_.erase(p->self);
  net::tune_stream(fd);
  FrameSink* sink = on_accept_ ? on_accept_(c) : nullptr;
  if (!sink) {
    SPARROW_WARN("refusing authenticated connection from rank %d (%s): not expected", c->peer_rank(),
                 c->peer_address().c_str());
    return;  // the TcpConn destructor closes the socket
  }
  c->set_sink(sink);
  {
    std::lock_guard<std::mutex> lk(mu_);
    conns_[c.get()] = c;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = static_cast<Handle*>(c.get());
  epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
}

void TcpBackend::loop() {
  epoll_event evs[64];
  while (!stop_) {
    int timeout = 200;
    if (!pending_.empty()) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(pending_.front()->deadline - Clock::now()).count();
      timeout = int(std::max<int64_t>(0, std::min<int64_t>(timeout, ms + 1)));
    }
    int n = epoll_wait(ep_, evs, 64, timeout);
    for (int i = 0; i < n; ++i) {
      Handle* h = static_cast<Handle*>(evs[i].data.ptr);
      switch (h->kind) {
        case Handle::kWake: {
          uint64_t v;
          (void)!read(wake_fd_, &v, sizeof v);
          break;
        }
        case Handle::kListener: accept_all(); break;
        case Handle::kPending: on_pending(static_cast<Pending*>(h)); break;
        case Handle::kConn: {
          auto* c = static_cast<TcpConn*>(h);
          if (c->failed()) break;
          if (evs[i].events & EPOLLOUT) c->on_writable();
          if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) c->on_readable();
          if (c->failed()) retire(c);
          break;
        }
      }
    }
    // Connections whose handshake deadline passed (slow, half-open, junk) are dropped.
    auto now = Clock::now();
    while (!pending_.empty() && pending_.front()->deadline <= now) drop(pending_.front().get(), "authentication timed out");
    dead_pending_.clear();
    std::lock_guard<std::mutex> lk(mu_);
    graveyard_.clear();
  }
}

}  // namespace

Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendOptions& o) {
  if (o.identity.secret.size() != 16) return InvalidArgument("tcp backend: identity needs a 16-byte secret");
  auto b = std::make_unique<TcpBackend>(o);
  SPARROW_RETURN_IF_ERROR(b->start());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace sparrow::transport
