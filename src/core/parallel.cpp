#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "core/params.h"

namespace sparrow {
namespace {
params::IntParam kThreads("THREADS", 0, "CPU threads for extraction, encoding and apply (0: all cores).", 0, 1024);
}

int kernel_threads() {
  int64_t t = kThreads.get();
  if (t > 0) return static_cast<int>(t);
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

void parallel_for(size_t n, int threads, const std::function<void(size_t, int)>& fn) {
  if (n == 0) return;
  int t = std::max(1, std::min<int>(threads, static_cast<int>(std::min<size_t>(n, 1024))));
  if (t == 1) {
    for (size_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<size_t> next{0};
  auto work = [&](int w) {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i, w);
  };
  std::vector<std::thread> pool;
  pool.reserve(t - 1);
  for (int w = 1; w < t; ++w) pool.emplace_back(work, w);
  work(0);
  for (auto& th : pool) th.join();
}

}  // namespace sparrow
