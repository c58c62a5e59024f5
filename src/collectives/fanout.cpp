// SPDX-License-Identifier: Apache-2.0
#include "collectives/fanout.h"

#include <algorithm>

#include "core/log.h"
#include "core/params.h"

namespace sparrow::coll {

namespace {
params::BoolParam kShareStreams("SHARE_STREAMS", true,
                                "A rank sending to several children at once gives each child NSTREAMS / children of its "
                                "streams (at least one), so its uplink carries about NSTREAMS flows; 0: every stream to every child.");
}  // namespace

void Fanout::drop(int kid, const Status& why) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = std::find(live_.begin(), live_.end(), kid);
  if (it == live_.end()) return;
  live_.erase(it);
  lost_.push_back(kid);
  SPARROW_INFO("rank %d: child rank %d dropped from operation %llu (%s); its siblings go on", w_.net.rank(), kid,
               (unsigned long long)w_.seq, why.to_string().c_str());
}

size_t Fanout::streams_per_child(size_t children) const {
  if (!kShareStreams.get() || children <= 1) return 0;
  return std::max<size_t>(1, size_t(w_.net.nstreams()) / children);
}

void Fanout::send_payload(uint32_t sub, const transport::Payload& p, bool keep) {
  std::vector<int> to;
  {
    std::lock_guard<std::mutex> lk(mu_);
    to = live_;
  }
  const size_t streams = streams_per_child(to.size());
  for (int kid : to) {
    auto q = w_.net.send(kid, w_.key(sub), p, w_.deadline, streams);
    if (!q.ok()) {
      drop(kid, q.status());
      continue;
    }
    if (!keep) continue;
    std::lock_guard<std::mutex> lk(mu_);
    reqs_.emplace_back(kid, q.value());
  }
}

void Fanout::send(uint32_t sub, const Frame& m) { send_payload(sub, transport::Payload{m->data(), m->size(), m}, track_); }

// Borrowed memory is waited for in finish() whatever `track_` says.
void Fanout::send_borrowed(uint32_t sub, const uint8_t* p, size_t n) {
  send_payload(sub, transport::Payload{p, n, nullptr}, true);
}

void Fanout::finish() {
  std::vector<std::pair<int, transport::SendRequestPtr>> reqs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    reqs.swap(reqs_);
  }
  for (auto& [kid, r] : reqs) {
    Status s = r->wait(w_.deadline);
    if (!s.ok()) drop(kid, s);
  }
}

void Fanout::set_children(std::vector<int> children) {
  std::lock_guard<std::mutex> lk(mu_);
  kids_ = std::move(children);
  live_ = kids_;
}

void Fanout::adopt(int kid, const std::vector<std::pair<uint32_t, transport::Payload>>& backlog) {
  size_t siblings;
  {
    std::lock_guard<std::mutex> lk(mu_);
    siblings = live_.size();
  }
  const size_t streams = streams_per_child(siblings + 1);
  for (const auto& [sub, p] : backlog) {
    auto q = w_.net.send(kid, w_.key(sub), p, w_.deadline, streams);
    if (!q.ok()) return;  // (not a child yet: nothing to drop)
    std::lock_guard<std::mutex> lk(mu_);
    reqs_.emplace_back(kid, q.value());
  }
  std::lock_guard<std::mutex> lk(mu_);
  kids_.push_back(kid);
  live_.push_back(kid);
}

void Fanout::preconnect(transport::Deadline d) {
  std::vector<int> to;
  {
    std::lock_guard<std::mutex> lk(mu_);
    to = live_;
  }
  for (int kid : to) {
    Status s = w_.net.connect(kid, d);
    if (!s.ok()) drop(kid, s);
  }
}

std::vector<int> Fanout::children() const {
  std::lock_guard<std::mutex> lk(mu_);
  return kids_;
}

std::vector<int> Fanout::lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_;
}

}  // namespace sparrow::coll
