// SPDX-License-Identifier: Apache-2.0
// What a relay does when its parent fails: the seam between the relay (relay.h), which moves frames,
// and the membership that decides where a rank turns instead. On a fixed communicator nothing
// replaces a parent (no_failover): a part is awaited until the operation's deadline and a failure is
// passed down the subtree. An elastic communicator's failover (collectives/elastic/elastic.h) bounds
// each wait by a patience, takes holds from a parent that is re-attaching itself, and replaces a
// failed parent by a rank of its region above it, then by the root.
#pragma once

#include <cstdint>
#include <memory>

#include "collectives/fanout.h"
#include "collectives/protocol.h"

namespace sparrow::coll {

// The relay's link up the tree as its failover sees it.
struct Upstream {
  int parent;
  bool got_part;      // a payload part came already (before: the pipeline is still filling)
  Fanout& children;   // the subtree, told to hold on while this rank finds another parent
};

class Failover {
 public:
  virtual ~Failover() = default;
  // How long the next part may take.
  virtual transport::Deadline part_deadline(const Upstream& up) const = 0;
  // Waiting for a part failed with `why`: true when the parent asked for more patience (the wait is
  // tried again).
  virtual bool held(const Upstream& up, const Status& why) = 0;
  // A part came from the parent.
  virtual void part_came(const Upstream& up) = 0;
  // The parent failed for good while part `sub` was awaited (`why`): the rank to take the rest from
  // now, which has agreed or been asked to send it; -1 when there is none and the failure stands.
  virtual int replace(const Upstream& up, uint32_t sub, const Status& why) = 0;
  // How long a brief connection to a rank this relay may adopt may take (seconds).
  virtual double brief_s() const = 0;
};

// A fixed communicator's: parts awaited until `w`'s deadline, nobody replaces a parent.
std::unique_ptr<Failover> no_failover(const OpWire& w);

}  // namespace sparrow::coll
