// Fork-join parallelism over an index range for the CPU kernels (chunks are independent).
// Work is handed out dynamically, so one slow chunk does not hold back the others.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace sparrow {

// The CPUs (OS indexes) the calling thread may run on: its affinity mask; empty if unknown.
std::vector<int> allowed_cpus();

// Threads used by CPU kernels: SPARROW_THREADS, or when 0 (the default) the CPUs sparrow's threads
// were bound to (core/affinity.h), else the CPUs the calling thread may run on (its affinity mask:
// what mpirun's --bind-to, taskset or a cgroup's cpuset left it).
int kernel_threads();

// Calls fn(i, worker) for every i in [0, n) on up to `threads` threads (the caller's thread is one of
// them); worker is in [0, threads). Returns when all calls returned.
void parallel_for(size_t n, int threads, const std::function<void(size_t i, int worker)>& fn);

}  // namespace sparrow
