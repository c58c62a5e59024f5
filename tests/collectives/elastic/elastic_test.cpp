// Elastic communicators (collectives/elastic.*, members.*, the elastic parts of relay and sink), on
// forked processes: every rank is a child of the test (so the root may die too), each arms an alarm
// so a hang fails the test instead of blocking it, and reports through its exit code; the root also
// writes its step times and final member list to a pipe.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/api_internal.h"
#include "bootstrap/bootstrap.h"
#include "collectives/protocol.h"
#include "core/params.h"
#include "gen/generator.h"
#include "harness/comm_harness.h"
#include "sparrow/sparrow.h"
#include "transport/channel.h"
#include "transport/transport.h"
#include "transport/loopback/loopback.h"

namespace {

constexpr size_t kCount = 1 << 20;
constexpr int kLeaseMs = 1500;

std::vector<uint16_t> weights(int step, size_t count = kCount) {
  std::vector<uint16_t> w(count);
  for (size_t i = 0; i < count; ++i) w[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 1024);
  for (int s = 1; s <= step; ++s) sparrow::gen::mutate_exact(w.data(), count, 2, 0.01, 2000 + s);
  return w;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

enum class Fault { kNone, kKillBetweenSteps, kKillMidStep, kStop, kRootDies };

struct Plan {
  int n = 4;
  int steps = 5;
  const char* algo = "flat";
  int victim = -1;      // the rank the fault hits
  int fault_step = 2;   // at this step
  Fault fault = Fault::kNone;
  bool rejoin = false;  // a new process joins the victim's slot once it died (the root then runs until
                        // it has had kAfterJoin steps with every rank a member again)
  bool any_slot = false;  // the joiner asks for any free slot (*rank = -1) instead of naming it
  const char* regions = nullptr;  // one letter per rank (SPARROW_REGION); the joiner takes the victim's
  int seeder = -1;  // the rank that must send the joiner its first, full version (not the root)
  bool dense = false;  // every step a dense sparrowBroadcast of the whole version instead
  size_t count = kCount;  // bf16 elements per step
  bool joiner_keeps = false;  // the joiner starts with the version the victim held (a restarted worker
                              // that kept its weights): it must catch up by deltas, not a snapshot
  bool grow = false;  // nobody dies: the joiner takes vacant slot n (the ranks run with SPARROW_MAX_RANKS
                      // = n + 1), asking once the root reached fault_step (needs rejoin)
  int orphan = -1;  // in fault_step, this rank must not end the step attached to the root (rank 0): its
                    // parent either served it whole or died and a rank of its region adopted it
};

// The slot the joiner takes, and the members once it is in.
int joiner_slot(const Plan& p) { return p.grow ? p.n : p.victim; }
int members_when_whole(const Plan& p) { return p.grow ? p.n + 1 : p.n; }

// One step's call on any rank (the root's buffer is both send and receive buffer).
sparrowResult_t step_call(const Plan& p, sparrowComm_t comm, const void* send, void* recv) {
  if (p.dense) return sparrowBroadcast(send ? send : recv, recv, p.count, sparrowBfloat16, 0, comm, nullptr);
  return sparrowSparseBcast(send, recv, p.count, sparrowBfloat16, 0, comm, nullptr);
}

void set_region(const Plan& p, int rank) {
  if (p.regions && rank < int(strlen(p.regions))) setenv("SPARROW_REGION", std::string(1, p.regions[rank]).c_str(), 1);
}

// Bytes this rank received from `peer` in its last operation (-1: none listed).
long long received_from(sparrowComm_t comm, int peer) {
  sparrowPeerStats ps[64];
  int n = 0;
  if (sparrowCommGetPeerStats(comm, ps, 64, &n) != sparrowSuccess) return -1;
  for (int i = 0; i < n && i < 64; ++i)
    if (ps[i].rank == peer) return (long long)ps[i].bytesReceived;
  return 0;
}
// This rank's parent at the end of its last operation (the stats JSON; -1: none or unreadable).
int last_parent(sparrowComm_t comm) {
  size_t need = 0;
  if (sparrowCommGetStatsJson(comm, nullptr, 0, &need) != sparrowSuccess) return -1;
  std::string j(need, '\0');
  if (sparrowCommGetStatsJson(comm, j.data(), j.size(), &need) != sparrowSuccess) return -1;
  const size_t at = j.find("\"parent\":");
  return at == std::string::npos ? -1 : atoi(j.c_str() + at + 9);
}
constexpr int kAfterJoin = 3, kMaxSteps = 400;

sparrowComm_t open_comm(const sparrowUniqueId& id, int rank, int n, int lease_ms = kLeaseMs) {
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  cfg.elastic = 1;
  cfg.leaseMs = lease_ms;
  sparrowComm_t comm = nullptr;
  if (sparrowCommInitRankConfig(&comm, n, id, rank, &cfg) != sparrowSuccess) return nullptr;
  return comm;
}

// Ranks as threads of this process: every rank's communicator (null where its init failed).
std::vector<sparrowComm_t> open_threads(const sparrowUniqueId& id, int n, int lease_ms) {
  std::vector<sparrowComm_t> c(size_t(n), nullptr);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { c[size_t(r)] = open_comm(id, r, n, lease_ms); });
  for (auto& t : ts) t.join();
  return c;
}

// The root: every step must succeed (unless the plan kills it); then it writes each step's seconds
// and the members to `out`, and waits for a byte on `hold` before it goes (a dropped rank that was
// stopped is resumed meanwhile and must learn from the root that it is out).
int root_body(const sparrowUniqueId& id, const Plan& p, int out, int hold, int go) {
  sparrowComm_t comm = open_comm(id, 0, p.n);
  if (!comm) return 3;
  std::vector<double> took;
  std::vector<uint16_t> w(p.count);  // one buffer: its address keys the root's state
  int members[64], nlive = 0, whole_again = -1;
  bool seen_drop = false;
  for (int s = 0; s < (p.rejoin ? kMaxSteps : p.steps); ++s) {
    if (p.fault == Fault::kRootDies && s == p.fault_step) raise(SIGKILL);
    if (p.grow && s == p.fault_step && (write(go, "x", 1) != 1 || close(go) != 0)) return 8;  // the joiner's go
    const auto next = weights(s, p.count);
    std::copy(next.begin(), next.end(), w.begin());
    auto t0 = std::chrono::steady_clock::now();
    sparrowResult_t rc = step_call(p, comm, w.data(), p.dense ? w.data() : nullptr);
    took.push_back(since(t0));
    if (rc != sparrowSuccess) {
      fprintf(stderr, "root step %d: %s\n", s, sparrowGetLastError(comm));
      return 10 + std::min(s, 80);
    }
    if (sparrowCommGetMembers(comm, members, 64, &nlive) != sparrowSuccess) return 4;
    seen_drop = seen_drop || nlive < p.n || p.grow;
    if (p.rejoin && seen_drop && nlive == members_when_whole(p) && whole_again < 0) whole_again = s;  // its first step
    if (p.rejoin && whole_again >= 0 && s == whole_again + kAfterJoin) break;
  }
  if (p.rejoin && whole_again < 0) return 7;  // nobody joined
  const int nsteps = int(took.size());
  if (write(out, &nsteps, sizeof nsteps) < 0 || write(out, took.data(), took.size() * sizeof(double)) < 0 ||
      write(out, &nlive, sizeof nlive) < 0 || write(out, members, size_t(nlive) * sizeof(int)) < 0)
    return 5;
  char b;
  if (read(hold, &b, 1) != 1) return 6;
  sparrowCommDestroy(comm);
  return 0;
}

// The victim's fault at its step: dies before the call, dies once part of the step arrived (a staged
// receive forwards in the background meanwhile), or stops (the test resumes it later).
void hit(sparrowComm_t comm, const Plan& p, std::vector<uint16_t>& buf) {
  if (p.fault == Fault::kKillBetweenSteps) raise(SIGKILL);
  if (p.fault == Fault::kStop) raise(SIGSTOP);
  if (p.fault != Fault::kKillMidStep) return;
  if (p.dense) {
    // Killed by a thread of its own while it forwards the step's segments to its child: the progress
    // counts the current operation (the last step's whole size until this call begins, then from 0).
    // Should the thread miss the moment, it kills once the call is over.
    unsigned long long last = 0;
    sparrowCommGetProgress(comm, nullptr, &last, nullptr);
    std::thread([comm, last] {
      for (bool began = false;;) {
        unsigned long long sent = 0;
        int in_call = 0;
        sparrowCommGetProgress(comm, nullptr, &sent, &in_call);
        began = began || in_call;
        if ((sent >= (256u << 10) && sent + (256u << 10) < last) || (began && !in_call)) raise(SIGKILL);
        std::this_thread::yield();
      }
    }).detach();
    return;
  }
  sparrowSparseBcastStage(nullptr, buf.data(), p.count, sparrowBfloat16, 0, comm, nullptr);
  for (unsigned long long got = 0; got == 0;) {
    sparrowCommGetProgress(comm, &got, nullptr, nullptr);
    std::this_thread::yield();
  }
  raise(SIGKILL);
}

// A receiver: 0 when every step arrived bit-exact; 100 + s when step s returned sparrowPeerLost
// within the lease and a second with its buffer holding step s-1 (the root died, or this rank was
// dropped); 10 + s for anything else.
int receiver_body(const sparrowUniqueId& id, const Plan& p, int rank) {
  sparrowComm_t comm = open_comm(id, rank, p.n);
  if (!comm) return 3;
  std::vector<uint16_t> buf(p.count, 0);
  for (int s = 0; s < (p.rejoin ? kMaxSteps : p.steps); ++s) {
    if (rank == p.victim && s == p.fault_step) hit(comm, p, buf);
    auto t0 = std::chrono::steady_clock::now();
    sparrowResult_t rc = step_call(p, comm, nullptr, buf.data());
    const double t = since(t0);
    if (rank == p.orphan && s == p.fault_step && rc == sparrowSuccess && last_parent(comm) == 0) {
      fprintf(stderr, "rank %d step %d: re-attached to the root, not adopted in its region\n", rank, s);
      return 40 + s;
    }
    if (rc == sparrowSuccess && buf == weights(s, p.count)) continue;
    fprintf(stderr, "rank %d step %d: %s (%.2f s)\n", rank, s, sparrowGetLastError(comm), t);
    const bool intact = buf == (s > 0 ? weights(s - 1, p.count) : std::vector<uint16_t>(p.count, 0));
    // With a joiner the root runs until everyone is back: its going away ends the others' loops.
    if (p.rejoin && rc == sparrowPeerLost && intact && s > p.fault_step + kAfterJoin) return 0;
    if (rc == sparrowPeerLost && t < kLeaseMs / 1000.0 + 1 && intact) return 100 + s;
    return 10 + s;
  }
  sparrowCommDestroy(comm);
  return 0;
}

// The process that joins the victim's slot (forked at the start like the others): waits for the
// test's go, joins, and checks that its first step brought the whole version of some step s0 and
// that the next kAfterJoin steps arrive bit-exact. 0 on success; 30 + k on a failure at call k.
int joiner_body(const sparrowUniqueId& id, const Plan& p, int go) {
  char b;
  if (read(go, &b, 1) != 1) return 2;
  const int slot = joiner_slot(p);
  set_region(p, slot);
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  cfg.elastic = 1;
  int rank = p.any_slot ? -1 : slot;
  sparrowComm_t comm = nullptr;
  if (sparrowCommJoin(&comm, id, &cfg, &rank) != sparrowSuccess || rank != slot) {
    fprintf(stderr, "join (got slot %d): %s\n", rank, sparrowGetLastError(nullptr));
    return 29;
  }
  int mine = -1;
  if (sparrowCommUserRank(comm, &mine) != sparrowSuccess || mine != slot) return 28;
  std::vector<uint16_t> buf = p.joiner_keeps ? weights(p.fault_step - 1, p.count) : std::vector<uint16_t>(p.count, 0);
  int s0 = -1;
  for (int k = 0; k <= kAfterJoin; ++k) {
    if (step_call(p, comm, nullptr, buf.data()) != sparrowSuccess) {
      fprintf(stderr, "joiner call %d: %s\n", k, sparrowGetLastError(comm));
      return 30 + k;
    }
    if (k == 0) {
      for (int s = p.fault_step; s < p.fault_step + 100 && s0 < 0; ++s)
        if (buf == weights(s, p.count)) s0 = s;
      if (s0 < 0) return 30;  // not a whole version of any step
      // Seeded: the whole version came from the seeder; from the root at most this step's delta
      // (when the root is the joiner's parent), several times smaller.
      const long long seeded = received_from(comm, p.seeder), rooted = received_from(comm, 0);
      if (p.seeder >= 0 && !(seeded > 4 * rooted)) {
        fprintf(stderr, "joiner: %lld bytes from rank %d, %lld from the root\n", seeded, p.seeder, rooted);
        return 27;
      }
      // Kept its weights: a catch-up by the deltas since, not a snapshot.
      sparrowStats st = SPARROW_STATS_INITIALIZER;
      if (p.joiner_keeps && (sparrowCommGetStats(comm, &st) != sparrowSuccess || st.catchUps != 1 || st.resyncs != 1)) {
        fprintf(stderr, "joiner: %llu catch-up(s) of %llu resync(s), %lld bytes from the root\n", st.catchUps,
                st.resyncs, rooted);
        return 26;
      }
    } else if (buf != weights(s0 + k, p.count)) {
      return 30 + k;
    }
  }
  sparrowCommDestroy(comm);
  return 0;
}

struct Outcome {
  std::vector<int> exit;        // [rank]: exit code, or -signal
  std::vector<double> took;     // the root's seconds per step
  std::vector<int> members;     // the root's members at the end
  int joiner_exit = -100;       // the process that joined the victim's slot (Plan::rejoin)
};

int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st); }

