// sparrow-fault-bench: randomized faults on an elastic communicator, on forked processes over loopback.
// Each run forks --ranks ranks in --regions regions (SPARROW_REGION), runs --steps sparse steps from
// rank 0, and at a random moment of a random step SIGKILLs or SIGSTOPs a random receiver (a relay or a
// leaf; sometimes mid-step, sometimes between steps). It counts hangs (a rank still running after its
// watchdog), wrong bits (a call that returned success with a buffer other than the root's version),
// torn buffers (a failed call that left neither the old nor the new version) and survivors that missed
// a step, and reports the root's time for the affected step against a normal one. After half of the
// kills a replacement process joins the dead rank's slot and must get bit-exact steps from then on.
// --dense: every step a dense sparrowBroadcast of the whole buffer instead.
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/args.h"
#include "gen/generator.h"
#include "sparrow/sparrow.h"

namespace {

constexpr const char* kProg = "sparrow-fault-bench";

struct Options {
  int runs = 20, ranks = 8, regions = 4, steps = 20, lease_ms = 1500;
  uint64_t seed = 1, elems = 1 << 20;
  std::string algo = "region_tree";
  bool json = false, dense = false;
};

// One step's call (the root's buffer is its send and receive buffer).
sparrowResult_t step_call(const Options& o, sparrowComm_t comm, const uint16_t* send, uint16_t* recv, size_t n) {
  if (o.dense) return sparrowBroadcast(send ? send : recv, recv ? recv : const_cast<uint16_t*>(send), n, sparrowBfloat16, 0, comm, nullptr);
  return sparrowSparseBcast(send, recv, n, sparrowBfloat16, 0, comm, nullptr);
}

enum class Fault { kKill, kStop };

struct Plan {
  int victim = 1, step = 2;
  Fault fault = Fault::kKill;
  int delay_us = 0;    // after the root starts that step
  bool rejoin = false;  // a new process joins the killed victim's slot (sparrowCommJoin)
};

// Exit codes of a rank (a signal shows as -signal).
constexpr int kOk = 0, kInit = 3, kWrongBits = 50, kTorn = 70, kFailedIntact = 100;

// What every rank expects at each step: one buffer mutated in place, step by step.
struct Weights {
  std::vector<uint16_t> w;
  explicit Weights(uint64_t n) : w(n) {
    for (size_t i = 0; i < n; ++i) w[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 1024);
  }
  void step(int s) { sparrow::gen::mutate_exact(w.data(), w.size(), 2, 0.01, 5000 + uint64_t(s)); }
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

sparrowComm_t open_comm(int fd, int rank, const Options& o) {
  sparrowUniqueId id;
  if (read(fd, &id, sizeof id) != ssize_t(sizeof id)) return nullptr;
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  cfg.elastic = 1;
  cfg.leaseMs = o.lease_ms;
  std::string region = "region" + std::to_string(rank * o.regions / o.ranks);
  cfg.region = region.c_str();
  sparrowComm_t comm = nullptr;
  if (sparrowCommInitRankConfig(&comm, o.ranks, id, rank, &cfg) != sparrowSuccess) return nullptr;
  return comm;
}

// The root: before each step writes (step, start ns), after it (step, -seconds*1e9) on `out`; every
// call must succeed. Then waits for a byte on `hold` (a stopped victim is resumed meanwhile).
int root_rank(int id_fd, const Options& o, int out, int hold) {
  sparrowComm_t comm = open_comm(id_fd, 0, o);
  if (!comm) return kInit;
  Weights w(o.elems);
  int failed = 0;
  for (int s = 0; s < o.steps; ++s) {
    if (s > 0) w.step(s);
    int64_t rec[2] = {s, now_ns()};
    if (write(out, rec, sizeof rec) < 0) return kInit;
    sparrowResult_t rc = step_call(o, comm, w.w.data(), nullptr, w.w.size());
    rec[1] = -(now_ns() - rec[1]);
    if (write(out, rec, sizeof rec) < 0) return kInit;
    if (rc != sparrowSuccess) {
      fprintf(stderr, "%s: root step %d: %s\n", kProg, s, sparrowGetLastError(comm));
      if (!failed) failed = 10 + s;
    }
  }
  char b;
  if (read(hold, &b, 1) != 1) return kInit;
  sparrowCommDestroy(comm);
  return failed;
}

// A receiver: kOk when every step arrived bit-exact; else the first step's outcome + the step.
int receiver_rank(int id_fd, const Options& o, int rank) {
  sparrowComm_t comm = open_comm(id_fd, rank, o);
  if (!comm) return kInit;
  Weights w(o.elems);
  std::vector<uint16_t> buf(o.elems, 0), old = buf;
  for (int s = 0; s < o.steps; ++s) {
    if (s > 0) w.step(s);
    sparrowResult_t rc = step_call(o, comm, nullptr, buf.data(), buf.size());
    if (rc == sparrowSuccess && buf == w.w) {
      old = buf;
      continue;
    }
    if (rc == sparrowSuccess) return kWrongBits + std::min(s, 19);
    return (buf == old ? kFailedIntact : kTorn) + std::min(s, 19);
  }
  sparrowCommDestroy(comm);
  return kOk;
}

// The replacement: waits for the go, joins the victim's slot, then takes every step until the root
// goes away; its first step must be a whole version of some step, the next ones the steps after it.
constexpr int kJoinFailed = 20, kJoinedNoStep = 21;
int joiner_rank(int id_fd, int go, const Options& o, int slot) {
  sparrowUniqueId id;
  char b;
  if (read(id_fd, &id, sizeof id) != ssize_t(sizeof id) || read(go, &b, 1) != 1) return kInit;
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  cfg.elastic = 1;
  sparrowComm_t comm = nullptr;
  int rank = slot;
  if (sparrowCommJoin(&comm, id, &cfg, &rank) != sparrowSuccess) return kJoinFailed;
  Weights w(o.elems);
  std::vector<uint16_t> buf(o.elems, 0);
  int s = -1, got = 0;
  for (;;) {
    std::vector<uint16_t> old = buf;
    sparrowResult_t rc = step_call(o, comm, nullptr, buf.data(), buf.size());
    if (rc != sparrowSuccess) return got ? (buf == old ? kOk : kTorn) : kJoinedNoStep;  // the root went away
    if (s < 0) {  // which step's whole version arrived
      for (s = 0; s < o.steps && buf != w.w; ++s) w.step(s + 1);
      if (s >= o.steps) return kWrongBits;
    } else {
      w.step(++s);
      if (buf != w.w) return kWrongBits + std::min(s, 19);
    }
    ++got;
  }
}

struct RunResult {
  int joiner = -100;  // the replacement's exit (Plan::rejoin)
  std::vector<int> exit;
  std::vector<double> step_s;  // the root's
  int affected = -1;           // the step during which the fault was injected
  bool hang = false;
};

int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st); }

