#include "transport/ucx/ucx_backend.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/affinity.h"
#include "core/log.h"
#include "transport/auth.h"
#include "transport/seal.h"
#include "transport/socket.h"

namespace sparrow::transport {
namespace {

// Active message ids. Auth messages carry their bytes as data; frames carry the frame header as the
// AM header and the payload as data. A sealed connection (seal.h) sends the header as its own record
// with its tag, then the payload's tag, as the AM header (kSealedHeader bytes), and the payload
// (encrypted, or as it is under integrity) as data: the payload's record number is taken when its
// header is opened, so a rendezvous payload fetched after later headers still opens with its own.
enum : unsigned { kAmHello = 1, kAmChallenge = 2, kAmProof = 3, kAmWelcome = 4, kAmFrame = 5, kAmBye = 6 };
constexpr size_t kSealedHeader = kFrameHeaderBytes + 2 * seal::kTagBytes;

// Handshake messages travel as one active message each, tagged with their kind.
auth::Handshake::Msg msg_of(unsigned am) {
  using M = auth::Handshake::Msg;
  switch (am) {
    case kAmHello: return M::kHello;
    case kAmChallenge: return M::kChallenge;
    case kAmProof: return M::kProof;
    case kAmWelcome: return M::kWelcome;
    default: return M::kNone;
  }
}
unsigned am_of(auth::Handshake::Msg m) {
  using M = auth::Handshake::Msg;
  return m == M::kHello ? kAmHello : m == M::kChallenge ? kAmChallenge : m == M::kProof ? kAmProof : kAmWelcome;
}

class UcxBackend;

class UcxConn : public Conn, public std::enable_shared_from_this<UcxConn> {
 public:
  UcxConn(UcxBackend* be, ucp_ep_h ep, bool client) : be_(be), ep_(ep), client_(client) {}
  void send(const FrameHeader& h, Payload p, SendDone done) override;
  size_t queued_bytes() const override { return queued_.load(); }
  void close() override;
  int peer_rank() const override { return rank_; }
  std::string peer_address() const override { return addr_; }
  int stream() const override { return stream_; }
  const char* protection() const override { return seal::mode_name(tx_ ? tx_->mode() : seal::Mode::kOff); }
  std::string desc() const { return "rank " + std::to_string(rank_) + " (" + addr_ + ", ucx stream " + std::to_string(stream_) + ")"; }

  UcxBackend* be_;
  ucp_ep_h ep_;
  bool client_;
  int rank_ = -1, stream_ = 0;
  std::string addr_;
  FrameSink* sink_ = nullptr;
  std::atomic<size_t> queued_{0};
  std::atomic<bool> failed_{false};
  // Rendezvous payloads being fetched into what frame_begin gave (progress thread). The sink hears
  // of a failure only once none is left (FrameSink's promise): until then UCX may still write.
  int rndv_out_ = 0;
  bool fail_told_ = false;
  Status fail_why_;
  // Handshake (progress thread).
  auth::Handshake hs_;  // the authentication (transport/auth.h); frames flow once it is done
  bool ready() const { return hs_.done(); }
  std::unique_ptr<seal::Cipher> tx_, rx_;  // from the handshake; null: frames as they are
  Deadline deadline_;
  // Client connect result.
  std::promise<Status> connected_;
  bool promised_ = false;
};
using UcxConnPtr = std::shared_ptr<UcxConn>;

// Buffers for ciphertext, reused: a fresh allocation per frame costs page faults, and UCX registers
// each new buffer it sends by rendezvous, which costs far more than the encryption.
class SpareBuffers {
 public:
  std::vector<uint8_t> take(size_t n) {
    std::vector<uint8_t> b;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!spare_.empty()) {
        b = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (b.capacity() < n) b.reserve(n);
    b.resize(n);  // (within the capacity a reused buffer already has: no allocation)
    return b;
  }
  void give(std::vector<uint8_t>&& b) {
    std::lock_guard<std::mutex> lk(mu_);
    if (b.capacity() >= kMinBytes && spare_.size() < kKeep) spare_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kKeep = 64, kMinBytes = 64 << 10;  // (not the handshake's small messages)
  std::mutex mu_;
  std::vector<std::vector<uint8_t>> spare_;
};
SpareBuffers g_spare;

struct SendCtx {
  UcxConnPtr conn;
  uint8_t hdr[kSealedHeader];
  size_t hdr_len = kFrameHeaderBytes;
  Payload p;
  SendDone done;
  std::vector<uint8_t> own;  // auth messages; a sealed payload's ciphertext
  ~SendCtx() { g_spare.give(std::move(own)); }
};

struct RecvCtx {
  UcxConnPtr conn;
  FrameHeader h;
  uint8_t* dst = nullptr;
  uint64_t record = 0;  // sealed: the payload's record number and tag
  uint8_t tag[seal::kTagBytes];
};

struct Cmd {
  enum Kind { kSend, kConnect, kClose } kind;
  UcxConnPtr conn;
  SendCtx* send = nullptr;
  std::string address;
  int peer_rank = 0, stream = 0;
  FrameSink* sink = nullptr;
  std::promise<Result<UcxConnPtr>>* result = nullptr;
};

class UcxBackend : public Backend {
 public:
  explicit UcxBackend(const BackendOptions& o) : opt_(o) {}
  ~UcxBackend() override;
  Status start();
  const char* name() const override { return "ucx"; }
  Result<std::string> listen(AcceptHandler on_accept) override;
  Result<ConnPtr> connect(const std::string& address, int peer_rank, int stream, FrameSink* sink, Deadline d) override;
  void abort(const Status& why) override;

