// Dense broadcast (sparrowBroadcast): each buffer is its own operation, pipelined in segments along
// its tree (a relay forwards each segment as it lands in its own buffer). All the data of a group
// goes first; then one round of acknowledgements and verdicts for all of it, so a group of N
// broadcasts pays one round trip, not N. (An elastic communicator's is elastic/dense.cpp: one
// operation per group over its members, landing in staging, with failover, joiners and a verdict.)
#include <algorithm>
#include <memory>

#include "collectives/bcast.h"
#include "collectives/dense/segments.h"
#include "collectives/relay.h"
#include "collectives/state.h"
#include "core/big_alloc.h"
#include "core/log.h"
#include "core/params.h"
#include "core/bits.h"
#include "kernels/device.h"

namespace sparrow::coll {
namespace {

using namespace dense;  // (dense/segments.h)

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
  const size_t seg = h.segment ? h.segment : segment_bytes();
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

}  // namespace

namespace dense {

Status broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<DenseOp>& ops) {
  SPARROW_ASSIGN_OR_RETURN(ops, plan(e, bufs, root));
  return e.rank() == root ? dense_root(e, bufs, root, ops) : dense_sink(e, bufs, root, ops);
}

}  // namespace dense

}  // namespace sparrow::coll