// Reads the root's records until step `until` has started (-1: until the last step ended), or the
// root is gone or silent for `timeout_ms`; fills starts and durations.
bool read_until(int fd, int until, std::vector<int64_t>& start, std::vector<double>& took, int timeout_ms) {
  while (true) {
    if (until >= 0 ? start[size_t(until)] >= 0 : took.back() >= 0) return true;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    int64_t rec[2];
    if (read(fd, rec, sizeof rec) != ssize_t(sizeof rec)) return false;
    if (rec[0] < 0 || rec[0] >= int64_t(start.size())) return false;
    if (rec[1] >= 0) start[size_t(rec[0])] = rec[1];
    else took[size_t(rec[0])] = double(-rec[1]) * 1e-9;
  }
}

// The step whose [start, end) holds time t (ns), or the next one to start after it.
int step_at(const std::vector<int64_t>& start, const std::vector<double>& took, int64_t t) {
  for (size_t s = 0; s < start.size(); ++s)
    if (start[s] >= 0 && took[s] >= 0 && t < start[s] + int64_t(took[s] * 1e9)) return int(s);
  return -1;
}

void waitpid_bounded(pid_t pid, int* status, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (waitpid(pid, status, WNOHANG) == pid) return;
    poll(nullptr, 0, 100);  // a watchdog's poll interval, not a synchronisation
  }
  kill(pid, SIGKILL);  // a hang: end the process we started, by its PID
  waitpid(pid, status, 0);
  *status = -1;
}

// The processes of one run, and the pipes that hand them the unique id.
struct Procs {
  std::vector<pid_t> pids;  // by rank
  std::vector<int> id_fds;
  pid_t joiner = -1;        // the replacement (Plan::rejoin)
  int go[2] = {-1, -1};     // tells the replacement that the victim is gone
};

