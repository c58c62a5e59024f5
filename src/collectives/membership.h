// SPDX-License-Identifier: Apache-2.0
// One sparse operation as its communicator's membership shapes it. The root's side: what earlier
// operations left to collect, who the header names and how it travels, what a rank that re-attaches
// mid-stream is served from, whose resync this operation owes, what happens to a rank that cannot
// take one, and how the operation ends. A fixed communicator (membership.cpp: the tree carries the
// header, acknowledgements are drained a window later, the first operation on a buffer set ends in a
// verdict) and an elastic one (elastic/membership.cpp: members with leases, the header to every
// member, joiners' declared versions, seeds from region peers, every acknowledgement or a drop)
// each implement it, so sparse_root reads as one protocol.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "collectives/fanout.h"
#include "collectives/op.h"
#include "collectives/protocol.h"
#include "collectives/relay.h"
#include "collectives/sparse/sparse_op.h"
#include "collectives/state.h"

namespace sparrow::coll {

class RootMembership {
 public:
  virtual ~RootMembership() = default;
  // Before the header: the acknowledgements of earlier operations still to collect (the first failure
  // one of them reported).
  virtual Status open(const OpWire& w) = 0;
  // The header's membership fields: `resync` (rank -> the version it holds, 0: a snapshot) loses the
  // ranks another member serves instead of the root.
  virtual void stamp(OpHeader& h, bool full, std::map<int, uint64_t>& resync) = 0;
  // The header to the ranks that are to have it from the root.
  virtual void send_header(const OpWire& w, Fanout& out, const Frame& header) = 0;
  // Where the stream's parts are kept for ranks that re-attach mid-stream (null: none are).
  virtual Parts* parts() = 0;
  // After the stream: the resyncs this operation owes besides `resync` (added to it). `rs` is the
  // buffers' state; its list of ranks that asked is cleared by the caller afterwards.
  virtual Status owed(const OpWire& w, RootState& rs, bool full, std::map<int, uint64_t>& resync) = 0;
  // A rank that could not take its resync: true when it was dropped from the operation (the others'
  // operation goes on), false when that is the operation's failure.
  virtual bool drop(int rank, const std::string& why) = 0;
  // The end: acknowledgements and, on the first (full) operation on a buffer set, the verdict
  // (advancing `state` to it). Returns the first failure; a disagreement resets `rs`'s encoder.
  virtual Status finish(const OpWire& w, RootState& rs, bool full, OpState& state) = 0;
};

// Who takes part in operation `op` and over which tree, before its header: on a fixed communicator
// every rank, or `participants` (null: every rank); on an elastic one, at the root, the live members
// with the joiners it admits now, or the live ones among `participants` (no joiner is admitted then);
// a receiver learns them from the header.
Status plan_members(Engine& e, SparseOp& op, int root, const std::vector<int>* participants);

// The root's membership for operation `op` on this engine's communicator.
std::unique_ptr<RootMembership> root_membership(Engine& e, const SparseOp& op);

// A receiver's side: where the operation comes from (down the tree, or its header from the root
// itself, which names the members and so this rank's place), whether the root hears the rank is
// alive meanwhile, and whether its relay goes on serving after its call returned.
class ReceiverMembership {
 public:
  virtual ~ReceiverMembership() = default;
  // The relay this rank receives and forwards operation `op` with, before its header came.
  virtual std::unique_ptr<Relay> relay(const SparseOp& op) = 0;
  // From the start of the operation until this rank acknowledges it (acknowledging()).
  virtual void started(const OpWire& w, int root) = 0;
  virtual void acknowledging() = 0;
  // The operation's header. An elastic one names the members: `op` gets them and the tree over them,
  // `relay` its place in it; `*dropped` says the root counts this rank out.
  virtual Result<ReceivedHeader> header(Relay& relay, SparseOp& op, int root, bool* dropped) = 0;
  // Whether the relay goes on serving adoptions after the call returned (its operation succeeded).
  virtual bool lingers(Relay& relay) const = 0;
  // Takes a relay that lingers (flushed; its operation committed), until the next operation.
  virtual void linger(std::unique_ptr<Relay> relay) = 0;
  // Whether this rank, due a resync in `op`, declares the versions its buffers hold (a joiner's first
  // operation: it may catch up from a retained version instead of a full snapshot).
  virtual bool declares_holdings(const SparseOp& op) const = 0;
};

std::unique_ptr<ReceiverMembership> receiver_membership(Engine& e);

namespace elastic {
// A receiver's relay placed in tree `t` over the members (an elastic header names them): its parent
// and children, its failover (patience before re-attaching, its adopter, the ranks it may adopt), and
// its connections opened ahead. Sparse and dense receivers alike.
void attach(Engine& e, Relay& relay, const topology::Tree& t, int root);
Status plan_members(Engine& e, SparseOp& op, int root, const std::vector<int>* participants);
std::unique_ptr<RootMembership> root_membership(Engine& e, const SparseOp& op);
std::unique_ptr<ReceiverMembership> receiver_membership(Engine& e);
}  // namespace elastic

}  // namespace sparrow::coll
