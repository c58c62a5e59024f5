// The elastic parts of a sparse operation (sparrowConfig_t.elastic).
//
// Root: the op header goes straight to every rank (it lists the members, so each builds the same
// tree over them; a dropped rank still running learns it is out). After the stream the root waits
// for every member's acknowledgement, at most the lease after it last heard from that member, and
// meanwhile serves re-attach requests: a rank whose parent died or went silent gets the rest of the
// operation from the root, from the part it waited for on (the root keeps the operation's parts until
// its call returns). A member whose connection fails, or that stays silent past the lease, is dropped.
//
// Receiver: Relay re-attaches (relay.h); the header comes from the root.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/fanout.h"
#include "collectives/state.h"

namespace sparrow::coll {

// The header to every other rank the root can still reach, each send bounded by the lease.
void send_header_to_all(Engine& e, const OpWire& w, const Frame& header);
// The root drops `r` from the members and closes its connections (a later process in that slot
// starts it afresh).
void drop_member(Engine& e, int r, uint64_t seq, const std::string& why);
// The root, at the start of operation `seq`: admits every process whose join request waits in a
// free slot's mailbox (sparrowCommJoin), tells it where everyone is and that `seq` is its first
// operation, and lists it for a full snapshot in every buffer set; then publishes the slots still
// free. Returns the ranks admitted.
std::vector<int> admit_joiners(Engine& e, uint64_t seq);
// The root tells the store which slots are free now (for joiners that do not name one).
void publish_free_slots(Engine& e);
// A receiver applies an elastic header's membership: rejoined ranks' new places, drops.
void apply_membership(Engine& e, const OpHeader& h);
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

// The root's header of an elastic operation names the live members and where rejoined ones are now.
void stamp_elastic(const Engine& e, OpHeader& h, const std::vector<int>& members);

// An operation's header as it came (a relay forwards the frame) and decoded.
struct ReceivedHeader {
  Frame frame;
  OpHeader h;
};

// A receiver's first step in an elastic operation: the header, straight from the root. Applies its
// membership; kPeerLost (and `*dropped`) when it says this rank is out.
Result<ReceivedHeader> elastic_header(Engine& e, const OpWire& w, int root, bool* dropped);

}  // namespace sparrow::coll