// Forks the replacement (first, idle until the victim is gone) and the ranks, before this process has
// any thread. out: the root's records; hold: keeps the root's communicator open until the end.
bool fork_ranks(const Options& o, const Plan& plan, int out[2], int hold[2], Procs& p) {
  if (plan.rejoin) {
    int idp[2];
    if (pipe(idp) != 0 || pipe(p.go) != 0) return false;
    p.joiner = fork();
    if (p.joiner == 0) {
      alarm(unsigned(60 + o.steps * 2 + o.lease_ms / 100));
      close(out[0]);
      close(out[1]);
      close(hold[0]);
      close(hold[1]);
      _exit(joiner_rank(idp[0], p.go[0], o, plan.victim));
    }
    close(idp[0]);
    close(p.go[0]);
    p.id_fds.push_back(idp[1]);
  }
  for (int rank = 0; rank < o.ranks; ++rank) {
    int idp[2];
    if (pipe(idp) != 0) return false;
    pid_t pid = fork();
    if (pid == 0) {
      alarm(unsigned(60 + o.steps * 2 + o.lease_ms / 100));  // a hang ends as SIGALRM
      close(out[0]);
      close(hold[1]);
      if (rank != 0) {
        close(out[1]);
        close(hold[0]);
      }
      _exit(rank == 0 ? root_rank(idp[0], o, out[1], hold[0]) : receiver_rank(idp[0], o, rank));
    }
    close(idp[0]);
    p.pids.push_back(pid);
    p.id_fds.push_back(idp[1]);
  }
  return true;
}

bool hand_out_id(const std::vector<int>& fds) {
  sparrowUniqueId id;
  if (sparrowGetUniqueId(&id) != sparrowSuccess) return false;
  for (int fd : fds) {
    if (write(fd, &id, sizeof id) != ssize_t(sizeof id)) return false;
    close(fd);
  }
  return true;
}

// Once the plan's step has started, waits its delay and injects the fault (and lets the replacement
// go once a killed victim is gone); returns the moment (ns), or -1 when the step never started.
int64_t inject(const Options& o, const Plan& plan, int out_fd, Procs& p, std::vector<int64_t>& start, RunResult& r,
               int wait_ms) {
  if (!read_until(out_fd, plan.step, start, r.step_s, wait_ms)) return -1;
  const int64_t at = start[size_t(plan.step)] + int64_t(plan.delay_us) * 1000;
  while (now_ns() < at) poll(nullptr, 0, 1);  // the injection's moment
  const int64_t hit_at = now_ns();
  kill(p.pids[size_t(plan.victim)], plan.fault == Fault::kKill ? SIGKILL : SIGSTOP);
  if (plan.rejoin) {
    int st = 0;
    waitpid(p.pids[size_t(plan.victim)], &st, 0);  // killed: gone at once
    r.exit.assign(size_t(o.ranks), 0);
    r.exit[size_t(plan.victim)] = exit_code(st);
    (void)!write(p.go[1], "x", 1);
  }
  return hit_at;
}

// Waits for every process (a stopped victim first, continued, while the root still runs; then the
// rest, once the root may end) and records exits and hangs.
void reap(const Options& o, const Plan& plan, const Procs& p, int hold_fd, RunResult& r) {
  const int victim_exit = r.exit.empty() ? 0 : r.exit[size_t(plan.victim)];
  r.exit.assign(size_t(o.ranks), 0);
  r.exit[size_t(plan.victim)] = victim_exit;
  if (plan.fault == Fault::kStop) kill(p.pids[size_t(plan.victim)], SIGCONT);
  int st = 0;
  if (plan.fault == Fault::kStop) {  // it learns it was dropped while the root still runs
    waitpid_bounded(p.pids[size_t(plan.victim)], &st, 60);
    r.exit[size_t(plan.victim)] = st == -1 ? -1 : exit_code(st);
  }
  (void)!write(hold_fd, "x", 1);
  for (int rank = 0; rank < o.ranks; ++rank) {
    if ((plan.fault == Fault::kStop || plan.rejoin) && rank == plan.victim) continue;
    waitpid_bounded(p.pids[size_t(rank)], &st, 60);
    r.exit[size_t(rank)] = st == -1 ? -1 : exit_code(st);
  }
  if (p.joiner > 0) {
    waitpid_bounded(p.joiner, &st, 60);
    r.joiner = st == -1 ? -1 : exit_code(st);
    r.hang = r.hang || r.joiner == -1 || r.joiner == -SIGALRM;
  }
  for (int e : r.exit) r.hang = r.hang || e == -1 || e == -SIGALRM;
}