Outcome run(const Plan& p) {
  setenv("SPARROW_PROBE_MS", "50", 1);
  setenv("SPARROW_ALGO", p.algo, 1);
  setenv("SPARROW_TIMEOUT_S", "30", 1);
  setenv("SPARROW_CHUNK_ELEMS", "65536", 1);  // 16 parts per step: a death can land between them
  setenv("SPARROW_SEGMENT_BYTES", "65536", 1);  // 32 dense segments per step, likewise
  if (p.grow) setenv("SPARROW_MAX_RANKS", std::to_string(p.n + 1).c_str(), 1);
  sparrow::params::clear_overrides();
  signal(SIGPIPE, SIG_IGN);  // a rank that died early must not take the test down with it
  int out[2], hold[2];
  EXPECT_EQ(pipe(out), 0);
  EXPECT_EQ(pipe(hold), 0);
  // Ranks are forked before anything starts a thread (a child forked while another thread holds a
  // lock may never get it). Rank 0 makes the id, so its rendezvous store lives (and, elastic, serves
  // joiners) in the root's process, as with a trainer; it comes up through `up`.
  int up[2];
  EXPECT_EQ(pipe(up), 0);
  std::vector<pid_t> pids;
  std::vector<int> id_fds;
  int go[2] = {-1, -1};
  pid_t joiner = -1;
  if (p.rejoin) {
    int idp[2];
    EXPECT_EQ(pipe(idp), 0);
    EXPECT_EQ(pipe(go), 0);
    joiner = fork();
    if (joiner == 0) {
      alarm(60);
      sparrowUniqueId id;
      if (read(idp[0], &id, sizeof id) != ssize_t(sizeof id)) _exit(2);
      _exit(joiner_body(id, p, go[0]));
    }
    close(idp[0]);
    close(go[0]);
    id_fds.push_back(idp[1]);
  }
  for (int r = 0; r < p.n; ++r) {
    int idp[2];
    EXPECT_EQ(pipe(idp), 0);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(60);  // a hang ends as SIGALRM, not as a stuck test
      set_region(p, r);
      sparrowUniqueId id;
      if (r == 0) {
        if (sparrowGetUniqueId(&id) != sparrowSuccess || write(up[1], &id, sizeof id) != ssize_t(sizeof id)) _exit(2);
        _exit(root_body(id, p, out[1], hold[0], go[1]));
      }
      if (read(idp[0], &id, sizeof id) != ssize_t(sizeof id)) _exit(2);
      _exit(receiver_body(id, p, r));
    }
    close(idp[0]);
    pids.push_back(pid);
    id_fds.push_back(idp[1]);
  }
  close(out[1]);
  close(hold[0]);
  sparrowUniqueId id;
  EXPECT_EQ(read(up[0], &id, sizeof id), ssize_t(sizeof id));
  close(up[0]);
  close(up[1]);
  for (int fd : id_fds) {
    EXPECT_EQ(write(fd, &id, sizeof id), ssize_t(sizeof id));
    close(fd);
  }
  Outcome o;
  o.exit.assign(size_t(p.n), 0);
  if (p.rejoin) {  // the victim dies first (it kills itself), then the new process joins its slot
    int st = 0;
    if (!p.grow) waitpid(pids[size_t(p.victim)], &st, 0);
    if (!p.grow) o.exit[size_t(p.victim)] = exit_code(st);
    if (!p.grow) EXPECT_EQ(write(go[1], "x", 1), 1);  // (growing, the root says when)
    close(go[1]);
  }
  int nlive = 0, nsteps = 0;
  if (read(out[0], &nsteps, sizeof nsteps) == ssize_t(sizeof nsteps) && nsteps > 0 && nsteps <= kMaxSteps) o.took.assign(size_t(nsteps), -1);
  if (!o.took.empty() &&
      read(out[0], o.took.data(), o.took.size() * sizeof(double)) == ssize_t(o.took.size() * sizeof(double)) &&
      read(out[0], &nlive, sizeof nlive) == ssize_t(sizeof nlive) && nlive > 0 && nlive <= members_when_whole(p)) {
    o.members.resize(size_t(nlive));
    EXPECT_EQ(read(out[0], o.members.data(), o.members.size() * sizeof(int)), ssize_t(nlive * sizeof(int)));
  }
  // The root is done: a stopped victim resumes and runs its remaining calls before the root goes.
  if (p.fault == Fault::kStop) {
    kill(pids[size_t(p.victim)], SIGCONT);
    int st = 0;
    waitpid(pids[size_t(p.victim)], &st, 0);
    o.exit[size_t(p.victim)] = exit_code(st);
  }
  if (p.fault != Fault::kRootDies) {  // (a dead root's pipe would SIGPIPE us)
    EXPECT_EQ(write(hold[1], "x", 1), 1);
  }
  for (int r = 0; r < p.n; ++r) {
    if ((p.fault == Fault::kStop || p.rejoin) && r == p.victim) continue;
    int st = 0;
    waitpid(pids[size_t(r)], &st, 0);
    o.exit[size_t(r)] = exit_code(st);
  }
  if (joiner > 0) {
    int st = 0;
    waitpid(joiner, &st, 0);
    o.joiner_exit = exit_code(st);
  }
  close(out[0]);
  close(hold[1]);
  for (const char* v : {"SPARROW_PROBE_MS", "SPARROW_ALGO", "SPARROW_TIMEOUT_S", "SPARROW_CHUNK_ELEMS",
                        "SPARROW_SEGMENT_BYTES", "SPARROW_MAX_RANKS"})
    unsetenv(v);
  sparrow::params::clear_overrides();
  return o;
}

