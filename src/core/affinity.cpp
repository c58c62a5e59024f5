#include "core/affinity.h"

#include <linux/mempolicy.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

namespace sparrow::affinity {
namespace {
std::mutex mu;
std::vector<int>& chosen() {
  static std::vector<int> v;
  return v;
}
std::atomic<int> memory_node_{-1};

Result<int> cpu_number(const std::string& s, const std::string& whole) {
  if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument("'" + whole + "' is not a CPU list (like 0-3,8): '" + s + "' is not a CPU number");
  const int c = std::stoi(s);
  if (c >= CPU_SETSIZE) return InvalidArgument("'" + whole + "': CPU " + s + " is past the last this system can name");
  return c;
}
}  // namespace

void set_cpus(std::vector<int> cpus) {
  std::lock_guard<std::mutex> lk(mu);
  chosen() = std::move(cpus);
}

std::vector<int> cpus() {
  std::lock_guard<std::mutex> lk(mu);
  return chosen();
}

void bind_this_thread() {
  const std::vector<int> v = cpus();
  if (v.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : v) CPU_SET(c, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

bool set_memory_node(int node) {
  const bool exists = node >= 0 && node < 1024 &&
                      access(("/sys/devices/system/node/node" + std::to_string(node)).c_str(), F_OK) == 0;
  memory_node_.store(exists ? node : -1);
  return exists || node < 0;
}

int memory_node() { return memory_node_.load(); }

void prefer_memory_node(void* p, size_t bytes) {
  const int node = memory_node_.load();
  if (node < 0 || !p || !bytes) return;
  unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
  mask[size_t(node) / (8 * sizeof(unsigned long))] = 1ul << (size_t(node) % (8 * sizeof(unsigned long)));
  (void)syscall(SYS_mbind, p, bytes, MPOL_PREFERRED, mask, 1024ul, 0u);
}

Result<std::vector<int>> parse_cpu_list(const std::string& s) {
  std::vector<int> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = std::min(s.find(',', b), s.size());
    const std::string part = s.substr(b, e - b);
    const size_t dash = part.find('-');
    SPARROW_ASSIGN_OR_RETURN(int lo, cpu_number(part.substr(0, dash), s));
    int hi = lo;
    if (dash != std::string::npos) {
      SPARROW_ASSIGN_OR_RETURN(hi, cpu_number(part.substr(dash + 1), s));
    }
    if (hi < lo) return InvalidArgument("'" + s + "': the range " + part + " runs backwards");
    for (int c = lo; c <= hi; ++c) out.push_back(c);
    b = e + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace sparrow::affinity
