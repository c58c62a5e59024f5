// Verification and decoding of a receiver's sparse stream, off the thread that receives and forwards
// it: a pool of worker threads per communicator (SPARROW_THREADS or every core, up to 8; started at
// the first sparse operation), fed frame by frame in arrival order; chunks decode in parallel. The
// header is checked on the pushing thread before any chunk is queued. Operations on a communicator
// do not overlap, so one pool serves them in turn.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/protocol.h"
#include "kernels/cpu/delta.h"

namespace sparrow::coll {

class DecodeWorker {
 public:
  DecodeWorker() = default;
  DecodeWorker(const DecodeWorker&) = delete;
  DecodeWorker& operator=(const DecodeWorker&) = delete;
  ~DecodeWorker();

  // One operation's decoding: the first frame pushed is the checkpoint header (ApplySession::begin),
  // the others its chunks (add_chunk). A null session takes frames and ignores them.
  class Job {
   public:
    void push(Frame f);
    // Waits for everything pushed; the first failure (a chunk's, with "from rank <parent>").
    Status join();
    uint32_t verified() const;  // frames checked and decoded so far
    ~Job() { (void)join(); }

   private:
    friend class DecodeWorker;
    DecodeWorker* w_ = nullptr;
    kernels::cpu::ApplySession* sess_ = nullptr;
    int parent_ = -1;
    bool begun_ = false;  // the header went through ApplySession::begin (the pushing thread's only)
    // Guarded by the worker's mutex.
    uint32_t queued_ = 0, done_ = 0;
    Status status_;
  };
  std::unique_ptr<Job> start(kernels::cpu::ApplySession* sess, int parent);

 private:
  void run();
  void decode(Job& j, const Frame& f);
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::pair<Job*, Frame>> q_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace sparrow::coll
