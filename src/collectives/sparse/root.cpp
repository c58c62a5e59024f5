// The root's side of a sparse operation, phase by phase: the op header; the step encoded and streamed
// chunk by chunk to the children (kept for the retained chain); the acknowledgements that arrived
// meanwhile, and resyncs straight to the ranks that need one; on the first, full operation on a
// buffer set, everyone's acknowledgement and the verdict. It does not wait for a delta's
// acknowledgements: they are drained at the next call.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "collectives/membership.h"
#include "collectives/op.h"
#include "collectives/relay.h"
#include "collectives/sparse/sparse_op.h"
#include "core/log.h"
#include "core/params.h"
#include "core/bits.h"
#include "kernels/device.h"

namespace sparrow::coll {
namespace {

params::StringParam kCodec("CODEC", "auto",
                           "Checkpoint codecs for sparse_bcast: auto (smallest per chunk) or paper (SparrowRL's leb128 + overwrite, for ablations).",
                           {"auto", "paper"});

params::IntParam kCodecLink("CODEC_LINK_MBIT", 0,
                            "Link rate (Mbit/s) that sparse_bcast's value codecs are chosen for: per chunk, the least "
                            "bytes at this rate plus encode and decode CPU time; 0: the probed rate to the slowest "
                            "receiver, shared by the copies the root sends (one per child); -1: the fewest bytes, "
                            "whatever the CPU time.",
                            -1, 100000000);

using Frames = std::vector<Frame>;

RootState& root_state(Engine& e, const SparseOp& op) {
  auto& rs = e.roots[op.key];
  if (!rs.enc || !same_layout(rs.layout, op.layout)) {
    rs.layout = op.layout;
    rs.enc = std::make_unique<kernels::cpu::DeltaEncoder>(op.layout);
    rs.need_resync.clear();
  }
  return rs;
}

// Encodes the step and streams it to the children: the checkpoint header first, then every chunk as
// soon as a worker thread finished it, then the footer. `kept` (when given) receives every frame,
// `parts` (when given) every frame by its sub.
Status stream_checkpoint(const OpWire& w, RootState& rs, const std::vector<const void*>& src, Fanout& out,
                         double link_Bps, kernels::cpu::EncodeStats* es, Frames* kept, Parts* parts) {
  std::atomic<uint32_t> next_sub{2};
  std::mutex mu;
  auto emit = [&](uint32_t sub, std::vector<uint8_t>&& frame) {
    Frame m = share(std::move(frame));
    SPARROW_TRACE("operation %llu: part %u (%zu bytes) to %zu child(ren)", (unsigned long long)w.seq, sub, m->size(),
                  out.children().size());
    out.send(sub, m);
    std::lock_guard<std::mutex> lk(mu);
    if (parts) (*parts)[sub] = transport::Payload{m->data(), m->size(), m};
    if (kept) kept->push_back(std::move(m));  // the header first, the footer last: emitted in that order
  };
  kernels::cpu::EncodeOptions eo;
  eo.paper_format = kCodec.get() == "paper";
  eo.link_Bps = link_Bps;
  auto footer = rs.enc->encode_stream(
      src, eo, es, [&](std::vector<uint8_t>&& hb) { emit(1, std::move(hb)); },
      [&](std::vector<uint8_t>&& fb) { emit(next_sub++, std::move(fb)); });
  if (!footer.ok()) return footer.status();
  emit(next_sub++, std::move(footer.value()));
  return Status::Ok();
}

// The catch-up message for a rank holding version `holds`: the retained deltas from it to `base`,
// when they are all retained and smaller than half the dense size; else null (a snapshot).
Frame catch_up_for(RootState& rs, int rank, uint64_t holds, uint64_t base, size_t dense) {
  auto links = holds ? rs.retained.chain(holds, base) : std::nullopt;
  if (!links) return nullptr;
  size_t bytes = 0;
  for (auto& l : *links) bytes += l->size();
  if (bytes >= dense / 2) return nullptr;
  SPARROW_INFO("rank %d catches up from version %llu by %zu retained delta(s) (%zu bytes) and this step", rank,
               (unsigned long long)holds, links->size(), bytes);
  return share(encode_chain_message(*links));
}

// Resyncs straight to the ranks that need one: the retained deltas up to this operation's base (the
// rank applies this operation's stream after them), or a full snapshot of the new version (encoded
// once for all). Each distinct message is built once.
Status send_resyncs(Engine& e, RootMembership& m, const OpWire& w, RootState& rs, const std::vector<const void*>& src,
                    size_t dense, uint64_t base, const std::map<int, uint64_t>& ranks) {
  Frame snapshot;
  std::map<uint64_t, Frame> chains;
  auto& st = e.stats;
  for (auto [r, holds] : ranks) {
    Frame msg;
    if (holds) {
      if (!chains.count(holds)) chains[holds] = catch_up_for(rs, r, holds, base, dense);
      msg = chains[holds];
    }
    if (msg) {
      st.catchups++;
      st.catchup_bytes += msg->size();
    } else {
      if (!snapshot) {
        SPARROW_ASSIGN_OR_RETURN(auto snap, rs.enc->snapshot(src));
        snapshot = share(std::move(snap));
      }
      msg = snapshot;
    }
    Status sent = w.send({r}, kResyncSub, msg);
    if (!sent.ok() && m.drop(r, "its resync could not be sent: " + sent.message())) continue;  // the others' goes on
    SPARROW_RETURN_IF_ERROR(sent);
  }
  st.resyncs += ranks.size();
  return Status::Ok();
}

OpHeader sparse_header(const std::vector<BufferArg>& bufs, int root, bool full, const std::map<int, uint64_t>& resync) {
  OpHeader h;
  h.kind = kSparse;
  h.flags = full ? kOpFull : 0;
  h.root = root;
  for (auto& b : bufs) h.bufs.push_back({b.count, uint8_t(b.dtype)});
  for (auto [r, holds] : resync) h.resync.push_back(r);
  return h;
}

// After the stream: the step joins the retained chain; an anchor when one is due.
void retain(RootState& rs, const Frames& frames, const std::vector<const void*>& src) {
  if (!frames.empty()) {
    Status kept = rs.retained.add(frames);
    if (!kept.ok()) SPARROW_WARN("%s (catch-ups fall back to snapshots)", kept.message().c_str());
  }
  if (rs.retained.wants_anchor(rs.enc->version())) {
    auto snap = rs.enc->snapshot(src);
    Status a = snap.ok() ? rs.retained.add_anchor(rs.enc->version(), snap.value()) : snap.status();
    if (!a.ok()) SPARROW_WARN("%s", a.message().c_str());
  }
}

void record_root(Engine& e, const std::vector<int>& kids, const kernels::cpu::EncodeStats& es, bool full,
                 double encode_s, double link_Bps, double t0) {
  record_traffic(e, -1, kids);
  auto& st = e.stats;
  st.extract_s = es.extract_seconds;
  st.codec_link_Bps = link_Bps;
  std::copy(std::begin(es.index_codec_chunks), std::end(es.index_codec_chunks), st.index_codecs);
  std::copy(std::begin(es.value_codec_chunks), std::end(es.value_codec_chunks), st.value_codecs);
  st.ops++;
  st.dense_bytes = es.dense_bytes;
  st.wire_bytes = es.wire_bytes;
  st.changed = es.changes;
  st.elements = es.elements;
  st.density = es.density();
  st.full = full;
  st.encode_s = encode_s;
  st.apply_s = 0;
  st.total_s = now_s() - t0;
  log_step(e, "sparse_bcast");
}

}  // namespace

double codec_link_Bps(int64_t mbit, const std::vector<double>& bw_Bps, int self, size_t copies) {
  if (mbit < 0) return 0;
  if (mbit > 0) return double(mbit) * 1e6 / 8;
  double slowest = 0;
  for (int r = 0; r < int(bw_Bps.size()); ++r)
    if (r != self && bw_Bps[size_t(r)] > 0 && (slowest == 0 || bw_Bps[size_t(r)] < slowest)) slowest = bw_Bps[size_t(r)];
  return slowest / double(std::max<size_t>(copies, 1));
}

Status sparse_root(Engine& e, const std::vector<BufferArg>& bufs, int root, const SparseOp& op) {
  const double t0 = now_s();
  OpState state(op.seq, "root");
  const OpWire w = e.wire(op.seq);
  const auto& kids = op.tree.children[e.rank()];
  auto members = root_membership(e, op);
  Status result = members->open(w);
  e.acks.forget_before(w, op.seq);
  RootState& rs = root_state(e, op);
  const bool full = !rs.enc->has_state();
  const uint64_t base = rs.enc->version();
  if (full) rs.retained.clear();
  std::map<int, uint64_t> resync = full ? std::map<int, uint64_t>{} : rs.need_resync;
  std::erase_if(resync, [&](const auto& kv) { return !e.members.is_live(kv.first); });
  // A child lost on the way is dropped from this operation (its acknowledgement reports it).
  Fanout out(w, kids, false);
  OpHeader hdr = sparse_header(bufs, root, full, resync);
  members->stamp(hdr, full, resync);
  members->send_header(w, out, share(hdr.encode()));
  state.advance(Phase::kStream);
  std::vector<const void*> src;
  for (auto& b : bufs) src.push_back(b.send);
  kernels::cpu::EncodeStats es;
  const double te = now_s();
  Frames frames;
  const bool keep = rs.retained.enabled() && !full;
  const double link_Bps = codec_link_Bps(kCodecLink.get(), e.comm.probe().bw_Bps, e.rank(), out.children().size());
  SPARROW_RETURN_IF_ERROR(stream_checkpoint(w, rs, src, out, link_Bps, &es, keep ? &frames : nullptr, members->parts()));
  const double encode_s = now_s() - te;
  retain(rs, frames, src);
  state.advance(Phase::kResync);
  Status late = members->owed(w, rs, full, resync);
  if (result.ok()) result = late;
  rs.need_resync.clear();
  SPARROW_RETURN_IF_ERROR(send_resyncs(e, *members, w, rs, src, op.dense, base, resync));
  // The root's own receive buffer gets the data too (not in place).
  for (auto& b : bufs)
    if (b.recv && b.recv != b.send && b.count)
      SPARROW_RETURN_IF_ERROR(kernels::copy_any(b.recv, b.send, b.count * format::dtype_size(uint8_t(b.dtype))));
  state.advance(Phase::kAck);
  Status end = members->finish(w, rs, full, state);
  if (result.ok()) result = end;
  state.advance(Phase::kDone);
  record_root(e, kids, es, full, encode_s, link_Bps, t0);
  return result;
}

}  // namespace sparrow::coll
