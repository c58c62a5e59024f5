// sparrow-codec-bench: measures the sparse delta checkpoint codec on realistic RL steps.
//
// Runs the update generator (Qwen3-shaped, Adam + bf16 rounding), encodes every step as a checkpoint
// on one core, applies it to a receiver copy, and reports sizes, the entropy bound, the SparrowRL
// format on the same step, extraction/apply speed and this machine's single-core read bandwidth,
// measured in the same run.
#include <getopt.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/args.h"
#include "core/parallel.h"
#include "format/codec_choice.h"
#include "gen/generator.h"
#include "kernels/cpu/delta.h"
#include "kernels/cpu/extract.h"

using namespace sparrow;
using namespace sparrow::kernels::cpu;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void usage(FILE* f) {
  fprintf(f,
          "usage: sparrow-codec-bench [options]\n"
          "  --model NAME|PATH   model shape (qwen3-0.6b, qwen3-4b, qwen3-8b, qwen3-14b or a config.json) [qwen3-8b]\n"
          "  --layers N          decoder layers kept (scale-down to fit memory), 1..1000 [1]\n"
          "  --vocab N           embedding rows kept (0: the model's; default: vocab/8)\n"
          "  --steps N           RL steps measured after the first (dense) version [3]\n"
          "  --lr X              learning rate of the Adam step [1e-6]\n"
          "  --seed N            generator seed [1]\n"
          "  --chunk-elems N     elements per chunk [SPARROW_CHUNK_ELEMS]\n"
          "  --encode-threads N  threads for extraction+encoding (goal is per core) [1]\n"
          "  --apply-threads N   threads for apply [all cores]\n"
          "  --value-sample N    pick a chunk's value codec on its first N changes (0: on all of them) [1024]\n"
          "  --link-mbit N       a link rate (Mbit/s, 1..100000000) to report each step's time at: its wire bytes at\n"
          "                      that rate plus encode and apply time on these threads\n"
          "  --choose-by W       time: value codecs picked per chunk by estimated time at --link-mbit (its bytes\n"
          "                      there plus their CPU time), as sparse_bcast does at the probed rate; bytes: the\n"
          "                      fewest bytes [time]\n"
          "  --json              print one JSON object instead of the table\n"
          "  -h, --help          this text\n"
          "Memory: about 18 bytes per parameter (fp32 master + Adam moments, bf16 root, shadow, receiver).\n");
}

// Single-core read bandwidth: sum 64-bit words of a buffer larger than the caches; best of 3, with
// and without asking for the lines ahead as the extraction kernels do (so the reference is the
// better of the two, not one the kernels' prefetching beats by construction).
double read_bandwidth_gbps(size_t bytes) {
  std::vector<uint64_t> buf(bytes / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  double best = 0;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 6; ++rep) {
    const bool ahead = rep % 2;
    double t0 = now_s();
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
      if (ahead) __builtin_prefetch(reinterpret_cast<const void*>(uintptr_t(&buf[i]) + kernels::cpu::kPrefetchAhead), 0, 3);
      a0 += buf[i]; a1 += buf[i + 1]; a2 += buf[i + 2]; a3 += buf[i + 3];
      a4 += buf[i + 4]; a5 += buf[i + 5]; a6 += buf[i + 6]; a7 += buf[i + 7];
    }
    sink = sink + a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    double dt = now_s() - t0;
    best = std::max(best, double(bytes) / dt / 1e9);
  }
  return best;
}

// The command line.
struct Opts {
  gen::GenOptions go;
  int steps = 3;
  bool json = false;
  EncodeOptions eo;
  ApplyOptions ao;
  double link_mbit = 0;
  bool by_time = true;
  Opts() {
    go.layers = 1;
    go.vocab = -1;
    eo.threads = 1;
  }
};

