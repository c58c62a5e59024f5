// The root's side of a sparse operation, phase by phase: the op header; the step encoded and streamed
// chunk by chunk to the children (kept for the retained chain); the acknowledgements that arrived
// meanwhile, and resyncs straight to the ranks that need one; on the first, full operation on a
// buffer set, everyone's acknowledgement and the verdict. It does not wait for a delta's
// acknowledgements: they are drained at the next call.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "collectives/elastic.h"
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

params::BoolParam kSeed("SEED_FROM_REGION", true,
                        "Elastic communicators: a rank that needs a full snapshot (a joiner) gets it from a member of "
                        "its own region that holds the version, instead of from the root (0: always from the root).");

params::IntParam kCodecLink("CODEC_LINK_MBIT", 0,
                            "Link rate (Mbit/s) that sparse_bcast's value codecs are chosen for: per chunk, the least "
                            "bytes at this rate plus encode and decode CPU time; 0: the probed rate to the slowest "
                            "receiver, shared by the copies the root sends (one per child); -1: the fewest bytes, "
                            "whatever the CPU time.",
                            -1, 100000000);

using Frames = std::vector<Frame>;

// Who sends `r` its full snapshot instead of the root: a member of r's region (as the tree sees
// regions) that gets no resync itself and so holds the version, r's parent when it is one; -1: none.
int pick_seeder(const topology::Tree& t, const std::vector<int>& members, const std::map<int, uint64_t>& resync, int r) {
  const std::string& region = t.region[size_t(r)];
  if (region.empty() || region == t.region[size_t(t.root)]) return -1;  // the root's region: the root is as near
  auto fits = [&](int p) {
    return p != r && p != t.root && !resync.count(p) && t.region[size_t(p)] == region &&
           std::binary_search(members.begin(), members.end(), p);
  };
  if (t.parent[size_t(r)] >= 0 && fits(t.parent[size_t(r)])) return t.parent[size_t(r)];
  for (int p : members)
    if (fits(p)) return p;
  return -1;
}

