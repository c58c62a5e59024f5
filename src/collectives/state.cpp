#include "collectives/state.h"

#include <algorithm>
#include <chrono>

#include "collectives/elastic/elastic.h"
#include "collectives/relay.h"
#include "collectives/sparse/stage.h"
#include "core/log.h"

namespace sparrow::coll {

bool same_layout(const std::vector<kernels::cpu::TensorSpec>& a, const std::vector<kernels::cpu::TensorSpec>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.count == y.count && x.dtype == y.dtype;
  });
}

std::vector<int> other_ranks(const Engine& e) {
  std::vector<int> v;
  for (int r = 0; r < e.comm.nranks(); ++r)
    if (r != e.rank()) v.push_back(r);
  return v;
}

Engine::Engine(Comm& c)
    : comm(c),
      acks([this](const BufferKey& key, int rank, uint64_t holds) {
        auto it = roots.find(key);
        if (it != roots.end()) it->second.need_resync[rank] = holds;
      }),
      members(c.nranks()) {
  for (int r = 0; r < c.nranks(); ++r)
    if (c.vacant(r)) members.vacate(r);
}

Engine::~Engine() {
  // A step still being staged in the background uses the network: stop it before the network goes.
  if (staged) {
    comm.net().abort(Status(Code::kInternalError, "communicator destroyed while a staged step was in flight"));
    staged.reset();
  }
  end_lingering();
}

void Engine::end_lingering() {
  if (!elastic.lingering) return;
  SPARROW_TRACE("rank %d: the relay of operation %llu stops serving adoptions", rank(),
                (unsigned long long)elastic.lingering->wire().seq);
  elastic.lingering->finish();
  elastic.lingering.reset();
}

namespace {
// The tree over `members` (increasing, the root among them) built on their places and probes, with
// ranks renumbered 0..m-1 and mapped back.
Result<topology::Tree> member_tree(const topology::TreeInput& all, const std::vector<int>& members) {
  topology::TreeInput in;
  in.nranks = int(members.size());
  in.message_bytes = all.message_bytes;
  std::vector<int> index(size_t(all.nranks), -1);
  for (size_t i = 0; i < members.size(); ++i) {
    const int r = members[i];
    index[size_t(r)] = int(i);
    if (r == all.root) in.root = int(i);
    in.places.push_back(all.places[size_t(r)]);
    in.rtt_s.push_back(all.rtt_s[size_t(r)]);
    in.bw_Bps.push_back(all.bw_Bps[size_t(r)]);
  }
  if (index[size_t(all.root)] < 0) return Error(Code::kInternalError, "the root is not among the members");
  SPARROW_ASSIGN_OR_RETURN(topology::Tree sub, topology::build_tree("", in));
  topology::Tree t;
  t.algo = sub.algo;
  t.root = all.root;
  t.est_seconds = sub.est_seconds;
  t.parent.assign(size_t(all.nranks), -1);
  t.children.assign(size_t(all.nranks), {});
  t.region.assign(size_t(all.nranks), "");
  for (size_t i = 0; i < members.size(); ++i) {
    const size_t r = size_t(members[i]);
    t.parent[r] = sub.parent[i] < 0 ? -1 : members[size_t(sub.parent[i])];
    for (int k : sub.children[i]) t.children[r].push_back(members[size_t(k)]);
    t.region[r] = sub.region[i];
  }
  return t;
}
}  // namespace

