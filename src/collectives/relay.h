// Moving one operation's frames down the tree: a non-root rank's side (one sender's children are
// a Fanout, fanout.h).
//
// Relay: a rank that is not the root. Every frame is received from the parent and forwarded to the
// children at once (cut-through), before this rank itself looks at it, so a relay's own checks and
// decoding never delay its subtree. When the parent fails (lost, silent past the deadline), the relay
// passes the failure down at once as an abort frame in place of the part the children wait for, so
// the whole subtree returns within a few round trips instead of each rank waiting out its timeout;
// an abort from above is forwarded like any frame. Where the membership allows it (an elastic
// communicator), the relay's failover (failover.h) replaces a failed parent instead: the subtree is
// told to hold on while this rank takes the rest from a rank of its region above the parent that
// still holds the parts (adoption) or else from the root, so that only it re-attaches. Each
// frame is addressed by (seq, sub) and checked on its own downstream, which is what lets a child
// later take the rest from another source.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/failover.h"
#include "collectives/fanout.h"
#include "collectives/protocol.h"

namespace sparrow::coll {

class Relay {
 public:
  Relay(const OpWire& w, int parent, std::vector<int> children)
      : w_(w), parent_(parent), failover_(no_failover(w)), out_(w, std::move(children)) {}
  // Before the first part: this rank's place in the tree the header named (an elastic header names
  // the members), what replaces a failed parent (failover.h; none by default), and `adoptable`: the
  // ranks that may ask this rank to adopt them (their parent failed). It serves them from the parts
  // it kept (sparse frames; dense segments where they landed) while it waits for its own: in next()
  // between polls, in next_into() from a thread of its own, since a receive into caller memory
  // cannot be interrupted.
  void attach(int parent, std::vector<int> children, std::unique_ptr<Failover> failover,
              std::vector<int> adoptable = {});
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
  // after its call returned (the sink hands the relay to Engine::elastic.lingering).
  void keep_serving() { start_server(); }
  ~Relay();

  int parent() const { return parent_; }
  std::vector<int> children() const { return out_.children(); }
  // Ranks may still ask this rank to adopt them (any thread): the elastic sink lets the relay go on
  // serving them after its call returned (Engine::elastic.lingering).
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
  // from whoever the parent is now): a held parent is waited for again; a failed one is replaced
  // while the failover names another (failover.h), and the receive tried again from it.
  template <class Get>
  auto with_failover(uint32_t sub, Get get) -> decltype(get());
  // How long the next part may take (the failover says).
  transport::Deadline part_deadline();
  Upstream upstream() { return Upstream{parent_, got_part_, out_}; }
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
  std::unique_ptr<Failover> failover_;  // what replaces a failed parent (attach())
  bool got_part_ = false;  // a payload part arrived (before: the pipeline is still filling)
  mutable std::mutex serve_mu_;  // adoptable_, kept_ and forwarding, between the receive and the server
  std::vector<int> adoptable_;  // ranks that may ask this rank to adopt them
  std::vector<std::pair<uint32_t, transport::Payload>> kept_;  // the parts received, for them
  std::thread server_;
  std::atomic<bool> stop_server_{false};
  Fanout out_;
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace sparrow::coll
