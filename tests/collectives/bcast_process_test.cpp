// sparse_bcast across processes: ranks are forked before anything is created, receive the unique id
// through a pipe, and check every step against the same deterministic weights.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/params.h"
#include "gen/generator.h"
#include "sparrow/sparrow.h"

namespace {

constexpr size_t kCount = 1 << 20;

// The weights at step s, as every rank can compute them.
std::vector<uint16_t> weights(int step) {
  std::vector<uint16_t> w(kCount);
  for (size_t i = 0; i < kCount; ++i) w[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 1024);
  for (int s = 1; s <= step; ++s) sparrow::gen::mutate_exact(w.data(), kCount, 2, 0.01, 1000 + s);
  return w;
}

// A forked rank joins: the unique id comes through the pipe. Null on failure.
sparrowComm_t join(int rank, int n, int read_fd) {
  sparrowUniqueId id;
  if (read(read_fd, &id, sizeof id) != sizeof id) return nullptr;
  sparrowComm_t comm = nullptr;
  if (sparrowCommInitRank(&comm, n, id, rank) != sparrowSuccess) return nullptr;
  return comm;
}

// Child: rank `rank`; returns 0 when every step arrived bit-exact, else the failing step + 10.
int child(int rank, int n, int read_fd, int steps) {
  sparrowComm_t comm = join(rank, n, read_fd);
  if (!comm) return 3;
  std::vector<uint16_t> buf(kCount, 0);
  for (int s = 0; s < steps; ++s) {
    if (sparrowSparseBcast(nullptr, buf.data(), kCount, sparrowBfloat16, 0, comm, nullptr) != sparrowSuccess) return 10 + s;
    if (buf != weights(s)) return 10 + s;
  }
  sparrowCommDestroy(comm);
  return 0;
}

// Child for the failure tests: every step until one fails; exits 0 when all `steps` arrived
// bit-exact, 100 + s when step s failed with sparrowPeerLost within kQuickFail seconds (the failure
// reached it, it did not wait for its timeout), 10 + s for any other failure.
constexpr double kQuickFail = 8;  // the tests' SPARROW_TIMEOUT_S is 30
int child_until_failure(int rank, int n, int read_fd, int steps) {
  sparrowComm_t comm = join(rank, n, read_fd);
  if (!comm) return 3;
  std::vector<uint16_t> buf(kCount, 0);
  for (int s = 0; s < steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    sparrowResult_t rc = sparrowSparseBcast(nullptr, buf.data(), kCount, sparrowBfloat16, 0, comm, nullptr);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rc != sparrowSuccess) fprintf(stderr, "rank %d step %d: %s\n", rank, s, sparrowGetLastError(comm));
    if (rc == sparrowPeerLost && took < kQuickFail) return 100 + s;
    if (rc != sparrowSuccess || buf != weights(s)) return 10 + s;
  }
  sparrowCommDestroy(comm);
  return 0;
}

