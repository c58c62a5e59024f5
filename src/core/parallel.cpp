#include "core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/affinity.h"
#include "core/params.h"

namespace sparrow {
namespace {
params::IntParam kThreads("THREADS", 0,
                          "CPU threads for extraction, encoding and apply (0: the cores this process may run on).", 0,
                          1024);
}

std::vector<int> allowed_cpus() {
  std::vector<int> v;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return v;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) v.push_back(c);
  return v;
}

int kernel_threads() {
  int64_t t = kThreads.get();
  if (t > 0) return static_cast<int>(t);
  // Workers run on the CPUs SPARROW_CPU_AFFINITY chose for sparrow's threads, when it chose some.
  if (size_t n = affinity::cpus().size(); n > 0) return static_cast<int>(n);
  // The calling thread's CPU set, not the machine's: a rank that mpirun bound to one core (its default
  // for two ranks on a node) would otherwise run a worker per core of the machine on that one core.
  if (size_t n = allowed_cpus().size(); n > 0) return static_cast<int>(n);
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
  // An exception in a worker (std::bad_alloc) stops the others and is rethrown here, on the caller's
  // thread, where the C API turns it into an error; escaping a thread it would end the process.
  std::mutex mu;
  std::exception_ptr first;
  auto work = [&](int w) {
    try {
      for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i, w);
    } catch (...) {
      next.store(n);
      std::lock_guard<std::mutex> lk(mu);
      if (!first) first = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(t - 1);
  for (int w = 1; w < t; ++w) {
    try {
      pool.push_back(affinity::thread([&work, w] { work(w); }));  // (worker 0, the caller's thread, is not bound)
    } catch (const std::system_error&) {
      break;  // no thread to be had: the caller's thread does the rest
    }
  }
  work(0);
  for (auto& th : pool) th.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace sparrow