RunResult run_once(const Options& o, const Plan& plan) {
  RunResult r;
  int out[2], hold[2];
  if (pipe(out) != 0 || pipe(hold) != 0) return r;
  Procs p;
  if (!fork_ranks(o, plan, out, hold, p)) return r;
  close(out[1]);
  close(hold[0]);
  if (!hand_out_id(p.id_fds)) return r;
  std::vector<int64_t> start(size_t(o.steps), -1);
  r.step_s.assign(size_t(o.steps), -1);
  const int wait_ms = 1000 * (30 + o.lease_ms / 500);
  const int64_t hit_at = inject(o, plan, out[0], p, start, r, wait_ms);
  if (plan.rejoin) close(p.go[1]);
  read_until(out[0], -1, start, r.step_s, wait_ms);  // to the root's last record
  reap(o, plan, p, hold[1], r);
  // The step the fault landed in, or the next one when that is the slower (a rank stopped after it
  // acknowledged costs the next step its lease).
  if (hit_at >= 0) r.affected = step_at(start, r.step_s, hit_at);
  if (r.affected >= 0 && r.affected + 1 < o.steps && r.step_s[size_t(r.affected) + 1] > r.step_s[size_t(r.affected)])
    r.affected++;
  close(out[0]);
  close(hold[1]);
  return r;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

void usage() {
  printf("usage: %s [--runs 20] [--seed 1] [--ranks 8] [--regions 4] [--steps 20] [--elems 1M]\n"
         "          [--lease-ms 1500] [--algo region_tree] [--dense] [--json]\n"
         "Randomized faults on an elastic communicator of forked processes over loopback: per run, one\n"
         "random receiver (relay or leaf) is SIGKILLed or SIGSTOPped at a random moment of a random step;\n"
         "after half of the kills (each at least 5 steps before the end) a new process joins the dead\n"
         "rank's slot (sparrowCommJoin).\n"
         "Reports hangs, wrong-bit and torn outcomes, survivors that missed a step, and the root's time\n"
         "for the affected step against a normal one. Exit status 1 if any of those counts is not 0.\n"
         "  --runs N       runs, 1..100000 (default 20)\n"
         "  --seed N       seed of the fault plans (default 1)\n"
         "  --ranks N      ranks per run, 3..64 (default 8)\n"
         "  --regions N    regions (SPARROW_REGION), 1..ranks (default 4)\n"
         "  --steps N      steps per run, 6..1000 (default 20)\n"
         "  --elems SIZE   bf16 elements per step, 1K..256M (default 1M; 1%% change per step)\n"
         "  --lease-ms N   the communicator's lease, 100..600000 (default 1500)\n"
         "  --algo NAME    tree: flat, chain, binomial, region_tree, auto (default region_tree)\n"
         "  --dense        every step a dense sparrowBroadcast of the whole buffer\n"
         "  --json         one JSON object\n",
         kProg);
}

Options parse(int argc, char** argv) {
  Options o;
  static option longopts[] = {{"runs", 1, 0, 'r'},  {"seed", 1, 0, 's'},     {"ranks", 1, 0, 'n'},
                              {"regions", 1, 0, 'g'}, {"steps", 1, 0, 't'},  {"elems", 1, 0, 'e'},
                              {"lease-ms", 1, 0, 'l'}, {"algo", 1, 0, 'a'},  {"json", 0, 0, 'j'},
                              {"dense", 0, 0, 'd'},
                              {"help", 0, 0, 'h'},  {0, 0, 0, 0}};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "h", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'r': o.runs = int(sparrow::args::integer(kProg, "--runs", optarg, 1, 100000)); break;
      case 's': o.seed = uint64_t(sparrow::args::integer(kProg, "--seed", optarg, 0, INT64_MAX)); break;
      case 'n': o.ranks = int(sparrow::args::integer(kProg, "--ranks", optarg, 3, 64)); break;
      case 'g': o.regions = int(sparrow::args::integer(kProg, "--regions", optarg, 1, 64)); break;
      case 't': o.steps = int(sparrow::args::integer(kProg, "--steps", optarg, 6, 1000)); break;
      case 'e': o.elems = sparrow::args::size(kProg, "--elems", optarg, 1024, uint64_t(256) << 20); break;
      case 'l': o.lease_ms = int(sparrow::args::integer(kProg, "--lease-ms", optarg, 100, 600000)); break;
      case 'a': o.algo = sparrow::args::choice(kProg, "--algo", optarg, {"flat", "chain", "binomial", "region_tree", "auto"}); break;
      case 'j': o.json = true; break;
      case 'd': o.dense = true; break;
      case 'h': usage(); exit(0);
      default: sparrow::args::unknown(kProg, argv[optind - 1]);
    }
  }
  if (optind < argc) sparrow::args::unknown(kProg, argv[optind]);
  if (o.regions > o.ranks) sparrow::args::bad(kProg, "--regions", std::to_string(o.regions).c_str(), "at most --ranks");
  return o;
}

