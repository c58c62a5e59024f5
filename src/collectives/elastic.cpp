#include "collectives/elastic.h"

#include <algorithm>

#include "core/log.h"

namespace sparrow::coll {
namespace {

using transport::Clock;

// A member the root still expects to hear from in this operation.
struct Awaited {
  int rank;
  Clock::time_point until;  // dropped if silent until then
  bool reattached = false;
};

// The parts from `from` on, to `r` (its re-attach request).
Status serve_reattach(const OpWire& w, int r, uint32_t from, const Parts& parts) {
  if (parts.empty() || from > parts.rbegin()->first)
    return CorruptData("rank " + std::to_string(r) + " asked for part " + std::to_string(from) + " of operation " +
                       std::to_string(w.seq) + ", which has " + std::to_string(parts.size()) + " part(s)");
  for (auto it = parts.lower_bound(from); it != parts.end(); ++it) {
    const Frame& f = it->second;
    auto q = w.net.send(r, w.key(it->first), transport::Payload{f->data(), f->size(), f}, w.deadline);
    if (!q.ok()) return q.status();
  }
  SPARROW_INFO("rank %d re-attached to the root in operation %llu: parts %u..%u sent to it", r,
               (unsigned long long)w.seq, from, parts.rbegin()->first);
  return Status::Ok();
}

// One look (no waiting) at what member `a` sent. True when the root is done with it: it
// acknowledged (into `acked`) or was dropped.
bool look_at(Engine& e, const OpWire& w, const BufferKey& key, Awaited& a, const Parts& parts,
             std::vector<int>* acked, Status* first) {
  const auto now = Clock::now();
  auto ack = w.recv(a.rank, kAckSub, now);
  if (ack.ok()) {
    Status s = e.acks.take(ack.value(), a.rank, w.seq, key);
    if (!s.ok() && first->ok()) *first = std::move(s);
    acked->push_back(a.rank);
    return true;
  }
  if (ack.status().code() != Code::kTimeout) {
    e.members.drop(a.rank, w.seq, ack.status().message());
    return true;
  }
  if (!a.reattached) {
    auto rq = w.recv(a.rank, kReattachSub, now);
    if (rq.ok()) {
      a.reattached = true;
      a.until = transport::deadline_in(e.comm.lease_s());
      auto from = decode_reattach(rq.value());
      Status s = from.ok() ? serve_reattach(w, a.rank, from.value(), parts) : from.status();
      if (!s.ok()) {
        e.members.drop(a.rank, w.seq, "its re-attach failed: " + s.message());
        return true;
      }
    }
  }
  if (now < a.until) return false;
  e.members.drop(a.rank, w.seq, "no acknowledgement within the lease (" +
                                    std::to_string(int(e.comm.lease_s() * 1000 + 0.5)) + " ms)");
  return true;
}

}  // namespace

void send_header_to_all(Engine& e, const OpWire& w, const Frame& header) {
  const auto d = std::min(w.deadline, transport::deadline_in(e.comm.lease_s()));
  for (int r : other_ranks(e)) {
    if (!e.members.is_live(r) && e.members.unreachable(r)) continue;
    auto q = w.net.send(r, w.key(0), transport::Payload{header->data(), header->size(), header}, d);
    if (q.ok()) continue;
    if (e.members.is_live(r)) e.members.drop(r, w.seq, "its header could not be sent: " + q.status().message());
    e.members.mark_unreachable(r);
  }
}

Status collect_acks(Engine& e, const OpWire& w, const BufferKey& key, std::vector<int> expect, const Parts& parts,
                    std::vector<int>* acked) {
  std::vector<Awaited> waiting;
  const auto until = transport::deadline_in(e.comm.lease_s());
  for (int r : expect)
    if (e.members.is_live(r)) waiting.push_back({r, until});
  Status first;
  while (!waiting.empty()) {
    SPARROW_RETURN_IF_ERROR(w.net.aborted());  // not the members' failure: nobody is dropped for it
    const uint64_t seen = w.net.arrivals().generation();  // before looking: nothing arriving meanwhile is missed
    std::erase_if(waiting, [&](Awaited& a) { return look_at(e, w, key, a, parts, acked, &first); });
    if (waiting.empty()) break;
    auto next = std::min_element(waiting.begin(), waiting.end(), [](auto& x, auto& y) { return x.until < y.until; });
    w.net.arrivals().wait(seen, next->until);
  }
  std::sort(acked->begin(), acked->end());
  return first;
}

}  // namespace sparrow::coll
