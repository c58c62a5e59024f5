// sparrow-gpu-bench: GPU extraction and block-sum throughput against the device's own copy bandwidth
// (same run), and the stages of a sparse step on device buffers (encode: device extraction + host
// coding; apply: base verification, decoding, writes to device memory) against the time the step's
// bytes take on a 10 Gbit/s link, for the first delta and for the steady state.
//
//   sparrow-gpu-bench [--gib 2] [--density 0.01] [--reps 5]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/args.h"
#include "core/parallel.h"
#include "kernels/cpu/delta.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/no_device.h"
#include "kernels/device.h"

using namespace sparrow;

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = cudaError_t(x);                                               \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_));              \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

static void usage() {
  printf("usage: sparrow-gpu-bench [--gib G] [--density D] [--reps N]\n"
         "  GPU extraction and block-sum bandwidth vs the device copy bandwidth, and the GPU stages of one\n"
         "  sparse step (encode, then apply with base verification) vs its time on a 10 Gbit/s link.\n"
         "  --gib G      buffer size in GiB of bf16 (0.001..64, default 2)\n"
         "  --density D  fraction of elements changed (0.0001..1, default 0.01)\n"
         "  --reps N     timed repetitions of each kernel, best kept (1..1000, default 5)\n");
}

// One sparse step through the codec, timed: encode of the trainer's device buffer, apply onto a
// receiver's device buffer (base verification included); bit-exact against `want`.
static bool timed_step(const char* label, kernels::cpu::DeltaEncoder& enc, const void* src, void* dst,
                       const std::vector<kernels::cpu::TensorSpec>& layout, kernels::cpu::ReceiverState& rs,
                       const std::vector<uint16_t>& want) {
  const size_t bytes = want.size() * 2;
  kernels::cpu::EncodeStats es;
  const void* srcs[] = {src};
  void* dsts[] = {dst};
  double t0 = now_s();
  auto delta = enc.encode(srcs, {}, &es);
  double t1 = now_s();
  if (!delta.ok()) return fprintf(stderr, "%s\n", delta.status().to_string().c_str()), false;
  kernels::cpu::ApplyStats as;
  auto a = kernels::cpu::apply_checkpoint(delta.value(), dsts, layout, rs, {}, &as);
  double t2 = now_s();
  if (!a.ok()) return fprintf(stderr, "%s\n", a.to_string().c_str()), false;
  const double wire_s = es.wire_bytes * 8.0 / 10e9;
  printf("%s: %llu changes, %.2f MB on the wire (%.1fx), %.1f ms on a 10 Gbit/s link\n", label,
         (unsigned long long)es.changes, es.wire_bytes / 1e6, double(es.dense_bytes) / double(es.wire_bytes), wire_s * 1e3);
  printf("  encode (device extraction + host coding): %.1f ms = %.2f x wire time (%d threads: extraction %.1f, coding %.1f "
         "thread-ms)\n",
         (t1 - t0) * 1e3, (t1 - t0) / wire_s, kernel_threads(), es.extract_seconds * 1e3, es.encode_seconds * 1e3);
  printf("  apply onto device memory:                  %.1f ms = %.2f x wire time (verify %.1f, decode %.1f, write %.1f ms)\n",
         (t2 - t1) * 1e3, (t2 - t1) / wire_s, as.verify_seconds * 1e3, as.decode_seconds * 1e3, as.write_seconds * 1e3);
  std::vector<uint16_t> check(want.size());
  if (cudaMemcpy(check.data(), dst, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  const bool exact = memcmp(check.data(), want.data(), bytes) == 0;
  printf("  bit-exact: %s\n", exact ? "yes" : "NO");
  return exact;
}

// Version 1 everywhere, then two deltas: the first allocates the encoder's pinned room for the
// changes, the second is the steady state of a training run.
static int measure_steps(size_t n, size_t bytes, void* trainer, const void* next, const std::vector<uint16_t>& h_old,
                         const std::vector<uint16_t>& h_new) {
  if (!kernels::device_ops()) {
    printf("libsparrow_cuda not loadable (%s): skipping the end-to-end stage\n", kernels::device_unavailable_reason().c_str());
    return 0;
  }
  std::vector<kernels::cpu::TensorSpec> layout = {{"w", 9, n}};
  kernels::cpu::DeltaEncoder enc(layout);
  void* target;
  CK(cudaMalloc(&target, bytes));
  const void* src[] = {trainer};
  void* dst[] = {target};
  kernels::cpu::ReceiverState rs;
  auto full = enc.encode(src);
  if (!full.ok()) return fprintf(stderr, "%s\n", full.status().to_string().c_str()), 1;
  if (auto a = kernels::cpu::apply_checkpoint(full.value(), dst, layout, rs); !a.ok())
    return fprintf(stderr, "%s\n", a.to_string().c_str()), 1;
  CK(cudaMemcpy(trainer, next, bytes, cudaMemcpyDeviceToDevice));  // version 2
  if (!timed_step("first sparse step through the codec", enc, trainer, target, layout, rs, h_new)) return 1;
  CK(cudaMemcpy(trainer, h_old.data(), bytes, cudaMemcpyHostToDevice));  // version 3: the same elements change back
  if (!timed_step("next sparse step (steady state)", enc, trainer, target, layout, rs, h_old)) return 1;
  return 0;
}

// The buffers and the stream the kernel measurements share: the old version, the new one (`cur`,
// every (1/density)-th element changed) and the shadow, on the device; the same two on the host.
struct Setup {
  size_t n = 0, bytes = 0;
  uint32_t es = 2;  // bf16
  int reps = 5;
  void *cur = nullptr, *shadow = nullptr, *old = nullptr;
  std::vector<uint16_t> h_old, h_new;
  cudaStream_t st;
  cudaEvent_t e0, e1;
};

// Parses the command line; -1 to go on, or the exit status.
static int parse_args(int argc, char** argv, double* gib, double* density, int* reps) {
  const char* P = "sparrow-gpu-bench";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(), 0;
    if (a != "--gib" && a != "--density" && a != "--reps") {
      fprintf(stderr, "%s: unknown argument '%s'\n", P, a.c_str());
      return usage(), args::kUsage;
    }
    const char* v = i + 1 < argc ? argv[++i] : nullptr;
    if (a == "--gib") *gib = args::number(P, "--gib", v, 0.001, 64);
    else if (a == "--density") *density = args::number(P, "--density", v, 1e-4, 1);
    else *reps = int(args::integer(P, "--reps", v, 1, 1000));
  }
  return -1;
}

static int make_setup(double gib, double density, Setup& s) {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  s.n = size_t(gib * (1ull << 30)) / s.es;
  s.bytes = s.n * s.es;
  printf("device: %s, buffer %.2f GiB bf16 (%zu elements), density %.3g\n", prop.name, s.bytes / double(1ull << 30), s.n,
         density);
  CK(cudaMalloc(&s.cur, s.bytes));
  CK(cudaMalloc(&s.shadow, s.bytes));
  CK(cudaMalloc(&s.old, s.bytes));
  // One step: the old version, and the new one with every (1/density)-th element changed.
  s.h_old.resize(s.n);
  uint64_t r = 1;
  for (auto& x : s.h_old) x = uint16_t((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 48);
  s.h_new = s.h_old;
  const size_t stride = std::max<size_t>(1, size_t(1.0 / density));
  for (size_t i = 0; i < s.n; i += stride) s.h_new[i] ^= 1;
  CK(cudaMemcpy(s.old, s.h_old.data(), s.bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(s.cur, s.h_new.data(), s.bytes, cudaMemcpyHostToDevice));
  CK(cudaStreamCreate(&s.st));
  cudaEventCreate(&s.e0);
  cudaEventCreate(&s.e1);
  return 0;
}

// The best of s.reps timings (seconds) of what `body` enqueues on the stream; `before` runs first
// each time, untimed. Both return 0, or 1 after printing a CUDA failure.
template <typename Before, typename Body>
static int best_time(const Setup& s, Before before, Body body, double* best) {
  *best = 1e30;
  for (int r = 0; r < s.reps; ++r) {
    if (before()) return 1;
    cudaEventRecord(s.e0, s.st);
    if (body()) return 1;
    cudaEventRecord(s.e1, s.st);
    CK(cudaEventSynchronize(s.e1));
    float ms = 0;
    cudaEventElapsedTime(&ms, s.e0, s.e1);
    *best = std::min(*best, double(ms) / 1e3);
  }
  return 0;
}

// Resets the shadow to the old version (the state before a step's extraction).
static int reset_shadow(const Setup& s) {
  CK(cudaMemcpy(s.shadow, s.old, s.bytes, cudaMemcpyDeviceToDevice));
  return 0;
}

// Copy bandwidth: a D2D copy reads and writes `bytes`.
static int measure_copy(const Setup& s, double* copy_bw) {
  double best = 0;
  if (best_time(s, [] { return 0; }, [&] {
        CK(cudaMemcpyAsync(s.shadow, s.old, s.bytes, cudaMemcpyDeviceToDevice, s.st));
        return 0;
      }, &best))
    return 1;
  *copy_bw = 2.0 * s.bytes / best / 1e9;
  printf("device copy: %.1f GB/s (read+write)\n", *copy_bw);
  return 0;
}

// Extraction chunk by chunk (CUB select, 16 M elements per call): reads 2 x `bytes`, writes only the
// changes.
static int measure_chunk_extraction(const Setup& s, double copy_bw) {
  const uint32_t chunk = 1u << 24;
  size_t sb = 0;
  CK(kernels::cuda::extract_scratch_bytes(chunk, s.es, &sb));
  void *scratch, *pos, *ov, *nv, *cnt;
  CK(cudaMalloc(&scratch, sb));
  CK(cudaMalloc(&pos, size_t(chunk) * 4));
  CK(cudaMalloc(&ov, size_t(chunk) * s.es));
  CK(cudaMalloc(&nv, size_t(chunk) * s.es));
  CK(cudaMalloc(&cnt, 4));
  double best = 0;
  if (best_time(s, [&] { return reset_shadow(s); }, [&] {
        for (size_t off = 0; off < s.n; off += chunk) {
          uint32_t m = uint32_t(std::min<size_t>(chunk, s.n - off));
          CK(kernels::cuda::extract(static_cast<char*>(s.cur) + off * s.es, static_cast<char*>(s.shadow) + off * s.es, m,
                                    s.es, static_cast<uint32_t*>(pos), ov, nv, static_cast<uint32_t*>(cnt), scratch, sb, s.st));
        }
        return 0;
      }, &best))
    return 1;
  const double ex_bw = 2.0 * s.bytes / best / 1e9;
  printf("chunk extraction (CUB select, 16 M elements per call): %.1f GB/s read (%.2f x the copy bandwidth), %.2f ms for %.2f GiB\n",
         ex_bw, ex_bw / copy_bw, best * 1e3, s.bytes / double(1ull << 30));
  return 0;
}

// Whole-buffer extraction, what the encoder runs on a delta's device tensor: count, then collect,
// in 1 M-element chunks (two passes over cur and the shadow).
static int measure_whole_extraction(const Setup& s, double copy_bw) {
  const uint32_t ce = 1u << 20;
  const uint64_t nchunks = (s.n + ce - 1) / ce;
  size_t csb = 0;
  CK(kernels::cuda::changes_scratch_bytes(s.n, ce, &csb));
  void *cscratch, *offs;
  CK(cudaMalloc(&cscratch, csb));
  CK(cudaMalloc(&offs, (nchunks + 1) * 8));
  if (reset_shadow(s)) return 1;
  CK(kernels::cuda::count_changes(s.cur, s.shadow, s.n, s.es, ce, static_cast<uint64_t*>(offs), cscratch, csb, s.st));
  uint64_t total = 0;
  CK(cudaMemcpy(&total, static_cast<uint64_t*>(offs) + nchunks, 8, cudaMemcpyDeviceToHost));
  void *cpos, *cold, *cnew;
  CK(cudaMalloc(&cpos, total * 4 + 4));
  CK(cudaMalloc(&cold, total * s.es + 4));
  CK(cudaMalloc(&cnew, total * s.es + 4));
  double best = 0;
  if (best_time(s, [&] { return reset_shadow(s); }, [&] {
        CK(kernels::cuda::count_changes(s.cur, s.shadow, s.n, s.es, ce, static_cast<uint64_t*>(offs), cscratch, csb, s.st));
        CK(kernels::cuda::collect_changes(s.cur, s.shadow, s.n, s.es, ce, static_cast<uint32_t*>(cpos), cold, cnew, cscratch,
                                          csb, s.st));
        return 0;
      }, &best))
    return 1;
  const double cc_bw = 2.0 * s.bytes / best / 1e9;
  printf("whole-buffer extraction (count + collect): %.1f GB/s of buffer pair (%.2f x the copy bandwidth), %.2f ms, "
         "%llu changes\n",
         cc_bw, cc_bw / copy_bw, best * 1e3, (unsigned long long)total);
  return 0;
}

// Base verification's read: the block sums of the whole buffer (1 M-element blocks), read once.
static int measure_block_sums(const Setup& s, double copy_bw) {
  const uint64_t block_bytes = uint64_t(1) << 21;
  uint32_t* sums;
  CK(cudaMalloc(&sums, (s.bytes / block_bytes + 1) * 8));
  double best = 0;
  if (best_time(s, [] { return 0; }, [&] {
        CK(kernels::cuda::block_sums(s.cur, s.bytes, block_bytes, sums, s.st));
        return 0;
      }, &best))
    return 1;
  const double sum_bw = s.bytes / best / 1e9;
  printf("block sums:  %.1f GB/s read (%.2f x the copy bandwidth), %.2f ms for %.2f GiB\n", sum_bw, sum_bw / copy_bw,
         best * 1e3, s.bytes / double(1ull << 30));
  return 0;
}

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  double gib = 2, density = 0.01;
  int reps = 5;
  if (int rc = parse_args(argc, argv, &gib, &density, &reps); rc >= 0) return rc;
  int ndev = 0;
  if (cudaError_t e = cudaGetDeviceCount(&ndev); e != cudaSuccess || ndev == 0) {
    fprintf(stderr, "sparrow-gpu-bench: no usable GPU (%s): nothing measured\n",
            sparrow::kernels::cuda::no_device_reason(e));
    return 1;
  }
  Setup s;
  s.reps = reps;
  if (make_setup(gib, density, s)) return 1;
  double copy_bw = 0;
  if (measure_copy(s, &copy_bw) || measure_chunk_extraction(s, copy_bw) || measure_whole_extraction(s, copy_bw) ||
      measure_block_sums(s, copy_bw))
    return 1;
  // The full GPU path of one step through the codec (device extraction, host coding), then apply.
  return measure_steps(s.n, s.bytes, s.old, s.cur, s.h_old, s.h_new);
}
