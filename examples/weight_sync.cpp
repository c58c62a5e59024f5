// The weight-sync demo: a trainer (rank 0) and rollout workers (every other rank), one per emulated
// host. Each RL step the trainer takes an Adam step on a Qwen3-shaped model (the realistic
// generator) and pushes the new bf16 weights with sparrowSparseBcast in one group; workers apply them.
// Per step it prints the density, dense vs wire MB, the sync time, the time a dense broadcast of the
// same weights takes, and the lower bound (wire bytes / trainer uplink + one-way delay to the farthest
// worker); then a summary. Every worker checks its weights against the trainer's hash each step.
//
//   mpirun -np 8 sparrow-weight-sync [--model qwen3-4b] [--layers 1] [--vocab 1024] [--steps 10]
//   scripts/wanemu-mpirun.sh bench/scenarios/four_regions.toml build/bin/sparrow-weight-sync
#include <getopt.h>
#include <mpi.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/args.h"
#include "bench/coll/mpi_timing.h"
#include "gen/generator.h"
#include "sparrow/sparrow.h"
#include "tools/wanemu/scenario.h"

using namespace sparrow;

using bench::timed_collective;

namespace {

struct Opts {
  std::string model = "qwen3-4b";
  int64_t layers = 1, vocab = 1024;
  int steps = 10;
};

// Fills `o`; returns -1 to go on, or the exit status (--help).
int parse_opts(int argc, char** argv, Opts& o) {
  static option longopts[] = {{"model", 1, 0, 'm'}, {"layers", 1, 0, 'l'}, {"vocab", 1, 0, 'v'},
                              {"steps", 1, 0, 's'}, {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
  const char* P = "sparrow-weight-sync";
  opterr = 0;  // our own one-line messages
  for (int c; (c = getopt_long(argc, argv, "h", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'm': o.model = optarg; break;
      case 'l': o.layers = args::integer(P, "--layers", optarg, 1, 1000); break;
      case 'v': o.vocab = args::integer(P, "--vocab", optarg, 1, 1 << 24); break;
      case 's': o.steps = int(args::integer(P, "--steps", optarg, 1, 100000)); break;
      case 'h':
        printf("usage: mpirun -np N sparrow-weight-sync [options]\n"
               "Rank 0 is the trainer, the others rollout workers: RL steps of a scaled model pushed with\n"
               "sparrowSparseBcast, every worker's bits checked every step.\n"
               "  --model NAME   model shape: qwen3-0.6b, qwen3-4b, qwen3-8b, qwen3-14b or a config.json (qwen3-4b)\n"
               "  --layers N     decoder layers kept, 1..1000 (1)\n"
               "  --vocab N      embedding rows kept, 1..16M (1024)\n"
               "  --steps N      RL steps after the first, full version, 1..100000 (10)\n");
        return 0;
      default: args::unknown(P, argv[optind - 1]);
    }
  }
  return -1;
}

// Rank 0 makes the id and MPI hands it to the others, as with NCCL.
sparrowComm_t init_comm(int rank, int n) {
  sparrowUniqueId id;
  if (rank == 0 && sparrowGetUniqueId(&id) != sparrowSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  sparrowComm_t comm;
  if (sparrowCommInitRank(&comm, n, id, rank) != sparrowSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, sparrowGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return comm;
}

// The model's bf16 weights: the trainer's (with its optimizer) on rank 0, a worker's copy elsewhere.
struct Model {
  std::unique_ptr<gen::UpdateGenerator> trainer;
  std::vector<kernels::cpu::TensorSpec> specs;
  std::vector<std::vector<uint8_t>> weights;
  std::vector<void*> ptr;
  double dense_bytes = 0;
};

Model open_weights(const Opts& o, int rank) {
  Model m;
  gen::GenOptions go;
  go.model = o.model;
  go.layers = o.layers;
  go.vocab = o.vocab;
  auto om = gen::open_model(go, rank == 0);
  if (!om.ok()) {
    fprintf(stderr, "rank %d: %s\n", rank, om.status().to_string().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  m.trainer = std::move(om->gen);
  m.specs = std::move(om->tensors);
  if (m.trainer) {
    m.ptr = m.trainer->mutable_buffers();
  } else {
    for (auto& s : m.specs) m.weights.emplace_back(s.bytes(), 0);
    for (auto& w : m.weights) m.ptr.push_back(w.data());
  }
  for (auto& s : m.specs) m.dense_bytes += double(s.bytes());
  return m;
}

// The lower bound's terms from the emulated scenario, when there is one (else zero): the trainer's
// uplink (bytes per second) and the one-way delay to the farthest worker.
struct Bound {
  double uplink = 0, delay = 0;
};

Bound scenario_bound(int n) {
  Bound b;
  const char* sc = getenv("WANEMU_SCENARIO");
  if (!sc) return b;
  auto s = wanemu::load_scenario(sc);
  if (!s.ok() || int(s->hosts.size()) < n || s->hosts[0].up_mbit <= 0) return b;
  b.uplink = s->hosts[0].up_mbit * 1e6 / 8;
  for (int r = 1; r < n; ++r) {
    const auto* l = s->link(s->hosts[0].region, s->hosts[r].region);
    b.delay = std::max(b.delay, l ? l->delay_ms / 1e3 : s->default_delay_ms / 1e3);
  }
  return b;
}

// Every tensor in one group: the sparse push of a step, or a plain dense broadcast.
int sync_all(const Model& m, sparrowComm_t comm, bool sparse) {
  sparrowGroupStart();
  for (size_t t = 0; t < m.specs.size(); ++t) {
    if (sparse) sparrowSparseBcast(m.ptr[t], m.ptr[t], m.specs[t].count, sparrowBfloat16, 0, comm, nullptr);
    else sparrowBroadcast(m.ptr[t], m.ptr[t], m.specs[t].count, sparrowBfloat16, 0, comm, nullptr);
  }
  return int(sparrowGroupEnd());
}

// How many workers' weights differ from the trainer's (on rank 0; a hash of every tensor).
int count_wrong(const Model& m) {
  uint64_t h = 0;
  for (size_t t = 0; t < m.specs.size(); ++t) h ^= XXH3_64bits(m.ptr[t], m.specs[t].bytes()) + t;
  uint64_t h0 = h;
  MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  int mine = h != h0, wrong = 0;
  MPI_Reduce(&mine, &wrong, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  return wrong;
}

// What the summary adds up (rank 0).
struct Totals {
  double t = 0, wire = 0, bound = 0, density = 0;
  int bad_steps = 0;
};

void print_step(int s, const Model& m, sparrowComm_t comm, const Bound& b, double t, int wrong, Totals& tot) {
  sparrowStats st = SPARROW_STATS_INITIALIZER;
  sparrowCommGetStats(comm, &st);
  double bound = b.uplink > 0 ? double(st.wireBytes) / b.uplink + b.delay : 0;
  printf("%5d %8.3f%% %10.1f %10.3f %7.0fx %10.1f %10s %9s %7s\n", s, 100 * st.density, m.dense_bytes / 1e6,
         st.wireBytes / 1e6, m.dense_bytes / double(st.wireBytes), t * 1e3,
         bound > 0 ? std::to_string(int(bound * 1e3 + 0.5)).c_str() : "-",
         bound > 0 ? (std::to_string(t / bound).substr(0, 4) + "x").c_str() : "-", wrong ? "NO" : "yes");
  fflush(stdout);
  tot.t += t;
  tot.wire += double(st.wireBytes);
  tot.bound += bound;
  tot.density += st.density;
  tot.bad_steps += wrong != 0;
}

void print_summary(const Opts& o, int n, const Model& m, const Totals& tot, double t_dense) {
  const int steps = o.steps;
  printf("\nsummary over %d steps (%d ranks):\n", steps, n);
  printf("  mean density            %.3f%%\n", 100 * tot.density / steps);
  printf("  dense / wire per step   %.1f MB / %.3f MB  (%.0fx smaller)\n", m.dense_bytes / 1e6, tot.wire / steps / 1e6,
         m.dense_bytes * steps / tot.wire);
  printf("  sync time per step      sparse %.1f ms; dense broadcast %.1f ms, measured once (%.1fx faster)\n",
         tot.t / steps * 1e3, t_dense * 1e3, t_dense / (tot.t / steps));
  if (tot.bound > 0)
    printf("  lower bound per step    %.1f ms  (sparse is %.2fx the bound)\n", tot.bound / steps * 1e3, tot.t / tot.bound);
  printf("  bit-exact on every worker, every step: %s\n", tot.bad_steps ? "NO" : "yes");
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  Opts o;
  if (int rc = parse_opts(argc, argv, o); rc >= 0) return rc;
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  sparrowComm_t comm = init_comm(rank, n);
  Model m = open_weights(o, rank);
  const Bound b = scenario_bound(n);
  auto sparse = [&] { return sync_all(m, comm, true); };
  auto dense = [&] { return sync_all(m, comm, false); };
  if (rank == 0) {
    printf("sparrow weight-sync demo: %s scaled to %lld layer(s), vocab %lld: %.0f M bf16 weights (%.0f MB), %d ranks%s\n",
           o.model.c_str(), (long long)o.layers, (long long)o.vocab, m.dense_bytes / 2e6, m.dense_bytes / 1e6, n,
           b.uplink > 0 ? "" : " (no emulated WAN: lower bound not shown)");
    fflush(stdout);
  }
  int rc = 0;
  double t_first = timed_collective(rank, 0, n, true, sparse, &rc);  // version 1: dense, through sparse_bcast
  if (rc) MPI_Abort(MPI_COMM_WORLD, 1);
  double t_dense = timed_collective(rank, 0, n, true, dense, &rc);  // what a plain dense broadcast of the model costs
  if (rc) MPI_Abort(MPI_COMM_WORLD, 1);
  Totals tot;
  const int wrong = count_wrong(m);
  tot.bad_steps = wrong ? 1 : 0;
  if (rank == 0) {
    printf("first sync (full version): %.2f s; dense broadcast of the model: %.2f s%s\n\n", t_first, t_dense,
           wrong ? "  WRONG BITS" : "");
    // (The dense broadcast is measured once, above, not per step.)
    printf("%5s %9s %10s %10s %8s %10s %10s %9s %7s\n", "step", "density", "dense MB", "wire MB", "ratio", "sparse ms",
           "bound ms", "x bound", "exact");
    fflush(stdout);
  }
  for (int s = 1; s <= o.steps; ++s) {
    if (rank == 0) m.trainer->step();
    double t = timed_collective(rank, 0, n, true, sparse, &rc);
    if (rc) {
      if (rank == 0) fprintf(stderr, "step %d failed: %s\n", s, sparrowGetLastError(comm));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int w = count_wrong(m);
    if (rank == 0) print_step(s, m, comm, b, t, w, tot);
  }
  if (rank == 0) print_summary(o, n, m, tot, t_dense);
  sparrowCommDestroy(comm);
  MPI_Finalize();
  return tot.bad_steps ? 1 : 0;
}
