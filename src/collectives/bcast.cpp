#include "collectives/bcast.h"

#include "collectives/retain.h"

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

// Error messages name the messages of an operation ("the acknowledgement of operation 7").
std::string name_key(const MsgKey& k) {
  const std::string op = "operation " + std::to_string(k.seq);
  switch (k.sub) {
    case 0: return "header of " + op;
    case kAckSub: return "acknowledgement of " + op;
    case kResyncSub: return "resync (snapshot or missed deltas) of " + op;
    case kVerdictSub: return "verdict on " + op;
    default: return "part " + std::to_string(k.sub) + " of " + op;
  }
}
[[maybe_unused]] const bool kNamerInstalled = (transport::set_key_namer(name_key), true);

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
  if (t.ok() && c.rank() == root && log::level() >= log::Level::kInfo) {
    // Once per distinct tree (it is the same every step unless the root or the size class changes).
    std::string f = t->format();
    if (f != c.coll().last_tree_logged) {
      SPARROW_INFO("%s", f.c_str());
      c.coll().last_tree_logged = std::move(f);
    }
  }
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

// An acknowledgement (and the verdict, in the same shape): the status, whether the rank asks for a
// resync, the version its buffers hold (what a catch-up starts from; 0: it needs a full snapshot).
std::vector<uint8_t> ack_bytes(const Status& s, bool resync, uint64_t holds = 0) {
  std::vector<uint8_t> o;
  format::put_u32(o, uint32_t(s.code()));
  format::put_u8(o, resync ? 1 : 0);
  std::string m = s.message().substr(0, 1000);
  format::put_u16(o, uint16_t(m.size()));
  o.insert(o.end(), m.begin(), m.end());
  format::put_u64(o, holds);
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
  uint64_t holds = 0;
  if (!r.u32(&code).ok() || !r.u8(&resync).ok() || !r.u16(&n).ok() || !r.bytes(n, &p).ok() || !r.u64(&holds).ok())
    return CorruptData("bad acknowledgement from rank " + std::to_string(rank));
  if (resync) {
    auto it = c.coll().roots.find(key);
    if (it != c.coll().roots.end()) it->second.need_resync[rank] = holds;
  }
  if (code == 0 || Code(code) == Code::kVersionMismatch) return Status::Ok();  // resynced next time
  if (resync) {  // it failed there (a timeout, a lost parent) and is brought up to date next time
    SPARROW_WARN("rank %d failed operation %llu (%s); it holds version %llu and is resynchronised at the next one",
                 rank, (unsigned long long)seq, std::string(reinterpret_cast<const char*>(p), n).c_str(),
                 (unsigned long long)holds);
    return Status::Ok();
  }
  return Status(Code(code), "rank " + std::to_string(rank) + " failed operation " + std::to_string(seq) + ": " +
                                std::string(reinterpret_cast<const char*>(p), n));
}