std::vector<int> all_but(int n, int gone) {
  std::vector<int> v;
  for (int r = 0; r < n; ++r)
    if (r != gone) v.push_back(r);
  return v;
}

// The root and every member but the victim got every step; the victim ended as `victim_exit`; the
// root's members are everyone else.
void expect_only_the_victim_lost(const Outcome& o, const Plan& p, int victim_exit) {
  for (int r = 0; r < p.n; ++r) EXPECT_EQ(o.exit[size_t(r)], r == p.victim ? victim_exit : 0) << "rank " << r;
  EXPECT_EQ(o.members, all_but(p.n, p.victim));
}

TEST(ElasticConfig, BadConfigsAreInvalidArgumentBeforeAnythingStarts) {
  sparrowUniqueId id{};
  sparrowComm_t comm = nullptr;
  auto try_cfg = [&](void (*edit)(sparrowConfig_t&)) {
    sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
    edit(cfg);
    return sparrowCommInitRankConfig(&comm, 2, id, 0, &cfg);
  };
  EXPECT_EQ(try_cfg([](sparrowConfig_t& c) { c.magic = 0; }), sparrowInvalidArgument);
  EXPECT_EQ(try_cfg([](sparrowConfig_t& c) { c.size = 8; }), sparrowInvalidArgument);
  EXPECT_EQ(try_cfg([](sparrowConfig_t& c) { c.elastic = 2; }), sparrowInvalidArgument);
  EXPECT_EQ(try_cfg([](sparrowConfig_t& c) { c.elastic = 1, c.leaseMs = 50; }), sparrowInvalidArgument);
  EXPECT_EQ(try_cfg([](sparrowConfig_t& c) { c.elastic = 1, c.leaseMs = -1; }), sparrowInvalidArgument);
  EXPECT_EQ(try_cfg([](sparrowConfig_t& c) { c.leaseMs = 1000; }), sparrowInvalidArgument);  // not elastic
  EXPECT_EQ(try_cfg([](sparrowConfig_t& c) { c.region = ""; }), sparrowInvalidArgument);
  EXPECT_EQ(try_cfg([](sparrowConfig_t& c) { c.region = "us east"; }), sparrowInvalidArgument);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("region"), std::string::npos);
  EXPECT_EQ(comm, nullptr);
  int nlive = 0;
  EXPECT_EQ(sparrowCommGetMembers(nullptr, nullptr, 0, &nlive), sparrowInvalidArgument);
  // sparrowCommJoin: a slot must be named, the config must be elastic.
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  int rank = 0;
  EXPECT_EQ(sparrowCommJoin(&comm, id, nullptr, &rank), sparrowInvalidArgument) << "rank 0 is the root";
  rank = -2;
  EXPECT_EQ(sparrowCommJoin(&comm, id, nullptr, &rank), sparrowInvalidArgument) << "-1 is any slot, -2 nothing";
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("-1 (any free slot)"), std::string::npos);
  rank = 2;
  EXPECT_EQ(sparrowCommJoin(&comm, id, &cfg, &rank), sparrowInvalidArgument) << "not elastic";
  EXPECT_EQ(sparrowCommJoin(&comm, id, nullptr, nullptr), sparrowInvalidArgument);
  cfg.elastic = 1;
  EXPECT_EQ(sparrowCommJoin(&comm, id, &cfg, &rank), sparrowInvalidArgument) << "not a sparrow unique id";
  EXPECT_EQ(comm, nullptr);
}

// Ranks that disagree on elastic fail at creation, every one of them, naming both kinds.
TEST(ElasticConfig, RanksThatDisagreeOnElasticAllFail) {
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  sparrowResult_t rc[2];
  std::string why[2];
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
      cfg.elastic = r == 0;
      sparrowComm_t c = nullptr;
      rc[r] = sparrowCommInitRankConfig(&c, 2, id, r, &cfg);
      why[r] = sparrowGetLastError(nullptr);
      if (c) sparrowCommDestroy(c);
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(rc[r], sparrowInvalidUsage) << why[r];
    EXPECT_NE(why[r].find("not elastic"), std::string::npos) << why[r];
  }
}