struct Cluster {
  std::vector<pid_t> pids;
  std::vector<int> fds;
  sparrowComm_t root = nullptr;
  Cluster(int n, int steps, const char* algo = "flat", int (*body)(int, int, int, int) = child) {
    setenv("SPARROW_PROBE_MS", "50", 1);
    setenv("SPARROW_ALGO", algo, 1);
    sparrow::params::clear_overrides();  // settings are read once: make this process re-read them
    for (int r = 1; r < n; ++r) {
      int p[2];
      EXPECT_EQ(pipe(p), 0);
      pid_t pid = fork();
      if (pid == 0) _exit(body(r, n, p[0], steps));
      pids.push_back(pid);
      fds.push_back(p[1]);
    }
    sparrowUniqueId id;
    EXPECT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
    for (int fd : fds) EXPECT_EQ(write(fd, &id, sizeof id), ssize_t(sizeof id));
    EXPECT_EQ(sparrowCommInitRank(&root, n, id, 0), sparrowSuccess) << sparrowGetLastError(nullptr);
  }
  int wait_rank(int r) {
    int st = 0;
    waitpid(pids[r - 1], &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  }
  ~Cluster() {
    if (root) sparrowCommDestroy(root);
    unsetenv("SPARROW_ALGO");
    unsetenv("SPARROW_PROBE_MS");
    sparrow::params::clear_overrides();
  }
};

TEST(SparseBcastProcesses, FourProcessesManySteps) {
  const int steps = 6;
  Cluster cl(4, steps);
  for (int s = 0; s < steps; ++s) {
    auto w = weights(s);
    ASSERT_EQ(sparrowSparseBcast(w.data(), nullptr, kCount, sparrowBfloat16, 0, cl.root, nullptr), sparrowSuccess)
        << sparrowGetLastError(cl.root);
  }
  for (int r = 1; r < 4; ++r) EXPECT_EQ(cl.wait_rank(r), 0) << "rank " << r;
}

TEST(SparseBcastProcesses, KilledReceiverIsPeerLostAtTheRootNotAHang) {
  const int steps = 8;
  Cluster cl(3, steps);
  for (int s = 0; s < 2; ++s) {
    auto w = weights(s);
    ASSERT_EQ(sparrowSparseBcast(w.data(), nullptr, kCount, sparrowBfloat16, 0, cl.root, nullptr), sparrowSuccess);
  }
  kill(cl.pids[1], SIGKILL);  // rank 2
  EXPECT_EQ(cl.wait_rank(2), -SIGKILL);
  sparrowResult_t seen = sparrowSuccess;
  for (int s = 2; s < steps && seen == sparrowSuccess; ++s) {
    auto w = weights(s);
    seen = sparrowSparseBcast(w.data(), nullptr, kCount, sparrowBfloat16, 0, cl.root, nullptr);
  }
  EXPECT_EQ(seen, sparrowPeerLost) << sparrowGetLastError(cl.root);
  EXPECT_NE(std::string(sparrowGetLastError(cl.root)).find("rank 2"), std::string::npos) << sparrowGetLastError(cl.root);
  sparrowResult_t async = sparrowSuccess;
  sparrowCommGetAsyncError(cl.root, &async);
  EXPECT_EQ(async, sparrowPeerLost);
  kill(cl.pids[0], SIGKILL);  // rank 1 would wait for steps the root no longer sends
  cl.wait_rank(1);
}

// Every receiver stalls (SIGSTOP) and never acknowledges: the root's calls fail with a timeout, but
// each within one SPARROW_TIMEOUT_S, never one per missing rank. (All of them: a receiver left
// running would give up on its own timeout and close, turning the root's error into a lost peer.)
TEST(SparseBcastProcesses, StalledReceiversCostOneTimeoutNotOnePerRank) {
  setenv("SPARROW_TIMEOUT_S", "3", 1);
  {
    const int steps = 8;
    Cluster cl(4, steps);
    for (int s = 0; s < 2; ++s) {
      auto w = weights(s);
      ASSERT_EQ(sparrowSparseBcast(w.data(), nullptr, kCount, sparrowBfloat16, 0, cl.root, nullptr), sparrowSuccess);
    }
    for (int r : {1, 2, 3}) kill(cl.pids[r - 1], SIGSTOP);
    double longest = 0;
    sparrowResult_t seen = sparrowSuccess;
    for (int s = 2; s < 5 && seen == sparrowSuccess; ++s) {
      auto w = weights(s);
      auto t0 = std::chrono::steady_clock::now();
      seen = sparrowSparseBcast(w.data(), nullptr, kCount, sparrowBfloat16, 0, cl.root, nullptr);
      longest = std::max(longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    EXPECT_EQ(seen, sparrowTimeout) << sparrowGetLastError(cl.root);
    EXPECT_NE(std::string(sparrowGetLastError(cl.root)).find("no acknowledgement of operation"), std::string::npos)
        << "the wait is named: " << sparrowGetLastError(cl.root);
    EXPECT_LT(longest, 3 * 1.6) << "a call waited about one timeout per missing rank";
    for (int r : {1, 2, 3}) kill(cl.pids[r - 1], SIGKILL);
    for (int r : {1, 2, 3}) cl.wait_rank(r);
    sparrowCommAbort(cl.root);  // its peers are gone: do not wait for acknowledgements
    cl.root = nullptr;
  }
  unsetenv("SPARROW_TIMEOUT_S");
  sparrow::params::clear_overrides();
}

// The root goes away (its network aborted) between two steps, on a chain 0 -> 1 -> 2 -> 3: rank 1
// sees its parent lost; ranks 2 and 3, which never talk to the root, learn it from the abort passed
// down the chain, all within a few seconds rather than after SPARROW_TIMEOUT_S (30 s here).
TEST(SparseBcastProcesses, RootLossReachesTheWholeChainAtOnce) {
  setenv("SPARROW_TIMEOUT_S", "30", 1);
  {
    Cluster cl(4, 2, "chain", child_until_failure);
    auto w = weights(0);
    ASSERT_EQ(sparrowSparseBcast(w.data(), nullptr, kCount, sparrowBfloat16, 0, cl.root, nullptr), sparrowSuccess)
        << sparrowGetLastError(cl.root);  // the first step waits for everyone's acknowledgement
    ASSERT_EQ(sparrowCommAbort(cl.root), sparrowSuccess);
    cl.root = nullptr;
    for (int r = 1; r < 4; ++r) EXPECT_EQ(cl.wait_rank(r), 101) << "rank " << r << " (101: lost at step 1, quickly)";
  }
  unsetenv("SPARROW_TIMEOUT_S");
  sparrow::params::clear_overrides();
}

// Rank `victim` is SIGKILLed after the first step (on tree `algo`, 3 ranks); rank `survivor` still
// gets every later step bit-exact, and each of the root's calls returns well within the timeout with
// success or PeerLost naming the victim.
void survivor_gets_every_step(const char* algo, int victim, int survivor) {
  setenv("SPARROW_TIMEOUT_S", "30", 1);
  {
    const int steps = 4;
    Cluster cl(3, steps, algo, child_until_failure);
    auto w0 = weights(0);
    ASSERT_EQ(sparrowSparseBcast(w0.data(), nullptr, kCount, sparrowBfloat16, 0, cl.root, nullptr), sparrowSuccess);
    kill(cl.pids[victim - 1], SIGKILL);
    EXPECT_EQ(cl.wait_rank(victim), -SIGKILL);
    const std::string named = "rank " + std::to_string(victim);
    for (int s = 1; s < steps; ++s) {
      auto w = weights(s);
      auto t0 = std::chrono::steady_clock::now();
      sparrowResult_t rc = sparrowSparseBcast(w.data(), nullptr, kCount, sparrowBfloat16, 0, cl.root, nullptr);
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_TRUE(rc == sparrowSuccess || rc == sparrowPeerLost) << sparrowGetLastError(cl.root);
      if (rc == sparrowPeerLost) EXPECT_NE(std::string(sparrowGetLastError(cl.root)).find(named), std::string::npos);
      EXPECT_LT(took, kQuickFail) << "step " << s;
    }
    EXPECT_EQ(cl.wait_rank(survivor), 0) << "rank " << survivor << " got every step bit-exact";
    sparrowCommAbort(cl.root);  // the victim is gone: do not wait for its acknowledgements
    cl.root = nullptr;
  }
  unsetenv("SPARROW_TIMEOUT_S");
  sparrow::params::clear_overrides();
}

// A leaf of the root dies: its sibling keeps getting every step.
TEST(SparseBcastProcesses, LostChildDoesNotCostItsSiblingTheStep) { survivor_gets_every_step("flat", 2, 1); }

// The same with the first of the root's children lost: the verdict of a full step still reaches
// the ranks listed after it.
TEST(SparseBcastProcesses, LostFirstChildDoesNotCostTheRanksAfterIt) { survivor_gets_every_step("flat", 1, 2); }

// On a chain 0 -> 1 -> 2 the leaf dies: the relay (rank 1) still applies every later step
// (its failed forwarding is its child's failure, not its own).
TEST(SparseBcastProcesses, RelayWhoseChildDiedStillGetsEveryStep) { survivor_gets_every_step("chain", 2, 1); }

}  // namespace
