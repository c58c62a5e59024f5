// SPDX-License-Identifier: Apache-2.0
// An elastic communicator's dense broadcast: a group is one operation over the live members (its
// segments numbered across the buffers), whose header the root sends every rank itself; a rank whose
// parent fails is adopted by a rank of its region above it, or re-attaches to the root, and takes the
// segments from the one it waited for on; a member silent past the lease is dropped, and the others
// succeed; a process that asked to join is admitted (collectives/elastic/elastic.h). A receiver's segments
// land in host staging and reach its buffers only once the verdict says every member agreed.
#include "collectives/bcast.h"
#include "collectives/dense/segments.h"
#include "collectives/elastic/elastic.h"
#include "collectives/membership.h"
#include "core/log.h"
#include "kernels/device.h"

namespace sparrow::coll::elastic {
namespace {

using namespace dense;  // (dense/segments.h)

// The root's elastic operation: the header to every rank, the segments down the tree over the
// members (kept for re-attaching ranks), then every member's acknowledgement or its drop, and the
// verdict. Only a mismatch of arguments fails here: a member's own loss is that member's.
Status group_root(Engine& e, const std::vector<BufferArg>& bufs, int root, DenseOp& op, const std::vector<int>& members) {
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
Status group_sink(Engine& e, const std::vector<BufferArg>& bufs, int root, DenseOp& op) {
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
  attach(e, relay, op.tree, root);
  // All or nothing: the segments land in host staging (forwarded from there), and the receive
  // buffers are written only once the root's verdict said every member agreed. A failed call (the
  // root died, this rank was dropped meanwhile) leaves them as they were.
  const size_t seg = h.segment ? h.segment : segment_bytes();
  auto& staging = e.elastic.dense_staging;
  staging.resize(h.bufs.size());
  Status got;
  for (size_t k = 0, sub = 1; k < h.bufs.size() && got.ok(); ++k) {
    if (staging[k].capacity() < bytes_of(h.bufs[k])) decltype(e.elastic.dense_staging)::value_type().swap(staging[k]);
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
}  // namespace

Status dense_broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<DenseOp>& ops) {
  DenseOp& op = ops.emplace_back();
  op.seq = e.comm.next_seq();
  e.comm.net().begin_traffic(op.seq, op.seq);
  if (e.rank() != root) return group_sink(e, bufs, root, op);
  for (auto& b : bufs) op.bytes += bytes_of(b);
  admit_joiners(e, op.seq);  // a joiner's first operation may be a dense one: it gets the whole data
  const std::vector<int> members = e.members.live();
  SPARROW_ASSIGN_OR_RETURN(op.tree, e.tree(root, double(op.bytes), &members));
  Status s = group_root(e, bufs, root, op, members);
  publish_free_slots(e);  // the members this operation dropped
  return s;
}

}  // namespace sparrow::coll::elastic