TEST(Elastic, EveryMemberGetsEveryStepAndTheRootListsThemAll) {
  Plan p;
  Outcome o = run(p);
  for (int r = 0; r < p.n; ++r) EXPECT_EQ(o.exit[size_t(r)], 0) << "rank " << r;
  EXPECT_EQ(o.members, all_but(p.n, -1));
}

// A leaf dies between two steps: it is dropped, the root and the other members succeed at every step.
TEST(Elastic, DeadLeafIsDroppedAndTheOthersSucceed) {
  Plan p;
  p.victim = 2;
  p.fault = Fault::kKillBetweenSteps;
  expect_only_the_victim_lost(run(p), p, -SIGKILL);
}

// On a chain 0 -> 1 -> 2 -> 3 the relay rank 1 dies in the middle of a step (once part of it arrived
// and was forwarded): rank 2 re-attaches to the root and takes the rest; ranks 2 and 3 get every
// step bit-exact, and later steps run over the members left.
TEST(Elastic, RelayDyingMidStepIsReplacedByTheRoot) {
  Plan p;
  p.algo = "chain";
  p.victim = 1;
  p.fault = Fault::kKillMidStep;
  expect_only_the_victim_lost(run(p), p, -SIGKILL);  // rank 2 (the orphan) re-attached; rank 3 unaffected
}

// The relay stops (SIGSTOP) before a step: its child re-attaches once its patience runs out, the root
// drops the relay when its lease runs out, and that step costs the root about one lease, no more.
// Resumed later, the dropped rank is told it is out (sparrowPeerLost), its buffer as it was.
// Chain 0 -> 1 -> 2 -> 3, relay 1 stopped at the fault step and resumed once the root is done.
Plan stalled_relay(bool dense) {
  Plan p;
  p.dense = dense;
  p.algo = "chain";
  p.victim = 1;
  p.fault = Fault::kStop;
  return p;
}

// The others got every step; the affected step cost the root about one lease; the relay, resumed,
// was told it is out (its stopped step arrived before the drop was known, or failed).
void expect_stalled_relay_dropped(const Outcome& o, const Plan& p) {
  EXPECT_EQ(o.exit[0], 0);
  EXPECT_EQ(o.exit[2], 0);
  EXPECT_EQ(o.exit[3], 0);
  EXPECT_EQ(o.members, all_but(p.n, 1));
  const double lease = kLeaseMs / 1000.0;
  ASSERT_GT(o.took[size_t(p.fault_step)], 0);
  EXPECT_LT(o.took[size_t(p.fault_step)], lease * 1.5 + 1) << "the affected step took more than the lease";
  EXPECT_GE(o.exit[1], 100 + p.fault_step) << "exit " << o.exit[1];
  EXPECT_LT(o.exit[1], 100 + p.steps) << "exit " << o.exit[1];
}

TEST(Elastic, StalledRelayIsDroppedWithinTheLeaseAndLearnsItLater) {
  const Plan p = stalled_relay(false);
  Outcome o = run(p);
  expect_stalled_relay_dropped(o, p);
  for (int s = p.fault_step + 1; s < p.steps; ++s) EXPECT_LT(o.took[size_t(s)], kLeaseMs / 2000.0) << "step " << s;
}

// A leaf stalls in the first step, whose arguments every rank must agree on: the root drops it after
// the lease and still gives the others their verdict; resumed, the leaf's verdict says it is out
// (sparrowPeerLost, its buffer untouched).
TEST(Elastic, LeafStalledInTheFirstStepIsToldItIsOut) {
  Plan p;
  p.victim = 3;
  p.fault = Fault::kStop;
  p.fault_step = 0;
  expect_only_the_victim_lost(run(p), p, 100);  // 100: sparrowPeerLost at step 0, buffer untouched
}

// Rank 2, a leaf, dies between steps; a new process joins its slot (sparrowCommJoin) while the root
// goes on.
Plan dead_leaf_replaced(bool dense) {
  Plan p;
  p.dense = dense;
  p.victim = 2;
  p.fault = Fault::kKillBetweenSteps;
  p.rejoin = true;
  return p;
}

void expect_replaced(const Outcome& o, const Plan& p) {
  EXPECT_EQ(o.exit[0], 0) << "the root's every call succeeded and the slot was taken again";
  for (int r = 1; r < p.n; ++r) EXPECT_EQ(o.exit[size_t(r)], r == p.victim ? -SIGKILL : 0) << "rank " << r;
  EXPECT_EQ(o.joiner_exit, 0) << "29: the join failed; 30 + k: its call k failed or had other bits";
  EXPECT_EQ(o.members, all_but(p.n, -1));
}

// Its first step brings it a whole version, the next ones deltas, bit-exact; the root lists every rank
// again and no other rank missed a step.
TEST(Elastic, NewProcessJoinsTheSlotOfADeadRank) {
  const Plan p = dead_leaf_replaced(false);
  expect_replaced(run(p), p);
}

// The same with a joiner that names no slot (*rank = -1): the store gives it the one the root let go
// of (the joiner may ask before the drop: it waits for a slot to free).
TEST(Elastic, NewProcessAsksForAnyFreeSlotAndGetsTheDeadRanks) {
  Plan p;
  p.victim = 3;
  p.fault = Fault::kKillBetweenSteps;
  p.rejoin = true;
  p.any_slot = true;
  Outcome o = run(p);
  EXPECT_EQ(o.exit[0], 0) << "the root's every call succeeded and the slot was taken again";
  EXPECT_EQ(o.exit[3], -SIGKILL);
  EXPECT_EQ(o.exit[1], 0);
  EXPECT_EQ(o.exit[2], 0);
  EXPECT_EQ(o.joiner_exit, 0) << "29: the join failed or gave another slot; 30 + k: its call k failed";
  EXPECT_EQ(o.members, all_but(p.n, -1));
}

// A restarted worker that kept its weights (its buffer holds the version the dead rank had) joins:
// the root recognises that version by the digests the joiner sends and catches it up by the retained
// deltas since, not a full snapshot.
TEST(Elastic, JoinerThatKeptItsWeightsCatchesUpByDeltas) {
  Plan p;
  p.victim = 2;
  p.fault = Fault::kKillBetweenSteps;
  p.rejoin = true;
  p.joiner_keeps = true;
  p.regions = "aaaa";  // one region: no member seeds it a snapshot (regions inferred from RTTs under a
                       // loaded machine, e.g. ASan, could put the joiner beside a seeder)
  Outcome o = run(p);
  EXPECT_EQ(o.exit[0], 0);
  EXPECT_EQ(o.exit[1], 0);
  EXPECT_EQ(o.exit[3], 0);
  EXPECT_EQ(o.joiner_exit, 0) << "26: its first step was a snapshot; 29: the join failed; 30 + k: call k";
  EXPECT_EQ(o.members, all_but(p.n, -1));
}

// A joiner in a region with a member that holds the version gets its first, full version from that
// member, not across the WAN from the root (regions a,a,b,b: rank 2 seeds the joiner of slot 3).
TEST(Elastic, JoinerGetsItsFullVersionFromAMemberOfItsRegion) {
  Plan p;
  p.algo = "region_tree";
  p.regions = "aabb";
  p.victim = 3;
  p.seeder = 2;
  p.fault = Fault::kKillBetweenSteps;
  p.rejoin = true;
  Outcome o = run(p);
  EXPECT_EQ(o.exit[0], 0);
  EXPECT_EQ(o.exit[1], 0);
  EXPECT_EQ(o.exit[2], 0);
  EXPECT_EQ(o.joiner_exit, 0) << "27: the whole version did not come from rank 2; 29: the join failed; 30 + k: call k";
  EXPECT_EQ(o.members, all_but(p.n, -1));
}

