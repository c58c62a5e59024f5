// Dense broadcast (sparrowBroadcast): each buffer is its own operation, pipelined in segments along
// its tree (a relay forwards each segment as it lands in its own buffer). All the data of a group
// goes first; then one round of acknowledgements and verdicts for all of it, so a group of N
// broadcasts pays one round trip, not N.
//
// Elastic communicators: a group is one operation over the live members (its segments numbered
// across the buffers), whose header the root sends every rank itself; a rank whose parent fails
// re-attaches to the root and takes the segments from the one it waited for on; a member silent past
// the lease is dropped, and the others succeed; a process that asked to join is admitted (elastic.h).
#include <algorithm>
#include <memory>

#include "collectives/bcast.h"
#include "collectives/elastic.h"
#include "collectives/relay.h"
#include "collectives/state.h"
#include "core/big_alloc.h"
#include "core/log.h"
#include "core/params.h"
#include "core/bits.h"
#include "kernels/device.h"

namespace sparrow::coll {
namespace {

params::IntParam kSegment("SEGMENT_BYTES", 4 << 20, "Segment size of the pipelined dense broadcast.", 64 << 10, 1 << 30);

struct DenseOp {
  uint64_t seq = 0;
  topology::Tree tree;
  size_t bytes = 0;
  Status result;
  std::vector<uint8_t> staging;  // device buffers, and receivers' scratch on a mismatch
  bool to_device = false;
};

size_t segments(size_t bytes, size_t seg) { return bytes == 0 ? 0 : (bytes + seg - 1) / seg; }
size_t bytes_of(const BufferArg& b) { return b.count * format::dtype_size(uint8_t(b.dtype)); }
size_t bytes_of(const std::pair<uint64_t, uint8_t>& hb) { return hb.first * format::dtype_size(hb.second); }

OpHeader dense_header(const std::vector<BufferArg>& bufs, int root) {
  OpHeader h;
  h.kind = kDense;
  h.root = root;
  for (auto& b : bufs) h.bufs.push_back({b.count, uint8_t(b.dtype)});
  h.segment = size_t(kSegment.get());
  return h;
}

// The root's data of `b` in host memory: the send buffer itself, or (a device buffer) its copy in
// `staging` (the transport reads host memory).
Result<const uint8_t*> host_source(const BufferArg& b, std::vector<uint8_t>& staging) {
  const uint8_t* src = static_cast<const uint8_t*>(b.send);
  const size_t bytes = bytes_of(b);
  if (!bytes || !kernels::is_device(kernels::device_ops(), src)) return src;
  staging.resize(bytes);
  SPARROW_RETURN_IF_ERROR(kernels::copy_any(staging.data(), src, bytes));
  return static_cast<const uint8_t*>(staging.data());
}

// `bytes` from `src` in segments of `seg`, parts first_sub.. (each also into `parts`, when given);
// returns the part after the last.
uint32_t send_segments(const uint8_t* src, size_t bytes, size_t seg, uint32_t first_sub, Fanout& out, Parts* parts) {
  uint32_t sub = first_sub;
  for (size_t i = 0; i < segments(bytes, seg); ++i, ++sub) {
    const size_t off = i * seg, n = std::min(seg, bytes - off);
    out.send_borrowed(sub, src + off, n);
    if (parts) (*parts)[sub] = transport::Payload{src + off, n, nullptr};
  }
  return sub;
}

// The segments of one buffer (parts first_sub..) into `dst`, each forwarded as it lands.
Status receive_segments(Relay& relay, uint8_t* dst, size_t bytes, size_t seg, uint32_t first_sub) {
  for (size_t i = 0; i < segments(bytes, seg); ++i) {
    const size_t off = i * seg;
    SPARROW_RETURN_IF_ERROR(relay.next_into(uint32_t(first_sub + i), dst + off, std::min(seg, bytes - off)));
  }
  return Status::Ok();
}

// The root's own receive buffer gets the data too (when it is not the send buffer).
Status copy_to_recv(const BufferArg& b, const uint8_t* src) {
  if (!b.recv || b.recv == b.send || !bytes_of(b)) return Status::Ok();
  return kernels::copy_any(b.recv, src, bytes_of(b));
}

Result<std::vector<DenseOp>> plan(Engine& e, const std::vector<BufferArg>& bufs, int root) {
  std::vector<DenseOp> ops;
  for (auto& b : bufs) {
    DenseOp op;
    op.seq = e.comm.next_seq();
    op.bytes = bytes_of(b);
    SPARROW_ASSIGN_OR_RETURN(op.tree, e.tree(root, double(op.bytes)));
    ops.push_back(std::move(op));
  }
  if (!ops.empty()) e.comm.net().begin_traffic(ops.front().seq, ops.back().seq);
  return ops;
}

// The root's header and segments of one buffer; its own receive buffer gets the data too.
Status root_send(const BufferArg& b, DenseOp& op, int root, Fanout& out) {
  const OpHeader h = dense_header({b}, root);
  out.send(0, share(h.encode()));
  SPARROW_ASSIGN_OR_RETURN(const uint8_t* src, host_source(b, op.staging));
  send_segments(src, op.bytes, h.segment, 1, out, nullptr);
  return copy_to_recv(b, src);
}

Status dense_root(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<DenseOp>& ops) {
  const uint64_t first_seq = ops.empty() ? 0 : ops.front().seq;
  SPARROW_RETURN_IF_ERROR(e.acks.drain(e.wire(first_seq), e.rank(), AckWindow::kDefaultWindow));
  e.acks.forget_before(e.wire(first_seq), first_seq);
  std::vector<std::unique_ptr<Fanout>> outs;
  for (size_t k = 0; k < bufs.size(); ++k) {
    outs.push_back(std::make_unique<Fanout>(e.wire(ops[k].seq), ops[k].tree.children[e.rank()]));
    SPARROW_RETURN_IF_ERROR(root_send(bufs[k], ops[k], root, *outs.back()));
  }
  for (auto& o : outs) o->finish();
  // Agreement: every rank reports; a mismatched call fails everywhere.
  const auto others = other_ranks(e);
  for (auto& op : ops) op.result = e.acks.agree(e.wire(op.seq), others);
  Status result;
  for (auto& op : ops) {
    SPARROW_RETURN_IF_ERROR(send_verdict(e.wire(op.seq), others, verdict_for_others(op.result)));
    if (result.ok()) result = op.result;
  }
  return result;
}

// A receiver's (relay's) part of one buffer: header, then every segment into its buffer (or scratch
// on a mismatch, or host staging for a device buffer), each forwarded as it lands.
Status sink_receive(Engine& e, const BufferArg& b, DenseOp& op, int root, Relay& relay) {
  SPARROW_ASSIGN_OR_RETURN(Frame hf, relay.header(root));
  SPARROW_ASSIGN_OR_RETURN(OpHeader h, OpHeader::decode(*hf));
  op.result = check_header(h, kDense, {b}, root, e.rank());
  const size_t bytes = h.bufs.empty() ? 0 : bytes_of(h.bufs[0]);
  const size_t seg = h.segment ? h.segment : size_t(kSegment.get());
  // On a mismatch the data still flows to the children (their calls may be right), through scratch.
  uint8_t* dst = static_cast<uint8_t*>(b.recv);
  op.to_device = op.result.ok() && bytes && kernels::is_device(kernels::device_ops(), dst);
  if (!op.result.ok() || op.to_device) {
    op.staging.resize(bytes);
    dst = op.staging.data();
  }
  return receive_segments(relay, dst, bytes, seg, 1);
}

Status dense_sink(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<DenseOp>& ops) {
  std::vector<std::unique_ptr<Relay>> relays;
  Status got;
  for (size_t k = 0; k < bufs.size() && got.ok(); ++k) {
    const int me = e.rank();
    relays.push_back(std::make_unique<Relay>(e.wire(ops[k].seq), ops[k].tree.parent[me], ops[k].tree.children[me]));
    got = sink_receive(e, bufs[k], ops[k], root, *relays.back());
  }
  for (auto& r : relays) r->finish();  // the children read this rank's buffers until then
  SPARROW_RETURN_IF_ERROR(got);
  for (size_t k = 0; k < bufs.size(); ++k) {
    DenseOp& op = ops[k];
    if (op.to_device) op.result = kernels::copy_any(bufs[k].recv, op.staging.data(), op.staging.size());
    SPARROW_RETURN_IF_ERROR(e.wire(op.seq).send({root}, kAckSub, share(Ack{op.result}.encode())));
  }
  Status result;
  for (auto& op : ops) {
    Status verdict = recv_verdict(e.wire(op.seq), root);
    if (op.result.ok()) op.result = verdict;
    if (result.ok()) result = op.result;
  }
  return result;
}

// ---- elastic --------------------------------------------------------------------------------------

// The root's elastic operation: the header to every rank, the segments down the tree over the
// members (kept for re-attaching ranks), then every member's acknowledgement or its drop, and the
// verdict. Only a mismatch of arguments fails here: a member's own loss is that member's.
Status elastic_root(Engine& e, const std::vector<BufferArg>& bufs, int root, DenseOp& op, const std::vector<int>& members) {
  const OpWire w = e.wire(op.seq);
  OpHeader h = dense_header(bufs, root);
  stamp_elastic(e, h, members);
  send_header_to_all(e, w, share(h.encode()));
  Fanout out(w, op.tree.children[e.rank()]);
  out.preconnect(transport::deadline_in(e.comm.lease_s()));
  std::vector<std::vector<uint8_t>> staging(bufs.size());
  Parts parts;
  Status sent;
  for (size_t k = 0, sub = 1; k < bufs.size() && sent.ok(); ++k) {
    auto src = host_source(bufs[k], staging[k]);
    sent = src.ok() ? copy_to_recv(bufs[k], src.value()) : src.status();
    if (sent.ok()) sub = send_segments(src.value(), bytes_of(bufs[k]), h.segment, uint32_t(sub), out, &parts);
  }
  std::vector<transport::SendRequestPtr> reqs;
  BufferKey key;
  for (auto& b : bufs) key.push_back(b.send);
  Status agree = sent.ok() ? finish_elastic(e, w, key, members, parts, true, &reqs) : sent;
  // The segments are the caller's memory (or `staging`): every send of them ends before this returns.
  out.finish();
  (void)wait_all(reqs, w.deadline);  // a re-attached member dropped later fails them at once
  if (!agree.ok() && verdict_for_others(agree).ok()) {
    SPARROW_WARN("operation %llu: %s (the other members got it)", (unsigned long long)op.seq, agree.to_string().c_str());
    return Status::Ok();
  }
  return agree;
}

// A receiver's elastic operation: the header from the root, its place in the tree over the members,
// the segments of every buffer (if its parent fails: adopted by a rank of its region above it, or
// re-attached to the root), its acknowledgement
// and the verdict.
Status elastic_sink(Engine& e, const std::vector<BufferArg>& bufs, int root, DenseOp& op) {
  const OpWire w = e.wire(op.seq);
  Heartbeat alive(w, root, e.comm.lease_s());
  bool dropped = false;
  SPARROW_ASSIGN_OR_RETURN(ReceivedHeader got_header, elastic_header(e, w, root, &dropped));
  const OpHeader& h = got_header.h;
  op.result = check_header(h, kDense, bufs, root, e.rank());
  const std::vector<int> members(h.members.begin(), h.members.end());
  op.bytes = 0;
  for (auto& hb : h.bufs) op.bytes += bytes_of(hb);
  SPARROW_ASSIGN_OR_RETURN(op.tree, e.tree(root, double(op.bytes), &members));
  Relay relay(w, -1, {});
  const int me = e.rank();
  relay.attach_elastic(op.tree.parent[me], op.tree.children[me], root, e.comm.lease_s(),
                       reattach_patience(op.tree, me, e.comm.lease_s()), adopter_for(op.tree, me),
                       adoptable_by(op.tree, me));
  relay.preconnect(transport::deadline_in(e.comm.lease_s()));
  // All or nothing: the segments land in host staging (forwarded from there), and the receive
  // buffers are written only once the root's verdict said every member agreed. A failed call (the
  // root died, this rank was dropped meanwhile) leaves them as they were.
  const size_t seg = h.segment ? h.segment : size_t(kSegment.get());
  auto& staging = e.dense_staging;
  staging.resize(h.bufs.size());
  Status got;
  for (size_t k = 0, sub = 1; k < h.bufs.size() && got.ok(); ++k) {
    if (staging[k].capacity() < bytes_of(h.bufs[k])) decltype(e.dense_staging)::value_type().swap(staging[k]);
    staging[k].resize(bytes_of(h.bufs[k]));  // (growing a vector would copy what it held)
    got = receive_segments(relay, staging[k].data(), staging[k].size(), seg, uint32_t(sub));
    sub += segments(staging[k].size(), seg);
  }
  relay.flush();  // (adoptions are served until the verdict: relay.finish() below)
  alive.stop();
  if (!got.ok()) {
    (void)w.send({root}, kAckSub, share(Ack{got}.encode()));  // best effort: the root may be gone
    relay.finish();
    return got;
  }
  Status acked = w.send({root}, kAckSub, share(Ack{op.result}.encode()));
  Status verdict = acked.ok() ? recv_verdict(w, root) : acked;
  relay.finish();
  SPARROW_RETURN_IF_ERROR(acked);
  SPARROW_RETURN_IF_ERROR(op.result);
  SPARROW_RETURN_IF_ERROR(verdict);
  for (size_t k = 0; k < staging.size(); ++k)
    if (!staging[k].empty()) SPARROW_RETURN_IF_ERROR(kernels::copy_any(bufs[k].recv, staging[k].data(), staging[k].size()));
  return Status::Ok();
}

// An elastic communicator's broadcast: one operation for the group.
Status elastic_broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<DenseOp>& ops) {
  DenseOp& op = ops.emplace_back();
  op.seq = e.comm.next_seq();
  e.comm.net().begin_traffic(op.seq, op.seq);
  if (e.rank() != root) return elastic_sink(e, bufs, root, op);
  for (auto& b : bufs) op.bytes += bytes_of(b);
  admit_joiners(e, op.seq);  // a joiner's first operation may be a dense one: it gets the whole data
  const std::vector<int> members = e.members.live();
  SPARROW_ASSIGN_OR_RETURN(op.tree, e.tree(root, double(op.bytes), &members));
  Status s = elastic_root(e, bufs, root, op, members);
  publish_free_slots(e);  // the members this operation dropped
  return s;
}

// What the call moved and its tree (the first operation's), also for a failed call.
void record_dense(Engine& e, const std::vector<BufferArg>& bufs, const std::vector<DenseOp>& ops, int root, double t0) {
  const int me = e.rank();
  const bool placed = !ops.empty() && ops[0].tree.parent.size() > size_t(me);
  record_traffic(e, me == root || !placed ? -1 : ops[0].tree.parent[me],
                 placed ? ops[0].tree.children[me] : std::vector<int>{});
  auto& st = e.stats;
  st.ops++;
  st.dense_bytes = st.changed = 0;
  for (auto& b : bufs) {
    st.dense_bytes += bytes_of(b);
    st.changed += b.count;
  }
  st.wire_bytes = st.dense_bytes;
  st.elements = st.changed;
  st.density = 1.0;
  st.encode_s = st.apply_s = 0;
  st.total_s = now_s() - t0;
  st.full = true;
  log_step(e, "broadcast");
}

}  // namespace

Status broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root) {
  SPARROW_RETURN_IF_ERROR(no_stage_pending(e));
  e.end_lingering();  // the last sparse operation's relay (Engine::lingering)
  InCall busy(e);
  const double t0 = now_s();
  std::vector<DenseOp> ops;
  Status result;
  if (e.comm.elastic()) {
    result = elastic_broadcast(e, bufs, root, ops);
  } else {
    auto planned = plan(e, bufs, root);
    if (!planned.ok()) return planned.status();
    ops = std::move(planned.value());
    result = e.rank() == root ? dense_root(e, bufs, root, ops) : dense_sink(e, bufs, root, ops);
  }
  record_dense(e, bufs, ops, root, t0);  // also for a failed call: what it moved, and its tree
  return result;
}

}  // namespace sparrow::coll
