// wanemu's unprivileged fallback: a loopback TCP proxy with the scenario's rates and delays.
//
// For users who are not root (no namespaces, no TUN). Each emulated host gets a loopback address
// 127.77.<region>.<host>; programs started by `wanemu run --proxy` carry libwanemu_preload.so, which
// sends their TCP connections to those addresses through this proxy. The proxy relays each byte
// stream through the link model: a shared token bucket per host uplink and downlink (serialisation
// at the link rate, a queue of queue_ms; a full queue stops reading the sender, so TCP back-pressure
// slows it) and a delay line per region pair.
//
// It does NOT reproduce TCP dynamics: each emulated connection is two loopback connections whose
// congestion windows never see the emulated delay or a loss, so window/RTT limits, slow start, loss
// recovery and the Mathis effect are absent; loss and jitter in the scenario are ignored. It shows
// rates and propagation delay only. Use the namespace/TUN emulator (root) for TCP behaviour.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "tools/wanemu/emulator.h"
#include "tools/wanemu/scenario.h"

namespace sparrow::wanemu {

class Proxy {
 public:
  ~Proxy();
  // Listens on 127.0.0.1 (port 0) and starts the relay thread. `preload`: path of libwanemu_preload.so.
  static Result<std::unique_ptr<Proxy>> start(const Scenario& s, const std::string& preload);
  const Scenario& scenario() const { return s_; }
  int port() const { return port_; }
  const std::string& addr(int host) const { return addrs_[host]; }
  // Runs argv as host i (fork + exec) with the WANEMU_* environment, SPARROW_SOCKET_ADDR and the preload.
  Result<pid_t> spawn(int host, const std::vector<std::string>& argv, bool quiet = false) const;
  // The environment a process needs to act as host i (for launchers that start processes themselves).
  std::vector<std::pair<std::string, std::string>> env_for(int host) const;
  std::vector<Counters> counters() const;
  void stop();

 private:
  Proxy() = default;
  void loop();
  Scenario s_;
  std::string preload_;
  std::vector<std::string> addrs_;
  int listen_fd_ = -1, port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// libwanemu_preload.so next to the running wanemu (its ../lib), or "" if absent.
std::string find_preload();

}  // namespace sparrow::wanemu