// A chain 0 -> 1 -> 2 -> 3 with ranks 1-3 in one region: rank 2 dies while it forwards a step. Its
// child asks rank 1 (its region, above rank 2) to adopt it before it asks the root, and rank 1 takes
// it on, whether it is still receiving the step or has returned from it already (its relay serves
// until the next step's header), so rank 3 never ends the step attached to the root (unless rank 2
// forwarded it all before it died: then its parent is still rank 2); every survivor gets every step
// bit-exact. (Before relays served after their call returned, rank 1 adopted it in 3 of 8 runs.)
TEST(Elastic, ChildOfARelayDyingMidStepIsAdoptedInItsRegionNotServedByTheRoot) {
  Plan p;
  p.algo = "chain";
  p.regions = "abbb";
  p.victim = 2;
  p.fault = Fault::kKillMidStep;
  p.orphan = 3;
  Outcome o = run(p);
  expect_only_the_victim_lost(o, p, -SIGKILL);
}

// The communicator grows (SPARROW_MAX_RANKS = 4 for 3 ranks in regions a,a,b): a new process in
// region b joins vacant slot 3 while nobody died; its first, full version comes from rank 2, its
// region's member, not across the WAN from the root; every rank gets every step.
TEST(Elastic, NewProcessGrowsTheCommunicatorAndIsSeededInItsRegion) {
  Plan p;
  p.n = 3;
  p.algo = "region_tree";
  p.regions = "aabb";  // (the joiner's, slot 3: b)
  p.seeder = 2;
  p.rejoin = true;
  p.grow = true;
  Outcome o = run(p);
  for (int r = 0; r < p.n; ++r) EXPECT_EQ(o.exit[size_t(r)], 0) << "rank " << r;
  EXPECT_EQ(o.joiner_exit, 0) << "27: the whole version did not come from rank 2; 29: the join failed; 30 + k: call k";
  EXPECT_EQ(o.members, (std::vector<int>{0, 1, 2, 3}));
}

// The root dies between steps: every receiver returns sparrowPeerLost within the lease, its buffer
// holding the last version bit for bit.
TEST(Elastic, RootDeathReachesEveryReceiverWithItsBufferIntact) {
  Plan p;
  p.algo = "chain";
  p.fault = Fault::kRootDies;
  Outcome o = run(p);
  EXPECT_EQ(o.exit[0], -SIGKILL);
  for (int r = 1; r < p.n; ++r) EXPECT_EQ(o.exit[size_t(r)], 100 + p.fault_step) << "rank " << r;
}

// Dense broadcasts (sparrowBroadcast) on an elastic communicator: a leaf dies between steps; every
// later step reaches the members left, bit-exact (they failed with sparrowInvalidUsage once a member
// had been dropped).
TEST(ElasticDense, DeadLeafIsDroppedAndTheOthersSucceed) {
  Plan p;
  p.dense = true;
  p.victim = 2;
  p.fault = Fault::kKillBetweenSteps;
  expect_only_the_victim_lost(run(p), p, -SIGKILL);
}

// On a chain 0 -> 1 -> 2 -> 3 the relay rank 1 dies once part of a dense step arrived: rank 2
// re-attaches to the root and takes the segments from the one it waited for on.
TEST(ElasticDense, RelayDyingMidStepIsReplacedByTheRoot) {
  Plan p;
  p.dense = true;
  p.count = 4 << 20;  // 8 MiB, 128 segments: the relay dies while it forwards them
  p.algo = "chain";
  p.victim = 1;
  p.fault = Fault::kKillMidStep;
  expect_only_the_victim_lost(run(p), p, -SIGKILL);
}

// The same in regions a,b,b,b with relay rank 2 killed: rank 3 asks rank 1 (its region, above rank
// 2) to adopt it first; rank 1 serves it from the segments it holds if it is still receiving, else
// rank 3 takes the rest from the root. Either way every survivor gets every step.
TEST(ElasticDense, ChildOfARelayDyingMidStepIsAdoptedInItsRegionOrServedByTheRoot) {
  Plan p;
  p.dense = true;
  p.count = 4 << 20;
  p.algo = "chain";
  p.n = 6;
  p.regions = "abbbbb";
  p.victim = 2;
  p.fault = Fault::kKillMidStep;
  expect_only_the_victim_lost(run(p), p, -SIGKILL);
}

// The relay stops before a dense step: its child re-attaches once its patience runs out, the root
// drops the relay within the lease, the step costs about one lease; resumed, the relay is told it is
// out, its buffer as it was.
TEST(ElasticDense, StalledRelayIsDroppedWithinTheLease) {
  const Plan p = stalled_relay(true);
  expect_stalled_relay_dropped(run(p), p);
}

// A leaf dies; a new process joins its slot and its first call is a dense broadcast: the root admits
// it there (joiners were admitted only by sparse broadcasts), and it gets every step whole, bit-exact.
TEST(ElasticDense, NewProcessJoinsTheSlotOfADeadRank) {
  const Plan p = dead_leaf_replaced(true);
  expect_replaced(run(p), p);
}

// The root dies between two dense steps: every receiver returns sparrowPeerLost within the lease,
// its buffer holding the last step bit for bit (segments land in staging, not in the buffer).
TEST(ElasticDense, RootDeathLeavesEveryBufferIntact) {
  Plan p;
  p.dense = true;
  p.algo = "chain";
  p.fault = Fault::kRootDies;
  Outcome o = run(p);
  EXPECT_EQ(o.exit[0], -SIGKILL);
  for (int r = 1; r < p.n; ++r) EXPECT_EQ(o.exit[size_t(r)], 100 + p.fault_step) << "rank " << r;
}

}  // namespace

