#include "collectives/sparse/sink.h"

#include <algorithm>

#include "collectives/resync.h"
#include "core/log.h"
#include "core/bits.h"
#include "format/checkpoint.h"
#include "kernels/device.h"

namespace sparrow::coll {
namespace {

// This rank's receive state for a buffer set (a new buffer set, or a new layout, starts from nothing).
RecvState& receiver_state(Engine& e, const BufferKey& key, const std::vector<kernels::cpu::TensorSpec>& layout) {
  auto& rv = e.recvs[key];
  if (!same_layout(rv.layout, layout)) {
    rv.layout = layout;
    rv.st = {};
    rv.stale = false;
  }
  return rv;
}

// What a checkpoint leads to: the version it makes and that version's content digests.
using Outcome = std::pair<uint64_t, std::vector<uint64_t>>;

Result<Outcome> outcome_of(std::span<const uint8_t> header, std::span<const uint8_t> footer) {
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(format::Header h, format::parse_header(header, &used));
  SPARROW_ASSIGN_OR_RETURN(format::Footer f, format::parse_footer(footer, h, &used));
  return Outcome{h.new_version, f.new_digests};
}

// Hands a whole checkpoint (a resync snapshot) to an ApplySession frame by frame and prepares it;
// with `expect`, only a checkpoint that leads to that outcome.
Status feed_checkpoint(kernels::cpu::ApplySession& sess, const Frame& blob, const Outcome* expect = nullptr) {
  std::span<const uint8_t> rest(*blob);
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(format::Header h, format::parse_header(rest, &used));
  SPARROW_RETURN_IF_ERROR(sess.begin(rest.first(used)));
  rest = rest.subspan(used);
  while (rest.size() >= 4 && bits::load_u32(rest.data()) != format::kFooterMagic) {
    SPARROW_ASSIGN_OR_RETURN(format::ChunkView cv, format::parse_chunk(rest, h, &used));
    (void)cv;
    SPARROW_RETURN_IF_ERROR(sess.add_chunk(blob, rest.first(used)));
    rest = rest.subspan(used);
  }
  if (expect) {
    SPARROW_ASSIGN_OR_RETURN(Outcome got, outcome_of(*blob, rest));
    if (got != *expect)
      return CorruptData("the snapshot is version " + std::to_string(got.first) + " with other contents than the "
                         "root's version " + std::to_string(expect->first));
  }
  return sess.prepare(rest);
}

}  // namespace

SparseSink::SparseSink(Engine& e, std::vector<BufferArg> bufs, int root, const SparseOp& op)
    : e_(e), bufs_(std::move(bufs)), root_(root), op_(op), members_(receiver_membership(e)),
      relay_(members_->relay(op_)), state_(op.seq, "receiver"), t0_(now_s()) {}

SparseSink::~SparseSink() {
  e_.end_lingering();  // (when the header never came)
  if (lingers_ && committed_) members_->linger(std::move(relay_));
  else if (lingers_) relay_->finish();
}

Status SparseSink::receive() {
  rv_ = &receiver_state(e_, op_.key, op_.layout);
  members_->started(relay_->wire(), root_);
  while (state_.phase() != Phase::kDone) state_.advance(step());
  members_->acknowledging();
  Status r = result_.ok() ? fatal_ : result_;  // the first failure (an acknowledgement that could not go comes after)
  if (!acked() && standing_ != Standing::kDropped) {
    // It failed before acknowledging (a timeout, a lost parent): this rank holds its last version
    // and asks to be brought up to date at the next operation (best effort: the root may be gone).
    need_resync_ = standing_ != Standing::kNoRoot;
    (void)relay_->wire().send({root_}, kAckSub, share(Ack{r, true, rv_->st.version}.encode()));
  }
  return r;
}

Phase SparseSink::step() {
  switch (state_.phase()) {
    case Phase::kHeader: return on_header();
    case Phase::kStream: return on_stream();
    case Phase::kAccept: return on_accept();
    case Phase::kAck: return on_ack();
    case Phase::kVerdict: return on_verdict();
    case Phase::kFlush: return on_flush();
    default: return Phase::kDone;
  }
}

Phase SparseSink::on_header() {
  bool dropped = false;
  auto got = members_->header(*relay_, op_, root_, &dropped);
  if (dropped) standing_ = Standing::kDropped;
  forget_earlier_ops();
  if (!got.ok()) {
    fatal_ = got.status();
    if (fatal_.code() == Code::kInvalidUsage) standing_ = Standing::kNoRoot;
    return Phase::kDone;
  }
  const OpHeader& h = got->h;
  result_ = check_header(h, kSparse, bufs_, root_, e_.rank());
  // A rank that refused or failed the last operation gets a resync in this one (the root collects
  // that acknowledgement before it finishes sending); so does one the root lists in the header.
  in_.full = h.flags & kOpFull;  // the root sends a verdict on exactly these
  const auto& listed = h.resync;
  in_.resync = !in_.full && (rv_->stale || std::find(listed.begin(), listed.end(), e_.rank()) != listed.end());
  if (result_.ok()) {
    seeder_ = h.seeder_of(e_.rank());
    seed_to_ = h.seeded_by(e_.rank());
  }
  for (auto& b : bufs_) dst_.push_back(b.recv);
  if (result_.ok() && !in_.resync) sess_.emplace(dst_, op_.layout, rv_->st, aopt_);
  if (in_.resync && seeder_ < 0 && members_->declares_holdings(op_)) declare_holdings();
  return Phase::kStream;
}

// Once this operation's header came (or did not), the last one is over: an elastic root collects
// every member's acknowledgement (or drops it) before it starts the next, so no orphan asks this
// rank to adopt it any more (until here, the last operation's relay went on serving: a rank calls
// the next operation right after the last, and its orphans may still be waiting for a stalled
// parent). What earlier operations left behind (ones this rank gave up on) is of no use either; but
// the acknowledgements of operations this rank rooted are its AckWindow's, drained at its next call
// as root or at sparrowCommDestroy (dropping them cost a destroy one SPARROW_TIMEOUT_S).
void SparseSink::forget_earlier_ops() {
  e_.end_lingering();
  if (size_t n = e_.comm.net().discard_before(e_.comm.comm_id(), op_.seq, kAckSub))
    SPARROW_TRACE("dropped %zu message(s) of operations before %llu", n, (unsigned long long)op_.seq);
}

// A joiner's first operation brings it a resync from the root, which waits for the digests of what
// its buffers hold (empty: nothing usable, a full snapshot), to send the retained deltas from that
// version if it is one. Sent always, so that the root never waits for it in vain.
void SparseSink::declare_holdings() {
  bool host = result_.ok();
  for (void* p : dst_) host = host && !kernels::is_device(kernels::device_ops(), p);
  if (host) declared_ = kernels::cpu::content_digests(op_.layout, std::vector<const void*>(dst_.begin(), dst_.end()));
  Status s = relay_->wire().send({root_}, kHoldingsSub, share(holds_message(declared_)));
  if (!s.ok()) SPARROW_INFO("rank %d could not tell the root what it holds: %s", e_.rank(), s.to_string().c_str());
}

// A joiner that declared its digests and gets a catch-up chain: its buffers hold the chain's base
// version (the root found them among its retained versions); the session checks that against the
// buffers' contents before anything is written.
Status SparseSink::adopt_declared(const Frame& chain) {
  SPARROW_ASSIGN_OR_RETURN(auto links, decode_chain_message(*chain));
  std::span<const uint8_t> first = links.empty() ? std::span<const uint8_t>(*held_.front()) : links.front();
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(format::Header h, format::parse_header(first, &used));
  rv_->st = {};
  rv_->st.version = h.base_version;
  rv_->st.digests = declared_;
  SPARROW_INFO("rank %d (joining) catches up from version %llu, which its buffers hold", e_.rank(),
               (unsigned long long)h.base_version);
  return Status::Ok();
}

// Sub 1.. (checkpoint header, chunks, footer): each forwarded at once and handed to the decoder.
Phase SparseSink::on_stream() {
  auto job = e_.decoder.start(sess_ ? &*sess_ : nullptr, relay_->parent());
  Status got;
  for (uint32_t sub = 1; sub <= (1u << 30); ++sub) {
    auto f = relay_->next(sub);
    state_.received(f.ok() ? sub : sub - 1);  // parts after the header
    if (!f.ok()) {
      got = std::move(f.status());
      break;
    }
    if (in_.resync) held_.push_back(f.value());  // this step's delta: the last link of a catch-up chain
    if (is_footer(*f.value())) {
      footer_ = f.value();
      break;
    }
    job->push(f.value());
  }
  relay_->keep_serving();  // an orphan of this region may still ask (until on_flush)
  Status decoded = job->join();
  state_.verified(job->verified());
  if (!got.ok()) got.context(state_.where());
  if (result_.ok()) result_ = got.ok() ? decoded : got;
  return Phase::kAccept;
}

Phase SparseSink::on_accept() {
  if (!result_.ok()) return Phase::kAck;
  if (in_.resync) {
    result_ = accept_resync();
  } else {
    result_ = footer_ ? sess_->prepare(*footer_)
                      : CorruptData("checkpoint from rank " + std::to_string(relay_->parent()) + " has no footer");
  }
  return Phase::kAck;
}

// The resync from the root (or from this rank's seeder), checked in place of this step's delta.
Status SparseSink::accept_resync() {
  const int from = seeder_ >= 0 ? seeder_ : root_;
  // A seeder sends once it committed this step (about when this rank's stream ended); one that does
  // not (it died, or stages its commit) must not hold this rank past the root's lease: it then asks
  // for a resync from the root at the next operation.
  const auto d = seeder_ >= 0 ? std::min(relay_->wire().deadline, transport::deadline_in(e_.comm.lease_s() / 2))
                              : relay_->wire().deadline;
  auto m = relay_->wire().recv(from, kResyncSub, d);
  if (!m.ok())
    return std::move(m).take_status().context(seeder_ >= 0 ? "waiting for the full version from rank " +
                                                                  std::to_string(seeder_) + " (a member of its region)"
                                                            : std::string("waiting for the resync from the root"));
  Frame blob = share(std::move(m.value()));
  resync_bytes_ += blob->size();
  if (!declared_.empty() && rv_->st.version == 0 && is_chain_message(*blob) && !held_.empty())
    SPARROW_RETURN_IF_ERROR(adopt_declared(blob));
  sess_.emplace(dst_, op_.layout, rv_->st, aopt_);
  if (seeder_ < 0) return is_chain_message(*blob) ? catch_up(blob) : feed_checkpoint(*sess_, blob);
  // A seeder's snapshot must be this very step: the version and resulting digests of the root's own
  // checkpoint of it (which this rank received through the tree); the session then checks that the
  // snapshot's contents have those digests.
  const std::string from_seeder = "the full version from rank " + std::to_string(seeder_);
  if (is_chain_message(*blob)) return CorruptData(from_seeder + " is a chain, not a snapshot");
  if (held_.empty() || !footer_) return CorruptData("no checkpoint from the root to check " + from_seeder + " against");
  SPARROW_ASSIGN_OR_RETURN(Outcome root, outcome_of(*held_.front(), *footer_));
  Status s = feed_checkpoint(*sess_, blob, &root);
  if (!s.ok()) s.context(from_seeder);
  return s;
}

// This rank committed the step: the ranks of its region it seeds get their snapshot of it from here
// (a failure is theirs to report: they ask the root for a resync at the next operation).
void SparseSink::send_seeds() {
  std::vector<const void*> cur(dst_.begin(), dst_.end());
  auto snap = kernels::cpu::DeltaEncoder::snapshot_at(op_.layout, cur, rv_->st.version);
  if (!snap.ok()) {
    SPARROW_WARN("rank %d could not encode the snapshot it seeds rank(s) with: %s", e_.rank(),
                 snap.status().to_string().c_str());
    return;
  }
  const Frame m = share(std::move(snap.value()));
  std::vector<transport::SendRequestPtr> reqs;
  const OpWire& w = relay_->wire();
  Status s = w.send(seed_to_, kResyncSub, m, &reqs);
  if (s.ok()) s = wait_all(reqs, std::min(w.deadline, transport::deadline_in(e_.comm.lease_s())));
  if (!s.ok()) SPARROW_INFO("rank %d: seeding rank(s) with its snapshot failed: %s", e_.rank(), s.to_string().c_str());
  else SPARROW_TRACE("rank %d seeded %zu rank(s) with a %zu-byte snapshot", e_.rank(), seed_to_.size(), m->size());
}

// The deltas this rank missed, then this step's as it arrived: composed and written once.
Status SparseSink::catch_up(const Frame& chain) {
  SPARROW_ASSIGN_OR_RETURN(auto links, decode_chain_message(*chain));
  auto cur = std::make_shared<std::vector<uint8_t>>();
  for (auto& f : held_) cur->insert(cur->end(), f->begin(), f->end());
  links.push_back(*cur);
  catchup_bytes_ = chain->size();
  Status s = sess_->prepare_chain(links, {chain, cur});
  if (!s.ok())
    s.context("catching up from version " + std::to_string(rv_->st.version) + " by " + std::to_string(links.size()) +
              " delta(s)");
  return s;
}

Phase SparseSink::on_ack() {
  const bool behind = sess_ && sess_->base_version() != rv_->st.version;
  const Ack ack = ack_for(result_, in_.resync, behind, rv_->st.version);
  need_resync_ = need_resync_ || ack.resync;
  if (result_.code() == Code::kVersionMismatch)
    result_.context("rank " + std::to_string(e_.rank()) + " refused this step: its buffers are as they were, and "
                    "its next call on them brings " + (ack.holds ? "the steps it missed" : "a full snapshot") +
                    " from rank " + std::to_string(root_));
  members_->acknowledging();
  Status s = relay_->wire().send({root_}, kAckSub, share(Ack{result_, need_resync_, ack.holds}.encode()));
  if (!s.ok()) {
    fatal_ = std::move(s);
    return Phase::kDone;
  }
  return in_.full ? Phase::kVerdict : Phase::kFlush;
}

Phase SparseSink::on_verdict() {
  Status verdict = recv_verdict(relay_->wire(), root_);
  if (result_.ok()) result_ = std::move(verdict);
  return Phase::kFlush;
}

// A relay's forwarding is part of its call: once it returns, the caller may destroy the communicator,
// which must not cut its children off. (Handed to the kernel: usually done already.) A child lost on
// the way is that child's failure (logged), not this rank's. Elastic, when ranks of this region below
// may still ask this rank to adopt them: it goes on serving them after the call returned, from the
// relay the engine keeps (~SparseSink), so that an orphan whose parent fails late in a step is served
// in its region rather than by the root (a sparse relay returns at its acknowledgement, usually long
// before its descendants have given up on a stalled parent).
Phase SparseSink::on_flush() {
  lingers_ = result_.ok() && members_->lingers(*relay_);
  if (lingers_) relay_->flush();
  else relay_->finish();
  return Phase::kDone;
}

Status SparseSink::commit(Status received) {
  Status result = std::move(received);
  kernels::cpu::ApplyStats as;
  if (result.ok() && sess_) {
    state_.advance(Phase::kCommit);
    result = sess_->commit(&as);
    committed_ = result.ok();
    if (result.ok() && !seed_to_.empty()) send_seeds();
    state_.advance(Phase::kDone);
  }
  // Expect a snapshot next time exactly when this step was refused and one was asked for; a
  // snapshot that failed starts over (the next delta is refused and asks again).
  if (rv_ && (result.ok() || need_resync_ || in_.resync)) rv_->stale = need_resync_;
  record_stats(as, result);
  return result;
}

void SparseSink::record_stats(const kernels::cpu::ApplyStats& as, const Status& result) {
  record_traffic(e_, relay_->parent(), relay_->children());
  auto& st = e_.stats;
  st.verify_s = as.verify_seconds;
  st.decode_s = as.decode_seconds;
  st.commit_s = as.write_seconds;
  st.ops++;
  const bool resynced = committed_ && in_.resync;
  if (resynced) st.resyncs++;
  if (resynced && catchup_bytes_) {
    st.catchups++;
    st.catchup_bytes += catchup_bytes_;
  }
  st.changed = in_.resync && !catchup_bytes_ ? 0 : as.changes;
  st.apply_s = as.decode_seconds + as.write_seconds;  // decoding, the acceptance checks, the writes
  st.dense_bytes = op_.dense;
  st.wire_bytes = bytes_received();
  uint64_t elems = 0;
  for (auto& l : op_.layout) elems += l.count;
  st.elements = elems;
  st.density = elems ? double(st.changed) / double(elems) : 0;
  st.encode_s = 0;
  st.full = in_.full;
  st.total_s = now_s() - t0_;
  log_step(e_, result.ok() ? "sparse_bcast" : "sparse_bcast (failed)");
}

}  // namespace sparrow::coll
