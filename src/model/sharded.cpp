// SPDX-License-Identifier: Apache-2.0
// A model whose step is split into several operations (split.h): several sources (sources.h), each
// sending its own rows in operations of its own (the other sources skip them), so the sources encode
// and send in parallel with no gather; and receivers that need different rows, each taking part only
// in the operations that carry rows it holds. A receiver receives into host mirrors of the logical
// tensors and writes its own tensors only once every operation of a step verified, so its tensors
// never hold a mix of versions: an operation that failed leaves the others' mirrors ahead, the step
// fails, and the next one (which brings the failed operation a resync) projects them all at once.
#include <algorithm>
#include <cstring>

#include "collectives/bcast.h"
#include "collectives/elastic/elastic.h"
#include "core/clock.h"
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
  return Status::Ok();
}

std::vector<int> Model::receivers() const {
  std::vector<int> v;
  for (int r : e_.members.live())
    if (sharded() ? std::find(sources_.begin(), sources_.end(), r) == sources_.end() : r != root_) v.push_back(r);
  return v;
}

bool Model::takes_part(size_t k) const {
  return std::binary_search(ops_[k].participants.begin(), ops_[k].participants.end(), e_.rank());
}

bool Model::takes_no_part() const {
  for (size_t k = 0; k < ops_.size(); ++k)
    if (takes_part(k)) return false;
  return true;
}

// Every receiver's rows, through the root (an elastic member that does not send them is dropped, and
// holds none).
Result<Needs> Model::share_needs(const coll::OpWire& w) {
  if (is_root()) {
    Needs all;
    for (int r : receivers()) {
      auto bytes = w.recv(r, kRowsSub);
      if (!bytes.ok() && e_.comm.elastic()) {
        coll::drop_member(e_, r, w.seq, "no rows for the model's plan: " + bytes.status().to_string());
        continue;
      }
      if (!bytes.ok()) return bytes.status();
      auto rows = decode_rows(*bytes, manifest_);
      if (!rows.ok()) return Status(rows.status().code(), "rank " + std::to_string(r) + ": " + rows.status().message());
      all.emplace_back(r, std::move(*rows));
    }
    std::vector<int> to = e_.members.live();
    std::erase(to, root_);
    Status sent = w.send(to, kNeedsSub, coll::share(encode_needs(all)));
    if (!e_.comm.elastic()) SPARROW_RETURN_IF_ERROR(sent);  // (elastic: one that is gone misses no operation)
    return all;
  }
  if (!is_source())
    SPARROW_RETURN_IF_ERROR(w.send({root_}, kRowsSub, coll::share(encode_rows(needed_rows(manifest_, targets_)))));
  SPARROW_ASSIGN_OR_RETURN(auto bytes, w.recv(root_, kNeedsSub));
  return decode_needs(bytes, manifest_);
}

// After the manifest's verdict: the operations of a step. One source whose receivers all need the
// whole model keeps one operation of every tensor, received in place. (On an elastic communicator an
// operation's members are its participants that are still members: a member dropped later is left
// out of every operation.)
Status Model::split(const coll::OpWire& w) {
  SPARROW_ASSIGN_OR_RETURN(Needs needs, share_needs(w));
  adopt_plan(needs);
  if (split_ && is_root()) needs_wire_ = encode_needs(needs);  // (for ranks that rejoin)
  return Status::Ok();
}

void Model::adopt_plan(const Needs& needs) {
  ops_ = split_step(sharded() ? manifest_.parts : std::vector<Part>{whole_part(manifest_)}, needs);
  // (no operation at all: no receiver holds anything, a one-rank communicator: one operation still)
  split_ = sharded() || (!ops_.empty() && (ops_.size() != 1 || int(ops_[0].participants.size()) != e_.comm.nranks()));
  for (auto& [rank, rows] : needs)
    if (rank == e_.rank()) held_ = rows;
  // (the sources start streaming now: an elastic receiver is alive to them while it makes its mirrors)
  if (split_ && !is_source()) beat_ahead();
  if (split_ && !is_source()) mirror_wholes();
}

// A split receiver mirrors every logical tensor, those it holds whole included: they are written
// like pieces, once every operation of a step verified.
void Model::mirror_wholes() {
  for (size_t l = 0; l < targets_.size(); ++l) {
    Target& t = targets_[l];
    if (t.whole < 0) continue;
    const LogicalTensor& lt = manifest_.tensors[l];
    t.pieces.push_back({size_t(t.whole), Piece{lt.name, 0, 0, rows_of(lt.shape), 0}});
    runs_[l].push_back({Run{0, 0, lt.bytes()}});
    t.whole = -1;
    mirrors_[l].resize(lt.bytes());
    std::memset(mirrors_[l].data(), 0, mirrors_[l].size());
  }
}

std::vector<coll::BufferArg> Model::op_bufs(size_t k) const {
  std::vector<coll::BufferArg> out;
  const SplitOp& op = ops_[k];
  for (const Segment& g : op.segments) {
    const LogicalTensor& l = manifest_.tensors[g.logical];
    const uint64_t rows = rows_of(l.shape), row = l.numel() / std::max<uint64_t>(rows, 1);
    const uint64_t row_bytes = row * format::dtype_size(l.dtype);
    coll::BufferArg b;
    b.count = (g.stop - g.start) * row;
    b.dtype = l.dtype;
    const bool part = g.start || g.stop != rows;
    b.name = l.name + (part ? "[" + std::to_string(g.start) + ":" + std::to_string(g.stop) + "]" : "");
    if (op.source == e_.rank())
      b.send = in_slice(g.slice, g.start - g.slice_start, row_bytes);
    else
      b.recv = const_cast<uint8_t*>(mirrors_[g.logical].data()) + g.start * row_bytes;
    out.push_back(std::move(b));
  }
  return out;
}