namespace {

// Ranks as threads (so ThreadSanitizer sees the elastic paths too): a member is aborted between two
// steps (its connections close, like a process that died); the root drops it and the others succeed.
TEST(ElasticThreads, AbortedMemberIsDroppedAndTheOthersSucceed) {
  setenv("SPARROW_PROBE_MS", "20", 1);
  setenv("SPARROW_ALGO", "chain", 1);  // 0 -> 1 -> 2 -> 3: the aborted rank 1 is a relay
  sparrow::params::clear_overrides();
  const int n = 4;
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  std::vector<sparrowComm_t> c = open_threads(id, n, 2000);
  for (auto x : c) ASSERT_NE(x, nullptr);
  std::vector<std::thread> ts;
  std::vector<uint16_t> src(1 << 16);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t(i * 7);
  std::vector<std::vector<uint16_t>> dst(n, std::vector<uint16_t>(src.size(), 0));
  std::vector<sparrowResult_t> rc(n);
  auto step = [&](const std::vector<int>& ranks) {
    for (int r : ranks)
      ts.emplace_back([&, r] {
        rc[size_t(r)] = sparrowSparseBcast(src.data(), r ? dst[size_t(r)].data() : nullptr, src.size(),
                                           sparrowBfloat16, 0, c[size_t(r)], nullptr);
      });
    for (auto& t : ts) t.join();
    ts.clear();
  };
  step({0, 1, 2, 3});
  for (int r = 0; r < n; ++r) EXPECT_EQ(rc[size_t(r)], sparrowSuccess);
  ASSERT_EQ(sparrowCommAbort(c[1]), sparrowSuccess);
  c[1] = nullptr;
  for (int s = 1; s < 4; ++s) {
    src[size_t(s) * 100] ^= 0x55;
    step({0, 2, 3});
    for (int r : {0, 2, 3}) EXPECT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r << " step " << s;
    for (int r : {2, 3}) EXPECT_EQ(dst[size_t(r)], src) << "rank " << r << " step " << s;
  }
  int live[8], nlive = 0;
  ASSERT_EQ(sparrowCommGetMembers(c[0], live, 8, &nlive), sparrowSuccess);
  EXPECT_EQ(std::vector<int>(live, live + nlive), (std::vector<int>{0, 2, 3}));
  ASSERT_EQ(sparrowCommGetMembers(c[3], live, 8, &nlive), sparrowSuccess);
  EXPECT_EQ(nlive, 3) << "a receiver learns the members from the header";
  for (int r : {0, 2, 3}) sparrowCommDestroy(c[size_t(r)]);
  unsetenv("SPARROW_PROBE_MS");
  unsetenv("SPARROW_ALGO");
  sparrow::params::clear_overrides();
}

// Ranks as threads: 4 elastic members (lease 1 s) in regions a, b, b, b, so that under SPARROW_ALGO=chain
// rank 1 is the adopter of rank 3 (null where an init failed).
std::vector<sparrowComm_t> open_chain_abbb() { return sparrow::test::open_elastic(4, 1000, {"a", "b", "b", "b"}); }

// Ranks as threads, a chain 0 -> 1 -> 2 -> 3 with ranks 1-3 in one region; rank 2 stalls (it skips
// a step). Rank 1's call returns at its acknowledgement, long before rank 3 gives up on rank 2, and
// rank 1 calls the next step at once; rank 3 then asks rank 1 to adopt it, and rank 1, its call over,
// still serves it from the frames it kept (until the next step's header comes: the root starts it
// only once rank 3 acknowledged). Before, only the root could serve rank 3 once rank 1 had returned.
TEST(ElasticThreads, RelayWhoseCallReturnedStillAdoptsAnOrphanOfItsRegion) {
  setenv("SPARROW_PROBE_MS", "20", 1);
  setenv("SPARROW_ALGO", "chain", 1);
  sparrow::params::clear_overrides();
  const int n = 4;
  std::vector<sparrowComm_t> c = open_chain_abbb();
  for (auto x : c) ASSERT_NE(x, nullptr);
  // Steps 0, 1, 2 (the versions in `want`; the root sends each from the same buffer, so that steps 1
  // and 2 are deltas): rank 2 calls only step 0.
  std::vector<std::vector<uint16_t>> want(3, std::vector<uint16_t>(1 << 16));
  for (size_t i = 0; i < want[0].size(); ++i) want[0][i] = uint16_t(i * 7);
  for (int k = 1; k < 3; ++k) {
    want[size_t(k)] = want[size_t(k) - 1];
    for (size_t i = size_t(k); i < want[0].size(); i += 97) want[size_t(k)][i] ^= 0x55;
  }
  std::vector<uint16_t> src;
  std::vector<std::vector<uint16_t>> dst(n, std::vector<uint16_t>(want[0].size(), 0));
  std::vector<std::vector<sparrowResult_t>> rc(3, std::vector<sparrowResult_t>(n, sparrowInternalError));
  std::vector<long long> from1(3, -1);
  auto call = [&](int r, int k) {
    if (r == 0) src = want[size_t(k)];
    rc[size_t(k)][size_t(r)] = sparrowSparseBcast(src.data(), r ? dst[size_t(r)].data() : nullptr, want[0].size(),
                                                  sparrowBfloat16, 0, c[size_t(r)], nullptr);
    if (r == 3) from1[size_t(k)] = received_from(c[3], 1);
  };
  src = want[0];
  {
    std::vector<std::thread> ts;
    for (int r = 1; r < n; ++r) ts.emplace_back(call, r, 0);
    call(0, 0);
    for (auto& t : ts) t.join();
  }
  for (int r = 0; r < n; ++r) ASSERT_EQ(rc[0][size_t(r)], sparrowSuccess) << "rank " << r << ", step 0";
  std::thread root([&] {
    call(0, 1);
    call(0, 2);
  });
  std::mutex mu;
  std::condition_variable cv;
  bool returned = false;
  std::thread mid([&] {
    call(1, 1);
    {
      std::lock_guard<std::mutex> lk(mu);
      returned = true;
    }
    cv.notify_all();
    call(1, 2);  // at once, as a training loop does
  });
  {
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(30), [&] { return returned; }));
  }
  std::thread leaf([&] {  // rank 1 has returned from step 1 by now
    call(3, 1);
    call(3, 2);
  });
  leaf.join();
  mid.join();
  root.join();
  for (int k = 1; k < 3; ++k)
    for (int r : {0, 1, 3}) EXPECT_EQ(rc[size_t(k)][size_t(r)], sparrowSuccess) << "rank " << r << ", step " << k;
  for (int r : {1, 3}) EXPECT_EQ(dst[size_t(r)], want[2]) << "rank " << r;
  EXPECT_GT(from1[1], 0) << "rank 1 adopted rank 3 in step 1 after its own call had returned";
  int live[8], nlive = 0;
  ASSERT_EQ(sparrowCommGetMembers(c[0], live, 8, &nlive), sparrowSuccess);
  EXPECT_EQ(std::vector<int>(live, live + nlive), (std::vector<int>{0, 1, 3})) << "rank 2 dropped at its lease";
  ASSERT_EQ(sparrowCommAbort(c[2]), sparrowSuccess);
  for (int r : {0, 1, 3}) EXPECT_EQ(sparrowCommDestroy(c[size_t(r)]), sparrowSuccess);
  unsetenv("SPARROW_PROBE_MS");
  unsetenv("SPARROW_ALGO");
  sparrow::params::clear_overrides();
}

// A relay that may adopt (chain 0 -> 1 -> 2 -> 3, ranks 1-3 in one region: rank 1 may adopt rank 3)
// keeps serving after every step until the next one's header; destroying or aborting its
// communicator meanwhile stops it at once (its thread, and the sends it holds), not at the
// operation's timeout.
TEST(ElasticThreads, LingeringRelayEndsWithItsCommunicator) {
  setenv("SPARROW_PROBE_MS", "20", 1);
  setenv("SPARROW_ALGO", "chain", 1);
  sparrow::params::clear_overrides();
  for (bool abort : {false, true}) {
    const int n = 4;
    std::vector<sparrowComm_t> c = open_chain_abbb();
    for (auto x : c) ASSERT_NE(x, nullptr);
    std::vector<uint16_t> src(1 << 14, 7);
    std::vector<std::vector<uint16_t>> dst(n, std::vector<uint16_t>(src.size(), 0));
    for (int step = 0; step < 2; ++step) {
      src[size_t(step)] ^= 1;
      std::vector<sparrowResult_t> rc(n, sparrowInternalError);
      std::vector<std::thread> ts;
      for (int r = 0; r < n; ++r)
        ts.emplace_back([&, r] {
          rc[size_t(r)] = sparrowSparseBcast(src.data(), r ? dst[size_t(r)].data() : nullptr, src.size(),
                                             sparrowBfloat16, 0, c[size_t(r)], nullptr);
        });
      for (auto& t : ts) t.join();
      for (int r = 0; r < n; ++r) ASSERT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r << ", step " << step;
    }
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(abort ? sparrowCommAbort(c[1]) : sparrowCommDestroy(c[1]), sparrowSuccess);
    EXPECT_LT(since(t0), 2.0) << (abort ? "abort" : "destroy") << " waited for the lingering relay";
    for (int r : {0, 2, 3}) EXPECT_EQ(sparrowCommDestroy(c[size_t(r)]), sparrowSuccess);
  }
  unsetenv("SPARROW_PROBE_MS");
  unsetenv("SPARROW_ALGO");
  sparrow::params::clear_overrides();
}

