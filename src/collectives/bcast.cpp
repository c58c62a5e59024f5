// The collectives' entry points: argument checks shared by every call, the choice of role (root or
// sink), the dense protocol (a fixed or an elastic communicator's), and staging. The roles live in
// dense/, elastic/ and sparse/.
#include "collectives/bcast.h"

#include <algorithm>

#include "collectives/dense/segments.h"
#include "collectives/membership.h"
#include "collectives/sparse/sparse_op.h"
#include "collectives/sparse/stage.h"
#include "core/affinity.h"

namespace sparrow::coll {

Status no_stage_pending(Engine& e) {
  if (e.staged)
    return Error(Code::kInvalidUsage, "a staged sparse broadcast is pending on this communicator: call "
                                      "sparrowStageCommit before the next collective");
  return Status::Ok();
}

Status broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root) {
  SPARROW_RETURN_IF_ERROR(no_stage_pending(e));
  e.end_lingering();  // the last sparse operation's relay (Engine::elastic.lingering)
  InCall busy(e);
  const double t0 = now_s();
  std::vector<dense::DenseOp> ops;
  // Two protocols: all or nothing over the live members (staging, verdict) where members come and
  // go, in place along the tree where they do not.
  Status result = e.comm.elastic() ? elastic::dense_broadcast(e, bufs, root, ops) : dense::broadcast(e, bufs, root, ops);
  dense::record(e, bufs, ops, root, t0);  // also for a failed call: what it moved, and its tree
  return result;
}

Result<SparseOp> begin_sparse(Engine& e, const std::vector<BufferArg>& bufs, int root,
                              const std::vector<int>* participants) {
  e.elastic.dense_staging.clear();  // a run of dense broadcasts (a first version) is over
  SparseOp op;
  op.seq = e.comm.next_seq();
  e.comm.net().begin_traffic(op.seq, op.seq);
  for (size_t i = 0; i < bufs.size(); ++i) {
    op.layout.push_back({bufs[i].name.empty() ? "buffer" + std::to_string(i) : bufs[i].name, uint8_t(bufs[i].dtype), bufs[i].count});
    op.key.push_back(e.rank() == root ? bufs[i].send : bufs[i].recv);
    op.dense += op.layout.back().bytes();
  }
  SPARROW_RETURN_IF_ERROR(plan_members(e, op, root, participants));
  return op;
}

Status sparse_bcast(Engine& e, const std::vector<BufferArg>& bufs, int root, const std::vector<int>* participants) {
  SPARROW_RETURN_IF_ERROR(no_stage_pending(e));
  InCall busy(e);
  SPARROW_ASSIGN_OR_RETURN(SparseOp op, begin_sparse(e, bufs, root, participants));
  if (e.rank() == root) {
    e.end_lingering();  // (a receiver's last relay: a receiver ends it once the next header came)
    return sparse_root(e, bufs, root, op);
  }
  SparseSink rx(e, bufs, root, op);
  Status r = rx.receive();
  return rx.commit(std::move(r));
}

void skip_op(Engine& e) { e.comm.next_seq(); }

Status sparse_stage(Engine& e, const std::vector<BufferArg>& bufs, int root) {
  if (e.rank() == root) return sparse_bcast(e, bufs, root);
  return sparse_stage_parts(e, {StagePart{bufs, root, {}}});
}

Status sparse_stage_parts(Engine& e, const std::vector<StagePart>& parts) {
  SPARROW_RETURN_IF_ERROR(no_stage_pending(e));
  if (parts.empty()) return Error(Code::kInvalidArgument, "nothing to stage");
  for (const StagePart& p : parts)  // (before any operation takes its number)
    if (p.root == e.rank()) return Error(Code::kInvalidUsage, "a rank stages only operations it receives");
  auto so = std::make_shared<StagedOp>();
  for (const StagePart& p : parts) {
    if (!p.participants.empty() && !std::binary_search(p.participants.begin(), p.participants.end(), e.rank())) {
      skip_op(e);  // an operation among other ranks
      continue;
    }
    SPARROW_ASSIGN_OR_RETURN(SparseOp op, begin_sparse(e, p.bufs, p.root, p.participants.empty() ? nullptr : &p.participants));
    so->ops.push_back(std::move(op));
    so->rx.push_back(std::make_unique<SparseSink>(e, p.bufs, p.root, so->ops.back()));
  }
  so->received.resize(parts.size());
  StagedOp* raw = so.get();
  so->worker = affinity::thread([raw] {
    for (size_t k = 0; k < raw->rx.size(); ++k) raw->received[k] = raw->rx[k]->receive();
    raw->done.store(true);
  });
  e.staged = std::move(so);
  return Status::Ok();
}

StageProgress stage_progress(Engine& e) {
  StageProgress p;
  auto& so = e.staged;
  if (!so) return p;
  p.pending = true;
  p.ready = so->done.load();
  for (auto& rx : so->rx) {
    p.bytes_received += rx->bytes_received();
    if (p.ready) p.staged_bytes += rx->staged_bytes();
  }
  return p;
}

Status stage_commit(Engine& e) {
  auto so = std::move(e.staged);
  if (!so) return Status::Ok();  // nothing staged (the root, or no call)
  so->worker.join();
  Status first;
  Stats sum;
  for (size_t k = 0; k < so->rx.size(); ++k) {
    Status s = so->rx[k]->commit(std::move(so->received[k]));
    if (first.ok()) first = std::move(s);
    add_op_stats(sum, e.stats);
  }
  if (so->rx.size() > 1) e.stats = std::move(sum);  // the staged step as one
  return first;
}

Status finish(Engine& e) {
  // A step still being staged: let it arrive (its receive is bounded by the timeout), then drop it.
  if (auto so = std::move(e.staged)) so->worker.join();
  e.end_lingering();
  return e.acks.drain(e.wire(0), e.rank(), 0);
}

Status sparse_reset(Engine& e, const void* buff) {
  SPARROW_RETURN_IF_ERROR(no_stage_pending(e));
  auto holds = [&](const BufferKey& k) { return std::find(k.begin(), k.end(), buff) != k.end(); };
  for (auto it = e.roots.begin(); it != e.roots.end();) it = holds(it->first) ? e.roots.erase(it) : std::next(it);
  for (auto it = e.recvs.begin(); it != e.recvs.end();) it = holds(it->first) ? e.recvs.erase(it) : std::next(it);
  return Status::Ok();
}

}  // namespace sparrow::coll
