// SPDX-License-Identifier: Apache-2.0
#include "collectives/root_watch.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "core/log.h"
#include "core/bits.h"

namespace sparrow::coll {
namespace {

using transport::Clock;

constexpr auto kLookEvery = std::chrono::milliseconds(100);
constexpr auto kClaimAfter = std::chrono::seconds(1);
// Telling another rank of the disagreement is best effort and must not hold this rank up.
constexpr double kTellWithinS = 2;

std::string disagree(const OpWire& w) { return "ranks disagree on the root of operation " + std::to_string(w.seq) + ": "; }
std::string rank_s(int r) { return "rank " + std::to_string(r); }

// What another rank sent this one under sub 0 of operation w.seq (not from `except`): a header
// (naming its root) or an abort frame (a rank that found a disagreement first).
struct Stray {
  int from = -1;
  int root = -1;  // the header's; -1: an abort frame
  Status abort;
};

std::optional<Stray> find_stray(const OpWire& w, int except) {
  for (int p = 0; p < w.net.nranks(); ++p) {
    if (p == w.net.rank() || p == except) continue;
    auto m = w.net.poll(p, w.key(0));
    if (!m.ok()) continue;  // nothing (or that peer's mailbox failed: not this operation's concern)
    if (is_abort(m.value())) return Stray{p, -1, abort_status(m.value())};
    auto h = OpHeader::decode(m.value());
    if (!h.ok()) {
      SPARROW_WARN("%s sent an undecodable header of operation %llu: %s", rank_s(p).c_str(),
                   (unsigned long long)w.seq, h.status().message().c_str());
      continue;
    }
    return Stray{p, int(h->root), {}};
  }
  return std::nullopt;
}

OpWire briefly(const OpWire& w) { return OpWire{w.net, w.comm, w.seq, transport::deadline_in(kTellWithinS)}; }

// The rank that finds the disagreement tells every other rank (a notice, kNoticeSub), so that none
// waits for a part, a claim's answer or an acknowledgement that will not come.
Status tell_everyone(const OpWire& w, Status why) {
  std::vector<int> others;
  for (int p = 0; p < w.net.nranks(); ++p)
    if (p != w.net.rank()) others.push_back(p);
  Status s = briefly(w).send(others, kNoticeSub, share(abort_frame(why)));
  if (!s.ok()) SPARROW_INFO("could not tell every rank that %s: %s", why.message().c_str(), s.message().c_str());
  return why;
}

// A notice from a rank that found the disagreement first.
Status notice(const OpWire& w) {
  for (int p = 0; p < w.net.nranks(); ++p) {
    if (p == w.net.rank()) continue;
    auto m = w.net.poll(p, w.key(kNoticeSub));
    if (m.ok()) return abort_status(m.value());
  }
  return Status::Ok();
}

std::vector<uint8_t> claim_message(int root) {
  std::vector<uint8_t> o;
  bits::put_u32(o, uint32_t(root));
  return o;
}

// One look for what shows that ranks disagree, while waiting for the header from `from`.
Status receiver_look(const OpWire& w, int from, int root) {
  const int me = w.net.rank();
  SPARROW_RETURN_IF_ERROR(notice(w));
  if (auto s = find_stray(w, from)) {
    if (s->root < 0) return s->abort;
    if (s->root != root)
      return tell_everyone(w, Status(Code::kInvalidUsage, disagree(w) + rank_s(me) + " named root " +
                                                              std::to_string(root) + ", but the header " +
                                                              rank_s(s->from) + " sent it names root " +
                                                              std::to_string(s->root)));
  }
  for (int p = 0; p < w.net.nranks(); ++p) {
    if (p == me || !w.net.poll(p, w.key(kClaimSub)).ok()) continue;
    return tell_everyone(w, Status(Code::kInvalidUsage, disagree(w) + rank_s(p) + " named root " + std::to_string(me) +
                                                            ", " + rank_s(me) + " named root " + std::to_string(root)));
  }
  return Status::Ok();
}

// The header from `from` naming another root than this rank's (the two trees share this hop).
Result<std::vector<uint8_t>> from_parent(const OpWire& w, int from, int root, std::vector<uint8_t> m) {
  if (is_abort(m)) return m;
  auto h = OpHeader::decode(m);
  if (!h.ok() || h->root == root) return m;  // (an undecodable one is the caller's to report)
  return tell_everyone(w, Status(Code::kInvalidUsage, disagree(w) + rank_s(w.net.rank()) + " named root " +
                                                          std::to_string(root) + ", but the header " + rank_s(from) +
                                                          " sent it names root " + std::to_string(h->root)));
}

// Message `sub` of operation w.seq from `from` by `d`; `look` runs at once and every kLookEvery
// meanwhile, and its failure ends the wait.
Result<std::vector<uint8_t>> watched_recv(const OpWire& w, int from, uint32_t sub, transport::Deadline d,
                                          const std::function<Status()>& look) {
  auto look_at = Clock::now();
  for (;;) {
    const uint64_t seen = w.net.arrivals().generation();  // before looking: nothing arriving meanwhile is missed
    auto m = w.net.poll(from, w.key(sub));
    if (m.ok() || m.status().code() != Code::kTimeout) return m;
    const auto now = Clock::now();
    if (now >= look_at) {
      SPARROW_RETURN_IF_ERROR(look());
      look_at = now + kLookEvery;
    }
    if (now >= d) return w.recv(from, sub, now);  // (its timeout, worded as every receive's)
    w.net.arrivals().wait(seen, std::min(d, look_at));
  }
}

}  // namespace

Result<std::vector<uint8_t>> recv_header(const OpWire& w, int from, int root, transport::Deadline d) {
  SPARROW_RETURN_IF_ERROR(w.net.connect(from, d));
  const auto claim_at = Clock::now() + kClaimAfter;
  bool claimed = root == w.net.rank();
  auto m = watched_recv(w, from, 0, d, [&] {
    SPARROW_RETURN_IF_ERROR(receiver_look(w, from, root));
    if (!claimed && Clock::now() >= claim_at) {
      claimed = true;
      (void)briefly(w).send({root}, kClaimSub, share(claim_message(root)));
    }
    return Status::Ok();
  });
  if (!m.ok()) return m;
  return from_parent(w, from, root, std::move(m.value()));
}

Status check_no_other_root(const OpWire& w) {
  SPARROW_RETURN_IF_ERROR(notice(w));
  auto s = find_stray(w, -1);
  if (!s || s->root < 0 || s->root == w.net.rank()) return Status::Ok();
  return tell_everyone(w, Status(Code::kInvalidUsage, disagree(w) + rank_s(w.net.rank()) + " named root " +
                                                          std::to_string(w.net.rank()) + " (itself), but the header " +
                                                          rank_s(s->from) + " sent it names root " + std::to_string(s->root)));
}

Result<std::vector<uint8_t>> recv_ack(const OpWire& w, int rank, transport::Deadline d) {
  if (d <= Clock::now()) {  // one look
    auto a = w.recv(rank, kAckSub, d);
    if (!a.ok() && a.status().code() == Code::kTimeout) SPARROW_RETURN_IF_ERROR(check_no_other_root(w));
    return a;
  }
  SPARROW_RETURN_IF_ERROR(w.net.connect(rank, d));
  return watched_recv(w, rank, kAckSub, d, [&] { return check_no_other_root(w); });
}

}  // namespace sparrow::coll