// Ranks as threads (ThreadSanitizer sees the admission inside a dense operation): rank 2 is aborted,
// a joiner thread takes its slot while ranks 0 and 1 go on with dense broadcasts; the root admits it
// at one of them, and from then on it gets every step bit-exact.
TEST(ElasticThreads, DenseBroadcastAdmitsAJoinerIntoAnAbortedMembersSlot) {
  setenv("SPARROW_PROBE_MS", "20", 1);
  setenv("SPARROW_ALGO", "flat", 1);
  sparrow::params::clear_overrides();
  const int n = 3;
  const size_t count = 1 << 16;
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  std::vector<sparrowComm_t> c = open_threads(id, n, kLeaseMs);
  for (auto x : c) ASSERT_NE(x, nullptr);
  ASSERT_EQ(sparrowCommAbort(c[2]), sparrowSuccess);  // its connections close: the root drops it
  c[2] = nullptr;
  std::vector<uint16_t> src(count), dst(count, 0);
  std::atomic<int> joiner_rc{-1};
  std::vector<uint16_t> joiner_got(count, 0);
  std::thread joiner([&] {
    sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
    cfg.elastic = 1;
    int slot = 2;
    sparrowComm_t jc = nullptr;
    if (sparrowCommJoin(&jc, id, &cfg, &slot) != sparrowSuccess) return;
    joiner_rc = sparrowBroadcast(nullptr, joiner_got.data(), count, sparrowBfloat16, 0, jc, nullptr);
    sparrowCommDestroy(jc);  // (the root drops it again at its next step, or destroys first)
  });
  int live[8], nlive = 0, s = 0;
  for (; s < 200 && nlive < n; ++s) {
    for (size_t i = 0; i < count; ++i) src[i] = uint16_t(i * 31 + size_t(s));
    sparrowResult_t rc1 = sparrowInternalError;
    std::thread r1([&] { rc1 = sparrowBroadcast(nullptr, dst.data(), count, sparrowBfloat16, 0, c[1], nullptr); });
    ASSERT_EQ(sparrowBroadcast(src.data(), src.data(), count, sparrowBfloat16, 0, c[0], nullptr), sparrowSuccess);
    r1.join();
    ASSERT_EQ(rc1, sparrowSuccess) << "step " << s;
    ASSERT_EQ(dst, src) << "step " << s;
    ASSERT_EQ(sparrowCommGetMembers(c[0], live, 8, &nlive), sparrowSuccess);
  }
  EXPECT_EQ(nlive, n) << "the joiner was never admitted";
  joiner.join();
  EXPECT_EQ(joiner_rc.load(), sparrowSuccess);
  EXPECT_EQ(joiner_got, src) << "the step that admitted it, whole";
  for (int r : {0, 1}) sparrowCommDestroy(c[size_t(r)]);
  unsetenv("SPARROW_PROBE_MS");
  unsetenv("SPARROW_ALGO");
  sparrow::params::clear_overrides();
}

// A join request that came over only some of the slot's streams (the others were refused: the
// joiner's attempt straddled the drop of the slot's member) must not hold the root up: a welcome over
// that slot would wait for the missing streams, a lease, while the members wait for their step. The
// root leaves the request until the slot is whole; the step costs what a step costs.
// A dense broadcast that lasts several leases (8 MiB in 64 KiB segments along a chain over the
// in-process transport, every frame delivered 20 ms late; lease 600 ms): the members keep telling the root they are
// receiving, so nobody is dropped and every rank gets it bit-exact. (Without the heartbeats the root
// dropped every member a lease after it had queued the data.)
TEST(ElasticThreads, DenseBroadcastLongerThanTheLeaseDropsNobody) {
  setenv("SPARROW_PROBE_MS", "20", 1);
  setenv("SPARROW_ALGO", "chain", 1);
  setenv("SPARROW_TRANSPORT", "loopback", 1);
  setenv("SPARROW_SEGMENT_BYTES", "65536", 1);
  sparrow::params::clear_overrides();
  const int n = 4, lease_ms = 600;
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  std::vector<sparrowComm_t> c = open_threads(id, n, lease_ms);
  for (auto x : c) ASSERT_NE(x, nullptr);
  std::vector<std::thread> ts;
  for (int r = 1; r < n; ++r) {
    sparrow::transport::LoopbackFaults slow;
    slow.delay_us = 20000;
    ASSERT_TRUE(sparrow::transport::set_loopback_faults(sparrow::comm_impl(c[size_t(r)])->net().address(), slow));
  }
  const size_t count = size_t(4) << 20;  // bf16: 8 MiB
  std::vector<uint16_t> src(count);
  for (size_t i = 0; i < count; ++i) src[i] = uint16_t(i * 2654435761u >> 7);
  std::vector<std::vector<uint16_t>> dst(n, std::vector<uint16_t>(count, 0));
  std::vector<sparrowResult_t> rc(n);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      rc[size_t(r)] = sparrowBroadcast(src.data(), r ? dst[size_t(r)].data() : src.data(), count, sparrowBfloat16, 0,
                                       c[size_t(r)], nullptr);
    });
  for (auto& t : ts) t.join();
  const double took = since(t0);
  for (int r = 0; r < n; ++r) EXPECT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r;
  for (int r = 1; r < n; ++r) EXPECT_TRUE(dst[size_t(r)] == src) << "rank " << r;
  int live[8], nlive = 0;
  ASSERT_EQ(sparrowCommGetMembers(c[0], live, 8, &nlive), sparrowSuccess);
  EXPECT_EQ(nlive, n);
  EXPECT_GT(took, 2 * lease_ms / 1000.0) << "the broadcast must outlast the lease for this test to mean anything";
  for (int r = 1; r < n; ++r)
    sparrow::transport::set_loopback_faults(sparrow::comm_impl(c[size_t(r)])->net().address(), {});
  for (int r = 0; r < n; ++r) sparrowCommDestroy(c[size_t(r)]);
  for (const char* v : {"SPARROW_PROBE_MS", "SPARROW_ALGO", "SPARROW_TRANSPORT", "SPARROW_SEGMENT_BYTES"}) unsetenv(v);
  sparrow::params::clear_overrides();
}

