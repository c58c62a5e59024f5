#include "collectives/ack_window.h"

#include "collectives/resync.h"
#include "collectives/root_watch.h"
#include "core/log.h"

namespace sparrow::coll {

void AckWindow::post(uint64_t seq, BufferKey key, std::vector<int> ranks) {
  if (!ranks.empty()) pending_.push_back(Pending{seq, std::move(key), std::move(ranks)});
}

std::vector<int> AckWindow::missing(uint64_t seq) const {
  for (const auto& p : pending_)
    if (p.seq == seq) return p.ranks;
  return {};
}

Status AckWindow::take(const std::vector<uint8_t>& bytes, int rank, uint64_t seq, const BufferKey& key) {
  SPARROW_ASSIGN_OR_RETURN(Ack a, Ack::decode(bytes, "rank " + std::to_string(rank)));
  if (a.resync && on_resync_) on_resync_(key, rank, a.holds);
  return read_ack(a, rank, seq);
}

bool AckWindow::drain_one(const OpWire& w, int me, Pending& p, bool block, Status* first) {
  const OpWire op = w.for_seq(p.seq);
  for (auto it = p.ranks.begin(); it != p.ranks.end();) {
    if (!block && *it < me && !w.net.has_channel(*it)) {
      ++it;
      continue;
    }
    auto a = recv_ack(op, *it, block ? w.deadline : transport::Clock::now());
    if (!a.ok() && a.status().code() == Code::kTimeout && !block) {
      ++it;
      continue;
    }
    if (!a.ok() && a.status().code() == Code::kInvalidUsage) {
      // Ranks disagree on the root: those not heard from yet may never answer (they named another
      // root). Each gets a full snapshot at the next operation instead of its acknowledgement's
      // catch-up: one that failed this operation holds an older version and waits for its resync.
      if (first->ok()) *first = a.status();
      if (on_resync_)
        for (int r : p.ranks) on_resync_(p.key, r, 0);
      p.ranks.clear();
      return true;
    }
    Status s = a.ok() ? take(a.value(), *it, p.seq, p.key) : a.status();
    if (!s.ok() && first->ok()) *first = std::move(s);
    it = p.ranks.erase(it);
  }
  return p.ranks.empty();
}

Status AckWindow::drain(const OpWire& w, int me, size_t window) {
  Status first;
  while (!pending_.empty()) {
    const bool block = pending_.size() > window;
    if (!drain_one(w, me, pending_.front(), block, &first)) break;
    pending_.pop_front();
  }
  return first;
}

Status AckWindow::drain_for(const OpWire& w, int me, const BufferKey& key) {
  Status first;
  for (auto it = pending_.begin(); it != pending_.end();)
    it = drain_one(w, me, *it, it->key == key, &first) ? pending_.erase(it) : std::next(it);
  return first;
}

void AckWindow::forget_before(const OpWire& w, uint64_t seq) const {
  size_t n = 0;
  for (uint32_t sub : {kClaimSub, kNoticeSub}) n += w.net.discard_sub_before(w.comm, oldest(seq), sub);
  if (n) SPARROW_TRACE("root: dropped %zu claim(s) and notice(s) of earlier operations", n);
}

Status AckWindow::agree(const OpWire& w, const std::vector<int>& ranks) {
  Status first;
  for (int r : ranks) {
    auto a = recv_ack(w, r, w.deadline);
    if (!a.ok() && a.status().code() == Code::kInvalidUsage) return a.status();  // ranks disagree on the root
    Status s = a.ok() ? take(a.value(), r, w.seq, {}) : a.status();
    if (!s.ok() && first.ok()) first = std::move(s);
  }
  return first;
}

}  // namespace sparrow::coll
