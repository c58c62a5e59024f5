// SPDX-License-Identifier: Apache-2.0
// Elastic membership (sparrowConfig_t.elastic), the parts that the membership seam
// (collectives/membership.h), a relay's failover (collectives/failover.h) and the elastic dense
// broadcast (dense.cpp) are built from. By role:
//   members.h      who is still in (the root decides, every header lists them);
//   leases.cpp     the header straight to every member; each member's acknowledgement awaited at most
//                  the lease after the root last heard from it (heartbeats renew it), re-attach
//                  requests served meanwhile from the operation's parts; a member that fails or falls
//                  silent is dropped;
//   admission.cpp  joiners admitted into free slots at an operation's start, free slots published;
//   failover.cpp   a receiver's patience, its adopter in its region, and the failover ladder (holds,
//                  the adopter, then the root);
//   membership.cpp the seam's elastic implementation for sparse operations (seeds from region peers,
//                  joiners' declared versions).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/failover.h"
#include "collectives/fanout.h"
#include "collectives/state.h"

namespace sparrow::coll {

// The header to every other rank the root can still reach (`to`: to those of them; null: every
// rank), each send bounded by the lease.
void send_header_to_all(Engine& e, const OpWire& w, const Frame& header, const std::vector<int>* to = nullptr);
// The root drops `r` from the members and closes its connections (a later process in that slot
// starts it afresh).
void drop_member(Engine& e, int r, uint64_t seq, const std::string& why);
// The root, at the start of operation `seq`: admits every process whose join request waits in a
// free slot's mailbox (sparrowCommJoin), tells it where everyone is and that `seq` is its first
// operation, and lists it for a full snapshot in every buffer set; then publishes the slots still
// free. Returns the ranks admitted.
std::vector<int> admit_joiners(Engine& e, uint64_t seq);
// The same ahead of operation `seq`, by a caller that sends the joiners something first (a model's
// agreement): operation `seq` then admits no others, and counts these as its joiners (those among
// its participants).
std::vector<int> admit_ahead(Engine& e, uint64_t seq);
// Another sender of the same step (a model's other source) takes a joiner the root admitted ahead of
// operation `seq` and told it about (`p`: where it is now): its place, its listing in this rank's
// headers, a full snapshot of every buffer set this rank sends, and the joiners of `seq`.
void take_joiner(Engine& e, const Place& p, uint64_t seq);
// The root tells the store which slots are free now (for joiners that do not name one).
void publish_free_slots(Engine& e);
// A receiver applies an elastic header's membership: rejoined ranks' new places, drops.
void apply_membership(Engine& e, const OpHeader& h);
// A rank takes the root's list of members (`live`) as its own and closes its connections to the
// ranks it drops.
void adopt_members(Engine& e, const std::vector<int32_t>& live);
// sparrowCommJoin's second half, on the joiner: its request to rank 0 and rank 0's welcome.
Status join(Engine& e);
// This operation's acknowledgements from `expect` (members), serving re-attach requests from `parts`
// (their send requests appended to `reqs`). `acked`: the members that acknowledged (the others were
// dropped). Returns the first failure a member reported that the next operation does not repair (a
// mismatch of arguments).
Status collect_acks(Engine& e, const OpWire& w, const BufferKey& key, std::vector<int> expect, const Parts& parts,
                    std::vector<int>* acked, std::vector<transport::SendRequestPtr>* reqs);
// The root's end of an elastic operation over `members`: every member's acknowledgement (or its
// drop), re-attaches served meanwhile (`reqs`: their sends); with `verdict`, the verdict to those that
// acknowledged, and "you are out" to those dropped meanwhile that still run (a stalled one, resumed).
// Returns what collect_acks does.
Status finish_elastic(Engine& e, const OpWire& w, const BufferKey& key, const std::vector<int>& members,
                      const Parts& parts, bool verdict, std::vector<transport::SendRequestPtr>* reqs);
// How long an elastic rank waits for a part from a parent that is not the root before it re-attaches:
// a share of half the lease growing with its depth in `t`, so that when a relay stalls, its child
// re-attaches (and forwards again) before the grandchildren's patience runs out, and every re-attach
// happens well within the root's lease for the re-attaching rank.
double reattach_patience(const topology::Tree& t, int me, double lease_s);

// Sparse operations: should `me`'s parent fail, the rank it asks to adopt it before the root: the
// nearest rank above the parent in `me`'s region, not the root (-1: none). It holds the parts (it
// forwarded them to the parent) and is a hop inside the region instead of across the WAN.
int adopter_for(const topology::Tree& t, int me);
// The ranks for which `me` is adopter_for (they may ask it to adopt them).
std::vector<int> adoptable_by(const topology::Tree& t, int me);
namespace elastic {
// The failover of a relay in operation `w` (collectives/failover.h): re-attaching to `root`, which
// is awaited at most `lease_s` per part and any other parent `patience_s` (reattach_patience);
// `adopter` (-1: none) is asked first when the parent fails, before the root: a rank of this rank's
// region above the parent, which holds the parts (adopter_for). It answers at once if it is still
// receiving the operation; otherwise this rank re-attaches to the root after a short wait.
std::unique_ptr<Failover> failover(const OpWire& w, int root, double lease_s, double patience_s, int adopter = -1);
}  // namespace elastic
// An elastic receiver's heartbeats to the root while it is inside an operation: every quarter
// lease, from a thread of its own, whatever the operation is waiting for (a parent that is slow to
// fill the pipeline, the root's shared uplink), so that the root drops a member that stopped or
// died, not one whose operation is long (1 GiB over a WAN link takes tens of seconds).
class Heartbeat {
 public:
  Heartbeat(const OpWire& w, int root, double lease_s);
  ~Heartbeat() { stop(); }
  // No more heartbeats (before the acknowledgement: the root stops listening for them then, and a
  // late one would only sit in its mailbox).
  void stop();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread t_;
};

// A receiver that will take part in operation `w.seq` of root `root` after others it takes part in
// first (a model's split step) tells that root it is alive from now on, not only from the operation's
// start: the root's lease on it runs from its own stream, which may be long before the receiver
// reaches its operation. The operation's start takes these heartbeats over; stop_beats_ahead() ends
// those of operations never reached (a step that ended early). Calling it again for the same
// operation keeps the heartbeats already running.
void beat_ahead(Engine& e, const OpWire& w, int root);
void stop_beats_ahead(Engine& e);
// Operation w.seq's heartbeats to `root`: those beat_ahead() started, or new ones.
std::unique_ptr<Heartbeat> heartbeats_for(Engine& e, const OpWire& w, int root);

// The root's header of an elastic operation names the live members and where rejoined ones are now.
void stamp_elastic(const Engine& e, OpHeader& h, const std::vector<int>& members);

// A receiver's first step in an elastic operation: the header, straight from the root. Applies its
// membership; kPeerLost (and `*dropped`) when it says this rank is out.
Result<ReceivedHeader> elastic_header(Engine& e, const OpWire& w, int root, bool* dropped);

}  // namespace sparrow::coll
