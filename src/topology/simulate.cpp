#include "topology/simulate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "topology/algorithms/registry.h"

namespace sparrow::topology {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double rate_or_inf(double Bps) { return Bps > 0 ? Bps : kInf; }

// One tree edge: its streams together.
struct Flow {
  int from = 0, to = 0;
  int lag_delay = 1, lag_rtt = 2;  // in time steps
  double cwnd = 0, cap = 0;        // bytes
  double loss_cap = kInf;          // Bps (loss-based congestion control)
  double goodput = 1;              // fraction of what is sent that arrives (BBR under loss)
  double sent = 0, acked = 0, delivered = 0;
  std::vector<double> hist;        // sent after each step, a ring
  double sent_at(long k) const { return k < 0 ? 0 : hist[size_t(k) % hist.size()]; }
};

double pick_dt(const SimNet& net, const Tree& t, const SimStep& s, double bound) {
  if (s.dt_s > 0) return s.dt_s;
  // The expected time: the bound, the encoder, and the busiest sender's copies on its uplink.
  double fanout = 0;
  for (int r = 0; r < net.nranks(); ++r) {
    const double up = net.hosts[net.host_of[r]].up_Bps;
    if (up > 0) fanout = std::max(fanout, s.wire_bytes * double(t.children[r].size()) / up);
  }
  const double expected = std::max(bound, fanout) + s.root_start_s + s.encode_s;
  double dt = std::clamp(expected / 5000, 20e-6, 0.1);
  // Keep big trees affordable: about s.max_flow_steps.
  const double flows = std::max(1, net.nranks() - 1);
  return std::max(dt, 2 * expected * flows / std::max(1.0, s.max_flow_steps));
}

std::vector<Flow> make_flows(const SimNet& net, const Tree& t, const SimStep& s, double dt) {
  std::vector<Flow> flows;
  for (int r = 0; r < net.nranks(); ++r) {
    for (int c : t.children[r]) {
      Flow f;
      f.from = r;
      f.to = c;
      const double d = net.delay(r, c);
      f.lag_delay = std::max(1, int(std::lround(d / dt)));
      f.lag_rtt = std::max(f.lag_delay + 1, int(std::lround(2 * d / dt)));
      f.hist.assign(size_t(f.lag_rtt) + 1, 0);
      f.cap = s.streams * s.window_bytes;
      f.cwnd = s.warm ? f.cap : std::min(f.cap, s.streams * (s.initial_window > 0 ? s.initial_window : 10 * s.mss));
      const double p = net.loss_of(r, c);
      if (p > 0) {
        if (s.bbr) f.goodput = 1 - p;
        else f.loss_cap = s.streams * s.mss / std::max(2 * d, 1e-4) * std::sqrt(1.5 / p);
      }
      flows.push_back(std::move(f));
    }
  }
  return flows;
}

// Max-min fair shares of each sender host's uplink among its flows, each flow held to its demand
// and its share of the receiving host's downlink.
void allocate(const SimNet& net, std::vector<Flow>& flows, std::vector<double>& rate) {
  std::map<int, int> into;  // receiving host -> flows with demand
  for (size_t i = 0; i < flows.size(); ++i)
    if (rate[i] > 0) into[net.host_of[flows[i].to]]++;
  std::map<int, std::vector<size_t>> by_sender;
  for (size_t i = 0; i < flows.size(); ++i) {
    if (rate[i] <= 0) continue;
    const int h = net.host_of[flows[i].to];
    rate[i] = std::min(rate[i], rate_or_inf(net.hosts[h].down_Bps) / into[h]);
    by_sender[net.host_of[flows[i].from]].push_back(i);
  }
  for (auto& [h, idx] : by_sender) {
    double left = rate_or_inf(net.hosts[h].up_Bps);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return rate[a] < rate[b]; });
    for (size_t k = 0; k < idx.size(); ++k) {
      const double share = left / double(idx.size() - k);
      rate[idx[k]] = std::min(rate[idx[k]], share);
      left -= rate[idx[k]];
    }
  }
}

// Bytes of the step a rank can send on at time t.
struct Holdings {
  double M, F;
  double whole_frames(double got) const { return got >= M ? M : std::floor(got / F) * F; }
  double produced(const SimStep& s, double t) const {
    if (t < s.root_start_s) return 0;
    if (s.encode_s <= 0) return M;
    const double frames = std::ceil(M / F);
    return std::min(M, std::floor(frames * (t - s.root_start_s) / s.encode_s) * F);
  }
};

}  // namespace

double lower_bound_s(const SimNet& net, int root, double wire_bytes) {
  double far = 0;
  for (int r = 0; r < net.nranks(); ++r)
    if (r != root) far = std::max(far, net.delay(root, r));
  const double up = net.hosts[net.host_of[root]].up_Bps;
  return (up > 0 ? wire_bytes / up : 0) + far;
}

