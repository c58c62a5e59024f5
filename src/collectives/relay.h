// Moving one operation's frames down the tree: a non-root rank's side (one sender's children are
// a Fanout, fanout.h).
//
// Relay: a rank that is not the root. Every frame is received from the parent and forwarded to the
// children at once (cut-through), before this rank itself looks at it, so a relay's own checks and
// decoding never delay its subtree. When the parent fails (lost, silent past the deadline), the relay
// passes the failure down at once as an abort frame in place of the part the children wait for, so
// the whole subtree returns within a few round trips instead of each rank waiting out its timeout;
// an abort from above is forwarded like any frame. Elastic, a relay whose parent failed tells its
// subtree to hold on and takes the rest from a rank of its region above the parent that still holds
// the parts (adoption, attach_elastic) or else from the root, so that only it re-attaches. Each
// frame is addressed by (seq, sub) and checked on its own downstream, which is what lets a child
// later take the rest from another source.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/fanout.h"
#include "collectives/protocol.h"

namespace sparrow::coll {

class Relay {
 public:
  Relay(const OpWire& w, int parent, std::vector<int> children) : w_(w), parent_(parent), out_(w, std::move(children)) {}
  // Elastic (before the first part): this rank's place in the tree the header named. A parent other
  // than the root that fails, or is silent for `patience_s` while a part is awaited, is replaced by the
  // root once: this rank asks it for the parts from the one it waits for on (elastic.h). The first
  // payload part, which waits for the pipeline to fill along every hop above (a whole dense segment
  // per hop), gets half a lease more. The root itself is awaited at most `lease_s` per part.
  // `adopter` (-1: none) is asked first when the parent fails, before the root: a rank of this
  // rank's region above the parent, which holds the parts (adopter_for, elastic.h). It answers at
  // once if it is still receiving the operation; otherwise this rank re-attaches to the root after a
  // short wait. `adoptable`: the ranks that may ask this rank to adopt them (adoptable_by); it serves
  // them from the parts it kept (sparse frames; dense segments where they landed) while it waits for
  // its own: in next() between polls, in next_into() from a thread of its own, since a receive into
  // caller memory cannot be interrupted.
  void attach_elastic(int parent, std::vector<int> children, int root, double lease_s, double patience_s,
                      int adopter = -1, std::vector<int> adoptable = {});
  // Connects to the children by `d`; also to the higher ranks this rank may adopt (a lower rank
  // connects: the request of a higher one could not reach it otherwise), briefly, failures ignored.
  void preconnect(transport::Deadline d);
  // Receives part `sub` from the parent and forwards it. An abort frame from above (forwarded too)
  // is returned as its failure; a failure to receive is passed down as an abort frame.
  Result<Frame> next(uint32_t sub);
  // next(0) for a fixed communicator's operation header, this rank having named `root`: while it
  // waits, it watches for ranks that named another root (root_watch.h), failing fast with
  // kInvalidUsage (passed down like any failure).
  Result<Frame> header(int root);
  // The same into caller memory (dense segments): received in place and forwarded from there, so
  // `dst` must stay valid until finish(). An abort frame (or a re-attach) works as in next(); a
  // failed segment may leave `dst` partly written.
  Status next_into(uint32_t sub, uint8_t* dst, size_t n);
  // Stops serving adoptions, then waits until everything was handed to the transport.
  void finish();
  // Waits until everything sent so far was handed to the transport, but goes on serving adoptions
  // from the parts this rank holds (next_into's segments stay where they landed) until finish(): a
  // rank that received its whole part is still the best source for an orphan of its region while it
  // waits for the verdict.
  void flush() { out_.finish(); }
  // After next()'s last part: serves adoptions from the kept frames on a thread of its own until
  // finish() or the operation's deadline, while this rank checks and acknowledges its step, and
  // after its call returned (the sink hands the relay to Engine::lingering).
  void keep_serving() { start_server(); }
  ~Relay();