// Collects acknowledgements of earlier operations rooted here: without waiting, or waiting for the
// oldest ones while more than `window` are outstanding.
Status drain_acks(Comm& c, size_t window) {
  auto& acks = c.coll().acks;
  Status first;
  // One deadline for the whole drain: missing acknowledgements of several ranks or operations cost
  // one SPARROW_TIMEOUT_S together, not one each.
  const auto deadline = c.deadline();
  while (!acks.empty()) {
    bool block = acks.size() > window;
    auto& pa = acks.front();
    for (auto it = pa.ranks.begin(); it != pa.ranks.end();) {
      // Not waiting: a lower rank that has not connected to us yet has not acknowledged either.
      if (!block && *it < c.rank() && !c.net().has_channel(*it)) {
        ++it;
        continue;
      }
      auto d = block ? deadline : transport::Clock::now();
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

// Marks a collective running on this communicator (for sparrowCommGetProgress) while in scope.
struct InCall {
  Comm& c;
  explicit InCall(Comm& c_) : c(c_) { c.coll().in_call++; }
  ~InCall() { c.coll().in_call--; }
};

// The traffic of the operation that just ended, this rank's place in its tree, and (for a receiver)
// its first and last byte from its parent; the stage times are set by the caller.
void record_traffic(Comm& c, int parent, const std::vector<int>& children) {
  auto& st = c.coll().stats;
  st.parent = parent;
  st.children = children;
  st.peers.resize(size_t(c.nranks()));
  for (int r = 0; r < c.nranks(); ++r) st.peers[r] = r == c.rank() ? transport::Net::PeerTraffic{} : c.net().traffic(r);
  st.extract_s = st.first_byte_s = st.last_byte_s = st.verify_s = st.decode_s = st.commit_s = -1;
  if (parent >= 0) {
    st.first_byte_s = st.peers[parent].first_s;
    st.last_byte_s = st.peers[parent].last_s;
  }
}

// SPARROW_DEBUG=INFO with SPARROW_DEBUG_SUBSYS=STEP: one line per step on every rank, with the bound
// the start-up probe gives for it (wire bytes over the probed rate plus half the round trip).
void log_step(Comm& c, const char* what) {
  if (log::level() < log::Level::kInfo || !(log::subsystems() & log::kStep)) return;
  const auto& st = c.coll().stats;
  const auto& p = c.probe();
  double bound = -1;
  for (int r = 0; r < int(p.bw_Bps.size()) && r < c.nranks(); ++r) {
    if (r == p.root || p.bw_Bps[r] <= 0 || p.rtt_s[r] < 0) continue;
    if (!st.is_root() && r != c.rank()) continue;  // a receiver: its own path; the root: the slowest
    bound = std::max(bound, double(st.wire_bytes) / p.bw_Bps[r] + p.rtt_s[r] / 2);
  }
  char b[64] = "";
  if (bound > 0) snprintf(b, sizeof b, ", %.2fx the probed bound %.1f ms", st.total_s / bound, bound * 1e3);
  SPARROW_STEP("%s op %llu (%s): %llu -> %llu bytes%s, %.1f ms%s", what, (unsigned long long)st.ops,
               st.is_root() ? "root" : "receiver", (unsigned long long)st.dense_bytes, (unsigned long long)st.wire_bytes,
               st.full ? ", full" : "", st.total_s * 1e3, b);
}

bool same_layout(const std::vector<TensorSpec>& a, const std::vector<TensorSpec>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const TensorSpec& x, const TensorSpec& y) { return x.count == y.count && x.dtype == y.dtype; });
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
  SPARROW_RETURN_IF_ERROR(no_stage_pending(c));
  InCall busy(c);
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
  if (!ops.empty()) c.net().begin_traffic(ops.front().seq, ops.back().seq);
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
  record_traffic(c, me == root || ops.empty() ? -1 : ops[0].t.parent[me], ops.empty() ? std::vector<int>{} : ops[0].t.children[me]);
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
  log_step(c, "broadcast");
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
      status_ = first ? sess_->begin(*m) : sess_->add_chunk(m);
      if (!status_.ok() && !first) status_.context("from rank " + std::to_string(parent_));
      first = false;
    }
  }
  kernels::cpu::ApplySession* sess_;
  int parent_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<std::vector<uint8_t>>> q_;
  bool done_ = false;
  Status status_;
  std::thread t_;
};

}  // namespace

