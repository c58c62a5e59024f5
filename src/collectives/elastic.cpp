#include "collectives/elastic.h"

#include <poll.h>

#include <algorithm>
#include <iterator>
#include <thread>

#include "collectives/root_watch.h"
#include "core/log.h"

namespace sparrow::coll {
namespace {

using transport::Clock;

// A member the root still expects to hear from in this operation.
struct Awaited {
  int rank;
  Clock::time_point until;  // dropped if silent until then
  bool reattached = false;
  uint32_t beats = 0;  // heartbeats taken (each renews the lease)
};

// The parts from `from` on, to `r` (its re-attach request).
Status serve_reattach(const OpWire& w, int r, uint32_t from, const Parts& parts,
                      std::vector<transport::SendRequestPtr>* reqs) {
  if (parts.empty() || from > parts.rbegin()->first)
    return CorruptData("rank " + std::to_string(r) + " asked for part " + std::to_string(from) + " of operation " +
                       std::to_string(w.seq) + ", which has " + std::to_string(parts.size()) + " part(s)");
  for (auto it = parts.lower_bound(from); it != parts.end(); ++it) {
    auto q = w.net.send(r, w.key(it->first), it->second, w.deadline);
    if (!q.ok()) return q.status();
    if (reqs) reqs->push_back(std::move(q.value()));
  }
  SPARROW_INFO("rank %d re-attached to the root in operation %llu: parts %u..%u sent to it", r,
               (unsigned long long)w.seq, from, parts.rbegin()->first);
  return Status::Ok();
}

// One look (no waiting) at what member `a` sent. True when the root is done with it: it
// acknowledged (into `acked`) or was dropped.
bool look_at(Engine& e, const OpWire& w, const BufferKey& key, Awaited& a, const Parts& parts,
             std::vector<int>* acked, Status* first, std::vector<transport::SendRequestPtr>* reqs) {
  const auto now = Clock::now();
  while (a.beats < kMaxBeats && w.recv(a.rank, kBeatSub + a.beats, now).ok()) {  // (before the ack: none is left over)
    a.beats++;
    a.until = transport::deadline_in(e.comm.lease_s());
  }
  auto ack = w.recv(a.rank, kAckSub, now);
  if (ack.ok()) {
    Status s = e.acks.take(ack.value(), a.rank, w.seq, key);
    if (!s.ok() && first->ok()) *first = std::move(s);
    acked->push_back(a.rank);
    return true;
  }
  if (ack.status().code() != Code::kTimeout) {
    drop_member(e, a.rank, w.seq, ack.status().message());
    return true;
  }
  if (!a.reattached) {
    auto rq = w.recv(a.rank, kReattachSub, now);
    if (rq.ok()) {
      a.reattached = true;
      a.until = transport::deadline_in(e.comm.lease_s());
      auto from = decode_reattach(rq.value());
      Status s = from.ok() ? serve_reattach(w, a.rank, from.value(), parts, reqs) : from.status();
      if (!s.ok()) {
        drop_member(e, a.rank, w.seq, "its re-attach failed: " + s.message());
        return true;
      }
    }
  }
  if (now < a.until) return false;
  drop_member(e, a.rank, w.seq, "no acknowledgement within the lease (" +
                                    std::to_string(int(e.comm.lease_s() * 1000 + 0.5)) + " ms)");
  return true;
}

bootstrap::RankInfo info_of(const Place& p, int nstreams, const Comm& c) {
  return bootstrap::RankInfo{p.address, p.host, p.region, nstreams, 1, int(c.lease_s() * 1000 + 0.5)};
}

// The welcome for a joiner admitted into operation `seq`.
Welcome welcome_for(Engine& e, uint64_t seq) {
  Welcome w;
  w.first_seq = seq;
  const auto& ranks = e.comm.ranks();
  for (size_t r = 0; r < ranks.size(); ++r) w.places.push_back({int32_t(r), ranks[r].address, ranks[r].host, ranks[r].region});
  w.rtt_s = e.comm.probe().rtt_s;
  w.bw_Bps = e.comm.probe().bw_Bps;
  return w;
}

}  // namespace

void drop_member(Engine& e, int r, uint64_t seq, const std::string& why) {
  e.members.drop(r, seq, why);
  e.comm.net().disconnect(r, Status(Code::kPeerLost, "rank " + std::to_string(r) + " was dropped from the elastic "
                                                     "communicator: " + why));
}

std::vector<int> admit_joiners(Engine& e, uint64_t seq) {
  std::vector<int> admitted;
  auto& net = e.comm.net();
  for (int r = 0; r < e.comm.nranks(); ++r) {
    if (r == e.rank() || e.members.is_live(r)) continue;
    // A joiner whose streams are not all up (some were refused before the slot was free) is not
    // admitted over them: its welcome would wait for the rest. It tries again (its request stays
    // here meanwhile, with the slot's streams).
    if (net.incomplete_joiner(r)) continue;
    auto m = net.poll(r, transport::MsgKey{e.comm.comm_id(), 0, kJoinSub});
    if (!m.ok()) continue;
    auto place = decode_place(m.value());
    if (!place.ok() || place->rank != r) {
      SPARROW_WARN("a join request in slot %d was malformed (%s); ignored", r,
                   place.ok() ? "it names another slot" : place.status().message().c_str());
      continue;
    }
    e.comm.set_place(r, info_of(place.value(), net.nstreams(), e.comm));
    e.moved[r] = place.value();
    e.members.admit(r);
    for (auto& [key, rs] : e.roots) rs.need_resync[r] = 0;  // a full snapshot of every buffer set
    const Frame wb = share(welcome_for(e, seq).encode());
    auto q = net.send(r, transport::MsgKey{e.comm.comm_id(), 0, kWelcomeSub},
                      transport::Payload{wb->data(), wb->size(), wb}, transport::deadline_in(e.comm.lease_s()));
    if (!q.ok()) {
      drop_member(e, r, seq, "its welcome could not be sent: " + q.status().message());
      continue;
    }
    SPARROW_INFO("rank %d joined the elastic communicator at operation %llu from %s (region %s)", r,
                 (unsigned long long)seq, place->address.c_str(), place->region.empty() ? "inferred" : place->region.c_str());
    admitted.push_back(r);
  }
  publish_free_slots(e);
  return admitted;
}

void publish_free_slots(Engine& e) {
  std::vector<int> free;
  for (int r = 0; r < e.comm.nranks(); ++r)
    if (r != e.rank() && !e.members.is_live(r)) free.push_back(r);
  e.comm.publish_free_slots(std::move(free));
}

void apply_membership(Engine& e, const OpHeader& h) {
  for (const Place& p : h.moved)
    if (p.rank != e.rank() && p.rank >= 0 && p.rank < e.comm.nranks() &&
        e.comm.ranks()[size_t(p.rank)].address != p.address)
      e.comm.set_place(p.rank, info_of(p, e.comm.net().nstreams(), e.comm));
  for (int r : e.members.assign(h.members))
    if (r != e.rank())
      e.comm.net().disconnect(r, Status(Code::kPeerLost, "rank " + std::to_string(r) + " was dropped from the "
                                                         "elastic communicator by the root"));
}

// One try at admission: the request to rank 0 and its welcome.
Result<std::vector<uint8_t>> ask_rank0(Engine& e, const Frame& req, transport::Deadline d) {
  auto& net = e.comm.net();
  auto q = net.send(0, transport::MsgKey{e.comm.comm_id(), 0, kJoinSub}, transport::Payload{req->data(), req->size(), req}, d);
  if (!q.ok()) return q.status();
  SPARROW_RETURN_IF_ERROR(q.value()->wait(d));
  return net.recv(0, transport::MsgKey{e.comm.comm_id(), 0, kWelcomeSub}, d);
}

Status join(Engine& e) {
  auto& net = e.comm.net();
  const auto d = e.comm.deadline();
  const auto& me = e.comm.ranks()[size_t(e.rank())];
  const Frame req = share(encode_place(Place{int32_t(e.rank()), me.address, me.host, me.region}));
  // Rank 0 takes the connection only once the slot's old member was dropped, which may take up to a
  // lease after it died: until then it refuses it (or closes it), and this rank tries again.
  const auto give_up = std::min(d, transport::deadline_in(2 * e.comm.lease_s() + 1));
  auto m = ask_rank0(e, req, d);
  auto refused = [](const Status& st) {
    return st.code() == Code::kPeerLost || st.code() == Code::kSystemError || st.code() == Code::kAuthError;
  };
  while (!m.ok() && refused(m.status()) && transport::Clock::now() < give_up) {
    poll(nullptr, 0, 50);  // a retry interval, not a synchronisation
    net.revive(0, net.address_of(0));  // a fresh slot for rank 0's next connection
    m = ask_rank0(e, req, d);
  }
  if (!m.ok())
    return std::move(m).take_status().context("rank " + std::to_string(e.rank()) + " asking rank 0 to admit it (at "
                                              "rank 0's next broadcast; is the slot still held by a live member?)");
  net.admitted();
  SPARROW_ASSIGN_OR_RETURN(Welcome w, Welcome::decode(m.value()));
  SPARROW_RETURN_IF_ERROR(w.status);
  if (int(w.places.size()) != e.comm.nranks() || w.rtt_s.size() != w.places.size())
    return CorruptData("welcome from rank 0 lists " + std::to_string(w.places.size()) + " ranks");
  std::vector<bootstrap::RankInfo> ranks;
  for (const Place& p : w.places) ranks.push_back(info_of(p, net.nstreams(), e.comm));
  topology::ProbeResult probe;
  probe.rtt_s = w.rtt_s;
  probe.bw_Bps = w.bw_Bps;
  e.comm.adopt(std::move(ranks), std::move(probe), w.first_seq);
  e.joined_at = w.first_seq;
  // The higher ranks expect this rank to connect to them (the lower ones connect here once the
  // first operation's header tells them where it is): connect now, so none of them waits for it.
  // All at once: each costs round trips (a WAN's), and rank 0's first operation with this rank,
  // which expects its acknowledgement within the lease, has begun.
  const auto by = transport::deadline_in(std::min(2.0, e.comm.lease_s() / 2));
  std::vector<std::thread> ts;
  for (int r = e.rank() + 1; r < e.comm.nranks(); ++r) {
    if (e.comm.vacant(r)) continue;  // nobody to connect to
    ts.emplace_back([&net, &e, r, by] {
      Status s = net.connect(r, by);
      if (!s.ok()) SPARROW_INFO("rank %d: could not connect to rank %d yet (%s)", e.rank(), r, s.message().c_str());
    });
  }
  for (auto& t : ts) t.join();
  return Status::Ok();
}

void send_header_to_all(Engine& e, const OpWire& w, const Frame& header) {
  const auto d = std::min(w.deadline, transport::deadline_in(e.comm.lease_s()));
  for (int r : other_ranks(e)) {
    if (!e.members.is_live(r) && e.members.unreachable(r)) continue;
    // Never wait on a joiner's streams: the others would wait for their header meanwhile.
    if (w.net.incomplete_joiner(r)) {
      if (e.members.is_live(r)) drop_member(e, r, w.seq, "its connections were not all up");
      continue;
    }
    auto q = w.net.send(r, w.key(0), transport::Payload{header->data(), header->size(), header}, d);
    if (q.ok()) continue;
    if (e.members.is_live(r)) drop_member(e, r, w.seq, "its header could not be sent: " + q.status().message());
    e.members.mark_unreachable(r);
  }
}

Status collect_acks(Engine& e, const OpWire& w, const BufferKey& key, std::vector<int> expect, const Parts& parts,
                    std::vector<int>* acked, std::vector<transport::SendRequestPtr>* reqs) {
  std::vector<Awaited> waiting;
  const auto until = transport::deadline_in(e.comm.lease_s());
  for (int r : expect)
    if (e.members.is_live(r)) waiting.push_back({r, until});
  Status first;
  auto other_root_at = Clock::now();
  while (!waiting.empty()) {
    SPARROW_RETURN_IF_ERROR(w.net.aborted());  // not the members' failure: nobody is dropped for it
    const uint64_t seen = w.net.arrivals().generation();  // before looking: nothing arriving meanwhile is missed
    std::erase_if(waiting, [&](Awaited& a) { return look_at(e, w, key, a, parts, acked, &first, reqs); });
    if (waiting.empty()) break;
    if (Clock::now() >= other_root_at) {
      // Ranks that named another root never acknowledge: nobody is dropped for it, and the verdict
      // (when one is due) tells every member not heard from yet why (as if it had acknowledged).
      Status other = check_no_other_root(w);
      if (!other.ok()) {
        for (auto& a : waiting) acked->push_back(a.rank);
        std::sort(acked->begin(), acked->end());
        return other;
      }
      other_root_at = Clock::now() + std::chrono::milliseconds(100);
    }
    auto next = std::min_element(waiting.begin(), waiting.end(), [](auto& x, auto& y) { return x.until < y.until; });
    w.net.arrivals().wait(seen, std::min(next->until, other_root_at));
  }
  std::sort(acked->begin(), acked->end());
  return first;
}

Status finish_elastic(Engine& e, const OpWire& w, const BufferKey& key, const std::vector<int>& members,
                      const Parts& parts, bool verdict, std::vector<transport::SendRequestPtr>* reqs) {
  std::vector<int> expected, acked;
  for (int r : members)
    if (r != e.rank()) expected.push_back(r);
  Status agree = collect_acks(e, w, key, expected, parts, &acked, reqs);
  if (!verdict) return agree;
  std::vector<int> gone;
  std::set_difference(expected.begin(), expected.end(), acked.begin(), acked.end(), std::back_inserter(gone));
  if (!gone.empty())
    (void)send_verdict(w, gone, Status(Code::kPeerLost, "dropped from the elastic communicator by the root during "
                                                        "this operation (it died, stalled past the lease, or lost "
                                                        "its connection)"));
  // A member that acknowledged and died since is dropped, not the root's failure.
  const Status told = verdict_for_others(agree);
  for (int r : acked) {
    Status sent = send_verdict(w, {r}, told);
    if (!sent.ok() && e.members.is_live(r)) drop_member(e, r, w.seq, "its verdict could not be sent: " + sent.message());
  }
  return agree;
}

double reattach_patience(const topology::Tree& t, int me, double lease_s) {
  auto depth = [&](int r) {
    int d = 0;
    for (; r >= 0 && t.parent[size_t(r)] >= 0 && d <= int(t.parent.size()); r = t.parent[size_t(r)]) ++d;
    return d;
  };
  int deepest = 1;
  for (size_t r = 0; r < t.parent.size(); ++r) deepest = std::max(deepest, depth(int(r)));
  return lease_s / 2 * double(depth(me)) / double(deepest);
}

int adopter_for(const topology::Tree& t, int me) {
  const auto n = int(t.parent.size());
  if (me < 0 || me >= n || t.parent[size_t(me)] < 0 || t.region.size() != t.parent.size()) return -1;
  int hops = 0;
  for (int a = t.parent[size_t(t.parent[size_t(me)])]; a >= 0 && a != t.root && hops <= n; a = t.parent[size_t(a)], ++hops)
    if (t.region[size_t(a)] == t.region[size_t(me)]) return a;
  return -1;
}

std::vector<int> adoptable_by(const topology::Tree& t, int me) {
  std::vector<int> v;
  for (int r = 0; r < int(t.parent.size()); ++r)
    if (r != me && adopter_for(t, r) == me) v.push_back(r);
  return v;
}

Heartbeat::Heartbeat(const OpWire& w, int root, double lease_s) {
  if (lease_s <= 0) return;
  t_ = std::thread([this, w, root, period = std::chrono::duration<double>(lease_s / 4)] {
    std::unique_lock<std::mutex> lk(mu_);
    for (uint32_t k = 0; k < kMaxBeats; ++k) {
      if (cv_.wait_for(lk, period, [&] { return stop_; })) return;
      if (!w.send({root}, kBeatSub + k, share({uint8_t(1)})).ok()) return;  // the root is gone: nothing to tell
    }
  });
}

void Heartbeat::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (t_.joinable()) t_.join();
}

