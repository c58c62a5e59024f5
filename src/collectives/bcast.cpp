#include "collectives/bcast.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <mutex>
#include <deque>
#include <condition_variable>
#include <optional>

#include "core/log.h"
#include "core/params.h"
#include "format/bits.h"
#include "format/checkpoint.h"
#include "kernels/device.h"
#include "topology/tree.h"

namespace sparrow::coll {

using kernels::cpu::TensorSpec;
using transport::MsgKey;
using transport::Payload;
using transport::SendRequestPtr;

namespace {

params::StringParam kCodec("CODEC", "auto",
                           "Checkpoint codecs for sparse_bcast: auto (smallest per chunk) or paper (SparrowRL's leb128 + overwrite, for ablations).",
                           {"auto", "paper"});
params::IntParam kSegment("SEGMENT_BYTES", 4 << 20, "Segment size of the pipelined dense broadcast.", 64 << 10, 1 << 30);

constexpr uint32_t kOpMagic = 0x504f5053;  // "SPOP"
constexpr uint8_t kDense = 1, kSparse = 2;
constexpr uint32_t kAckSub = 0xfffffff0u, kResyncSub = 0xfffffff1u, kVerdictSub = 0xfffffff2u;
constexpr size_t kAckWindow = 4;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr uint8_t kOpFull = 1;  // OpHeader::flags: a sparse operation that sends a full version to everyone

struct OpHeader {
  uint8_t kind = 0;
  uint8_t flags = 0;
  int32_t root = 0;
  std::vector<std::pair<uint64_t, uint8_t>> bufs;  // count, dtype
  std::vector<int32_t> resync;
  uint64_t segment = 0;
  std::vector<uint8_t> encode() const {
    std::vector<uint8_t> o;
    format::put_u32(o, kOpMagic);
    format::put_u8(o, kind);
    format::put_u8(o, flags);
    format::put_u16(o, 0);
    format::put_u32(o, uint32_t(root));
    format::put_u32(o, uint32_t(bufs.size()));
    for (auto& [n, d] : bufs) {
      format::put_u64(o, n);
      format::put_u8(o, d);
    }
    format::put_u32(o, uint32_t(resync.size()));
    for (int32_t r : resync) format::put_u32(o, uint32_t(r));
    format::put_u64(o, segment);
    return o;
  }
  static Result<OpHeader> decode(const std::vector<uint8_t>& m) {
    format::ByteReader r(m, "operation header");
    OpHeader h;
    uint32_t magic, root, nb, nr;
    uint16_t res16;
    SPARROW_RETURN_IF_ERROR(r.u32(&magic));
    if (magic != kOpMagic) return CorruptData("bad operation header");
    SPARROW_RETURN_IF_ERROR(r.u8(&h.kind));
    SPARROW_RETURN_IF_ERROR(r.u8(&h.flags));
    SPARROW_RETURN_IF_ERROR(r.u16(&res16));
    SPARROW_RETURN_IF_ERROR(r.u32(&root));
    h.root = int32_t(root);
    SPARROW_RETURN_IF_ERROR(r.u32(&nb));
    if (nb > (1u << 24)) return CorruptData("operation header: too many buffers");
    for (uint32_t i = 0; i < nb; ++i) {
      uint64_t n;
      uint8_t d;
      SPARROW_RETURN_IF_ERROR(r.u64(&n));
      SPARROW_RETURN_IF_ERROR(r.u8(&d));
      h.bufs.push_back({n, d});
    }
    SPARROW_RETURN_IF_ERROR(r.u32(&nr));
    if (nr > (1u << 24)) return CorruptData("operation header: too many resync ranks");
    for (uint32_t i = 0; i < nr; ++i) {
      uint32_t x;
      SPARROW_RETURN_IF_ERROR(r.u32(&x));
      h.resync.push_back(int32_t(x));
    }
    SPARROW_RETURN_IF_ERROR(r.u64(&h.segment));
    return h;
  }
};

Result<topology::Tree> tree_for(Comm& c, int root, double bytes) {
  topology::TreeInput in;
  in.nranks = c.nranks();
  in.root = root;
  for (auto& r : c.ranks()) in.places.push_back({r.host, r.region});
  // The probe measured from rank 0; it stands in for other roots too (same links at this scale).
  in.rtt_s = c.probe().rtt_s;
  in.bw_Bps = c.probe().bw_Bps;
  in.message_bytes = bytes;
  auto t = topology::build_tree("", in);
  if (t.ok() && c.rank() == root && log::level() >= log::Level::kInfo) SPARROW_INFO("%s", t->format().c_str());
  return t;
}

std::shared_ptr<std::vector<uint8_t>> share(std::vector<uint8_t>&& v) {
  return std::make_shared<std::vector<uint8_t>>(std::move(v));
}

// Sends one message to every child; the payload is kept alive by the requests.
Status send_all(Comm& c, const std::vector<int>& kids, const MsgKey& k, const std::shared_ptr<std::vector<uint8_t>>& m,
                std::vector<SendRequestPtr>* reqs = nullptr) {
  for (int kid : kids) {
    auto r = c.net().send(kid, k, Payload{m->data(), m->size(), m}, c.deadline());
    if (!r.ok()) return r.status();
    if (reqs) reqs->push_back(r.value());
  }
  return Status::Ok();
}

std::vector<uint8_t> ack_bytes(const Status& s, bool resync) {
  std::vector<uint8_t> o;
  format::put_u32(o, uint32_t(s.code()));
  format::put_u8(o, resync ? 1 : 0);
  std::string m = s.message().substr(0, 1000);
  format::put_u16(o, uint16_t(m.size()));
  o.insert(o.end(), m.begin(), m.end());
  return o;
}

// The root's verdict on an operation whose arguments had to be agreed (the first, full one on a
// buffer set, and dense broadcasts): sent to every rank, so a mismatch fails everywhere.
Status send_verdict(Comm& c, uint64_t seq, const Status& v) {
  auto m = share(ack_bytes(v, false));
  std::vector<SendRequestPtr> reqs;
  for (int r = 0; r < c.nranks(); ++r)
    if (r != c.rank()) SPARROW_RETURN_IF_ERROR(send_all(c, {r}, MsgKey{c.comm_id(), seq, kVerdictSub}, m, &reqs));
  // Handed to the transport before returning: the caller may destroy the communicator next.
  for (auto& r : reqs) SPARROW_RETURN_IF_ERROR(r->wait(c.deadline()));
  return Status::Ok();
}

Status recv_verdict(Comm& c, uint64_t seq, int root, transport::Deadline d) {
  SPARROW_ASSIGN_OR_RETURN(auto v, c.net().recv(root, MsgKey{c.comm_id(), seq, kVerdictSub}, d));
  format::ByteReader r(v, "verdict");
  uint32_t code;
  uint8_t flag;
  uint16_t n;
  const uint8_t* p;
  if (!r.u32(&code).ok() || !r.u8(&flag).ok() || !r.u16(&n).ok() || !r.bytes(n, &p).ok()) return CorruptData("bad verdict from the root");
  if (code == 0) return Status::Ok();
  return Status(Code(code), std::string(reinterpret_cast<const char*>(p), n));
}

// Handles one acknowledgement at the root. Returns the rank's failure (as seen by the root).
Status take_ack(Comm& c, const std::vector<uint8_t>& a, int rank, uint64_t seq, const CollState::Key& key) {
  format::ByteReader r(a, "acknowledgement");
  uint32_t code;
  uint8_t resync;
  uint16_t n;
  const uint8_t* p;
  if (!r.u32(&code).ok() || !r.u8(&resync).ok() || !r.u16(&n).ok() || !r.bytes(n, &p).ok())
    return CorruptData("bad acknowledgement from rank " + std::to_string(rank));
  if (resync) {
    auto it = c.coll().roots.find(key);
    if (it != c.coll().roots.end()) it->second.need_resync.insert(rank);
  }
  if (code == 0 || Code(code) == Code::kVersionMismatch) return Status::Ok();  // resynced next time
  return Status(Code(code), "rank " + std::to_string(rank) + " failed operation " + std::to_string(seq) + ": " +
                                std::string(reinterpret_cast<const char*>(p), n));
}

// Collects acknowledgements of earlier operations rooted here: without waiting, or waiting for the
// oldest ones while more than `window` are outstanding.
Status drain_acks(Comm& c, size_t window) {
  auto& acks = c.coll().acks;
  Status first;
  while (!acks.empty()) {
    bool block = acks.size() > window;
    auto& pa = acks.front();
    for (auto it = pa.ranks.begin(); it != pa.ranks.end();) {
      // Not waiting: a lower rank that has not connected to us yet has not acknowledged either.
      if (!block && *it < c.rank() && !c.net().has_channel(*it)) {
        ++it;
        continue;
      }
      auto d = block ? c.deadline() : transport::Clock::now();
      auto a = c.net().recv(*it, MsgKey{c.comm_id(), pa.seq, kAckSub}, d);
      if (!a.ok()) {
        if (a.status().code() == Code::kTimeout && !block) {
          ++it;
          continue;
        }
        if (first.ok()) first = a.status();
        it = pa.ranks.erase(it);
        continue;
      }
      Status s = take_ack(c, a.value(), *it, pa.seq, pa.key);
      if (!s.ok() && first.ok()) first = s;
      it = pa.ranks.erase(it);
    }
    if (!pa.ranks.empty()) break;
    acks.pop_front();
  }
  return first;
}

std::string arg_desc(const std::vector<BufferArg>& bufs, int root) {
  std::string s = "root " + std::to_string(root) + ", buffers:";
  for (auto& b : bufs) s += " " + std::to_string(b.count) + " x " + format::dtype_name(uint8_t(b.dtype));
  return s;
}

Status check_header(const OpHeader& h, uint8_t kind, const std::vector<BufferArg>& bufs, int root, int me) {
  bool ok = h.kind == kind && h.root == root && h.bufs.size() == bufs.size();
  for (size_t i = 0; ok && i < bufs.size(); ++i) ok = h.bufs[i].first == bufs[i].count && h.bufs[i].second == bufs[i].dtype;
  if (ok) return Status::Ok();
  std::vector<BufferArg> theirs;
  for (auto& [n, d] : h.bufs) theirs.push_back({nullptr, nullptr, n, d});
  return Error(Code::kInvalidUsage, std::string(kind == kSparse ? "sparse_bcast" : "broadcast") +
                                        " arguments differ between ranks: the root called it with " +
                                        arg_desc(theirs, h.root) + "; rank " + std::to_string(me) + " with " +
                                        arg_desc(bufs, root));
}

}  // namespace

// ---- dense -------------------------------------------------------------------------------------------

Status broadcast(Comm& c, const std::vector<BufferArg>& bufs, int root) {
  const int me = c.rank();
  const auto d = c.deadline();
  const double t0 = now_s();
  const size_t seg = size_t(kSegment.get());
  struct Op {
    uint64_t seq;
    topology::Tree t;
    size_t bytes;
    Status result;
    std::vector<uint8_t> staging;  // device buffers, and receivers' scratch on a mismatch
    bool to_device = false;
  };
  std::vector<Op> ops;
  for (auto& b : bufs) {
    Op op;
    op.seq = c.next_seq();
    op.bytes = b.count * format::dtype_size(uint8_t(b.dtype));
    SPARROW_ASSIGN_OR_RETURN(op.t, tree_for(c, root, double(op.bytes)));
    ops.push_back(std::move(op));
  }
  std::vector<SendRequestPtr> reqs;
  Status result;
  // Every operation's data first (pipelined in segments along its tree), then one round of
  // acknowledgements and verdicts for all of them: a group of N broadcasts pays one round trip, not N.
  if (me == root) {
    SPARROW_RETURN_IF_ERROR(drain_acks(c, kAckWindow));
    for (size_t k = 0; k < bufs.size(); ++k) {
      const BufferArg& b = bufs[k];
      Op& op = ops[k];
      const auto& kids = op.t.children[me];
      OpHeader h;
      h.kind = kDense;
      h.root = root;
      h.bufs = {{b.count, uint8_t(b.dtype)}};
      h.segment = seg;
      SPARROW_RETURN_IF_ERROR(send_all(c, kids, MsgKey{c.comm_id(), op.seq, 0}, share(h.encode())));
      const uint8_t* src = static_cast<const uint8_t*>(b.send);
      // A device buffer goes through host staging (the transport reads host memory).
      if (op.bytes && kernels::is_device(kernels::device_ops(), src)) {
        op.staging.resize(op.bytes);
        SPARROW_RETURN_IF_ERROR(kernels::copy_any(op.staging.data(), src, op.bytes));
        src = op.staging.data();
      }
      const size_t nseg = op.bytes == 0 ? 0 : (op.bytes + seg - 1) / seg;
      for (size_t i = 0; i < nseg; ++i) {
        size_t off = i * seg, n = std::min(seg, op.bytes - off);
        for (int kid : kids) {
          auto r = c.net().send(kid, MsgKey{c.comm_id(), op.seq, uint32_t(1 + i)}, Payload{src + off, n, nullptr}, d);
          if (!r.ok()) return r.status();
          reqs.push_back(r.value());
        }
      }
      if (b.recv && b.recv != b.send && op.bytes) SPARROW_RETURN_IF_ERROR(kernels::copy_any(b.recv, src, op.bytes));
    }
    for (auto& r : reqs) SPARROW_RETURN_IF_ERROR(r->wait(d));
    // Agreement: every rank reports; a mismatched call fails everywhere.
    for (auto& op : ops) {
      for (int r = 0; r < c.nranks(); ++r) {
        if (r == me) continue;
        SPARROW_ASSIGN_OR_RETURN(auto a, c.net().recv(r, MsgKey{c.comm_id(), op.seq, kAckSub}, d));
        Status s = take_ack(c, a, r, op.seq, {});
        if (!s.ok() && op.result.ok()) op.result = s;
      }
    }
    for (auto& op : ops) {
      SPARROW_RETURN_IF_ERROR(send_verdict(c, op.seq, op.result));
      if (result.ok()) result = op.result;
    }
  } else {
    for (size_t k = 0; k < bufs.size(); ++k) {
      const BufferArg& b = bufs[k];
      Op& op = ops[k];
      const auto& kids = op.t.children[me];
      const int parent = op.t.parent[me];
      SPARROW_ASSIGN_OR_RETURN(auto hm, c.net().recv(parent, MsgKey{c.comm_id(), op.seq, 0}, d));
      auto hshared = share(std::move(hm));
      SPARROW_RETURN_IF_ERROR(send_all(c, kids, MsgKey{c.comm_id(), op.seq, 0}, hshared, &reqs));
      SPARROW_ASSIGN_OR_RETURN(OpHeader h, OpHeader::decode(*hshared));
      op.result = check_header(h, kDense, {b}, root, me);
      const size_t rbytes = h.bufs.empty() ? 0 : h.bufs[0].first * format::dtype_size(h.bufs[0].second);
      const size_t rseg = h.segment ? h.segment : seg;
      const size_t rn = rbytes == 0 ? 0 : (rbytes + rseg - 1) / rseg;
      // On a mismatch the data still flows to the children (their calls may be right), through scratch.
      uint8_t* dst = static_cast<uint8_t*>(b.recv);
      op.to_device = op.result.ok() && rbytes && kernels::is_device(kernels::device_ops(), dst);
      if (!op.result.ok() || op.to_device) {  // a device buffer is received through host staging
        op.staging.resize(rbytes);
        dst = op.staging.data();
      }
      for (size_t i = 0; i < rn; ++i) {
        size_t off = i * rseg, n = std::min(rseg, rbytes - off);
        Status s = c.net().recv_into(parent, MsgKey{c.comm_id(), op.seq, uint32_t(1 + i)}, dst + off, n, d);
        if (!s.ok()) return s;
        for (int kid : kids) {
          auto r = c.net().send(kid, MsgKey{c.comm_id(), op.seq, uint32_t(1 + i)}, Payload{dst + off, n, nullptr}, d);
          if (!r.ok()) return r.status();
          reqs.push_back(r.value());
        }
      }
    }
    for (auto& r : reqs) SPARROW_RETURN_IF_ERROR(r->wait(d));
    for (size_t k = 0; k < bufs.size(); ++k) {
      Op& op = ops[k];
      if (op.to_device) op.result = kernels::copy_any(bufs[k].recv, op.staging.data(), op.staging.size());
      auto ack = share(ack_bytes(op.result, false));
      SPARROW_RETURN_IF_ERROR(send_all(c, {root}, MsgKey{c.comm_id(), op.seq, kAckSub}, ack));
    }
    for (auto& op : ops) {
      Status v = recv_verdict(c, op.seq, root, d);
      if (op.result.ok()) op.result = v;
      if (result.ok()) result = op.result;
    }
  }
  auto& st = c.coll().stats;
  st.ops++;
  st.dense_bytes = st.wire_bytes = 0;
  st.changed = 0;
  for (size_t k = 0; k < bufs.size(); ++k) {
    st.dense_bytes += ops[k].bytes;
    st.changed += bufs[k].count;
  }
  st.wire_bytes = st.dense_bytes;
  st.density = 1.0;
  st.encode_s = st.apply_s = 0;
  st.total_s = now_s() - t0;
  st.full = true;
  return result;
}

namespace {

// Runs an ApplySession's begin/add_chunk on its own thread, fed in arrival order.
class Decoder {
 public:
  Decoder(kernels::cpu::ApplySession* sess, int parent) : sess_(sess), parent_(parent) {
    if (sess_) t_ = std::thread([this] { run(); });
  }
  ~Decoder() { (void)join(); }
  void push(std::shared_ptr<std::vector<uint8_t>> m) {
    if (!sess_) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(m));
    }
    cv_.notify_one();
  }
  // Waits for everything pushed; the first failure.
  Status join() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_one();
    if (t_.joinable()) t_.join();
    return status_;
  }
  double seconds() const { return secs_; }

 private:
  void run() {
    bool first = true;
    while (true) {
      std::shared_ptr<std::vector<uint8_t>> m;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return !q_.empty() || done_; });
        if (q_.empty()) return;
        m = std::move(q_.front());
        q_.pop_front();
      }
      if (!status_.ok()) continue;  // drain: the first failure stands
      double t0 = now_s();
      status_ = first ? sess_->begin(*m) : sess_->add_chunk(m);
      if (!status_.ok() && !first) status_.context("from rank " + std::to_string(parent_));
      first = false;
      secs_ += now_s() - t0;
    }
  }
  kernels::cpu::ApplySession* sess_;
  int parent_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<std::vector<uint8_t>>> q_;
  bool done_ = false;
  Status status_;
  double secs_ = 0;
  std::thread t_;
};

}  // namespace

