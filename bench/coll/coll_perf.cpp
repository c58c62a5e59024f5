// sparse_bcast_perf / broadcast_perf: nccl-tests-style drivers for sparrow's broadcasts and their
// baselines, run under mpirun (and under wanemu through scripts/wanemu-mpirun.sh).
//
//   -b/-e/-f  min/max size in bytes and multiplication factor     -n/-w  iterations / warmup
//   -c 0|1    check results                                        -r     root
//   -d type   datatype (bfloat16, float32, ...)                    -D     density per step (sparse)
//   --impl sparrow|paper|dense|mpi   paper: SparrowRL's format (leb128 + overwrite, 4 streams, static
//                                    two-level tree); dense: sparrowBroadcast; mpi: MPI_Bcast
//   --model NAME --layers N --vocab N --steps N   realistic RL steps instead of -b/-e (sparse mode)
//   --json    one JSON object per row                              --scenario FILE (default $WANEMU_SCENARIO)
//   --stage   receivers use sparrowSparseBcastStage + sparrowStageCommit; the commit is timed apart
//   --progress  every rank prints a progress line each second while a call runs (long steps)
// With --json each row carries "per_rank": every rank's last step as sparrowCommGetStatsJson gives it
// (stage times, tree, bytes per peer) plus the CPU seconds (user + system) its process spent in that
// call, and cpu_load_here: all ranks' CPU seconds over the step's time and this host's cores (when the
// ranks share the host, as under wanemu, near 1 means CPU-bound), and host_busy: the fraction of the
// host's CPU time that was busy during the step, every process's and the kernel's (/proc/stat, read by
// the root: under wanemu it counts the emulator and its packets, which the ranks' seconds do not); the
// table says CPU-bound in a comment line when either is high,
// and for the last step its time (last_step_us) and when each rank returned after the root's start
// (finish_s; ranks on one machine only), which bench/calibrate_sim.py compares with sparrow-sim.
#include <getopt.h>
#include <sys/resource.h>
#include <mpi.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/coll/mpi_timing.h"
#include "core/args.h"
#include "format/checkpoint.h"
#include "gen/generator.h"
#include "sparrow/sparrow.h"
#include "tools/wanemu/scenario.h"

using namespace sparrow;

namespace {



struct Opts {
  bool sparse = true;
  size_t minb = 1 << 20, maxb = 1 << 20;
  double factor = 2;
  int iters = 5, warmup = 1, root = 0;
  bool check = true, json = false;
  int dtype = 9;
  double density = 0.01;
  std::string impl = "sparrow", model, scenario;
  bool stage = false;  // receivers stage each step and commit it once ready (commit timed apart)
  bool progress = false;
  bool elastic = false;  // an elastic communicator (sparrowConfig_t.elastic)
  int64_t layers = 1, vocab = 2048;
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// This host's CPU time in jiffies from /proc/stat (every process and the kernel, whatever namespace
// reads it: under wanemu that includes the emulator and the packets' softirq work, which no rank's
// own CPU seconds show): busy and total. Zero when unreadable.
struct HostCpu {
  double busy = 0, total = 0;
};
HostCpu host_cpu() {
  HostCpu h;
  FILE* f = fopen("/proc/stat", "r");
  if (!f) return h;
  unsigned long long v[8] = {};  // user nice system idle iowait irq softirq steal
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
    h.busy = double(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
    h.total = h.busy + double(v[3] + v[4]);
  }
  fclose(f);
  return h;
}

// --progress: a line per second while this rank is inside a collective.
class ProgressLine {
 public:
  ProgressLine(sparrowComm_t c, int rank) : c_(c), rank_(rank), t_([this] { run(); }) {}
  ~ProgressLine() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    t_.join();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    double since = -1;
    while (!cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_; })) {
      unsigned long long got = 0, sent = 0;
      int in = 0;
      sparrowCommGetProgress(c_, &got, &sent, &in);
      const double now = bench::now();
      if (!in) {
        since = -1;
        continue;
      }
      if (since < 0) since = now - 1;
      fprintf(stderr, "[rank %d] in a collective for %.0f s: %.1f MB received, %.1f MB sent\n", rank_, now - since,
              got / 1e6, sent / 1e6);
    }
  }
  sparrowComm_t c_;
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread t_;
};

