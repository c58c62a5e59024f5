// The phases of one collective operation on one rank, explicit, so that where an operation stands
// is data rather than a position in the code: what a failure message names, what a trace shows
// (one line per transition, with the time spent in the phase), and what a later resume (a re-attach
// to another parent) would start from: the last part received and the last one verified.
//
//   root:     header -> stream -> resync -> ack -> verdict -> done
//   receiver: header -> stream -> accept -> ack -> verdict -> flush -> done, then commit (which a
//             staged step runs later, on the caller's thread)
// (verdict only for operations whose arguments must agree; any phase may end the operation early.)
#pragma once

#include <cstdint>
#include <string>

namespace sparrow::coll {

enum class Phase : uint8_t { kHeader, kStream, kResync, kAccept, kAck, kVerdict, kFlush, kCommit, kDone };
const char* phase_name(Phase p);

class OpState {
 public:
  OpState(uint64_t seq, const char* role);
  uint64_t seq() const { return seq_; }
  Phase phase() const { return phase_; }
  // Moves to `next` (TRACE: "operation 7 (receiver): stream -> accept after 12.3 ms").
  void advance(Phase next);
  // Whether the operation has been in phase `p` (or is in it now).
  bool reached(Phase p) const { return reached_ & (1u << unsigned(p)); }
  // Progress inside the stream phase.
  void received(uint32_t parts) { received_ = parts; }
  void verified(uint32_t parts) { verified_ = parts; }
  uint32_t parts_received() const { return received_; }
  uint32_t parts_verified() const { return verified_; }
  // "in phase stream of operation 7, 12 part(s) received, 11 verified" (failure messages).
  std::string where() const;

 private:
  uint64_t seq_;
  const char* role_;
  Phase phase_ = Phase::kHeader;
  uint32_t reached_ = 1u << unsigned(Phase::kHeader);
  double since_;
  uint32_t received_ = 0, verified_ = 0;
};

}  // namespace sparrow::coll