void stamp_elastic(const Engine& e, OpHeader& h, const std::vector<int>& members) {
  h.flags |= kOpElastic;
  h.members.assign(members.begin(), members.end());
  h.moved.clear();
  for (auto& [r, place] : e.moved) h.moved.push_back(place);
}

Result<ReceivedHeader> elastic_header(Engine& e, const OpWire& w, int root, bool* dropped) {
  SPARROW_ASSIGN_OR_RETURN(auto m, recv_header(w, root, root, w.deadline));
  if (is_abort(m)) return abort_status(m);
  Frame f = share(std::move(m));
  SPARROW_ASSIGN_OR_RETURN(OpHeader h, OpHeader::decode(*f));
  if (!(h.flags & kOpElastic))
    return Error(Code::kInvalidUsage, "rank " + std::to_string(root) + " runs this communicator as a fixed one");
  apply_membership(e, h);
  if (!e.members.is_live(e.rank())) {
    *dropped = true;
    return Error(Code::kPeerLost, "rank " + std::to_string(e.rank()) + " is no longer a member of this elastic "
                 "communicator: the root dropped it (it died, stalled past the lease, or lost its connection); "
                 "its buffers are as they were");
  }
  return ReceivedHeader{std::move(f), std::move(h)};
}

}  // namespace sparrow::coll