// Every rank's JSON for its last call, gathered at the root as one array (text).
std::string gather_rank_json(sparrowComm_t comm, int rank, int n, int root, double cpu_s) {
  std::string mine = "{}";
  if (comm) {
    size_t need = 0;
    sparrowCommGetStatsJson(comm, nullptr, 0, &need);
    std::string j(need, '\0');
    if (sparrowCommGetStatsJson(comm, j.data(), j.size(), &need) == sparrowSuccess) {
      j.resize(need - 1);
      mine = j;
    }
  }
  char cpu[64];
  if (mine == "{}") {  // no communicator (MPI_Bcast): the CPU seconds and the rank alone
    snprintf(cpu, sizeof cpu, "{\"cpu_s\":%.4f,\"rank\":%d}", cpu_s, rank);
    mine = cpu;
  } else {
    snprintf(cpu, sizeof cpu, "\"cpu_s\":%.4f,", cpu_s);
    mine.insert(1, cpu);
  }
  int len = int(mine.size());
  std::vector<int> lens(n), offs(n);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, MPI_COMM_WORLD);
  std::string all;
  if (rank == root) {
    int total = 0;
    for (int r = 0; r < n; ++r) offs[r] = total, total += lens[r];
    all.resize(size_t(total));
  }
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, root, MPI_COMM_WORLD);
  if (rank != root) return "";
  std::string out = "[";
  for (int r = 0; r < n; ++r) out += (r ? "," : "") + all.substr(size_t(offs[r]), size_t(lens[r]));
  return out + "]";
}


MPI_Datatype mpi_type(int dt) {
  switch (dt) {
    case 0: return MPI_INT8_T;
    case 1: return MPI_UINT8_T;
    case 2: return MPI_INT32_T;
    case 3: return MPI_UINT32_T;
    case 4: return MPI_INT64_T;
    case 5: return MPI_UINT64_T;
    case 7: return MPI_FLOAT;
    case 8: return MPI_DOUBLE;
    default: return MPI_UINT16_T;  // 16-bit floats travel as their bits
  }
}

struct Bound {
  bool known = false;
  double uplink_Bps = 0, delay_s = 0;
  double seconds(double bytes) const { return bytes / uplink_Bps + delay_s; }
};

Bound lower_bound(const std::string& path, int root, int nranks) {
  Bound b;
  if (path.empty()) return b;
  auto s = wanemu::load_scenario(path);
  if (!s.ok() || int(s->hosts.size()) < nranks || s->hosts[root].up_mbit <= 0) return b;
  b.known = true;
  b.uplink_Bps = s->hosts[root].up_mbit * 1e6 / 8;
  for (int r = 0; r < nranks; ++r) {
    const auto* l = s->link(s->hosts[root].region, s->hosts[r].region);
    double d = l ? l->delay_ms : (s->hosts[root].region == s->hosts[r].region ? s->default_delay_ms : 0);
    b.delay_s = std::max(b.delay_s, d / 1e3);
  }
  return b;
}

const char* prog_name(const Opts& o) { return o.sparse ? "sparse_bcast_perf" : "broadcast_perf"; }