// Fills `o`; returns -1 to go on, or the exit status (help, bad arguments).
int parse_opts(int argc, char** argv, Opts& o) {
  static option longopts[] = {{"model", 1, 0, 'm'},         {"layers", 1, 0, 'l'},        {"vocab", 1, 0, 'v'},
                              {"steps", 1, 0, 's'},         {"lr", 1, 0, 'r'},            {"seed", 1, 0, 'S'},
                              {"chunk-elems", 1, 0, 'c'},   {"encode-threads", 1, 0, 'e'}, {"apply-threads", 1, 0, 'a'},
                              {"value-sample", 1, 0, 'V'},  {"json", 0, 0, 'j'},          {"help", 0, 0, 'h'},
                              {"link-mbit", 1, 0, 'L'},     {"choose-by", 1, 0, 'C'},     {0, 0, 0, 0}};
  int c;
  const char* P = "sparrow-codec-bench";
  opterr = 0;  // our own one-line messages
  while ((c = getopt_long(argc, argv, "h", longopts, nullptr)) != -1) {
    switch (c) {
      case 'm': o.go.model = optarg; break;
      case 'l': o.go.layers = args::integer(P, "--layers", optarg, 1, 1000); break;
      case 'v': o.go.vocab = args::integer(P, "--vocab", optarg, 0, 1 << 24); break;
      case 's': o.steps = int(args::integer(P, "--steps", optarg, 1, 100000)); break;
      case 'r': o.go.lr = args::number(P, "--lr", optarg, 1e-12, 1); break;
      case 'S': o.go.seed = uint64_t(args::integer(P, "--seed", optarg, 0, INT64_MAX)); break;
      case 'c': o.eo.chunk_elems = uint32_t(args::integer(P, "--chunk-elems", optarg, 1024, 1 << 30)); break;
      case 'e': o.eo.threads = int(args::integer(P, "--encode-threads", optarg, 1, 1024)); break;
      case 'a': o.ao.threads = int(args::integer(P, "--apply-threads", optarg, 1, 1024)); break;
      case 'V': o.eo.value_sample = size_t(args::integer(P, "--value-sample", optarg, 0, 1 << 30)); break;
      case 'L': o.link_mbit = args::number(P, "--link-mbit", optarg, 1, 1e8); break;
      case 'C': o.by_time = args::choice(P, "--choose-by", optarg, {"time", "bytes"}) == "time"; break;
      case 'j': o.json = true; break;
      case 'h': usage(stdout); return 0;
      default: args::unknown(P, argv[optind - 1]);
    }
  }
  if (optind < argc || o.steps < 1 || o.go.layers < 0) {
    usage(stderr);
    return 2;
  }
  if (o.by_time) o.eo.link_Bps = o.link_mbit * 1e6 / 8;
  if (o.go.vocab < 0) {
    auto cfg = gen::load_model_config(o.go.model);
    if (!cfg.ok()) {
      fprintf(stderr, "sparrow-codec-bench: %s\n", cfg.status().to_string().c_str());
      return 2;
    }
    o.go.vocab = std::max<int64_t>(1, cfg->vocab / 8);
  }
  return -1;
}

// Totals over the measured steps.
struct Sums {
  double changes = 0, elems = 0, wire = 0, dense = 0, paper = 0, idx_bytes = 0, sparse_changes = 0, entropy = 0,
         extract_s = 0, encode_wall = 0, apply_s = 0, verify_s = 0, decode_s = 0, write_s = 0, apply_changes = 0;
  void add(const EncodeStats& es, const ApplyStats& as) {
    changes += es.changes;
    elems += es.elements;
    wire += es.wire_bytes;
    dense += es.dense_bytes;
    paper += es.leb128_overwrite_bytes;
    idx_bytes += es.sparse_index_bytes;
    sparse_changes += es.sparse_changes;
    entropy += es.index_entropy_bits;
    extract_s += es.extract_seconds;
    encode_wall += es.wall_seconds;
    apply_s += as.wall_seconds;
    verify_s += as.verify_seconds;
    decode_s += as.decode_seconds;
    write_s += as.write_seconds;
    apply_changes += double(as.changes);
  }
};

void print_header_row() {
  printf("%4s %8s %11s %11s %8s %8s %8s %8s %9s %9s %9s\n", "step", "density", "dense_MB", "wire_MB", "ratio", "paper",
         "idx_bit", "entropy", "extr_GB/s", "enc_GB/s", "apply_GB/s");
}

void print_step_row(int s, const EncodeStats& es, const ApplyStats& as) {
  printf("%4d %7.3f%% %11.1f %11.3f %8.1f %8.1f %8.2f %8.2f %9.2f %9.2f %9.2f\n", s, 100 * es.density(),
         es.dense_bytes / 1e6, es.wire_bytes / 1e6, double(es.dense_bytes) / es.wire_bytes,
         double(es.dense_bytes) / es.leb128_overwrite_bytes, 8.0 * es.sparse_index_bytes / std::max<uint64_t>(1, es.sparse_changes),
         es.index_entropy_bits / std::max<uint64_t>(1, es.sparse_changes), 2.0 * es.dense_bytes / es.extract_seconds / 1e9,
         es.dense_bytes / es.wall_seconds / 1e9, es.wire_bytes / as.wall_seconds / 1e9);
}

// The means and rates the summary prints, from the totals.
struct Summary {
  double density, wire, dense, paper, idx_bits, ent_bits, extract_gbps, encode_gbps, apply_gbps, decode_ns, write_ns,
      verify_gbps, link_s, step_at_link_s, read_bw;
  int apply_threads;
  bool exact;
};
constexpr double kLink10G = 10e9 / 8 / 1e9;  // GB/s a 10 Gbit/s link delivers

