// SPDX-License-Identifier: Apache-2.0
// What a sparrowComm_t is (the communicator and the collectives' state on it), the registry of live
// handles every call checks, and how a failure becomes a result code: shared by the C entry points
// (api.cpp, model_api.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>

#include "collectives/state.h"
#include "comm/comm.h"
#include "core/status.h"
#include "sparrow/sparrow.h"

struct sparrowComm {
  std::unique_ptr<sparrow::Comm> impl;
  std::unique_ptr<sparrow::coll::Engine> coll;  // the collectives' state on impl (destroyed first)
  // Calls running on this communicator: sparrowCommAbort (from another thread) aborts, waits for
  // them to return (every wait fails once aborted), and only then frees.
  std::atomic<int> in_use{0};
  std::mutex idle_mu;
  std::condition_variable idle_cv;  // notified when in_use drops to 0
};

namespace sparrow::api {

// The handles sparrowCommInitRank made and that were not destroyed or aborted since: every call checks
// its handle here, so a destroyed, aborted or foreign one is refused (kInvalidUsage), not dereferenced.
extern std::mutex g_live_mu;
extern std::set<const sparrowComm*> g_live;

// A live handle, held for the duration of a call (sparrowCommAbort waits for the calls that hold it).
class Pin {
 public:
  explicit Pin(sparrowComm* comm);
  ~Pin();
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  explicit operator bool() const { return c_ != nullptr; }

 private:
  sparrowComm* c_ = nullptr;
};

// Waits (up to SPARROW_TIMEOUT_S) until no call holds the handle. False: one still does; the caller
// must not free it then (better a leak than a use after free).
bool wait_idle(sparrowComm* c, const char* fn);
// Takes the handle out of the live set; false if it was not in it.
bool retire(sparrowComm* comm);
Status dead_handle(const char* fn, const void* comm);

// The message of the last failed call on this thread, and whether failures are echoed (WARN).
extern thread_local std::string t_last_error;
extern std::atomic<bool> g_echo_errors;  // sparrowSetErrorEcho
// Records `s` (on the communicator too, when it is live) and returns its code.
sparrowResult_t fail(const Status& s, sparrowComm* comm = nullptr);
sparrowResult_t invalid(const char* msg);

// Runs `f` (returning a Status): an allocation failure inside is kSystemError, any other exception
// kInternalError, never an exception through the C ABI (which would end the user's process).
template <class F>
Status no_throw(const char* what, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Status(Code::kSystemError, std::string(what) + ": out of memory (the process's memory limit was reached)");
  } catch (const std::exception& e) {
    return Status(Code::kInternalError, std::string(what) + ": " + e.what());
  }
}

}  // namespace sparrow::api
