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

namespace {

// The keys of the probe's messages: pings and pongs, rank j's bandwidth stream, the table.
constexpr uint64_t kPingSeq = kProbeSeq + (1ull << 41), kTableSeq = kProbeSeq + (1ull << 40);
uint64_t stream_seq(int j) { return kProbeSeq + uint64_t(j); }
const std::vector<uint8_t>& zeros() {
  static const std::vector<uint8_t> z(kProbeMsg, 0);
  return z;
}

// The root: connections to every rank, all at once (each costs round trips on a WAN).
Status connect_all(transport::Net& net, int root, int n, transport::Deadline d) {
  std::vector<Status> cs(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int j = 0; j < n; ++j)
    if (j != root) ts.emplace_back([&, j] { cs[size_t(j)] = net.connect(j, d); });
  for (auto& t : ts) t.join();
  for (auto& st : cs) SPARROW_RETURN_IF_ERROR(st);
  return Status::Ok();
}

// The root's ping i to every rank at once; each pong is timed when it arrives (one waiter per
// peer), and the smallest round trip is kept in res.rtt_s.
Status ping_all(transport::Net& net, uint64_t comm, int root, int n, int i, transport::Deadline d, ProbeResult& res) {
  std::vector<Clock::time_point> sent(static_cast<size_t>(n));
  std::vector<transport::SendRequestPtr> reqs;
  for (int j = 0; j < n; ++j) {
    if (j == root) continue;
    sent[size_t(j)] = Clock::now();
    SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(j, MsgKey{comm, kPingSeq, uint32_t(2 * i)},
                                               Payload{zeros().data(), 8, nullptr}, d));
    reqs.push_back(rq);
  }
  std::vector<Status> ps(static_cast<size_t>(n));
  std::vector<std::thread> waiters;
  for (int j = 0; j < n; ++j) {
    if (j == root) continue;
    waiters.emplace_back([&, j] {
      auto pong = net.recv(j, MsgKey{comm, kPingSeq, uint32_t(2 * i + 1)}, d);
      if (!pong.ok()) {
        ps[size_t(j)] = pong.status();
        return;
      }
      const double rtt = secs(Clock::now() - sent[size_t(j)]);
      res.rtt_s[size_t(j)] = res.rtt_s[size_t(j)] < 0 ? rtt : std::min(res.rtt_s[size_t(j)], rtt);
    });
  }
  for (auto& w : waiters) w.join();
  for (auto& st : ps) SPARROW_RETURN_IF_ERROR(st);
  for (auto& r : reqs) SPARROW_RETURN_IF_ERROR(r->wait(d));
  return Status::Ok();
}

// A rank answers the root's pings.
Status answer_pings(transport::Net& net, uint64_t comm, int root, transport::Deadline d) {
  for (int i = 0; i < kPings; ++i) {
    SPARROW_ASSIGN_OR_RETURN(auto ping, net.recv(root, MsgKey{comm, kPingSeq, uint32_t(2 * i)}, d));
    SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(root, MsgKey{comm, kPingSeq, uint32_t(2 * i + 1)},
                                               Payload{zeros().data(), 8, nullptr}, d));
    SPARROW_RETURN_IF_ERROR(rq->wait(d));
  }
  return Status::Ok();
}

// The root streams to rank j for `slice` seconds, a window of messages in flight, then the flagged
// end marker, and returns the rate j measured (-1: unknown). A slice shorter than a few round trips
// would measure slow start, not the link: then nothing is streamed and the rate stays unknown.
Result<double> stream_to(transport::Net& net, uint64_t comm, int j, double slice, double rtt, transport::Deadline d) {
  const uint64_t seq = stream_seq(j);
  auto stop = slice >= 4 * rtt ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(slice))
                               : Clock::now();
  std::deque<transport::SendRequestPtr> window;
  uint32_t count = 0;
  const size_t win = 4 * size_t(net.nstreams()) + 4;
  while (Clock::now() < stop) {
    SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(j, MsgKey{comm, seq, 1000 + count},
                                               Payload{zeros().data(), kProbeMsg, nullptr}, d));
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
  return v > 0 ? v : -1;
}