const uint8_t* Model::in_slice(size_t i, uint64_t row, uint64_t row_bytes) const {
  const SliceHome& h = homes_[i];
  return static_cast<const uint8_t*>(locals_[h.local].data) + (h.row + row) * row_bytes;
}

Result<const uint8_t*> Model::rows_at(size_t l, uint64_t start, uint64_t stop) const {
  const LogicalTensor& t = manifest_.tensors[l];
  const uint64_t row_bytes = t.bytes() / std::max<uint64_t>(rows_of(t.shape), 1);
  const std::string which =
      "rows [" + std::to_string(start) + ", " + std::to_string(stop) + ") of '" + t.name + "'" +
      (t.blocked() ? " (its elements [" + std::to_string(t.block_start) + ", " +
                         std::to_string(t.block_start + t.shape[size_t(t.block_dim)]) + ") along dim " +
                         std::to_string(t.block_dim) + ")"
                   : "");
  if (sharded() && is_source()) {
    for (const Part& p : manifest_.parts)
      for (size_t i = 0; p.rank == e_.rank() && i < p.slices.size(); ++i)
        if (p.slices[i].logical == l && p.slices[i].start <= start && stop <= p.slices[i].stop)
          return in_slice(i, start - p.slices[i].start, row_bytes);
    return Error(Code::kInvalidUsage, "this source does not hold " + which +
                                          (t.blocked() ? ": ask a rank that holds every column"
                                                       : ": ask the source of those rows, or a receiver"));
  }
  if (split_ && !is_source() && !covers(held_, uint32_t(l), start, stop)) {
    if (t.blocked()) return Error(Code::kInvalidUsage, "this rank does not hold " + which + ": ask a rank that holds every column");
    std::string held;
    for (const Slice& s : held_)
      if (s.logical == l)
        held += (held.empty() ? "[" : ", [") + std::to_string(s.start) + ", " + std::to_string(s.stop) + ")";
    return Error(Code::kInvalidUsage, "this rank does not hold " + which + " (its pieces cover rows " +
                                          (held.empty() ? std::string("none") : held) +
                                          "): ask for the digest of rows it holds");
  }
  return logical_bytes(l) + start * row_bytes;
}

Status Model::step_split() {
  beat_ahead();  // (first: reading the tensors to judge drift takes a while)
  const bool refuse = !is_source() && drifted();
  const double t0 = now_s();
  // (a source that failed its roll call still sends its operations: the receivers' step then fails
  // on the lost source's operation alone, at once)
  Status first = roll_call();
  coll::Stats sum;
  for (size_t k = 0; k < ops_.size(); ++k) {
    if (!takes_part(k)) {
      coll::skip_op(e_);
      continue;
    }
    Status s = coll::sparse_bcast(e_, op_bufs(k), ops_[k].source, &ops_[k].participants);
    if (!s.ok() && first.ok()) first = s;
    coll::add_op_stats(sum, e_.stats);
  }
  coll::stop_beats_ahead(e_);
  sum.total_s = now_s() - t0;
  e_.stats = std::move(sum);  // the step as one (sparrowCommGetStats)
  return finish_split(std::move(first), refuse);
}

// A receiver stages every operation it takes part in as one step: received into the mirrors in the
// background (the local tensors, which the caller keeps reading, are not touched), projected at the
// commit.
Status Model::stage_split() {
  std::vector<coll::StagePart> parts;
  for (size_t k = 0; k < ops_.size(); ++k)
    parts.push_back(
        {takes_part(k) ? op_bufs(k) : std::vector<coll::BufferArg>{}, ops_[k].source, ops_[k].participants});
  beat_ahead();  // (until each operation starts in the background; the rest end at the commit)
  Status s = coll::sparse_stage_parts(e_, parts);
  if (!s.ok()) coll::stop_beats_ahead(e_);
  return s;
}

// An elastic receiver tells the source of every operation of this step it takes part in that it is
// alive from the step's start on (elastic.h, beat_ahead): several sources stream at once, and it
// reaches a later source's operation only once it received the earlier ones.
void Model::beat_ahead() {
  if (!e_.comm.elastic() || is_source()) return;
  const uint64_t first = e_.comm.peek_seq();  // (operation k takes number first + k)
  for (size_t k = 0; k < ops_.size(); ++k)
    if (takes_part(k)) coll::beat_ahead(e_, e_.wire(first + k), ops_[k].source);
}

Status Model::commit_split() {
  // (a commit with nothing staged is a no-op, as for one source; drift is judged now, before writing)
  if (!coll::stage_progress(e_).pending) return Status::Ok();
  const bool refuse = drifted();
  Status s = coll::stage_commit(e_);  // (the staged operations took their heartbeats over)
  coll::stop_beats_ahead(e_);
  return finish_split(std::move(s), refuse);
}

// After every operation of a step: a receiver whose tensors were written to is refused and repaired at
// the next step; otherwise its tensors get the step, all parts at once.
Status Model::finish_split(Status first, bool refuse) {
  if (first.ok() && refuse) {
    repair_ = true;
    first = VersionMismatch("this rank's tensors were written to since the last step: none of them was written, "
                            "and the next step rewrites them");
  }
  if (first.ok() && !is_source()) first = project_all();
  if (first.ok() && takes_no_part()) ++version_;  // it holds no row: the step's version is the count
  else if (first.ok()) read_version();
  return first;
}

}  // namespace sparrow::model
