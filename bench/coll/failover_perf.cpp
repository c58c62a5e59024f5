// failover_perf: relay failover of an elastic communicator, under mpirun (scripts/wanemu-mpirun.sh on
// an emulated WAN). The root runs --steps sparse steps of -b bytes (bf16, -D changed per step); at
// --stall-step a relay (--stall-rank, default: the first non-root rank with children) stops itself
// (SIGSTOP) for --stall-ms, as a long generation step or a GC pause would: its children re-attach
// to the root, the root drops it after the lease. Every rank notes when each of its calls returned
// (ranks share the host's monotonic clock under wanemu); the root prints, per step, the time from its
// call's start to the last rank's return in each region, and the stalled relay's region's step
// against its normal one and against 2 x normal + lease. Survivors must hold the root's last version.
// --fault stall|partition|partition-region makes the stall a network fault of the emulator instead
// (`wanemu fault`: the relay's host's packets held, or dropped, or its whole region cut off).
// --fault rejoin: the relay leaves instead (its communicator aborted: its connections close, as when
// a worker dies) and joins again at once as a new communicator (sparrowCommJoin, any free slot), as
// a restarted worker would; the root prints where the joiner's first, full version came from (bytes
// per peer: the root across the WAN, or a member of its own region).
// --fault grow: nobody fails; the last MPI rank is not a member at first (the communicator has the
// others, and room for one more: SPARROW_MAX_RANKS) and joins at --stall-step into the vacant slot,
// as a worker added to a running job would; the same figures as rejoin.
// --dense: every step a dense sparrowBroadcast of the whole buffer instead of a sparse step.
#include <getopt.h>
#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/args.h"
#include "gen/generator.h"
#include "sparrow/sparrow.h"

