// The CPUs sparrow's own threads run on (SPARROW_CPU_AFFINITY; the choice is topology/affinity.h's):
// the transport's progress threads, the encoder and apply worker pools, a staged step's receiver and
// the base verifier bind themselves to them when they start. The caller's threads are never bound.
// One set per process: the last communicator made chooses it.
#pragma once

#include <cstddef>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"

namespace sparrow::affinity {

void set_cpus(std::vector<int> cpus);  // empty: sparrow's threads are not bound
std::vector<int> cpus();
// Binds the calling thread (one sparrow started) to cpus(); nothing when they are empty or the call
// fails (a CPU that went offline): the thread then runs where the scheduler puts it.
void bind_this_thread();
// A thread of sparrow's own: it binds itself (bind_this_thread) before it runs `f`.
template <class F>
std::thread thread(F&& f) {
  return std::thread([f = std::forward<F>(f)]() mutable {
    bind_this_thread();
    f();
  });
}
// The NUMA node sparrow's large buffers (BigAlloc: the encoder's shadow, a model's mirrors) prefer:
// the one of the NIC its threads run near. -1: none (pages land where they are first touched).
// A node this host does not have is refused (false) and leaves none.
bool set_memory_node(int node);
int memory_node();
// Asks the kernel to place [p, p + bytes) (page-aligned, not yet touched) on memory_node(), as a
// preference (MPOL_PREFERRED: other nodes when it is full); nothing when there is none or the call
// fails.
void prefer_memory_node(void* p, size_t bytes);
// "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}; kInvalidArgument naming what is wrong.
Result<std::vector<int>> parse_cpu_list(const std::string& s);

}  // namespace sparrow::affinity