// Time a replacement needs before the root's last step: the root drops the dead member at its next
// operation, the joiner tries again every 50 ms until its streams are taken, and the root admits it
// at the start of an operation after that.
constexpr double kJoinRoomS = 0.1;

// A random fault: a receiver, a step away from the first (the agreement) and the last two (when it
// is replaced, the last five steps and kJoinRoomS at the normal step time so far), a moment from
// the step's start to about two normal steps later (mid-step or between steps).
Plan random_plan(std::mt19937_64& rng, const Options& o, double normal_s) {
  Plan p;
  p.victim = 1 + int(rng() % uint64_t(o.ranks - 1));
  p.step = 2 + int(rng() % uint64_t(o.steps - 4));
  p.fault = rng() % 2 ? Fault::kKill : Fault::kStop;
  p.delay_us = int(rng() % uint64_t(std::max(1000.0, 2e6 * normal_s)));
  p.rejoin = p.fault == Fault::kKill && rng() % 2;
  // A replaced victim dies early enough for its replacement to be admitted: with 8 ms steps, 5 steps
  // were too few (one of 28 replacements found no broadcast left).
  if (p.rejoin) {
    const int room = std::max(5, int(std::ceil(kJoinRoomS / std::max(normal_s, 1e-3))));
    const int last = std::max(2, o.steps - 1 - room);  // the latest step to kill it in
    p.step = 2 + (p.step - 2) % std::max(1, last - 1);
  }
  return p;
}

struct Tally {
  int runs = 0, hangs = 0, wrong_bits = 0, torn = 0, survivors_missed = 0, root_failed = 0, kills = 0, stops = 0;
  int joins = 0, joined = 0, join_failed = 0;
  std::vector<double> normal, affected, affected_kill, affected_stop;
};

void account(Tally& t, const Plan& plan, const RunResult& r) {
  t.runs++;
  (plan.fault == Fault::kKill ? t.kills : t.stops)++;
  t.hangs += r.hang;
  for (size_t rank = 0; rank < r.exit.size(); ++rank) {
    const int e = r.exit[rank];
    if (e >= kWrongBits && e < kTorn) t.wrong_bits++;
    if (e >= kTorn && e < kFailedIntact) t.torn++;
    if (rank == 0 && e != kOk) t.root_failed++;
    if (rank != 0 && int(rank) != plan.victim && e != kOk) t.survivors_missed++;
  }
  if (plan.rejoin) {
    t.joins++;
    t.joined += r.joiner == kOk;
    t.join_failed += r.joiner == kJoinFailed || r.joiner == kJoinedNoStep;
    if (r.joiner >= kWrongBits && r.joiner < kTorn) t.wrong_bits++;
    if (r.joiner == kTorn) t.torn++;
  }
  for (size_t s = 1; s < r.step_s.size(); ++s) {  // step 0 (the first, full one) is not a normal step
    if (r.step_s[s] < 0) continue;
    if (int(s) != r.affected) {
      t.normal.push_back(r.step_s[s]);
      continue;
    }
    t.affected.push_back(r.step_s[s]);
    (plan.fault == Fault::kKill ? t.affected_kill : t.affected_stop).push_back(r.step_s[s]);
  }
}