  void post(Cmd c) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      cmds_.push_back(std::move(c));
    }
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  void fail(const UcxConnPtr& c, const Status& why);
  // Tells the sink of c's failure once it failed and no rendezvous into its buffers is left.
  void tell_failure(const UcxConnPtr& c);
  void rndv_done(const UcxConnPtr& c);

 private:
  void loop();
  void run(Cmd& c);
  void do_send(SendCtx* s, unsigned id, const void* hdr, size_t hlen);
  void send_frame(SendCtx* s);  // sealed first when the connection is
  ucs_status_t on_frame(const UcxConnPtr& c, const void* header, size_t hlen, void* data, size_t len, bool rndv);
  // Ends a connection that broke the protocol or failed a tag (the peer named), and drops it.
  ucs_status_t refuse(const UcxConnPtr& c, const Status& why);
  void send_auth(const UcxConnPtr& c, unsigned id, const uint8_t* data, size_t n);
  // The goodbye that closes a connection: sealed as its next record when its frames are, so that
  // one nobody sealed (forged, or altered on the way) is refused like any frame, not taken for the
  // peer's orderly close.
  void send_bye(const UcxConnPtr& c);
  ucs_status_t on_bye(const UcxConnPtr& c, const void* data, size_t len);
  void on_conn_request(ucp_conn_request_h req);
  ucs_status_t on_am(unsigned id, const void* header, size_t hlen, void* data, size_t len, const ucp_am_recv_param_t* p);
  // Graceful close flushes what was sent (a goodbye); force is for endpoints that already failed.
  void close_ep(const UcxConnPtr& c, bool force = true);
  UcxConnPtr conn_of(ucp_ep_h ep) {
    auto it = eps_.find(ep);
    return it == eps_.end() ? nullptr : it->second;
  }

  static void send_cb(void* req, ucs_status_t st, void* user);
  static void recv_cb(void* req, ucs_status_t st, size_t len, void* user);
  static void err_cb(void* arg, ucp_ep_h ep, ucs_status_t st);