Summary summarize(const Sums& t, const Opts& o, double read_bw, bool exact) {
  Summary m;
  m.density = t.changes / t.elems;
  m.wire = t.wire / o.steps;
  m.dense = t.dense / o.steps;
  m.paper = t.paper / o.steps;
  m.idx_bits = 8.0 * t.idx_bytes / std::max(1.0, t.sparse_changes);
  m.ent_bits = t.entropy / std::max(1.0, t.sparse_changes);
  m.extract_gbps = 2.0 * t.dense / t.extract_s / 1e9;  // bytes read: current + shadow
  m.encode_gbps = t.dense / t.encode_wall / 1e9;
  m.apply_gbps = t.wire / t.apply_s / 1e9;  // wire bytes consumed per second
  // Per change, on the apply threads: decoding and staging, then writing (base verification excluded).
  const double per_change = std::max(1.0, t.apply_changes);
  m.decode_ns = 1e9 * t.decode_s / per_change;
  m.write_ns = 1e9 * t.write_s / per_change;
  // Base verification (SPARROW_VERIFY_BASE): the pass that checksums the receiver's buffers, in dense
  // bytes per second (0 when it is off); its time is part of apply here (collectives overlap it).
  m.verify_gbps = t.verify_s > 0 ? t.dense / t.verify_s / 1e9 : 0;
  // At --link-mbit: a step's wire time plus the root's encode and a receiver's apply, not overlapped.
  m.link_s = o.link_mbit > 0 ? m.wire * 8 / (o.link_mbit * 1e6) : 0;
  m.step_at_link_s = m.link_s + (t.encode_wall + t.apply_s) / o.steps;
  m.read_bw = read_bw;
  m.apply_threads = o.ao.threads > 0 ? o.ao.threads : kernel_threads();
  m.exact = exact;
  return m;
}

void print_json(const Opts& o, const gen::UpdateGenerator& g, const Sums& t, const Summary& m) {
  printf("{\"link_mbit\": %.0f, \"choose_by\": \"%s\", \"step_seconds_at_link\": %.4f, ", o.link_mbit,
         o.by_time && o.link_mbit > 0 ? "time" : "bytes", o.link_mbit > 0 ? m.step_at_link_s : 0.0);
  printf("\"model\": \"%s\", \"layers\": %lld, \"vocab\": %lld, \"elements\": %llu, \"steps\": %d, \"lr\": %g, "
         "\"density\": %.6f, \"dense_bytes\": %.0f, \"wire_bytes\": %.0f, \"ratio\": %.2f, "
         "\"leb128_overwrite_bytes\": %.0f, \"paper_ratio\": %.2f, \"index_bits_per_change\": %.3f, "
         "\"index_entropy_bits_per_change\": %.3f, \"index_vs_entropy\": %.4f, \"extract_gbps\": %.3f, \"extract_isa\": \"%s\", "
         "\"read_bandwidth_gbps\": %.3f, \"extract_vs_read_bandwidth\": %.3f, \"encode_gbps\": %.3f, "
         "\"encode_threads\": %d, \"value_sample\": %zu, \"apply_gbps\": %.3f, \"apply_decode_ns_per_change\": %.2f, "
         "\"apply_write_ns_per_change\": %.2f, \"apply_vs_10gbit\": %.3f, \"apply_threads\": %d, "
         "\"verify_base\": %s, \"verify_gbps\": %.3f, \"verify_seconds_per_step\": %.4f, "
         "\"bit_exact\": %s}\n",
         g.config().name.c_str(), (long long)(o.go.layers ? o.go.layers : g.config().layers), (long long)o.go.vocab,
         (unsigned long long)g.elements(), o.steps, o.go.lr, m.density, m.dense, m.wire, m.dense / m.wire, m.paper,
         m.dense / m.paper, m.idx_bits, m.ent_bits, m.idx_bits / m.ent_bits, m.extract_gbps, kernels::cpu::isa_name(o.eo.isa),
         m.read_bw, m.extract_gbps / m.read_bw, m.encode_gbps, o.eo.threads, o.eo.value_sample, m.apply_gbps, m.decode_ns,
         m.write_ns, m.apply_gbps / kLink10G, m.apply_threads, o.ao.verify_base ? "true" : "false", m.verify_gbps,
         t.verify_s / o.steps, m.exact ? "true" : "false");
}