Result<topology::Tree> Engine::tree(int root, double bytes, const std::vector<int>* live) {
  topology::TreeInput in;
  in.nranks = comm.nranks();
  in.root = root;
  for (auto& r : comm.ranks()) in.places.push_back({r.host, r.region});
  // The probe measured from rank 0; it stands in for other roots too (same links at this scale).
  in.rtt_s = comm.probe().rtt_s;
  in.bw_Bps = comm.probe().bw_Bps;
  in.message_bytes = bytes;
  const std::vector<int> members = live && int(live->size()) < in.nranks ? *live : std::vector<int>{};
  for (const auto& c : cached_trees_)
    if (c.members == members && c.in == in) return c.tree;
  auto t = members.empty() ? topology::build_tree("", in) : member_tree(in, members);
  if (t.ok()) {
    if (cached_trees_.size() >= kTreeCache) cached_trees_.pop_front();
    cached_trees_.push_back(CachedTree{in, members, t.value()});
  }
  if (t.ok() && rank() == root && log::level() >= log::Level::kInfo) {
    // Once per distinct tree (it is the same every step unless the root or the size class changes).
    std::string f = t->format();
    if (f != last_tree_logged_) {
      SPARROW_INFO("%s", f.c_str());
      last_tree_logged_ = std::move(f);
    }
  }
  return t;
}

void record_traffic(Engine& e, int parent, const std::vector<int>& children) {
  auto& st = e.stats;
  const int n = e.comm.nranks();
  st.parent = parent;
  st.children = children;
  st.peers.resize(size_t(n));
  for (int r = 0; r < n; ++r) st.peers[r] = r == e.rank() ? transport::Net::PeerTraffic{} : e.comm.net().traffic(r);
  st.extract_s = st.first_byte_s = st.last_byte_s = st.verify_s = st.decode_s = st.commit_s = -1;
  st.codec_link_Bps = -1;
  std::fill(std::begin(st.index_codecs), std::end(st.index_codecs), 0);
  std::fill(std::begin(st.value_codecs), std::end(st.value_codecs), 0);
  if (parent >= 0) {
    st.first_byte_s = st.peers[parent].first_s;
    st.last_byte_s = st.peers[parent].last_s;
  }
}

void log_step(Engine& e, const char* what) {
  if (log::level() < log::Level::kInfo || !(log::subsystems() & log::kStep)) return;
  const auto& st = e.stats;
  const auto& p = e.comm.probe();
  double bound = -1;
  for (int r = 0; r < int(p.bw_Bps.size()) && r < e.comm.nranks(); ++r) {
    if (r == p.root || p.bw_Bps[r] <= 0 || p.rtt_s[r] < 0) continue;
    if (!st.is_root() && r != e.rank()) continue;  // a receiver: its own path; the root: the slowest
    bound = std::max(bound, double(st.wire_bytes) / p.bw_Bps[r] + p.rtt_s[r] / 2);
  }
  char b[64] = "";
  if (bound > 0) snprintf(b, sizeof b, ", %.2fx the probed bound %.1f ms", st.total_s / bound, bound * 1e3);
  SPARROW_STEP("%s op %llu (%s): %llu -> %llu bytes%s, %.1f ms%s", what, (unsigned long long)st.ops,
               st.is_root() ? "root" : "receiver", (unsigned long long)st.dense_bytes, (unsigned long long)st.wire_bytes,
               st.full ? ", full" : "", st.total_s * 1e3, b);
}

void add_op_stats(Stats& sum, const Stats& op) {
  const Stats before = sum;
  sum = op;  // the last operation's stages, tree and counters
  sum.dense_bytes += before.dense_bytes;
  sum.wire_bytes += before.wire_bytes;
  sum.changed += before.changed;
  sum.elements += before.elements;
  sum.density = sum.elements ? double(sum.changed) / double(sum.elements) : 0;
  sum.encode_s += before.encode_s;
  sum.apply_s += before.apply_s;
  sum.total_s = std::max(sum.total_s, before.total_s);
  sum.full = sum.full || before.full;
  sum.peers.resize(std::max(sum.peers.size(), before.peers.size()));
  for (size_t r = 0; r < before.peers.size(); ++r) {
    auto& p = sum.peers[r];
    const auto& b = before.peers[r];
    p.sent += b.sent;
    p.received += b.received;
    if (b.first_s >= 0 && (p.first_s < 0 || b.first_s < p.first_s)) p.first_s = b.first_s;
    p.last_s = std::max(p.last_s, b.last_s);
    p.streams = std::max(p.streams, b.streams);
  }
}

}  // namespace sparrow::coll
