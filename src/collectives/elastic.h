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

#include <map>
#include <vector>

#include "collectives/state.h"

namespace sparrow::coll {

using Parts = std::map<uint32_t, Frame>;  // an operation's parts by sub, as the root streamed them

// The header to every other rank the root can still reach, each send bounded by the lease.
void send_header_to_all(Engine& e, const OpWire& w, const Frame& header);
// The root drops `r` from the members and closes its connections (a later process in that slot
// starts it afresh).
void drop_member(Engine& e, int r, uint64_t seq, const std::string& why);
// The root, at the start of operation `seq`: admits every process whose join request waits in a
// free slot's mailbox (sparrowCommJoin), tells it where everyone is and that `seq` is its first
// operation, and lists it for a full snapshot in every buffer set.
void admit_joiners(Engine& e, uint64_t seq);
// The root tells the store which slots are free now (for joiners that do not name one).
void publish_free_slots(Engine& e);
// A receiver applies an elastic header's membership: rejoined ranks' new places, drops.
void apply_membership(Engine& e, const OpHeader& h);
// sparrowCommJoin's second half, on the joiner: its request to rank 0 and rank 0's welcome.
Status join(Engine& e);
// This operation's acknowledgements from `expect` (members), serving re-attach requests from `parts`.
// `acked`: the members that acknowledged (the others were dropped). Returns the first failure a
// member reported that the next operation does not repair (a mismatch of arguments).
Status collect_acks(Engine& e, const OpWire& w, const BufferKey& key, std::vector<int> expect, const Parts& parts,
                    std::vector<int>* acked);

}  // namespace sparrow::coll
