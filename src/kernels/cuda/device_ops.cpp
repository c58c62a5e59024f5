// The CUDA implementation of kernels::DeviceOps, built into libsparrow_cuda.so and loaded by
// libsparrow with dlopen (src/kernels/device.cpp). Each calling thread gets its own stream and its
// own device/pinned scratch, grown on demand and kept for the thread's life, so the encoder's workers
// extract their chunks concurrently.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/no_device.h"
#include "kernels/device.h"

namespace sparrow::kernels::cuda {
namespace {

#define CK(x)                         \
  do {                                \
    cudaError_t e_ = (x);             \
    if (e_ != cudaSuccess) return int(e_); \
  } while (0)

// Per-thread resources for one device.
struct Ctx {
  int device = -1;
  cudaStream_t stream = nullptr;
  void* d = nullptr;   // device scratch: positions, old values, new values, count, CUB temp
  size_t d_bytes = 0;
  void* h = nullptr;   // pinned host staging of the same layout
  size_t h_bytes = 0;
  void* out = nullptr;  // device room for a whole buffer's changes (extract_chunks)
  size_t out_bytes = 0;
  ~Ctx() { release(); }  // at thread exit; errors are irrelevant then (the runtime may be shutting down)
  void release() {
    if (device < 0) return;
    cudaSetDevice(device);
    if (d) cudaFree(d);
    if (h) cudaFreeHost(h);
    if (out) cudaFree(out);
    if (stream) cudaStreamDestroy(stream);
    d = h = out = nullptr;
    d_bytes = h_bytes = out_bytes = 0;
    stream = nullptr;
    device = -1;
  }
  int use(int dev) {
    if (device != dev) {
      release();
      device = dev;
      CK(cudaSetDevice(dev));
      CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    } else {
      CK(cudaSetDevice(dev));
    }
    return 0;
  }
  int reserve(size_t dev_bytes, size_t host_bytes) {
    if (dev_bytes > d_bytes) {
      if (d) CK(cudaFree(d));
      d = nullptr;
      d_bytes = 0;
      CK(cudaMalloc(&d, dev_bytes));
      d_bytes = dev_bytes;
    }
    if (host_bytes > h_bytes) {
      if (h) CK(cudaFreeHost(h));
      h = nullptr;
      h_bytes = 0;
      CK(cudaMallocHost(&h, host_bytes));
      h_bytes = host_bytes;
    }
    return 0;
  }
  int reserve_out(size_t bytes) {
    if (bytes <= out_bytes) return 0;
    if (out) CK(cudaFree(out));
    out = nullptr;
    out_bytes = 0;
    CK(cudaMalloc(&out, bytes));
    out_bytes = bytes;
    return 0;
  }
};
thread_local Ctx t_ctx;

inline size_t up(size_t x) { return (x + 255) & ~size_t(255); }

int device_of(const void* p, int* dev) {
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return int(e);
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
    *dev = a.device;
    return 0;
  }
  return cudaGetDevice(dev);  // host memory: the calling thread's device
}

class CudaOps final : public DeviceOps {
 public:
  const char* name() const override { return name_.c_str(); }
  std::string error_string(int err) const override {
    return std::string(cudaGetErrorName(cudaError_t(err))) + " (" + cudaGetErrorString(cudaError_t(err)) + ")";
  }
  bool is_device(const void* p) const override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  int sync_stream(void* stream) override { return int(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }
  int alloc(void** p, size_t bytes, bool host) override {
    if (host) return int(cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable | cudaHostAllocMapped));
    return int(cudaMalloc(p, bytes ? bytes : 1));
  }
  void free(void* p, bool host) override {
    if (host) cudaFreeHost(p);
    else cudaFree(p);
  }
  int copy(void* dst, const void* src, size_t bytes) override {
    int dev = 0;
    if (device_of(is_device(dst) ? dst : src, &dev)) return int(cudaErrorInvalidValue);
    CK(cudaError_t(t_ctx.use(dev)));
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, t_ctx.stream));
    return int(cudaStreamSynchronize(t_ctx.stream));
  }
  int extract(const void* cur, void* shadow, uint32_t n, uint32_t s, uint32_t* pos, uint8_t* old_vals, uint8_t* new_vals,
              size_t* changes) override {
    int dev = 0;
    if (int e = device_of(cur, &dev)) return e;
    Ctx& c = t_ctx;
    CK(cudaError_t(c.use(dev)));
    size_t temp = 0;
    CK(cudaError_t(extract_scratch_bytes(n, s, &temp)));
    const size_t o_pos = 0, o_old = up(size_t(n) * 4), o_new = o_old + up(size_t(n) * s), o_cnt = o_new + up(size_t(n) * s),
                 o_tmp = o_cnt + 256;
    const size_t host_bytes = o_cnt + 256;  // positions, values, count
    CK(cudaError_t(c.reserve(o_tmp + temp, host_bytes)));
    auto* d = static_cast<char*>(c.d);
    auto* h = static_cast<char*>(c.h);
    auto* dcount = reinterpret_cast<uint32_t*>(d + o_cnt);
    CK(cudaError_t(cuda::extract(cur, shadow, n, s, reinterpret_cast<uint32_t*>(d + o_pos), d + o_old, d + o_new, dcount,
                                 d + o_tmp, temp, c.stream)));
    CK(cudaMemcpyAsync(h + o_cnt, dcount, sizeof(uint32_t), cudaMemcpyDeviceToHost, c.stream));
    CK(cudaStreamSynchronize(c.stream));
    uint32_t k = 0;
    memcpy(&k, h + o_cnt, sizeof k);
    if (k > n) return int(cudaErrorIllegalState);
    if (k) {
      CK(cudaMemcpyAsync(h + o_pos, d + o_pos, size_t(k) * 4, cudaMemcpyDeviceToHost, c.stream));
      CK(cudaMemcpyAsync(h + o_old, d + o_old, size_t(k) * s, cudaMemcpyDeviceToHost, c.stream));
      CK(cudaMemcpyAsync(h + o_new, d + o_new, size_t(k) * s, cudaMemcpyDeviceToHost, c.stream));
      CK(cudaStreamSynchronize(c.stream));
      memcpy(pos, h + o_pos, size_t(k) * 4);
      memcpy(old_vals, h + o_old, size_t(k) * s);
      memcpy(new_vals, h + o_new, size_t(k) * s);
    }
    *changes = k;
    return 0;
  }
  int extract_chunks(const void* cur, void* shadow, uint64_t n, uint32_t s, uint32_t ce, uint64_t* chunk_offsets,
                     uint32_t* pos, uint8_t* old_vals, uint8_t* new_vals, uint64_t capacity) override {
    if (!ce) return int(cudaErrorInvalidValue);
    const uint64_t nchunks = (n + ce - 1) / ce;
    int dev = 0;
    if (int e = device_of(cur, &dev)) return e;
    Ctx& c = t_ctx;
    CK(cudaError_t(c.use(dev)));
    size_t temp = 0;
    CK(cudaError_t(changes_scratch_bytes(n, ce, &temp)));
    const size_t o_offs = up(temp), offs_bytes = (nchunks + 1) * 8;
    CK(cudaError_t(c.reserve(o_offs + offs_bytes, offs_bytes)));
    auto* d = static_cast<char*>(c.d);
    CK(cudaError_t(count_changes(cur, shadow, n, s, ce, reinterpret_cast<uint64_t*>(d + o_offs), d, temp, c.stream)));
    CK(cudaMemcpyAsync(c.h, d + o_offs, offs_bytes, cudaMemcpyDeviceToHost, c.stream));
    CK(cudaStreamSynchronize(c.stream));
    memcpy(chunk_offsets, c.h, offs_bytes);
    const uint64_t total = chunk_offsets[nchunks];
    if (total == 0 || total > capacity) return 0;
    const size_t o_old = up(total * 4), o_new = o_old + up(total * s);
    CK(cudaError_t(c.reserve_out(o_new + up(total * s))));
    auto* o = static_cast<char*>(c.out);
    CK(cudaError_t(collect_changes(cur, shadow, n, s, ce, reinterpret_cast<uint32_t*>(o), o + o_old, o + o_new, d, temp,
                                   c.stream)));
    CK(cudaMemcpyAsync(pos, o, total * 4, cudaMemcpyDeviceToHost, c.stream));
    CK(cudaMemcpyAsync(old_vals, o + o_old, total * s, cudaMemcpyDeviceToHost, c.stream));
    CK(cudaMemcpyAsync(new_vals, o + o_new, total * s, cudaMemcpyDeviceToHost, c.stream));
    return int(cudaStreamSynchronize(c.stream));
  }
  int block_sums(const void* base, size_t bytes, size_t block_bytes, uint64_t* out) override {
    if (!block_bytes) return int(cudaErrorInvalidValue);
    const size_t nb = (bytes + block_bytes - 1) / block_bytes;
    if (!nb) return 0;
    int dev = 0;
    if (int e = device_of(base, &dev)) return e;
    Ctx& c = t_ctx;
    CK(cudaError_t(c.use(dev)));
    CK(cudaError_t(c.reserve(nb * 8, nb * 8)));
    CK(cudaError_t(cuda::block_sums(base, bytes, block_bytes, static_cast<uint32_t*>(c.d), c.stream)));
    CK(cudaMemcpyAsync(c.h, c.d, nb * 8, cudaMemcpyDeviceToHost, c.stream));
    CK(cudaStreamSynchronize(c.stream));
    const auto* lanes = static_cast<const uint32_t*>(c.h);
    for (size_t b = 0; b < nb; ++b) out[b] = (uint64_t(lanes[2 * b]) << 32) | lanes[2 * b + 1];
    return 0;
  }
  int gather(const void* base, const uint32_t* pos, size_t k, uint32_t s, uint8_t* out) override {
    if (!k) return 0;
    Staging g;
    CK(cudaError_t(stage(base, pos, k, s, nullptr, g)));
    CK(cudaError_t(cuda::gather(base, g.dpos, uint32_t(k), s, g.dval, g.c->stream)));
    CK(cudaMemcpyAsync(g.hval, g.dval, k * s, cudaMemcpyDeviceToHost, g.c->stream));
    CK(cudaStreamSynchronize(g.c->stream));
    memcpy(out, g.hval, k * s);
    return 0;
  }
  int scatter(void* base, const uint32_t* pos, size_t k, uint32_t s, const uint8_t* vals) override {
    if (!k) return 0;
    Staging g;
    CK(cudaError_t(stage(base, pos, k, s, vals, g)));
    CK(cudaError_t(cuda::scatter(base, g.dpos, uint32_t(k), s, g.dval, g.c->stream)));
    return int(cudaStreamSynchronize(g.c->stream));
  }

  std::string pci_bus_id() const override {
    int dev = 0;
    char id[32] = {0};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(id, int(sizeof id), dev) != cudaSuccess) {
      cudaGetLastError();
      return "";
    }
    return id;
  }

  // The calling thread's context for `base`'s device, with k positions (and values, if given) copied
  // to device scratch through pinned staging.
  struct Staging {
    Ctx* c = nullptr;
    uint32_t* dpos = nullptr;
    char* dval = nullptr;
    char* hval = nullptr;
  };
  int stage(const void* base, const uint32_t* pos, size_t k, uint32_t s, const uint8_t* vals, Staging& g) {
    int dev = 0;
    if (int e = device_of(base, &dev)) return e;
    Ctx& c = t_ctx;
    CK(cudaError_t(c.use(dev)));
    const size_t o_val = up(k * 4), total = o_val + up(k * s);
    CK(cudaError_t(c.reserve(total, total)));
    auto* d = static_cast<char*>(c.d);
    auto* h = static_cast<char*>(c.h);
    memcpy(h, pos, k * 4);
    if (vals) memcpy(h + o_val, vals, k * s);
    CK(cudaMemcpyAsync(d, h, vals ? total : k * 4, cudaMemcpyHostToDevice, c.stream));
    g = Staging{&c, reinterpret_cast<uint32_t*>(d), d + o_val, h + o_val};
    return 0;
  }

  std::string name_;
};

}  // namespace
}  // namespace sparrow::kernels::cuda

// The entry point libsparrow looks up with dlsym. Null (and a reason) when CUDA cannot be used here.
extern "C" __attribute__((visibility("default"))) sparrow::kernels::DeviceOps* sparrow_cuda_device_ops_v3(char* why,
                                                                                                         size_t why_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    snprintf(why, why_len, "%s", sparrow::kernels::cuda::no_device_reason(e));
    cudaGetLastError();
    return nullptr;
  }
  static sparrow::kernels::cuda::CudaOps ops;
  cudaDeviceProp p{};
  int dev = 0;
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&p, dev);
  ops.name_ = std::string("cuda (") + std::to_string(n) + " device(s), " + p.name + ")";
  return &ops;
}
