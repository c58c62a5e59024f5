// Timing of one collective across MPI ranks, shared by the benchmarks and the weight-sync demo.
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace sparrow::bench {

inline double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Waits for an MPI request without spinning: Open MPI busy-polls inside blocking calls, and on a
// small machine ranks that finished early would steal the CPU from the ranks (and the emulator)
// still working, inflating what is measured.
inline void lazy_wait(MPI_Request* r) {
  int done = 0;
  while (!done) {
    MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (!done) usleep(200);
  }
}

// Times op() (which returns non-zero on failure) from the moment every receiver is waiting in it to
// the moment the last rank returned. A barrier releases ranks up to a round trip apart on a WAN, so
// every rank tells the root it is about to call and the root starts once it heard from all. With
// one_clock (all ranks on one machine) completion times are compared on the monotonic clock;
// otherwise a barrier after the operation closes the interval. *rc: non-zero if any rank failed.
// The result is meaningful on the root, and so is *finish (when given and one_clock): every rank's
// return, in seconds after the root's start.
template <typename F>
double timed_collective(int rank, int root, int n, bool one_clock, F op, int* rc, std::vector<double>* finish = nullptr) {
  MPI_Request q;
  MPI_Ibarrier(MPI_COMM_WORLD, &q);
  lazy_wait(&q);
  char b = 1;
  if (rank == root) {
    std::vector<char> in(n);
    for (int r = 0; r < n; ++r) {
      if (r == root) continue;
      MPI_Irecv(&in[r], 1, MPI_CHAR, r, 77, MPI_COMM_WORLD, &q);
      lazy_wait(&q);
    }
  } else {
    MPI_Send(&b, 1, MPI_CHAR, root, 77, MPI_COMM_WORLD);
  }
  double t0 = now();
  *rc = op();
  double done = now();
  if (!one_clock) {
    MPI_Ibarrier(MPI_COMM_WORLD, &q);
    lazy_wait(&q);
    done = now();
  }
  // When each rank finished, from the root's start (one clock only; on the root).
  const bool trace = getenv("SPARROW_BENCH_TRACE") != nullptr;
  if (one_clock && (finish || trace)) {
    std::vector<double> all(n);
    MPI_Igather(&done, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, root, MPI_COMM_WORLD, &q);
    lazy_wait(&q);
    if (rank == root) {
      for (double& x : all) x -= t0;
      if (trace) {
        fprintf(stderr, "trace (rank:ms):");
        for (int r = 0; r < n; ++r) fprintf(stderr, " %d:%.1f", r, all[r] * 1e3);
        fprintf(stderr, "\n");
      }
      if (finish) *finish = std::move(all);
    }
  }
  double last = 0;
  MPI_Ireduce(&done, &last, 1, MPI_DOUBLE, MPI_MAX, root, MPI_COMM_WORLD, &q);
  lazy_wait(&q);
  int bad = *rc != 0, any = 0;
  MPI_Iallreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &q);
  lazy_wait(&q);
  if (any && *rc == 0) *rc = -1;
  return last - t0;
}

}  // namespace sparrow::bench