void print_table(const Opts& o, const Sums& t, const Summary& m) {
  printf("\nmean over %d steps: density %.3f%%, %.1f MB dense -> %.3f MB wire: ratio %.1fx (SparrowRL format %.1fx)\n",
         o.steps, 100 * m.density, m.dense / 1e6, m.wire / 1e6, m.dense / m.wire, m.dense / m.paper);
  printf("index: %.2f bits/change vs entropy bound %.2f (%.3fx)\n", m.idx_bits, m.ent_bits, m.idx_bits / m.ent_bits);
  printf("extraction (%s path): %.2f GB/s read on %d core(s) vs single-core read bandwidth %.2f GB/s (%.2fx); "
         "encode end to end %.2f GB/s dense\n",
         kernels::cpu::isa_name(o.eo.isa), m.extract_gbps, o.eo.threads, m.read_bw, m.extract_gbps / m.read_bw, m.encode_gbps);
  printf("apply: %.2f GB/s of wire bytes (%.2fx what a 10 Gbit/s link delivers) on %d thread(s); per change: "
         "decode %.2f ns + write %.2f ns\n", m.apply_gbps, m.apply_gbps / kLink10G, m.apply_threads, m.decode_ns, m.write_ns);
  if (o.ao.verify_base)
    printf("base verification: %.2f GB/s of buffer, %.1f ms per step (included in apply; SPARROW_VERIFY_BASE=0 "
           "turns it off)\n", m.verify_gbps, 1e3 * t.verify_s / o.steps);
  else
    printf("base verification: off (SPARROW_VERIFY_BASE=0)\n");
  printf("value codecs, encode + decode per value (calibrated):");
  for (int k = 0; k < format::kNumValueCodecs; ++k)
    printf(" %s %.2f ns", format::value_codec_name(format::ValueCodec(k)), 1e9 * format::value_codec_cpu_s(format::ValueCodec(k), 2));
  printf("\n");
  if (o.link_mbit > 0)
    printf("at %.0f Mbit/s (value codecs chosen by %s): wire %.1f ms + encode %.1f ms + apply %.1f ms = %.1f ms per step\n",
           o.link_mbit, o.by_time ? "estimated time" : "bytes", 1e3 * m.link_s, 1e3 * t.encode_wall / o.steps,
           1e3 * t.apply_s / o.steps, 1e3 * m.step_at_link_s);
  printf("bit-exact: %s\n", m.exact ? "yes" : "NO");
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  Opts o;
  if (int rc = parse_opts(argc, argv, o); rc >= 0) return rc;
  FILE* log = o.json ? stderr : stdout;
  auto gr = gen::UpdateGenerator::create(o.go);
  if (!gr.ok()) {
    fprintf(stderr, "sparrow-codec-bench: %s\n", gr.status().to_string().c_str());
    return 2;
  }
  auto& g = *gr.value();
  fprintf(log, "# model %s, %lld layers, vocab %lld: %zu tensors, %.1f M bf16 elements (%.2f GB dense)\n",
          g.config().name.c_str(), (long long)(o.go.layers ? o.go.layers : g.config().layers), (long long)o.go.vocab,
          g.tensors().size(), g.elements() / 1e6, g.bytes() / 1e9);
  fprintf(log, "# measuring single-core read bandwidth...\n");
  const double read_bw = read_bandwidth_gbps(size_t(512) << 20);

  DeltaEncoder enc(g.tensors());
  ReceiverState st;
  std::vector<std::vector<uint8_t>> recv;
  std::vector<void*> dst;
  for (auto& t : g.tensors()) recv.emplace_back(t.bytes());
  for (auto& r : recv) dst.push_back(r.data());
  EncodeStats fs;
  auto first = enc.encode(g.buffers(), o.eo, &fs);
  if (!first.ok() || !apply_checkpoint(first.value(), dst, g.tensors(), st, o.ao).ok()) {
    fprintf(stderr, "sparrow-codec-bench: first version failed\n");
    return 1;
  }
  fprintf(log, "# version 1 (full snapshot): %.1f MB on the wire\n", fs.wire_bytes / 1e6);
  if (!o.json) print_header_row();
  Sums t;
  for (int s = 1; s <= o.steps; ++s) {
    g.step();
    EncodeStats es;
    auto ck = enc.encode(g.buffers(), o.eo, &es);
    if (!ck.ok()) {
      fprintf(stderr, "sparrow-codec-bench: encode: %s\n", ck.status().to_string().c_str());
      return 1;
    }
    ApplyStats as;
    Status a = apply_checkpoint(ck.value(), dst, g.tensors(), st, o.ao, &as);
    if (!a.ok()) {
      fprintf(stderr, "sparrow-codec-bench: apply: %s\n", a.to_string().c_str());
      return 1;
    }
    t.add(es, as);
    if (!o.json) print_step_row(s, es, as);
  }
  bool exact = true;
  auto src = g.buffers();
  for (size_t i = 0; i < recv.size(); ++i) exact &= memcmp(recv[i].data(), src[i], recv[i].size()) == 0;
  const Summary m = summarize(t, o, read_bw, exact);
  if (o.json) print_json(o, g, t, m);
  else print_table(o, t, m);
  return exact ? 0 : 1;
}
