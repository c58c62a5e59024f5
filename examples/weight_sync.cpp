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

int main(int argc, char** argv) {
  std::string model = "qwen3-4b";
  int64_t layers = 1, vocab = 1024;
  int steps = 10;
  static option longopts[] = {{"model", 1, 0, 'm'}, {"layers", 1, 0, 'l'}, {"vocab", 1, 0, 'v'},
                              {"steps", 1, 0, 's'}, {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
  const char* P = "sparrow-weight-sync";
  opterr = 0;  // our own one-line messages
  for (int c; (c = getopt_long(argc, argv, "h", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'm': model = optarg; break;
      case 'l': layers = args::integer(P, "--layers", optarg, 1, 1000); break;
      case 'v': vocab = args::integer(P, "--vocab", optarg, 1, 1 << 24); break;
      case 's': steps = int(args::integer(P, "--steps", optarg, 1, 100000)); break;
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
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  sparrowUniqueId id;
  if (rank == 0 && sparrowGetUniqueId(&id) != sparrowSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  sparrowComm_t comm;
  if (sparrowCommInitRank(&comm, n, id, rank) != sparrowSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, sparrowGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // The trainer holds the optimizer; workers only the bf16 weights.
  std::unique_ptr<gen::UpdateGenerator> trainer;
  std::vector<kernels::cpu::TensorSpec> specs;
  std::vector<std::vector<uint8_t>> weights;
  std::vector<void*> ptr;
  {
    gen::GenOptions go;
    go.model = model;
    go.layers = layers;
    go.vocab = vocab;
    auto m = gen::open_model(go, rank == 0);
    if (!m.ok()) {
      fprintf(stderr, "rank %d: %s\n", rank, m.status().to_string().c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    trainer = std::move(m->gen);
    specs = std::move(m->tensors);
  }
  if (trainer) {
    ptr = trainer->mutable_buffers();
  } else {
    for (auto& s : specs) weights.emplace_back(s.bytes(), 0);
    for (auto& w : weights) ptr.push_back(w.data());
  }
  double dense_bytes = 0;
  for (auto& s : specs) dense_bytes += double(s.bytes());
  // Lower bound from the emulated scenario, when there is one.
  double uplink = 0, delay = 0;
  if (const char* sc = getenv("WANEMU_SCENARIO")) {
    auto s = wanemu::load_scenario(sc);
    if (s.ok() && int(s->hosts.size()) >= n && s->hosts[0].up_mbit > 0) {
      uplink = s->hosts[0].up_mbit * 1e6 / 8;
      for (int r = 1; r < n; ++r) {
        const auto* l = s->link(s->hosts[0].region, s->hosts[r].region);
        delay = std::max(delay, l ? l->delay_ms / 1e3 : s->default_delay_ms / 1e3);
      }
    }
  }
  auto sparse = [&] {
    sparrowGroupStart();
    for (size_t t = 0; t < specs.size(); ++t)
      sparrowSparseBcast(ptr[t], ptr[t], specs[t].count, sparrowBfloat16, 0, comm, nullptr);
    return int(sparrowGroupEnd());
  };
  auto dense = [&] {
    sparrowGroupStart();
    for (size_t t = 0; t < specs.size(); ++t)
      sparrowBroadcast(ptr[t], ptr[t], specs[t].count, sparrowBfloat16, 0, comm, nullptr);
    return int(sparrowGroupEnd());
  };
  auto check = [&] {
    uint64_t h = 0;
    for (size_t t = 0; t < specs.size(); ++t) h ^= XXH3_64bits(ptr[t], specs[t].bytes()) + t;
    uint64_t h0 = h;
    MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int mine = h != h0, wrong = 0;
    MPI_Reduce(&mine, &wrong, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    return wrong;
  };
  if (rank == 0) {
    printf("sparrow weight-sync demo: %s scaled to %lld layer(s), vocab %lld: %.0f M bf16 weights (%.0f MB), %d ranks%s\n",
           model.c_str(), (long long)layers, (long long)vocab, dense_bytes / 2e6, dense_bytes / 1e6, n,
           uplink > 0 ? "" : " (no emulated WAN: lower bound not shown)");
    fflush(stdout);
  }
  int rc = 0;
  double t_first = timed_collective(rank, 0, n, true, sparse, &rc);  // version 1: dense, through sparse_bcast
  if (rc) MPI_Abort(MPI_COMM_WORLD, 1);
  double t_dense = timed_collective(rank, 0, n, true, dense, &rc);  // what a plain dense broadcast of the model costs
  if (rc) MPI_Abort(MPI_COMM_WORLD, 1);
  int wrong = check();
  if (rank == 0) {
    printf("first sync (full version): %.2f s; dense broadcast of the model: %.2f s%s\n\n", t_first, t_dense,
           wrong ? "  WRONG BITS" : "");
    // (The dense broadcast is measured once, above, not per step.)
    printf("%5s %9s %10s %10s %8s %10s %10s %9s %7s\n", "step", "density", "dense MB", "wire MB", "ratio", "sparse ms",
           "bound ms", "x bound", "exact");
    fflush(stdout);
  }
  double sum_t = 0, sum_w = 0, sum_b = 0, sum_d = 0;
  int bad_steps = wrong ? 1 : 0;
  for (int s = 1; s <= steps; ++s) {
    if (rank == 0) trainer->step();
    double t = timed_collective(rank, 0, n, true, sparse, &rc);
    if (rc) {
      if (rank == 0) fprintf(stderr, "step %d failed: %s\n", s, sparrowGetLastError(comm));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int w = check();
    if (rank == 0) {
      sparrowStats st;
      sparrowCommGetStats(comm, &st);
      double bound = uplink > 0 ? double(st.wireBytes) / uplink + delay : 0;
      printf("%5d %8.3f%% %10.1f %10.3f %7.0fx %10.1f %10s %9s %7s\n", s, 100 * st.density, dense_bytes / 1e6,
             st.wireBytes / 1e6, dense_bytes / double(st.wireBytes), t * 1e3,
             bound > 0 ? std::to_string(int(bound * 1e3 + 0.5)).c_str() : "-",
             bound > 0 ? (std::to_string(t / bound).substr(0, 4) + "x").c_str() : "-", w ? "NO" : "yes");
      fflush(stdout);
      sum_t += t;
      sum_w += double(st.wireBytes);
      sum_b += bound;
      sum_d += st.density;
      bad_steps += w != 0;
    }
  }
  if (rank == 0) {
    printf("\nsummary over %d steps (%d ranks):\n", steps, n);
    printf("  mean density            %.3f%%\n", 100 * sum_d / steps);
    printf("  dense / wire per step   %.1f MB / %.3f MB  (%.0fx smaller)\n", dense_bytes / 1e6, sum_w / steps / 1e6,
           dense_bytes * steps / sum_w);
    printf("  sync time per step      sparse %.1f ms; dense broadcast %.1f ms, measured once (%.1fx faster)\n",
           sum_t / steps * 1e3, t_dense * 1e3,
           t_dense / (sum_t / steps));
    if (sum_b > 0) printf("  lower bound per step    %.1f ms  (sparse is %.2fx the bound)\n", sum_b / steps * 1e3, sum_t / sum_b);
    printf("  bit-exact on every worker, every step: %s\n", bad_steps ? "NO" : "yes");
  }
  sparrowCommDestroy(comm);
  MPI_Finalize();
  return bad_steps ? 1 : 0;
}