  int parent() const { return parent_; }
  std::vector<int> children() const { return out_.children(); }
  // Ranks may still ask this rank to adopt them (any thread): the elastic sink lets the relay go on
  // serving them after its call returned (Engine::lingering).
  bool may_adopt() const;
  std::vector<int> lost_children() const { return out_.lost(); }
  const OpWire& wire() const { return w_; }
  // Payload bytes (parts 1..; not the op header) received from the parent so far (any thread).
  uint64_t bytes() const { return bytes_.load(); }

 private:
  // What receive() (or recv_header) gave for part `sub`: forwarded to the children, or its failure
  // passed down; an abort frame from above is returned as its status.
  Result<Frame> forward_received(uint32_t sub, Result<std::vector<uint8_t>> m);
  // The parent failed while this rank waited for part `sub`: the children get the reason instead.
  Status pass_down(uint32_t sub, Status why);
  // Part `sub` from the parent (elastic: from the root instead, when the parent failed).
  Result<std::vector<uint8_t>> receive(uint32_t sub);
  // The failover ladder around one receive of part `sub` (`get`: a Status or a Result, the receive
  // from whoever the parent is now): a held parent is waited for again; then (elastic) an adopter
  // from this rank's region, then the root, each asked once, and the receive tried again after it.
  template <class Get>
  auto with_failover(uint32_t sub, Get get) -> decltype(get());
  // How long part `sub` may take: the operation's deadline; elastic, also the lease (the root) or
  // this rank's patience (another parent).
  transport::Deadline part_deadline() const;
  // Elastic: the parent failed (`why`) while part `sub` was awaited; asks the root for the rest
  // from `sub` on, and tells the children to hold on (hold()). False when this rank does not
  // re-attach (not elastic, the root is its parent already, it re-attached once, or the request
  // could not go).
  bool reattach(uint32_t sub, const Status& why);
  // Elastic: this rank's patience with its parent ran out (`why` is a timeout) but the parent sent a
  // hold (it re-attached itself, or passes one down from above): the hold is taken, passed down,
  // and the part is awaited for another patience. Without it every rank below a stalled relay ran
  // out of patience in turn while the rank above it was still re-attaching, and each took the rest
  // of the step from the root, over the root's uplink once per rank instead of once.
  bool held(const Status& why);
  // Sends the next hold to every live child.
  void hold_children();
  // Elastic, the parent not the root: takes the parent's next hold if it came (no waiting).
  bool take_hold();
  // A part came: the holds that came before it are spent (they must not stretch a later wait).
  void skip_holds();
  // Elastic: the parent failed (`why`) while part `sub` was awaited; asks the adopter to take this
  // rank on from `sub`. True when it said yes (within adopt_wait_s()): it is the parent now.
  bool ask_adopter(uint32_t sub, const Status& why);
  double adopt_wait_s() const;
  // Part `sub` from the parent by `d`, meanwhile adopting the orphans that ask (when this rank may
  // have any).
  Result<std::vector<uint8_t>> recv_serving(uint32_t sub, transport::Deadline d);
  // Takes on every adoptable rank whose request came (no waiting).
  void serve_adoptions();
  // next_into(): the thread that serves adoptions while the receive blocks (started at the first
  // segment, stopped by finish()).
  void start_server();
  void stop_server();
  // After part `sub` arrived: to the children, and kept for orphans this rank may adopt.
  void forward(uint32_t sub, const transport::Payload& p, const Frame& owner);
  OpWire w_;
  int parent_;
  int root_ = -1;       // elastic: who to re-attach to (-1: not elastic)
  double lease_s_ = 0, patience_s_ = 0;
  bool reattached_ = false;
  uint32_t holds_taken_ = 0, holds_sent_ = 0;  // kHoldSub + k: from the parent, to the children
  bool got_part_ = false;  // a payload part arrived (before: the pipeline is still filling)
  int adopter_ = -1;       // elastic: asked first when the parent fails (-1: none, or asked)
  mutable std::mutex serve_mu_;  // adoptable_, kept_ and forwarding, between the receive and the server
  std::vector<int> adoptable_;  // ranks that may ask this rank to adopt them
  std::vector<std::pair<uint32_t, transport::Payload>> kept_;  // the parts received, for them
  std::thread server_;
  std::atomic<bool> stop_server_{false};
  Fanout out_;
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace sparrow::coll
