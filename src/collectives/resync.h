// SPDX-License-Identifier: Apache-2.0
// The resync policy, both ends of it in one place. A receiver acknowledges every operation with what
// it asks for next time: nothing, the deltas it missed (it holds an older version, untouched), or a
// full snapshot (its buffers were written to, or a resync itself failed). The root reads the same
// acknowledgement: a failure the next operation repairs is no failure of the root's call (the rank
// is resynchronised then); any other (a mismatch of arguments) is.
#pragma once

#include <cstdint>

#include "collectives/protocol.h"

namespace sparrow::coll {

// A receiver's acknowledgement of an operation that ended with `result` on it. `resyncing`: the
// operation was its resync; `behind`: a refused step found its buffers at an older version of the
// root's, untouched (not written to); `version`: what they hold.
Ack ack_for(const Status& result, bool resyncing, bool behind, uint64_t version);
// The root's reading of rank `rank`'s acknowledgement of operation `seq`: Ok when the rank succeeded
// or is resynchronised at the next operation (it asked), else its failure, naming it.
Status read_ack(const Ack& a, int rank, uint64_t seq);

}  // namespace sparrow::coll
