// SPDX-License-Identifier: Apache-2.0
// Fanout: one sender's children. Every frame goes to each child still live; a child whose send fails
// (it died, its connection broke) is dropped for the rest of the operation with an INFO line, and the
// others go on: one lost child does not cost its siblings the step. Its own missing acknowledgement
// reports it to the root.
#pragma once

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "collectives/protocol.h"

namespace sparrow::coll {

// An operation's parts by sub, as the root streamed them (a sparse operation's frames, kept alive by
// the payloads; a dense one's segments, borrowed from the caller's buffers): what a rank that
// re-attaches mid-stream is served from.
using Parts = std::map<uint32_t, transport::Payload>;

class Fanout {
 public:
  // `track`: keep the send requests for finish() (a relay's forwarding; the payloads stay alive until
  // then). Untracked (the root's stream), a payload is freed as soon as the transport is done with it.
  Fanout(const OpWire& w, std::vector<int> children, bool track = true)
      : w_(w), kids_(std::move(children)), track_(track), live_(kids_) {}
  // To every live child (any thread). The payload is kept alive by the requests.
  void send(uint32_t sub, const Frame& m);
  // Caller memory (dense segments): must stay valid until finish().
  void send_borrowed(uint32_t sub, const uint8_t* p, size_t n);
  // Waits until everything sent was handed to the transport (a sender's forwarding is part of its
  // call: the caller may destroy the communicator next). A child that failed meanwhile is dropped
  // and logged, not returned: it is that child's failure, not this rank's.
  void finish();
  // (A copy: a rank adopted meanwhile is added from another thread.)
  std::vector<int> children() const;
  std::vector<int> lost() const;
  // Before anything was sent: the children (an elastic receiver learns them from the header).
  void set_children(std::vector<int> children);
  // A child taken on mid-operation (an orphan this rank adopts): `backlog` (the parts it missed,
  // whose memory the payloads keep) goes to it first, then every later part as to the others.
  void adopt(int kid, const std::vector<std::pair<uint32_t, transport::Payload>>& backlog);
  // Establishes the connection to every child by `d` (elastic: a member that cannot be reached within
  // the lease does not hold up its siblings for the whole timeout); a child that fails is dropped.
  void preconnect(transport::Deadline d);

 private:
  void drop(int kid, const Status& why);
  // How many streams each of `children` children sent to at once gets (0: all of them).
  size_t streams_per_child(size_t children) const;
  // To every live child; `keep`: hold the request for finish().
  void send_payload(uint32_t sub, const transport::Payload& p, bool keep);
  OpWire w_;
  std::vector<int> kids_;
  bool track_;
  mutable std::mutex mu_;
  std::vector<int> live_, lost_;
  std::vector<std::pair<int, transport::SendRequestPtr>> reqs_;
};

}  // namespace sparrow::coll
