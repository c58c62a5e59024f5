// Dense broadcast (sparrowBroadcast): each buffer is its own operation, pipelined in segments along
// its tree (a relay forwards each segment as it lands in its own buffer). All the data of a group
// goes first; then one round of acknowledgements and verdicts for all of it, so a group of N
// broadcasts pays one round trip, not N.
#include <algorithm>
#include <memory>

#include "collectives/bcast.h"
#include "collectives/relay.h"
#include "collectives/state.h"
#include "core/params.h"
#include "format/bits.h"
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

Result<std::vector<DenseOp>> plan(Engine& e, const std::vector<BufferArg>& bufs, int root) {
  std::vector<DenseOp> ops;
  for (auto& b : bufs) {
    DenseOp op;
    op.seq = e.comm.next_seq();
    op.bytes = b.count * format::dtype_size(uint8_t(b.dtype));
    SPARROW_ASSIGN_OR_RETURN(op.tree, e.tree(root, double(op.bytes)));
    ops.push_back(std::move(op));
  }
  if (!ops.empty()) e.comm.net().begin_traffic(ops.front().seq, ops.back().seq);
  return ops;
}

// The root's header and segments of one buffer; its own receive buffer gets the data too.
Status root_send(Engine& e, const BufferArg& b, DenseOp& op, int root, Fanout& out) {
  OpHeader h;
  h.kind = kDense;
  h.root = root;
  h.bufs = {{b.count, uint8_t(b.dtype)}};
  h.segment = size_t(kSegment.get());
  out.send(0, share(h.encode()));
  const uint8_t* src = static_cast<const uint8_t*>(b.send);
  // A device buffer goes through host staging (the transport reads host memory).
  if (op.bytes && kernels::is_device(kernels::device_ops(), src)) {
    op.staging.resize(op.bytes);
    SPARROW_RETURN_IF_ERROR(kernels::copy_any(op.staging.data(), src, op.bytes));
    src = op.staging.data();
  }
  const size_t seg = h.segment;
  for (size_t i = 0; i < segments(op.bytes, seg); ++i) {
    const size_t off = i * seg;
    out.send_borrowed(uint32_t(1 + i), src + off, std::min(seg, op.bytes - off));
  }
  if (b.recv && b.recv != b.send && op.bytes) SPARROW_RETURN_IF_ERROR(kernels::copy_any(b.recv, src, op.bytes));
  return Status::Ok();
}

Status dense_root(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<DenseOp>& ops) {
  const uint64_t first_seq = ops.empty() ? 0 : ops.front().seq;
  SPARROW_RETURN_IF_ERROR(e.acks.drain(e.wire(first_seq), e.rank(), AckWindow::kDefaultWindow));
  std::vector<std::unique_ptr<Fanout>> outs;
  for (size_t k = 0; k < bufs.size(); ++k) {
    outs.push_back(std::make_unique<Fanout>(e.wire(ops[k].seq), ops[k].tree.children[e.rank()]));
    SPARROW_RETURN_IF_ERROR(root_send(e, bufs[k], ops[k], root, *outs.back()));
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
  SPARROW_ASSIGN_OR_RETURN(Frame hf, relay.next(0));
  SPARROW_ASSIGN_OR_RETURN(OpHeader h, OpHeader::decode(*hf));
  op.result = check_header(h, kDense, {b}, root, e.rank());
  const size_t bytes = h.bufs.empty() ? 0 : h.bufs[0].first * format::dtype_size(h.bufs[0].second);
  const size_t seg = h.segment ? h.segment : size_t(kSegment.get());
  // On a mismatch the data still flows to the children (their calls may be right), through scratch.
  uint8_t* dst = static_cast<uint8_t*>(b.recv);
  op.to_device = op.result.ok() && bytes && kernels::is_device(kernels::device_ops(), dst);
  if (!op.result.ok() || op.to_device) {
    op.staging.resize(bytes);
    dst = op.staging.data();
  }
  for (size_t i = 0; i < segments(bytes, seg); ++i) {
    const size_t off = i * seg;
    SPARROW_RETURN_IF_ERROR(relay.next_into(uint32_t(1 + i), dst + off, std::min(seg, bytes - off)));
  }
  return Status::Ok();
}

Status dense_sink(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<DenseOp>& ops) {
  std::vector<std::unique_ptr<Relay>> relays;
  for (size_t k = 0; k < bufs.size(); ++k) {
    const int me = e.rank();
    relays.push_back(std::make_unique<Relay>(e.wire(ops[k].seq), ops[k].tree.parent[me], ops[k].tree.children[me]));
    SPARROW_RETURN_IF_ERROR(sink_receive(e, bufs[k], ops[k], root, *relays.back()));
  }
  for (auto& r : relays) r->finish();
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

void record_dense(Engine& e, const std::vector<BufferArg>& bufs, const std::vector<DenseOp>& ops, int root, double t0) {
  const int me = e.rank();
  record_traffic(e, me == root || ops.empty() ? -1 : ops[0].tree.parent[me],
                 ops.empty() ? std::vector<int>{} : ops[0].tree.children[me]);
  auto& st = e.stats;
  st.ops++;
  st.dense_bytes = st.changed = 0;
  for (size_t k = 0; k < bufs.size(); ++k) {
    st.dense_bytes += ops[k].bytes;
    st.changed += bufs[k].count;
  }
  st.wire_bytes = st.dense_bytes;
  st.density = 1.0;
  st.encode_s = st.apply_s = 0;
  st.total_s = now_s() - t0;
  st.full = true;
  log_step(e, "broadcast");
}

}  // namespace

Status broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root) {
  SPARROW_RETURN_IF_ERROR(no_stage_pending(e));
  if (e.comm.elastic() && !e.members.all_live())
    return Error(Code::kInvalidUsage, "sparrowBroadcast on an elastic communicator that dropped a member is not "
                                      "supported (sparrowSparseBcast is; its first call sends the buffer whole)");
  InCall busy(e);
  const double t0 = now_s();
  SPARROW_ASSIGN_OR_RETURN(auto ops, plan(e, bufs, root));
  Status result = e.rank() == root ? dense_root(e, bufs, root, ops) : dense_sink(e, bufs, root, ops);
  record_dense(e, bufs, ops, root, t0);  // also for a failed call: what it moved, and its tree
  return result;
}

}  // namespace sparrow::coll
