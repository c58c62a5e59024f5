// SPDX-License-Identifier: Apache-2.0
// Several sources on an elastic communicator: each source's operations run over the members it
// counts, and each source drops the members that fail in its own operations. So that every source's
// operations of a step run over the same members, and a rank one source dropped is out of every
// source's, the sources agree on them at the start of every step: the other sources send the root the
// members they still count, the root drops every rank one of them dropped and sends each the members
// of this step with its verdict, and where the joiners it admitted now are (rejoin.cpp). Receivers
// take no part: they learn they are out from a source's header (or its closed connection). The
// messages are keyed in the number of the step's first operation (kRoll*Sub), so the roll call takes
// no number of its own and receivers need not know of it.
#include <algorithm>

#include "collectives/elastic/elastic.h"
#include "core/bits.h"
#include "model/model.h"

namespace sparrow::model {
namespace {

std::vector<uint8_t> encode_ranks(const std::vector<int>& ranks) {
  std::vector<uint8_t> o;
  bits::put_u32(o, uint32_t(ranks.size()));
  for (int r : ranks) bits::put_u32(o, uint32_t(r));
  return o;
}

Result<std::vector<int>> decode_ranks(const std::vector<uint8_t>& m, int nranks) {
  bits::ByteReader rd(m, "the members of a model's step");
  uint32_t n = 0;
  SPARROW_RETURN_IF_ERROR(rd.u32(&n));
  if (n > uint32_t(nranks)) return CorruptData("the members of a model's step: " + std::to_string(n) + " ranks");
  std::vector<int> v;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t r = 0;
    SPARROW_RETURN_IF_ERROR(rd.u32(&r));
    if (r >= uint32_t(nranks) || (!v.empty() && int(r) <= v.back()))
      return CorruptData("the members of a model's step: rank " + std::to_string(r) + " out of order or range");
    v.push_back(int(r));
  }
  if (rd.remaining()) return CorruptData("the members of a model's step: trailing bytes");
  return v;
}

Status lost_source(int s, const Status& why) {
  return Error(Code::kPeerLost, "the model's source rank " + std::to_string(s) +
                                    " did not take part in this step (its rows have no other sender): " + why.message());
}

}  // namespace

Status Model::roll_call() {
  if (!sharded() || !e_.comm.elastic() || !is_source()) return Status::Ok();
  const coll::OpWire w = e_.wire(e_.comm.peek_seq());
  if (is_root()) return root_roll_call(w);
  Status sent = w.send({root_}, kRollSub, coll::share(encode_ranks(e_.members.live())));
  auto live = sent.ok() ? w.recv(root_, kRollLiveSub) : Result<std::vector<uint8_t>>(sent);
  auto ranks = live.ok() ? decode_ranks(*live, e_.comm.nranks()) : Result<std::vector<int>>(live.status());
  auto joined = ranks.ok() ? w.recv(root_, kRollJoinedSub) : Result<std::vector<uint8_t>>(ranks.status());
  auto places = joined.ok() ? coll::decode_places(*joined, "the joiners of a model's step")
                            : Result<std::vector<coll::Place>>(joined.status());
  if (places.ok() && places->size() > size_t(e_.comm.nranks()))
    places = CorruptData("the joiners of a model's step: " + std::to_string(places->size()) + " ranks");
  auto verdict = places.ok() ? w.recv(root_, kRollVerdictSub) : Result<std::vector<uint8_t>>(places.status());
  auto ack = verdict.ok() ? coll::Ack::decode(*verdict, "rank " + std::to_string(root_))
                          : Result<coll::Ack>(verdict.status());
  if (!ack.ok()) return lost_source(root_, ack.status());
  for (const coll::Place& p : *places) coll::take_joiner(e_, p, w.seq);  // (before the list that names them)
  coll::adopt_members(e_, std::vector<int32_t>(ranks->begin(), ranks->end()));
  return ack->status;
}

Status Model::root_roll_call(const coll::OpWire& w) {
  Status verdict;
  std::vector<int> heard;
  for (int s : sources_) {
    if (s == root_) continue;
    if (!e_.members.is_live(s)) {  // (dropped by another operation on this communicator: a lease ran out)
      if (verdict.ok()) verdict = lost_source(s, Error(Code::kPeerLost, "the root dropped it from the elastic communicator"));
      continue;
    }
    auto bytes = w.recv(s, kRollSub);
    auto counted = bytes.ok() ? decode_ranks(*bytes, e_.comm.nranks()) : Result<std::vector<int>>(bytes.status());
    if (!counted.ok()) {
      if (verdict.ok()) verdict = lost_source(s, counted.status());
      continue;
    }
    heard.push_back(s);
    for (int r : e_.members.live())
      if (!std::binary_search(counted->begin(), counted->end(), r))
        coll::drop_member(e_, r, w.seq, "source rank " + std::to_string(s) + " dropped it");
  }
  std::vector<coll::Place> places;  // the joiners admitted now (the agreement sent to each)
  for (int r : welcome_joiners(w.seq)) places.push_back(e_.elastic.moved.at(r));
  const coll::Frame live = coll::share(encode_ranks(e_.members.live()));
  const coll::Frame joined = coll::share(coll::encode_places(places));
  const coll::Frame told = coll::share(coll::Ack{verdict}.encode());
  for (int s : heard) {
    Status sent = w.send({s}, kRollLiveSub, live);
    if (sent.ok()) sent = w.send({s}, kRollJoinedSub, joined);
    if (sent.ok()) sent = w.send({s}, kRollVerdictSub, told);
    if (!sent.ok() && verdict.ok()) verdict = lost_source(s, sent);
  }
  return verdict;
}

}  // namespace sparrow::model
