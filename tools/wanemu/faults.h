// Fault injection for the namespace emulator (docs/wanemu.md, "Faults"): the scenario's scheduled
// [[fault]] tables, and faults sent while a run goes on with `wanemu fault KIND TARGET ...` through
// a control socket (its path is WANEMU_CONTROL in every command the run starts).
//
// Process faults act on the processes inside a host's namespace that this run started (found by
// namespace and ancestry, never by name); network faults are cuts in the router (Emulator::cut).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "tools/wanemu/emulator.h"
#include "tools/wanemu/scenario.h"

namespace sparrow::wanemu {

// Every process's parent, from /proc/PID/stat.
std::map<pid_t, pid_t> process_parents();

// The processes of `host` that descend from this process (not the namespace's holder); with
// `leaves`, only those without children.
std::vector<pid_t> host_processes(const Emulator& e, int host, bool leaves);

class FaultControl {
 public:
  // Listens on a fresh unix socket and runs the scenario's scheduled faults from now on.
  static Result<std::unique_ptr<FaultControl>> start(Emulator& e);
  ~FaultControl();  // stops the schedule, resumes what it stopped, removes the socket
  const std::string& path() const { return path_; }
  // Applies one fault now; returns what it did (for the log and the client's answer).
  Result<std::string> apply(const Fault& f);

 private:
  explicit FaultControl(Emulator& e) : e_(e) {}
  void serve();
  void answer(int client);
  void resume_due(bool all);
  Emulator& e_;
  std::string path_;
  int listen_fd_ = -1, wake_[2] = {-1, -1};
  std::thread thread_;
  std::mutex mu_;
  struct Resume {
    int64_t at_ns;
    std::vector<pid_t> pids;
  };
  std::vector<Resume> resumes_;  // stopped processes and when they go on
  int64_t started_ns_ = 0;
  bool stop_ = false;
};

// `wanemu fault [--control PATH] KIND TARGET [PEER] [--for S] [--leaves]`: sends one fault to the
// running emulator and prints its answer; 0 when it was applied.
int fault_client(int argc, char** argv);

}  // namespace sparrow::wanemu