namespace {

// This rank's receive state for a buffer set (a new buffer set, or a new layout, starts from nothing).
CollState::Recv& receiver_state(Comm& c, const CollState::Key& key, const std::vector<TensorSpec>& layout) {
  auto& rv = c.coll().recvs[key];
  if (!same_layout(rv.layout, layout)) {
    rv.layout = layout;
    rv.st = {};
    rv.stale = false;
  }
  return rv;
}

// Hands a whole checkpoint (a resync snapshot) to an ApplySession frame by frame and prepares it.
Status feed_checkpoint(kernels::cpu::ApplySession& sess, const std::shared_ptr<std::vector<uint8_t>>& blob) {
  std::span<const uint8_t> rest(*blob);
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(format::Header h, format::parse_header(rest, &used));
  SPARROW_RETURN_IF_ERROR(sess.begin(rest.first(used)));
  rest = rest.subspan(used);
  while (rest.size() >= 4 && format::load_u32(rest.data()) != format::kFooterMagic) {
    SPARROW_ASSIGN_OR_RETURN(format::ChunkView cv, format::parse_chunk(rest, h, &used));
    (void)cv;
    SPARROW_RETURN_IF_ERROR(sess.add_chunk(blob, rest.first(used)));
    rest = rest.subspan(used);
  }
  return sess.prepare(rest);
}

// What every rank computes alike at the start of a sparse operation.
struct SparseOp {
  uint64_t seq = 0;
  std::vector<TensorSpec> layout;
  CollState::Key key;  // this rank's buffers (root: send, others: recv)
  size_t dense = 0;    // bytes of the buffers
  topology::Tree tree;
};

Result<SparseOp> begin_sparse(Comm& c, const std::vector<BufferArg>& bufs, int root) {
  SparseOp op;
  op.seq = c.next_seq();
  c.net().begin_traffic(op.seq, op.seq);
  for (size_t i = 0; i < bufs.size(); ++i) {
    op.layout.push_back({"buffer" + std::to_string(i), uint8_t(bufs[i].dtype), bufs[i].count});
    op.key.push_back(c.rank() == root ? bufs[i].send : bufs[i].recv);
    op.dense += op.layout.back().bytes();
  }
  SPARROW_ASSIGN_OR_RETURN(op.tree, tree_for(c, root, double(op.dense) / 100));
  return op;
}

}  // namespace

// One sparse operation on a receiver (a relay too): receive() takes every frame from the parent and
// forwards it to the children at once, has the decoder thread verify and decode it, and ends with
// the acceptance check, the acknowledgement to the root and (on a full version) the root's verdict;
// nothing is written. commit() then writes (time proportional to the changes) and records the stats.
// A blocking call runs both; a staged call (sparrowSparseBcastStage) runs receive() on a background
// thread and commit() in sparrowStageCommit. Until commit() the targets are only read.
class SparseReceiver {
 public:
  SparseReceiver(Comm& c, std::vector<BufferArg> bufs, int root, const SparseOp& op, bool staged)
      : c_(c), bufs_(std::move(bufs)), root_(root), seq_(op.seq), layout_(op.layout), key_(op.key), dense_(op.dense),
        parent_(op.tree.parent[c.rank()]), kids_(op.tree.children[c.rank()]), d_(c.deadline()), t0_(now_s()) {
    aopt_.checksum_ahead = staged;  // a staged commit only writes
  }

