// The WAN emulator proper: network namespaces with a TUN device each, and one router thread that
// moves IP packets between them through the scenario's link model (access-link token buckets with
// tail-drop queues, per region-pair delay, jitter without reordering, Bernoulli and Gilbert-Elliott
// loss). Real kernel TCP runs end to end inside the namespaces.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "tools/wanemu/scenario.h"

namespace sparrow::wanemu {

int64_t now_ns();  // CLOCK_MONOTONIC, the clock of the link model and of the faults' schedule

struct HostRuntime {
  std::string ifname, addr;  // TUN name, 10.77.x.y
  pid_t holder = -1;         // keeps the namespace alive (dies with us: PR_SET_PDEATHSIG)
  int nsfd = -1, tunfd = -1;
};

struct Counters {
  uint64_t packets = 0, bytes = 0, queue_drops = 0, loss_drops = 0, fault_drops = 0;
  // Packets the host's kernel dropped at its TUN device before the router read them: loss the
  // scenario does not have, from an emulator that fell behind (not the link model's doing).
  uint64_t emu_drops = 0;
};

class Emulator {
 public:
  ~Emulator();
  // Creates namespaces and TUN devices and starts the router. Needs root and /dev/net/tun.
  static Result<std::unique_ptr<Emulator>> start(const Scenario& s);
  const Scenario& scenario() const { return s_; }
  const std::vector<HostRuntime>& hosts() const { return rt_; }
  // Runs argv inside host i's namespace (fork + setns + exec), with the WANEMU_* environment.
  Result<pid_t> spawn(int host, const std::vector<std::string>& argv, bool quiet = false) const;
  std::vector<Counters> counters() const;
  // A network fault: packets from a host in `a` to one in `b` or back that enter the emulator before
  // `until_ns` (CLOCK_MONOTONIC) are dropped, or with `hold` kept until then and delivered after.
  void cut(std::vector<int> a, std::vector<int> b, int64_t until_ns, bool hold);
  // The inode of host i's network namespace (to find the processes inside it).
  uint64_t netns_inode(int host) const;
  void stop();
  // Whether the router thread runs at a real-time priority (so ranks busy on every core cannot
  // hold it off the CPU; when it is held off, packets queue or drop before the link model).
  bool realtime() const { return realtime_; }

 private:
  Emulator() = default;
  void route();
  void arm_timer();
  void admit(int src, const uint8_t* pkt, size_t len);
  void deliver_due();
  Scenario s_;
  std::vector<HostRuntime> rt_;
  std::thread router_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> realtime_{false};
  int timer_fd_ = -1, ep_ = -1;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// execvp(argv) in a child process that is about to become the command; on failure prints why and
// exits 127 (never returns).
[[noreturn]] void exec_or_exit(const std::vector<std::string>& argv, const char* who);

// Root + TUN available?
bool can_emulate(std::string* why);
// Enters host `rank`'s namespace from the environment set by `wanemu run --launcher` and execs argv.
int enter_and_exec(const std::vector<std::string>& argv);

}  // namespace sparrow::wanemu
