#include "collectives/op.h"

#include <chrono>

#include "core/clock.h"
#include "core/log.h"

namespace sparrow::coll {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kHeader: return "header";
    case Phase::kStream: return "stream";
    case Phase::kResync: return "resync";
    case Phase::kAccept: return "accept";
    case Phase::kAck: return "ack";
    case Phase::kVerdict: return "verdict";
    case Phase::kFlush: return "flush";
    case Phase::kCommit: return "commit";
    case Phase::kDone: return "done";
  }
  return "?";
}

OpState::OpState(uint64_t seq, const char* role) : seq_(seq), role_(role), since_(now_s()) {}

void OpState::advance(Phase next) {
  const double t = now_s();
  SPARROW_TRACE("operation %llu (%s): %s -> %s after %.3f ms", (unsigned long long)seq_, role_, phase_name(phase_),
                phase_name(next), (t - since_) * 1e3);
  phase_ = next;
  reached_ |= 1u << unsigned(next);
  since_ = t;
}

std::string OpState::where() const {
  std::string s = std::string("in phase ") + phase_name(phase_) + " of operation " + std::to_string(seq_);
  if (phase_ == Phase::kStream)
    s += ", " + std::to_string(received_) + " part(s) received, " + std::to_string(verified_) + " verified";
  return s;
}

}  // namespace sparrow::coll