  Status receive() {
    // What earlier operations left behind (ones this rank gave up on) is of no use any more.
    if (size_t n = c_.net().discard_before(c_.comm_id(), seq_))
      SPARROW_TRACE("dropped %zu message(s) of operations before %llu", n, (unsigned long long)seq_);
    rv_ = &receiver_state(c_, key_, layout_);
    Status r = receive_op();
    if (!acked_) {
      // It failed before acknowledging (a timeout, a lost parent): this rank holds its last version
      // and asks to be brought up to date at the next operation (best effort: the root may be gone).
      need_resync_ = true;
      (void)send_all(c_, {root_}, MsgKey{c_.comm_id(), seq_, kAckSub}, share(ack_bytes(r, true, rv_->st.version)));
    }
    return r;
  }
  // Writes what receive() accepted (`received` is its result) and records the operation's stats.
  Status commit(Status received) {
    Status result = std::move(received);
    kernels::cpu::ApplyStats as;
    if (result.ok() && sess_) {
      result = sess_->commit(&as);
      if (result.ok() && resync_) resynced_ = true;
    }
    // Expect a snapshot next time exactly when this step was refused and one was asked for; a
    // snapshot that failed starts over (the next delta is refused and asks again).
    if (rv_ && (result.ok() || need_resync_ || resync_)) rv_->stale = need_resync_;
    record_traffic(c_, parent_, kids_);
    auto& st = c_.coll().stats;
    st.verify_s = as.verify_seconds;
    st.decode_s = as.decode_seconds;
    st.commit_s = as.write_seconds;
    st.ops++;
    if (resynced_) st.resyncs++;
    if (resynced_ && catchup_bytes_) {
      st.catchups++;
      st.catchup_bytes += catchup_bytes_;
    }
    st.changed = resync_ && !catchup_bytes_ ? 0 : as.changes;
    st.apply_s = as.decode_seconds + as.write_seconds;  // decoding, the acceptance checks, the writes
    st.dense_bytes = dense_;
    st.wire_bytes = wire_;
    uint64_t elems = 0;
    for (auto& l : layout_) elems += l.count;
    st.density = elems ? double(st.changed) / double(elems) : 0;
    st.encode_s = 0;
    st.full = full_;
    st.total_s = now_s() - t0_;
    log_step(c_, result.ok() ? "sparse_bcast" : "sparse_bcast (failed)");
    return result;
  }

  // Progress, readable from another thread while receive() runs.
  uint64_t bytes_received() const { return wire_.load(); }
  size_t staged_bytes() const { return sess_ ? sess_->staged_bytes() : 0; }

 private:
  // The operation up to its acknowledgement (and the verdict of a full one).
  Status receive_op() {
    auto hm = c_.net().recv(parent_, MsgKey{c_.comm_id(), seq_, 0}, d_);
    if (!hm.ok()) return hm.status();
    auto hshared = share(std::move(hm.value()));
    SPARROW_RETURN_IF_ERROR(send_all(c_, kids_, MsgKey{c_.comm_id(), seq_, 0}, hshared, &reqs_));
    SPARROW_ASSIGN_OR_RETURN(OpHeader h, OpHeader::decode(*hshared));
    Status result = check_header(h, kSparse, bufs_, root_, c_.rank());
    // A rank that refused or failed the last operation gets a resync in this one (the root collects
    // that acknowledgement before it finishes sending); so does one the root lists in the header.
    full_ = h.flags & kOpFull;  // the root sends a verdict on exactly these
    resync_ = !full_ &&
              (rv_->stale || std::find(h.resync.begin(), h.resync.end(), c_.rank()) != h.resync.end());
    for (auto& b : bufs_) dst_.push_back(b.recv);
    if (result.ok() && !resync_) sess_.emplace(dst_, layout_, rv_->st, aopt_);
    std::shared_ptr<std::vector<uint8_t>> footer;
    Status staged = relay_frames(&footer);
    if (result.ok()) result = staged.ok() ? accept(footer) : staged;
    uint64_t holds = 0;  // what a catch-up may start from (0: a full snapshot)
    if (!result.ok() && resync_) {
      need_resync_ = true;  // the resync itself failed: a full snapshot next time
    } else if (result.code() == Code::kVersionMismatch) {
      // Behind (it holds an older version, untouched): the deltas it missed will do. Written to since
      // its last step: only a full snapshot.
      need_resync_ = true;
      const bool behind = sess_ && sess_->base_version() != rv_->st.version;
      if (behind) holds = rv_->st.version;
      result.context("rank " + std::to_string(c_.rank()) + " refused this step: its buffers are as they were, and "
                     "its next call on them brings " + (behind ? "the steps it missed" : "a full snapshot") +
                     " from rank " + std::to_string(root_));
    }
    SPARROW_RETURN_IF_ERROR(send_all(c_, {root_}, MsgKey{c_.comm_id(), seq_, kAckSub}, share(ack_bytes(result, need_resync_, holds))));
    acked_ = true;
    if (full_) {
      Status v = recv_verdict(c_, seq_, root_, d_);
      if (result.ok()) result = v;
    }
    // A relay's forwarding is part of its call: once it returns, the caller may destroy the
    // communicator, which must not cut its children off. (Handed to the kernel: usually done already.)
    for (auto& r : reqs_) {
      Status s = r->wait(d_);
      if (!s.ok() && result.ok()) result = std::move(s).context("forwarding to this rank's children");
    }
    return result;
  }

