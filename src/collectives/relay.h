// A rank that is not the root: every frame of an operation is received from the parent and forwarded
// to the children at once (cut-through), before this rank itself looks at it, so a relay's own
// checks and decoding never delay its subtree. Each frame is addressed by (seq, sub) and checked on
// its own downstream, which is what lets a child later take the rest from another source.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "collectives/protocol.h"

namespace sparrow::coll {

class Relay {
 public:
  Relay(const OpWire& w, int parent, std::vector<int> children)
      : w_(w), parent_(parent), kids_(std::move(children)) {}
  // Receives part `sub` from the parent and forwards it.
  Result<Frame> next(uint32_t sub);
  // The same into caller memory (dense segments): received in place and forwarded from there, so
  // `dst` must stay valid until finish().
  Status next_into(uint32_t sub, uint8_t* dst, size_t n);
  // Sends a frame of this rank's own to the children (e.g. the header a relay re-sends).
  Status forward(uint32_t sub, const Frame& m) { return w_.send(kids_, sub, m, &reqs_); }
  // Waits until everything forwarded was handed to the transport: a relay's forwarding is part of
  // its call, and the caller may destroy the communicator right after.
  Status finish();

  int parent() const { return parent_; }
  const std::vector<int>& children() const { return kids_; }
  const OpWire& wire() const { return w_; }
  // Payload bytes (parts 1..; not the op header) received from the parent so far (any thread).
  uint64_t bytes() const { return bytes_.load(); }
  uint32_t parts() const { return parts_.load(); }  // frames received so far

 private:
  OpWire w_;
  int parent_;
  std::vector<int> kids_;
  std::vector<transport::SendRequestPtr> reqs_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint32_t> parts_{0};
};

}  // namespace sparrow::coll