  BackendOptions opt_;
  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  int efd_ = -1, wake_fd_ = -1;
  AcceptHandler on_accept_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::deque<Cmd> cmds_;
  Status aborted_;
  std::unordered_map<ucp_ep_h, UcxConnPtr> eps_;  // progress thread only
  struct Rndv {
    void* desc;
    RecvCtx* ctx;  // (its dst is where the payload goes)
  };
  std::vector<Rndv> rndv_;
  std::vector<void*> closing_;  // ep close requests in flight
  std::vector<std::unique_ptr<std::pair<UcxBackend*, unsigned>>> handler_args_;
};

// ---- UcxConn ------------------------------------------------------------------------------------------

void UcxConn::send(const FrameHeader& h, Payload p, SendDone done) {
  if (failed_) {
    done(Error(Code::kPeerLost, "ucx connection to " + desc() + " is closed"));
    return;
  }
  auto* s = new SendCtx();
  s->conn = shared_from_this();
  h.encode(s->hdr);
  s->p = std::move(p);
  s->done = std::move(done);
  queued_ += s->p.len;
  Cmd c{Cmd::kSend};
  c.send = s;
  be_->post(std::move(c));
}

void UcxConn::close() {
  Cmd c{Cmd::kClose};
  c.conn = shared_from_this();
  be_->post(std::move(c));
}

// A sealed payload, whole in its destination: opened (decrypted in place, or its tag checked).
Status open_payload(UcxConn& c, RecvCtx& r) {
  if (!c.rx_) return Status::Ok();
  Status s = c.rx_->open_at(r.record, r.dst, r.h.len, r.tag);
  return s.ok() ? s : s.context("frame from " + c.desc());
}

// ---- UcxBackend ---------------------------------------------------------------------------------------

Status UcxBackend::start() {
  ucp_config_t* cfg = nullptr;
  if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK) return Error(Code::kSystemError, "ucx: cannot read configuration");
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES;
  p.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucs_status_t st = ucp_init(&p, cfg, &ctx_);
  ucp_config_release(cfg);
  if (st != UCS_OK) return Error(Code::kSystemError, std::string("ucx: ucp_init: ") + ucs_status_string(st));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // every UCX call happens on the progress thread
  if ((st = ucp_worker_create(ctx_, &wp, &worker_)) != UCS_OK)
    return Error(Code::kSystemError, std::string("ucx: worker: ") + ucs_status_string(st));
  if ((st = ucp_worker_get_efd(worker_, &efd_)) != UCS_OK)
    return Error(Code::kSystemError, std::string("ucx: efd: ") + ucs_status_string(st));
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  for (unsigned id : {kAmHello, kAmChallenge, kAmProof, kAmWelcome, kAmFrame, kAmBye}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = id;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    // The handler needs both the backend and the id.
    struct Tramp {
      static ucs_status_t cb(void* arg, const void* h, size_t hl, void* d, size_t l, const ucp_am_recv_param_t* prm) {
        auto* pr = static_cast<std::pair<UcxBackend*, unsigned>*>(arg);
        return pr->first->on_am(pr->second, h, hl, d, l, prm);
      }
    };
    handler_args_.push_back(std::make_unique<std::pair<UcxBackend*, unsigned>>(this, id));
    hp.arg = handler_args_.back().get();
    hp.cb = Tramp::cb;
    if ((st = ucp_worker_set_am_recv_handler(worker_, &hp)) != UCS_OK)
      return Error(Code::kSystemError, std::string("ucx: am handler: ") + ucs_status_string(st));
  }
  thread_ = affinity::thread([this] { loop(); });
  return Status::Ok();
}

UcxBackend::~UcxBackend() {
  stop_ = true;
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  // Commands posted after the progress thread's last look: their sends and connects fail, as a
  // closed connection's do (nothing may wait on them forever, or hold their buffers).
  const Status down(Code::kPeerLost, "ucx transport shut down");
  for (Cmd& c : cmds_) {
    if (c.kind == Cmd::kSend) {
      c.send->conn->queued_ -= c.send->p.len;
      if (c.send->done) c.send->done(down);
      delete c.send;
    } else if (c.kind == Cmd::kConnect && c.result) {
      c.result->set_value(down);
    }
  }
  cmds_.clear();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (listener_) ucp_listener_destroy(listener_);
  if (worker_) ucp_worker_destroy(worker_);
  if (ctx_) ucp_cleanup(ctx_);
}

Result<std::string> UcxBackend::listen(AcceptHandler on_accept) {
  on_accept_ = std::move(on_accept);
  SPARROW_ASSIGN_OR_RETURN(net::SockAddr a, net::parse_address(opt_.bind_host.find(':') != std::string::npos
                                                                   ? "[" + opt_.bind_host + "]:0"
                                                                   : opt_.bind_host + ":0"));
  // The listener must be created on the progress thread (single-threaded worker): run it as a command.
  std::promise<Result<UcxConnPtr>> done;
  auto fut = done.get_future();
  Cmd c{Cmd::kConnect};
  c.peer_rank = -2;  // marker: "create the listener"
  c.address = std::string(reinterpret_cast<const char*>(&a.ss), a.len);
  c.result = &done;
  post(std::move(c));
  auto r = fut.get();
  if (!r.ok()) return r.status();
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  // Querying is a read of listener state set at creation; the progress thread is idle on it.
  if (ucp_listener_query(listener_, &attr) != UCS_OK) return Error(Code::kSystemError, "ucx: listener query failed");
  net::SockAddr b;
  memcpy(&b.ss, &attr.sockaddr, sizeof attr.sockaddr);
  return b.str();
}

Result<ConnPtr> UcxBackend::connect(const std::string& address, int peer_rank, int stream, FrameSink* sink,
                                    Deadline d) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!aborted_.ok()) return aborted_;
  }
  std::promise<Result<UcxConnPtr>> done;
  auto fut = done.get_future();
  Cmd c{Cmd::kConnect};
  c.address = address;
  c.peer_rank = peer_rank;
  c.stream = stream;
  c.sink = sink;
  c.result = &done;
  post(std::move(c));
  auto r = fut.get();  // the progress thread always answers (success, failure or the auth deadline)
  if (!r.ok()) return std::move(r).take_status().context("ucx: connecting to rank " + std::to_string(peer_rank) + " (" + address + ")");
  UcxConnPtr conn = r.value();
  auto st = conn->connected_.get_future();
  if (st.wait_until(d) != std::future_status::ready) {
    conn->close();
    return Error(Code::kTimeout, "ucx: rank " + std::to_string(peer_rank) + " (" + address + ") did not authenticate in time");
  }
  Status s = st.get();
  if (!s.ok()) return s.context("ucx: connecting to rank " + std::to_string(peer_rank) + " (" + address + ")");
  return ConnPtr(conn);
}