  // Receives sub 1.. (header, chunks, footer) from the parent, forwards each at once and hands it to
  // the decoder thread; returns the decoder's verdict and the footer.
  Status relay_frames(std::shared_ptr<std::vector<uint8_t>>* footer_out) {
    Decoder dec(sess_ ? &*sess_ : nullptr, parent_);
    for (uint32_t sub = 1;; ++sub) {
      // (An early return joins the decoder in its destructor.)
      SPARROW_ASSIGN_OR_RETURN(auto m, c_.net().recv(parent_, MsgKey{c_.comm_id(), seq_, sub}, d_));
      auto ms = share(std::move(m));
      SPARROW_RETURN_IF_ERROR(send_all(c_, kids_, MsgKey{c_.comm_id(), seq_, sub}, ms, &reqs_));
      wire_ += ms->size();
      SPARROW_TRACE("operation %llu: part %u (%zu bytes) from rank %d, forwarded to %zu child(ren)",
                    (unsigned long long)seq_, sub, ms->size(), parent_, kids_.size());
      if (resync_) held_.push_back(ms);  // this step's delta: the last link of a catch-up chain
      const bool is_footer = ms->size() >= 4 && format::load_u32(ms->data()) == format::kFooterMagic;
      if (is_footer) *footer_out = ms;
      else dec.push(ms);
      if (is_footer || sub > (1u << 30)) break;
    }
    return dec.join();
  }

  // The acceptance check of the delta, or the resync snapshot received and checked in its place.
  Status accept(const std::shared_ptr<std::vector<uint8_t>>& footer) {
    if (!resync_) {
      if (!footer) return CorruptData("checkpoint from rank " + std::to_string(parent_) + " has no footer");
      return sess_->prepare(*footer);
    }
    SPARROW_ASSIGN_OR_RETURN(auto snap, c_.net().recv(root_, MsgKey{c_.comm_id(), seq_, kResyncSub}, d_));
    auto blob = share(std::move(snap));
    wire_ += blob->size();
    sess_.emplace(dst_, layout_, rv_->st, aopt_);
    if (!is_chain_message(*blob)) return feed_checkpoint(*sess_, blob);
    // The deltas this rank missed, then this step's as it arrived: composed and written once.
    SPARROW_ASSIGN_OR_RETURN(auto links, decode_chain_message(*blob));
    auto cur = std::make_shared<std::vector<uint8_t>>();
    for (auto& f : held_) cur->insert(cur->end(), f->begin(), f->end());
    links.push_back(*cur);
    catchup_bytes_ = blob->size();
    Status s = sess_->prepare_chain(links, {blob, cur});
    if (!s.ok()) s.context("catching up from version " + std::to_string(rv_->st.version) + " by " +
                           std::to_string(links.size()) + " delta(s)");
    return s;
  }

  Comm& c_;
  std::vector<BufferArg> bufs_;
  int root_;
  uint64_t seq_;
  std::vector<TensorSpec> layout_;
  CollState::Key key_;
  size_t dense_;
  int parent_;
  std::vector<int> kids_;
  transport::Deadline d_;
  double t0_;
  CollState::Recv* rv_ = nullptr;
  std::vector<void*> dst_;
  kernels::cpu::ApplyOptions aopt_;
  std::optional<kernels::cpu::ApplySession> sess_;
  std::vector<SendRequestPtr> reqs_;
  std::atomic<uint64_t> wire_{0};
  std::vector<std::shared_ptr<std::vector<uint8_t>>> held_;
  uint64_t catchup_bytes_ = 0;
  bool full_ = false, resync_ = false, need_resync_ = false, resynced_ = false, acked_ = false;
};