// Elastic: the ranks of `resync` due a full snapshot that a member of their region seeds instead (taken
// out of `resync` into `seeds`; they stay listed in the header as resynced).
void choose_seeds(const SparseOp& op, std::map<int, uint64_t>& resync, std::vector<std::pair<int32_t, int32_t>>* seeds) {
  if (!kSeed.get()) return;
  for (auto it = resync.begin(); it != resync.end();) {
    const int from = it->second == 0 ? pick_seeder(op.tree, op.members, resync, it->first) : -1;
    if (from < 0) {
      ++it;
      continue;
    }
    SPARROW_INFO("operation %llu: rank %d gets its full snapshot from rank %d (region %s), not from the root",
                 (unsigned long long)op.seq, it->first, from, op.tree.region[size_t(it->first)].c_str());
    seeds->push_back({int32_t(it->first), int32_t(from)});
    ++it;
  }
}

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
Status send_resyncs(Engine& e, const OpWire& w, RootState& rs, const std::vector<const void*>& src, size_t dense,
                    uint64_t base, const std::map<int, uint64_t>& ranks) {
  Frame snapshot;
  std::map<uint64_t, Frame> chains;
  auto& st = e.stats;
  for (auto [r, holds] : ranks) {
    Frame m;
    if (holds) {
      if (!chains.count(holds)) chains[holds] = catch_up_for(rs, r, holds, base, dense);
      m = chains[holds];
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
    Status sent = w.send({r}, kResyncSub, m);
    if (!sent.ok() && e.comm.elastic() && e.members.is_live(r)) {
      // An elastic member that cannot take its resync is dropped, like one that cannot take the
      // header; the others' operation goes on.
      drop_member(e, r, w.seq, "its resync could not be sent: " + sent.message());
      continue;
    }
    SPARROW_RETURN_IF_ERROR(sent);
  }
  st.resyncs += ranks.size();
  return Status::Ok();
}

// Elastic: the joiners of this operation that get their resync from the root tell it the digests of
// the buffers they hold (sent once they had the header, so normally here by now; each waited for at
// most half the lease); one whose buffers hold a retained version catches up from it (a restarted
// worker that kept its weights) instead of taking a full snapshot.
void take_declared_versions(Engine& e, const OpWire& w, const SparseOp& op, const RootState& rs,
                            std::map<int, uint64_t>& resync) {
  const auto until = std::min(w.deadline, transport::deadline_in(e.comm.lease_s() / 2));
  for (int r : op.joined) {
    auto it = resync.find(r);
    if (it == resync.end() || it->second != 0) continue;
    auto m = w.recv(r, kHoldingsSub, until);
    auto d = m.ok() ? decode_holds(m.value()) : Result<std::vector<uint64_t>>(m.status());
    if (!d.ok()) {
      SPARROW_INFO("operation %llu: no digests from joiner rank %d (%s): a full snapshot", (unsigned long long)op.seq, r,
                   d.status().message().c_str());
      continue;
    }
    it->second = d->empty() ? 0 : rs.retained.version_with(d.value());
    if (it->second)
      SPARROW_INFO("operation %llu: joiner rank %d holds retained version %llu", (unsigned long long)op.seq, r,
                   (unsigned long long)it->second);
  }
}

// `members`: an elastic operation's (null otherwise).
OpHeader sparse_header(const Engine& e, const std::vector<BufferArg>& bufs, int root, bool full,
                       const std::map<int, uint64_t>& resync, const std::vector<int>* members) {
  OpHeader h;
  h.kind = kSparse;
  h.flags = full ? kOpFull : 0;
  h.root = root;
  for (auto& b : bufs) h.bufs.push_back({b.count, uint8_t(b.dtype)});
  for (auto [r, holds] : resync) h.resync.push_back(r);
  if (members) stamp_elastic(e, h, *members);
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

// The ranks that receive a fixed communicator's operation: every other rank, or its participants.
std::vector<int> receivers_of(const Engine& e, const SparseOp& op) {
  std::vector<int> v = other_ranks(e);
  if (!op.participants.empty())
    std::erase_if(v, [&](int r) { return !std::binary_search(op.participants.begin(), op.participants.end(), r); });
  return v;
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
  const bool elastic = e.comm.elastic();
  Status result = elastic ? Status::Ok() : e.acks.drain(w, e.rank(), AckWindow::kDefaultWindow);
  e.acks.forget_before(w, op.seq);
  RootState& rs = root_state(e, op);
  const bool full = !rs.enc->has_state();
  const uint64_t base = rs.enc->version();
  if (full) rs.retained.clear();
  std::map<int, uint64_t> resync = full ? std::map<int, uint64_t>{} : rs.need_resync;
  std::erase_if(resync, [&](const auto& kv) { return !e.members.is_live(kv.first); });
  // A child lost on the way is dropped from this operation (its acknowledgement reports it).
  Fanout out(w, kids, false);
  OpHeader hdr = sparse_header(e, bufs, root, full, resync, elastic ? &op.members : nullptr);
  if (elastic && !full) {
    choose_seeds(op, resync, &hdr.seeds);
    for (auto [r, from] : hdr.seeds) resync.erase(r);  // listed in the header; the seeder sends it
  }
  Frame header = share(hdr.encode());
  if (elastic) {
    send_header_to_all(e, w, header);
    out.preconnect(transport::deadline_in(e.comm.lease_s()));
  } else {
    out.send(0, header);
  }
  state.advance(Phase::kStream);
  std::vector<const void*> src;
  for (auto& b : bufs) src.push_back(b.send);
  kernels::cpu::EncodeStats es;
  const double te = now_s();
  Frames frames;
  Parts parts;  // an elastic operation's, for re-attaching ranks
  const bool keep = rs.retained.enabled() && !full;
  const double link_Bps = codec_link_Bps(kCodecLink.get(), e.comm.probe().bw_Bps, e.rank(), out.children().size());
  SPARROW_RETURN_IF_ERROR(
      stream_checkpoint(w, rs, src, out, link_Bps, &es, keep ? &frames : nullptr, elastic ? &parts : nullptr));
  const double encode_s = now_s() - te;
  retain(rs, frames, src);
  state.advance(Phase::kResync);
  // Every acknowledgement of the earlier operations on these buffers (others' are taken as they come),
  // now that this one's data is on its way (they were sent when those calls returned, so this rarely
  // waits): a rank that refused one of them expects its resync in this operation, the very next one.
  if (!full && !elastic) {
    Status late = e.acks.drain_for(w, e.rank(), op.key);
    if (result.ok()) result = late;
    for (auto [r, holds] : rs.need_resync) resync[r] = holds;
  }
  rs.need_resync.clear();
  if (elastic && !full) take_declared_versions(e, w, op, rs, resync);
  SPARROW_RETURN_IF_ERROR(send_resyncs(e, w, rs, src, op.dense, base, resync));
  // The root's own receive buffer gets the data too (not in place).
  for (auto& b : bufs)
    if (b.recv && b.recv != b.send && b.count)
      SPARROW_RETURN_IF_ERROR(kernels::copy_any(b.recv, b.send, b.count * format::dtype_size(uint8_t(b.dtype))));
  state.advance(Phase::kAck);
  if (elastic) {
    // Every member's acknowledgement or its drop; on the first operation on a buffer set, the verdict.
    Status end = finish_elastic(e, w, op.key, op.members, parts, full, nullptr);
    if (full && !verdict_for_others(end).ok()) rs.enc->reset();  // arguments differ: a full snapshot again
    if (full) state.advance(Phase::kVerdict);
    if (result.ok()) result = end;
  }
  const std::vector<int> others = receivers_of(e, op);
  if (!elastic) e.acks.post(op.seq, op.key, others);
  if (full && !elastic) {
    // First operation on these buffers: wait for everyone, so a mismatched call fails everywhere.
    Status agree = e.acks.drain(w, e.rank(), 0);
    const Status verdict = verdict_for_others(agree);
    if (!verdict.ok()) rs.enc->reset();  // arguments differ: the next call is a full snapshot again
    state.advance(Phase::kVerdict);
    SPARROW_RETURN_IF_ERROR(send_verdict(w, others, verdict));
    if (result.ok()) result = agree;
  }
  state.advance(Phase::kDone);
  record_root(e, kids, es, full, encode_s, link_Bps, t0);
  return result;
}

}  // namespace sparrow::coll