void usage(const char* argv0) {
  printf("usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-r ROOT] [-d TYPE]\n"
         "          [-D DENSITY] [--impl sparrow|paper|dense|mpi] [--model NAME --layers N --vocab N]\n"
         "          [--scenario FILE] [--json] [--stage] [--progress] [--elastic]\n"
         "  -b/-e SIZE      smallest/largest buffer, suffixes K M G (default 1M/1M); -f FACTOR between rows (2)\n"
         "                  (the root's first version is weight-like, N(0, 0.02), as incompressible as a model's)\n"
         "  -n N            timed steps per row, >= 1 (5); -w N warm-up steps (1); -c 0|1 check bits (1)\n"
         "  -r ROOT         root rank (0); -d TYPE datatype (bfloat16); -D DENSITY changed fraction 0..1 (0.01)\n"
         "  --impl NAME     sparrow, paper (SparrowRL's format, two-level tree, 4 streams as its paper), dense, mpi (MPI_Bcast)\n"
         "  --model NAME    realistic RL steps of data/models/NAME.json, --layers N (1), --vocab N (2048)\n"
         "  --scenario FILE wanemu scenario for the lower bound (default $WANEMU_SCENARIO)\n"
         "  --stage         receivers stage each step and commit it once ready; the commit is timed on its own\n"
         "  --json          one JSON object per row, with every rank's last step (stage times, bytes per\n"
         "                  peer, CPU seconds) under \"per_rank\", the last step's time and when each rank\n"
         "                  returned (finish_s)\n"
         "  --progress      every rank prints a line each second while it is inside a collective\n"
         "  --elastic       an elastic communicator (members may be dropped; its root waits for every\n"
         "                  acknowledgement, and dense receivers stage each broadcast before writing it)\n"
         "Run under mpirun (or scripts/wanemu-mpirun.sh).\n",
         argv0);
}