namespace {

// ---- sparse ------------------------------------------------------------------------------------------

// Encodes the step and streams it to the children: the checkpoint header first, then every chunk as
// soon as a worker thread finished it, then the footer.
// `kept` (when given) receives every frame, for the retained steps.
Status stream_checkpoint(Comm& c, CollState::Root& rs, const std::vector<const void*>& src,
                         const std::vector<int>& kids, uint64_t seq, kernels::cpu::EncodeStats* es,
                         std::vector<std::shared_ptr<std::vector<uint8_t>>>* kept) {
  std::atomic<uint32_t> next_sub{2};
  std::mutex err_mu;
  Status send_err;
  auto emit = [&](uint32_t sub, std::vector<uint8_t>&& frame) {
    auto m = share(std::move(frame));
    SPARROW_TRACE("operation %llu: part %u (%zu bytes) to %zu child(ren)", (unsigned long long)seq, sub, m->size(),
                  kids.size());
    Status s = send_all(c, kids, MsgKey{c.comm_id(), seq, sub}, m);
    std::lock_guard<std::mutex> lk(err_mu);
    if (!s.ok() && send_err.ok()) send_err = s;
    if (kept) kept->push_back(std::move(m));  // the header first, the footer last: emitted in that order
  };
  kernels::cpu::EncodeOptions eo;
  eo.paper_format = kCodec.get() == "paper";
  auto footer = rs.enc->encode_stream(
      src, eo, es, [&](std::vector<uint8_t>&& hb) { emit(1, std::move(hb)); },
      [&](std::vector<uint8_t>&& fb) { emit(next_sub++, std::move(fb)); });
  if (!footer.ok()) return footer.status();
  emit(next_sub++, std::move(footer.value()));
  return send_err;
}

// Resyncs straight to the ranks that need one: a rank whose version the retained deltas lead on from
// gets those deltas up to this operation's base (it applies this operation's stream after them),
// when they are smaller than half the dense size; the others a full snapshot of the new version
// (encoded once for all). Each distinct message is built once.
Status send_resyncs(Comm& c, CollState::Root& rs, const std::vector<const void*>& src, const SparseOp& op,
                    uint64_t base, const std::map<int, uint64_t>& ranks) {
  if (ranks.empty()) return Status::Ok();
  std::shared_ptr<std::vector<uint8_t>> snapshot;
  std::map<uint64_t, std::shared_ptr<std::vector<uint8_t>>> chains;
  auto& st = c.coll().stats;
  for (auto [r, holds] : ranks) {
    std::shared_ptr<std::vector<uint8_t>> m;
    if (holds && chains.count(holds)) {
      m = chains[holds];
    } else if (auto links = holds ? rs.retained.chain(holds, base) : std::nullopt) {
      size_t bytes = 0;
      for (auto& l : *links) bytes += l->size();
      if (bytes < op.dense / 2) {
        m = chains[holds] = share(encode_chain_message(*links));
        SPARROW_INFO("rank %d catches up from version %llu by %zu retained delta(s) (%zu bytes) and this step", r,
                     (unsigned long long)holds, links->size(), bytes);
      }
    }
    if (m) {
      st.catchups++;
      st.catchup_bytes += m->size();
    } else {
      if (!snapshot) {
        SPARROW_ASSIGN_OR_RETURN(auto snap, rs.enc->snapshot(src));
        snapshot = share(std::move(snap));
      }
      m = snapshot;
    }
    SPARROW_RETURN_IF_ERROR(send_all(c, {r}, MsgKey{c.comm_id(), op.seq, kResyncSub}, m));
  }
  st.resyncs += ranks.size();
  return Status::Ok();
}

// The root's side of a sparse operation. It does not wait for this operation's acknowledgements
// (except on the first, full one, whose arguments every rank must agree on).
Status sparse_root(Comm& c, const std::vector<BufferArg>& bufs, int root, const SparseOp& op) {
  const double t0 = now_s();
  const auto& kids = op.tree.children[c.rank()];
  Status result = drain_acks(c, kAckWindow);
  auto& rs = c.coll().roots[op.key];
  if (!same_layout(rs.layout, op.layout)) {
    rs.layout = op.layout;
    rs.enc = std::make_unique<kernels::cpu::DeltaEncoder>(op.layout);
    rs.need_resync.clear();
  }
  const bool full = !rs.enc->has_state();
  const uint64_t base = rs.enc->version();
  if (full) rs.retained.clear();
  OpHeader h;
  h.kind = kSparse;
  h.flags = full ? kOpFull : 0;
  h.root = root;
  for (auto& b : bufs) h.bufs.push_back({b.count, uint8_t(b.dtype)});
  std::map<int, uint64_t> resync = full ? std::map<int, uint64_t>{} : rs.need_resync;
  for (auto [r, holds] : resync) h.resync.push_back(r);
  SPARROW_RETURN_IF_ERROR(send_all(c, kids, MsgKey{c.comm_id(), op.seq, 0}, share(h.encode())));
  std::vector<const void*> src;
  for (auto& b : bufs) src.push_back(b.send);
  kernels::cpu::EncodeStats es;
  const double te = now_s();
  std::vector<std::shared_ptr<std::vector<uint8_t>>> frames;
  const bool retain = rs.retained.enabled() && !full;
  SPARROW_RETURN_IF_ERROR(stream_checkpoint(c, rs, src, kids, op.seq, &es, retain ? &frames : nullptr));
  const double encode_s = now_s() - te;
  if (retain) {
    Status kept = rs.retained.add(frames);
    if (!kept.ok()) SPARROW_WARN("%s (catch-ups fall back to snapshots)", kept.message().c_str());
  }
  // Every acknowledgement of the earlier operations, now that this one's data is on its way (they
  // were sent when those calls returned, so this rarely waits): a rank that refused one of them
  // expects its full snapshot in this operation, the very next one.
  if (!full) {
    Status late = drain_acks(c, 0);
    if (result.ok()) result = late;
    for (auto [r, holds] : rs.need_resync) resync[r] = holds;
  }
  rs.need_resync.clear();
  SPARROW_RETURN_IF_ERROR(send_resyncs(c, rs, src, op, base, resync));
  if (rs.retained.wants_anchor(rs.enc->version())) {
    auto snap = rs.enc->snapshot(src);
    Status a = snap.ok() ? rs.retained.add_anchor(rs.enc->version(), snap.value()) : snap.status();
    if (!a.ok()) SPARROW_WARN("%s", a.message().c_str());
  }
  // The root's own receive buffer gets the data too (not in place).
  for (auto& b : bufs)
    if (b.recv && b.recv != b.send && b.count)
      SPARROW_RETURN_IF_ERROR(kernels::copy_any(b.recv, b.send, b.count * format::dtype_size(uint8_t(b.dtype))));
  CollState::PendingAck pa{op.seq, op.key, {}};
  for (int r = 0; r < c.nranks(); ++r)
    if (r != c.rank()) pa.ranks.push_back(r);
  c.coll().acks.push_back(std::move(pa));
  if (full) {
    // First operation on these buffers: wait for everyone, so a mismatched call fails everywhere.
    Status agree = drain_acks(c, 0);
    if (!agree.ok()) rs.enc->reset();  // the next call is a full snapshot again
    SPARROW_RETURN_IF_ERROR(send_verdict(c, op.seq, agree));
    if (result.ok()) result = agree;
  }
  record_traffic(c, -1, kids);
  auto& st = c.coll().stats;
  st.extract_s = es.extract_seconds;
  st.ops++;
  st.dense_bytes = es.dense_bytes;
  st.wire_bytes = es.wire_bytes;
  st.changed = es.changes;
  st.density = es.density();
  st.full = full;
  st.encode_s = encode_s;
  st.apply_s = 0;
  st.total_s = now_s() - t0;
  log_step(c, "sparse_bcast");
  return result;
}

}  // namespace

