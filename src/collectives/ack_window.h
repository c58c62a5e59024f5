// The acknowledgements a root still expects. Receivers acknowledge every operation; the root does not
// wait for them on its call path (its call returns once the data is handed to the transport). It
// posts each operation's ranks here and drains what has arrived at its next call; only while more
// than `window` operations are outstanding does it wait, for the oldest, and then all missing
// acknowledgements together cost one deadline, never one each. Dense broadcasts and the first sparse
// operation on a buffer set wait for theirs at once (agree), so that a mismatched call fails
// everywhere. Used by one thread at a time (the root's calls).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "collectives/protocol.h"

namespace sparrow::coll {

using BufferKey = std::vector<const void*>;  // the buffer(s) of an operation on this rank

class AckWindow {
 public:
  static constexpr size_t kDefaultWindow = 4;
  // Called for every acknowledgement that asks for a resync: (the operation's buffers, rank, the
  // version it holds).
  using ResyncFn = std::function<void(const BufferKey&, int rank, uint64_t holds)>;

  explicit AckWindow(ResyncFn on_resync = {}) : on_resync_(std::move(on_resync)) {}
  void post(uint64_t seq, BufferKey key, std::vector<int> ranks);
  // Takes every acknowledgement that has arrived; while more than `window` operations are
  // outstanding, waits (until `deadline`) for the oldest. Returns the first failure reported or met.
  // `me`: this rank; a lower rank that has not connected yet has not acknowledged either, so a
  // non-blocking drain does not ask its (not yet existing) channel.
  Status drain(const OpWire& w, int me, size_t window);
  // Waits (until `deadline`) for every acknowledgement of the earlier operations on buffers `key`
  // (whose resyncs the operation now running must carry) and takes whatever else has arrived:
  // operations on other buffers (a model's other operations of the same step) are not waited for.
  Status drain_for(const OpWire& w, int me, const BufferKey& key);
  // Waits for `ranks`' acknowledgements of w.seq (not posted); the first failure among them.
  Status agree(const OpWire& w, const std::vector<int>& ranks);
  size_t outstanding() const { return pending_.size(); }
  // The oldest operation still expecting acknowledgements (`otherwise` when none does).
  uint64_t oldest(uint64_t otherwise) const { return pending_.empty() ? otherwise : pending_.front().seq; }
  // A root's mailbox cleanup at the start of its operation `seq`, after its drain: the claims of
  // receivers that waited for it and the notices of disagreements (root_watch.h) in operations
  // before the oldest still drained go.
  void forget_before(const OpWire& w, uint64_t seq) const;
  // Ranks of operation `seq` still expected (empty when it was fully acknowledged or never posted).
  std::vector<int> missing(uint64_t seq) const;
  // One acknowledgement: its failure as the root sees it (Ok for a rank that is resynced next time).
  Status take(const std::vector<uint8_t>& bytes, int rank, uint64_t seq, const BufferKey& key);

 private:
  struct Pending {
    uint64_t seq;
    BufferKey key;
    std::vector<int> ranks;
  };
  // Drains one operation's ranks; true when none is left.
  bool drain_one(const OpWire& w, int me, Pending& p, bool block, Status* first);

  ResyncFn on_resync_;
  std::deque<Pending> pending_;
};

}  // namespace sparrow::coll