namespace {

constexpr const char* kProg = "failover_perf";

struct Opts {
  int steps = 12, stall_step = 6, stall_rank = -1, lease_ms = 2000, stall_ms = 0;
  int slack_ms = 0;  // added to the bound before the exit status counts it as exceeded
  std::string fault = "sigstop";
  uint64_t bytes = 64 << 20;
  double density = 0.01;
  bool dense = false;
};

// rejoin and grow: a rank takes part again, or for the first time, with sparrowCommJoin.
bool joins(const Opts& o) { return o.fault == "rejoin" || o.fault == "grow"; }

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Opts parse(int argc, char** argv) {
  Opts o;
  static option longopts[] = {{"steps", 1, 0, 'n'},      {"stall-step", 1, 0, 's'}, {"stall-rank", 1, 0, 'r'},
                              {"stall-ms", 1, 0, 'm'},   {"lease-ms", 1, 0, 'l'},   {"help", 0, 0, 'h'},
                              {"fault", 1, 0, 'f'},      {"dense", 0, 0, 'd'},      {"slack-ms", 1, 0, 'k'},
                              {0, 0, 0, 0}};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "b:D:h", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'b': o.bytes = sparrow::args::size(kProg, "-b", optarg, 1024, uint64_t(1) << 36); break;
      case 'D': o.density = sparrow::args::number(kProg, "-D", optarg, 0, 1); break;
      case 'n': o.steps = int(sparrow::args::integer(kProg, "--steps", optarg, 4, 100000)); break;
      case 's': o.stall_step = int(sparrow::args::integer(kProg, "--stall-step", optarg, 2, 100000)); break;
      case 'r': o.stall_rank = int(sparrow::args::integer(kProg, "--stall-rank", optarg, 1, 1 << 20)); break;
      case 'm': o.stall_ms = int(sparrow::args::integer(kProg, "--stall-ms", optarg, 1, 3600000)); break;
      case 'l': o.lease_ms = int(sparrow::args::integer(kProg, "--lease-ms", optarg, 100, 600000)); break;
      case 'f':
        o.fault = optarg;
        if (o.fault != "sigstop" && o.fault != "stall" && o.fault != "partition" && o.fault != "partition-region" &&
            o.fault != "rejoin" && o.fault != "grow")
          sparrow::args::bad(kProg, "--fault", optarg, "sigstop, stall, partition, partition-region, rejoin or grow");
        break;
      case 'd': o.dense = true; break;
      case 'k': o.slack_ms = int(sparrow::args::integer(kProg, "--slack-ms", optarg, 0, 600000)); break;
      case 'h':
        printf("usage: %s [-b 64M] [-D 0.01] [--steps 12] [--stall-step 6] [--stall-rank R] [--stall-ms 3xlease]\n"
               "          [--lease-ms 2000] [--fault sigstop|stall|partition|partition-region|rejoin|grow] [--dense]\n"
               "          [--slack-ms 0]\n"
               "Relay failover on an elastic communicator; run under mpirun or scripts/wanemu-mpirun.sh.\n"
               "  -b SIZE          bytes per step (bf16), 1K..64G (default 64M); -D changed fraction (0.01)\n"
               "  --steps N        steps, >= 4 (12); --stall-step S: the step the relay stalls in, 2..steps-2 (6)\n"
               "  --stall-rank R   the rank that stalls (default: the first non-root rank with children)\n"
               "  --stall-ms N     how long it stays stopped (default 3 x the lease)\n"
               "  --lease-ms N     the communicator's lease, 100..600000 (2000)\n"
               "  --fault F        how it stalls: sigstop (the process stops itself, default); under the namespace\n"
               "                   emulator (scripts/wanemu-mpirun.sh) also stall (its host's packets are held\n"
               "                   for --stall-ms), partition (dropped) or partition-region (its whole region\n"
               "                   cut off from the others: every rank there is lost); rejoin: it leaves\n"
               "                   (its communicator aborted) and joins again at once with sparrowCommJoin;\n"
               "                   (the root waits one lease before the next step, as a training step would);\n"
               "                   the output shows the bytes its first, full version took from each peer\n"
               "                   (SPARROW_SEED_FROM_REGION=0: always from the root, for comparison); grow:\n"
               "                   nobody fails, the last rank joins a vacant slot at --stall-step (the others\n"
               "                   start without it, with SPARROW_MAX_RANKS = the MPI ranks), same output\n"
               "  --dense          every step a dense sparrowBroadcast of the whole buffer (with rejoin, the\n"
               "                   joiner's first call is one too)\n"
               "  --slack-ms N     exit status 1 only when a region's affected step exceeds 2 x normal + lease\n"
               "                   by more than N ms, 0..600000 (0); the table always shows the plain bound.\n"
               "                   (for tests on a shared machine, where a busy scheduler adds tens of ms)\n"
               "Exit status: 0; 1 when a survivor's call failed, a survivor's bits differ from the root's, a\n"
               "join did not happen, or a region's affected step exceeded the bound (+ slack); 2 bad arguments.\n",
               kProg);
        exit(0);
      default: sparrow::args::unknown(kProg, argv[optind - 1]);
    }
  }
  if (o.fault == "grow" && o.stall_rank >= 0)
    sparrow::args::bad(kProg, "--stall-rank", std::to_string(o.stall_rank).c_str(), "not with --fault grow (the last rank joins)");
  if (o.stall_step > o.steps - 2)
    sparrow::args::bad(kProg, "--stall-step", std::to_string(o.stall_step).c_str(), "at most --steps - 2");
  if (o.stall_ms == 0) o.stall_ms = 3 * o.lease_ms;
  return o;
}

// Stops this process for `ms` (a helper child resumes it): a stall the others cannot tell from a
// dead process until it resumes.
void stall(int ms) {
  pid_t waker = fork();
  if (waker == 0) {
    usleep(useconds_t(ms) * 1000);
    kill(getppid(), SIGCONT);
    _exit(0);
  }
  raise(SIGSTOP);
  waitpid(waker, nullptr, 0);
}

