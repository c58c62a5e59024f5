// SPDX-License-Identifier: Apache-2.0
// Leases and heartbeats of an elastic communicator: the root sends the header to every member, serves
// re-attach requests while it waits for each member's acknowledgement at most the lease after it last
// heard from it (heartbeats renew it), drops a member that failed or fell silent, and ends with the
// verdict; a receiver takes the header from the root and sends heartbeats meanwhile
// (collectives/elastic/elastic.h).
#include "collectives/elastic/elastic.h"

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

}  // namespace

void drop_member(Engine& e, int r, uint64_t seq, const std::string& why) {
  e.members.drop(r, seq, why);
  e.comm.net().disconnect(r, Status(Code::kPeerLost, "rank " + std::to_string(r) + " was dropped from the elastic "
                                                     "communicator: " + why));
}

void send_header_to_all(Engine& e, const OpWire& w, const Frame& header, const std::vector<int>* to) {
  const auto d = std::min(w.deadline, transport::deadline_in(e.comm.lease_s()));
  for (int r : to ? *to : other_ranks(e)) {
    if (r == e.rank()) continue;
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

void beat_ahead(Engine& e, const OpWire& w, int root) {
  std::lock_guard<std::mutex> lk(e.elastic.beats_mu);
  auto& beats = e.elastic.beats_ahead[w.seq];
  if (!beats) beats = std::make_unique<Heartbeat>(w, root, e.comm.lease_s());  // (one already beating goes on)
}

void stop_beats_ahead(Engine& e) {
  std::map<uint64_t, std::unique_ptr<Heartbeat>> left;
  {
    std::lock_guard<std::mutex> lk(e.elastic.beats_mu);
    left.swap(e.elastic.beats_ahead);
  }
  left.clear();  // (each stops and joins its thread, outside the lock)
}

std::unique_ptr<Heartbeat> heartbeats_for(Engine& e, const OpWire& w, int root) {
  {
    std::lock_guard<std::mutex> lk(e.elastic.beats_mu);
    auto it = e.elastic.beats_ahead.find(w.seq);
    if (it != e.elastic.beats_ahead.end()) {
      auto beats = std::move(it->second);
      e.elastic.beats_ahead.erase(it);
      return beats;
    }
  }
  return std::make_unique<Heartbeat>(w, root, e.comm.lease_s());
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
  for (auto& [r, place] : e.elastic.moved) h.moved.push_back(place);
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