// SPARROW_MAX_RANKS: a communicator of 3 ranks that may grow to 5. Its slots 3 and 4 start vacant
// (not members; sparrowCommCount counts them); a joiner that names slot 4 and one that names none
// (the store hands it slot 3, the lowest free) are admitted, and from then on all five get every
// step bit-exact. A value below nranks is refused.
TEST(ElasticThreads, JoinersGrowTheCommunicatorIntoVacantSlots) {
  setenv("SPARROW_PROBE_MS", "20", 1);
  setenv("SPARROW_ALGO", "binomial", 1);  // the joiners relay to each other or the others
  setenv("SPARROW_MAX_RANKS", "2", 1);
  setenv("SPARROW_TIMEOUT_S", "20", 1);  // should a step fail, the joiners' waits end too
  sparrow::params::clear_overrides();
  const int n = 3, slots = 5;
  const size_t count = 1 << 16;
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  EXPECT_EQ(open_comm(id, 0, n), nullptr);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("SPARROW_MAX_RANKS=2 is below"), std::string::npos)
      << sparrowGetLastError(nullptr);
  setenv("SPARROW_MAX_RANKS", "5", 1);
  sparrow::params::clear_overrides();
  // Every step's version, for the joiners to tell which step a call brought.
  std::mutex mu;
  std::vector<std::vector<uint16_t>> versions;
  auto step_of = [&](const std::vector<uint16_t>& got) {
    std::lock_guard<std::mutex> lk(mu);
    for (int s = int(versions.size()) - 1; s >= 0; --s)
      if (versions[size_t(s)] == got) return s;
    return -1;
  };
  std::atomic<int> last{-1};  // the root's last step, once it knows it
  // Each joiner: its slot, then calls until the root's last step: the first brings a whole version,
  // each later one the next step's, bit-exact. calls[j]: how many did (-1: one failed or was wrong).
  std::vector<int> slot(2, -2), calls(2, 0);
  std::vector<std::thread> joiners;
  for (int j = 0; j < 2; ++j)
    joiners.emplace_back([&, j] {
      sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
      cfg.elastic = 1;
      int rank = j == 0 ? 4 : -1;
      sparrowComm_t jc = nullptr;
      if (sparrowCommJoin(&jc, id, &cfg, &rank) != sparrowSuccess) return;
      slot[size_t(j)] = rank;
      std::vector<uint16_t> got(count, 0);
      for (int prev = -1;;) {
        const int s = sparrowSparseBcast(nullptr, got.data(), count, sparrowBfloat16, 0, jc, nullptr) == sparrowSuccess
                          ? step_of(got) : -1;
        if (s < 0 || (prev >= 0 && s != prev + 1)) {
          calls[size_t(j)] = -1;
          break;
        }
        calls[size_t(j)]++;
        prev = s;
        if (last >= 0 && s >= last) break;
      }
      sparrowCommDestroy(jc);
    });
  // The joiners started first: they ask the store again until every rank registered. (From here on
  // a failure ends the steps, not the test: the joiner threads must be joined.)
  std::vector<sparrowComm_t> c = open_threads(id, n, kLeaseMs);
  bool up = std::find(c.begin(), c.end(), nullptr) == c.end();
  EXPECT_TRUE(up);
  int count_seen = 0, live[8], nlive = 0;
  if (up) {
    EXPECT_EQ(sparrowCommCount(c[1], &count_seen), sparrowSuccess);
    EXPECT_EQ(count_seen, slots);
    EXPECT_EQ(sparrowCommGetMembers(c[0], live, 8, &nlive), sparrowSuccess);
    EXPECT_EQ(std::vector<int>(live, live + nlive), (std::vector<int>{0, 1, 2}));
  }
  std::vector<std::vector<uint16_t>> dst(n, std::vector<uint16_t>(count, 0));
  std::vector<uint16_t> src(count);  // one buffer: its address keys the root's state
  std::vector<int> members_when_whole;
  for (int s = 0, whole = -1; up && s < 200 && (whole < 0 || s <= whole + kAfterJoin); ++s) {
    {
      std::lock_guard<std::mutex> lk(mu);
      versions.push_back(weights(s, count));
      src = versions.back();
    }
    std::vector<sparrowResult_t> rc(n, sparrowInternalError);
    std::vector<std::thread> ts;
    for (int r = 1; r < n; ++r)
      ts.emplace_back([&, r] {
        rc[size_t(r)] =
            sparrowSparseBcast(nullptr, dst[size_t(r)].data(), count, sparrowBfloat16, 0, c[size_t(r)], nullptr);
      });
    rc[0] = sparrowSparseBcast(src.data(), nullptr, count, sparrowBfloat16, 0, c[0], nullptr);
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r << " step " << s;
      if (r > 0) EXPECT_EQ(dst[size_t(r)], src) << "rank " << r << " step " << s;
      up = up && rc[size_t(r)] == sparrowSuccess && (r == 0 || dst[size_t(r)] == src);
    }
    EXPECT_EQ(sparrowCommGetMembers(c[0], live, 8, &nlive), sparrowSuccess);
    if (nlive == slots && whole < 0) {
      whole = s;
      last = s + kAfterJoin;
      members_when_whole.assign(live, live + nlive);
    }
  }
  for (auto& t : joiners) t.join();
  EXPECT_EQ(members_when_whole, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(slot, (std::vector<int>{4, 3})) << "-2: the join failed";
  for (int j = 0; j < 2; ++j) EXPECT_GT(calls[size_t(j)], kAfterJoin) << "-1: a call failed or brought other bits";
  if (c[2]) EXPECT_EQ(sparrowCommGetMembers(c[2], live, 8, &nlive), sparrowSuccess);
  EXPECT_EQ(nlive, slots) << "a receiver learns the members from the header";
  for (int r = 0; r < n; ++r)
    if (c[size_t(r)]) sparrowCommDestroy(c[size_t(r)]);
  for (const char* v : {"SPARROW_PROBE_MS", "SPARROW_ALGO", "SPARROW_MAX_RANKS", "SPARROW_TIMEOUT_S"}) unsetenv(v);
  sparrow::params::clear_overrides();
}

TEST(ElasticThreads, JoinRequestOverPartOfTheStreamsDoesNotHoldTheRootUp) {
  setenv("SPARROW_PROBE_MS", "20", 1);
  setenv("SPARROW_ALGO", "flat", 1);
  setenv("SPARROW_NSTREAMS", "4", 1);
  sparrow::params::clear_overrides();
  const int n = 3;
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  std::vector<sparrowComm_t> c = open_threads(id, n, kLeaseMs);
  for (auto x : c) ASSERT_NE(x, nullptr);
  std::vector<std::thread> ts;
  std::vector<uint16_t> src = weights(0);  // one buffer: its address keys the root's state
  auto next = [&](int step) {
    const auto w = weights(step);
    std::copy(w.begin(), w.end(), src.begin());
  };
  std::vector<std::vector<uint16_t>> dst(n, std::vector<uint16_t>(kCount, 0));
  std::vector<sparrowResult_t> rc(n);
  auto step = [&](const std::vector<int>& ranks) {
    for (int r : ranks)
      ts.emplace_back([&, r] {
        rc[size_t(r)] = sparrowSparseBcast(src.data(), r ? dst[size_t(r)].data() : nullptr, kCount, sparrowBfloat16,
                                           0, c[size_t(r)], nullptr);
      });
    for (auto& t : ts) t.join();
    ts.clear();
  };
  step({0, 1, 2});
  ASSERT_EQ(sparrowCommAbort(c[2]), sparrowSuccess);  // its connections close: the root drops it
  c[2] = nullptr;
  next(1);
  step({0, 1});
  ASSERT_EQ(rc[0], sparrowSuccess);
  ASSERT_EQ(rc[1], sparrowSuccess);
  // A "joiner" for slot 2 that proves the secret on stream 0 only and sends its request there.
  auto idd = sparrow::bootstrap::decode_id(reinterpret_cast<const uint8_t*>(id.internal));
  ASSERT_TRUE(idd.ok());
  sparrow::transport::BackendOptions bo;
  bo.identity = {idd->comm_id, 2, idd->secret};
  bo.bind_host = "127.0.0.1";
  auto be = sparrow::transport::create_backend("tcp", bo);
  ASSERT_TRUE(be.ok()) << be.status().to_string();
  sparrow::transport::Mailbox answers("rank 0", 4);
  auto& root_net = sparrow::comm_impl(c[0])->net();
  auto conn = be.value()->connect(root_net.address(), 0, 0, &answers, sparrow::transport::deadline_in(10));
  ASSERT_TRUE(conn.ok()) << conn.status().to_string();
  sparrow::transport::Channel ch({conn.value()});
  auto req = std::make_shared<std::vector<uint8_t>>(
      sparrow::coll::encode_place(sparrow::coll::Place{2, be.value()->listen([](auto&) { return nullptr; }).value(),
                                                       "localhost", ""}));
  const uint64_t seen = root_net.arrivals().generation();
  ASSERT_TRUE(ch.send(sparrow::transport::MsgKey{idd->comm_id, 0, sparrow::coll::kJoinSub},
                      sparrow::transport::Payload{req->data(), req->size(), req})
                  ->wait(sparrow::transport::deadline_in(10))
                  .ok());
  root_net.arrivals().wait(seen, sparrow::transport::deadline_in(10));  // the request is at the root
  next(2);
  auto t0 = std::chrono::steady_clock::now();
  step({0, 1});
  const double took = since(t0);
  EXPECT_EQ(rc[0], sparrowSuccess) << sparrowGetLastError(c[0]);
  EXPECT_EQ(rc[1], sparrowSuccess) << sparrowGetLastError(c[1]);
  EXPECT_EQ(dst[1], src);
  EXPECT_LT(took, kLeaseMs / 2000.0) << "the root waited for the joiner's missing streams";
  int live[8], nlive = 0;
  ASSERT_EQ(sparrowCommGetMembers(c[0], live, 8, &nlive), sparrowSuccess);
  EXPECT_EQ(std::vector<int>(live, live + nlive), (std::vector<int>{0, 1})) << "admitted over one stream of four";
  ch.close();
  for (int r : {0, 1}) sparrowCommDestroy(c[size_t(r)]);
  for (const char* v : {"SPARROW_PROBE_MS", "SPARROW_ALGO", "SPARROW_NSTREAMS"}) unsetenv(v);
  sparrow::params::clear_overrides();
}

}  // namespace
