// SPDX-License-Identifier: Apache-2.0
#include "api/handle.h"

#include <chrono>

#include "core/log.h"
#include "transport/transport.h"

namespace sparrow::api {

std::mutex g_live_mu;
std::set<const sparrowComm*> g_live;
thread_local std::string t_last_error;
std::atomic<bool> g_echo_errors{true};

Pin::Pin(sparrowComm* comm) {
  std::lock_guard<std::mutex> lk(g_live_mu);
  if (comm && g_live.count(comm)) {
    c_ = comm;
    c_->in_use.fetch_add(1);
  }
}

Pin::~Pin() {
  if (c_ && c_->in_use.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lk(c_->idle_mu);
    c_->idle_cv.notify_all();
  }
}

bool wait_idle(sparrowComm* c, const char* fn) {
  std::unique_lock<std::mutex> lk(c->idle_mu);
  if (c->idle_cv.wait_for(lk, std::chrono::duration<double>(transport::timeout_seconds()),
                          [&] { return c->in_use.load() == 0; }))
    return true;
  SPARROW_WARN("%s: a call on this communicator from another thread did not return within SPARROW_TIMEOUT_S; "
               "its memory is left allocated", fn);
  return false;
}

bool retire(sparrowComm* comm) {
  std::lock_guard<std::mutex> lk(g_live_mu);
  return g_live.erase(comm) > 0;
}

Status dead_handle(const char* fn, const void* comm) {
  return Error(Code::kInvalidUsage, std::string(fn) + (comm ? ": the communicator was destroyed or aborted (or is "
                                                              "not one sparrowCommInitRank made)"
                                                            : ": comm is NULL"));
}

sparrowResult_t fail(const Status& s, sparrowComm* comm) {
  t_last_error = s.to_string();
  Pin live(comm);  // a dead handle gets no record (it is not touched)
  if (live) comm->impl->set_error(s);
  if (g_echo_errors.load(std::memory_order_relaxed)) SPARROW_WARN("%s", t_last_error.c_str());
  return static_cast<sparrowResult_t>(s.code());
}

sparrowResult_t invalid(const char* msg) { return fail(InvalidArgument(msg)); }

}  // namespace sparrow::api
