// A staged receive (sparrowSparseBcastStage): the sinks' receive() runs on `worker`, one operation
// after the other, while the caller keeps generating on the old version; their commit() runs on the
// caller's thread at sparrowStageCommit, in the same order. Usually one operation; a model with
// several sources stages one per source (sparse_stage_parts).
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/sparse/sink.h"

namespace sparrow::coll {

struct StagedOp {
  std::vector<SparseOp> ops;
  std::vector<std::unique_ptr<SparseSink>> rx;  // one per operation
  std::vector<Status> received;  // each receive()'s result, written before `done`
  std::thread worker;
  std::atomic<bool> done{false};
  ~StagedOp() {
    if (worker.joinable()) worker.join();
  }
};

}  // namespace sparrow::coll