// ---- sparse ------------------------------------------------------------------------------------------

Status sparse_bcast(Comm& c, const std::vector<BufferArg>& bufs, int root) {
  const int me = c.rank();
  const uint64_t seq = c.next_seq();
  const auto d = c.deadline();
  double t0 = now_s();
  std::vector<TensorSpec> layout;
  CollState::Key key;
  double dense = 0;
  for (size_t i = 0; i < bufs.size(); ++i) {
    layout.push_back({"buffer" + std::to_string(i), uint8_t(bufs[i].dtype), bufs[i].count});
    key.push_back(me == root ? bufs[i].send : bufs[i].recv);
    dense += double(layout.back().bytes());
  }
  SPARROW_ASSIGN_OR_RETURN(topology::Tree t, tree_for(c, root, dense / 100));
  const auto& kids = t.children[me];
  auto& st = c.coll().stats;

  if (me == root) {
    Status earlier = drain_acks(c, kAckWindow);
    auto& rs = c.coll().roots[key];
    if (rs.layout.size() != layout.size() ||
        !std::equal(layout.begin(), layout.end(), rs.layout.begin(), [](const TensorSpec& a, const TensorSpec& b) {
          return a.count == b.count && a.dtype == b.dtype;
        })) {
      rs.layout = layout;
      rs.enc = std::make_unique<kernels::cpu::DeltaEncoder>(layout);
      rs.need_resync.clear();
    }
    const bool full = !rs.enc->has_state();
    OpHeader h;
    h.kind = kSparse;
    h.flags = full ? kOpFull : 0;
    h.root = root;
    for (auto& b : bufs) h.bufs.push_back({b.count, uint8_t(b.dtype)});
    std::set<int> resync = full ? std::set<int>{} : rs.need_resync;
    for (int r : resync) h.resync.push_back(r);
    SPARROW_RETURN_IF_ERROR(send_all(c, kids, MsgKey{c.comm_id(), seq, 0}, share(h.encode())));
    std::vector<const void*> src;
    for (auto& b : bufs) src.push_back(b.send);
    // Stream: header first, then every chunk as soon as a worker finished it.
    std::atomic<uint32_t> next_sub{2};
    std::mutex err_mu;
    Status send_err;
    auto emit = [&](uint32_t sub, std::vector<uint8_t>&& frame) {
      Status s = send_all(c, kids, MsgKey{c.comm_id(), seq, sub}, share(std::move(frame)));
      if (!s.ok()) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (send_err.ok()) send_err = s;
      }
    };
    kernels::cpu::EncodeStats es;
    kernels::cpu::EncodeOptions eo;
    eo.paper_format = kCodec.get() == "paper";
    double te = now_s();
    auto footer = rs.enc->encode_stream(
        src, eo, &es, [&](std::vector<uint8_t>&& hb) { emit(1, std::move(hb)); },
        [&](std::vector<uint8_t>&& fb) { emit(next_sub++, std::move(fb)); });
    if (!footer.ok()) return footer.status();
    emit(next_sub++, std::move(footer.value()));
    st.encode_s = now_s() - te;
    SPARROW_RETURN_IF_ERROR(send_err);
    // Every acknowledgement of the earlier operations, now that this one's data is on its way (they
    // were sent when those calls returned, so this rarely waits): a rank that refused one of them
    // expects its full snapshot in this operation, the very next one.
    if (!full) {
      Status late = drain_acks(c, 0);
      if (earlier.ok()) earlier = late;
      resync.insert(rs.need_resync.begin(), rs.need_resync.end());
    }
    rs.need_resync.clear();
    for (int r : resync) {
      SPARROW_ASSIGN_OR_RETURN(auto snap, rs.enc->snapshot(src));
      SPARROW_RETURN_IF_ERROR(send_all(c, {r}, MsgKey{c.comm_id(), seq, kResyncSub}, share(std::move(snap))));
      st.resyncs++;
    }
    // The root's own receive buffer gets the data too (not in place).
    for (auto& b : bufs)
      if (b.recv && b.recv != b.send && b.count)
        SPARROW_RETURN_IF_ERROR(kernels::copy_any(b.recv, b.send, b.count * format::dtype_size(uint8_t(b.dtype))));
    CollState::PendingAck pa{seq, key, {}};
    for (int r = 0; r < c.nranks(); ++r)
      if (r != me) pa.ranks.push_back(r);
    c.coll().acks.push_back(std::move(pa));
    st.ops++;
    st.dense_bytes = es.dense_bytes;
    st.wire_bytes = es.wire_bytes;
    st.changed = es.changes;
    st.density = es.density();
    st.full = full;
    st.apply_s = 0;
    Status result = earlier;
    if (full) {
      // First operation on these buffers: wait for everyone, so a mismatched call fails everywhere.
      Status agree = drain_acks(c, 0);
      if (!agree.ok()) rs.enc->reset();  // the next call is a full snapshot again
      SPARROW_RETURN_IF_ERROR(send_verdict(c, seq, agree));
      if (result.ok()) result = agree;
    }
    st.total_s = now_s() - t0;
    return result;
  }

  // Receiver (and relay).
  const int parent = t.parent[me];
  std::vector<SendRequestPtr> reqs;
  SPARROW_ASSIGN_OR_RETURN(auto hm, c.net().recv(parent, MsgKey{c.comm_id(), seq, 0}, d));
  auto hshared = share(std::move(hm));
  SPARROW_RETURN_IF_ERROR(send_all(c, kids, MsgKey{c.comm_id(), seq, 0}, hshared, &reqs));
  SPARROW_ASSIGN_OR_RETURN(OpHeader h, OpHeader::decode(*hshared));
  Status result = check_header(h, kSparse, bufs, root, me);
  // This rank's receive state (a new buffer set, or a new layout, starts from nothing).
  auto& rv = c.coll().recvs[key];
  if (rv.layout.size() != layout.size() ||
      !std::equal(layout.begin(), layout.end(), rv.layout.begin(), [](const TensorSpec& a, const TensorSpec& b) {
        return a.count == b.count && a.dtype == b.dtype;
      })) {
    rv.layout = layout;
    rv.st = {};
    rv.stale = false;
  }
  // A rank that refused the last operation gets a full snapshot in this one (the root collects that
  // refusal before it finishes sending); so does one the root lists in the header.
  const bool resync_me = !(h.flags & kOpFull) &&
                         (rv.stale || std::find(h.resync.begin(), h.resync.end(), me) != h.resync.end());
  std::vector<void*> dst;
  for (auto& b : bufs) dst.push_back(b.recv);
  // Relay: forward each frame at once (cut-through); then verify and decode it here while the next
  // ones are on the wire, so that only the writes remain after the last one.
  std::optional<kernels::cpu::ApplySession> sess;
  if (result.ok() && !resync_me) sess.emplace(dst, layout, rv.st);
  // The decoder thread: header and chunks in arrival order. The receiving thread only receives and
  // forwards, so a relay's children never wait for its decoding.
  Decoder dec(sess ? &*sess : nullptr, parent);
  std::shared_ptr<std::vector<uint8_t>> footer_msg;
  uint64_t wire = 0;
  bool full_ck = false;
  for (uint32_t sub = 1;; ++sub) {
    // (An early return joins the decoder in its destructor.)
    SPARROW_ASSIGN_OR_RETURN(auto m, c.net().recv(parent, MsgKey{c.comm_id(), seq, sub}, d));
    auto ms = share(std::move(m));
    SPARROW_RETURN_IF_ERROR(send_all(c, kids, MsgKey{c.comm_id(), seq, sub}, ms, &reqs));
    const auto& v = *ms;
    wire += v.size();
    bool footer = v.size() >= 4 && format::load_u32(v.data()) == format::kFooterMagic;
    if (sub == 1) {
      size_t used = 0;
      auto hh = format::parse_header(v, &used);
      full_ck = hh.ok() && hh->full();
    }
    if (footer) footer_msg = ms;
    else dec.push(ms);
    if (footer || sub > (1u << 30)) break;
  }
  const Status staged = dec.join();
  const double tdec = dec.seconds();
  double ta = now_s();
  bool need_resync = false;
  kernels::cpu::ApplyStats as;
  if (result.ok()) {
    if (resync_me) {
      SPARROW_ASSIGN_OR_RETURN(auto snap, c.net().recv(root, MsgKey{c.comm_id(), seq, kResyncSub}, d));
      result = kernels::cpu::apply_checkpoint(snap, dst, layout, rv.st);
      if (result.ok()) st.resyncs++;
      else need_resync = true;
    } else {
      if (!staged.ok()) result = staged;
      else if (!footer_msg) result = CorruptData("checkpoint from rank " + std::to_string(parent) + " has no footer");
      else result = sess->finish(*footer_msg, &as);
      if (result.code() == Code::kVersionMismatch) {
        need_resync = true;
        result.context("rank " + std::to_string(me) + " refused this step: its buffers are as they were, and its "
                       "next call on them brings a full snapshot from rank " + std::to_string(root));
      }
      st.changed = as.changes;
    }
  }
  st.apply_s = now_s() - ta + tdec;
  if (result.ok() || need_resync) rv.stale = need_resync;
  auto ack = share(ack_bytes(result, need_resync));
  SPARROW_RETURN_IF_ERROR(send_all(c, {root}, MsgKey{c.comm_id(), seq, kAckSub}, ack));
  if (full_ck) {
    Status v = recv_verdict(c, seq, root, d);
    if (result.ok()) result = v;
  }
  st.ops++;
  st.dense_bytes = size_t(dense);
  st.wire_bytes = wire;
  uint64_t elems = 0;
  for (auto& l : layout) elems += l.count;
  st.density = elems ? double(st.changed) / double(elems) : 0;
  st.encode_s = 0;
  st.full = full_ck;
  // A relay's forwarding is part of its call: once it returns, the caller may destroy the
  // communicator, which must not cut its children off. (Handed to the kernel: usually done already.)
  for (auto& r : reqs) {
    Status s = r->wait(d);
    if (!s.ok() && result.ok()) result = std::move(s).context("forwarding to this rank's children");
  }
  st.total_s = now_s() - t0;
  return result;
}

Status finish(Comm& c) { return drain_acks(c, 0); }

Status sparse_reset(Comm& c, const void* buff) {
  auto& cs = c.coll();
  for (auto it = cs.roots.begin(); it != cs.roots.end();) it = std::find(it->first.begin(), it->first.end(), buff) != it->first.end() ? cs.roots.erase(it) : std::next(it);
  for (auto it = cs.recvs.begin(); it != cs.recvs.end();) it = std::find(it->first.begin(), it->first.end(), buff) != it->first.end() ? cs.recvs.erase(it) : std::next(it);
  return Status::Ok();
}

}  // namespace sparrow::coll