// A rank times the root's stream message by message until the flagged last one, skips the first
// third (slow start), and reports the rate of the rest.
Status measure_stream(transport::Net& net, uint64_t comm, int root, int me, transport::Deadline d) {
  const uint64_t seq = stream_seq(me);
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
  const uint32_t skip = count / 3;
  if (count >= 3 && at[count - 1] > at[skip]) bw = double(count - 1 - skip) * kProbeMsg / secs(at[count - 1] - at[skip]);
  std::vector<uint8_t> rep(8);
  memcpy(rep.data(), &bw, 8);
  SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(root, MsgKey{comm, seq, 998}, Payload{rep.data(), 8, nullptr}, d));
  return rq->wait(d);
}

// The root sends its table to every rank; a rank takes it.
Status send_table(transport::Net& net, uint64_t comm, int root, int n, transport::Deadline d, const ProbeResult& res) {
  std::vector<uint8_t> t(size_t(2 * n + 1) * 8);
  memcpy(t.data(), res.rtt_s.data(), 8 * size_t(n));
  memcpy(t.data() + 8 * n, res.bw_Bps.data(), 8 * size_t(n));
  memcpy(t.data() + 16 * n, &res.seconds, 8);
  std::vector<transport::SendRequestPtr> reqs;
  for (int j = 0; j < n; ++j) {
    if (j == root) continue;
    SPARROW_ASSIGN_OR_RETURN(auto rq, net.send(j, MsgKey{comm, kTableSeq, 0}, Payload{t.data(), t.size(), nullptr}, d));
    reqs.push_back(rq);
  }
  for (auto& r : reqs) SPARROW_RETURN_IF_ERROR(r->wait(d));
  return Status::Ok();
}

Status recv_table(transport::Net& net, uint64_t comm, int root, int n, transport::Deadline d, ProbeResult& res) {
  SPARROW_ASSIGN_OR_RETURN(auto t, net.recv(root, MsgKey{comm, kTableSeq, 0}, d));
  if (t.size() != size_t(2 * n + 1) * 8) return CorruptData("bad probe table");
  memcpy(res.rtt_s.data(), t.data(), 8 * size_t(n));
  memcpy(res.bw_Bps.data(), t.data() + 8 * n, 8 * size_t(n));
  memcpy(&res.seconds, t.data() + 16 * n, 8);
  return Status::Ok();
}

// The root's side: connections, round trips, each rank's bandwidth in its slice of the budget, the table.
Status probe_as_root(transport::Net& net, uint64_t comm, int root, int n, double slice, transport::Deadline d,
                     ProbeResult& res, Clock::time_point t0) {
  SPARROW_RETURN_IF_ERROR(connect_all(net, root, n, d));
  for (int i = 0; i < kPings; ++i) SPARROW_RETURN_IF_ERROR(ping_all(net, comm, root, n, i, d, res));
  for (int j = 0; j < n; ++j) {
    if (j == root) continue;
    SPARROW_ASSIGN_OR_RETURN(res.bw_Bps[size_t(j)], stream_to(net, comm, j, slice, res.rtt_s[size_t(j)], d));
  }
  res.seconds = secs(Clock::now() - t0);
  return send_table(net, comm, root, n, d, res);
}

}  // namespace

Result<ProbeResult> probe_star(transport::Net& net, uint64_t comm, int root, double budget_s, transport::Deadline d,
                               int nprobe) {
  const int n = nprobe > 0 ? std::min(nprobe, net.nranks()) : net.nranks(), me = net.rank();
  ProbeResult res;
  res.root = root;
  res.rtt_s.assign(size_t(net.nranks()), -1);
  res.bw_Bps.assign(size_t(net.nranks()), -1);
  res.rtt_s[root] = 0;
  res.bw_Bps[root] = 0;
  const auto t0 = Clock::now();
  if (n == 1) return res;
  const double slice = budget_s / double(n - 1);
  if (me == root) {
    SPARROW_RETURN_IF_ERROR(probe_as_root(net, comm, root, n, slice, d, res, t0));
    return res;
  }
  SPARROW_RETURN_IF_ERROR(answer_pings(net, comm, root, d));
  if (me < n) SPARROW_RETURN_IF_ERROR(measure_stream(net, comm, root, me, d));
  SPARROW_RETURN_IF_ERROR(recv_table(net, comm, root, n, d, res));
  return res;
}

}  // namespace sparrow::topology