void UcxBackend::abort(const Status& why) {
  std::vector<UcxConnPtr> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_.ok()) aborted_ = why;
  }
  Cmd c{Cmd::kClose};  // conn == nullptr: close everything
  post(std::move(c));
}

void UcxBackend::fail(const UcxConnPtr& c, const Status& why) {
  if (c->failed_.exchange(true)) return;
  SPARROW_INFO("ucx connection to %s failed: %s", c->desc().c_str(), why.to_string().c_str());
  if (c->client_ && !c->promised_) {
    c->promised_ = true;
    c->connected_.set_value(why);
  }
  c->fail_why_ = why;
  tell_failure(c);
}

void UcxBackend::tell_failure(const UcxConnPtr& c) {
  if (!c->failed_ || c->fail_told_ || c->rndv_out_ > 0 || !c->sink_ || !c->ready()) return;
  c->fail_told_ = true;
  c->sink_->conn_failed(c.get(), c->fail_why_);
}

void UcxBackend::rndv_done(const UcxConnPtr& c) {
  --c->rndv_out_;
  tell_failure(c);
}

void UcxBackend::close_ep(const UcxConnPtr& c, bool force) {
  if (!c->ep_) return;
  eps_.erase(c->ep_);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* req = ucp_ep_close_nbx(c->ep_, &p);
  if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
  c->ep_ = nullptr;
}

void UcxBackend::send_cb(void* req, ucs_status_t st, void* user) {
  auto* s = static_cast<SendCtx*>(user);
  s->conn->queued_ -= s->p.len;
  if (s->done) s->done(st == UCS_OK ? Status::Ok() : Error(Code::kPeerLost, std::string("ucx send: ") + ucs_status_string(st)));
  delete s;
  ucp_request_free(req);
}

void UcxBackend::recv_cb(void* req, ucs_status_t st, size_t, void* user) {
  auto* r = static_cast<RecvCtx*>(user);
  Status opened = st == UCS_OK && !r->conn->failed_ ? open_payload(*r->conn, *r) : Status::Ok();
  if (st != UCS_OK) r->conn->be_->fail(r->conn, Error(Code::kPeerLost, std::string("ucx receive: ") + ucs_status_string(st)));
  else if (!opened.ok()) r->conn->be_->refuse(r->conn, opened);
  else if (!r->conn->failed_) r->conn->sink_->frame_end(r->conn.get(), r->h);
  r->conn->be_->rndv_done(r->conn);
  delete r;
  ucp_request_free(req);
}

void UcxBackend::err_cb(void* arg, ucp_ep_h ep, ucs_status_t st) {
  auto* be = static_cast<UcxBackend*>(arg);
  UcxConnPtr c = be->conn_of(ep);
  if (!c) return;
  be->fail(c, Error(Code::kPeerLost, "ucx connection to " + c->desc() + " lost: " + ucs_status_string(st)));
  be->close_ep(c);
}

