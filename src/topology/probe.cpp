#include "topology/probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>

#include "core/params.h"
#include "core/bits.h"

namespace sparrow::topology {

using transport::Clock;
using transport::MsgKey;
using transport::Payload;

namespace {
params::IntParam kProbeMs("PROBE_MS", 500, "Time budget for bandwidth/RTT probing at communicator creation (0: off).",
                          0, 600000);
constexpr uint64_t kProbeSeq = 1ull << 62;  // op sequence space reserved for probing
constexpr int kPings = 5;
constexpr size_t kProbeMsg = 1 << 20;

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

int64_t probe_budget_ms() { return kProbeMs.get(); }

std::string ProbeResult::format() const {
  std::string out = "probe from rank " + std::to_string(root) + " (" + std::to_string(int(seconds * 1000)) + " ms)\n";
  out += "  rank      rtt_us     bw_Gbit/s\n";
  char line[96];
  for (size_t r = 0; r < rtt_s.size(); ++r) {
    if (int(r) == root || (rtt_s[r] < 0 && bw_Bps[r] <= 0)) continue;  // a vacant or new slot
    if (bw_Bps[r] > 0) snprintf(line, sizeof line, "  %4zu  %10.1f  %12.3f\n", r, rtt_s[r] * 1e6, bw_Bps[r] * 8 / 1e9);
    else snprintf(line, sizeof line, "  %4zu  %10.1f  %12s\n", r, rtt_s[r] * 1e6, "unmeasured");
    out += line;
  }
  return out;
}

Result<ProbeResult> probe_star(transport::Net& net, uint64_t comm, int root, double budget_s, transport::Deadline d,
                               int nprobe) {
  const int n = nprobe > 0 ? std::min(nprobe, net.nranks()) : net.nranks(), me = net.rank();
  ProbeResult res;
  res.root = root;
  res.rtt_s.assign(size_t(net.nranks()), -1);
  res.bw_Bps.assign(size_t(net.nranks()), -1);
  res.rtt_s[root] = 0;
  res.bw_Bps[root] = 0;
  auto t0 = Clock::now();
  if (n == 1) return res;
  const double slice = budget_s / double(n - 1);
  static const std::vector<uint8_t> zeros(kProbeMsg, 0);
  // Connections first, all peers at once (each costs round trips on a WAN), then RTTs, all peers at
  // once: the probe's time is then bounded by the budget plus a few of the longest round trips.
  if (me == root) {
    std::vector<Status> cs(n);
    std::vector<std::thread> ts;
    for (int j = 0; j < n; ++j)
      if (j != root) ts.emplace_back([&, j] { cs[j] = net.connect(j, d); });
    for (auto& t : ts) t.join();
    for (auto& st : cs) SPARROW_RETURN_IF_ERROR(st);
    const uint64_t pseq = kProbeSeq + (1ull << 41);
    for (int i = 0; i < kPings; ++i) {
      std::vector<Clock::time_point> sent(n);
      std::vector<transport::SendRequestPtr> reqs;
      for (int j = 0; j < n; ++j) {
        if (j == root) continue;
        sent[j] = Clock::now();
        SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(j, MsgKey{comm, pseq, uint32_t(2 * i)}, Payload{zeros.data(), 8, nullptr}, d));
        reqs.push_back(rq);
      }
      // Each pong is timed when it arrives, not when we get round to it: one waiter per peer.
      std::vector<Status> ps(n);
      std::vector<std::thread> waiters;
      for (int j = 0; j < n; ++j) {
        if (j == root) continue;
        waiters.emplace_back([&, j] {
          auto pong = net.recv(j, MsgKey{comm, pseq, uint32_t(2 * i + 1)}, d);
          if (!pong.ok()) {
            ps[j] = pong.status();
            return;
          }
          double rtt = secs(Clock::now() - sent[j]);
          res.rtt_s[j] = res.rtt_s[j] < 0 ? rtt : std::min(res.rtt_s[j], rtt);
        });
      }
      for (auto& w : waiters) w.join();
      for (auto& st : ps) SPARROW_RETURN_IF_ERROR(st);
      for (auto& r : reqs) SPARROW_RETURN_IF_ERROR(r->wait(d));
    }
  } else {
    const uint64_t pseq = kProbeSeq + (1ull << 41);
    for (int i = 0; i < kPings; ++i) {
      SPARROW_ASSIGN_OR_RETURN(auto ping, net.recv(root, MsgKey{comm, pseq, uint32_t(2 * i)}, d));
      SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(root, MsgKey{comm, pseq, uint32_t(2 * i + 1)}, Payload{zeros.data(), 8, nullptr}, d));
      SPARROW_RETURN_IF_ERROR(rq->wait(d));
    }
  }
  for (int j = 0; j < n; ++j) {
    if (j == root || (me != root && me != j)) continue;
    const uint64_t seq = kProbeSeq + uint64_t(j);
    if (me == root) {
      const double best = res.rtt_s[j];
      // Bandwidth: stream for the rest of the slice, a window of messages in flight. A slice shorter
      // than a few round trips would measure slow start, not the link: then the bandwidth stays
      // unknown (-1) rather than wrong.
      const double stream_s = slice;
      auto stop = stream_s >= 4 * best ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                            std::chrono::duration<double>(stream_s))
                                       : Clock::now();
      std::deque<transport::SendRequestPtr> window;
      uint32_t count = 0;
      const size_t win = 4 * size_t(net.nstreams()) + 4;
      while (Clock::now() < stop) {
        SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(j, MsgKey{comm, seq, 1000 + count}, Payload{zeros.data(), kProbeMsg, nullptr}, d));
        window.push_back(rq);
        ++count;
        if (window.size() >= win) {
          SPARROW_RETURN_IF_ERROR(window.front()->wait(d));
          window.pop_front();
        }
      }
      // The end marker is one more message of the same stream, flagged in its first byte, so that the
      // receiver can wait for each message as it arrives (timestamps of arrival, not of a buffer).
      std::vector<uint8_t> last(kProbeMsg, 0);
      last[0] = 1;
      SPARROW_ASSIGN_OR_RETURN(auto dq, net.send(j, MsgKey{comm, seq, 1000 + count}, Payload{last.data(), last.size(), nullptr}, d));
      SPARROW_ASSIGN_OR_RETURN(auto bw, net.recv(j, MsgKey{comm, seq, 998}, d));
      for (auto& w : window) SPARROW_RETURN_IF_ERROR(w->wait(d));
      SPARROW_RETURN_IF_ERROR(dq->wait(d));
      if (bw.size() != 8) return CorruptData("bad probe report from rank " + std::to_string(j));
      double v;
      memcpy(&v, bw.data(), 8);
      res.bw_Bps[j] = v > 0 ? v : -1;
    } else {
      // Arrival timestamps, message by message until the flagged last one; skip the first third
      // (slow start), measure the rest.
      std::vector<Clock::time_point> at;
      std::vector<uint8_t> sink(kProbeMsg);
      for (uint32_t i = 0;; ++i) {
        if (i > (1u << 24)) return CorruptData("probe stream from rank " + std::to_string(root) + " never ends");
        SPARROW_RETURN_IF_ERROR(net.recv_into(root, MsgKey{comm, seq, 1000 + i}, sink.data(), kProbeMsg, d));
        if (sink[0] == 1) break;
        at.push_back(Clock::now());
      }
      const uint32_t count = uint32_t(at.size());
      double bw = 0;
      uint32_t skip = count / 3;
      if (count >= 3 && at[count - 1] > at[skip]) bw = double(count - 1 - skip) * kProbeMsg / secs(at[count - 1] - at[skip]);
      std::vector<uint8_t> rep(8);
      memcpy(rep.data(), &bw, 8);
      SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(root, MsgKey{comm, seq, 998}, Payload{rep.data(), 8, nullptr}, d));
      SPARROW_RETURN_IF_ERROR(rq->wait(d));
    }
  }
  // Everyone gets the root's table.
  const uint64_t tseq = kProbeSeq + (1ull << 40);
  if (me == root) {
    std::vector<uint8_t> t((2 * n + 1) * 8);
    res.seconds = secs(Clock::now() - t0);
    memcpy(t.data(), res.rtt_s.data(), 8 * n);
    memcpy(t.data() + 8 * n, res.bw_Bps.data(), 8 * n);
    memcpy(t.data() + 16 * n, &res.seconds, 8);
    std::vector<transport::SendRequestPtr> reqs;
    for (int j = 0; j < n; ++j) {
      if (j == root) continue;
      SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(j, MsgKey{comm, tseq, 0}, Payload{t.data(), t.size(), nullptr}, d));
      reqs.push_back(rq);
    }
    for (auto& r : reqs) SPARROW_RETURN_IF_ERROR(r->wait(d));
  } else {
    SPARROW_ASSIGN_OR_RETURN(auto t, net.recv(root, MsgKey{comm, tseq, 0}, d));
    if (t.size() != size_t(2 * n + 1) * 8) return CorruptData("bad probe table");
    memcpy(res.rtt_s.data(), t.data(), 8 * n);
    memcpy(res.bw_Bps.data(), t.data() + 8 * n, 8 * n);
    memcpy(&res.seconds, t.data() + 16 * n, 8);
  }
  return res;
}

}  // namespace sparrow::topology
