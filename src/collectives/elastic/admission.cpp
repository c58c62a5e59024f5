// SPDX-License-Identifier: Apache-2.0
// Admission into an elastic communicator: the root admits the processes whose join request waits in a
// free slot (it tells each where everyone is and which operation is its first, and lists it for a
// full snapshot), publishes the slots still free, and names rejoined ranks' new places in every
// header; a joiner asks rank 0 until the slot's old member was dropped (collectives/elastic/elastic.h).
#include <poll.h>

#include <thread>

#include "collectives/elastic/elastic.h"
#include "core/log.h"

namespace sparrow::coll {
namespace {

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

// A joiner's new place: its address for this rank, its listing in this rank's headers, and a full
// snapshot of every buffer set this rank sends.
void place_joiner(Engine& e, const Place& p) {
  e.comm.set_place(p.rank, info_of(p, e.comm.net().nstreams(), e.comm));
  e.elastic.moved[p.rank] = p;
  for (auto& [key, rs] : e.roots) rs.need_resync[p.rank] = 0;
}

}  // namespace

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
    place_joiner(e, place.value());
    e.members.admit(r);
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

std::vector<int> admit_ahead(Engine& e, uint64_t seq) {
  e.elastic.admitted_seq = seq;
  e.elastic.admitted = admit_joiners(e, seq);
  return e.elastic.admitted;
}

void take_joiner(Engine& e, const Place& p, uint64_t seq) {
  if (p.rank <= 0 || p.rank >= e.comm.nranks() || p.rank == e.rank()) return;
  place_joiner(e, p);
  if (e.elastic.admitted_seq != seq) e.elastic.admitted.clear();
  e.elastic.admitted_seq = seq;
  e.elastic.admitted.push_back(p.rank);
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
  adopt_members(e, h.members);
}

void adopt_members(Engine& e, const std::vector<int32_t>& live) {
  for (int r : e.members.assign(live))
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
  e.elastic.joined_at = w.first_seq;
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

}  // namespace sparrow::coll