void UcxBackend::do_send(SendCtx* s, unsigned id, const void* hdr, size_t hlen) {
  if (s->conn->failed_ || !s->conn->ep_) {
    s->conn->queued_ -= s->p.len;
    if (s->done) s->done(Error(Code::kPeerLost, "ucx connection to " + s->conn->desc() + " is closed"));
    delete s;
    return;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = send_cb;
  p.user_data = s;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  void* req = ucp_am_send_nbx(s->conn->ep_, id, hdr, hlen, s->p.data, s->p.len, &p);
  if (req == nullptr) {
    s->conn->queued_ -= s->p.len;
    if (s->done) s->done(Status::Ok());
    delete s;
  } else if (UCS_PTR_IS_ERR(req)) {
    UcxConnPtr c = s->conn;
    c->queued_ -= s->p.len;
    Status e = Error(Code::kPeerLost, std::string("ucx send to ") + c->desc() + ": " + ucs_status_string(UCS_PTR_STATUS(req)));
    if (s->done) s->done(e);
    delete s;
    fail(c, e);
  }
}

// A frame as one sealed record for its header and one for its payload: their tags after the header.
// Encrypt mode sends the payload's ciphertext from a buffer of the send's own; integrity mode the
// payload itself.
Status seal_frame(SendCtx& s) {
  seal::Cipher& tx = *s.conn->tx_;
  uint8_t* tags = s.hdr + kFrameHeaderBytes;
  SPARROW_RETURN_IF_ERROR(tx.seal(s.hdr, kFrameHeaderBytes, s.hdr, tags));
  if (tx.mode() == seal::Mode::kEncrypt && s.p.len > 0) {
    s.own = g_spare.take(s.p.len);
    SPARROW_RETURN_IF_ERROR(tx.seal(s.p.data, s.p.len, s.own.data(), tags + seal::kTagBytes));
    s.p.data = s.own.data();
  } else {
    SPARROW_RETURN_IF_ERROR(tx.seal(s.p.data, s.p.len, nullptr, tags + seal::kTagBytes));
  }
  s.hdr_len = kSealedHeader;
  return Status::Ok();
}

std::mutex g_hook_mu;
UcxWireHook g_hook;
std::atomic<bool> g_hooked{false};

// Tests: runs f(hook) under the hook's lock when one is set (without one, a relaxed load and no lock).
template <class F>
void with_wire_hook(F&& f) {
  if (!g_hooked.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lk(g_hook_mu);
  if (g_hook) f(g_hook);
}

// Tests: the hook sees the frame as it goes on the wire, in a copy when the payload is the caller's.
void apply_wire_hook(SendCtx& s) {
  with_wire_hook([&s](const UcxWireHook& hook) {
    if (s.p.len && s.p.data != s.own.data()) {
      s.own = g_spare.take(s.p.len);
      std::memcpy(s.own.data(), s.p.data, s.p.len);
      s.p.data = s.own.data();
    }
    hook(s.hdr, s.hdr_len, s.own.data(), s.p.len);
  });
}

void UcxBackend::send_frame(SendCtx* s) {
  if (s->conn->tx_ && !s->conn->failed_) {
    Status st = seal_frame(*s);
    if (!st.ok()) {  // nothing half-sealed goes out: the connection ends
      UcxConnPtr c = s->conn;
      st = st.context("sealing a frame for " + c->desc());
      c->queued_ -= s->p.len;
      if (s->done) s->done(st);
      delete s;
      fail(c, st);
      return;
    }
  }
  apply_wire_hook(*s);
  do_send(s, kAmFrame, s->hdr, s->hdr_len);
}

void UcxBackend::send_auth(const UcxConnPtr& c, unsigned id, const uint8_t* data, size_t n) {
  auto* s = new SendCtx();
  s->conn = c;
  s->own.assign(data, data + n);
  s->p = Payload{s->own.data(), n, nullptr};
  c->queued_ += n;  // do_send's completion subtracts it again
  do_send(s, id, nullptr, 0);
}

constexpr uint8_t kByeByte = 0x42;

void UcxBackend::send_bye(const UcxConnPtr& c) {
  uint8_t m[1 + seal::kTagBytes] = {kByeByte};
  const size_t n = c->tx_ ? sizeof m : 1;
  if (c->tx_ && !c->tx_->seal(m, 1, m, m + 1).ok()) return;  // (none: the peer sees the connection end)
  with_wire_hook([&](const UcxWireHook& hook) { hook(nullptr, 0, m, n); });
  send_auth(c, kAmBye, m, n);
}

ucs_status_t UcxBackend::on_bye(const UcxConnPtr& c, const void* data, size_t len) {
  if (c->rx_) {
    uint8_t m[1 + seal::kTagBytes];
    if (len != sizeof m) return refuse(c, Error(Code::kAuthError, "an unsealed goodbye from " + c->desc() + " on a sealed connection"));
    memcpy(m, data, sizeof m);
    Status s = c->rx_->open(m, 1, m + 1);
    if (!s.ok() || m[0] != kByeByte)
      return refuse(c, Error(Code::kAuthError, "a goodbye from " + c->desc() + " failed its tag (forged, or altered on "
                                               "the way)" + (s.ok() ? std::string() : ": " + s.message())));
  }
  fail(c, Error(Code::kPeerLost, "ucx connection to " + c->desc() + " closed by the peer"));
  close_ep(c);
  return UCS_OK;
}

// "host:port" of the peer asking to connect ("" when UCX does not say).
std::string client_address(ucp_conn_request_h req) {
  ucp_conn_request_attr_t a{};
  a.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(req, &a) != UCS_OK) return "";
  net::SockAddr sa;
  memcpy(&sa.ss, &a.client_address, sizeof a.client_address);
  sa.len = a.client_address.ss_family == AF_INET6 ? socklen_t(sizeof(sockaddr_in6)) : socklen_t(sizeof(sockaddr_in));
  return sa.str();
}

void UcxBackend::on_conn_request(ucp_conn_request_h req) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!aborted_.ok()) {
    ucp_listener_reject(listener_, req);
    return;
  }
  const std::string from = client_address(req);  // (before ucp_ep_create, which consumes the request)
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.conn_request = req;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = err_cb;
  ep.err_handler.arg = this;
  ucp_ep_h h;
  if (ucp_ep_create(worker_, &ep, &h) != UCS_OK) return;
  auto c = std::make_shared<UcxConn>(this, h, false);
  c->addr_ = from;
  // A peer whose address is unknown is treated as off the host: the strongest protection asked for.
  auto want = c->addr_.empty() ? Result<seal::Mode>(seal::Mode::kEncrypt) : seal::wanted(c->addr_);
  c->hs_ = auth::Handshake::server(opt_.identity.secret, opt_.identity.comm_id, opt_.identity.rank,
                                   want.ok() ? want.value() : seal::Mode::kEncrypt);
  c->deadline_ = deadline_in(double(auth::timeout_ms()) / 1000);
  if (c->addr_.empty()) c->addr_ = "ucx-peer";
  eps_[h] = c;
}

