// SPDX-License-Identifier: Apache-2.0
// Ranks that name different roots for one operation (a caller's mistake) build different trees, and
// each would wait for a parent that never sends, until its timeout. These waits watch for the signs
// of it instead, so that every rank fails within seconds with kInvalidUsage naming the ranks
// and the roots they named:
//   - a receiver waiting for its header looks at the other peers (every kLookEvery) for a header of
//     the same operation (a rank that named another root sent it one) and for claims (a rank that
//     named this rank as its root); after kClaimAfter without its header it sends the root it named
//     a claim (kClaimSub), which such a rank, itself waiting for a header, finds;
//   - a root waiting for acknowledgements looks for a header of its own operation (a rank that named
//     another root, itself or a third rank, sent it one).
// The rank that finds the disagreement tells every other rank (a notice, kNoticeSub, carrying its
// message), which each of these waits also looks for, so that no rank waits out its timeout.
#pragma once

#include <vector>

#include "collectives/protocol.h"

namespace sparrow::coll {

// A receiver's header of operation w.seq from `from` (its parent; elastic: the root) by `d`, this
// rank having named `root`. A disagreement is kInvalidUsage; so is a notice from a rank that found
// it first.
Result<std::vector<uint8_t>> recv_header(const OpWire& w, int from, int root, transport::Deadline d);

// The root's wait for `rank`'s acknowledgement of operation w.seq by `d` (a deadline passed already:
// one look), watching for a header of that operation from any peer.
Result<std::vector<uint8_t>> recv_ack(const OpWire& w, int rank, transport::Deadline d);

// A root's one look for a header of its operation w.seq from any peer, or a notice: kInvalidUsage
// (every rank told) if one came, else Ok.
Status check_no_other_root(const OpWire& w);

}  // namespace sparrow::coll
