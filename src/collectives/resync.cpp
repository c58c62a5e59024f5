// SPDX-License-Identifier: Apache-2.0
#include "collectives/resync.h"

#include "core/log.h"

namespace sparrow::coll {

Ack ack_for(const Status& result, bool resyncing, bool behind, uint64_t version) {
  if (result.ok()) return Ack{result, false, 0};
  if (resyncing) return Ack{result, true, 0};  // the resync itself failed: a full snapshot next time
  if (result.code() == Code::kInvalidUsage) return Ack{result, false, 0};  // a mismatch: nothing to repair
  // Refused (kVersionMismatch): behind, the deltas it missed will do; written to, only a snapshot.
  if (result.code() == Code::kVersionMismatch) return Ack{result, true, behind ? version : 0};
  // It failed here (a timeout, a lost parent, corrupt data) and holds its last version, untouched:
  // the next operation brings it the deltas it missed.
  return Ack{result, true, version};
}

Status read_ack(const Ack& a, int rank, uint64_t seq) {
  if (a.status.ok() || a.status.code() == Code::kVersionMismatch) return Status::Ok();  // resynced next time
  if (a.resync) {  // it failed there and is brought up to date next time
    SPARROW_WARN("rank %d failed operation %llu (%s); it holds version %llu and is resynchronised at the next one",
                 rank, (unsigned long long)seq, a.status.message().c_str(), (unsigned long long)a.holds);
    return Status::Ok();
  }
  return Status(a.status.code(), "rank " + std::to_string(rank) + " failed operation " + std::to_string(seq) + ": " +
                                     a.status.message());
}

}  // namespace sparrow::coll