Result<SimResult> simulate(const SimNet& net, const Tree& t, const SimStep& s) {
  const int n = net.nranks();
  if (n < 1 || int(t.parent.size()) != n || int(t.children.size()) != n || t.root < 0 || t.root >= n)
    return InvalidArgument("simulate: the tree does not match the network's ranks");
  if (!(s.wire_bytes > 0) || s.streams < 1 || !(s.mss > 0) || !(s.window_bytes > 0))
    return InvalidArgument("simulate: wire bytes, streams, MSS and window must be positive");
  if (!s.tail_s.empty() && int(s.tail_s.size()) != n) return InvalidArgument("simulate: one CPU tail per rank");
  for (int r = 0; r < n; ++r)
    if (r != t.root && (t.parent[r] < 0 || t.parent[r] >= n))
      return InvalidArgument("simulate: rank " + std::to_string(r) + " has no parent in the tree");
  SimResult out;
  out.bound_s = lower_bound_s(net, t.root, s.wire_bytes);
  out.first_byte_s.assign(n, -1);
  out.last_byte_s.assign(n, -1);
  out.done_s.assign(n, -1);
  const double dt = pick_dt(net, t, s, out.bound_s);
  std::vector<Flow> flows = make_flows(net, t, s, dt);
  std::vector<int> in_flow(n, -1);
  for (size_t i = 0; i < flows.size(); ++i) in_flow[flows[i].to] = int(i);
  for (int r = 0; r < n; ++r)
    if (r != t.root && in_flow[r] < 0) return InvalidArgument("simulate: rank " + std::to_string(r) + " is not a child of its parent");

  const Holdings h{s.wire_bytes, s.frame_bytes > 0 ? std::min(s.frame_bytes, s.wire_bytes) : s.wire_bytes};
  const double root_encoded = s.root_start_s + std::max(0.0, s.encode_s);
  const double limit = 1000 * (out.bound_s + root_encoded) + 60;
  std::vector<double> rate(flows.size());
  std::vector<double> held(n);
  int left = n - 1;
  double root_sent_at = flows.empty() ? 0 : -1;
  for (long k = 0; left > 0 || root_sent_at < 0; ++k) {
    const double t_now = double(k + 1) * dt;
    if (t_now > limit) return Error(Code::kTimeout, "simulate: the step did not finish within " + std::to_string(limit) + " simulated seconds");
    held[t.root] = h.produced(s, t_now);
    for (int r = 0; r < n; ++r)
      if (r != t.root) held[r] = h.whole_frames(flows[size_t(in_flow[r])].delivered);
    for (size_t i = 0; i < flows.size(); ++i) {
      const Flow& f = flows[i];
      const double window = std::max(0.0, f.cwnd - (f.sent - f.acked));
      rate[i] = std::min({std::max(0.0, held[f.from] - f.sent), window}) / dt;
      rate[i] = std::min(rate[i], f.loss_cap);
    }
    allocate(net, flows, rate);
    bool root_done = true;
    for (size_t i = 0; i < flows.size(); ++i) {
      Flow& f = flows[i];
      f.sent = std::min(h.M, f.sent + rate[i] * f.goodput * dt);
      f.hist[size_t(k) % f.hist.size()] = f.sent;
      const double acked = f.sent_at(k - f.lag_rtt);
      if (f.cwnd < f.cap) f.cwnd = std::min(f.cap, f.cwnd + (acked - f.acked));
      f.acked = acked;
      f.delivered = f.sent_at(k - f.lag_delay);
      if (f.delivered > 0 && out.first_byte_s[f.to] < 0) out.first_byte_s[f.to] = t_now;
      if (f.delivered >= h.M && out.last_byte_s[f.to] < 0) {
        out.last_byte_s[f.to] = t_now;
        --left;
      }
      if (f.from == t.root && f.sent < h.M) root_done = false;
    }
    if (root_sent_at < 0 && root_done) root_sent_at = t_now;
  }
  for (int r = 0; r < n; ++r) {
    const double tail = s.tail_s.empty() ? 0 : std::max(0.0, s.tail_s[r]);
    out.done_s[r] = r == t.root ? std::max(root_encoded, root_sent_at) : out.last_byte_s[r] + tail;
    out.step_s = std::max(out.step_s, out.done_s[r]);
  }
  return out;
}

SimNet net_from_tree_input(const TreeInput& in, const std::vector<std::string>& region) {
  SimNet net;
  const int n = in.nranks;
  double root_up = 0;
  for (int r = 0; r < n; ++r)
    if (r != in.root) root_up = std::max(root_up, bw_of(in, r));
  if (root_up <= 0) root_up = kDefaultBw;
  auto same = [&](int a, int b) { return region.empty() || region[a] == region[b]; };
  std::vector<double> rtt(n, 0);
  std::map<std::string, int> by_name;  // ranks of one host share its access link
  for (int r = 0; r < n; ++r) {
    rtt[r] = r == in.root || same(r, in.root) ? 0 : rtt_of(in, r);
    const std::string host = r < int(in.places.size()) ? in.places[r].host : "";
    auto it = host.empty() ? by_name.end() : by_name.find(host);
    if (it == by_name.end()) {
      SimHost h;
      h.name = host.empty() ? "rank" + std::to_string(r) : host;
      h.region = region.empty() ? "" : region[r];
      net.hosts.push_back(h);
      if (!host.empty()) it = by_name.emplace(host, int(net.hosts.size()) - 1).first;
    }
    const int hi = it == by_name.end() ? int(net.hosts.size()) - 1 : it->second;
    SimHost& h = net.hosts[size_t(hi)];
    // A rank of the root's site has the root's uplink; a far one as much up as down.
    h.up_Bps = std::max(h.up_Bps, r == in.root || same(r, in.root) ? root_up : bw_of(in, r));
    h.down_Bps = std::max(h.down_Bps, r == in.root ? root_up : bw_of(in, r));
    net.host_of.push_back(hi);
  }
  const size_t nh = net.hosts.size();
  net.delay_s.assign(nh, std::vector<double>(nh, 0));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      const int ha = net.host_of[a], hb = net.host_of[b];
      if (ha != hb) net.delay_s[ha][hb] = same(a, b) ? kLanRtt / 2 : std::max(rtt[a], rtt[b]) / 2;
    }
  return net;
}

}  // namespace sparrow::topology
