// A staged receive (sparrowSparseBcastStage): the sink's receive() runs on `worker` while the caller
// keeps generating on the old version; commit() runs on the caller's thread at sparrowStageCommit.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "collectives/sparse/sink.h"

namespace sparrow::coll {

struct StagedOp {
  SparseOp op;
  std::unique_ptr<SparseSink> rx;
  std::thread worker;
  std::atomic<bool> done{false};
  Status received;  // receive()'s result, written before `done`
  ~StagedOp() {
    if (worker.joinable()) worker.join();
  }
};

}  // namespace sparrow::coll
