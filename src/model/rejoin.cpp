// SPDX-License-Identifier: Apache-2.0
// A rank that rejoins an elastic communicator (sparrowCommJoin) into a slot of a model agreed before it
// came: a restarted rollout worker. The model's root, rank 0, admits the waiting joiners at the start
// of a step (coll::admit_ahead: the step's first operation is a joiner's first; with several sources
// in their roll call, which tells the other sources where each joiner is, roll_call.cpp) and sends
// each what it missed of the agreement: the manifest and, when the step is split, every
// receiver's rows (kRejoinSub, in the number of the step's first operation). A joiner's model looks
// for it when it has taken part in no operation since it joined: the operation that admitted it was
// then a model's step (a new model's agreement would come after an operation it took part in). The
// joiner plans its tensors against the manifest and takes part in the step; its buffers get a full
// snapshot, or catch up from a retained version they hold (the collectives' joiner path). In a split
// step the operations were cut for the rows each slot was planned with, so the joiner must hold its
// slot's rows (a worker restarted with its old layout); one that holds others fails alone, with
// kInvalidUsage, and the root drops it when its lease runs out, as any member that does not answer.
#include <algorithm>

#include "collectives/elastic/elastic.h"
#include "core/bits.h"
#include "model/model.h"

namespace sparrow::model {
namespace {

constexpr uint32_t kWelcomeMagic = 0x4a525053u;  // "SPRJ"

struct ModelWelcome {
  std::span<const uint8_t> manifest, needs;  // needs empty: the step is not split
};

std::vector<uint8_t> encode_welcome(std::span<const uint8_t> manifest, std::span<const uint8_t> needs) {
  std::vector<uint8_t> o;
  bits::put_u32(o, kWelcomeMagic);
  bits::put_u32(o, uint32_t(manifest.size()));
  o.insert(o.end(), manifest.begin(), manifest.end());
  o.insert(o.end(), needs.begin(), needs.end());
  return o;
}

Result<ModelWelcome> decode_welcome(std::span<const uint8_t> b) {
  bits::ByteReader r(b, "a model's welcome");
  uint32_t magic = 0, len = 0;
  const uint8_t* p = nullptr;
  SPARROW_RETURN_IF_ERROR(r.u32(&magic));
  if (magic != kWelcomeMagic) return CorruptData("not a model's welcome");
  SPARROW_RETURN_IF_ERROR(r.u32(&len));
  SPARROW_RETURN_IF_ERROR(r.bytes(len, &p));
  return ModelWelcome{{p, len}, b.subspan(b.size() - r.remaining())};
}

std::string rows_str(const std::vector<Slice>& rows, const Manifest& m) {
  std::string o;
  for (const Slice& s : rows)
    o += (o.empty() ? "" : ", ") + m.tensors[s.logical].name + "[" + std::to_string(s.start) + ":" +
         std::to_string(s.stop) + "]";
  return o.empty() ? "none" : o;
}

bool same_rows(const std::vector<Slice>& a, const std::vector<Slice>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Slice& x, const Slice& y) {
    return x.logical == y.logical && x.start == y.start && x.stop == y.stop;
  });
}

}  // namespace

bool Model::rejoining() const {
  return e_.comm.elastic() && !is_root() && e_.elastic.joined_at != 0 && e_.elastic.joined_at == e_.comm.peek_seq();
}

std::vector<int> Model::welcome_joiners(uint64_t seq) {
  if (!e_.comm.elastic() || !is_root() || e_.rank() != 0) return {};  // (rank 0 admits joiners)
  std::vector<int> joined = coll::admit_ahead(e_, seq);
  if (joined.empty()) return {};
  const auto welcome = coll::share(encode_welcome(manifest_.encode(), needs_wire_));
  for (int r : joined) {
    Status s = e_.wire(seq).send({r}, kRejoinSub, welcome);
    if (!s.ok()) coll::drop_member(e_, r, seq, "the model's manifest could not be sent to it: " + s.to_string());
  }
  std::erase_if(joined, [&](int r) { return !e_.members.is_live(r); });
  return joined;
}

Status Model::rejoin() {
  if (is_source())
    return Error(Code::kInvalidUsage, "rank " + std::to_string(e_.rank()) + " joined into a source's slot: a "
                                      "model's source cannot be replaced (its part of every version is its own)");
  SPARROW_ASSIGN_OR_RETURN(auto b, e_.wire(e_.comm.peek_seq()).recv(root_, kRejoinSub));
  SPARROW_ASSIGN_OR_RETURN(ModelWelcome w, decode_welcome(b));
  SPARROW_ASSIGN_OR_RETURN(Manifest m, Manifest::decode(w.manifest));
  if (m.root != root_)
    return Error(Code::kInvalidUsage, "the model's root is rank " + std::to_string(m.root) + ", not " + std::to_string(root_));
  SPARROW_RETURN_IF_ERROR(plan(m));
  manifest_ = std::move(m);
  if (w.needs.empty()) return Status::Ok();  // one operation of every tensor: any layout takes part
  SPARROW_ASSIGN_OR_RETURN(Needs needs, decode_needs(w.needs, manifest_));
  std::vector<Slice> slot;
  for (const auto& [rank, rows] : needs)
    if (rank == e_.rank()) slot = rows;
  const std::vector<Slice> mine = needed_rows(manifest_, targets_);
  if (!same_rows(slot, mine))
    return Error(Code::kInvalidUsage,
                 "rank " + std::to_string(e_.rank()) + " rejoined a model whose steps were planned with rows " +
                     rows_str(slot, manifest_) + " in its slot, but its tensors hold rows " + rows_str(mine, manifest_) +
                     ": a rank that rejoins holds its slot's layout (or every rank creates a new model)");
  adopt_plan(needs);
  return Status::Ok();
}

}  // namespace sparrow::model