ucs_status_t UcxBackend::refuse(const UcxConnPtr& c, const Status& why) {
  SPARROW_INFO("ucx: dropping connection to %s: %s", c->desc().c_str(), why.to_string().c_str());
  fail(c, why);
  close_ep(c);
  return UCS_OK;
}

ucs_status_t UcxBackend::on_am(unsigned id, const void* header, size_t hlen, void* data, size_t len,
                               const ucp_am_recv_param_t* prm) {
  if (!(prm->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) return UCS_OK;
  UcxConnPtr c = conn_of(prm->reply_ep);
  if (!c || c->failed_) return UCS_OK;
  const bool rndv = prm->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  if (id == kAmFrame) return on_frame(c, header, hlen, data, len, rndv);
  if (rndv || hlen != 0) return refuse(c, Error(Code::kAuthError, "malformed handshake message"));
  if (id == kAmBye) return on_bye(c, data, len);
  if (msg_of(id) == auth::Handshake::Msg::kNone) return UCS_OK;
  auto reply = c->hs_.take(msg_of(id), static_cast<const uint8_t*>(data), len);
  if (!reply.ok()) return refuse(c, Error(Code::kAuthError, reply.status().message()));
  if (!reply->empty()) send_auth(c, am_of(c->hs_.reply_kind()), reply->data(), reply->size());
  if (!c->hs_.done()) return UCS_OK;
  c->tx_ = c->hs_.sender();
  c->rx_ = c->hs_.receiver();
  if (c->client_) {
    c->promised_ = true;
    c->connected_.set_value(Status::Ok());
    return UCS_OK;
  }
  c->rank_ = int(c->hs_.hello().rank);
  c->stream_ = c->hs_.hello().stream;
  FrameSink* sink = on_accept_ ? on_accept_(c) : nullptr;
  if (!sink) return refuse(c, Error(Code::kAuthError, "connection not expected"));
  c->sink_ = sink;
  return UCS_OK;
}

// A frame's header (sealed: opened, and its payload's record number taken in order), then its
// payload: copied now (eager) or fetched after this handler returns (rendezvous), and opened.
ucs_status_t UcxBackend::on_frame(const UcxConnPtr& c, const void* header, size_t hlen, void* data, size_t len,
                                  bool rndv) {
  if (!c->ready() || !c->sink_) return refuse(c, Error(Code::kAuthError, "frame before authentication"));
  const size_t want = c->rx_ ? kSealedHeader : kFrameHeaderBytes;
  if (hlen != want)
    return refuse(c, Error(Code::kCorruptData, "a frame header of " + std::to_string(hlen) + " bytes from " + c->desc() +
                                                   " (" + std::to_string(want) + " expected)"));
  auto r = std::make_unique<RecvCtx>();
  r->conn = c;
  uint8_t hb[kFrameHeaderBytes];
  memcpy(hb, header, kFrameHeaderBytes);
  if (c->rx_) {
    const uint8_t* tags = static_cast<const uint8_t*>(header) + kFrameHeaderBytes;
    Status s = c->rx_->open(hb, kFrameHeaderBytes, tags);
    if (!s.ok()) return refuse(c, s.context("frame header from " + c->desc()));
    r->record = c->rx_->reserve();
    memcpy(r->tag, tags + seal::kTagBytes, seal::kTagBytes);
  }
  auto h = FrameHeader::decode(hb);
  if (!h.ok() || h->len != len) return refuse(c, Error(Code::kCorruptData, "bad frame header from " + c->desc()));
  r->h = h.value();
  auto dst = c->sink_->frame_begin(c.get(), r->h);
  if (!dst.ok()) return refuse(c, dst.status());
  r->dst = dst.value();
  if (rndv) {  // fetched after progress returns; UCS_INPROGRESS keeps the descriptor valid until then
    ++c->rndv_out_;
    rndv_.push_back(Rndv{data, r.release()});
    return UCS_INPROGRESS;
  }
  if (len) memcpy(r->dst, data, len);
  Status s = open_payload(*c, *r);
  if (!s.ok()) return refuse(c, s);
  c->sink_->frame_end(c.get(), r->h);
  return UCS_OK;
}

void UcxBackend::run(Cmd& c) {
  switch (c.kind) {
    case Cmd::kSend: send_frame(c.send); return;
    case Cmd::kClose: {
      std::vector<UcxConnPtr> targets;
      if (c.conn) targets.push_back(c.conn);
      else
        for (auto& [ep, conn] : eps_) targets.push_back(conn);
      for (auto& t : targets) {
        bool graceful = t->ep_ && !t->failed_ && t->ready();
        if (graceful) send_bye(t);  // tell the peer now rather than when a keepalive notices
        fail(t, Status(Code::kInternalError, "ucx connection to " + t->desc() + " was closed locally"));
        close_ep(t, !graceful);
      }
      return;
    }
    case Cmd::kConnect: {
      if (c.peer_rank == -2) {  // listener creation
        ucp_listener_params_t lp{};
        lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(c.address.data());
        lp.sockaddr.addrlen = socklen_t(c.address.size());
        lp.conn_handler.cb = [](ucp_conn_request_h r, void* arg) { static_cast<UcxBackend*>(arg)->on_conn_request(r); };
        lp.conn_handler.arg = this;
        ucs_status_t st = ucp_listener_create(worker_, &lp, &listener_);
        if (st != UCS_OK) c.result->set_value(Error(Code::kSystemError, std::string("ucx listener: ") + ucs_status_string(st)));
        else c.result->set_value(UcxConnPtr());
        return;
      }
      auto a = net::parse_address(c.address);
      auto want = seal::wanted(c.address);
      if (!a.ok() || !want.ok()) {
        c.result->set_value(a.ok() ? want.status() : a.status());
        return;
      }
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
      ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a->ss);
      ep.sockaddr.addrlen = a->len;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = err_cb;
      ep.err_handler.arg = this;
      ucp_ep_h h;
      ucs_status_t st = ucp_ep_create(worker_, &ep, &h);
      if (st != UCS_OK) {
        c.result->set_value(Error(Code::kPeerLost, std::string("ucx connect: ") + ucs_status_string(st)));
        return;
      }
      auto conn = std::make_shared<UcxConn>(this, h, true);
      conn->rank_ = c.peer_rank;
      conn->stream_ = c.stream;
      conn->addr_ = c.address;
      conn->sink_ = c.sink;
      conn->deadline_ = deadline_in(double(auth::timeout_ms()) / 1000);
      conn->hs_ = auth::Handshake::client(opt_.identity.secret, opt_.identity.comm_id, opt_.identity.rank, c.stream,
                                          c.peer_rank, want.value());
      eps_[h] = conn;
      c.result->set_value(conn);
      auto hello = conn->hs_.start();
      send_auth(conn, kAmHello, hello.data(), hello.size());
      return;
    }
  }
}

