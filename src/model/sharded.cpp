// SPDX-License-Identifier: Apache-2.0
// A model with several sources (sources.h): each source sends its own rows in an operation of its
// own, among it and the receivers (the other sources skip it), so the sources encode and send in
// parallel, with no gather. A receiver receives every part into host mirrors of the logical tensors
// and writes its own tensors only once every part of a step verified, so its tensors never hold a
// mix of versions: a part that failed leaves the others' mirrors ahead, the step fails, and the
// next one (which brings the failed part a resync) projects them all at once.
#include <algorithm>
#include <cstring>

#include "collectives/bcast.h"
#include "format/checkpoint.h"
#include "format/digest.h"
#include "model/model.h"
#include "model/sources.h"

namespace sparrow::model {

Status Model::agree_sharded(const coll::OpWire& w) {
  const bool source = is_source();
  if (source && !is_root()) SPARROW_RETURN_IF_ERROR(w.send({root_}, kPartSub, coll::share(part_of(locals_, e_.rank()).encode())));
  if (is_root()) {
    std::vector<Manifest> parts;
    Status mine;
    for (int s : sources_) {
      if (s == root_) {
        parts.push_back(part_of(locals_, s));
        continue;
      }
      auto bytes = w.recv(s, kPartSub);
      auto m = bytes.ok() ? Manifest::decode(*bytes) : Result<Manifest>(bytes.status());
      if (!m.ok()) return root_agrees(e_, w, Manifest{}, m.status());
      parts.push_back(std::move(*m));
    }
    manifest_ = merge_parts(parts, root_);
    if (!manifest_.error.empty()) mine = Error(Code::kInvalidUsage, manifest_.error);
    SPARROW_RETURN_IF_ERROR(root_agrees(e_, w, manifest_, mine));
  } else {
    SPARROW_ASSIGN_OR_RETURN(auto bytes, w.recv(root_, kManifestSub));
    auto m = Manifest::decode(bytes);
    Status mine = !m.ok() ? m.status() : !m->error.empty() ? Error(Code::kInvalidUsage, m->error) : Status::Ok();
    if (mine.ok() && !source) mine = plan(*m);
    Status sent = w.send({root_}, coll::kAckSub, coll::share(coll::Ack{mine}.encode()));
    if (!mine.ok()) return mine;
    SPARROW_RETURN_IF_ERROR(sent);
    SPARROW_RETURN_IF_ERROR(coll::recv_verdict(w, root_));
    manifest_ = std::move(*m);
  }
  std::vector<int> receivers;
  for (int r = 0; r < e_.comm.nranks(); ++r)
    if (std::find(sources_.begin(), sources_.end(), r) == sources_.end()) receivers.push_back(r);
  participants_.clear();
  for (const Part& p : manifest_.parts) {
    std::vector<int> v = receivers;
    v.insert(std::upper_bound(v.begin(), v.end(), p.rank), p.rank);
    participants_.push_back(std::move(v));
  }
  return Status::Ok();
}

// A sharded receiver mirrors every logical tensor, those it holds whole included: they are written
// like pieces, once every part of a step verified.
void Model::plan_sharded(const Manifest& m) {
  for (size_t l = 0; l < targets_.size(); ++l) {
    Target& t = targets_[l];
    if (t.whole < 0) continue;
    const LogicalTensor& lt = m.tensors[l];
    t.pieces.push_back({size_t(t.whole), Piece{lt.name, 0, 0, rows_of(lt.shape), 0}});
    runs_[l].push_back({Run{0, 0, lt.bytes()}});
    t.whole = -1;
    mirrors_[l].resize(lt.bytes());
    std::memset(mirrors_[l].data(), 0, mirrors_[l].size());
  }
}

std::vector<coll::BufferArg> Model::part_bufs(size_t k) const {
  std::vector<coll::BufferArg> out;
  const Part& p = manifest_.parts[k];
  for (size_t i = 0; i < p.slices.size(); ++i) {
    const Slice& s = p.slices[i];
    const LogicalTensor& l = manifest_.tensors[s.logical];
    const uint64_t row = l.numel() / std::max<uint64_t>(rows_of(l.shape), 1);
    coll::BufferArg b;
    b.count = (s.stop - s.start) * row;
    b.dtype = l.dtype;
    b.name = l.name + (s.start || s.stop != rows_of(l.shape)
                           ? "[" + std::to_string(s.start) + ":" + std::to_string(s.stop) + "]" : "");
    if (p.rank == e_.rank()) b.send = locals_[i].data;  // a source's part lists its tensors in order
    else b.recv = const_cast<uint8_t*>(mirrors_[s.logical].data()) + s.start * row * format::dtype_size(l.dtype);
    out.push_back(std::move(b));
  }
  return out;
}

uint64_t Model::local_sum(size_t t) const {
  uint64_t h = 0;
  const auto* base = static_cast<const uint8_t*>(locals_[t].data);
  for (size_t l = 0; l < targets_.size(); ++l)
    for (size_t i = 0; i < targets_[l].pieces.size(); ++i)
      if (targets_[l].pieces[i].local == t)
        for (const Run& r : runs_[l][i]) h = format::checksum(base + r.local, r.bytes, h);
  return h;
}

bool Model::drifted() const {
  if (sums_.empty() || repair_) return false;  // nothing projected yet, or a repair is due anyway
  for (size_t t = 0; t < locals_.size(); ++t)
    if (local_sum(t) != sums_[t]) return true;
  return false;
}

void Model::project_all() {
  project_pieces();
  sums_.resize(locals_.size());
  for (size_t t = 0; t < locals_.size(); ++t) sums_[t] = local_sum(t);
  repair_ = false;
}

Status Model::step_sharded() {
  const bool source = is_source();
  const bool refuse = !source && drifted();
  Status first;
  for (size_t k = 0; k < manifest_.parts.size(); ++k) {
    const int from = manifest_.parts[k].rank;
    if (source && from != e_.rank()) {
      coll::skip_op(e_);
      continue;
    }
    Status s = coll::sparse_bcast(e_, part_bufs(k), from, &participants_[k]);
    if (!s.ok() && first.ok()) first = s;
  }
  return finish_sharded(std::move(first), refuse);
}

// A receiver stages every part as one step: received into the mirrors in the background (the local
// tensors, which the caller keeps reading, are not touched), projected at the commit.
Status Model::stage_sharded() {
  std::vector<coll::StagePart> parts;
  for (size_t k = 0; k < manifest_.parts.size(); ++k)
    parts.push_back({part_bufs(k), manifest_.parts[k].rank, participants_[k]});
  return coll::sparse_stage_parts(e_, parts);
}

Status Model::commit_sharded() {
  // (a commit with nothing staged is a no-op, as for one source; drift is judged now, before writing)
  if (!coll::stage_progress(e_).pending) return Status::Ok();
  const bool refuse = drifted();
  return finish_sharded(coll::stage_commit(e_), refuse);
}

// After every part of a step: a receiver whose tensors were written to is refused and repaired at
// the next step; otherwise its tensors get the step, all parts at once.
Status Model::finish_sharded(Status first, bool refuse) {
  if (first.ok() && refuse) {
    repair_ = true;
    first = VersionMismatch("this rank's tensors were written to since the last step: none of them was written, "
                            "and the next step rewrites them");
  }
  if (first.ok() && !is_source()) project_all();
  if (first.ok()) read_version();
  return first;
}

}  // namespace sparrow::model