Status no_stage_pending(Comm& c) {
  if (c.coll().staged)
    return Error(Code::kInvalidUsage, "a staged sparse broadcast is pending on this communicator: call "
                                      "sparrowStageCommit before the next collective");
  return Status::Ok();
}

Status sparse_bcast(Comm& c, const std::vector<BufferArg>& bufs, int root) {
  SPARROW_RETURN_IF_ERROR(no_stage_pending(c));
  InCall busy(c);
  SPARROW_ASSIGN_OR_RETURN(SparseOp op, begin_sparse(c, bufs, root));
  if (c.rank() == root) return sparse_root(c, bufs, root, op);
  SparseReceiver rx(c, bufs, root, op, false);
  Status r = rx.receive();
  return rx.commit(std::move(r));
}

}  // namespace sparrow::coll

namespace sparrow {
// A staged receive: receive() runs on `worker`; commit() runs on the caller's thread afterwards.
struct StagedOp {
  std::unique_ptr<coll::SparseReceiver> rx;
  std::thread worker;
  std::atomic<bool> done{false};
  Status received;  // receive()'s result, written before `done`
  ~StagedOp() {
    if (worker.joinable()) worker.join();
  }
};
}  // namespace sparrow

namespace sparrow::coll {

Status sparse_stage(Comm& c, const std::vector<BufferArg>& bufs, int root) {
  if (c.rank() == root) return sparse_bcast(c, bufs, root);
  SPARROW_RETURN_IF_ERROR(no_stage_pending(c));
  SPARROW_ASSIGN_OR_RETURN(SparseOp op, begin_sparse(c, bufs, root));
  auto so = std::make_shared<StagedOp>();
  so->rx = std::make_unique<SparseReceiver>(c, bufs, root, op, true);
  StagedOp* raw = so.get();
  so->worker = std::thread([raw] {
    raw->received = raw->rx->receive();
    raw->done.store(true);
  });
  c.coll().staged = std::move(so);
  return Status::Ok();
}

StageProgress stage_progress(Comm& c) {
  StageProgress p;
  auto& so = c.coll().staged;
  if (!so) return p;
  p.pending = true;
  p.ready = so->done.load();
  p.bytes_received = so->rx->bytes_received();
  if (p.ready) p.staged_bytes = so->rx->staged_bytes();
  return p;
}

Status stage_commit(Comm& c) {
  auto so = std::move(c.coll().staged);
  if (!so) return Status::Ok();  // nothing staged (the root, or no call)
  so->worker.join();
  return so->rx->commit(std::move(so->received));
}

Status finish(Comm& c) {
  // A step still being staged: let it arrive (its receive is bounded by the timeout), then drop it.
  if (auto so = std::move(c.coll().staged)) so->worker.join();
  return drain_acks(c, 0);
}

Status sparse_reset(Comm& c, const void* buff) {
  SPARROW_RETURN_IF_ERROR(no_stage_pending(c));
  auto& cs = c.coll();
  for (auto it = cs.roots.begin(); it != cs.roots.end();) it = std::find(it->first.begin(), it->first.end(), buff) != it->first.end() ? cs.roots.erase(it) : std::next(it);
  for (auto it = cs.recvs.begin(); it != cs.recvs.end();) it = std::find(it->first.begin(), it->first.end(), buff) != it->first.end() ? cs.recvs.erase(it) : std::next(it);
  return Status::Ok();
}

}  // namespace sparrow::coll