void UcxBackend::loop() {
  Deadline stop_by{};
  while (true) {
    std::deque<Cmd> cmds;
    {
      std::lock_guard<std::mutex> lk(mu_);
      cmds.swap(cmds_);
    }
    for (auto& c : cmds) run(c);
    while (ucp_worker_progress(worker_) != 0) {
    }
    // Rendezvous payloads are fetched outside the AM callback.
    auto rv = std::move(rndv_);
    rndv_.clear();
    for (auto& r : rv) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = recv_cb;
      p.user_data = r.ctx;
      void* req = ucp_am_recv_data_nbx(worker_, r.desc, r.ctx->dst, r.ctx->h.len, &p);
      if (req == nullptr) {
        r.ctx->conn->sink_->frame_end(r.ctx->conn.get(), r.ctx->h);
        rndv_done(r.ctx->conn);
        delete r.ctx;
      } else if (UCS_PTR_IS_ERR(req)) {
        fail(r.ctx->conn, Error(Code::kPeerLost, "ucx receive failed"));
        rndv_done(r.ctx->conn);
        delete r.ctx;
      }
    }
    // Handshakes that did not finish in time.
    auto now = Clock::now();
    std::vector<UcxConnPtr> late;
    for (auto& [ep, c] : eps_)
      if (!c->ready() && c->deadline_ < now) late.push_back(c);
    for (auto& c : late) {
      fail(c, Error(Code::kTimeout, "ucx handshake with " + c->desc() + " timed out"));
      close_ep(c);
    }
    for (auto it = closing_.begin(); it != closing_.end();) {
      if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
        ucp_request_free(*it);
        it = closing_.erase(it);
      } else {
        ++it;
      }
    }
    if (stop_) {
      if (stop_by == Deadline{}) stop_by = deadline_in(2);
      if (!eps_.empty()) {
        Cmd all{Cmd::kClose};
        run(all);
        continue;
      }
      if (closing_.empty() || Clock::now() > stop_by) return;
      continue;
    }
    if (!rndv_.empty()) continue;
    bool idle;
    {
      std::lock_guard<std::mutex> lk(mu_);
      idle = cmds_.empty();
    }
    if (!idle) continue;
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    pollfd pf[2] = {{efd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    poll(pf, 2, closing_.empty() && late.empty() ? 100 : 1);
    if (pf[1].revents) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
  }
}

}  // namespace

void set_ucx_wire_hook(UcxWireHook h) {
  std::lock_guard<std::mutex> lk(g_hook_mu);
  g_hook = std::move(h);
  g_hooked = bool(g_hook);
}

bool ucx_available() {
  ucp_config_t* cfg = nullptr;
  if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK) return false;
  ucp_config_release(cfg);
  return true;
}

Result<std::unique_ptr<Backend>> make_ucx_backend(const BackendOptions& o) {
  if (o.identity.secret.size() != 16) return InvalidArgument("ucx backend: identity needs a 16-byte secret");
  // Asked-for protection this build cannot give fails closed here, at init, as for tcp.
  SPARROW_RETURN_IF_ERROR(seal::wanted_for(false).status());
  auto b = std::make_unique<UcxBackend>(o);
  SPARROW_RETURN_IF_ERROR(b->start());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace sparrow::transport
