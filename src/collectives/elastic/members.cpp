#include "collectives/elastic/members.h"

#include <algorithm>

#include "core/log.h"

namespace sparrow::coll {

std::vector<int> Members::live() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<int> v;
  for (size_t r = 0; r < live_.size(); ++r)
    if (live_[r]) v.push_back(int(r));
  return v;
}

bool Members::is_live(int r) const {
  std::lock_guard<std::mutex> lk(mu_);
  return r >= 0 && size_t(r) < live_.size() && live_[size_t(r)];
}

bool Members::all_live() const {
  std::lock_guard<std::mutex> lk(mu_);
  return std::all_of(live_.begin(), live_.end(), [](uint8_t x) { return x != 0; });
}

uint64_t Members::drops() const {
  std::lock_guard<std::mutex> lk(mu_);
  return drops_;
}

void Members::drop(int r, uint64_t seq, const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (r < 0 || size_t(r) >= live_.size() || !live_[size_t(r)]) return;
  live_[size_t(r)] = 0;
  ++drops_;
  SPARROW_INFO("rank %d dropped from the elastic communicator at operation %llu: %s", r, (unsigned long long)seq,
               why.c_str());
}

std::vector<int> Members::assign(const std::vector<int32_t>& live) {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<int> gone;
  for (size_t r = 0; r < live_.size(); ++r) {
    const bool in = std::find(live.begin(), live.end(), int32_t(r)) != live.end();
    if (live_[r] && !in) {
      ++drops_;
      gone.push_back(int(r));
    }
    live_[r] = in;
  }
  return gone;
}

void Members::admit(int r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (r < 0 || size_t(r) >= live_.size()) return;
  live_[size_t(r)] = 1;
  told_[size_t(r)] = 0;
}

void Members::vacate(int r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (r < 0 || size_t(r) >= live_.size()) return;
  live_[size_t(r)] = 0;
  told_[size_t(r)] = 1;
}

void Members::mark_unreachable(int r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (r >= 0 && size_t(r) < told_.size()) told_[size_t(r)] = 1;
}

bool Members::unreachable(int r) const {
  std::lock_guard<std::mutex> lk(mu_);
  return r >= 0 && size_t(r) < told_.size() && told_[size_t(r)];
}

}  // namespace sparrow::coll