// The command line, checked before MPI starts (a bad argument exits 2, --help 0).
Opts parse_opts(int argc, char** argv) {
  Opts o;
  std::string self = argv[0];
  o.sparse = self.find("sparse") != std::string::npos;
  static option longopts[] = {{"impl", 1, 0, 'I'}, {"stage", 0, 0, 'G'},  {"model", 1, 0, 'M'}, {"layers", 1, 0, 'L'}, {"vocab", 1, 0, 'V'},
                              {"steps", 1, 0, 'n'}, {"json", 0, 0, 'J'}, {"progress", 0, 0, 'P'},  {"scenario", 1, 0, 'S'}, {"help", 0, 0, 'h'},
                              {"density", 1, 0, 'D'}, {"elastic", 0, 0, 'E'}, {0, 0, 0, 0}};
  const char* prog = prog_name(o);
  bool got_e = false;
  opterr = 0;  // our own one-line messages
  for (int c; (c = getopt_long(argc, argv, "b:e:f:n:w:c:r:d:D:h", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'b': o.minb = size_t(args::size(prog, "-b", optarg, 1, uint64_t(1) << 40)); break;
      case 'e': o.maxb = size_t(args::size(prog, "-e", optarg, 1, uint64_t(1) << 40)); got_e = true; break;
      case 'f': o.factor = args::number(prog, "-f", optarg, 1.01, 1e6); break;
      case 'n': o.iters = int(args::integer(prog, "-n/--steps", optarg, 1, 1000000)); break;
      case 'w': o.warmup = int(args::integer(prog, "-w", optarg, 0, 1000000)); break;
      case 'c': o.check = args::integer(prog, "-c", optarg, 0, 1) != 0; break;
      case 'r': o.root = int(args::integer(prog, "-r", optarg, 0, 1 << 20)); break;
      case 'd': {
        o.dtype = format::dtype_from_name(optarg);
        if (o.dtype < 0) args::bad(prog, "-d", optarg, "a datatype: " + format::dtype_names());
        break;
      }
      case 'D': o.density = args::number(prog, "-D/--density", optarg, 0, 1); break;
      case 'I': o.impl = args::choice(prog, "--impl", optarg, {"sparrow", "paper", "dense", "mpi"}); break;
      case 'G': o.stage = true; break;
      case 'M': o.model = optarg; break;
      case 'L': o.layers = args::integer(prog, "--layers", optarg, 1, 1000); break;
      case 'V': o.vocab = args::integer(prog, "--vocab", optarg, 1, 1 << 24); break;
      case 'J': o.json = true; break;
      case 'P': o.progress = true; break;
      case 'E': o.elastic = true; break;
      case 'S': o.scenario = optarg; break;
      case 'h': usage(argv[0]); exit(0);
      default: args::unknown(prog, argv[optind - 1]);
    }
  }
  if (o.elastic && o.impl == "mpi") args::bad(prog, "--elastic", "mpi", "a sparrow --impl (MPI_Bcast has no elastic form)");
  if (!got_e && o.minb > o.maxb) o.maxb = o.minb;  // -b alone: one size
  if (o.minb > o.maxb) args::bad(prog, "-e", std::to_string(o.maxb).c_str(), "a size >= -b (" + std::to_string(o.minb) + ")");
  if (!o.scenario.empty() && access(o.scenario.c_str(), R_OK) != 0)
    args::bad(prog, "--scenario", o.scenario.c_str(), "a readable scenario file");
  if (o.scenario.empty() && getenv("WANEMU_SCENARIO")) o.scenario = getenv("WANEMU_SCENARIO");
  if (o.impl == "paper") {
    // SparrowRL's design: its format, the static two-level tree, and 4 TCP streams per peer (its
    // paper's multi-stream setting, +12-16% over one): an ablation that handicaps the peer would
    // overstate sparrow.
    setenv("SPARROW_CODEC", "paper", 1);
    setenv("SPARROW_NSTREAMS", "4", 1);
    setenv("SPARROW_ALGO", "two_level", 1);
  }
  return o;
}

// The same steps as sparrowCommInitMPI (libsparrow_mpi), against the statically linked library.
sparrowComm_t open_comm(const Opts& o, int rank, int n) {
  sparrowUniqueId id;
  if (rank == 0 && sparrowGetUniqueId(&id) != sparrowSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
  cfg.elastic = o.elastic ? 1 : 0;
  sparrowComm_t comm = nullptr;
  sparrowResult_t rc = sparrowCommInitRankConfig(&comm, n, id, rank, &cfg);
  if (rc != sparrowSuccess) {
    fprintf(stderr, "rank %d: sparrowCommInitRankConfig: %s\n", rank, sparrowGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return comm;
}

// Everything a row needs that does not change between rows.
struct Job {
  Opts o;
  int rank = 0, n = 1;
  bool all_same = false;  // every rank on this host: completion times on one clock
  sparrowComm_t comm = nullptr;
  Bound bound;
  std::unique_ptr<gen::UpdateGenerator> gen;  // --model: the root's generator
  std::vector<kernels::cpu::TensorSpec> specs;  // --model: the tensors
  uint32_t es = 2;
};

// One row's buffers: the root's are the generator's (--model) or weight-like values; the others' start
// at zero, so the first step is a full version.
struct Buffers {
  std::vector<kernels::cpu::TensorSpec> layout;
  std::vector<std::vector<uint8_t>> own;
  std::vector<void*> ptr;
  uint64_t step_seed = 1;  // -b: the next step's changes
};

// The root's next step: a generator step (--model) or -D of the elements changed.
void mutate(Job& j, Buffers& b) {
  if (j.rank != j.o.root) return;
  if (j.gen) {
    j.gen->step();
    return;
  }
  for (size_t t = 0; t < b.layout.size(); ++t)
    gen::mutate_exact(b.ptr[t], b.layout[t].count, j.es, j.o.density, b.step_seed++);
}

Buffers make_buffers(Job& j, size_t bytes) {
  Buffers b;
  b.layout = j.specs;
  if (j.o.model.empty()) b.layout = {{"buf", uint8_t(j.o.dtype), bytes / j.es}};
  b.own.resize(b.layout.size());
  b.ptr.resize(b.layout.size());
  for (size_t t = 0; t < b.layout.size(); ++t) {
    if (j.gen && j.rank == j.o.root) {
      b.ptr[t] = j.gen->mutable_buffers()[t];
    } else {
      b.own[t].assign(b.layout[t].bytes(), 0);
      // Weight-like values: the first (full) version is as big on the wire as a real model's.
      if (j.rank == j.o.root) gen::fill_like_weights(b.own[t].data(), b.layout[t].count, uint8_t(j.o.dtype), 1 + t);
      b.ptr[t] = b.own[t].data();
    }
  }
  return b;
}

// One collective over the row's buffers, as --impl says; 0 or a sparrow/MPI error. `commit_s`: a
// staged receiver's commit time.
int run_op(const Job& j, const Buffers& b, double* commit_s) {
  const Opts& o = j.o;
  if (o.impl == "mpi") {
    for (size_t t = 0; t < b.layout.size(); ++t) {
      size_t cnt = b.layout[t].count;
      // MPI counts are int: send in pieces of at most 1 GiB.
      for (size_t off = 0; off < cnt; off += (size_t(1) << 30) / j.es) {
        size_t c = std::min(cnt - off, (size_t(1) << 30) / j.es);
        MPI_Bcast(static_cast<uint8_t*>(b.ptr[t]) + off * j.es, int(c), mpi_type(o.dtype), o.root, MPI_COMM_WORLD);
      }
    }
    return 0;
  }
  if (o.impl == "dense" || !o.sparse) {
    sparrowGroupStart();
    for (size_t t = 0; t < b.layout.size(); ++t)
      sparrowBroadcast(b.ptr[t], b.ptr[t], b.layout[t].count, sparrowDataType_t(o.dtype), o.root, j.comm, nullptr);
    return sparrowGroupEnd();
  }
  sparrowGroupStart();
  for (size_t t = 0; t < b.layout.size(); ++t)
    (o.stage ? sparrowSparseBcastStage : sparrowSparseBcast)(b.ptr[t], b.ptr[t], b.layout[t].count,
                                                             sparrowDataType_t(o.dtype), o.root, j.comm, nullptr);
  int g = sparrowGroupEnd();
  if (g != 0 || !o.stage || j.rank == o.root) return g;
  // Staged: the step arrives while this rank could keep generating; the switch is the commit.
  for (int ready = 0; !ready;) {
    if (sparrowStageQuery(j.comm, &ready) != sparrowSuccess) return 1;
    if (!ready) usleep(200);
  }
  double t0 = bench::now();
  g = sparrowStageCommit(j.comm);
  *commit_s = bench::now() - t0;
  return g;
}

// What a row measured, summed over its timed steps (the last step's CPU figures apart).
struct RowOut {
  size_t bytes = 0;
  int steps = 0, wrong = 0;
  double tsum = 0, wire = 0, dens = 0, csum = 0;
  double cpu_last = 0, took_last = 0, host_busy = 0;
  std::vector<double> finish;  // the last step's, per rank
  double cpu_sum = 0, cpu_load = 0;
  long cores = 1;
  bool cpu_bound = false;
  std::string per_rank;
};

// The timed steps of a row; 0, or 1 when a call failed.
int time_steps(Job& j, Buffers& b, RowOut& r) {
  const Opts& o = j.o;
  std::unique_ptr<ProgressLine> progress;
  if (o.progress && j.comm) progress = std::make_unique<ProgressLine>(j.comm, j.rank);
  double commit_s = 0;  // this receiver's last commit (--stage)
  for (int it = 0; it < o.iters; ++it) {
    if (o.sparse) mutate(j, b);
    int rc = 0;
    const double cpu0 = cpu_seconds();
    const bool root = j.rank == o.root;  // (the host's view is the root's to report)
    const HostCpu h0 = root ? host_cpu() : HostCpu{};
    double took = bench::timed_collective(j.rank, o.root, j.n, j.all_same, [&] { return run_op(j, b, &commit_s); }, &rc, &r.finish);
    r.cpu_last = cpu_seconds() - cpu0;
    const HostCpu h1 = root ? host_cpu() : HostCpu{};
    r.host_busy = h1.total > h0.total ? (h1.busy - h0.busy) / (h1.total - h0.total) : 0;
    r.took_last = took;
    if (rc) {
      if (rc > 0) fprintf(stderr, "rank %d: %s\n", j.rank, j.comm ? sparrowGetLastError(j.comm) : "MPI error");
      return 1;
    }
    r.tsum += took;
    r.steps++;
    if (o.stage) {  // the slowest receiver's commit
      double cmax = 0;
      MPI_Reduce(&commit_s, &cmax, 1, MPI_DOUBLE, MPI_MAX, o.root, MPI_COMM_WORLD);
      r.csum += cmax;
    }
    if (j.comm && j.rank == o.root && o.sparse && o.impl != "dense") {
      sparrowStats st = SPARROW_STATS_INITIALIZER;
      sparrowCommGetStats(j.comm, &st);
      r.wire += double(st.wireBytes);
      r.dens += st.density;
    } else {
      r.wire += double(r.bytes);
      r.dens += o.sparse ? o.density : 1.0;
    }
  }
  return 0;
}

// Every rank's buffers hash like the root's: the number of ranks whose do not (at the root).
int count_wrong(const Job& j, const Buffers& b) {
  uint64_t h = 0;
  for (size_t t = 0; t < b.layout.size(); ++t) h ^= XXH3_64bits(b.ptr[t], b.layout[t].bytes()) + t;
  uint64_t h0 = h;
  MPI_Bcast(&h0, 1, MPI_UINT64_T, j.o.root, MPI_COMM_WORLD);
  int mine = h != h0, wrong = 0;
  MPI_Reduce(&mine, &wrong, 1, MPI_INT, MPI_SUM, j.o.root, MPI_COMM_WORLD);
  return wrong;
}

// CPU: every rank's CPU seconds in the last step, against this host's cores (meaningful when the
// ranks share the host, as under wanemu): near 1, the step was CPU-bound, not network-bound.
void gather_cpu(const Job& j, RowOut& r) {
  MPI_Reduce(&r.cpu_last, &r.cpu_sum, 1, MPI_DOUBLE, MPI_SUM, j.o.root, MPI_COMM_WORLD);
  r.cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  r.cpu_load = r.took_last > 0 ? r.cpu_sum / (r.took_last * double(r.cores)) : 0;
  // Busy host: the ranks' own load, or every process's and the kernel's (the root's view of the host).
  r.cpu_bound = r.cpu_load > 0.85 || r.host_busy > 0.9;
}

// A row's means per timed step, as both outputs print them.
struct RowMeans {
  double t = 0, wire = 0, dens = 0, commit = 0, algbw = 0;
  double bound = 0;  // the lower bound of a step of this size (0: no scenario)
};

RowMeans row_means(const Job& j, const RowOut& r) {
  const Opts& o = j.o;
  RowMeans m;
  m.t = r.tsum / r.steps;
  m.wire = r.wire / r.steps;
  m.dens = r.dens / r.steps;
  m.commit = r.csum / r.steps;
  m.algbw = double(r.bytes) / m.t / 1e9;
  const bool sparse_wire = o.sparse && o.impl != "dense" && o.impl != "mpi";
  if (j.bound.known) m.bound = j.bound.seconds(sparse_wire ? m.wire : double(r.bytes));
  return m;
}

void print_json_row(const Job& j, const RowOut& r, const RowMeans& m) {
  const Opts& o = j.o;
  const double t = m.t, w = m.wire, bnd = m.bound;
  char line[512];
  snprintf(line, sizeof line,
           "{\"tool\": \"%s\", \"impl\": \"%s\", \"ranks\": %d, \"size\": %zu, \"count\": %zu, \"type\": \"%s\", "
           "\"root\": %d, \"time_us\": %.1f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %d, \"density\": %.5f, "
           "\"wire_bytes\": %.0f, \"ratio\": %.2f, \"bound_us\": %.1f, \"time_vs_bound\": %.3f, \"model\": \"%s\", "
           "\"scenario\": \"%s\"}",
           prog_name(o), o.impl.c_str(), j.n, r.bytes, r.bytes / j.es,
           format::dtype_name(uint8_t(o.dtype)), o.root, t * 1e6, m.algbw, m.algbw, r.wrong, m.dens, w, double(r.bytes) / w,
           bnd * 1e6, bnd > 0 ? t / bnd : 0.0, o.model.c_str(), o.scenario.c_str());
  line[strlen(line) - 1] = 0;  // the object goes on
  if (o.stage)
    printf("%s, \"stage\": true, \"commit_us\": %.1f, \"commit_vs_time\": %.4f", line, m.commit * 1e6, m.commit / t);
  else
    printf("%s", line);
  if (o.elastic) printf(", \"elastic\": true");
  std::string fin;  // the last step: when each rank returned, after the root's start
  for (size_t k = 0; k < r.finish.size(); ++k) fin += (k ? "," : "") + std::to_string(r.finish[k]);
  printf(", \"cpu_s_sum\": %.3f, \"host_cores\": %ld, \"cpu_load_here\": %.3f, \"host_busy\": %.3f, "
         "\"cpu_bound\": %s, \"last_step_us\": %.1f, \"finish_s\": [%s], \"per_rank\": %s}\n",
         r.cpu_sum, r.cores, r.cpu_load, r.host_busy, r.cpu_bound ? "true" : "false", r.took_last * 1e6, fin.c_str(),
         r.per_rank.empty() ? "[]" : r.per_rank.c_str());
}

void print_table_row(const Job& j, const RowOut& r, const RowMeans& m) {
  const Opts& o = j.o;
  printf(" %12zu %12zu %9s %5d %11.1f %9.3f %9.3f %7d", r.bytes, r.bytes / j.es, format::dtype_name(uint8_t(o.dtype)),
         o.root, m.t * 1e6, m.algbw, m.algbw, r.wrong);
  if (o.sparse) printf(" %7.3f%% %12.0f %8.1f", 100 * m.dens, m.wire, double(r.bytes) / m.wire);
  if (j.bound.known) printf(" %11.1f %8.2f", m.bound * 1e6, m.t / m.bound);
  if (o.stage) printf(" %11.1f %8.4f", m.commit * 1e6, m.commit / m.t);
  printf("\n");
  if (r.cpu_bound)
    printf("# CPU-bound: the ranks used %.2f CPU-s in the last %.3f s step, %.0f%% of this host's %ld cores "
           "(if they all run here); the host's cores were %.0f%% busy (every process and the kernel: an "
           "emulator too)\n", r.cpu_sum, r.took_last, 100 * r.cpu_load, r.cores, 100 * r.host_busy);
}

// One row: the first (full) version and the warm-up, untimed; the timed steps; the check; the line.
// 0, or 1 when a call failed or a rank's bits differ.
int run_row(Job& j, size_t bytes) {
  const Opts& o = j.o;
  Buffers b = make_buffers(j, bytes);
  double commit_s = 0;
  for (int w = 0; w < 1 + o.warmup; ++w) {
    if (w > 0 && o.sparse) mutate(j, b);
    if (run_op(j, b, &commit_s) != 0) {
      fprintf(stderr, "rank %d: %s\n", j.rank, sparrowGetLastError(j.comm));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  RowOut r;
  r.bytes = bytes;
  int exit_code = time_steps(j, b, r);
  if (o.check) r.wrong = count_wrong(j, b);
  r.per_rank = o.json ? gather_rank_json(j.comm, j.rank, j.n, o.root, r.cpu_last) : "";
  gather_cpu(j, r);
  if (j.rank == o.root && r.steps > 0) {
    const RowMeans m = row_means(j, r);
    if (o.json) print_json_row(j, r, m);
    else print_table_row(j, r, m);
    fflush(stdout);
    if (r.wrong) exit_code = 1;
  }
  return exit_code;
}

// The model's tensors and, at the root, its generator (--model); exits on a bad model.
void open_model(Job& j) {
  gen::GenOptions go;
  go.model = j.o.model;
  go.layers = j.o.layers;
  go.vocab = j.o.vocab;
  auto m = gen::open_model(go, j.rank == j.o.root);
  if (!m.ok()) {
    fprintf(stderr, "rank %d: %s\n", j.rank, m.status().to_string().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  j.gen = std::move(m->gen);
  j.specs = std::move(m->tensors);
  j.o.dtype = 9;
}

void print_header(const Job& j) {
  const Opts& o = j.o;
  const char* streams = getenv("SPARROW_NSTREAMS");
  printf("# %s: %d ranks, impl %s, root %d, type %s%s%s, streams per peer %s\n", prog_name(o), j.n, o.impl.c_str(),
         o.root, format::dtype_name(uint8_t(o.dtype)), o.model.empty() ? "" : ", model ", o.model.c_str(),
         o.impl == "mpi" ? "(MPI's)" : streams ? streams : "SPARROW_NSTREAMS default");
  if (j.bound.known)
    printf("# lower bound: bytes / root uplink (%.0f Mbit/s) + one-way delay to the farthest rank (%.1f ms)\n",
           j.bound.uplink_Bps * 8 / 1e6, j.bound.delay_s * 1e3);
  printf("#%12s %12s %9s %5s %11s %9s %9s %7s", "size", "count", "type", "root", "time(us)", "algbw", "busbw", "#wrong");
  if (o.sparse) printf(" %8s %12s %8s", "density", "wire(B)", "ratio");
  if (j.bound.known) printf(" %11s %8s", "bound(us)", "x_bound");
  if (o.stage) printf(" %11s %8s", "commit(us)", "commit/t");
  printf("\n");
}

// All ranks on one machine: completion times on one clock; otherwise op + barrier at the root.
bool all_on_one_host() {
  char host[256] = {0}, host0[256] = {0};
  gethostname(host, sizeof host - 1);
  memcpy(host0, host, sizeof host);
  MPI_Bcast(host0, sizeof host0, MPI_CHAR, 0, MPI_COMM_WORLD);
  int same = strcmp(host, host0) == 0, all_same = 0;
  MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all_same != 0;
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  Job j;
  j.o = parse_opts(argc, argv);
  const Opts& o = j.o;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &j.n);
  if (o.root >= j.n) {
    if (j.rank == 0)
      fprintf(stderr, "%s: -r '%d': expected a rank in 0..%d\n", prog_name(o), o.root, j.n - 1);
    MPI_Finalize();
    return 2;
  }
  if (o.impl != "mpi") j.comm = open_comm(o, j.rank, j.n);
  j.all_same = all_on_one_host();
  j.bound = lower_bound(o.scenario, o.root, j.n);
  // Buffers: one (size sweep) or a model's tensors (realistic steps).
  if (!o.model.empty()) open_model(j);
  j.es = format::dtype_size(uint8_t(o.dtype));
  if (j.rank == 0 && !o.json) print_header(j);
  std::vector<size_t> sizes;
  if (!o.model.empty()) {
    size_t total = 0;
    for (auto& s : j.specs) total += s.bytes();
    sizes.push_back(total);
  } else {
    for (double s = double(o.minb); s <= double(o.maxb) * 1.0001; s *= o.factor) sizes.push_back(size_t(s) / j.es * j.es);
  }
  int exit_code = 0;
  for (size_t bytes : sizes) {
    exit_code = run_row(j, bytes);
    if (exit_code) break;
  }
  if (j.comm) sparrowCommDestroy(j.comm);
  MPI_Finalize();
  return exit_code;
}
