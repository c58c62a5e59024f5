// sparrow-gpu-bench: GPU extraction throughput against the device's own copy bandwidth (same run),
// and the GPU stages of a sparse step (device extraction + host coding, then apply onto device
// memory) against the time the step's bytes take on a 10 Gbit/s link.
//
//   sparrow-gpu-bench [--gib 2] [--density 0.01] [--reps 5]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/delta.h"
#include "kernels/cuda/kernels.h"
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
         "  GPU extraction bandwidth vs device copy bandwidth, and GPU stage time vs 10 Gbit/s wire time.\n");
}

int main(int argc, char** argv) {
  double gib = 2, density = 0.01;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--gib" || a == "--density" || a == "--reps") && i + 1 < argc) {
      double v = atof(argv[++i]);
      if (a == "--gib") gib = v;
      else if (a == "--density") density = v;
      else reps = int(v);
    } else {
      usage();
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no usable CUDA device: nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const uint32_t es = 2;  // bf16
  const size_t n = size_t(gib * (1ull << 30)) / es;
  const size_t bytes = n * es;
  printf("device: %s, buffer %.2f GiB bf16 (%zu elements), density %.3g\n", prop.name, bytes / double(1ull << 30), n,
         density);
  void *cur, *shadow, *old;
  CK(cudaMalloc(&cur, bytes));
  CK(cudaMalloc(&shadow, bytes));
  CK(cudaMalloc(&old, bytes));
  // One step: the old version, and the new one with every (1/density)-th element changed.
  std::vector<uint16_t> h_old(n), h_new;
  uint64_t s = 1;
  for (auto& x : h_old) x = uint16_t((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 48);
  h_new = h_old;
  const size_t stride = std::max<size_t>(1, size_t(1.0 / density));
  for (size_t i = 0; i < n; i += stride) h_new[i] ^= 1;
  CK(cudaMemcpy(old, h_old.data(), bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(cur, h_new.data(), bytes, cudaMemcpyHostToDevice));

  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float ms = 0;
  // Copy bandwidth: a D2D copy reads and writes `bytes`; extraction reads 2 x `bytes` (and writes
  // only the changes).
  double best_copy = 1e30;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(e0, st);
    CK(cudaMemcpyAsync(shadow, old, bytes, cudaMemcpyDeviceToDevice, st));
    cudaEventRecord(e1, st);
    CK(cudaEventSynchronize(e1));
    cudaEventElapsedTime(&ms, e0, e1);
    best_copy = std::min(best_copy, ms / 1e3);
  }
  const uint32_t chunk = 1u << 24;  // 16 M elements per kernel call
  size_t sb = 0;
  CK(kernels::cuda::extract_scratch_bytes(chunk, es, &sb));
  void *scratch, *pos, *ov, *nv, *cnt;
  CK(cudaMalloc(&scratch, sb));
  CK(cudaMalloc(&pos, size_t(chunk) * 4));
  CK(cudaMalloc(&ov, size_t(chunk) * es));
  CK(cudaMalloc(&nv, size_t(chunk) * es));
  CK(cudaMalloc(&cnt, 4));
  double best_ex = 1e30;
  for (int r = 0; r < reps; ++r) {
    CK(cudaMemcpy(shadow, old, bytes, cudaMemcpyDeviceToDevice));  // the shadow holds the old version
    cudaEventRecord(e0, st);
    for (size_t off = 0; off < n; off += chunk) {
      uint32_t m = uint32_t(std::min<size_t>(chunk, n - off));
      CK(kernels::cuda::extract(static_cast<char*>(cur) + off * es, static_cast<char*>(shadow) + off * es, m, es,
                                static_cast<uint32_t*>(pos), ov, nv, static_cast<uint32_t*>(cnt), scratch, sb, st));
    }
    cudaEventRecord(e1, st);
    CK(cudaEventSynchronize(e1));
    cudaEventElapsedTime(&ms, e0, e1);
    best_ex = std::min(best_ex, ms / 1e3);
  }
  const double copy_bw = 2.0 * bytes / best_copy / 1e9, ex_bw = 2.0 * bytes / best_ex / 1e9;
  printf("device copy: %.1f GB/s (read+write)\n", copy_bw);
  printf("extraction:  %.1f GB/s read (%.2f x the copy bandwidth), %.2f ms for %.2f GiB\n", ex_bw, ex_bw / copy_bw,
         best_ex * 1e3, bytes / double(1ull << 30));

  // The full GPU path of one step through the codec (device extraction, host coding), then apply.
  auto* ops = kernels::device_ops();
  if (!ops) {
    printf("libsparrow_cuda not loadable (%s): skipping the end-to-end stage\n", kernels::device_unavailable_reason().c_str());
    return 0;
  }
  std::vector<kernels::cpu::TensorSpec> layout = {{"w", 9, n}};
  kernels::cpu::DeltaEncoder enc(layout);
  void* target;
  CK(cudaMalloc(&target, bytes));
  const void* src[] = {old};
  void* dst[] = {target};
  kernels::cpu::ReceiverState rs;
  auto full = enc.encode(src);  // version 1 everywhere
  if (!full.ok()) return fprintf(stderr, "%s\n", full.status().to_string().c_str()), 1;
  if (auto a = kernels::cpu::apply_checkpoint(full.value(), dst, layout, rs); !a.ok())
    return fprintf(stderr, "%s\n", a.to_string().c_str()), 1;
  CK(cudaMemcpy(old, cur, bytes, cudaMemcpyDeviceToDevice));  // the trainer's buffer now holds version 2
  kernels::cpu::EncodeStats es_;
  double t0 = now_s();
  auto delta = enc.encode(src, {}, &es_);
  double t1 = now_s();
  if (!delta.ok()) return fprintf(stderr, "%s\n", delta.status().to_string().c_str()), 1;
  kernels::cpu::ApplyStats as;
  auto a = kernels::cpu::apply_checkpoint(delta.value(), dst, layout, rs, {}, &as);
  double t2 = now_s();
  if (!a.ok()) return fprintf(stderr, "%s\n", a.to_string().c_str()), 1;
  const double wire_s = es_.wire_bytes * 8.0 / 10e9;
  printf("sparse step through the codec: %llu changes, %.2f MB on the wire (%.1fx), %.1f ms on a 10 Gbit/s link\n",
         (unsigned long long)es_.changes, es_.wire_bytes / 1e6, double(es_.dense_bytes) / double(es_.wire_bytes),
         wire_s * 1e3);
  printf("  encode (device extraction + host coding): %.1f ms = %.2f x wire time\n", (t1 - t0) * 1e3, (t1 - t0) / wire_s);
  printf("  apply onto device memory:                  %.1f ms = %.2f x wire time\n", (t2 - t1) * 1e3, (t2 - t1) / wire_s);
  std::vector<uint16_t> check(n);
  CK(cudaMemcpy(check.data(), target, bytes, cudaMemcpyDeviceToHost));
  const bool exact = memcmp(check.data(), h_new.data(), bytes) == 0;
  printf("  bit-exact: %s\n", exact ? "yes" : "NO");
  return exact ? 0 : 1;
}