// The network faults go through the emulator: `wanemu fault KIND TARGET --for S`; false if it refused.
bool wanemu_fault(const Opts& o) {
  const char* bin = getenv("WANEMU_BIN");
  const char* host = getenv("WANEMU_RANK");
  const char* region = getenv("SPARROW_REGION");
  std::string target = o.fault == "partition-region" ? std::string("region:") + (region ? region : "") : (host ? host : "");
  std::string kind = o.fault == "stall" ? "stall" : "partition", secs = std::to_string(o.stall_ms / 1000.0);
  pid_t p = fork();
  if (p == 0) {
    execl(bin, bin, "fault", kind.c_str(), target.c_str(), "--for", secs.c_str(), (char*)nullptr);
    _exit(127);
  }
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

void inject(const Opts& o) {
  if (o.fault == "sigstop") stall(o.stall_ms);
  else if (!wanemu_fault(o)) MPI_Abort(MPI_COMM_WORLD, 2);
}

// This rank's parent-of-someone status after the first step: it has children in the tree.
bool has_children(sparrowComm_t comm) {
  char buf[1 << 16];
  size_t need = 0;
  if (sparrowCommGetStatsJson(comm, buf, sizeof buf, &need) != sparrowSuccess) return false;
  const char* c = strstr(buf, "\"children\":[");
  return c && c[12] != ']';
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One step's call; the root's buffer is its send buffer (and, dense, its receive buffer).
int step_call(const Opts& o, sparrowComm_t comm, std::vector<uint16_t>& buf, bool root) {
  if (o.dense) return sparrowBroadcast(buf.data(), buf.data(), buf.size(), sparrowBfloat16, 0, comm, nullptr);
  return sparrowSparseBcast(root ? buf.data() : nullptr, buf.data(), buf.size(), sparrowBfloat16, 0, comm, nullptr);
}

struct Joined {
  int first_step = -1;
  double join_s = -1, first_s = -1;
  std::vector<double> bytes;  // [rank]: received from it in the first step
};

// --fault rejoin on the victim: abort its communicator (every connection closes; the root drops it)
// and join again at once, taking any free slot (its own); then take part in every step the root
// still runs (the root writes the step into element 0), noting when each returned.
Joined leave_and_rejoin(const Opts& o, const sparrowUniqueId& id, sparrowConfig_t cfg, sparrowComm_t* comm,
                        std::vector<uint16_t>& buf, std::vector<double>* done, std::vector<int>* rc) {
  Joined j;
  if (*comm) sparrowCommAbort(*comm);  // (growing, it had none)
  *comm = nullptr;
  int slot = -1;
  const double tj = now();
  if (sparrowCommJoin(comm, id, &cfg, &slot) != sparrowSuccess) {
    fprintf(stderr, "%s: the rejoin failed: %s\n", kProg, sparrowGetLastError(nullptr));
    return j;
  }
  j.join_s = now() - tj;
  for (;;) {
    const double t = now();
    const int r = step_call(o, *comm, buf, false);
    if (r != sparrowSuccess) {
      fprintf(stderr, "%s: the joiner's call failed: %s\n", kProg, sparrowGetLastError(*comm));
      return j;
    }
    const int s = buf[0];
    if (s >= o.steps) return j;
    (*done)[size_t(s)] = now();
    (*rc)[size_t(s)] = r;
    if (j.first_step < 0) {
      j.first_step = s;
      j.first_s = now() - t;
      sparrowPeerStats ps[1024];
      int np = 0;
      sparrowCommGetPeerStats(*comm, ps, 1024, &np);
      for (int i = 0; i < np && i < 1024; ++i) {
        if (size_t(ps[i].rank) >= j.bytes.size()) j.bytes.resize(size_t(ps[i].rank) + 1, 0);
        j.bytes[size_t(ps[i].rank)] = double(ps[i].bytesReceived);
      }
    }
    if (s == o.steps - 1) return j;
  }
}

struct Report {
  const Opts& o;
  int n;
  std::vector<double> t0;            // the root's call start per step
  std::vector<double> done;          // [rank * steps + step]: when that rank's call returned
  std::vector<int> rc;               // same layout
  std::vector<std::string> region;   // per rank
  int victim;
  std::vector<bool> lost;            // the victim, or with partition-region every rank of its region
  // --fault rejoin, from the joiner: its first step, the join call's and that step's seconds, and
  // the bytes of that step from each rank.
  int join_step = -1;
  double join_s = -1, first_s = -1;
  std::vector<double> join_bytes = {};

  // Per step: the last return in region `g` (ranks not lost) since the root's start.
  double region_step(const std::string& g, int s) const {
    double t = 0;
    for (int r = 1; r < n; ++r)
      if (!lost[size_t(r)] && region[size_t(r)] == g) t = std::max(t, done[size_t(r * o.steps + s)] - t0[size_t(s)]);
    return t;
  }
  int print() const {
    std::map<std::string, int> regions;
    for (int r = 1; r < n; ++r) regions[region[size_t(r)]]++;
    char what[128];
    if (o.fault == "rejoin") snprintf(what, sizeof what, "leaves at step %d and joins again", o.stall_step);
    else if (o.fault == "grow") snprintf(what, sizeof what, "joins a vacant slot at step %d", o.stall_step);
    else
      snprintf(what, sizeof what, "stalls %d ms at step %d (%s)", o.stall_ms, o.stall_step,
               o.fault == "sigstop"       ? "SIGSTOP"
               : o.fault == "stall"       ? "its host's packets held"
               : o.fault == "partition"   ? "its host cut off"
                                          : "its region cut off");
    printf("# failover_perf: %d ranks, %llu bytes per %s step, lease %d ms; rank %d (region %s) %s\n", n,
           (unsigned long long)o.bytes, o.dense ? "dense" : "sparse", o.lease_ms, victim, region[size_t(victim)].c_str(), what);
    printf("# step");
    for (auto& [g, k] : regions) printf(" %12s", g.c_str());
    printf("   (ms from the root's call to the region's last return)\n");
    for (int s = 1; s < o.steps; ++s) {
      printf("  %4d", s);
      for (auto& [g, k] : regions) {
        bool any = false;
        for (int r = 1; r < n; ++r) any = any || (!lost[size_t(r)] && region[size_t(r)] == g);
        if (any) printf(" %12.1f", region_step(g, s) * 1e3);
        else printf(" %12s", "lost");
      }
      printf("%s\n", s == o.stall_step ? (o.fault == "rejoin" ? "   <- leaves" : o.fault == "grow" ? "   <- joins" : "   <- stall") : "");
    }
    int failed = 0;
    for (int r = 1; r < n; ++r)
      for (int s = 0; s < o.steps; ++s)
        if (!lost[size_t(r)] && rc[size_t(r * o.steps + s)] != sparrowSuccess) failed++;
    // Every region against itself: its normal step (the first, full step and the two around the stall
    // left out) and the slower of the stalled step and the next (the first over the new tree).
    bool exceeded = false;
    for (auto& [g, k] : regions) {
      std::vector<double> normal;
      for (int s = 1; s < o.steps; ++s)
        if (s != o.stall_step && s != o.stall_step + 1) normal.push_back(region_step(g, s));
      const double nm = median(normal), hit = std::max(region_step(g, o.stall_step), region_step(g, o.stall_step + 1));
      if (nm <= 0) continue;  // only the victim there
      const double limit = 2 * nm + o.lease_ms / 1000.0;
      const bool over = hit > limit + o.slack_ms / 1000.0;
      exceeded = exceeded || over;
      printf("# region %s: normal step %.1f ms, affected %.1f ms (%.2fx); 2 x normal + lease = %.1f ms: %s\n",
             g.c_str(), nm * 1e3, hit * 1e3, hit / nm, limit * 1e3,
             hit <= limit ? "within" : over ? "EXCEEDED" : "over, within the slack");
    }
    printf("# survivors' failed calls: %d\n", failed);
    if (joins(o)) print_join();
    return failed || exceeded || (joins(o) && join_step < 0) ? 1 : 0;
  }
  void print_join() const {
    const bool grow = o.fault == "grow";
    if (join_step < 0) {
      printf("# rank %d %s at step %d and did not take part %s\n", victim, grow ? "was to join" : "left", o.stall_step,
             grow ? "at all" : "again");
      return;
    }
    printf("# rank %d (region %s) %s at step %d (sparrowCommJoin took %.1f ms); its first step %d "
           "(a full version) took %.1f ms; bytes received in it:",
           victim, region[size_t(victim)].c_str(), grow ? "joined a vacant slot" : "left and joined again", o.stall_step,
           join_s * 1e3, join_step, first_s * 1e3);
    for (int r = 0; r < n; ++r)
      if (r != victim && join_bytes[size_t(r)] > 0)
        printf(" from rank %d (%s%s) %.0f", r, region[size_t(r)].c_str(), r == 0 ? ", the root" : "", join_bytes[size_t(r)]);
    printf("\n");
  }
};

// Every rank: its times, results, the joiner's figures and the hash of its buffer to the root, which
// prints the report; the exit status (the root's verdict, 0 elsewhere).
int gather_and_report(Report& rep, int rank, sparrowComm_t comm, const std::vector<uint16_t>& buf,
                      const std::vector<double>& done, const std::vector<int>& rc, Joined joined,
                      const std::vector<char>& regions) {
  const Opts& o = rep.o;
  const int n = rep.n;
  if (joins(o)) {  // the joiner's figures to the root
    double mine[3] = {double(joined.first_step), joined.join_s, joined.first_s}, got[3] = {-1, -1, -1};
    MPI_Reduce(mine, got, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    rep.join_step = int(got[0]);
    rep.join_s = got[1];
    rep.first_s = got[2];
    joined.bytes.resize(size_t(n), 0);
    rep.join_bytes.assign(size_t(n), 0);
    MPI_Reduce(joined.bytes.data(), rep.join_bytes.data(), n, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  }
  MPI_Gather(done.data(), o.steps, MPI_DOUBLE, rep.done.data(), o.steps, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(rc.data(), o.steps, MPI_INT, rep.rc.data(), o.steps, MPI_INT, 0, MPI_COMM_WORLD);
  // Survivors hold the root's last version.
  uint64_t h = XXH3_64bits(buf.data(), buf.size() * 2), h0 = h;
  MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  const bool back = joins(o) && rank == rep.victim && joined.first_step >= 0;  // must hold it too
  int wrong = (!rep.lost[size_t(rank)] || back) && h != h0, wrong_sum = 0;
  MPI_Reduce(&wrong, &wrong_sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  int exit_code = 0;
  if (rank == 0) {
    for (int r = 0; r < n; ++r) rep.region.emplace_back(&regions[size_t(r) * 64]);
    exit_code = rep.print();
    int members[1024], nlive = 0;
    sparrowCommGetMembers(comm, members, 1024, &nlive);
    const int nlost = joins(o) && rep.join_step >= 0 ? 0 : int(std::count(rep.lost.begin(), rep.lost.end(), true));
    printf("# members at the end: %d of %d (%d lost to the fault); %s with other bits than the root: %d\n", nlive, n,
           nlost, joins(o) ? "survivors and the joiner" : "survivors", wrong_sum);
    if (wrong_sum || nlive != n - nlost) exit_code = 1;  // the lost ranks must have been dropped, and only they
  }
  return exit_code;
}

// The elastic communicator of every rank (grow: of every rank but the last, which joins later, with
// room for it; it gets none); the id and config, for a later join.
sparrowComm_t open_comm(const Opts& o, int rank, int n, sparrowUniqueId* id, sparrowConfig_t* cfg) {
  if (rank == 0 && sparrowGetUniqueId(id) != sparrowSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(id, sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD);
  cfg->elastic = 1;
  cfg->leaseMs = o.lease_ms;
  sparrowComm_t comm = nullptr;
  const bool grow = o.fault == "grow";
  if (grow) setenv("SPARROW_MAX_RANKS", std::to_string(n).c_str(), 1);
  if ((!grow || rank < n - 1) && sparrowCommInitRankConfig(&comm, grow ? n - 1 : n, *id, rank, cfg) != sparrowSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, sparrowGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return comm;
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  Opts o = parse(argc, argv);
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n < 3) {
    if (rank == 0) fprintf(stderr, "%s: needs at least 3 ranks\n", kProg);
    MPI_Finalize();
    return 2;
  }
  if (o.fault != "sigstop" && !joins(o) && (!getenv("WANEMU_CONTROL") || !getenv("WANEMU_BIN") || !getenv("WANEMU_RANK"))) {
    if (rank == 0) fprintf(stderr, "%s: --fault %s needs the namespace emulator (scripts/wanemu-mpirun.sh)\n", kProg, o.fault.c_str());
    MPI_Finalize();
    return 2;
  }
  char region[64] = {0};
  snprintf(region, sizeof region, "%s", getenv("SPARROW_REGION") ? getenv("SPARROW_REGION") : "?");
  std::vector<char> regions(size_t(n) * 64);
  MPI_Allgather(region, 64, MPI_CHAR, regions.data(), 64, MPI_CHAR, MPI_COMM_WORLD);
  sparrowUniqueId id;
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  sparrowComm_t comm = open_comm(o, rank, n, &id, &cfg);
  const bool grow = o.fault == "grow";
  const size_t count = o.bytes / 2;
  std::vector<uint16_t> buf(count);
  if (rank == 0)
    for (size_t i = 0; i < count; ++i) buf[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 1024);
  std::vector<double> t0(size_t(o.steps)), done(size_t(o.steps));
  std::vector<int> rc(size_t(o.steps));
  int victim = grow ? n - 1 : o.stall_rank;
  std::vector<bool> lost(static_cast<size_t>(n), false);
  Joined joined;
  for (int s = 0; s < o.steps; ++s) {
    if (rank == 0 && s > 0) sparrow::gen::mutate_exact(buf.data(), count, 2, o.density, uint64_t(s));
    if (rank == 0) buf[0] = uint16_t(s);  // the step, for a joiner that does not know which it got
    if (s == 1) {  // after the first (full) step: every rank knows its children; pick the victim
      int mine = rank != 0 && comm && has_children(comm) ? rank : n, first = n;
      MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (victim < 0) victim = first < n ? first : 1;
      if (victim >= n) MPI_Abort(MPI_COMM_WORLD, 2);
      for (int r = 0; r < n; ++r)
        lost[size_t(r)] = r == victim || (o.fault == "partition-region" &&
                                          !strcmp(&regions[size_t(r) * 64], &regions[size_t(victim) * 64]));
      if (lost[0]) {
        if (rank == 0) fprintf(stderr, "%s: rank %d shares the root's region: pick another --stall-rank\n", kProg, victim);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
    }
    // grow: the joiner waits for the root to reach the step (it takes no part in the ones before).
    if (grow && rank == 0 && s == o.stall_step) MPI_Send(&s, 1, MPI_INT, victim, 7, MPI_COMM_WORLD);
    if (grow && rank == victim && s == o.stall_step) MPI_Recv(&s, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rank == victim && s == o.stall_step && joins(o)) {
      joined = leave_and_rejoin(o, id, cfg, &comm, buf, &done, &rc);
      break;
    }
    if (rank == victim && s == o.stall_step) inject(o);
    if (grow && rank == victim) continue;  // not a member yet
    // rejoin: the root leaves the joiner one lease before the next step (a trainer's step between two
    // syncs), so that its join request is there when that step admits it.
    if (rank == 0 && joins(o) && s == o.stall_step + 1) usleep(useconds_t(o.lease_ms) * 1000);
    t0[size_t(s)] = now();
    rc[size_t(s)] = step_call(o, comm, buf, rank == 0);
    done[size_t(s)] = now();
    if (rank == 0)  // progress, to stderr: the table comes at the end
      fprintf(stderr, "%s: step %d of %d done in %.1f ms\n", kProg, s + 1, o.steps, (done[size_t(s)] - t0[size_t(s)]) * 1e3);
    if (rc[size_t(s)] != sparrowSuccess && !lost[size_t(rank)])
      fprintf(stderr, "rank %d step %d: %s\n", rank, s, sparrowGetLastError(comm));
  }
  Report rep{o, n, t0, std::vector<double>(size_t(n * o.steps)), std::vector<int>(size_t(n * o.steps)), {}, victim, lost};
  const int exit_code = gather_and_report(rep, rank, comm, buf, done, rc, joined, regions);
  sparrowCommDestroy(comm);
  MPI_Finalize();
  return exit_code;
}