void report(const Options& o, const Tally& t) {
  const double n50 = percentile(t.normal, 0.5), a50 = percentile(t.affected, 0.5), a90 = percentile(t.affected, 0.9),
               amax = percentile(t.affected, 1.0);
  if (o.json) {
    printf("{\"runs\":%d,\"seed\":%llu,\"ranks\":%d,\"regions\":%d,\"steps\":%d,\"elems\":%llu,\"lease_ms\":%d,"
           "\"algo\":\"%s\",\"dense\":%s,\"kills\":%d,\"stops\":%d,\"hangs\":%d,\"wrong_bits\":%d,\"torn\":%d,"
           "\"survivors_missed_a_step\":%d,\"root_failed\":%d,\"joins\":%d,\"joined\":%d,\"join_failed\":%d,\"normal_step_s\":{\"p50\":%.4f,\"p90\":%.4f},"
           "\"affected_step_s\":{\"n\":%zu,\"p50\":%.4f,\"p90\":%.4f,\"max\":%.4f},"
           "\"affected_by_sigkill_s\":{\"p50\":%.4f,\"max\":%.4f},\"affected_by_sigstop_s\":{\"p50\":%.4f,\"max\":%.4f}}\n",
           t.runs, (unsigned long long)o.seed, o.ranks, o.regions, o.steps, (unsigned long long)o.elems, o.lease_ms,
           o.algo.c_str(), o.dense ? "true" : "false", t.kills, t.stops, t.hangs, t.wrong_bits, t.torn, t.survivors_missed, t.root_failed, t.joins,
           t.joined, t.join_failed, n50,
           percentile(t.normal, 0.9), t.affected.size(), a50, a90, amax, percentile(t.affected_kill, 0.5),
           percentile(t.affected_kill, 1.0), percentile(t.affected_stop, 0.5), percentile(t.affected_stop, 1.0));
    return;
  }
  printf("%s: %d runs (%d SIGKILL, %d SIGSTOP), %d ranks in %d regions, %d %s steps of %llu bf16, lease %d ms, %s\n",
         kProg, t.runs, t.kills, t.stops, o.ranks, o.regions, o.steps, o.dense ? "dense" : "sparse",
         (unsigned long long)o.elems, o.lease_ms, o.algo.c_str());
  printf("  hangs %d, wrong bits %d, torn buffers %d, survivors that missed a step %d, root calls failed %d\n",
         t.hangs, t.wrong_bits, t.torn, t.survivors_missed, t.root_failed);
  printf("  replacements joining a killed rank's slot: %d, took part bit-exact %d, not admitted before the end %d\n",
         t.joins, t.joined, t.join_failed);
  printf("  root's step: normal p50 %.1f ms; affected (n=%zu) p50 %.1f ms, p90 %.1f ms, max %.1f ms "
         "(lease %d ms)\n", n50 * 1e3, t.affected.size(), a50 * 1e3, a90 * 1e3, amax * 1e3, o.lease_ms);
  printf("  affected by SIGKILL: p50 %.1f ms, max %.1f ms; by SIGSTOP: p50 %.1f ms, max %.1f ms; "
         "2 x normal + lease = %.1f ms\n", percentile(t.affected_kill, 0.5) * 1e3, percentile(t.affected_kill, 1.0) * 1e3,
         percentile(t.affected_stop, 0.5) * 1e3, percentile(t.affected_stop, 1.0) * 1e3, (2 * n50 * 1e3) + o.lease_ms);
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  Options o = parse(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  setenv("SPARROW_SOCKET_IFNAME", "lo", 0);
  setenv("SPARROW_PROBE_MS", "50", 0);
  setenv("SPARROW_TIMEOUT_S", "30", 0);
  setenv("SPARROW_CHUNK_ELEMS", "65536", 0);  // many parts per step: a death can land between them
  setenv("SPARROW_SEGMENT_BYTES", "65536", 0);  // and many dense segments
  setenv("SPARROW_ALGO", o.algo.c_str(), 1);
  std::mt19937_64 rng(o.seed);
  Tally t;
  double normal_s = 0.03;
  for (int i = 0; i < o.runs; ++i) {
    const Plan plan = random_plan(rng, o, normal_s);
    const RunResult r = run_once(o, plan);
    account(t, plan, r);
    if (!t.normal.empty()) normal_s = percentile(t.normal, 0.5);
    if (!o.json)
      fprintf(stderr, "run %d: rank %d %s at step %d +%.1f ms%s (affected step %d: %.1f ms); joiner %d; exits", i + 1,
              plan.victim, plan.fault == Fault::kKill ? "SIGKILL" : "SIGSTOP", plan.step, plan.delay_us / 1e3,
              plan.rejoin ? ", replaced" : "", r.affected, r.affected >= 0 ? r.step_s[size_t(r.affected)] * 1e3 : -1.0,
              r.joiner);
    if (!o.json)
      for (int e : r.exit) fprintf(stderr, " %d", e);
    if (!o.json) fprintf(stderr, "\n");
  }
  report(o, t);
  return t.hangs || t.wrong_bits || t.torn || t.survivors_missed || t.root_failed ? 1 : 0;
}
