// The codec demo: one trainer, one rollout worker, in one process.
//
// The trainer's weights come from the realistic update generator (a scaled-down Qwen3-8B, Adam with a
// small learning rate, bf16 rounding). Every step, the trainer encodes what changed as a sparse delta
// checkpoint; the worker verifies and applies it. The demo prints the density of each step, dense vs
// wire bytes, the ratio against SparrowRL's format, and checks that the worker's weights are
// bit-identical to the trainer's.
#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/args.h"
#include "gen/generator.h"
#include "kernels/cpu/delta.h"

using namespace sparrow;
using namespace sparrow::kernels::cpu;

// Fills go and steps; returns -1 to go on, or the exit status (--help, bad arguments).
static int parse_opts(int argc, char** argv, gen::GenOptions& go, int& steps) {
  static option longopts[] = {{"model", 1, 0, 'm'}, {"layers", 1, 0, 'l'}, {"vocab", 1, 0, 'v'},
                              {"steps", 1, 0, 's'}, {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
  const char* P = "sparrow-codec-demo";
  opterr = 0;  // our own one-line messages
  for (int c; (c = getopt_long(argc, argv, "h", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'm': go.model = optarg; break;
      case 'l': go.layers = args::integer(P, "--layers", optarg, 1, 1000); break;
      case 'v': go.vocab = args::integer(P, "--vocab", optarg, 1, 1 << 24); break;
      case 's': steps = int(args::integer(P, "--steps", optarg, 1, 100000)); break;
      case 'h':
        printf("usage: sparrow-codec-demo [options]\n"
               "Adam steps of a scaled model encoded as sparse deltas and applied to a worker's copy (one process).\n"
               "  --model NAME   model shape: qwen3-0.6b, qwen3-4b, qwen3-8b, qwen3-14b or a config.json (qwen3-8b)\n"
               "  --layers N     decoder layers kept, 1..1000 (1)\n"
               "  --vocab N      embedding rows kept, 1..16M (18992)\n"
               "  --steps N      steps after the first, full version, 1..100000 (5)\n");
        return 0;
      default: args::unknown(P, argv[optind - 1]);
    }
  }
  if (steps < 1 || go.layers < 0) {
    fprintf(stderr, "sparrow-codec-demo: --steps must be >= 1 and --layers >= 0\n");
    return 2;
  }
  return -1;
}

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  gen::GenOptions go;
  go.model = "qwen3-8b";
  go.layers = 1;
  go.vocab = 151936 / 8;
  int steps = 5;
  if (int rc = parse_opts(argc, argv, go, steps); rc >= 0) return rc;
  auto gr = gen::UpdateGenerator::create(go);
  if (!gr.ok()) {
    fprintf(stderr, "sparrow-codec-demo: %s\n", gr.status().to_string().c_str());
    return 2;
  }
  gen::UpdateGenerator& trainer = *gr.value();
  printf("sparrow codec demo: %s scaled to %lld layer(s) and %lld vocabulary rows: %.0f M bf16 weights (%.0f MB)\n",
         trainer.config().name.c_str(), (long long)go.layers, (long long)go.vocab, trainer.elements() / 1e6,
         trainer.bytes() / 1e6);

  // The worker holds its own copy of the weights and what version it has.
  std::vector<std::vector<uint8_t>> worker;
  std::vector<void*> worker_ptrs;
  for (auto& t : trainer.tensors()) worker.emplace_back(t.bytes());
  for (auto& w : worker) worker_ptrs.push_back(w.data());
  ReceiverState worker_state;

  DeltaEncoder encoder(trainer.tensors());
  EncodeStats st;
  auto v1 = encoder.encode(trainer.buffers(), {}, &st);  // first version: a full snapshot
  if (!v1.ok() || !apply_checkpoint(v1.value(), worker_ptrs, trainer.tensors(), worker_state).ok()) {
    fprintf(stderr, "sparrow-codec-demo: initial sync failed\n");
    return 1;
  }
  printf("version 1 (full snapshot): %.1f MB\n\n", st.wire_bytes / 1e6);
  printf("%5s %9s %10s %10s %12s %12s\n", "step", "density", "dense MB", "wire MB", "ratio", "paper fmt");
  double dense = 0, wire = 0, paper = 0;
  for (int s = 1; s <= steps; ++s) {
    trainer.step();  // one RL optimizer step on the trainer
    auto ck = encoder.encode(trainer.buffers(), {}, &st);
    if (!ck.ok()) {
      fprintf(stderr, "sparrow-codec-demo: %s\n", ck.status().to_string().c_str());
      return 1;
    }
    Status a = apply_checkpoint(ck.value(), worker_ptrs, trainer.tensors(), worker_state);
    if (!a.ok()) {
      fprintf(stderr, "sparrow-codec-demo: apply: %s\n", a.to_string().c_str());
      return 1;
    }
    printf("%5d %8.3f%% %10.1f %10.3f %11.1fx %11.1fx\n", s, 100 * st.density(), st.dense_bytes / 1e6,
           st.wire_bytes / 1e6, double(st.dense_bytes) / st.wire_bytes, double(st.dense_bytes) / st.leb128_overwrite_bytes);
    dense += st.dense_bytes;
    wire += st.wire_bytes;
    paper += st.leb128_overwrite_bytes;
  }
  bool exact = true;
  auto src = trainer.buffers();
  for (size_t t = 0; t < worker.size(); ++t) exact &= memcmp(worker[t].data(), src[t], worker[t].size()) == 0;
  printf("\nper step: %.1f MB dense -> %.3f MB on the wire: %.1fx smaller (SparrowRL's leb128+overwrite format: %.1fx)\n",
         dense / steps / 1e6, wire / steps / 1e6, dense / wire, dense / paper);
  printf("worker at version %llu, bit-exact: %s\n", (unsigned long long)worker_state.version, exact ? "yes" : "NO");
  return exact ? 0 : 1;
}
